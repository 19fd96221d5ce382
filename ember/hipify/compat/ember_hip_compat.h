// ember_hip_compat.h - portable versions of CUDA device intrinsics that HIP does not provide.
//
// Shipped by ember; `ember hipify` renames each call of such an intrinsic to the `ember_` function of the same name
// without its leading underscores (__vsub4 -> ember_vsub4, __dp4a -> ember_dp4a) and includes this header.
//
// Covered: the CUDA Math API's SIMD intrinsics on `unsigned int` (2 x 16-bit and 4 x 8-bit lanes) and the integer
// dot products __dp4a, __dp2a_lo and __dp2a_hi (int and unsigned int overloads; not the char4/short2 ones).
// Every function has the CUDA signature and returns, for every input, the value the CUDA intrinsic returns.
//
// Conventions of the CUDA functions, kept here:
//  * lane 0 is the least significant byte / halfword; "signed" functions read lanes as two's complement, but
//    still take and return `unsigned int`;
//  * results without saturation wrap to the lane width (|-128| is 0x80 in a byte lane);
//  * __vcmp* set a lane to all ones (0xff / 0xffff) where the comparison holds, __vset* set it to 1;
//  * __vavgs* round the average half away from zero, __vavgu* round it up, __vhaddu* truncate;
//  * __vsad* return the plain sum of the lanes' absolute differences.
//
// The code is plain integer C++ (no inline assembly, no builtins): lanes are widened to `int` (at most 17 bits
// are ever needed, so nothing overflows), and words are assembled in `unsigned int`. No signed overflow, no shift
// of a negative value. Compiles as host C++ (g++/clang++ -std=c++11 or later), as CUDA (nvcc) and as HIP.

#pragma once

#if defined(__HIPCC__) || defined(__HIP__)
#include <hip/hip_runtime.h>
#endif

#ifndef EMBER_COMPAT_HD
#if defined(__HIPCC__) || defined(__HIP__) || defined(__CUDACC__)
#define EMBER_COMPAT_HD __host__ __device__
#else
#define EMBER_COMPAT_HD
#endif
#endif

#ifndef EMBER_COMPAT_INLINE
#if defined(__HIPCC__) || defined(__HIP__) || defined(__CUDACC__)
#define EMBER_COMPAT_INLINE __forceinline__
#else
#define EMBER_COMPAT_INLINE inline
#endif
#endif

namespace ember_compat_detail {

// Lane `i` (0 = least significant) of `x`, `Bits` = 8 or 16 wide, zero- or sign-extended to int.
template <int Bits, bool Signed>
static EMBER_COMPAT_HD EMBER_COMPAT_INLINE int lane(unsigned int x, int i) {
  const unsigned int u = (x >> (i * Bits)) & ((1u << Bits) - 1u);
  const unsigned int sign = Signed ? (u >> (Bits - 1)) : 0u;
  return static_cast<int>(u) - static_cast<int>(sign << Bits);  // u - 2^Bits when the sign bit is set
}

// The low `Bits` bits of `v` (two's complement, so negative values wrap) placed in lane `i`.
template <int Bits>
static EMBER_COMPAT_HD EMBER_COMPAT_INLINE unsigned int put(int v, int i) {
  return (static_cast<unsigned int>(v) & ((1u << Bits) - 1u)) << (i * Bits);
}

template <int Bits, bool Signed>
static EMBER_COMPAT_HD EMBER_COMPAT_INLINE int lane_max() {
  return Signed ? (1 << (Bits - 1)) - 1 : (1 << Bits) - 1;
}

template <int Bits, bool Signed>
static EMBER_COMPAT_HD EMBER_COMPAT_INLINE int lane_min() {
  return Signed ? -(1 << (Bits - 1)) : 0;
}

// `v` clamped to the range of a signed or unsigned `Bits`-bit lane.
template <int Bits, bool Signed>
static EMBER_COMPAT_HD EMBER_COMPAT_INLINE int saturate(int v) {
  const int hi = lane_max<Bits, Signed>(), lo = lane_min<Bits, Signed>();
  return v > hi ? hi : (v < lo ? lo : v);
}

static EMBER_COMPAT_HD EMBER_COMPAT_INLINE int abs_int(int v) { return v < 0 ? -v : v; }

// The int whose two's complement bit pattern is `u` (exact, with no implementation-defined conversion).
static EMBER_COMPAT_HD EMBER_COMPAT_INLINE int to_int(unsigned int u) {
  return u <= 0x7fffffffu ? static_cast<int>(u) : static_cast<int>(u - 0x80000000u) - 0x7fffffff - 1;
}

// Per-lane operations on widened lanes (`x`, `y` in the lane's range, so every result fits in 18 bits).
struct Add {
  static EMBER_COMPAT_HD EMBER_COMPAT_INLINE int apply(int x, int y) { return x + y; }
};
struct Sub {
  static EMBER_COMPAT_HD EMBER_COMPAT_INLINE int apply(int x, int y) { return x - y; }
};
struct AbsDiff {
  static EMBER_COMPAT_HD EMBER_COMPAT_INLINE int apply(int x, int y) { return abs_int(x - y); }
};
struct Max {
  static EMBER_COMPAT_HD EMBER_COMPAT_INLINE int apply(int x, int y) { return x > y ? x : y; }
};
struct Min {
  static EMBER_COMPAT_HD EMBER_COMPAT_INLINE int apply(int x, int y) { return x < y ? x : y; }
};
struct RoundedAvg {  // (x + y) / 2, an odd sum rounded away from zero (x + y + 1 >> 1 for unsigned lanes)
  static EMBER_COMPAT_HD EMBER_COMPAT_INLINE int apply(int x, int y) {
    const int s = x + y;
    return s >= 0 ? (s + 1) / 2 : -((1 - s) / 2);
  }
};
struct HalvingAdd {  // (x + y) / 2 truncated; used on unsigned lanes only
  static EMBER_COMPAT_HD EMBER_COMPAT_INLINE int apply(int x, int y) { return (x + y) / 2; }
};
struct Eq {
  static EMBER_COMPAT_HD EMBER_COMPAT_INLINE bool test(int x, int y) { return x == y; }
};
struct Ne {
  static EMBER_COMPAT_HD EMBER_COMPAT_INLINE bool test(int x, int y) { return x != y; }
};
struct Lt {
  static EMBER_COMPAT_HD EMBER_COMPAT_INLINE bool test(int x, int y) { return x < y; }
};
struct Le {
  static EMBER_COMPAT_HD EMBER_COMPAT_INLINE bool test(int x, int y) { return x <= y; }
};
struct Gt {
  static EMBER_COMPAT_HD EMBER_COMPAT_INLINE bool test(int x, int y) { return x > y; }
};
struct Ge {
  static EMBER_COMPAT_HD EMBER_COMPAT_INLINE bool test(int x, int y) { return x >= y; }
};

// Op applied lane by lane; the result wraps to the lane width, or is clamped to it when Saturate.
template <int Bits, bool Signed, bool Saturate, class Op>
static EMBER_COMPAT_HD EMBER_COMPAT_INLINE unsigned int lanewise(unsigned int a, unsigned int b) {
  unsigned int r = 0u;
  for (int i = 0; i < 32 / Bits; ++i) {
    int v = Op::apply(lane<Bits, Signed>(a, i), lane<Bits, Signed>(b, i));
    if (Saturate) v = saturate<Bits, Signed>(v);
    r |= put<Bits>(v, i);
  }
  return r;
}

// Each lane set to `on` (1 or all ones) where Cmp holds between the lanes of a and b, else 0.
template <int Bits, bool Signed, class Cmp>
static EMBER_COMPAT_HD EMBER_COMPAT_INLINE unsigned int compare(unsigned int a, unsigned int b, int on) {
  unsigned int r = 0u;
  for (int i = 0; i < 32 / Bits; ++i) {
    if (Cmp::test(lane<Bits, Signed>(a, i), lane<Bits, Signed>(b, i))) r |= put<Bits>(on, i);
  }
  return r;
}

// Sum over the lanes of |a - b|.
template <int Bits, bool Signed>
static EMBER_COMPAT_HD EMBER_COMPAT_INLINE unsigned int sum_absdiff(unsigned int a, unsigned int b) {
  unsigned int sum = 0u;
  for (int i = 0; i < 32 / Bits; ++i) {
    sum += static_cast<unsigned int>(abs_int(lane<Bits, Signed>(a, i) - lane<Bits, Signed>(b, i)));
  }
  return sum;
}

// c + sum over i of a.halfword[i] * b.byte[i + first] (wrapping modulo 2^32).
template <bool Signed>
static EMBER_COMPAT_HD EMBER_COMPAT_INLINE unsigned int dot2(unsigned int a, unsigned int b, unsigned int c,
                                                              int first) {
  unsigned int acc = c;
  for (int i = 0; i < 2; ++i) {
    // |16-bit x 8-bit| < 2^24: the product fits in int (and its conversion to unsigned wraps as wanted)
    acc += static_cast<unsigned int>(lane<16, Signed>(a, i) * lane<8, Signed>(b, i + first));
  }
  return acc;
}

// c + sum over i of a.byte[i] * b.byte[i] (wrapping modulo 2^32).
template <bool Signed>
static EMBER_COMPAT_HD EMBER_COMPAT_INLINE unsigned int dot4(unsigned int a, unsigned int b, unsigned int c) {
  unsigned int acc = c;
  for (int i = 0; i < 4; ++i) acc += static_cast<unsigned int>(lane<8, Signed>(a, i) * lane<8, Signed>(b, i));
  return acc;
}

}  // namespace ember_compat_detail

#define EMBER_COMPAT_FN static EMBER_COMPAT_HD EMBER_COMPAT_INLINE

// ---- absolute value, negation -------------------------------------------------------------------------------
// |a| per lane, wrapping (|-32768| -> 0x8000) / with signed saturation (|-32768| -> 0x7fff).
EMBER_COMPAT_FN unsigned int ember_vabs2(unsigned int a) {
  return ember_compat_detail::lanewise<16, true, false, ember_compat_detail::AbsDiff>(a, 0u);
}
EMBER_COMPAT_FN unsigned int ember_vabs4(unsigned int a) {
  return ember_compat_detail::lanewise<8, true, false, ember_compat_detail::AbsDiff>(a, 0u);
}
EMBER_COMPAT_FN unsigned int ember_vabsss2(unsigned int a) {
  return ember_compat_detail::lanewise<16, true, true, ember_compat_detail::AbsDiff>(a, 0u);
}
EMBER_COMPAT_FN unsigned int ember_vabsss4(unsigned int a) {
  return ember_compat_detail::lanewise<8, true, true, ember_compat_detail::AbsDiff>(a, 0u);
}
// -a per lane, wrapping / with signed saturation (-(-128) -> 127).
EMBER_COMPAT_FN unsigned int ember_vneg2(unsigned int a) {
  return ember_compat_detail::lanewise<16, true, false, ember_compat_detail::Sub>(0u, a);
}
EMBER_COMPAT_FN unsigned int ember_vneg4(unsigned int a) {
  return ember_compat_detail::lanewise<8, true, false, ember_compat_detail::Sub>(0u, a);
}
EMBER_COMPAT_FN unsigned int ember_vnegss2(unsigned int a) {
  return ember_compat_detail::lanewise<16, true, true, ember_compat_detail::Sub>(0u, a);
}
EMBER_COMPAT_FN unsigned int ember_vnegss4(unsigned int a) {
  return ember_compat_detail::lanewise<8, true, true, ember_compat_detail::Sub>(0u, a);
}

// ---- absolute difference ------------------------------------------------------------------------------------
// |a - b| per lane of signed / unsigned lanes; the result lane is unsigned (|127 - (-128)| -> 0xff).
EMBER_COMPAT_FN unsigned int ember_vabsdiffs2(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<16, true, false, ember_compat_detail::AbsDiff>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vabsdiffs4(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<8, true, false, ember_compat_detail::AbsDiff>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vabsdiffu2(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<16, false, false, ember_compat_detail::AbsDiff>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vabsdiffu4(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<8, false, false, ember_compat_detail::AbsDiff>(a, b);
}

// ---- addition, subtraction ----------------------------------------------------------------------------------
// a + b per lane: wrapping / signed saturation / unsigned saturation.
EMBER_COMPAT_FN unsigned int ember_vadd2(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<16, false, false, ember_compat_detail::Add>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vadd4(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<8, false, false, ember_compat_detail::Add>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vaddss2(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<16, true, true, ember_compat_detail::Add>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vaddss4(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<8, true, true, ember_compat_detail::Add>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vaddus2(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<16, false, true, ember_compat_detail::Add>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vaddus4(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<8, false, true, ember_compat_detail::Add>(a, b);
}
// a - b per lane: wrapping / signed saturation / unsigned saturation (negative -> 0).
EMBER_COMPAT_FN unsigned int ember_vsub2(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<16, false, false, ember_compat_detail::Sub>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vsub4(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<8, false, false, ember_compat_detail::Sub>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vsubss2(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<16, true, true, ember_compat_detail::Sub>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vsubss4(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<8, true, true, ember_compat_detail::Sub>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vsubus2(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<16, false, true, ember_compat_detail::Sub>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vsubus4(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<8, false, true, ember_compat_detail::Sub>(a, b);
}

// ---- averages -----------------------------------------------------------------------------------------------
// Signed rounded average (odd sums rounded away from zero), unsigned rounded average ((a + b + 1) >> 1) and
// unsigned truncating average ((a + b) >> 1), per lane.
EMBER_COMPAT_FN unsigned int ember_vavgs2(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<16, true, false, ember_compat_detail::RoundedAvg>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vavgs4(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<8, true, false, ember_compat_detail::RoundedAvg>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vavgu2(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<16, false, false, ember_compat_detail::RoundedAvg>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vavgu4(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<8, false, false, ember_compat_detail::RoundedAvg>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vhaddu2(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<16, false, false, ember_compat_detail::HalvingAdd>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vhaddu4(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<8, false, false, ember_compat_detail::HalvingAdd>(a, b);
}

// ---- maximum, minimum ---------------------------------------------------------------------------------------
EMBER_COMPAT_FN unsigned int ember_vmaxs2(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<16, true, false, ember_compat_detail::Max>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vmaxs4(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<8, true, false, ember_compat_detail::Max>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vmaxu2(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<16, false, false, ember_compat_detail::Max>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vmaxu4(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<8, false, false, ember_compat_detail::Max>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vmins2(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<16, true, false, ember_compat_detail::Min>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vmins4(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<8, true, false, ember_compat_detail::Min>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vminu2(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<16, false, false, ember_compat_detail::Min>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vminu4(unsigned int a, unsigned int b) {
  return ember_compat_detail::lanewise<8, false, false, ember_compat_detail::Min>(a, b);
}

// ---- comparisons: __vcmp* give all-ones lanes (0xffff / 0xff), __vset* give 1 per lane ------------------------
// a == b, per lane.
EMBER_COMPAT_FN unsigned int ember_vcmpeq2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, false, ember_compat_detail::Eq>(a, b, 0xffff);
}
EMBER_COMPAT_FN unsigned int ember_vcmpeq4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, false, ember_compat_detail::Eq>(a, b, 0xff);
}
EMBER_COMPAT_FN unsigned int ember_vseteq2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, false, ember_compat_detail::Eq>(a, b, 1);
}
EMBER_COMPAT_FN unsigned int ember_vseteq4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, false, ember_compat_detail::Eq>(a, b, 1);
}
// a != b, per lane.
EMBER_COMPAT_FN unsigned int ember_vcmpne2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, false, ember_compat_detail::Ne>(a, b, 0xffff);
}
EMBER_COMPAT_FN unsigned int ember_vcmpne4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, false, ember_compat_detail::Ne>(a, b, 0xff);
}
EMBER_COMPAT_FN unsigned int ember_vsetne2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, false, ember_compat_detail::Ne>(a, b, 1);
}
EMBER_COMPAT_FN unsigned int ember_vsetne4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, false, ember_compat_detail::Ne>(a, b, 1);
}
// a >= (signed) b, per lane.
EMBER_COMPAT_FN unsigned int ember_vcmpges2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, true, ember_compat_detail::Ge>(a, b, 0xffff);
}
EMBER_COMPAT_FN unsigned int ember_vcmpges4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, true, ember_compat_detail::Ge>(a, b, 0xff);
}
EMBER_COMPAT_FN unsigned int ember_vsetges2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, true, ember_compat_detail::Ge>(a, b, 1);
}
EMBER_COMPAT_FN unsigned int ember_vsetges4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, true, ember_compat_detail::Ge>(a, b, 1);
}
// a >= (unsigned) b, per lane.
EMBER_COMPAT_FN unsigned int ember_vcmpgeu2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, false, ember_compat_detail::Ge>(a, b, 0xffff);
}
EMBER_COMPAT_FN unsigned int ember_vcmpgeu4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, false, ember_compat_detail::Ge>(a, b, 0xff);
}
EMBER_COMPAT_FN unsigned int ember_vsetgeu2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, false, ember_compat_detail::Ge>(a, b, 1);
}
EMBER_COMPAT_FN unsigned int ember_vsetgeu4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, false, ember_compat_detail::Ge>(a, b, 1);
}
// a > (signed) b, per lane.
EMBER_COMPAT_FN unsigned int ember_vcmpgts2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, true, ember_compat_detail::Gt>(a, b, 0xffff);
}
EMBER_COMPAT_FN unsigned int ember_vcmpgts4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, true, ember_compat_detail::Gt>(a, b, 0xff);
}
EMBER_COMPAT_FN unsigned int ember_vsetgts2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, true, ember_compat_detail::Gt>(a, b, 1);
}
EMBER_COMPAT_FN unsigned int ember_vsetgts4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, true, ember_compat_detail::Gt>(a, b, 1);
}
// a > (unsigned) b, per lane.
EMBER_COMPAT_FN unsigned int ember_vcmpgtu2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, false, ember_compat_detail::Gt>(a, b, 0xffff);
}
EMBER_COMPAT_FN unsigned int ember_vcmpgtu4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, false, ember_compat_detail::Gt>(a, b, 0xff);
}
EMBER_COMPAT_FN unsigned int ember_vsetgtu2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, false, ember_compat_detail::Gt>(a, b, 1);
}
EMBER_COMPAT_FN unsigned int ember_vsetgtu4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, false, ember_compat_detail::Gt>(a, b, 1);
}
// a <= (signed) b, per lane.
EMBER_COMPAT_FN unsigned int ember_vcmples2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, true, ember_compat_detail::Le>(a, b, 0xffff);
}
EMBER_COMPAT_FN unsigned int ember_vcmples4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, true, ember_compat_detail::Le>(a, b, 0xff);
}
EMBER_COMPAT_FN unsigned int ember_vsetles2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, true, ember_compat_detail::Le>(a, b, 1);
}
EMBER_COMPAT_FN unsigned int ember_vsetles4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, true, ember_compat_detail::Le>(a, b, 1);
}
// a <= (unsigned) b, per lane.
EMBER_COMPAT_FN unsigned int ember_vcmpleu2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, false, ember_compat_detail::Le>(a, b, 0xffff);
}
EMBER_COMPAT_FN unsigned int ember_vcmpleu4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, false, ember_compat_detail::Le>(a, b, 0xff);
}
EMBER_COMPAT_FN unsigned int ember_vsetleu2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, false, ember_compat_detail::Le>(a, b, 1);
}
EMBER_COMPAT_FN unsigned int ember_vsetleu4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, false, ember_compat_detail::Le>(a, b, 1);
}
// a < (signed) b, per lane.
EMBER_COMPAT_FN unsigned int ember_vcmplts2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, true, ember_compat_detail::Lt>(a, b, 0xffff);
}
EMBER_COMPAT_FN unsigned int ember_vcmplts4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, true, ember_compat_detail::Lt>(a, b, 0xff);
}
EMBER_COMPAT_FN unsigned int ember_vsetlts2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, true, ember_compat_detail::Lt>(a, b, 1);
}
EMBER_COMPAT_FN unsigned int ember_vsetlts4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, true, ember_compat_detail::Lt>(a, b, 1);
}
// a < (unsigned) b, per lane.
EMBER_COMPAT_FN unsigned int ember_vcmpltu2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, false, ember_compat_detail::Lt>(a, b, 0xffff);
}
EMBER_COMPAT_FN unsigned int ember_vcmpltu4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, false, ember_compat_detail::Lt>(a, b, 0xff);
}
EMBER_COMPAT_FN unsigned int ember_vsetltu2(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<16, false, ember_compat_detail::Lt>(a, b, 1);
}
EMBER_COMPAT_FN unsigned int ember_vsetltu4(unsigned int a, unsigned int b) {
  return ember_compat_detail::compare<8, false, ember_compat_detail::Lt>(a, b, 1);
}

// ---- sums of absolute differences ---------------------------------------------------------------------------
// Sum over the lanes of |a - b| (signed / unsigned lanes), as a plain unsigned int.
EMBER_COMPAT_FN unsigned int ember_vsads2(unsigned int a, unsigned int b) {
  return ember_compat_detail::sum_absdiff<16, true>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vsads4(unsigned int a, unsigned int b) {
  return ember_compat_detail::sum_absdiff<8, true>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vsadu2(unsigned int a, unsigned int b) {
  return ember_compat_detail::sum_absdiff<16, false>(a, b);
}
EMBER_COMPAT_FN unsigned int ember_vsadu4(unsigned int a, unsigned int b) {
  return ember_compat_detail::sum_absdiff<8, false>(a, b);
}

// ---- dot products -------------------------------------------------------------------------------------------
// __dp4a: c + the four products of the bytes of srcA and srcB (signed bytes for int, unsigned for unsigned int),
// wrapping modulo 2^32.
EMBER_COMPAT_FN int ember_dp4a(int srcA, int srcB, int c) {
  return ember_compat_detail::to_int(ember_compat_detail::dot4<true>(
      static_cast<unsigned int>(srcA), static_cast<unsigned int>(srcB), static_cast<unsigned int>(c)));
}
EMBER_COMPAT_FN unsigned int ember_dp4a(unsigned int srcA, unsigned int srcB, unsigned int c) {
  return ember_compat_detail::dot4<false>(srcA, srcB, c);
}
// __dp2a_lo / __dp2a_hi: c + srcA.halfword[0] * srcB.byte[0] + srcA.halfword[1] * srcB.byte[1] (lo), or with
// bytes 2 and 3 of srcB (hi); signed lanes for int, unsigned for unsigned int, wrapping modulo 2^32.
EMBER_COMPAT_FN int ember_dp2a_lo(int srcA, int srcB, int c) {
  return ember_compat_detail::to_int(ember_compat_detail::dot2<true>(
      static_cast<unsigned int>(srcA), static_cast<unsigned int>(srcB), static_cast<unsigned int>(c), 0));
}
EMBER_COMPAT_FN unsigned int ember_dp2a_lo(unsigned int srcA, unsigned int srcB, unsigned int c) {
  return ember_compat_detail::dot2<false>(srcA, srcB, c, 0);
}
EMBER_COMPAT_FN int ember_dp2a_hi(int srcA, int srcB, int c) {
  return ember_compat_detail::to_int(ember_compat_detail::dot2<true>(
      static_cast<unsigned int>(srcA), static_cast<unsigned int>(srcB), static_cast<unsigned int>(c), 2));
}
EMBER_COMPAT_FN unsigned int ember_dp2a_hi(unsigned int srcA, unsigned int srcB, unsigned int c) {
  return ember_compat_detail::dot2<false>(srcA, srcB, c, 2);
}

#undef EMBER_COMPAT_FN
