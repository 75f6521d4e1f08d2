"""cocotb testbench of the accelerator top level (cocotb 2.x, cocotbext-axi).

:class:`AccelTB` owns the clock, the reset, an ``AxiRam`` as DRAM behind the
AXI master port(s), an ``AxiLiteMaster`` on the CSRs, random latencies and
back-pressure on every AXI channel (pause generators), and a memory guard: any
byte the accelerator reads or writes outside the DRAM window it was given is
recorded in :attr:`AccelTB.violations` (tests fail on any).  :meth:`AccelTB.poison` makes
reads or writes of an address range fail, which cocotbext-axi answers with an
AXI ``SLVERR`` response (a bus error).  :meth:`AccelTB.set_dram_latency` gives every port a fixed DRAM
latency with many bursts outstanding, as the fast harness's ``dram_latency`` does.

Only imported inside a cocotb simulation (it imports cocotb at module level).
"""

from __future__ import annotations

import collections
import random
from dataclasses import dataclass

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Event, First, RisingEdge, Timer
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam

from systolica.config import AccelConfig
from systolica.csr import COUNTERS, CTRL_SOFT_RESET, CTRL_START, IRQ_DONE, REG, STATUS_DONE, STATUS_ERROR
from systolica.faults import Fault
from systolica.isa import WORD_BYTES

__all__ = ["AccelTB", "RunResult", "random_pauses"]

PERIOD_NS = 10
#: cycles from an AR handshake to the first R beat (and from the last W beat to B) that AxiRam takes by
#: itself (the performance model's rd_latency / wr_latency fitted on this testbench: sim/perf_validate.py)
AXIRAM_LATENCY = 2


def random_pauses(rng: random.Random, p: float):
    """An endless pause generator: pause (True) with probability ``p`` each cycle."""
    while True:
        yield rng.random() < p


@dataclass
class RunResult:
    """What the CSRs say after a run."""

    status: int
    code: Fault
    pc: int
    counters: dict[str, int]
    timed_out: bool = False

    @property
    def done(self) -> bool:
        return bool(self.status & STATUS_DONE)

    @property
    def error(self) -> bool:
        return bool(self.status & STATUS_ERROR)


class AccelTB:
    """Drives one ``Accelerator`` DUT.

    Parameters
    ----------
    dut
        The cocotb handle of the top level.
    cfg
        Its configuration.
    mem_size
        Bytes of the DRAM model (physical addresses ``0 .. mem_size``).
    """

    def __init__(self, dut, cfg: AccelConfig, mem_size: int = 1 << 20):
        self.dut, self.cfg, self.mem_size = dut, cfg, mem_size
        self.clock = Clock(dut.ap_clk, 10, unit="ns", impl="gpi")
        self.clock.start()
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi_gmem0"), dut.ap_clk, dut.ap_rst_n,
                          reset_active_level=False, size=mem_size)
        self.rams = [self.ram]
        for p in range(1, cfg.dma_ports):  # every port sees the same DRAM
            self.rams.append(AxiRam(AxiBus.from_prefix(dut, f"m_axi_gmem{p}"), dut.ap_clk, dut.ap_rst_n,
                                    reset_active_level=False, size=mem_size, mem=self.ram.mem))
        self.csr = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi_control"), dut.ap_clk, dut.ap_rst_n,
                                 reset_active_level=False)
        self.window = (0, mem_size)
        self.violations: list[str] = []
        self.poisoned: list[tuple[str, int, int]] = []  # (kind, lo, hi): accesses answered with SLVERR
        self.dram_latency = 0
        for ram in self.rams:
            self._guard(ram)
            self._add_latency(ram)

    # ------------------------------------------------------------- guards
    def _guard(self, ram) -> None:
        """Record every access outside the window (the accelerator's memory protection, checked)."""
        rd, wr = ram.read_if._read, ram.write_if._write

        async def checked_read(address, length):
            self._check("read", address, length)
            self._fail_if_poisoned("read", address, length)
            return await rd(address, length)

        async def checked_write(address, data):
            self._check("write", address, len(data))
            self._fail_if_poisoned("write", address, len(data))
            await wr(address, data)

        ram.read_if._read, ram.write_if._write = checked_read, checked_write

    def _add_latency(self, ram) -> None:
        """Hold each read burst until ``dram_latency`` cycles after its AR handshake and each B response until
        that long after the burst's last W beat (AxiRam answers after ``AXIRAM_LATENCY`` by itself).

        The AR and W sinks stamp every transaction with the time of its handshake; AxiRam's read process
        waits for the stamp of the burst it takes next (bursts stay in order), and its write process hands
        B to a queue that one task drains in order, so W beats of the next burst are not held up.
        """
        rd, wr = ram.read_if, ram.write_if

        def stamp(ch):
            make = ch._transaction_obj

            def stamped():  # called at the handshake: the sink samples the bus into a fresh object
                obj = make()
                obj.systolica_t = get_sim_time("ns")
                return obj
            ch._transaction_obj = stamped

        stamp(rd.ar_channel)
        stamp(wr.w_channel)

        def extra_ns(t_handshake: float) -> float:
            return t_handshake + (self.dram_latency - AXIRAM_LATENCY) * PERIOD_NS - get_sim_time("ns")

        ar_recv, w_recv, b_send = rd.ar_channel.recv, wr.w_channel.recv, wr.b_channel.send

        async def ar_delayed():
            ar = await ar_recv()
            wait = extra_ns(ar.systolica_t)
            if self.dram_latency and wait > 0:
                await Timer(wait, unit="ns")
            return ar

        last_w = [0.0]

        async def w_stamped():
            w = await w_recv()
            last_w[0] = w.systolica_t
            return w

        pending: collections.deque = collections.deque()  # (B transaction, ready time in ns)
        more = Event()

        async def b_delayed(b):
            if not self.dram_latency and not pending:
                await b_send(b)
                return
            pending.append((b, last_w[0] + (self.dram_latency - AXIRAM_LATENCY) * PERIOD_NS))
            more.set()

        async def b_drain():
            while True:
                if not pending:
                    more.clear()
                    await more.wait()
                    continue
                b, ready = pending[0]
                wait = ready - get_sim_time("ns")
                if wait > 0:
                    await Timer(wait, unit="ns")
                pending.popleft()
                await b_send(b)

        rd.ar_channel.recv, wr.w_channel.recv, wr.b_channel.send = ar_delayed, w_stamped, b_delayed
        cocotb.start_soon(b_drain())

    def set_dram_latency(self, cycles: int) -> None:
        """A fixed DRAM latency on every port, as the fast harness's ``dram_latency``: a read burst's first beat
        ``cycles`` after its AR handshake at the earliest, a write burst's B that long after its last W beat;
        0 turns it off (AxiRam's own timing).  With a latency up to 64 read bursts wait in AxiRam's AR queue
        (its default is 2), so the accelerator's outstanding bursts overlap as they would on a DDR controller."""
        if cycles < 0:
            raise ValueError(f"dram latency {cycles} must be >= 0 cycles")
        self.dram_latency = int(cycles)
        for ram in self.rams:
            ram.read_if.ar_channel.queue_occupancy_limit = 64 if cycles else 2
            ram.write_if.aw_channel.queue_occupancy_limit = 64 if cycles else 2

    def _check(self, kind: str, address: int, length: int) -> None:
        lo, size = self.window
        if not (lo <= address and address + length <= lo + size):
            self.violations.append(f"{kind} of {length} bytes at {address:#x} outside window "
                                   f"[{lo:#x}, {lo + size:#x})")

    def poison(self, kind: str, lo: int, size: int) -> None:
        """Make every ``kind`` ("read" or "write") access touching ``[lo, lo + size)`` (physical) fail with SLVERR."""
        if kind not in ("read", "write"):
            raise ValueError(f"kind must be 'read' or 'write', not {kind!r}")
        self.poisoned.append((kind, lo, lo + size))

    def clear_poison(self) -> None:
        self.poisoned.clear()

    def _fail_if_poisoned(self, kind: str, address: int, length: int) -> None:
        for k, lo, hi in self.poisoned:
            if k == kind and address < hi and lo < address + length:
                raise OSError(f"{kind} of {length} bytes at {address:#x}: poisoned range [{lo:#x}, {hi:#x})")

    def set_pauses(self, p: float, seed: int = 0) -> None:
        """Random stalls with probability ``p`` on every AXI channel of every port (0 turns them off)."""
        rng = random.Random(seed)
        for ram in self.rams:
            chans = (ram.read_if.ar_channel, ram.read_if.r_channel, ram.write_if.aw_channel,
                     ram.write_if.w_channel, ram.write_if.b_channel)
            for ch in chans:
                if p > 0:
                    ch.set_pause_generator(random_pauses(random.Random(rng.random()), p))
                else:
                    ch.clear_pause_generator()
                    ch.pause = False  # clearing the generator leaves the last value (maybe "paused") in place

    # --------------------------------------------------------------- CSRs
    async def reset(self) -> None:
        self.dut.ap_rst_n.value = 0
        await ClockCycles(self.dut.ap_clk, 5)
        self.dut.ap_rst_n.value = 1
        await ClockCycles(self.dut.ap_clk, 2)

    async def write_reg(self, name: str, value: int) -> None:
        await self.csr.write_dword(REG[name].offset, value & 0xFFFF_FFFF)

    async def read_reg(self, name: str) -> int:
        return await self.csr.read_dword(REG[name].offset)

    async def read_counter(self, name: str) -> int:
        lo = await self.read_reg(f"{name}_LO")  # latches _HI
        hi = await self.read_reg(f"{name}_HI")
        return lo | (hi << 32)

    async def set_window(self, base: int, size: int) -> None:
        self.window = (base, size)
        await self.write_reg("WIN_BASE_LO", base)
        await self.write_reg("WIN_BASE_HI", base >> 32)
        await self.write_reg("WIN_SIZE", size)

    # ---------------------------------------------------------------- run
    def load_program(self, words, prog_base: int) -> None:
        """Write 128-bit words at ``prog_base`` (an offset inside the window)."""
        data = b"".join(int(w).to_bytes(WORD_BYTES, "little") for w in words)
        self.ram.write(self.window[0] + prog_base, data)

    async def start(self, prog_base: int, prog_len: int) -> None:
        await self.write_reg("PROG_BASE", prog_base)
        await self.write_reg("PROG_LEN", prog_len)
        await self.write_reg("IRQ_ENABLE", IRQ_DONE)
        await self.write_reg("CTRL", CTRL_START)

    async def wait_done(self, timeout_cycles: int) -> bool:
        """Wait for ``interrupt``; False on timeout.  No Python runs on the clock edge meanwhile."""
        if int(self.dut.interrupt.value):
            return True
        t = Timer(10 * timeout_cycles, unit="ns")
        got = await First(RisingEdge(self.dut.interrupt), t)
        return got is not t

    async def result(self, timed_out: bool = False) -> RunResult:
        status = await self.read_reg("STATUS")
        code = await self.read_reg("ERROR_CODE")
        pc = await self.read_reg("ERROR_PC")
        counters = {name: await self.read_counter(name) for name in COUNTERS}
        await self.write_reg("IRQ_STATUS", IRQ_DONE)  # acknowledge
        return RunResult(status, Fault(code), pc, counters, timed_out)

    async def run(self, words, prog_base: int = 0, timeout_cycles: int = 200_000) -> RunResult:
        """Load ``words`` at ``prog_base``, start, wait for the interrupt, read the result."""
        self.load_program(words, prog_base)
        await self.start(prog_base, len(words))
        ok = await self.wait_done(timeout_cycles)
        return await self.result(timed_out=not ok)

    async def soft_reset(self) -> None:
        await self.write_reg("CTRL", CTRL_SOFT_RESET)

    def dram(self, lo: int = 0, size: int | None = None) -> bytes:
        return self.ram.read(lo, self.mem_size - lo if size is None else size)


def start_soon(coro):  # re-exported for test modules that only import this one
    return cocotb.start_soon(coro)
