"""The one exception hipify raises on purpose."""

from __future__ import annotations

try:  # ember's shared base class; hipify also works where the rest of ember is not importable
    from ember.errors import EmberError as _Base
except ImportError:  # pragma: no cover - only without ember/errors.py
    _Base = Exception  # type: ignore[misc,assignment]


class HipifyError(_Base):  # type: ignore[valid-type,misc]
    """A file could not be read, parsed or written; the message names the file and the fix."""
