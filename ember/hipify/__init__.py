"""ember hipify: a token-aware CUDA -> HIP source translator with a portability lint.

>>> from ember.hipify import translate
>>> translate("cudaMalloc(&p, n);").output
'hipMalloc(&p, n);'
"""

from __future__ import annotations

from .errors import HipifyError
from .maps import table_sizes
from .result import LintWarning, Reference, Result
from .translator import translate

__all__ = ["HipifyError", "LintWarning", "Reference", "Result", "table_sizes", "translate"]
