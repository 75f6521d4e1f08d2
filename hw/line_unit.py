"""What the line units (vector, activation, norm, quant, softmax) share: lanes, layouts, streams, output register.

A line unit has ``L = cfg.line_width`` lanes (``AccelConfig.line_lanes``, or ``cols``); the
activation, norm and softmax units, whose lanes are the expensive ones (wide multipliers, exp
tables, dividers), have ``cfg.nonlinear_width`` (``AccelConfig.nonlinear_lanes``, a divisor of
``L``) and their sequencers cut lines into ``cfg.nonlinear_beats`` beats for them (the norm and softmax
units: ``cfg.rowpass_width`` lanes, ``AccelConfig.rowpass_lanes``, by default the same).  The
buffers hold ``cols``-wide lines; the sequencers cut each line into ``cols / L`` *beats* of ``L``
lanes (:mod:`~systolica.hw.line_serial`) and gather the output beats back into lines, so a unit
only ever sees beats: a row of ``n`` elements is ``ceil(n / cols) * cols / L`` beats, of which
the lanes past ``n`` (possibly whole beats) are padding.  Reductions over a row (sums, maxima,
first-index argmax) are exact integer operations on the elements in order, so they give the
same integers whatever ``L`` is.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig

__all__ = ["LineUnit", "HDR", "ROW", "Stages", "Timed", "tree", "registered_output", "lane_mask"]

HDR, ROW = 0, 1  # beat kinds of the multi-pass units: a row's header, a beat of row data


def tree(xs, op):
    """Reduce ``xs`` pairwise with ``op``: a balanced tree, log2 deep rather than a chain across the lanes."""
    xs = list(xs)
    while len(xs) > 1:
        xs = [op(xs[k], xs[k + 1]) for k in range(0, len(xs) - 1, 2)] + xs[len(xs) - len(xs) % 2:]
    return xs[0]


def registered_output(m: Module, o) -> Signal:
    """The output register's handshake: ``o.valid`` drops once taken; returns ``en``, high when the
    register may load this cycle (empty, or being taken).  The unit sets ``o.valid`` / ``o.payload``
    synchronously when it loads, so the sink's write port sees no combinational path from the input."""
    en = Signal(name="out_en")
    m.d.comb += en.eq(~o.valid | o.ready)
    with m.If(o.ready):
        m.d.sync += o.valid.eq(0)
    return en


def lane_mask(m: Module, beat, n, lanes: int) -> list[Signal]:
    """``ok[c]``: lane ``c`` of beat ``beat`` (of its row) holds one of the row's ``n`` elements."""
    ok = [Signal(name=f"lane_ok_{c}") for c in range(lanes)]
    m.d.comb += [ok[c].eq(beat * lanes + c < n) for c in range(lanes)]
    return ok


class LineUnit(wiring.Component):
    """Base of the line units: checks the config, holds ``cfg`` and ``lanes``, builds the stream signatures.

    Subclasses call ``super().__init__(cfg, i_fields, o_fields)`` with their payload fields, which
    they build with :meth:`line` (one beat of ``lanes`` elements); ``error=True`` adds the sticky
    ``error`` output of the units that check beat kinds.
    """

    def __init__(self, cfg: AccelConfig, i_fields: dict, o_fields: dict, *, error: bool = False,
                 lanes: int | None = None):
        self.cfg = cfg
        self._lanes = LineUnit.lanes_of(cfg) if lanes is None else lanes
        self.i_layout = data.StructLayout(i_fields)
        self.o_layout = data.StructLayout(o_fields)
        members = {"i_stream": In(stream.Signature(self.i_layout)),
                   "o_stream": Out(stream.Signature(self.o_layout))}
        if error:
            members["error"] = Out(1)
        super().__init__(members)

    @staticmethod
    def lanes_of(cfg: AccelConfig) -> int:
        """``cfg.line_width``, after checking that ``cfg`` is an :class:`AccelConfig`."""
        if not isinstance(cfg, AccelConfig):
            raise TypeError(f"cfg must be an AccelConfig, not {type(cfg).__name__}")
        return cfg.line_width

    @staticmethod
    def nonlinear_lanes_of(cfg: AccelConfig) -> int:
        """``cfg.nonlinear_width`` (the activation unit's lanes), after the same check."""
        LineUnit.lanes_of(cfg)
        return cfg.nonlinear_width

    @staticmethod
    def rowpass_lanes_of(cfg: AccelConfig) -> int:
        """``cfg.rowpass_width`` (the norm and softmax units' lanes, on the row-pass sequencer), after the check."""
        LineUnit.lanes_of(cfg)
        return cfg.rowpass_width

    @staticmethod
    def line(cfg: AccelConfig, shape=None, lanes: int | None = None) -> data.ArrayLayout:
        """One beat: ``lanes`` (default ``cfg.line_width``) elements of ``shape`` (default int32)."""
        n = LineUnit.lanes_of(cfg) if lanes is None else lanes
        return data.ArrayLayout(signed(32) if shape is None else shape, n)

    @property
    def lanes(self) -> int:
        """Lanes of this unit's beats."""
        return self._lanes


class Stages:
    """Registers of one stall-as-a-whole pipeline (clock enable ``en``), and products split for 18x18 DSPs.

    ECP5's MULT18X18D (and a DSP48's 25x18) multiplies signed 18-bit operands; routing to and from
    one costs as much as the multiply, so :meth:`mul` registers its operands' pieces, the pieces'
    products, and each partial-product sum in a stage of its own (one carry chain a stage).
    """

    PIECE = 17  # low pieces are unsigned 17-bit: a signed 18-bit DSP operand

    def __init__(self, m: Module, en):
        self.m, self.en = m, en

    def reg(self, value, name: str, shape=None, *, control: bool = False) -> Signal:
        """``value`` one stage later (``shape`` defaults to the value's own); ``control``: reset (valid bits)."""
        s = Signal(value.shape() if shape is None else shape, name=name, reset_less=not control)
        with self.m.If(self.en):
            self.m.d.sync += s.eq(value)
        return s

    def delay(self, value, n: int, name: str, shape=None, *, control: bool = False):
        """``value`` ``n`` stages later."""
        for k in range(n):
            value = self.reg(value, f"{name}_d{k}", shape, control=control)
        return value

    @classmethod
    def pieces(cls, width: int) -> int:
        return 1 if width <= cls.PIECE + 1 else 2

    @classmethod
    def mul_latency(cls, wa: int, wb: int) -> int:
        """Stages :meth:`mul` takes for signed operands of ``wa`` and ``wb`` bits (at most 35 each)."""
        return {1: 1, 2: 2, 4: 3}[cls.pieces(wa) * cls.pieces(wb)]

    @classmethod
    def operand_bits(cls, x) -> int:
        """Bits of ``x`` as a signed multiplier operand."""
        return len(x) + (0 if x.shape().signed else 1)

    def _split(self, x, name):
        if len(x) <= self.PIECE + 1:
            return [(x.as_signed(), 0)]
        assert len(x) <= 2 * self.PIECE + 1, (name, len(x))
        return [(x[:self.PIECE].as_unsigned(), 0), (x[self.PIECE:].as_signed(), self.PIECE)]

    def mul(self, a, b, name: str) -> Signal:
        """``a * b`` (values registered by the caller, or constants) after :meth:`mul_latency` stages;
        unsigned operands count a zero sign bit."""
        a, b = (x.as_signed() if x.shape().signed else Cat(x, Const(0, 1)).as_signed() for x in (a, b))
        width = len(a) + len(b)
        pp = [(self.reg(x * y, f"{name}_pp{i}{j}"), sx + sy)
              for i, (x, sx) in enumerate(self._split(a, name)) for j, (y, sy) in enumerate(self._split(b, name))]
        if len(pp) == 1:
            return pp[0][0]
        if len(pp) == 2:
            (lo, _), (hi, sh) = pp
            return self.reg(lo + (hi << sh), f"{name}_p", signed(width))
        # ll + (lh + hl) << P + hh << 2P: ll (2P bits, unsigned) and hh << 2P do not overlap
        (ll, _), (lh, _), (hl, _), (hh, _) = pp
        mid = self.reg(lh + hl, f"{name}_mid")
        hilo = self.reg(Cat(ll[:2 * self.PIECE], hh).as_signed(), f"{name}_hilo")
        return self.reg(hilo + (mid << self.PIECE), f"{name}_p", signed(width))


class Timed:
    """Values tagged with their pipeline stage, over :class:`Stages`: :meth:`at` delays a value to a
    later stage (one register chain per value, shared by its uses), so that operands meet aligned."""

    def __init__(self, st: Stages):
        self.st = st
        self._chains: dict[int, list] = {}

    def at(self, tv, t: int):
        """``tv = (value, stage)`` as a value of stage ``t`` (``t >= stage``)."""
        v, t0 = tv
        if isinstance(v, Const):
            return v
        assert t >= t0, (t, t0)
        chain = self._chains.setdefault(id(v), [v])
        while len(chain) <= t - t0:
            chain.append(self.st.reg(chain[-1], f"{getattr(v, 'name', 'v')}_t{t0 + len(chain)}"))
        return chain[t - t0]

    def reg(self, fn, *tvs, name: str, shape=None):
        """``fn`` of the values ``tvs`` (aligned to the latest of them), registered: a stage later."""
        t = max(t0 for _, t0 in tvs)
        return self.st.reg(fn(*[self.at(tv, t) for tv in tvs]), name, shape), t + 1

    def mul(self, ta, tb, name: str):
        """The product of two registered values, :meth:`Stages.mul`'s stages later."""
        t = max(ta[1], tb[1])
        a, b = self.at(ta, t), self.at(tb, t)
        return self.st.mul(a, b, name), t + Stages.mul_latency(Stages.operand_bits(a), Stages.operand_bits(b))
