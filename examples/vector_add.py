"""The walkthrough of DESIGN.md on the CPU: C = A + B over a symbolic n.

Run: .venv/bin/python examples/vector_add.py
"""

import numpy as np

import ember
from ember import te

n = te.var("n")
A = te.placeholder((n,), name="A")
B = te.placeholder((n,), name="B")
C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
s = te.create_schedule(C.op)
outer, inner = s[C].split(C.op.axis[0], factor=64)
s[C].parallel(outer)
_, lanes = s[C].split(inner, factor=16)
s[C].vectorize(lanes)
fadd = ember.build(s, [A, B, C], target="llvm", name="myadd")

dev = ember.cpu(0)
a = ember.nd.array(np.random.uniform(size=1027).astype(A.dtype), dev)
b = ember.nd.array(np.random.uniform(size=1027).astype(B.dtype), dev)
c = ember.nd.array(np.zeros(1027, dtype="float32"), dev)
fadd(a, b, c)
np.testing.assert_allclose(c.numpy(), a.numpy() + b.numpy())
print(fadd.get_source("ir"))  # loop IR
print(fadd.get_source("llvm")[:600])  # LLVM IR (optimised)
print("vector add matches NumPy")
