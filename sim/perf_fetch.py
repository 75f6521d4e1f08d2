"""How instruction fetch shares read port 0 (``gmem0``) with LOAD and weight port 0, for the performance model.

Fetch, LOAD and weight port 0 read through one arbiter (hw/dma.py ReadArbiter): the instruction words fetched
while a transfer runs on that port stretch it, by as much as their beats do not fit in the cycles the transfer
leaves the port idle.  :mod:`systolica.sim.perf` and its cached path :mod:`systolica.sim.perf_plan` both use these.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from systolica.config import AccelConfig
from systolica.sim.perf_costs import rd_round_trip

__all__ = ["FETCH_FIFO", "FETCH_START", "FETCH_REFILL", "TAIL_GRANT", "fetch_stretch", "port0_tail", "port0_busy"]

#: words of the prefetch FIFO (hw/fetch.py default)
FETCH_FIFO = 8
#: hw/fetch.py: a start takes three cycles (the window's room, then limit and end code, then the words left)
#: and the burst length two more (min(left, per burst), then the 4 KiB room and the FIFO's space)
#: before the first burst can be requested, and a burst length is registered (a refill waits a cycle for it)
FETCH_START = 3
FETCH_REFILL = 1
#: cycles from a fetch burst's request to its grant beyond the DRAM latency and the word's beats (fetch's
#: registered arvalid, the read arbiter's registered grant: hw/fetch.py, hw/dma.py ReadArbiter)
TAIL_GRANT = 2


def fetch_stretch(seen: Sequence[int], start: int, exec_cycles: int, first_beat: int, word_cycles: int,
                  busy: float = 0.0, tail: float | None = None) -> int:
    """Cycles a LOAD (or GEMM_STREAM) starting at ``start`` is stretched by instruction words fetched during it
    (``seen``: sorted arrival cycles): fetch, LOAD and weight port 0 share one read port; words before its first
    beat do not conflict, and the words' beats first fill the cycles the port is idle during the transfer
    (``exec_cycles - first_beat - busy``: ``busy`` is the transfer's own beats on that port; a transfer held
    back by its outstanding bursts or the buffer's port leaves gaps that fetch bursts take).
    The read port answers bursts in the order their addresses were granted: a word whose burst was granted
    after the transfer's last burst (``tail`` cycles before its end, :func:`port0_tail`) comes after its
    beats and does not stretch it.
    The words that arrive inside the stretched window stretch it further (a fixed point, three rounds)."""
    lo = bisect_right(seen, start + first_beat)
    slack = max(0.0, exec_cycles - first_beat - busy) if busy else 0.0
    window = min(exec_cycles, max(first_beat, exec_cycles - int(tail) + word_cycles)) if tail is not None else exec_cycles
    extra = 0
    for _ in range(3):
        got = bisect_right(seen, start + window + extra) - lo
        nxt = max(0, int(round(got * word_cycles - slack)))
        if nxt == extra:
            break
        extra = nxt
    return extra


def port0_tail(cfg: AccelConfig, op: str, busy: float, p) -> float:
    """Cycles at the end of a transfer on port 0 whose beats were requested before a fetch burst granted after
    its last address could come in: the bursts in flight then (``outstanding`` of ``max_burst`` beats; weight
    port 0 keeps :func:`~systolica.hw.weight_stream.stream_outstanding`) less the fetch word's own read latency,
    word time and grant (the word arrives that much after its address)."""
    from systolica.hw.striped_reader import FIFO_BURSTS
    from systolica.hw.weight_stream import stream_outstanding
    out = stream_outstanding(cfg) if op == "GEMM_STREAM" else (FIFO_BURSTS if cfg.load_ports > 1 else p.outstanding)
    return min(busy, out * cfg.max_burst * p.beat_cycles) - rd_round_trip(p) - TAIL_GRANT


def port0_busy(cfg: AccelConfig, op: str, rd_beats: int, beat_cycles: float) -> float:
    """Cycles a transfer's own beats hold the read port it shares with fetch: a LOAD's every beat, a GEMM_STREAM's
    weight port 0's share, a LOAD striped over ``load_ports`` its share."""
    return rd_beats * beat_cycles / (cfg.dma_ports if op == "GEMM_STREAM" else cfg.load_ports)
