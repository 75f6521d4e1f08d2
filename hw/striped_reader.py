"""A LOAD's DMA striped over several AXI read ports (``config.load_ports``).

Decode reads every weight through all of the board's ports at once (GEMM_STREAM), so a LOAD that goes through
one port -- the KV cache's pages, a few hundred lines each -- takes that port's whole bandwidth for its length
and the weight stream, which takes every port's data in lockstep, waits as long.  Striped, burst ``b`` of the
transfer goes to port ``b mod P``: each port carries a P-th of the LOAD's beats, and the stream loses that.

Every port's R data goes into a FIFO of its own, ``FIFO_BURSTS`` bursts deep, and a burst is issued to a port
only while its FIFO has room for it, beside the bursts already in flight there (a credit per burst): a port's R
channel is never held by the LOAD, so a weight burst behind a LOAD burst on the same port (they share it through
a :class:`~systolica.hw.dma.ReadArbiter`, answered in order) is never held up by another port's.  The beats
leave in the transfer's order: a FIFO of the ports the bursts went to says which port's FIFO is next.

The interface is :class:`~systolica.hw.dma.DmaReader`'s, with ``axi`` the first port and ``axi1`` ...
the others; ``abort`` stops issuing and drains what is in flight and the FIFOs (the beats are dropped).
``issuing`` falls once the last burst is asked for: the next transfer may start then, its beats behind these.
An error response travels with its beat through the FIFO and raises ``bus_error`` as the beat is taken.
"""

from __future__ import annotations

from amaranth.hdl import Array, Const, Module, Signal
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig

from .axi import BURST_INCR, axi4_read_signature
from .dma import ADDR_BITS, _Walker

__all__ = ["StripedReader", "FIFO_BURSTS"]

#: bursts of ``max_burst`` beats each port's FIFO holds (and so the bursts in flight or waiting per port)
FIFO_BURSTS = 2


class StripedReader(wiring.Component):
    """Reads ``rows`` x ``beats`` beats over ``ports`` AXI read ports, burst by burst in turn, and streams them out
    in order (see the module docstring)."""

    def __init__(self, cfg: AccelConfig, ports: int):
        if ports < 2:
            raise ValueError(f"a striped reader needs at least 2 ports, got {ports}")
        self.cfg, self.ports = cfg, ports
        members = {"axi": Out(axi4_read_signature(ADDR_BITS, cfg.dma_bits))}
        members |= {f"axi{p}": Out(axi4_read_signature(ADDR_BITS, cfg.dma_bits)) for p in range(1, ports)}
        members |= {"start": In(1), "base": In(ADDR_BITS), "addr": In(32), "stride": In(32), "rows": In(16),
                    "beats": In(32), "abort": In(1),
                    "beat_valid": Out(1), "beat_ready": In(1), "beat_data": Out(cfg.dma_bits),
                    "busy": Out(1), "quiet": Out(1), "bus_error": Out(1), "issuing": Out(1)}
        super().__init__(members)

    def port(self, p: int):
        return self.axi if p == 0 else getattr(self, f"axi{p}")

    def elaborate(self, platform):
        m = Module()
        cfg, P = self.cfg, self.ports
        axis = [self.port(p) for p in range(P)]
        w = _Walker(m, cfg, self.start, self.base, self.addr, self.stride, self.rows, self.beats, "rd")
        depth = FIFO_BURSTS * min(cfg.max_burst, 4096 // cfg.dma_bytes)
        data = [fifo.SyncFIFOBuffered(width=cfg.dma_bits + 2, depth=depth) for _ in range(P)]  # beat, rlast, error
        for p, f in enumerate(data):
            m.submodules[f"data{p}"] = f
        m.submodules.order = order = fifo.SyncFIFOBuffered(width=max(1, (P - 1).bit_length()), depth=FIFO_BURSTS * P)

        nxt = Signal(range(P))  # the port of the next burst
        credits = [Signal(range(FIFO_BURSTS + 1), name=f"held{p}") for p in range(P)]  # bursts issued, not drained
        inflight = [Signal(range(FIFO_BURSTS + 2), name=f"inflight{p}") for p in range(P)]  # AR issued, no rlast
        room = Signal()
        m.d.comb += room.eq(Array(c < FIFO_BURSTS for c in credits)[nxt] & order.w_rdy)
        issue = Signal()
        m.d.comb += issue.eq(~Array(a.arvalid for a in axis)[nxt] & w.more & w.ready & ~self.abort & room)  # no start term (dma._Walker)
        for p, (a, f) in enumerate(zip(axis, data, strict=True)):
            m.d.comb += [a.arsize.eq(Const(cfg.dma_bytes.bit_length() - 1, 3)), a.arburst.eq(BURST_INCR)]
            with m.If(a.arvalid & a.arready):  # AR is a register: once valid it stays until accepted
                m.d.sync += a.arvalid.eq(0)
            with m.If(issue & (nxt == p)):
                m.d.sync += [a.arvalid.eq(1), a.araddr.eq(w.addr), a.arlen.eq(w.len - 1)]
            r_hs = a.rvalid & a.rready
            # the credit makes room for every beat in flight: R is taken at once (and drained after an abort)
            m.d.comb += [a.rready.eq(f.w_rdy | self.abort), f.w_en.eq(a.rvalid),
                         f.w_data.eq(a.rdata | (a.rlast << cfg.dma_bits) | ((a.rresp != 0) << (cfg.dma_bits + 1)))]
            m.d.sync += inflight[p].eq(inflight[p] + (issue & (nxt == p)) - (r_hs & a.rlast))
        with m.If(issue):
            m.d.sync += nxt.eq(0 if P == 1 else (nxt + 1) % P)
            w.advance(m)
        m.d.comb += [order.w_en.eq(issue), order.w_data.eq(nxt)]

        # out: beats of the port at the head of the order FIFO
        head = order.r_data
        heads = Array(f.r_rdy for f in data)
        words = Array(f.r_data for f in data)
        word = Signal(cfg.dma_bits + 2)
        m.d.comb += word.eq(words[head])
        valid = order.r_rdy & heads[head]
        take = Signal()
        m.d.comb += [take.eq(valid & (self.beat_ready | self.abort)), self.beat_valid.eq(valid & ~self.abort),
                     self.beat_data.eq(word[:cfg.dma_bits])]
        last = take & word[cfg.dma_bits]
        # an error response travels with its beat: reported as the beat is taken, by the transfer it belongs to
        m.d.comb += self.bus_error.eq(take & word[cfg.dma_bits + 1])
        m.d.comb += order.r_en.eq(last)
        for p, f in enumerate(data):
            m.d.comb += f.r_en.eq(take & (head == p))
            m.d.sync += credits[p].eq(credits[p] + (issue & (nxt == p)) - (last & (head == p)))
        with m.If(self.abort):  # no burst after an abort: the walker's start values load again (see _Walker)
            m.d.sync += w.more.eq(0)
        any_ar = _any([a.arvalid for a in axis])
        any_in = _any([i != 0 for i in inflight])
        m.d.comb += [self.quiet.eq(~any_ar & ~any_in),
                     self.busy.eq(w.more | ~self.quiet | (order.r_rdy & ~self.abort)), self.issuing.eq(w.more)]
        return m


def _any(bits):
    out = bits[0]
    for b in bits[1:]:
        out = out | b
    return out
