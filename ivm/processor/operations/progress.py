"""Progress bars for the command line's bulk loads (``ivm bootstrap``, ``ivm produce``).

On a terminal the bar redraws in place at most ten times a second::

    R  [██████████████░░░░░░░░░░]  58%   1,160,000/2,000,000  412,330/s  ETA 2s

Elsewhere (a log file, CI) it prints a plain line at every tenth of the way,
so a long load still shows that it moves without flooding the log.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO


class ProgressBar:
    """Counts ``advance(n)`` calls towards ``total`` and draws the bar on ``stream``."""

    WIDTH = 24

    def __init__(self, label: str, total: int, stream: TextIO | None = None, unit: str = "") -> None:
        self.label = label
        self.total = max(total, 0)
        self.done = 0
        self.unit = unit
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.started = time.monotonic()
        self._drawn = 0.0
        self._tenths = 0

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.tty:
            if now - self._drawn >= 0.1:
                self._drawn = now
                print("\r" + self.line(now), end="", file=self.stream, flush=True)
        elif self.total:
            tenths = min(10, self.done * 10 // self.total)
            if tenths > self._tenths:
                self._tenths = tenths
                if tenths < 10:
                    print(self.line(now), file=self.stream, flush=True)

    def close(self) -> None:
        """Draw the final state (100% when every item was counted) and end the line."""
        line = self.line(time.monotonic())
        print(("\r" if self.tty else "") + line, file=self.stream, flush=True)

    def line(self, now: float) -> str:
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        unit = f" {self.unit}" if self.unit else ""
        if not self.total:
            return f"{self.label}  {self.done:,}{unit}  {rate:,.0f}/s  {elapsed:.1f}s"
        fraction = min(self.done / self.total, 1.0)
        filled = round(fraction * self.WIDTH)
        bar = "█" * filled + "░" * (self.WIDTH - filled)
        if self.done >= self.total:
            tail = f"{elapsed:.1f}s"
        else:
            tail = f"ETA {(self.total - self.done) / rate:.0f}s" if rate > 0 else "ETA ?"
        return f"{self.label}  [{bar}] {fraction:4.0%}  {self.done:,}/{self.total:,}{unit}  {rate:,.0f}/s  {tail}"
