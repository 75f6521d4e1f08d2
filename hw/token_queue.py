"""Dependency-token queue between two engines (VTA-style).

A token carries no data: the queue is a saturating counter of ``depth``
tokens.  The producer pushes only when ``space`` is high (an engine whose
push would overflow waits), the consumer pops only when ``available`` is high.
Push and pop in the same cycle leave the count unchanged.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["TokenQueue"]


class TokenQueue(wiring.Component):
    """Counter of ``depth`` dependency tokens.

    Parameters
    ----------
    depth
        Tokens the queue holds (``AccelConfig.queue_depth``).
    """

    def __init__(self, depth: int):
        if depth < 1:
            raise ValueError(f"token queue depth must be >= 1, not {depth}")
        self.depth = depth
        super().__init__({
            "push": In(1), "pop": In(1),
            "available": Out(1), "space": Out(1), "count": Out(range(depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        count = self.count
        # available and space are flip-flops loaded with the next count's flags (the same values a
        # comparison of count would give, a cycle's logic earlier): the engines' start and push logic
        # begins at a register, not at a counter compare
        nxt = Signal.like(count)
        avail = Signal()
        space = Signal(init=1)
        m.d.comb += [self.available.eq(avail), self.space.eq(space)]
        do_push = self.push & space
        do_pop = self.pop & avail
        m.d.comb += nxt.eq(count)
        with m.If(do_push & ~do_pop):
            m.d.comb += nxt.eq(count + 1)
        with m.Elif(do_pop & ~do_push):
            m.d.comb += nxt.eq(count - 1)
        m.d.sync += [count.eq(nxt), avail.eq(nxt != 0), space.eq(nxt != self.depth)]
        return m
