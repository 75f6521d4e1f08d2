"""AXI4 DMA: a 2-D strided burst reader and writer, and a read-port arbiter.

A transfer is ``rows`` rows of ``beats`` data beats; row ``r`` starts at
``base + addr + r * stride`` (physical bytes; ``addr`` and ``stride`` are 32-bit window offsets).  Every row is split into INCR bursts of
at most ``max_burst`` beats that never cross a 4 KiB boundary (an AXI rule).
Several bursts are kept in flight (``outstanding``) so the DRAM latency of one
burst hides behind the data of the previous ones.

Memory protection happens *before* a DMA is started: the decoder checks every
LOAD/STORE against the window with the formulas of ``systolica/layout.py``
(``dma_end``), so an engine never issues an address outside it.  ``abort`` (soft reset) stops issuing new bursts and
completes those in flight (write bursts with ``wstrb = 0``), so no AXI
transaction is ever cut in half; ``quiet`` says when nothing is in flight.

A response other than OKAY (``rresp`` / ``bresp`` SLVERR or DECERR) raises
``bus_error`` for the cycle the beat or the write response is taken: the
engine that owns the transfer reports it with its PC, and the top level
stops the run (see ``accelerator.py``).
"""

from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal, Value
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig

from .axi import BURST_INCR, axi4_read_signature, axi4_write_signature

__all__ = ["DmaReader", "DmaWriter", "ReadArbiter", "ADDR_BITS"]

ADDR_BITS = 64  # physical address width of the AXI master ports: WIN_BASE is a 64-bit CSR pair


def _burst_len(m, lo12, remaining, beat_bytes: int, max_burst: int, name: str):
    """Beats of the next burst: min(max_burst, remaining, beats left before the 4 KiB boundary).

    ``lo12``: the low 12 bits of the burst's physical address (a whole number of beats).  No comparison
    waits for a subtraction: "the page ends within ``cap`` beats" is ``lo12`` against a constant, and
    "``remaining`` ends before the page does" is the carry out of ``remaining * beat_bytes + lo12``, so the
    length is one carry chain and two multiplexers deep.  ``remaining`` is compared in the bits a burst
    length has; any higher bit set is "more than a burst" by itself (a wide OR).
    """
    sh = beat_bytes.bit_length() - 1
    to_4k = Signal(range(4096 // beat_bytes + 1), name=f"{name}_to_4k")
    n = Signal(range(max(max_burst, 4096 // beat_bytes) + 1), name=f"{name}_len")
    m.d.comb += to_4k.eq((4096 - lo12) >> sh)
    cap = min(max_burst, 4096 // beat_bytes)
    k = cap.bit_length()
    rem = Value.cast(remaining)
    high = (rem[k:] != 0) if len(rem) > k else Const(0)
    near = lo12 > 4096 - cap * beat_bytes  # to_4k < cap
    ends_first = Signal(14, name=f"{name}_end")  # >= 4096: remaining reaches the page boundary (or beyond)
    m.d.comb += ends_first.eq((rem[:k] << sh) + lo12)
    lt_page = ~high & (ends_first[12:] == 0)  # remaining < to_4k
    lt_cap = ~high & (rem[:k] < cap)  # remaining < cap
    m.d.comb += n.eq(Mux(near, Mux(lt_page, rem[:k], to_4k), Mux(lt_cap, rem[:k], cap)))
    # n == remaining: the burst ends the row (remaining up to the page's end, or up to cap)
    last = Signal(name=f"{name}_ends_row")
    m.d.comb += last.eq(~high & Mux(near, ends_first <= 4096, rem[:k] <= cap))
    return n, last


class _Walker:
    """Address generator shared by reader and writer: rows of beats, split into bursts.

    It walks 32-bit offsets into the window (the decoder has checked that the whole transfer lies
    inside it); the physical address ``base + offset`` is formed in its own register stage when a
    burst is issued.  The next burst's length is registered (``len``) and valid when ``ready``: the
    loop from one offset to the next is then one 32-bit add, not the 4 KiB arithmetic, the minimum
    and a 64-bit add in one cycle.  ``ready`` never costs a burst slot: an address is issued at most
    every other cycle anyway (``arvalid`` is a register).  The first length is computed from the
    registered start values in the cycle after ``start`` (no path from the engine's command into the
    length), so the first address goes out two cycles after ``start``.

    A transfer starts only while none is walking (``more`` low: the engines start the next word once
    ``issuing`` / ``busy`` has fallen), so ``more`` alone keeps a burst from issuing in the cycle of ``start``:
    the issue condition has no ``start`` term (on ulx3s ``start``, decoded from the engine's word, was the
    head of the LOAD walker's slowest path into ``rows_left``: 14.4 ns).
    """

    def __init__(self, m, cfg: AccelConfig, start, base, addr, stride, rows, beats, name, skip: int = 0):
        bb = cfg.dma_bytes
        self.skip = skip  # > 0: a paged stream (see DmaReader), rows continue where the last one ended
        # the walk's values have no reset: they load every cycle while no rows are left (``more`` low, as it is
        # after a reset), so only ``more`` and ``ready`` decide anything after one
        def reg(shape, tag):
            return Signal(shape, name=f"{name}_{tag}", reset_less=True)
        self.row_left, self.row_base, self.off = reg(16, "rows_left"), reg(32, "row_base"), reg(32, "off")
        self.base, self.rem, self.beats, self.stride = reg(ADDR_BITS, "base"), reg(32, "rem"), reg(32, "beats"), \
            reg(32, "stride")
        self.more = Signal(name=f"{name}_more")  # rows left (a register: the issue condition's first term)
        self.len = reg(range(max(cfg.max_burst, 4096 // bb) + 1), "len_r")  # loaded every cycle
        self.ready = Signal(name=f"{name}_len_ok")
        self.addr = Signal(ADDR_BITS, name=f"{name}_phys")  # base + off, for the AR/AW register
        self.lo12 = reg(12, "lo12")  # (base + off) mod 4096, kept beside off
        m.d.comb += self.addr.eq(self.base + self.off)
        nxt, ends_row = _burst_len(m, self.lo12, self.rem, bb, cfg.max_burst, name)
        # "this burst ends its row" (rem == len), a flip-flop loaded beside len from the same registers: the
        # compare of rem and len sat between them and the walker's enables (ulx3s: rem -> len's logic -> rem ==
        # len -> row_base / rows_left, 10.6 ns on a weight port)
        self.last = reg(1, "last_r")
        lo12_0 = (base[:12] + addr[:12])[:12]
        m.d.sync += [self.len.eq(nxt), self.last.eq(ends_row), self.ready.eq(1)]
        # between transfers (no rows left) the start values are loaded every cycle: the command's fields
        # are stable from before ``start``, so ``start`` itself only enables ``ready`` and ``more`` (no
        # path from the engine's token handshake into every walker register's enable)
        with m.If(~self.more):
            m.d.sync += [self.row_left.eq(rows), self.row_base.eq(addr), self.off.eq(addr), self.base.eq(base),
                         self.rem.eq(beats), self.beats.eq(beats), self.stride.eq(stride), self.lo12.eq(lo12_0)]
        with m.If(start):  # the first length follows from these registers a cycle later (ready low until then)
            m.d.sync += [self.ready.eq(0), self.more.eq((rows != 0) & (beats != 0))]
        self._bb = bb

    def advance(self, m):
        """Step past the burst of ``self.len`` beats just issued (the next length is ready a cycle later)."""
        m.d.sync += self.ready.eq(0)
        if self.skip:  # a paged stream: one run of bytes, jumping over the other ports' pages at every 4 KiB
            step = self.len * self._bb
            lo = Signal(13, name="pg_lo")
            m.d.comb += lo.eq(self.lo12 + step)
            nxt = self.off + step + Mux(lo[12], self.skip, 0)  # a burst never crosses 4 KiB: lo[12] is "page done"
            m.d.sync += [self.off.eq(nxt), self.lo12.eq(lo[:12]), self.rem.eq(self.rem - self.len)]
            with m.If(self.last):  # (rem == len)
                m.d.sync += [self.row_left.eq(self.row_left - 1), self.rem.eq(self.beats),
                             self.more.eq(self.row_left != 1)]
            return
        with m.If(self.last):  # (rem == len)
            nxt = self.row_base + self.stride
            m.d.sync += [self.row_left.eq(self.row_left - 1), self.row_base.eq(nxt), self.off.eq(nxt),
                         self.rem.eq(self.beats), self.more.eq(self.row_left != 1),
                         self.lo12.eq((self.base[:12] + self.row_base[:12] + self.stride[:12])[:12])]
        with m.Else():
            step = self.len * self._bb
            m.d.sync += [self.off.eq(self.off + step), self.rem.eq(self.rem - self.len),
                         self.lo12.eq((self.lo12 + step)[:12])]


class DmaReader(wiring.Component):
    """Reads ``rows`` x ``beats`` beats from DRAM and streams them out in order; ``beat_ready`` holds the R channel.

    ``issuing`` is high while the transfer still has bursts to ask for: once it falls, the next transfer may
    ``start`` while this one's beats are still arriving (they come first: one AXI ID, answered in order).
    A beat with an error response raises ``bus_error`` in the cycle it is taken.

    ``skip > 0`` makes it a *paged* reader (a weight port of GEMM_STREAM): the ``rows * beats`` beats are one
    run from ``addr`` that jumps ``skip`` bytes (the other ports' pages) every time it reaches a 4 KiB page
    boundary of the window (``base`` is page aligned); ``stride`` is unused.
    """

    def __init__(self, cfg: AccelConfig, outstanding: int = 4, skip: int = 0, holdable: bool = False):
        self.cfg, self.outstanding, self.skip, self.holdable = cfg, outstanding, skip, holdable
        members = {
            "axi": Out(axi4_read_signature(ADDR_BITS, cfg.dma_bits)),
            "start": In(1), "base": In(ADDR_BITS), "addr": In(32), "stride": In(32), "rows": In(16), "beats": In(32),
            "abort": In(1),
            "beat_valid": Out(1), "beat_ready": In(1), "beat_data": Out(cfg.dma_bits),
            "busy": Out(1), "quiet": Out(1), "bus_error": Out(1), "issuing": Out(1),
        }
        if holdable:  # ``hold``: issue no new burst while high (the bursts in flight go on)
            members["hold"] = In(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg, axi = self.cfg, self.axi
        w = _Walker(m, cfg, self.start, self.base, self.addr, self.stride, self.rows, self.beats, "rd", self.skip)
        m.d.comb += self.bus_error.eq(axi.rvalid & axi.rready & (axi.rresp != 0))
        inflight = Signal(range(self.outstanding + 2))
        ar_hs = axi.arvalid & axi.arready
        r_last = axi.rvalid & axi.rready & axi.rlast
        m.d.sync += inflight.eq(inflight + ar_hs - r_last)
        m.d.comb += [axi.arsize.eq(Const((cfg.dma_bytes).bit_length() - 1, 3)), axi.arburst.eq(BURST_INCR),
                     axi.rready.eq(self.beat_ready | self.abort)]  # an abort drains what is in flight
        # AR is a register: once valid it stays until accepted, whatever happens to abort (AXI rule)
        with m.If(ar_hs):
            m.d.sync += axi.arvalid.eq(0)
        issue = ~axi.arvalid & w.more & w.ready & ~self.abort & (inflight < self.outstanding)  # no start term: _Walker
        set_ar = issue & ~self.hold if self.holdable else issue
        # quiet (no address waiting, no burst in flight) as a flip-flop loaded with its next value: the compare of
        # the in-flight count was the head of the compute engine's instruction state's enable (a weight port's
        # quiet -> busy -> exec_done, 10.5 ns on ulx3s)
        quiet = Signal(name="rd_quiet", init=1)
        m.d.sync += quiet.eq(~(set_ar | (axi.arvalid & ~ar_hs)) & (inflight + ar_hs - r_last == 0))
        with m.If(set_ar):
            m.d.sync += [axi.arvalid.eq(1), axi.araddr.eq(w.addr), axi.arlen.eq(w.len - 1)]
            w.advance(m)
        with m.If(self.abort):  # no burst after an abort: the walker's start values load again (see _Walker)
            m.d.sync += w.more.eq(0)
        m.d.comb += [self.beat_valid.eq(axi.rvalid & ~self.abort), self.beat_data.eq(axi.rdata),
                     self.quiet.eq(quiet), self.busy.eq(w.more | ~quiet), self.issuing.eq(w.more)]
        return m


class DmaWriter(wiring.Component):
    """Writes ``rows`` x ``beats`` beats taken from the ``beat_*`` stream to DRAM; busy until every B."""

    def __init__(self, cfg: AccelConfig, outstanding: int = 4):
        self.cfg, self.outstanding = cfg, outstanding
        super().__init__({
            "axi": Out(axi4_write_signature(ADDR_BITS, cfg.dma_bits)),
            "start": In(1), "base": In(ADDR_BITS), "addr": In(32), "stride": In(32), "rows": In(16), "beats": In(32),
            "abort": In(1),
            "beat_valid": In(1), "beat_ready": Out(1), "beat_data": In(cfg.dma_bits),
            "busy": Out(1), "quiet": Out(1), "bus_error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, axi = self.cfg, self.axi
        w = _Walker(m, cfg, self.start, self.base, self.addr, self.stride, self.rows, self.beats, "wr")
        m.submodules.lens = lens = fifo.SyncFIFO(width=9, depth=self.outstanding + 1)
        inflight = Signal(range(self.outstanding + 2))  # AW issued (or pending), B not yet received
        aw_hs = axi.awvalid & axi.awready
        b_hs = axi.bvalid & axi.bready
        m.d.comb += self.bus_error.eq(b_hs & (axi.bresp != 0))
        m.d.comb += [axi.awsize.eq(Const(cfg.dma_bytes.bit_length() - 1, 3)), axi.awburst.eq(BURST_INCR),
                     axi.bready.eq(1)]
        issue = Signal()
        m.d.comb += issue.eq(~axi.awvalid & w.more & w.ready & ~self.abort & (inflight < self.outstanding))
        m.d.sync += inflight.eq(inflight + issue - b_hs)
        with m.If(aw_hs):
            m.d.sync += axi.awvalid.eq(0)
        m.d.comb += [lens.w_en.eq(aw_hs), lens.w_data.eq(axi.awlen + 1)]
        with m.If(issue):
            m.d.sync += [axi.awvalid.eq(1), axi.awaddr.eq(w.addr), axi.awlen.eq(w.len - 1)]
            w.advance(m)
        with m.If(self.abort):
            m.d.sync += w.more.eq(0)

        # W: beats of the bursts whose AW was accepted, in order; after abort, empty beats (wstrb=0).
        # `open_` is the FIFO's r_rdy (level != 0) as a flip-flop of its own, loaded with the next level's test:
        # the level's compare in front of W's valid and the engine's beat handshake was the ulx3s top level's
        # slowest routed path (r_level -> wvalid -> the W slice, 11.3 ns)
        open_ = Signal(name="w_open")
        m.d.sync += open_.eq(Mux(lens.w_en, 1, Mux(lens.r_en, lens.level >= 2, lens.level != 0)))
        sent = Signal(9)
        last = open_ & (sent + 1 == lens.r_data)
        m.d.comb += [axi.wvalid.eq(open_ & (self.beat_valid | self.abort)), axi.wlast.eq(last),
                     axi.wdata.eq(Mux(self.abort, 0, self.beat_data)),
                     axi.wstrb.eq(Mux(self.abort, 0, (1 << cfg.dma_bytes) - 1)),
                     self.beat_ready.eq(open_ & axi.wready & ~self.abort)]
        with m.If(axi.wvalid & axi.wready):
            m.d.sync += sent.eq(Mux(last, 0, sent + 1))
            m.d.comb += lens.r_en.eq(last)
        m.d.comb += [self.quiet.eq(~axi.awvalid & (inflight == 0) & ~open_),
                     self.busy.eq(w.more | ~self.quiet)]
        return m


class ReadArbiter(wiring.Component):
    """Shares one AXI read port between ``n`` managers; responses are routed by a FIFO of grants.

    All requests use one AXI ID, so the subordinate answers in order and the
    FIFO of who asked knows where each burst of R beats belongs.

    The grant is a register: ``arready`` to a manager is ``grant == i`` and the port's room, both
    flip-flops, so no manager's handshake waits on another's ``arvalid`` (the round-robin choice only
    loads the grant register).  The grant stays where it is while nobody else asks, so a lone manager
    pays nothing; moving it to another manager takes a cycle.
    """

    def __init__(self, cfg: AccelConfig, n: int, depth: int = 8):
        self.n, self.depth = n, depth
        sig = axi4_read_signature(ADDR_BITS, cfg.dma_bits)
        members = {f"m{i}": In(sig) for i in range(n)}
        members["out"] = Out(sig)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        reqs = [getattr(self, f"m{i}") for i in range(self.n)]
        out = self.out
        # buffered: the head's manager and its valid flag are flip-flops, so an R beat's routing starts at
        # registers (a grant reaches the head two cycles after its AR handshake; no burst answers sooner)
        m.submodules.tags = tags = fifo.SyncFIFOBuffered(width=max(1, (self.n - 1).bit_length()), depth=self.depth)
        grant = Signal(range(self.n))
        room = out.arready & tags.w_rdy  # both flip-flops (the port's register slice, the FIFO's level)
        hs = Signal()
        with m.Switch(grant):
            for i, r in enumerate(reqs):
                with m.Case(i):
                    m.d.comb += [out.araddr.eq(r.araddr), out.arlen.eq(r.arlen), out.arsize.eq(r.arsize),
                                 out.arburst.eq(r.arburst), out.arvalid.eq(r.arvalid & tags.w_rdy),
                                 r.arready.eq(room), hs.eq(r.arvalid & room)]
        m.d.comb += [tags.w_en.eq(hs), tags.w_data.eq(grant)]
        # the next grant: the granted manager keeps it while it asks and is not accepted now (AXI: a shown
        # request stays until accepted); otherwise the first other asker after it, round robin (later
        # m.d.comb assignments win, so walk from the farthest candidate to the nearest)
        pick = Signal(range(self.n))
        m.d.comb += pick.eq(grant)
        for off in reversed(range(1, self.n)):
            for k, r in enumerate(reqs):
                with m.If((grant == (k - off) % self.n) & r.arvalid):
                    m.d.comb += pick.eq(k)
        keep = Signal()
        with m.Switch(grant):
            for i, r in enumerate(reqs):
                with m.Case(i):
                    m.d.comb += keep.eq(r.arvalid & ~hs)
        m.d.sync += grant.eq(Mux(keep, grant, pick))
        # R: to the manager at the head of the tag FIFO
        for i, r in enumerate(reqs):
            here = tags.r_rdy & (tags.r_data == i)
            m.d.comb += [r.rdata.eq(out.rdata), r.rresp.eq(out.rresp), r.rlast.eq(out.rlast),
                         r.rvalid.eq(out.rvalid & here)]
            with m.If(here):
                m.d.comb += out.rready.eq(r.rready)
        m.d.comb += tags.r_en.eq(out.rvalid & out.rready & out.rlast)
        return m
