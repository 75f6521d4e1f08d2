"""The load engine's two words in flight (hw/load_engine.py), for the performance model's schedulers.

A LOAD leaves EXEC once its last burst is asked for (``OpCost.issue_cycles``) and the next word on the load engine
may start then; the reader answers in order, so a LOAD's beats follow the previous LOAD's, and every word's push
(its end) waits for the previous word's: a LOAD ends at the latest of its own cycles alone and ``tail`` cycles
(``OpCost.tail``: its beats and the lines' write-out) after the previous word's end, a word without beats at least
a cycle after it.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["load_end", "load_busy"]


def load_end(start: int, alone: int, issue: int, tail: int, prev_end: int) -> tuple[int, int]:
    """``(end, retire)`` of a word on the load engine that starts (leaves POP) at ``start``: ``alone`` is its end
    with nothing before it (start + EXEC cycles + 1), ``prev_end`` the previous load-engine word's end (-1: none);
    ``retire`` is the cycle it leaves EXEC (its PUSH state), after which the next word may start."""
    end = alone if prev_end < 0 else max(alone, prev_end + max(1, tail))
    return end, (start + issue + 1 if issue else alone)


def load_busy(words: Sequence[int], start: Sequence[int], end: Sequence[int]) -> int:
    """LOAD_BUSY: the cycles the load engine has a word in EXEC or data still owed (the union of the words'
    ``start .. end`` spans, ``words`` in program order)."""
    busy, upto = 0, -1
    for i in words:
        s, e = start[i], end[i]
        if s < 0:
            continue
        lo = s if s > upto else upto
        if e > lo:
            busy += e - lo
            upto = e
    return busy
