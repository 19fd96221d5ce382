"""Compile progress on stderr with a tqdm bar: nothing for fast compiles, a bar for slow ones.

The compile driver makes one :class:`Progress` per compile and calls it with what it is doing
(``progress("folding Conv conv1")``) or how far it is (``progress("kernel conv1", 3, 57)``).
Nothing is shown until the compile has taken ``delay`` seconds; from then on a tqdm bar (with
a total once one is known) shows the current stage. :func:`quiet` silences every compile in
its ``with`` block in this thread (the ``ember`` command's ``--quiet``).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from tqdm import tqdm

_state = threading.local()
_WITH_TOTAL = "ember: {desc} |{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}]"
_WITHOUT_TOTAL = "ember: {desc} [{elapsed}]"
_REFRESH_S = 0.1


@contextlib.contextmanager
def quiet(on: bool = True) -> Iterator[None]:
    """In this ``with`` block (this thread), compiles show no progress when ``on``."""
    was = getattr(_state, "quiet", False)
    _state.quiet = on
    try:
        yield
    finally:
        _state.quiet = was


def is_quiet() -> bool:
    """True inside :func:`quiet` in this thread."""
    return bool(getattr(_state, "quiet", False))


class Progress:
    """One compile's progress bar (tqdm, on ``stream``: stderr by default), shown once the
    compile has taken ``delay`` seconds, never inside :func:`quiet`."""

    def __init__(self, delay: float = 1.0, stream: Any = None):
        self.start = time.perf_counter()
        self.delay = delay
        self.stream = stream or sys.stderr
        self.enabled = not is_quiet()
        self._bar: Any = None
        self._shown_at = 0.0

    @property
    def shown(self) -> bool:
        """True once the bar is on screen."""
        return self._bar is not None

    def __call__(self, msg: str, done: int | None = None, total: int | None = None) -> None:
        """Show ``msg`` as the current stage; ``done`` of ``total`` steps of it when given."""
        if not self.enabled or (self._bar is None and time.perf_counter() - self.start < self.delay):
            return
        if self._bar is None:
            self._bar = tqdm(total=total, file=self.stream, leave=True, dynamic_ncols=True,
                             bar_format=_WITH_TOTAL if total else _WITHOUT_TOTAL)
        bar = self._bar
        if total is not None and bar.total != total:
            bar.reset(total=total)
            bar.bar_format = _WITH_TOTAL
        if done is not None:
            bar.n = done
        bar.set_description_str(msg[:60], refresh=False)
        now = time.perf_counter()
        if now - self._shown_at >= _REFRESH_S or (total is not None and done == total):
            bar.refresh()  # at most ten times a second (folding reports every node)
            self._shown_at = now

    def done(self, msg: str) -> None:
        """Close the bar with a final ``msg`` (only when the bar was shown)."""
        if self._bar is not None:
            self._bar.set_description_str(msg, refresh=False)
            self._bar.close()
            self._bar = None
