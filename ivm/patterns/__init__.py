"""Update patterns at run time: monitors (003 §4) and sliding windows (003 §1.3, §3.3)."""

from ivm.patterns.monitor import PatternEvent, PatternMonitor
from ivm.patterns.windows import CountWindow, TimeWindow, Windows

__all__ = ["CountWindow", "PatternEvent", "PatternMonitor", "TimeWindow", "Windows"]
