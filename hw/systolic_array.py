"""Weight-stationary int8 systolic array: the matmul engine of prefill and decode.

Dataflow
--------
The array is ``R x C`` processing elements (``cfg.rows`` x ``cfg.cols``).  It holds
one *weight tile* ``W[n0:n0+C, k0:k0+R]``: PE ``(r, c)`` keeps ``W[n0+c, k0+r]``.
Each beat of the activation stream carries one row slice ``a[m, k0:k0+R]``; element
``r`` enters array row ``r`` (delayed ``r`` cycles) and goes along the row;
partial sums flow down the columns, one row per cycle, and leave the bottom as one
line ``out[m, n0:n0+C]`` (``C`` int32, all columns together).  The reduction runs
down the rows (K split across rows, "rows = reduction depth per pass" in
:class:`~systolica.config.AccelConfig`), the outputs across the columns (one output
per column = one lane of an accumulator line).

Why weight-stationary, and why broadcast rows rather than a diagonal wavefront:

* **Decode** (matrix x vector, batch 1) is memory bound: every weight byte is used
  exactly once, so the array can do at most ``B = dma_bytes * dma_ports`` MACs per
  cycle, whatever its shape.  What matters is that it *swallows* ``B`` weight bytes
  per cycle.  Weight-stationary with two weight registers per PE does: the weight
  stream loads ``P`` columns (``P * R >= B`` bytes) per beat into the *shadow*
  registers while the *active* ones compute; one activation beat per tile then
  uses the tile.  Output-
  stationary would need the weights column-wise (a transpose of the ``[out, in]``
  layout) and would use one row of PEs at batch 1.
* **Prefill** (matrix x matrix) reuses each loaded tile for ``M`` activation rows, so
  the array is busy ``M / max(M, C / P)`` of the time: 100 % once ``M >= C / P``
  (8 tokens on the default config).
* Weight writes travel down the rows with the same one-cycle-per-row skew as the
  activations, and a tile's first activation carries a *start* flag one row ahead
  of its data: row ``r`` copies its shadow into its active registers the cycle
  before that activation reaches it (activations enter through one register, so
  this holds for row 0 too), after the tile's last weight write, and in time for
  the next tile's first write.  The hand-over is therefore decided at the array's
  entry alone (a shadow-full flag), with no diagonal "switch" wave: the shadow
  refills from the cycle its tile's first activation enters.  A diagonal
  (TPU-style) wavefront would keep a tile alive ``R + C`` cycles after its last
  row and need three or more tiles held to keep decode at the DMA rate.
* Shadow and active registers rather than two banks and a multiplexer: the
  multiplier's input is a register (the DSP48's ``A1``/``A2`` pair), not a
  ``2:1`` mux per weight bit (measured on the 16 x 16 array: 2,361 -> 152 LUT).
* The activation goes along its row PE to PE (each PE registers it beside its
  multiplier, for the next PE too): column ``c`` computes ``c`` cycles after column 0,
  and ``C - 1 - c`` registers under it de-skew its sums, so a line's ``C`` sums leave
  together ``R + 2 + C - 1`` cycles after entry.  A broadcast (one register feeding the
  row's ``C`` multipliers) was the slowest path on ECP5 (92 MHz: 3.9-4.5 ns of routing to
  the MULT18X18Ds), and Yosys merges per-PE copies of one register.  Packed PEs
  (``macs_per_dsp = 2``, the DSP48's 25 x 18 with its own input registers) still
  broadcast.  The column of adders is a DSP48 ``PCIN -> PCOUT`` cascade.

The array does not accumulate across K tiles: each activation beat gives a partial
sum line.  The beat's ``tag`` (an accumulator address and an "accumulate" flag, say)
rides along to the output so that :class:`~systolica.hw.accumulator.Accumulator`
can add the line into the accumulator buffer.

Back-pressure: credits, not a clock enable (a global enable was the slowest net on
ECP5: 10.4 ns of routing to its 5,000 registers).  The pipeline never stalls; an
activation beat enters only while the output FIFO has room for it besides the lines
already in flight, so a stalled consumer stops the input, and idle input cycles travel
through as bubbles.  Without a FIFO (``out_fifo=0``) the consumer must take every line.
"""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal, signed
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig

from .line_unit import tree

__all__ = ["SystolicArray", "weight_cols_per_beat"]

#: rows whose packed products one DSP cascade sums (``macs_per_dsp = 2``): the low field of ``CHAIN`` products
#: must stay within 16 bits; ``BIAS`` keeps it non-negative (a product is in -16256 .. 16384)
CHAIN = 2
BIAS = CHAIN * 16256


def weight_cols_per_beat(cfg: AccelConfig) -> int:
    """Weight columns the array loads per beat: enough to swallow a full DMA beat.

    The smallest divisor ``P`` of ``cols`` with ``P * rows >= dma_bytes * dma_ports``
    (``cols`` when even a whole tile per beat is not enough).
    """
    need = cfg.dma_bytes * cfg.dma_ports
    for p in range(1, cfg.cols + 1):
        if cfg.cols % p == 0 and p * cfg.rows >= need:
            return p
    return cfg.cols


class SystolicArray(wiring.Component):
    """``R x C`` int8 weight-stationary systolic array with shadow and active weight registers.

    Parameters
    ----------
    cfg : AccelConfig
        Gives ``rows`` (R, reduction depth) and ``cols`` (C, output lanes).
    tag_bits : int
        Width of the opaque ``tag`` carried from each activation beat to its output
        line (default 17: a 16-bit accumulator line address and an accumulate flag).
    w_cols : int or None
        Weight columns per weight beat (``P``); default :func:`weight_cols_per_beat`.
    out_fifo : int or None
        Depth of the output FIFO that takes the lines of a stalled ``o_stream`` (default: the lines in flight
        and one, enough for a line a cycle; one cycle more of latency); 0: none, for a consumer that takes
        every line the cycle it is valid (the accumulator): ``o_stream.ready`` is then not looked at.

    Attributes
    ----------
    w_stream : In(stream)
        ``P`` columns of ``R`` int8: column ``j`` of beat ``g`` of a tile is
        ``W[n0 + g*P + j, k0:k0+R]`` (one scratchpad line of ``W`` when ``R == C``).
        ``C / P`` beats make a tile.
    a_stream : In(stream)
        ``data``: ``a[m, k0:k0+R]`` (R int8); ``last``: the tile's last row — the next beat
        takes the next tile from the shadow registers (so every tile needs at least one
        activation beat, the one with ``last``); ``tag``: passed through.
    o_stream : Out(stream)
        ``data``: ``sum_r a[m, k0+r] * W[n0+c, k0+r]`` for ``c < C`` (C int32, wrapping);
        ``last`` and ``tag`` of the activation beat.
    """

    def __init__(self, cfg: AccelConfig, *, tag_bits: int = 17, w_cols: int | None = None,
                 out_fifo: int | None = None):
        if not isinstance(cfg, AccelConfig):
            raise TypeError(f"cfg must be an AccelConfig, not {type(cfg).__name__}")
        p = weight_cols_per_beat(cfg) if w_cols is None else w_cols
        if not (isinstance(p, int) and p >= 1 and cfg.cols % p == 0):
            raise ValueError(f"w_cols={p!r} must be a positive divisor of cols={cfg.cols}")
        if not (isinstance(tag_bits, int) and 1 <= tag_bits <= 64):
            raise ValueError(f"tag_bits={tag_bits!r} must be an int in 1..64")
        self.cfg = cfg
        self.rows, self.cols, self.w_cols, self.tag_bits = cfg.rows, cfg.cols, p, tag_bits
        # the cycles column c's PEs see their row's activation after column 0's (one MAC a multiplier: passed
        # PE to PE along the row; packed PEs: broadcast along the row)
        self.skew = list(range(cfg.cols)) if cfg.macs_per_dsp == 1 else [0] * cfg.cols
        # entry to output register, in enabled cycles: the input registers (both streams' beats, after the
        # handshake), the activation input register, a cycle a row, the product register, the row's skew (then de-skewed: every column leaves together); packed PEs: one
        # more, the fabric sum of the DSP chains
        latency = cfg.rows + 3 + max(self.skew) + (cfg.macs_per_dsp == 2)
        # the output FIFO's depth: a line a cycle needs a place for every line in flight and the one read
        self.out_fifo = latency + 2 if out_fifo is None else out_fifo
        if not (isinstance(self.out_fifo, int) and (self.out_fifo == 0 or self.out_fifo >= 2)):
            raise ValueError(f"out_fifo={out_fifo!r} must be 0 (no FIFO) or a depth of at least 2")
        # ... and one more cycle through the FIFO
        self._pipe = latency
        self.latency = latency + (self.out_fifo > 0)
        self.a_layout = data.StructLayout({
            "data": data.ArrayLayout(signed(8), cfg.rows), "last": 1, "tag": tag_bits})
        self.w_layout = data.ArrayLayout(data.ArrayLayout(signed(8), cfg.rows), p)
        self.o_layout = data.StructLayout({
            "data": data.ArrayLayout(signed(32), cfg.cols), "last": 1, "tag": tag_bits})
        super().__init__({
            "w_stream": In(stream.Signature(self.w_layout)),
            "a_stream": In(stream.Signature(self.a_layout)),
            "o_stream": Out(stream.Signature(self.o_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        R, C, P = self.rows, self.cols, self.w_cols
        beats = C // P
        a, w, o = self.a_stream, self.w_stream, self.o_stream

        # back-pressure by credits: the pipeline never stalls; an activation beat enters only while the output
        # FIFO has a place for it besides the lines already in the array (none: the consumer takes every line)
        room = Const(1)
        if self.out_fifo:
            D = self.out_fifo
            fq = fifo.SyncFIFO(width=len(o.payload.as_value()), depth=D)
            m.submodules.out_fifo = fq
            owed = Signal(range(D + 1))  # lines in the array or the FIFO
            incr, decr, room = Signal(), Signal(), Signal()
            m.d.comb += decr.eq(fq.r_rdy & fq.r_en)
            m.d.sync += owed.eq(owed + incr - decr)
            m.d.comb += room.eq(owed < D)

        # --- shadow / active scoreboard, all at the array's entry (row-0 time) ----------
        shadow_full = Signal()  # the shadow registers hold a complete tile not yet taken into the active ones
        in_tile = Signal()  # the active tile has had its first activation beat but not its `last`
        load_cnt = Signal(range(beats))
        start = Signal()  # this activation beat is its tile's first: it takes the shadow tile along the rows
        m.d.comb += [
            a.ready.eq(room & (in_tile | shadow_full)),
            start.eq(room & a.valid & ~in_tile & shadow_full),
            # the shadow refills from the cycle its tile leaves for the active registers
            w.ready.eq(~shadow_full | start),
        ]
        w_fire = w.valid & w.ready
        a_fire = a.valid & a.ready
        tile_done = w_fire & (load_cnt == beats - 1)
        with m.If(w_fire):
            m.d.sync += load_cnt.eq(Mux(tile_done, 0, load_cnt + 1))
        with m.If(a_fire):
            m.d.sync += in_tile.eq(~a.payload.last)
        with m.If(tile_done):
            m.d.sync += shadow_full.eq(1)
        with m.Elif(start):
            m.d.sync += shadow_full.eq(0)

        # --- weight registers: the shadow written with one cycle of skew per row; the active taken from it the
        # cycle before the tile's first activation reaches the row (the activations enter one register late)
        shadow = [[Signal(signed(8), name=f"ws_{r}_{c}", reset_less=True) for c in range(C)] for r in range(R)]
        active = [[Signal(signed(8), name=f"wa_{r}_{c}", reset_less=True) for c in range(C)] for r in range(R)]
        # with the products in logic, each active weight has its multiple 3 w beside it (see _lut_product)
        lut3 = ([[Signal(signed(10), name=f"wa3_{r}_{c}", reset_less=True) for c in range(C)] for r in range(R)]
                if self.cfg.array_lut_muls and self.cfg.macs_per_dsp == 1 else None)
        # Both streams' beats go into registers after the handshake (every cycle, the fire beside them), and the
        # array works from those a cycle later: so the handshake (the scoreboard, the producers' FIFOs) drives a
        # few flip-flops, not the weight registers' enables (ulx3s: `shadow_full` and the shadow weights' enables
        # from the handshake were the array's slowest paths, 12.1 ns)
        w_in = [[Signal(signed(8), name=f"w_in_{j}_{r}", reset_less=True) for r in range(R)] for j in range(P)]
        a_in = [Signal(signed(8), name=f"a_in_{r}", reset_less=True) for r in range(R)]
        a_fire_r, start_r = Signal(name="a_fire_r"), Signal(name="start_r")
        m.d.sync += [a_fire_r.eq(a_fire), start_r.eq(start)]
        m.d.sync += [w_in[j][r].eq(w.payload[j][r]) for j in range(P) for r in range(R)]
        m.d.sync += [a_in[r].eq(a.payload.data[r]) for r in range(R)]
        # control of a weight write (enable, column group) as it reaches row r
        ctl_layout = data.StructLayout({"we": 1, "grp": range(beats)})
        ctl = [Signal(ctl_layout, name=f"wctl_{r}") for r in range(R)]
        m.d.sync += [ctl[0].we.eq(w_fire), ctl[0].grp.eq(load_cnt)]
        for r in range(1, R):
            m.d.sync += ctl[r].eq(ctl[r - 1])
        skew = self.skew
        for r in range(R):
            # this row's P weight bytes, delayed r cycles like the activations
            wd = [w_in[j][r] for j in range(P)]
            for d in range(r):
                nxt = [Signal(signed(8), name=f"wd_{r}_{d}_{j}", reset_less=True) for j in range(P)]
                # every cycle: the write's enable travels beside them (ctl); the fire as their enable reached
                # (R - 1) * P * 8 flip-flops from the handshake (ulx3s: the array's weight enables at 11.2 ns)
                m.d.sync += [n.eq(v) for n, v in zip(nxt, wd, strict=True)]
                wd = nxt
            # a skewed column takes its tile late, so its shadow must not take the next tile's weights before
            # then: the weight writes go along the row with the activations (column c's `skew` cycles late, as
            # its tile's hand-over), each PE's weight bytes from a register beside it (at least skew - c // P
            # cycles: column c's beat fires c // P cycles after the tile's first activation at the earliest;
            # at most skew: the tile is complete in the shadow before the next one is taken)
            late = {0: (ctl[r], wd)}
            for c in range(C):
                g, j = divmod(c, P)
                e = skew[c]
                for d in range(len(late), e + 1):
                    pc, pw = late[d - 1]
                    nc = Signal(ctl_layout, name=f"wctl_{r}_l{d}")
                    nw = [Signal(signed(8), name=f"wd_{r}_l{d}_{i}", reset_less=True) for i in range(P)]
                    m.d.sync += nc.eq(pc)
                    m.d.sync += [n.eq(v) for n, v in zip(nw, pw, strict=True)]  # (every cycle, as above)
                    late[d] = (nc, nw)
                lc, lw = late[e]
                with m.If(lc.we & (lc.grp == g)):
                    m.d.sync += shadow[r][c].eq(lw[j])

        # --- activations: row r sees element r r + 1 cycles after entry; the tile start goes one row ahead;
        # both then go along the row one PE a cycle (`skew`), each PE's activation a register of its own beside
        # its multiplier (a fan-out of one multiplier and the next PE's register)
        x = [[None] * C for _ in range(R)]
        st = [Signal(name=f"st_{r}") for r in range(R)]
        m.d.comb += st[0].eq(start_r)
        for r in range(R):
            chain = a_in[r]
            for d in range(r):
                nxt = Signal(signed(8), name=f"xd_{r}_{d}", reset_less=True)
                with m.If(a_fire_r if d == 0 else 1):  # the input's register: as the weights'
                    m.d.sync += nxt.eq(chain)
                chain = nxt
            xt, stt = [Signal(signed(8), name=f"x_{r}", reset_less=True)], [st[r]]
            with m.If(a_fire_r if r == 0 else 1):
                m.d.sync += xt[0].eq(chain)
            if r:
                m.d.sync += st[r].eq(st[r - 1])
            for d in range(1, max(skew) + 1):
                xt.append(Signal(signed(8), name=f"x_{r}_{d}", reset_less=True))
                stt.append(Signal(name=f"st_{r}_{d}"))
                m.d.sync += [xt[d].eq(xt[d - 1]), stt[d].eq(stt[d - 1])]
            for c in range(C):
                x[r][c] = xt[skew[c]]
                # the last weight write of the tile reached row r a cycle ago at the latest: take the tile
                with m.If(stt[skew[c]]):
                    m.d.sync += active[r][c].eq(shadow[r][c])
                    if lut3 is not None:
                        m.d.sync += lut3[r][c].eq(shadow[r][c] + (shadow[r][c] << 1))

        # --- PEs: product register, then the column adder chain ------------------------
        prev = self._packed_pes(m, x, active) if self.cfg.macs_per_dsp == 2 else self._pes(m, x, active, lut3)
        # de-skew: column c's sums wait the skew of the last column less its own
        for c in range(C):
            for d in range(max(skew) - skew[c]):
                nxt = Signal(prev[c].shape(), name=f"dsk_{c}_{d}", reset_less=True)
                m.d.sync += nxt.eq(prev[c])
                prev[c] = nxt

        # --- valid / last / tag ride along to the output (or its FIFO) ----------------
        side = data.StructLayout({"last": 1, "tag": self.tag_bits})
        s, v = Signal(side), a_fire
        m.d.comb += [s.last.eq(a.payload.last), s.tag.eq(a.payload.tag)]
        for d in range(self._pipe):
            nxt, nv = Signal(side, name=f"side_{d}", reset_less=True), Signal(name=f"side_valid_{d}")
            m.d.sync += nv.eq(v)
            with m.If(a_fire if d == 0 else 1):
                m.d.sync += nxt.eq(s)
            s, v = nxt, nv
        line = Signal(self.o_layout)
        m.d.comb += [line.last.eq(s.last), line.tag.eq(s.tag)]
        m.d.comb += [line.data[c].eq(prev[c]) for c in range(C)]
        if self.out_fifo:
            m.d.comb += [incr.eq(a_fire), fq.w_en.eq(v), fq.w_data.eq(line),
                         o.valid.eq(fq.r_rdy), o.payload.eq(fq.r_data), fq.r_en.eq(o.ready)]
        else:
            m.d.comb += [o.valid.eq(v), o.payload.eq(line)]
        return m

    def _pes(self, m: Module, x, wsel, w3=None) -> list[Signal]:
        """One multiplier per PE: product register, then the column adder chain (DSP48 ``PCIN -> PCOUT``);
        with ``array_lut_muls`` the product in logic from the weight and its multiple ``w3 = 3 w``.
        Returns the bottom row's column sums."""
        prev = None
        for r in range(self.rows):
            prods = [Signal(signed(16), name=f"prod_{r}_{c}", reset_less=True) for c in range(self.cols)]
            # r + 1 products in -16256 .. 16384: exact in this width (the int32 of the output never wraps)
            width = 1 + ((r + 1) * 16384).bit_length()
            sums = [Signal(signed(width), name=f"psum_{r}_{c}", reset_less=True) for c in range(self.cols)]
            for c in range(self.cols):
                m.d.sync += prods[c].eq(_lut_product(x[r][c], wsel[r][c], w3[r][c]) if self.cfg.array_lut_muls
                                        else x[r][c] * wsel[r][c])
                m.d.sync += sums[c].eq(prods[c] if prev is None else prev[c] + prods[c])
            prev = sums
        return prev

    def _packed_pes(self, m: Module, x, wsel) -> list[Signal]:
        """PEs two to a multiplier (``macs_per_dsp = 2``), their sums two rows deep in the multiplier's adder.

        Columns ``c`` and ``c + 1`` of a row see the same activation ``x``, so one ``8 x 25``-bit product
        ``x * (w1 * 2**16 + w0)`` (a DSP48's 25 x 18) holds both: ``x * w1`` above bit 16, ``x * w0`` below.
        The rows pair up into chains of ``CHAIN`` multipliers summed in the DSP's post-adder (``PCIN``
        cascade); the first of a chain also adds ``BIAS``.  A chain's low field then holds
        ``BIAS + sum(x * w0)`` in ``0 .. 2 * 32640 < 2**16`` (a product is in ``-16256 .. 16384``), so it never
        borrows from the high field: the chain's end splits into ``P[0:16] = BIAS + sum(x * w0)`` and
        ``P[16:] = sum(x * w1)`` by wiring alone.  The chains' fields add up in fabric, ``16 + bitlen(R)``
        bits wide, and the low column drops the biases once: exact, as the int32 of one MAC per DSP.  One
        more cycle than :meth:`_pes` (the fabric adder's register).  Returns the bottom row's column sums."""
        R, C = self.rows, self.cols
        width = 16 + R.bit_length()
        starts = list(range(0, R, CHAIN))
        ends = [min(s + CHAIN, R) - 1 for s in starts]
        fab, prev_end = None, -1  # fabric sums of the chains so far (registered after their last chain's end)
        for s, e in zip(starts, ends, strict=True):
            psum = None
            for r in range(s, e + 1):
                nxt = [Signal(signed(35), name=f"ppsum_{r}_{c}", reset_less=True) for c in range(0, C, 2)]
                for i, c in enumerate(range(0, C, 2)):
                    w0, w1 = wsel[r][c], wsel[r][c + 1]
                    packed = Signal(signed(25), name=f"wpack_{r}_{c}")
                    m.d.comb += packed.eq(w1 * (1 << 16) + w0)
                    prod = Signal(signed(33), name=f"pprod_{r}_{c}", reset_less=True)
                    m.d.sync += [prod.eq(x[r][c] * packed),
                                 nxt[i].eq((BIAS if psum is None else psum[i]) + prod)]
                psum = nxt
            # the chain's end: its two fields, added to the chains above (delayed a cycle to meet them)
            sums = [Signal(signed(width), name=f"psum_{e}_{c}", reset_less=True) for c in range(C)]
            late = fab
            for d in range(0 if fab is None else e - prev_end - 1):  # a chain's sums leave `length` cycles apart
                late, dly = [Signal(signed(width), name=f"pdly_{e}_{d}_{c}", reset_less=True) for c in range(C)], late
                m.d.sync += [a.eq(b) for a, b in zip(late, dly, strict=True)]
            for i, c in enumerate(range(0, C, 2)):
                lo, hi = psum[i][0:16], psum[i][16:35].as_signed()
                if fab is None:
                    m.d.sync += [sums[c].eq(lo - len(starts) * BIAS), sums[c + 1].eq(hi)]
                else:
                    m.d.sync += [sums[c].eq(late[c] + lo), sums[c + 1].eq(late[c + 1] + hi)]
            fab, prev_end = sums, e
        return fab


def _lut_product(x, w, w3):
    """``x * w`` of two int8 values in logic (``array_lut_muls``), radix 4: ``x``'s four 2-bit digits each select
    a multiple of the weight -- ``0, w, 2w, 3w`` for the three low digits (``w3 = 3 w`` is registered with the
    weight), ``0, w, -2w, -w`` for the signed top one (``-2 x7 + x6``) -- and the four terms are summed by a
    balanced tree: half the terms of ``w``'s eight partial products, so half the adders, for one more select
    input a bit; no ``$mul`` for Yosys to put on a multiplier."""
    xv = x.as_unsigned()
    terms = []
    for j in range(4):
        d = xv[2 * j:2 * j + 2]
        if j < 3:
            t = Mux(d[1], Mux(d[0], w3, w << 1), Mux(d[0], w, 0))
        else:
            t = Mux(d[1], Mux(d[0], -w, -(w << 1)), Mux(d[0], w, 0))
        terms.append(t << (2 * j))
    return tree(terms, lambda a, b: a + b)
