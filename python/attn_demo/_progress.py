"""A one-line progress bar for the demos (make run, make run-vllm): drawn on stderr when it is a terminal,
silent otherwise (logs keep only the result lines). No dependencies; safe to nest nothing."""

from __future__ import annotations

import sys
import time
from typing import Optional, TextIO


class Progress:
    """`with Progress("[llama] loading", total=30) as p: ... p.update(k)`; the bar is erased on exit, so the
    caller's own result line takes its place. total=None draws elapsed time only."""

    WIDTH = 28

    def __init__(self, label: str, total: Optional[int] = None, stream: Optional[TextIO] = None,
                 min_interval: float = 0.1):
        self.label, self.total = label, total
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.min_interval = min_interval
        self.t0 = time.perf_counter()
        self._last = 0.0
        self.done = 0

    def __enter__(self) -> "Progress":
        self._draw(force=True)
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()

    def update(self, done: int, total: Optional[int] = None) -> None:
        self.done = done
        if total is not None:
            self.total = total
        self._draw()

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._last < self.min_interval:
            return
        self._last = now
        dt = now - self.t0
        if self.total:
            frac = min(1.0, max(0.0, self.done / self.total))
            fill = int(round(frac * self.WIDTH))
            bar = "#" * fill + "-" * (self.WIDTH - fill)
            text = f"{self.label} [{bar}] {self.done}/{self.total} {dt:5.1f}s"
        else:
            text = f"{self.label} ... {dt:5.1f}s"
        self.stream.write("\r\x1b[2K" + text)
        self.stream.flush()
