"""Compile progress on stderr: quiet for fast compiles, one updating line for slow ones."""

from __future__ import annotations

import sys
import time
from typing import Any


class Progress:
    """Prints compile progress to stderr once a compile has taken more than ``delay`` seconds.

    Calling it with a message shows that message (on a terminal the line is rewritten in place);
    :meth:`done` prints a final line only when something was shown."""

    def __init__(self, delay: float = 1.0, stream: Any = None):
        self.start = time.perf_counter()
        self.delay = delay
        self.stream = stream or sys.stderr
        self.shown = False

    def __call__(self, msg: str) -> None:
        if time.perf_counter() - self.start < self.delay:
            return
        tty = getattr(self.stream, "isatty", lambda: False)()
        end = "\r" if tty else "\n"
        self.stream.write(f"ember: {msg}".ljust(78 if tty else 0) + end)
        self.stream.flush()
        self.shown = True

    def done(self, msg: str) -> None:
        """Final line (only when progress was shown)."""
        if self.shown:
            self.stream.write(f"ember: {msg}".ljust(78) + "\n")
            self.stream.flush()
