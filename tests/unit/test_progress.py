"""The command line's progress bar: what a terminal and a log file see."""

from __future__ import annotations

import io

from ivm.processor.operations.progress import ProgressBar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_file_gets_a_line_per_tenth_and_the_final_state() -> None:
    out = io.StringIO()
    with ProgressBar("load R", 1000, stream=out, unit="tuples") as bar:
        for _ in range(100):
            bar.advance(10)
    lines = out.getvalue().splitlines()
    assert len(lines) == 10  # 10%, ..., 90%, then the final line
    assert "[██░" in lines[0] and "10%" in lines[0] and "100/1,000 tuples" in lines[0]
    assert "100%" in lines[-1] and "1,000/1,000 tuples" in lines[-1] and "█" * ProgressBar.WIDTH in lines[-1]
    assert "ETA" in lines[4] and "ETA" not in lines[-1]


def test_a_terminal_redraws_in_place() -> None:
    out = Terminal()
    bar = ProgressBar("produce", 4, stream=out)
    bar.advance(1)  # drawn: the first redraw is due at once
    bar.advance(1)  # not drawn: within 0.1 s of the last
    bar.close()
    text = out.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n")
    assert " 25%" in text and "2/4" in text.rsplit("\r", 1)[1]


def test_an_unknown_total_counts_without_a_bar() -> None:
    out = io.StringIO()
    with ProgressBar("x", 0, stream=out) as bar:
        bar.advance(5)
    assert out.getvalue().startswith("x  5  ") and "[" not in out.getvalue()
