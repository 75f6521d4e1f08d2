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
        # begins at a register, not at a counter compare.  Each flag is a select, by the push and the pop, of
        # its value for each move (compares of this cycle's count, beside the handshakes): one LUT after the
        # engines' push and pop, not an adder and a compare (ulx3s: the compute-to-store queue's flags, 11.8 ns)
        avail = Signal()
        space = Signal(init=1)
        m.d.comb += [self.available.eq(avail), self.space.eq(space)]
        do_push = self.push & space
        do_pop = self.pop & avail
        up, down = do_push & ~do_pop, do_pop & ~do_push
        with m.If(up):
            m.d.sync += [count.eq(count + 1), avail.eq(1), space.eq(count != self.depth - 1)]
        with m.Elif(down):
            m.d.sync += [count.eq(count - 1), avail.eq(count != 1), space.eq(1)]
        return m
