"""Log hygiene for long-running commands: a line repeated during an outage is written once, then counted.

A broker that is down makes the same warning come back every few seconds (the lag monitor, client
retries); :class:`CollapseRepeats` lets the first one through, swallows the identical ones that follow,
and says how many there were when something else is logged or once a minute.
"""

from __future__ import annotations

import logging
import time


class CollapseRepeats(logging.Filter):
    """Drop a record identical (logger, level, message) to the previous one; report the count later.

    >>> f = CollapseRepeats(every=60)
    >>> make = lambda msg: logging.LogRecord("x", logging.WARNING, "", 0, msg, None, None)
    >>> [f.filter(make("down")) for _ in range(3)]
    [True, False, False]
    >>> record = make("up again"); f.filter(record), record.getMessage()
    (True, 'up again (the previous message was repeated 2 more times)')
    """

    def __init__(self, every: float = 60.0) -> None:
        super().__init__()
        self.every = every
        self._last: tuple[str, int, str] | None = None
        self._repeats = 0
        self._since = 0.0

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, record.getMessage())
        now = time.monotonic()
        if key == self._last:
            self._repeats += 1
            if now - self._since < self.every:
                return False
            record.msg, record.args = f"{key[2]} (repeated {self._repeats} times in {self.every:.0f} s)", None
            self._repeats, self._since = 0, now
            return True
        if self._repeats:
            record.msg = f"{key[2]} (the previous message was repeated {self._repeats} more times)"
            record.args = None
        self._last, self._repeats, self._since = key, 0, now
        return True


def collapse_repeats(logger: logging.Logger | None = None) -> None:
    """Install :class:`CollapseRepeats` on every handler of ``logger`` (default: the root logger)."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, CollapseRepeats) for f in handler.filters):
            handler.addFilter(CollapseRepeats())
