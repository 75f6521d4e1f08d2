"""What the line units (vector, activation, norm, quant, softmax) share: lanes, layouts, streams, output register.

A line unit has ``L = cfg.line_width`` lanes (``AccelConfig.line_lanes``, or ``cols``); the
activation, norm and softmax units, whose lanes are the expensive ones (wide multipliers, exp
tables, dividers), have ``cfg.nonlinear_width`` (``AccelConfig.nonlinear_lanes``, a divisor of
``L``) and their sequencers cut lines into ``cfg.nonlinear_beats`` beats for them.  The
buffers hold ``cols``-wide lines; the sequencers cut each line into ``cols / L`` *beats* of ``L``
lanes (:mod:`~systolica.hw.line_serial`) and gather the output beats back into lines, so a unit
only ever sees beats: a row of ``n`` elements is ``ceil(n / cols) * cols / L`` beats, of which
the lanes past ``n`` (possibly whole beats) are padding.  Reductions over a row (sums, maxima,
first-index argmax) are exact integer operations on the elements in order, so they give the
same integers whatever ``L`` is.
"""

from __future__ import annotations

from amaranth import Module, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig

__all__ = ["LineUnit", "HDR", "ROW", "tree", "registered_output", "lane_mask"]

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
        """``cfg.nonlinear_width`` (the activation, norm and softmax units' lanes), after the same check."""
        LineUnit.lanes_of(cfg)
        return cfg.nonlinear_width

    @staticmethod
    def line(cfg: AccelConfig, shape=None, lanes: int | None = None) -> data.ArrayLayout:
        """One beat: ``lanes`` (default ``cfg.line_width``) elements of ``shape`` (default int32)."""
        n = LineUnit.lanes_of(cfg) if lanes is None else lanes
        return data.ArrayLayout(signed(32) if shape is None else shape, n)

    @property
    def lanes(self) -> int:
        """Lanes of this unit's beats."""
        return self._lanes
