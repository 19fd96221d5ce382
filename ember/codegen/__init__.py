"""LLVM code generation shared by every backend: :class:`~ember.codegen.llvm.CodeGenLLVM`."""
