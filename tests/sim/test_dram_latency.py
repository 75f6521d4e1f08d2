"""The fast harness's DRAM latency: same bytes at any latency, bursts overlap, the performance model agrees.

The C++ DRAM model answers a burst ``dram_latency`` cycles after its AR handshake (a write burst's B
response that long after its last W beat), with any number of bursts outstanding.  The DMA keeps
``outstanding`` (4) bursts in flight, so a long LOAD pays the latency once per group of 4 bursts,
not once per burst: the cycle count grows by about ``latency x bursts / 4``.
"""

from __future__ import annotations

import numpy as np
import pytest

from systolica.config import preset
from systolica.faults import Fault
from systolica.isa import encode, make
from systolica.sim.accel_programs import load_store_program
from systolica.sim.fast_harness import DRAM_LATENCY_ENV, FastRtl
from systolica.sim.golden import GoldenSim
from systolica.sim.perf import PerfModel
from systolica.sim.perf_costs import PerfParams

pytestmark = pytest.mark.rtl

CFG = preset("tiny")  # 4x4, one 32-bit port, 16-beat bursts (64 bytes)
WIN_BASE, WIN_SIZE = 0x1_0000, 0x4_0000
DATA, OUT, CHUNK, N_LOADS = 0x8000, 0x2_0000, 0x1000, 3
OUTSTANDING = 4  # DmaReader / DmaWriter default (hw/dma.py)


def _program() -> list[int]:
    """Three 4 KiB LOADs into the scratchpad, then one 12 KiB STORE of what they loaded."""
    return [encode(i) for i in load_store_program(CFG, data=DATA, out=OUT, chunk=CHUNK, loads=N_LOADS)]


def _image(words: list[int]) -> np.ndarray:
    dram = np.zeros(WIN_BASE + WIN_SIZE, np.uint8)
    dram[WIN_BASE + DATA:WIN_BASE + DATA + N_LOADS * CHUNK] = np.random.default_rng(7).integers(
        0, 256, N_LOADS * CHUNK, dtype=np.uint8)
    raw = np.frombuffer(b"".join(int(w).to_bytes(16, "little") for w in words), np.uint8)
    dram[WIN_BASE:WIN_BASE + len(raw)] = raw
    return dram


@pytest.fixture(scope="module")
def fast(build_dir):
    return FastRtl(CFG, build_dir)


def _run(fast, words, latency):
    dram = _image(words)
    res = fast.run(dram, window_base=WIN_BASE, window_size=WIN_SIZE, prog_base=0, prog_len=len(words),
                   max_cycles=200_000, dram_latency=latency)
    assert res.done and res.code == Fault.NONE and not res.violations, res
    return res, dram


def test_latency_keeps_the_bytes_and_overlaps_bursts(fast):
    words = _program()
    gold = _image(words)
    assert GoldenSim(CFG, gold, window_base=WIN_BASE, window_size=WIN_SIZE).run(words).status == Fault.NONE
    r0, d0 = _run(fast, words, 0)
    lat = 200
    r1, d1 = _run(fast, words, lat)
    assert r1.dram_latency == lat and r0.dram_latency == 0
    assert np.array_equal(d0, gold) and np.array_equal(d1, gold)  # bit-identical at both latencies
    assert {k: v for k, v in r0.counters.items() if not k.endswith("BUSY") and k != "CYCLES"} == \
           {k: v for k, v in r1.counters.items() if not k.endswith("BUSY") and k != "CYCLES"}
    assert r0.ports == r1.ports  # the same beats and bursts, only later

    # per-port counters: every read beat is counted once, on gmem0 (fetch and LOAD; one port on tiny)
    (p,) = r1.ports
    assert p.rd_beats * CFG.dma_bytes == r1.counters["DMA_RD_BYTES"]
    assert p.wr_beats * CFG.dma_bytes == r1.counters["DMA_WR_BYTES"] == N_LOADS * CHUNK
    data_bursts = N_LOADS * CHUNK // (CFG.max_burst * CFG.dma_bytes)  # 64 per 4 KiB LOAD
    assert p.aw_bursts == data_bursts and p.ar_bursts > data_bursts  # + the instruction fetch's

    delta = r1.sim_cycles - r0.sim_cycles
    print(f"\nlatency 0: {r0.sim_cycles} cycles; latency {lat}: {r1.sim_cycles} (+{delta}); "
          f"{p.ar_bursts} AR / {p.aw_bursts} AW bursts")
    # each LOAD and the STORE wait for their own data at least once (dependent round trips), and a group of
    # OUTSTANDING bursts waits for the group before it: the latency is not paid once per transfer only
    assert delta >= lat * (N_LOADS + 1)
    assert delta >= 0.5 * lat * (p.ar_bursts + p.aw_bursts) / OUTSTANDING
    # ... but the bursts of one transfer overlap, OUTSTANDING at a time: nowhere near a latency per burst
    bursts = p.ar_bursts + p.aw_bursts
    assert delta < lat * bursts / 2
    assert delta <= lat * (bursts / OUTSTANDING + N_LOADS + 4)

    # the performance model's burst schedule (rd_latency / wr_latency = the DRAM latency) agrees
    for r, lt in ((r0, 1), (r1, lat)):
        model = PerfModel(CFG, PerfParams(rd_latency=lt, wr_latency=lt)).run(words).cycles
        assert abs(model - r.sim_cycles) <= 0.02 * r.sim_cycles, (lt, model, r.sim_cycles)


def test_latency_from_the_environment(fast, monkeypatch):
    words = [encode(make("LOAD", buf=0, sram=0, dram=DATA, rows=1, lines=256, stride=1024)), encode(make("FINISH"))]
    explicit, _ = _run(fast, words, 50)
    monkeypatch.setenv(DRAM_LATENCY_ENV, "50")
    from_env, _ = _run(fast, words, None)
    assert from_env.dram_latency == 50 and from_env.sim_cycles == explicit.sim_cycles
    zero, _ = _run(fast, words, 0)  # the keyword wins over the environment
    assert zero.dram_latency == 0 and zero.sim_cycles < explicit.sim_cycles
    monkeypatch.setenv(DRAM_LATENCY_ENV, "lots")
    with pytest.raises(ValueError, match="SYSTOLICA_DRAM_LATENCY"):
        _run(fast, words, None)
    with pytest.raises(ValueError, match="whole number"):
        _run(fast, words, -3)
