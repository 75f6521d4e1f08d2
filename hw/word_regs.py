"""Flip-flops that take what a sequencer needs from its instruction word a cycle ahead, and a FIFO's next level.

An engine loads an instruction word, waits for its tokens and starts the sequencer a cycle later; the word
then holds still until the sequencer is done.  So every value the sequencer decodes from the word (an opcode
test, a start address, a count) can be a flip-flop loaded from the word every cycle: at ``start`` it already
holds the word's value, and the sequencer's registers load from registers, not from the word's decode
(docs/hardware.md, the top level's timing).  A FIFO whose read enable must start at registers keeps its
room as a flip-flop computed from :func:`fifo_level_next`.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal, Value

__all__ = ["word_reg", "fifo_level_next"]


def word_reg(m: Module, value, name: str, shape=None, *, init: int = 0, reset_less: bool = False) -> Signal:
    """``value`` a cycle later, in a flip-flop named ``name`` (of ``shape``, default ``value``'s own)."""
    sig = Signal(shape if shape is not None else Value.cast(value).shape(), name=name, init=init,
                 reset_less=reset_less)
    m.d.sync += sig.eq(value)
    return sig


def fifo_level_next(q) -> Value:
    """The level ``q`` (an ``amaranth.lib.fifo`` FIFO) will have next cycle: its level, plus a write, less a read."""
    return q.level + (q.w_en & q.w_rdy) - (q.r_en & q.r_rdy)
