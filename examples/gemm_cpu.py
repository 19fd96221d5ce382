"""A tuned-by-hand GEMM on the CPU: packing, register tiling, cache blocking, vectorize, parallel.

Run: .venv/bin/python examples/gemm_cpu.py
"""

import time

import numpy as np

import ember
from ember.demo import gemm_schedule

M, N, K = 1000, 1000, 1000  # no tile divides 1000: the guards are partitioned away
s, args = gemm_schedule(M, N, K)
print(ember.lower(s, args, name="gemm"))
f = ember.build(s, args, target="llvm", name="gemm")
A = np.random.rand(M, K).astype("float32")
B = np.random.rand(K, N).astype("float32")
c = ember.nd.array(np.zeros((M, N), "float32"))
f(ember.nd.array(A), ember.nd.array(B), c)
np.testing.assert_allclose(c.numpy(), A.astype(np.float64) @ B, rtol=1e-5)
t0 = time.perf_counter()
for _ in range(10):
    f(ember.nd.array(A), ember.nd.array(B), c)
print(f"{2 * M * N * K * 10 / (time.perf_counter() - t0) / 1e9:.1f} GFLOP/s (including array copies)")
