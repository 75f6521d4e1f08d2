"""The accelerator top level: CSRs, fetch, decode, three engines, token queues, buffers, AXI ports.

Ports (flat names, so that Vivado's IP packager infers the interfaces):
``ap_clk``, ``ap_rst_n`` (active low, synchronous), the AXI4-Lite subordinate
``s_axi_control_*``, the AXI4 manager(s) ``m_axi_gmem<i>_*`` with **64-bit
addresses** (``WIN_BASE_HI:WIN_BASE_LO`` + the 32-bit offsets of the program;
WIN_BASE must be 4 KiB aligned, as GEMM_STREAM's weight pages are), and
``interrupt``.  Every AXI channel leaves through a register slice (:mod:`.axi_slice`).  Reads: fetch, LOAD and GEMM_STREAM's weight port 0 share
``gmem0``; weight port ``p`` has ``gmem<p>`` to itself.  Writes: STORE through
``gmem1`` (``gmem0`` with one port); the other write channels stay idle.

Run control: START resets the engines (the buffers keep their contents),
then fetch begins at PROG_BASE.  A run ends when the decoder has stopped
(FINISH dispatched, or a fault found) and every engine has drained; or when the
engines deadlock on tokens -- no engine executing, each one idle with an empty
command queue or blocked on a token pop/push, at least one blocked, and the
decoder stopped or waiting to dispatch into a full queue.  The deadlock is
reported at the PC of the oldest blocked instruction, unless a decode fault
stopped dispatch first (then that fault is reported, as the golden simulator does).  Before STATUS says
DONE, every AXI transaction in flight has completed.  SOFT_RESET aborts:
no new bursts, the ones in flight complete (writes with ``wstrb = 0``), then
the engines reset and STATUS clears.

An AXI error response (SLVERR / DECERR) stops the run with ``BUS_ERROR``: on a
LOAD or STORE at that engine's PC (the oldest if two fail in one cycle), the
cycle after the response (a register), the way SOFT_RESET does (no new bursts, the ones in flight complete,
writes with ``wstrb = 0``; then the engines reset, so nothing queued runs
afterwards); on an instruction fetch, through the decoder at the pc of the word
that could not be read, after every instruction before it has finished.  A buffer line
read in the cycle it is written (hw/buffers.py: the block RAMs answer with either word)
stops the run the same way with ``BUFFER_COLLISION`` and the compute engine's pc.
"""

from __future__ import annotations

from amaranth.hdl import ClockDomain, DomainRenamer, Module, Mux, Signal
from amaranth.lib import enum as aenum
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig
from systolica.csr import CTRL_SOFT_RESET, CTRL_START, IRQ_DONE, STATUS_BUSY, STATUS_DONE, STATUS_ERROR
from systolica.faults import Fault

from .axi import axi4_lite_signature, axi4_signature, connect_flat
from .axi_slice import AxiSlice
from .buffers import build_buffers
from .compute_engine import ComputeEngine
from .csr_file import CSR_ADDR_BITS, CsrFile
from .decode import InstructionDecoder
from .dma import ADDR_BITS, ReadArbiter
from .engines import StoreEngine, buffer_ports
from .fetch import InstructionFetch
from .load_engine import LoadEngine
from .striped_reader import FIFO_BURSTS
from .token_queue import TokenQueue
from .word_regs import reset_copies, word_reg

__all__ = ["Accelerator", "top_port_names", "ARB_DEPTH"]

#: bursts gmem0's read arbiter keeps in flight (its grant FIFO): weight port 0 keeps up to 16 (stream_outstanding)
ARB_DEPTH = 16


class _Run(aenum.Enum, shape=3):
    IDLE = 0
    RESET = 1
    START = 2
    RUN = 3
    FINISH = 4
    ABORT = 5
    BUS_FAULT = 6


def top_port_names(cfg: AccelConfig) -> list[str]:
    """The top-level port names, in signature order (what a Vivado TCL script may rely on)."""
    return list(Accelerator.signature_members(cfg))


class HardwareConfigError(ValueError):
    """An :class:`AccelConfig` that is valid but that this top level cannot build, with every reason."""


def config_problems(cfg: AccelConfig) -> list[str]:
    """Why this top level cannot be built for ``cfg`` (beyond AccelConfig's own checks); empty if it can.

    The rules are the ones the units enforce when they are built; they are collected here so that a
    board sweep or ``systolica build`` can ask before elaborating anything.
    """
    from .engines import beats_per_line
    from .fetch import WORD_BITS

    problems = []
    if cfg.rows != cfg.cols:
        problems.append(f"the GEMM sequencer needs a square array (a K tile is one scratchpad line): "
                        f"rows={cfg.rows}, cols={cfg.cols}")
    if cfg.dma_bits > WORD_BITS:
        problems.append(f"instruction fetch needs dma_bits <= {WORD_BITS}, config has {cfg.dma_bits}")
    try:
        beats_per_line(cfg)
    except ValueError as e:
        problems.append(str(e))
    if cfg.cols % 2:
        problems.append(f"cols={cfg.cols} must be even: ROPE rotates pairs of lanes")
    return problems


class Accelerator(wiring.Component):
    """The whole accelerator for one :class:`~systolica.config.AccelConfig`."""

    @staticmethod
    def signature_members(cfg: AccelConfig) -> dict:
        members = {"ap_clk": In(1), "ap_rst_n": In(1)}
        for name, mem in axi4_lite_signature(CSR_ADDR_BITS, 32).flip().members.items():
            members[f"s_axi_control_{name}"] = mem
        for p in range(cfg.dma_ports):
            for name, mem in axi4_signature(ADDR_BITS, cfg.dma_bits).members.items():
                members[f"m_axi_gmem{p}_{name}"] = mem
        members["interrupt"] = Out(1)
        return members

    def __init__(self, cfg: AccelConfig, *, uram: bool = False):
        """``uram``: map the large buffers to UltraRAM (``ram_style = "ultra"``; UltraScale+ targets)."""
        problems = config_problems(cfg)
        if problems:
            raise HardwareConfigError(f"cannot build the accelerator for config {cfg.name!r}: " + "; ".join(problems))
        self.cfg, self.uram = cfg, uram
        buffer_ports(cfg)
        super().__init__(self.signature_members(cfg))

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        m.domains.sync = cd = ClockDomain("sync")
        m.d.comb += [cd.clk.eq(self.ap_clk), cd.rst.eq(~self.ap_rst_n)]

        m.submodules.csr = csr = CsrFile(cfg)
        connect_flat(m, self, "s_axi_control", csr.bus, csr.bus.signature.flip(), manager=False)

        rst_next = Signal()
        # The engines' reset: three flip-flops Yosys keeps apart (hw/word_regs.py reset_copies), each the reset of
        # a clock domain of its own on ap_clk -- the engines and queues ("eng"), the compute engine ("comp"), its
        # row-pass and attention sequencers ("lines") -- and nothing else: the AXI reset reaches the engines only
        # through these registers (high while it is, and the cycle after), so an engine's flip-flop sees one
        # registered reset net, not the AXI reset or'ed with the soft reset and a copy in two LUTs on their way
        # (the ulx3s route's critical path, 10.45 ns of routing).  CSRs, run control and the AXI slices stay on
        # sync, reset by ap_rst_n alone.
        core_rst, rst_comp, rst_lines = reset_copies(m, rst_next, cd.rst, "core_rst")
        for name, rst in (("eng", core_rst), ("comp", rst_comp), ("lines", rst_lines)):
            dom = ClockDomain(name)
            m.domains += dom
            m.d.comb += [dom.clk.eq(self.ap_clk), dom.rst.eq(rst)]

        def core(name, elab, domain="eng"):  # engines and queues restart on START and after SOFT_RESET; CSRs do not
            m.submodules[name] = DomainRenamer(domain)(elab)
            return elab

        fetch = core("fetch", InstructionFetch(cfg))
        dec = core("decode", InstructionDecoder(cfg))
        load = core("load", LoadEngine(cfg))
        comp = core("compute", ComputeEngine(cfg, line_domain="lines"), "comp")
        store = core("store", StoreEngine(cfg))
        arb = core("rd_arb", ReadArbiter(cfg, 3, depth=ARB_DEPTH))  # as many bursts as weight port 0 keeps
        q = {n: core(f"tq_{n}", TokenQueue(cfg.queue_depth)) for n in ("l2c", "c2l", "c2s", "s2c")}
        engines = (load, comp, store)

        # ---- AXI: fetch, LOAD and weight port 0 share gmem0's read channels; weight port p > 0 owns gmem<p>'s;
        # STORE owns the write channels of gmem1 (gmem0 with one port)
        wiring.connect(m, fetch=fetch.axi, arb=arb.m0)
        wiring.connect(m, load=load.rd, arb=arb.m1)
        wiring.connect(m, compute=comp.wrd0, arb=arb.m2)
        wr_port = "m_axi_gmem1" if cfg.dma_ports > 1 else "m_axi_gmem0"

        def sliced(name, manager, port):  # every channel through a register slice (hw/axi_slice.py)
            sl = m.submodules[f"{name}_slice"] = AxiSlice(manager.signature)
            wiring.connect(m, manager, sl.s)
            connect_flat(m, self, port, sl.m, sl.m.signature, manager=True)

        sliced("rd0", arb.out, "m_axi_gmem0")
        for p in range(1, cfg.dma_ports):
            if p < cfg.load_ports:  # a striped LOAD shares the port with weight port p (hw/striped_reader.py)
                arb_p = core(f"rd_arb{p}", ReadArbiter(cfg, 2, depth=ARB_DEPTH + FIFO_BURSTS))
                wiring.connect(m, compute=getattr(comp, f"wrd{p}"), arb=arb_p.m0)
                wiring.connect(m, load=getattr(load, f"rd{p}"), arb=arb_p.m1)
                sliced(f"rd{p}", arb_p.out, f"m_axi_gmem{p}")
            else:
                sliced(f"rd{p}", getattr(comp, f"wrd{p}"), f"m_axi_gmem{p}")
        sliced("wr", store.wr, wr_port)
        for p in range(cfg.dma_ports):  # channels nobody uses: never valid, always ready
            for name, mem in axi4_signature(ADDR_BITS, cfg.dma_bits).members.items():
                used = name.startswith(("ar", "r")) or \
                       (f"m_axi_gmem{p}" == wr_port and name.startswith(("aw", "w", "b")))
                if not used and mem.flow == wiring.Out:
                    port = getattr(self, f"m_axi_gmem{p}_{name}")
                    m.d.comb += port.eq(1 if name in ("rready", "bready") else 0)

        # ---- control registers to the datapath
        win_base = Signal(ADDR_BITS)
        m.d.comb += win_base.eq(csr.win_base_lo | (csr.win_base_hi << 32))
        m.d.comb += [fetch.prog_base.eq(csr.prog_base), fetch.prog_len.eq(csr.prog_len),
                     fetch.win_base.eq(win_base), fetch.win_size.eq(csr.win_size),
                     dec.win_size.eq(csr.win_size), load.win_base.eq(win_base), store.win_base.eq(win_base),
                     comp.win_base.eq(win_base)]
        m.d.comb += [dec.in_valid.eq(fetch.valid), fetch.ready.eq(dec.in_ready), dec.in_word.eq(fetch.word),
                     dec.in_pc.eq(fetch.pc), dec.in_end.eq(fetch.end), dec.in_end_code.eq(fetch.end_code),
                     fetch.stop.eq(dec.stopped)]
        for idx, e in enumerate(engines):
            m.d.comb += [e.cmd_valid.eq(dec.cmd_valid[idx]), e.cmd_data.eq(dec.cmd_data),
                         dec.cmd_ready[idx].eq(e.cmd_ready)]

        # ---- token queues: l2c load->compute, c2l compute->load, c2s compute->store, s2c store->compute
        links = (("l2c", load, "next", comp, "prev"), ("c2l", comp, "prev", load, "next"),
                 ("c2s", comp, "next", store, "prev"), ("s2c", store, "prev", comp, "next"))
        for name, src, src_side, dst, dst_side in links:
            tq = q[name]
            m.d.comb += [tq.push.eq(getattr(src, f"push_{src_side}")), getattr(src, f"{src_side}_space").eq(tq.space),
                         tq.pop.eq(getattr(dst, f"pop_{dst_side}")), getattr(dst, f"{dst_side}_avail").eq(tq.available)]

        m.d.comb += load.next_count.eq(q["l2c"].count)  # the load engine reserves its pushes (hw/load_engine.py)
        # block-RAM buffers: one write and one read port each; `collided`: a line read in the cycle it was written
        _, collided = build_buffers(m, cfg, load, comp, store, uram=self.uram)

        # ---- run control
        run = Signal(_Run)
        # abort: run is ABORT or BUS_FAULT, as a flip-flop set and cleared beside run's moves into and out of
        # them (decoded from run, it and the engines' logic behind it were the slowest placed paths of the ulx3s
        # top level)
        abort = Signal(name="abort")
        start, soft_reset = Signal(name="start"), Signal(name="soft_reset")
        busy, done, error = Signal(), Signal(), Signal()
        quiet = fetch.quiet & load.dma_quiet & store.dma_quiet & comp.dma_quiet
        # an abort's end waits on `quiet` registered while `abort` held the DMA still (nothing issues in a cycle
        # abort is high, so quiet then stays true): the AND over every engine's DMA state, the run control and the
        # reset copies' inputs in one cycle were the ulx3s route's critical path (12.0 ns); the abort ends a
        # cycle later
        quiet_a = Signal(name="quiet_aborted")
        m.d.sync += quiet_a.eq(quiet & abort)
        # The engines' reset (core_rst and its copies, above) is 1 in the RESET cycle, and the cycle after a bus
        # fault has drained (nothing queued runs on; abort holds the DMA still in that cycle).
        # The engines' abort, high while `abort` or the engines' reset is (and fetch's also in FINISH): flip-flops
        # loaded with the next values (`abort_n`, `rst_next`, `fin_n`), three copies Yosys keeps apart, not an OR
        # of two registers in front of every engine's DMA (ulx3s: `abort | core_rst` -> LOAD's beat -> its line
        # counters' set/reset, 12.1 ns).  `finishing` is run == FINISH as a flip-flop of its own.
        abort_n, fin_n = Signal(name="abort_n"), Signal(name="fin_n")
        finishing = Signal(name="finishing")
        m.d.comb += [abort_n.eq(abort), fin_n.eq(finishing)]
        m.d.sync += [abort.eq(abort_n), finishing.eq(fin_n)]
        ab_ls, ab_store, ab_comp = reset_copies(m, abort_n | rst_next, cd.rst, "eng_abort")
        ab_fetch = Signal(name="fetch_abort", init=1)
        m.d.sync += ab_fetch.eq(abort_n | rst_next | fin_n)
        # start: run is START, as a flip-flop (RESET goes on to START unless it ends a soft reset or one is asked
        # for): fetch's burst issue and the decoder's state start at a register, not a decode of run
        m.d.sync += start.eq((run == _Run.RESET) & busy & ~soft_reset)
        m.d.comb += [fetch.start.eq(start), dec.start.eq(start),
                     fetch.abort.eq(ab_fetch), load.abort.eq(ab_ls), store.abort.eq(ab_store), comp.abort.eq(ab_comp)]
        m.d.comb += [csr.status.eq(Mux(busy, STATUS_BUSY, 0) | Mux(done, STATUS_DONE, 0) | Mux(error, STATUS_ERROR, 0)),
                     self.interrupt.eq((csr.irq_enable & csr.irq_status & IRQ_DONE) != 0)]
        code = Signal(4)
        pc = Signal(32)
        m.d.comb += [csr.error_code.eq(code), csr.error_pc.eq(pc)]

        # drained, a cycle late (a register: the AND of every engine's and DMA's idle flags was on the error code's
        # and pc's paths, 12.8 ns on ulx3s).  Once true it stays true (nothing starts again), and it is low in the
        # first RUN cycle (loaded only in RUN: the decoder's stopped flag of the last run is cleared by then)
        drained = Signal(name="drained")
        m.d.sync += drained.eq(dec.stopped & quiet & load.idle & comp.idle & store.idle & (run == _Run.RUN))
        # stuck, a cycle late (a register: the engines' idle and blocked flags, each a decode of its token queues,
        # were five LUTs deep into the count's reset, 11.1 ns on ulx3s); a deadlock is stopped a cycle later
        # (in three registers of a few terms each, ANDed after them)
        stuck_parts = [word_reg(m, (dec.stopped | dec.dispatch_blocked) & (load.idle | load.blocked), "stuck_dl"),
                       word_reg(m, (comp.idle | comp.blocked) & (store.idle | store.blocked), "stuck_cs"),
                       word_reg(m, load.blocked | comp.blocked | store.blocked, "stuck_any")]
        stuck = stuck_parts[0] & stuck_parts[1] & stuck_parts[2]
        stuck_for = Signal(2)
        m.d.sync += stuck_for.eq(Mux(stuck & (run == _Run.RUN), Mux(stuck_for == 3, 3, stuck_for + 1), 0))
        # the smallest pc among the blocked engines, in three registered steps (the blocked engines' pcs, the
        # smaller of two and the third, then the minimum: one 32-bit compare a stage, ECP5 12.3 ns for two): it is
        # read only once the engines have been stuck for three cycles (stuck_for == 3), when nothing has moved
        # since, so neither the token queues' logic nor the compares run into the fault's pc register
        oldest = Signal(32)
        cs = [Signal(32, name=f"blocked_pc{i}") for i in range(3)]
        m.d.sync += [c.eq(Mux(e.blocked, e.pc, 0xFFFF_FFFF)) for c, e in zip(cs, engines, strict=True)]
        m01, c2 = Signal(32, name="blocked_pc01"), Signal(32, name="blocked_pc2_r")
        m.d.sync += [m01.eq(Mux(cs[0] < cs[1], cs[0], cs[1])), c2.eq(cs[2]), oldest.eq(Mux(m01 < c2, m01, c2))]

        # an error response is seen four cycles after its beat: first each engine's flag and pc are registered as
        # they are (no select: the R channel's handshake decides the flag, and it was on the 32 enables of a
        # selected pc, 11.8 ns on ulx3s), then the pcs of the engines whose transfer got one, then the oldest
        # (smallest) of them, so neither the R channels' logic nor the 32-bit compares run into the run control
        # (an engine keeps its pc for cycles after its transfer's last beat: its DMA, then the token handshake,
        # end first)
        bus_seen, bus_err = Signal(), Signal()
        bus_pc = Signal(32)
        es = [Signal(32, name=f"bus_pc{i}") for i in range(3)]
        # (the compute engine's is its GEMM_STREAM's, which may run on behind later instructions: config.attn_beside;
        # the load engine's that of the LOAD the beat belongs to, which may have a later LOAD issuing behind it)
        e_err = [word_reg(m, e.bus_error, f"bus_err{i}") for i, e in enumerate(engines)]
        e_pc = [word_reg(m, e.pc if e is store else e.bus_pc, f"bus_at{i}", reset_less=True) for i, e in enumerate(engines)]
        m.d.sync += [bus_seen.eq(e_err[0] | e_err[1] | e_err[2])]
        m.d.sync += [r.eq(Mux(f, p, 0xFFFF_FFFF)) for r, f, p in zip(es, e_err, e_pc, strict=True)]
        # (then the smaller of two and the third, then the minimum: a compare a stage, the flag delayed beside)
        e01, e2, bus_seen2 = Signal(32, name="bus_pc01"), Signal(32, name="bus_pc2_r"), Signal(name="bus_seen2")
        m.d.sync += [e01.eq(Mux(es[0] < es[1], es[0], es[1])), e2.eq(es[2]), bus_seen2.eq(bus_seen),
                     bus_err.eq(bus_seen2), bus_pc.eq(Mux(e01 < e2, e01, e2))]

        # a buffer collision (hw/buffers.py _collision) stops the run as a bus error does, with the compute engine's
        # pc of a cycle before (the flag is two cycles behind the ports)
        coll_err = Signal(name="coll_err")
        coll_pc = Signal(32, name="coll_pc")
        m.d.sync += [coll_err.eq(collided), coll_pc.eq(comp.pc)]

        ctrl = csr.ctrl_data
        m.d.comb += soft_reset.eq(csr.ctrl_stb & ((ctrl & CTRL_SOFT_RESET) != 0))
        with m.Switch(run):
            with m.Case(_Run.IDLE), m.If(csr.ctrl_stb & ((ctrl & CTRL_START) != 0)):
                m.d.sync += [run.eq(_Run.RESET), busy.eq(1), done.eq(0), error.eq(0), code.eq(0), pc.eq(0)]
                m.d.comb += rst_next.eq(1)
            with m.Case(_Run.RESET):  # (an abort's end clears the error code and pc here, a cycle after `quiet`)
                m.d.sync += [run.eq(_Run.START), code.eq(0), pc.eq(0)]
            with m.Case(_Run.START):
                m.d.sync += run.eq(_Run.RUN)
            with m.Case(_Run.RUN):
                with m.If(bus_err):
                    m.d.sync += [run.eq(_Run.BUS_FAULT), code.eq(Fault.BUS_ERROR), pc.eq(bus_pc)]
                    m.d.comb += abort_n.eq(1)
                with m.Elif(coll_err):
                    m.d.sync += [run.eq(_Run.BUS_FAULT), code.eq(Fault.BUFFER_COLLISION), pc.eq(coll_pc)]
                    m.d.comb += abort_n.eq(1)
                with m.Elif(drained):
                    m.d.sync += [run.eq(_Run.FINISH), code.eq(Mux(dec.fault, dec.fault_code, 0)),
                                 pc.eq(Mux(dec.fault, dec.fault_pc, 0))]
                    m.d.comb += fin_n.eq(1)
                with m.Elif(stuck_for == 3):  # a decode fault that stopped dispatch explains the stall: it wins
                    m.d.sync += [run.eq(_Run.FINISH), code.eq(Mux(dec.fault, dec.fault_code, Fault.TOKEN_DEADLOCK)),
                                 pc.eq(Mux(dec.fault, dec.fault_pc, oldest))]
                    m.d.comb += fin_n.eq(1)
            # FINISH: fetch stopped (`finishing`, above); report once nothing is in flight
            with m.Case(_Run.FINISH), m.If(quiet):
                m.d.sync += [run.eq(_Run.IDLE), busy.eq(0), done.eq(1), error.eq(code != 0)]
                m.d.comb += [csr.irq_status_set.eq(IRQ_DONE), fin_n.eq(0)]
            # BUS_FAULT: as ABORT, then DONE with the error instead of a silent reset
            with m.Case(_Run.BUS_FAULT), m.If(quiet_a):
                m.d.sync += [run.eq(_Run.IDLE), busy.eq(0), done.eq(1), error.eq(1)]
                m.d.comb += [csr.irq_status_set.eq(IRQ_DONE), rst_next.eq(1), abort_n.eq(0)]
            # (not the error code and pc: `quiet`, an AND over every engine's DMA, was on their 32 enables, 10.5 ns
            # on ulx3s; RESET, next, clears them)
            with m.Case(_Run.ABORT), m.If(quiet_a):
                m.d.comb += [rst_next.eq(1), abort_n.eq(0)]
                m.d.sync += [run.eq(_Run.RESET), busy.eq(0), done.eq(0), error.eq(0)]
        with m.If(soft_reset):
            m.d.sync += run.eq(_Run.ABORT)
            m.d.comb += [rst_next.eq(0), abort_n.eq(1), fin_n.eq(0)]  # the abort drains first; its end resets the engines
        with m.If((run == _Run.RESET) & ~busy):  # the reset that ends a soft reset starts nothing
            m.d.sync += run.eq(_Run.IDLE)
            m.d.comb += abort_n.eq(0)

        self._counters(m, csr, run, engines, comp)
        return m

    def _counters(self, m, csr, run, engines, comp):
        cfg = self.cfg
        bb = cfg.dma_bytes
        rd_p = [getattr(self, f"m_axi_gmem{p}_rvalid") & getattr(self, f"m_axi_gmem{p}_rready")
                for p in range(cfg.dma_ports)]
        rd_beats = Signal(range(cfg.dma_ports + 1))
        m.d.comb += rd_beats.eq(sum(rd_p))
        wp = "m_axi_gmem1" if cfg.dma_ports > 1 else "m_axi_gmem0"
        wr = getattr(self, f"{wp}_wvalid") & getattr(self, f"{wp}_wready") & (getattr(self, f"{wp}_wstrb") != 0)
        events = {
            "cycles": run == _Run.RUN,
            "load_busy": engines[0].executing, "compute_busy": engines[1].executing,
            "store_busy": engines[2].executing,
            "dma_rd_bytes": rd_beats * bb, "dma_wr_bytes": Mux(wr, bb, 0),
            "instrs": engines[0].retire + engines[1].retire + engines[2].retire,
            "array_busy": comp.mac_active, "dma_beats": rd_beats,
        }
        for name, inc in events.items():
            cnt = Signal(64, name=f"cnt_{name}")
            m.d.comb += getattr(csr, name).eq(cnt)
            # the increment registered first: the engines' and ports' logic behind it reached the 64-bit adder's
            # carry chain in one cycle (ARRAY_BUSY's was among the slowest routed paths of the ulx3s top level,
            # 14.5 ns).  Each event counts a cycle later, before DONE (the run drains for cycles after its last)
            step = word_reg(m, Mux(run == _Run.RESET, 0, inc), f"inc_{name}")  # RESET's events clear, as before
            with m.If(run == _Run.RESET):
                m.d.sync += cnt.eq(0)
            with m.Else():
                m.d.sync += cnt.eq(cnt + step)
