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

// =============================================================================================================
// CUDA runtime, driver and library APIs HIP 6.4 lacks (host code), and the device functions that go with them.
// Only compiled as HIP (hip-clang), or as host C++ against HIP's runtime API (__HIP_PLATFORM_AMD__): the
// integer intrinsics above stay plain C++. `ember hipify` renames the CUDA names to these (maps/compat.json,
// section "replace"):
//
//  * extensible launches: cudaLaunchKernelEx / cudaLaunchKernelExC / cuLaunchKernelEx with cudaLaunchConfig_t,
//    cudaLaunchAttribute and every cudaLaunchAttribute* id (CUDA's values). HIP 7 added hipLaunchKernelExC;
//    HIP 6.4 has none, so ember_hipLaunchKernelExC applies the attributes itself and launches with
//    hipLaunchKernel (hipLaunchCooperativeKernel for the cooperative attribute):
//      - programmatic stream serialization (programmatic dependent launch, PDL): HIP has no PDL; the kernel is
//        launched after the previous work of the stream has completed, as without the attribute. That is
//        always correct (PDL only lets a kernel start early), only the overlap is lost;
//        cudaGridDependencySynchronize / cudaTriggerProgrammaticLaunchCompletion are then no-ops, as in CUDA
//        for a kernel launched without the attribute;
//      - programmatic / launch-completion events: recorded on the stream after the kernel (they fire when it
//        has completed, later than CUDA may fire them, never earlier);
//      - cluster dimension: AMD GPUs have no thread-block clusters; 1x1x1 is accepted, anything larger returns
//        hipErrorNotSupported; the preferred cluster dimension is a hint and ignored;
//      - access-policy window, priority, synchronization and scheduling policies, memory sync domains, shared
//        memory carveout, device-updatable node, NVLink hint: performance hints, ignored;
//      - an unknown id returns hipErrorInvalidValue.
//  * graph update, CUDA 12 form: cudaGraphExecUpdate(exec, graph, &cudaGraphExecUpdateResultInfo) through
//    hipGraphExecUpdate(exec, graph, &errorNode, &result) (errorFromNode is always null: HIP does not say).
//  * cublasSetWorkspace: hipBLAS 6.4 has no hipblasSetWorkspace; the user's buffer is handed to hipBLAS >= 3's
//    hipblasSetWorkspace or to rocBLAS's rocblas_set_workspace (the hipBLAS handle is a rocBLAS handle on AMD),
//    looked up at run time; without either, the call succeeds and rocBLAS keeps managing its own workspace.
//  * device: __nanosleep (s_sleep loop), __reduce_{add,min,max,and,or,xor}_sync (over the lanes of the mask, in
//    the 32-lane group of the calling lane).

#if defined(__HIP__) || defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__)

#if !defined(__HIP__) && !defined(__HIPCC__)
#include <hip/hip_runtime_api.h>
#endif
#include <dlfcn.h>
#include <stddef.h>
#include <utility>

// ---- extensible launch: configuration and attributes (CUDA's layout and attribute values) --------------------
enum ember_hipLaunchAttributeID {
  ember_hipLaunchAttributeIgnore = 0,
  ember_hipLaunchAttributeAccessPolicyWindow = 1,
  ember_hipLaunchAttributeCooperative = 2,
  ember_hipLaunchAttributeSynchronizationPolicy = 3,
  ember_hipLaunchAttributeClusterDimension = 4,
  ember_hipLaunchAttributeClusterSchedulingPolicyPreference = 5,
  ember_hipLaunchAttributeProgrammaticStreamSerialization = 6,
  ember_hipLaunchAttributeProgrammaticEvent = 7,
  ember_hipLaunchAttributePriority = 8,
  ember_hipLaunchAttributeMemSyncDomainMap = 9,
  ember_hipLaunchAttributeMemSyncDomain = 10,
  ember_hipLaunchAttributePreferredClusterDimension = 11,
  ember_hipLaunchAttributeLaunchCompletionEvent = 12,
  ember_hipLaunchAttributeDeviceUpdatableKernelNode = 13,
  ember_hipLaunchAttributePreferredSharedMemoryCarveout = 14,
  ember_hipLaunchAttributeNvlinkUtilCentricScheduling = 16
};

union ember_hipLaunchAttributeValue {
  char pad[64];
  hipAccessPolicyWindow accessPolicyWindow;
  int cooperative;
  int syncPolicy;
  struct {
    unsigned int x, y, z;
  } clusterDim;
  int clusterSchedulingPolicyPreference;
  int programmaticStreamSerializationAllowed;
  struct {
    hipEvent_t event;
    int flags;
    int triggerAtBlockStart;
  } programmaticEvent;
  int priority;
  struct {
    unsigned char default_;
    unsigned char remote;
  } memSyncDomainMap;
  int memSyncDomain;
  struct {
    unsigned int x, y, z;
  } preferredClusterDim;
  struct {
    hipEvent_t event;
    int flags;
  } launchCompletionEvent;
  struct {
    int deviceUpdatable;
    void* devNode;
  } deviceUpdatableKernelNode;
  unsigned int sharedMemCarveout;
  unsigned int nvlinkUtilCentricScheduling;
};

// cudaLaunchAttribute (runtime: .val) and CUlaunchAttribute (driver: .value) in one
struct ember_hipLaunchAttribute {
  ember_hipLaunchAttributeID id;
  char pad[8 - sizeof(ember_hipLaunchAttributeID)];
  union {
    ember_hipLaunchAttributeValue val;
    ember_hipLaunchAttributeValue value;
  };
};

struct ember_hipLaunchConfig_t {
  dim3 gridDim;
  dim3 blockDim;
  size_t dynamicSmemBytes;
  hipStream_t stream;
  ember_hipLaunchAttribute* attrs;
  unsigned int numAttrs;
};

// CUlaunchConfig (the driver's cuLaunchKernelEx)
struct ember_HIP_LAUNCH_CONFIG {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  hipStream_t hStream;
  ember_hipLaunchAttribute* attrs;
  unsigned int numAttrs;
};

namespace ember_compat_detail {

struct LaunchPlan {
  bool cooperative = false;
  hipEvent_t events[2] = {nullptr, nullptr};  // programmatic event, launch-completion event
};

// Reads the attributes into `plan`; hipSuccess, or the error CUDA's launch would not get past on an AMD GPU.
static inline hipError_t plan_launch(const ember_hipLaunchAttribute* attrs, unsigned int count, LaunchPlan* plan) {
  if (count != 0 && attrs == nullptr) return hipErrorInvalidValue;
  for (unsigned int i = 0; i < count; ++i) {
    const ember_hipLaunchAttributeValue& v = attrs[i].val;
    switch (attrs[i].id) {
      case ember_hipLaunchAttributeCooperative:
        plan->cooperative = v.cooperative != 0;
        break;
      case ember_hipLaunchAttributeClusterDimension:  // no thread-block clusters on AMD GPUs
        if (static_cast<unsigned long long>(v.clusterDim.x) * v.clusterDim.y * v.clusterDim.z > 1ull)
          return hipErrorNotSupported;
        break;
      case ember_hipLaunchAttributeProgrammaticEvent:  // fires once the kernel has completed
        plan->events[0] = v.programmaticEvent.event;
        break;
      case ember_hipLaunchAttributeLaunchCompletionEvent:
        plan->events[1] = v.launchCompletionEvent.event;
        break;
      case ember_hipLaunchAttributeIgnore:
      case ember_hipLaunchAttributeAccessPolicyWindow:
      case ember_hipLaunchAttributeSynchronizationPolicy:
      case ember_hipLaunchAttributeClusterSchedulingPolicyPreference:
      case ember_hipLaunchAttributeProgrammaticStreamSerialization:  // no PDL in HIP: launched serialized
      case ember_hipLaunchAttributePriority:
      case ember_hipLaunchAttributeMemSyncDomainMap:
      case ember_hipLaunchAttributeMemSyncDomain:
      case ember_hipLaunchAttributePreferredClusterDimension:
      case ember_hipLaunchAttributeDeviceUpdatableKernelNode:
      case ember_hipLaunchAttributePreferredSharedMemoryCarveout:
      case ember_hipLaunchAttributeNvlinkUtilCentricScheduling:
        break;
      default:
        return hipErrorInvalidValue;
    }
  }
  return hipSuccess;
}

static inline hipError_t finish_launch(const LaunchPlan& plan, hipError_t launched, hipStream_t stream) {
  if (launched != hipSuccess) return launched;
  for (hipEvent_t event : plan.events) {
    if (event == nullptr) continue;
    const hipError_t recorded = hipEventRecord(event, stream);
    if (recorded != hipSuccess) return recorded;
  }
  return hipSuccess;
}

// rocblas_status -> hipblasStatus_t (the values of both enums)
static inline int blas_status(int rocblas) {
  switch (rocblas) {
    case 0: return 0;  // success
    case 1: return 1;  // invalid handle -> HIPBLAS_STATUS_NOT_INITIALIZED
    case 2: return 7;  // not implemented -> HIPBLAS_STATUS_NOT_SUPPORTED
    case 3:            // invalid pointer
    case 4:            // invalid size
    case 11: return 3;  // invalid value -> HIPBLAS_STATUS_INVALID_VALUE
    case 5: return 2;   // memory error -> HIPBLAS_STATUS_ALLOC_FAILED
    default: return 6;  // HIPBLAS_STATUS_INTERNAL_ERROR
  }
}

static inline int blas_set_workspace(void* handle, void* workspace, size_t bytes) {
  typedef int (*set_workspace_fn)(void*, void*, size_t);
  static const set_workspace_fn native =
      reinterpret_cast<set_workspace_fn>(dlsym(RTLD_DEFAULT, "hipblasSetWorkspace"));  // hipBLAS >= 3
  if (native != nullptr) return native(handle, workspace, bytes);
  static const set_workspace_fn rocblas =
      reinterpret_cast<set_workspace_fn>(dlsym(RTLD_DEFAULT, "rocblas_set_workspace"));
  return rocblas != nullptr ? blas_status(rocblas(handle, workspace, bytes)) : 0;
}

}  // namespace ember_compat_detail

// cudaLaunchKernelExC(config, func, args)
static inline hipError_t ember_hipLaunchKernelExC(const ember_hipLaunchConfig_t* config, const void* func,
                                                  void** args) {
  if (config == nullptr) return hipErrorInvalidValue;
  ember_compat_detail::LaunchPlan plan;
  const hipError_t planned = ember_compat_detail::plan_launch(config->attrs, config->numAttrs, &plan);
  if (planned != hipSuccess) return planned;
  const hipError_t launched =
      plan.cooperative ? hipLaunchCooperativeKernel(func, config->gridDim, config->blockDim, args,
                                                    static_cast<unsigned int>(config->dynamicSmemBytes), config->stream)
                       : hipLaunchKernel(func, config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
                                         config->stream);
  return ember_compat_detail::finish_launch(plan, launched, config->stream);
}

// cudaLaunchKernelEx(config, kernel, args...): the arguments converted to the kernel's parameter types first
template <typename... ExpTypes, typename... ActTypes>
static inline hipError_t ember_hipLaunchKernelEx(const ember_hipLaunchConfig_t* config, void (*kernel)(ExpTypes...),
                                                 ActTypes&&... args) {
  return [&](ExpTypes... coerced) {
    void* pointers[sizeof...(ExpTypes) + 1] = {((void*)&coerced)..., nullptr};
    return ember_hipLaunchKernelExC(config, reinterpret_cast<const void*>(kernel), pointers);
  }(std::forward<ActTypes>(args)...);
}

// cuLaunchKernelEx(config, function, params, extra)
static inline hipError_t ember_hipDrvLaunchKernelEx(const ember_HIP_LAUNCH_CONFIG* config, hipFunction_t f,
                                                    void** params, void** extra) {
  if (config == nullptr) return hipErrorInvalidValue;
  ember_compat_detail::LaunchPlan plan;
  const hipError_t planned = ember_compat_detail::plan_launch(config->attrs, config->numAttrs, &plan);
  if (planned != hipSuccess) return planned;
  hipError_t launched;
  if (plan.cooperative) {
#if defined(HIP_VERSION_MAJOR) && HIP_VERSION_MAJOR >= 6
    launched = extra != nullptr ? hipErrorInvalidValue
                                : hipModuleLaunchCooperativeKernel(f, config->gridDimX, config->gridDimY,
                                                                   config->gridDimZ, config->blockDimX,
                                                                   config->blockDimY, config->blockDimZ,
                                                                   config->sharedMemBytes, config->hStream, params);
#else
    launched = hipErrorNotSupported;  // HIP 5 has no hipModuleLaunchCooperativeKernel
#endif
  } else {
    launched = hipModuleLaunchKernel(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                                     config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream,
                                     params, extra);
  }
  return ember_compat_detail::finish_launch(plan, launched, config->hStream);
}

// ---- graph update, CUDA 12 form ------------------------------------------------------------------------------
struct ember_hipGraphExecUpdateResultInfo {
  hipGraphExecUpdateResult result;
  hipGraphNode_t errorNode;
  hipGraphNode_t errorFromNode;
};

// cudaGraphExecUpdateErrorAttributesChanged: HIP never reports it (an int: hipGraphExecUpdateResult stops at 7)
static constexpr int ember_hipGraphExecUpdateErrorAttributesChanged = 8;

static inline hipError_t ember_hipGraphExecUpdate(hipGraphExec_t exec, hipGraph_t graph,
                                                  ember_hipGraphExecUpdateResultInfo* info) {
  hipGraphNode_t node = nullptr;
  hipGraphExecUpdateResult result = hipGraphExecUpdateSuccess;
  const hipError_t status = hipGraphExecUpdate(exec, graph, &node, &result);
  if (info != nullptr) {
    info->result = result;
    info->errorNode = node;
    info->errorFromNode = nullptr;
  }
  return status;
}

// ---- cuBLAS workspace ----------------------------------------------------------------------------------------
// A macro so that hipblasStatus_t is looked up where it is used (this header comes before the file's hipBLAS one).
#define ember_hipblasSetWorkspace(handle, workspace, bytes) \
  static_cast<hipblasStatus_t>(::ember_compat_detail::blas_set_workspace((handle), (workspace), (bytes)))

#endif  // HIP host API

#if defined(__HIP__) || defined(__HIPCC__)

// ---- device: programmatic dependent launch (no-ops: the launch was serialized), sleep, warp reductions -------
static __device__ __forceinline__ void ember_hipGridDependencySynchronize() {}
static __device__ __forceinline__ void ember_hipTriggerProgrammaticLaunchCompletion() {}

// __nanosleep(ns): s_sleep 1 idles the wave for about 64 clocks, ~30-40 ns at CDNA's 1.5-2.1 GHz; capped at 1 ms
static __device__ __forceinline__ void ember_nanosleep(unsigned int ns) {
  const unsigned int capped = ns < 1000000u ? ns : 1000000u;
  for (unsigned int slept = 0; slept < capped; slept += 32u) __builtin_amdgcn_s_sleep(1);
}

namespace ember_compat_detail {
// `op` over the values of the lanes whose bit is set in `mask` (bit i: lane i of the calling lane's 32-lane group,
// the lanes a CUDA warp's lanes become); every lane of the group that runs it gets the result
template <class T, class Op>
static __device__ __forceinline__ T reduce_sync(unsigned int mask, T value, Op op) {
  const int base = static_cast<int>(__lane_id()) & ~31;
  T acc = value;
  bool first = true;
  for (int i = 0; i < 32; ++i) {
    const T x = __shfl(value, base + i, warpSize);
    if ((mask >> i) & 1u) {
      acc = first ? x : op(acc, x);
      first = false;
    }
  }
  return acc;
}
struct ReduceAdd {
  template <class T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct ReduceMin {
  template <class T> __device__ T operator()(T a, T b) const { return b < a ? b : a; }
};
struct ReduceMax {
  template <class T> __device__ T operator()(T a, T b) const { return a < b ? b : a; }
};
struct ReduceAnd {
  __device__ unsigned int operator()(unsigned int a, unsigned int b) const { return a & b; }
};
struct ReduceOr {
  __device__ unsigned int operator()(unsigned int a, unsigned int b) const { return a | b; }
};
struct ReduceXor {
  __device__ unsigned int operator()(unsigned int a, unsigned int b) const { return a ^ b; }
};
}  // namespace ember_compat_detail

// sums wrap modulo 2^32, as CUDA's
static __device__ __forceinline__ unsigned int ember_reduce_add_sync(unsigned int mask, unsigned int value) {
  return ember_compat_detail::reduce_sync(mask, value, ember_compat_detail::ReduceAdd());
}
static __device__ __forceinline__ int ember_reduce_add_sync(unsigned int mask, int value) {
  return static_cast<int>(ember_reduce_add_sync(mask, static_cast<unsigned int>(value)));
}
static __device__ __forceinline__ unsigned int ember_reduce_min_sync(unsigned int mask, unsigned int value) {
  return ember_compat_detail::reduce_sync(mask, value, ember_compat_detail::ReduceMin());
}
static __device__ __forceinline__ int ember_reduce_min_sync(unsigned int mask, int value) {
  return ember_compat_detail::reduce_sync(mask, value, ember_compat_detail::ReduceMin());
}
static __device__ __forceinline__ unsigned int ember_reduce_max_sync(unsigned int mask, unsigned int value) {
  return ember_compat_detail::reduce_sync(mask, value, ember_compat_detail::ReduceMax());
}
static __device__ __forceinline__ int ember_reduce_max_sync(unsigned int mask, int value) {
  return ember_compat_detail::reduce_sync(mask, value, ember_compat_detail::ReduceMax());
}
static __device__ __forceinline__ unsigned int ember_reduce_and_sync(unsigned int mask, unsigned int value) {
  return ember_compat_detail::reduce_sync(mask, value, ember_compat_detail::ReduceAnd());
}
static __device__ __forceinline__ unsigned int ember_reduce_or_sync(unsigned int mask, unsigned int value) {
  return ember_compat_detail::reduce_sync(mask, value, ember_compat_detail::ReduceOr());
}
static __device__ __forceinline__ unsigned int ember_reduce_xor_sync(unsigned int mask, unsigned int value) {
  return ember_compat_detail::reduce_sync(mask, value, ember_compat_detail::ReduceXor());
}

#endif  // HIP device
