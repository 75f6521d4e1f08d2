"""A DMA transfer's timing for the performance model: the round trips, a transfer's bursts (split as hw/dma.py
splits them), a LOAD's cycles alone, when it has asked for its last burst and when its first beat comes
(hw/load_engine.py: the next LOAD may start then), and a STORE's cycles.  ``p`` is a
:class:`~systolica.sim.perf_costs.PerfParams`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from systolica.hw.axi_slice import SLICE_READ_CYCLES, SLICE_WRITE_CYCLES

if TYPE_CHECKING:  # pragma: no cover
    from systolica.config import AccelConfig
    from systolica.sim.perf_costs import PerfParams

__all__ = ["rd_round_trip", "wr_round_trip", "transfer_bursts", "dma_read_cycles", "dma_read_timing", "dma_write_cycles",
           "LOAD_ISSUE_CYCLES", "LOAD_TAIL_CYCLES"]


def rd_round_trip(p: PerfParams) -> int:
    """Cycles from a read address leaving an engine to its first beat reaching it: the DRAM's
    ``rd_latency`` plus the top level's AXI register slices (AR out, R back: hw/axi_slice.py)."""
    return p.rd_latency + SLICE_READ_CYCLES


def wr_round_trip(p: PerfParams) -> int:
    """Cycles from a write's last W beat leaving the store engine to its B response reaching it:
    ``wr_latency`` plus the slices (W out, B back)."""
    return p.wr_latency + SLICE_WRITE_CYCLES


def transfer_bursts(cfg: AccelConfig, dram: int, stride: int, rows: int, beats: int) -> list[int]:
    """Burst lengths (beats) of a 2-D transfer, split as ``hw/dma.py`` splits it (max_burst, 4 KiB)."""
    bb = cfg.dma_bytes
    cap = min(cfg.max_burst, 4096 // bb)
    out: list[int] = []
    for r in range(rows):
        addr, rem = dram + r * stride, beats
        while rem:
            to_4k = (4096 - (addr & 4095)) // bb
            n = min(rem, cap, to_4k)
            out.append(n)
            addr += n * bb
            rem -= n
    return out


#: a LOAD's EXEC ends this many cycles after its last burst's address (hw/load_engine.py; calibrated on the RTL)
LOAD_ISSUE_CYCLES = 1
#: a LOAD's last line is written, and its token pushed, this many cycles later than when the beat's line went straight
#: into the line FIFO (hw/load_engine.py: the line's register and the FIFO's output register; the push's register is
#: inside the drain check's cycle)
LOAD_LINE_CYCLES = 2
#: cycles between the previous LOAD's last line and a LOAD's first beat when its bursts were asked for in time (the
#: descriptor FIFO pops the cycle after a word's last beat, and the new head waits a cycle: hw/load_engine.py)
LOAD_TAIL_CYCLES = 2


def dma_read_cycles(bursts: list[int], p: PerfParams) -> int:
    """EXEC cycles of a LOAD with these bursts alone, from its start to its last line (0 bursts: the 2-cycle
    minimum)."""
    return dma_read_timing(bursts, p)[0]


def dma_read_timing(bursts: list[int], p: PerfParams) -> tuple[int, int, int]:
    """``(cycles, issue, lead)`` of a LOAD with these bursts: its cycles alone (:func:`dma_read_cycles`), the
    cycles until its last burst is asked for (its EXEC state: hw/load_engine.py), and those until its first beat."""
    if not bursts:
        return 2, 2, 2
    ends: list[float] = []
    a = 3.0 + p.ar_wait  # the first burst length is registered a cycle after start (hw/dma.py), then arvalid rises
    for b, n in enumerate(bursts):
        if b:
            a += p.ar_gap + p.ar_wait  # arvalid is a register: it drops for a cycle after each handshake
        if b >= p.outstanding:
            a = max(a, ends[b - p.outstanding] + 2)  # inflight drops the cycle after that burst's rlast
        first = a + rd_round_trip(p) if not ends else max(a + rd_round_trip(p), ends[-1] + 1)
        if not ends:
            lead = first
        ends.append(first + max(n * p.beat_cycles, p.burst_min) - 1)
    # + 1 + LOAD_LINE_CYCLES: the last beat's line through the line register and FIFO, and the push's register
    return int(round(ends[-1])) + 1 + LOAD_LINE_CYCLES, int(round(a)) + LOAD_ISSUE_CYCLES, int(round(lead))


def dma_write_cycles(bursts: list[int], p: PerfParams) -> int:
    """EXEC cycles of a STORE: line reads (3 cycles ahead of the first beat: the read, the line's register before the
    FIFO, the FIFO), W bursts after their AW, B."""
    if not bursts:
        return 2
    a, w_end, b_times = 2.0, 4.0, []
    for b, n in enumerate(bursts):
        if b:
            a += p.ar_gap + p.aw_wait
        if b >= p.outstanding:
            a = max(a, b_times[b - p.outstanding] + 2)
        first = max(a + p.aw_wait + 1, w_end + 1)  # the burst's length reaches the W side a cycle after AW
        w_end = first + max(n * p.beat_cycles, p.burst_min) - 1
        b_times.append(w_end + wr_round_trip(p))
    return int(round(max(b_times))) + p.store_tail
