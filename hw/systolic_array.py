"""Weight-stationary int8 systolic array: the matmul engine of prefill and decode.

Dataflow
--------
The array is ``R x C`` processing elements (``cfg.rows`` x ``cfg.cols``).  It holds
one *weight tile* ``W[n0:n0+C, k0:k0+R]``: PE ``(r, c)`` keeps ``W[n0+c, k0+r]``.
Each beat of the activation stream carries one row slice ``a[m, k0:k0+R]``; element
``r`` enters array row ``r`` (delayed ``r`` cycles) and is broadcast along the row;
partial sums flow down the columns, one row per cycle, and leave the bottom as one
line ``out[m, n0:n0+C]`` (``C`` int32, all columns together).  The reduction runs
down the rows (K split across rows, "rows = reduction depth per pass" in
:class:`~systolica.config.AccelConfig`), the outputs across the columns (one output
per column = one lane of an accumulator line).

Why weight-stationary, and why broadcast rows rather than a diagonal wavefront:

* **Decode** (matrix x vector, batch 1) is memory bound: every weight byte is used
  exactly once, so the array can do at most ``B = dma_bytes * dma_ports`` MACs per
  cycle, whatever its shape.  What matters is that it *swallows* ``B`` weight bytes
  per cycle.  Weight-stationary with two weight banks does: the weight stream
  loads ``P`` columns (``P * R >= B`` bytes) per beat into the idle bank while the
  other bank computes; one activation beat per tile then uses the tile.  Output-
  stationary would need the weights column-wise (a transpose of the ``[out, in]``
  layout) and would use one row of PEs at batch 1.
* **Prefill** (matrix x matrix) reuses each loaded tile for ``M`` activation rows, so
  the array is busy ``M / max(M, C / P)`` of the time: 100 % once ``M >= C / P``
  (8 tokens on the default config).
* Weight writes travel down the rows with the same one-cycle-per-row skew as the
  activations, so a row switches to a new tile exactly when that tile's first
  activation reaches it.  The bank hand-over is therefore decided at the array's
  entry alone (a two-entry scoreboard), with no diagonal "switch" wave: a bank
  can be refilled the cycle after its last activation entered.  A diagonal
  (TPU-style) wavefront would keep a tile alive ``R + C`` cycles after its last
  row and need three or more banks to keep decode at the DMA rate.
* Broadcasting along a row costs a fan-out of ``C`` but removes the output de-skew
  registers: all ``C`` sums of a row leave together, ``R + 1`` cycles after entry.
  The column of adders is a DSP48 ``PCIN -> PCOUT`` cascade.

The array does not accumulate across K tiles: each activation beat gives a partial
sum line.  The beat's ``tag`` (an accumulator address and an "accumulate" flag, say)
rides along to the output so that :class:`~systolica.hw.accumulator.Accumulator`
can add the line into the accumulator buffer.

Back-pressure: a global clock enable.  The whole pipeline advances when the output
register is empty or being read (``en = ~o.valid | o.ready``); idle input cycles
travel through as bubbles.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig

__all__ = ["SystolicArray", "weight_cols_per_beat"]


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
    """``R x C`` int8 weight-stationary systolic array with two weight banks.

    Parameters
    ----------
    cfg : AccelConfig
        Gives ``rows`` (R, reduction depth) and ``cols`` (C, output lanes).
    tag_bits : int
        Width of the opaque ``tag`` carried from each activation beat to its output
        line (default 17: a 16-bit accumulator line address and an accumulate flag).
    w_cols : int or None
        Weight columns per weight beat (``P``); default :func:`weight_cols_per_beat`.

    Attributes
    ----------
    w_stream : In(stream)
        ``P`` columns of ``R`` int8: column ``j`` of beat ``g`` of a tile is
        ``W[n0 + g*P + j, k0:k0+R]`` (one scratchpad line of ``W`` when ``R == C``).
        ``C / P`` beats make a tile.
    a_stream : In(stream)
        ``data``: ``a[m, k0:k0+R]`` (R int8); ``last``: the tile's last row — after it
        the tile's bank is free for the tile after next (so every tile needs at least one
        activation beat, the one with ``last``); ``tag``: passed through.
    o_stream : Out(stream)
        ``data``: ``sum_r a[m, k0+r] * W[n0+c, k0+r]`` for ``c < C`` (C int32, wrapping);
        ``last`` and ``tag`` of the activation beat.
    """

    def __init__(self, cfg: AccelConfig, *, tag_bits: int = 17, w_cols: int | None = None):
        if not isinstance(cfg, AccelConfig):
            raise TypeError(f"cfg must be an AccelConfig, not {type(cfg).__name__}")
        p = weight_cols_per_beat(cfg) if w_cols is None else w_cols
        if not (isinstance(p, int) and p >= 1 and cfg.cols % p == 0):
            raise ValueError(f"w_cols={p!r} must be a positive divisor of cols={cfg.cols}")
        if not (isinstance(tag_bits, int) and 1 <= tag_bits <= 64):
            raise ValueError(f"tag_bits={tag_bits!r} must be an int in 1..64")
        self.cfg = cfg
        self.rows, self.cols, self.w_cols, self.tag_bits = cfg.rows, cfg.cols, p, tag_bits
        self.latency = cfg.rows + 1  # entry to output register, in enabled cycles
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

        en = Signal()  # global advance: the output register is empty or being taken
        m.d.comb += en.eq(~o.valid | o.ready)

        # --- two-bank scoreboard, all at the array's entry (row-0 time) ---------------
        full = Signal(2)  # bank holds a complete tile not yet released by `last`
        load_bank, use_bank = Signal(), Signal()
        load_cnt = Signal(range(beats))
        m.d.comb += [
            w.ready.eq(en & ~full.bit_select(load_bank, 1)),
            a.ready.eq(en & full.bit_select(use_bank, 1)),
        ]
        w_fire = w.valid & w.ready
        a_fire = a.valid & a.ready
        tile_done = w_fire & (load_cnt == beats - 1)
        with m.If(w_fire):
            m.d.sync += load_cnt.eq(Mux(tile_done, 0, load_cnt + 1))
            with m.If(tile_done):
                m.d.sync += load_bank.eq(~load_bank)
        with m.If(a_fire & a.payload.last):
            m.d.sync += use_bank.eq(~use_bank)
        for b in range(2):
            with m.If(tile_done & (load_bank == b)):
                m.d.sync += full[b].eq(1)
            with m.Elif(a_fire & a.payload.last & (use_bank == b)):
                m.d.sync += full[b].eq(0)

        # --- weight registers, written with one cycle of skew per row -----------------
        wreg = [[[Signal(signed(8), name=f"w{b}_{r}_{c}") for c in range(C)] for r in range(R)]
                for b in range(2)]
        # control of a weight write (enable, bank, column group) as it reaches row r
        ctl_layout = data.StructLayout({"we": 1, "bank": 1, "grp": range(beats)})
        ctl = [Signal(ctl_layout, name=f"wctl_{r}") for r in range(R)]
        m.d.comb += [ctl[0].we.eq(w_fire), ctl[0].bank.eq(load_bank), ctl[0].grp.eq(load_cnt)]
        for r in range(1, R):
            with m.If(en):
                m.d.sync += ctl[r].eq(ctl[r - 1])
        for r in range(R):
            # this row's P weight bytes, delayed r cycles like the activations
            wd = [w.payload[j][r] for j in range(P)]
            for d in range(r):
                nxt = [Signal(signed(8), name=f"wd_{r}_{d}_{j}") for j in range(P)]
                with m.If(en):
                    m.d.sync += [n.eq(v) for n, v in zip(nxt, wd, strict=True)]
                wd = nxt
            for b in range(2):
                for g in range(beats):
                    with m.If(en & ctl[r].we & (ctl[r].bank == b) & (ctl[r].grp == g)):
                        m.d.sync += [wreg[b][r][g * P + j].eq(wd[j]) for j in range(P)]

        # --- activations: row r sees element r (and the bank) r cycles after entry ----
        x = [Signal(signed(8), name=f"x_{r}") for r in range(R)]
        bk = [Signal(name=f"bk_{r}") for r in range(R)]
        m.d.comb += [x[0].eq(a.payload.data[0]), bk[0].eq(use_bank)]
        for r in range(1, R):
            chain = a.payload.data[r]
            for d in range(r - 1):
                nxt = Signal(signed(8), name=f"xd_{r}_{d}")
                with m.If(en):
                    m.d.sync += nxt.eq(chain)
                chain = nxt
            with m.If(en):
                m.d.sync += [x[r].eq(chain), bk[r].eq(bk[r - 1])]

        # --- PEs: product register, then the column adder chain ------------------------
        pes = self._packed_pes if self.cfg.macs_per_dsp == 2 else self._pes
        prev = pes(m, en, x, bk, wreg)

        # --- valid / last / tag ride along R + 1 cycles to the output -----------------
        side = data.StructLayout({"valid": 1, "last": 1, "tag": self.tag_bits})
        s = Signal(side)
        m.d.comb += [s.valid.eq(a_fire), s.last.eq(a.payload.last), s.tag.eq(a.payload.tag)]
        for d in range(R + 1):
            nxt = Signal(side, name=f"side_{d}")
            with m.If(en):
                m.d.sync += nxt.eq(s)
            s = nxt
        m.d.comb += [
            o.valid.eq(s.valid),
            o.payload.last.eq(s.last),
            o.payload.tag.eq(s.tag),
        ]
        m.d.comb += [o.payload.data[c].eq(prev[c]) for c in range(C)]
        return m

    def _pes(self, m: Module, en, x, bk, wreg) -> list[Signal]:
        """One multiplier per PE: product register, then the column adder chain (DSP48 ``PCIN -> PCOUT``).
        Returns the bottom row's column sums."""
        prev = None
        for r in range(self.rows):
            prods = [Signal(signed(16), name=f"prod_{r}_{c}") for c in range(self.cols)]
            sums = [Signal(signed(32), name=f"psum_{r}_{c}") for c in range(self.cols)]
            with m.If(en):
                for c in range(self.cols):
                    wsel = Mux(bk[r], wreg[1][r][c], wreg[0][r][c])
                    m.d.sync += prods[c].eq(x[r] * wsel)
                    # int32 wrap, as the hardware accumulator: truncation on assignment
                    m.d.sync += sums[c].eq(prods[c] if prev is None else prev[c] + prods[c])
            prev = sums
        return prev

    def _packed_pes(self, m: Module, en, x, bk, wreg) -> list[Signal]:
        """PEs two to a multiplier (``macs_per_dsp = 2``): columns ``c`` and ``c + 1`` of a row see the same
        activation ``x``, so one ``8 x 25``-bit product ``x * (w1 * 2**16 + w0)`` (a DSP48's 25 x 18) holds both:
        ``x * w0`` in bits 0..15 (|x * w0| <= 2**14, a signed 16-bit field) and ``x * w1`` above, off by
        the borrow of a negative low field: ``x * w1 = P[16:] + P[15]``.  The column sums run in fabric,
        ``16 + bitlen(R)`` bits wide (``R`` products of at most ``2**14``): exact, as the int32 of one MAC
        per DSP.  Returns the bottom row's column sums."""
        R, C = self.rows, self.cols
        width = 16 + R.bit_length()
        prev = None
        for r in range(R):
            sums = [Signal(signed(width), name=f"psum_{r}_{c}") for c in range(C)]
            for c in range(0, C, 2):
                w0 = Mux(bk[r], wreg[1][r][c], wreg[0][r][c])
                w1 = Mux(bk[r], wreg[1][r][c + 1], wreg[0][r][c + 1])
                packed = Signal(signed(25), name=f"wpack_{r}_{c}")
                hi = Signal(signed(9), name=f"whi_{r}_{c}")  # w1 - borrow of w0: in -129..127
                m.d.comb += [hi.eq(w1 - w0[7]), packed.eq(Cat(w0.as_signed()[0:8], w0[7].replicate(8), hi))]
                prod = Signal(signed(33), name=f"pprod_{r}_{c}")
                lo_p, hi_p = Signal(signed(16), name=f"prod_{r}_{c}"), Signal(signed(16), name=f"prod_{r}_{c + 1}")
                with m.If(en):
                    m.d.sync += prod.eq(x[r] * packed)
                m.d.comb += [lo_p.eq(prod[0:16].as_signed()), hi_p.eq(prod[16:33].as_signed() + prod[15])]
                with m.If(en):
                    for j, pj in ((c, lo_p), (c + 1, hi_p)):
                        m.d.sync += sums[j].eq(pj if prev is None else prev[j] + pj)
            prev = sums
        return prev
