"""Flip-flops that take what a sequencer needs from its instruction word a cycle ahead, and a FIFO's next level.

An engine loads an instruction word, waits for its tokens and starts the sequencer a cycle later; the word
then holds still until the sequencer is done.  So every value the sequencer decodes from the word (an opcode
test, a start address, a count) can be a flip-flop loaded from the word every cycle: at ``start`` it already
holds the word's value, and the sequencer's registers load from registers, not from the word's decode
(docs/hardware.md, the top level's timing).  A FIFO whose read enable must start at registers keeps its
room as a flip-flop computed from :func:`fifo_level_next`.  A flag that selects across a wide line is kept
as :func:`flag_copies` (registers Yosys cannot merge back into one), each copy selecting a part of the line
(:func:`lane_mux`), so that no single net reaches every bit of the line.  A pipeline stage's register of a
struct layout resets only its valid bit (:func:`stage_reg`): the data fields have no reset, so the engines'
reset reaches the flip-flops that decide something, not every bit of every stage (the issue of the top level's
timing: the soft reset had ~6,800 loads on ECP5).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data

__all__ = ["word_reg", "fifo_level_next", "free_room", "DISTINCT", "flag_copies", "reset_copies", "lane_mux", "stage_reg"]


def word_reg(m: Module, value, name: str, shape=None, *, init: int = 0, reset_less: bool = False) -> Signal:
    """``value`` a cycle later, in a flip-flop named ``name`` (of ``shape``, default ``value``'s own)."""
    sig = Signal(shape if shape is not None else Value.cast(value).shape(), name=name, init=init,
                 reset_less=reset_less)
    m.d.sync += sig.eq(value)
    return sig


def fifo_level_next(q) -> Value:
    """The level ``q`` (an ``amaranth.lib.fifo`` FIFO) will have next cycle: its level, plus a write, less a read."""
    return q.level + (q.w_en & q.w_rdy) - (q.r_en & q.r_rdy)


def free_room(m: Module, name: str, places: int, take, give, give2=0) -> Signal:
    """A flip-flop that is high while a queue of ``places`` has a free place: the places are counted down by
    ``take`` (a place claimed: this cycle's entry, wherever it waits on its way in) and up by ``give`` and
    ``give2`` (one left each), all 1-bit.  Next cycle's flag is a select of ``free >= 1`` and ``free >= 2``
    (flags of the count's own register) by the claim and the releases: one LUT after them, where
    ``level + in flight < depth`` was an adder and a compare (the LOAD engine's, GEMM prefetch's and STORE's
    room were among the ulx3s top level's slowest paths).  A claim while the flag is low must come with a
    release (the count never goes below zero)."""
    free = Signal(range(places + 1), name=f"{name}_free", init=places)
    room = Signal(name=name, init=1 if places else 0)
    up = give | give2
    m.d.sync += [free.eq(free - take + give + give2),
                 room.eq(Mux(take, Mux(give & give2, 1, Mux(up, free >= 1, free >= 2)), Mux(up, 1, free >= 1)))]
    return room


#: three flip-flops Yosys's ``opt_merge`` keeps apart although they load the same value: reset to 0, reset to 1,
#: and no reset (it merges registers only with the same reset and initial value)
DISTINCT = (dict(init=0), dict(init=1), dict(reset_less=True))


def flag_copies(m: Module, value, load, name: str, first: Signal | None = None) -> list[Signal]:
    """Three copies of the 1-bit ``value``, each a flip-flop loaded when ``load`` is high (valid a cycle later,
    as one register would be).  The copy reset to 1 reads 1 after a reset until its first load: use them where
    the flag is read only after a load.

    ``first``: a register the caller already loads with ``value`` when ``load`` is high (reset to 0); it is
    the first copy, instead of a fourth flip-flop that Yosys would merge into it anyway."""
    out = [] if first is None else [first]
    for k, kw in enumerate(DISTINCT[len(out):], start=len(out)):
        s = Signal(name=f"{name}_c{k}", **kw)
        with m.If(load):
            m.d.sync += s.eq(value)
        out.append(s)
    return out


def reset_copies(m: Module, value, rst, name: str) -> list[Signal]:
    """Three flip-flops, each ``value | rst`` a cycle later (``rst``: this domain's own reset), to be the resets of
    other domains on the same clock: registered, so those domains' flip-flops see one register's net, and three
    that Yosys cannot merge into one (the first is set by ``rst``, the others load ``value | rst`` without a
    reset, initially 1 and 0).  Named ``name``, ``{name}_c1``, ``{name}_c2``."""
    first = Signal(name=name, init=1)
    m.d.sync += first.eq(value)
    out = [first]
    for k, init in ((1, 1), (2, 0)):
        s = Signal(name=f"{name}_c{k}", init=init, reset_less=True)
        m.d.sync += s.eq(value | rst)
        out.append(s)
    return out


def lane_mux(sels: list, a, b, lane_bits: int) -> Value:
    """``Mux(sel, a, b)`` lane by lane (``lane_bits`` a lane), lane ``i`` selected by ``sels[i % len(sels)]``
    (copies of one flag, :func:`flag_copies`); the narrower of ``a`` and ``b`` is zero-extended, as by ``Mux``."""
    a, b = Value.cast(a).as_unsigned(), Value.cast(b).as_unsigned()
    width = max(len(a), len(b))
    a, b = Cat(a, Const(0, width - len(a))), Cat(b, Const(0, width - len(b)))
    assert width % lane_bits == 0, (width, lane_bits)
    n = width // lane_bits
    return Cat(*[Mux(sels[i % len(sels)], a[i * lane_bits:(i + 1) * lane_bits], b[i * lane_bits:(i + 1) * lane_bits])
                 for i in range(n)])


def stage_reg(layout: data.StructLayout, name: str, keep: tuple[str, ...] = ("v",)) -> data.View:
    """A register of ``layout`` (a view, used as a ``Signal(layout)`` would be) whose fields other than ``keep``
    are reset-less: one flip-flop group per field, named ``{name}_{field}``.  For pipeline stages whose data
    fields mean nothing while the stage's valid bit is low (every reader tests it): after a reset the valid bit
    is 0 and the data keep whatever they held."""
    fields = sorted(((f.offset, fname, f) for fname, f in layout), key=lambda t: t[0])
    parts = [Signal(f.shape, name=f"{name}_{fname}", reset_less=fname not in keep) for _, fname, f in fields]
    missing = set(keep) - {fname for _, fname, _ in fields}
    if missing:
        raise ValueError(f"{name}: no field {sorted(missing)} in the layout")
    return data.View(layout, Cat(*parts))
