"""The load engine's two stages (hw/load_engine.py): a LOAD asks for its bursts while the one before it still takes
its beats, its token leaves only once its lines are in the buffer, in program order with the load engine's words
that move nothing, and a bus error names the LOAD its beat belonged to.  On the Verilated accelerator (fast
harness) against the golden simulator, with DRAM latency and back-pressure."""

from __future__ import annotations

import numpy as np
import pytest

from systolica.config import preset
from systolica.faults import Fault
from systolica.isa import encode, make
from systolica.sim.fast_harness import FastRtl
from systolica.sim.golden import GoldenSim
from systolica.sim.perf import PerfModel
from systolica.sim.perf_costs import PerfParams

pytestmark = pytest.mark.rtl

MEM, WIN_BASE, WIN_SIZE = 1 << 18, 0x1_0000, 0x2_0000
SRC, DST = 0x2000, 0xA000
LATENCY = 40
#: one LOAD striped over four ports (as kv260) and one through a single port (as the default preset)
CONFIGS = {"tiny": preset("tiny"),
           "tiny_d4": preset("tiny").replace(name="tiny_d4", dma_ports=4, attn_rows=3, dsp_muls=1, attn_pv_shared=1,
                                             attn_pv_sets=2, softmax_unit=0, act_newton=1, attn_beside=1,
                                             load_ports=4, nonlinear_lanes=1, rowpass_lanes=2, wstream_ahead=32)}


def _loads(lines: int, n: int, *, gap_words: bool = False) -> list:
    """``n`` LOADs of ``lines`` lines each (each pushing its token) -- with ``gap_words`` a NOP on the load engine
    and a LOAD of zero rows between the first two, both pushing too -- each token taken by a compute NOP that
    hands it to a STORE writing the lines back further up: a token ahead of its data stores stale lines."""
    ops, spans = [], []
    for k in range(n):
        ops.append(make("LOAD", buf=0, sram=k * lines, dram=SRC + k * 0x1000, rows=1, lines=lines, stride=0,
                        push_next=True))
        spans.append((k * lines, lines))
        if gap_words and k == 0:
            ops += [make("NOP", engine=0, push_next=True),
                    make("LOAD", buf=0, sram=0, dram=SRC, rows=0, lines=lines, stride=0, push_next=True)]
            spans += [(0, 0), (0, 0)]
    for k, (sram, count) in enumerate(spans):
        ops.append(make("NOP", engine=1, pop_prev=True, push_next=True))
        ops.append(make("STORE", buf=0, sram=sram, dram=DST + k * 0x1000, rows=1 if count else 0, lines=max(count, 1),
                        stride=0, pop_prev=True))
    ops.append(make("FINISH"))
    return [encode(i) for i in ops]


def _image(words) -> np.ndarray:
    dram = np.zeros(MEM, np.uint8)
    dram[WIN_BASE + SRC:WIN_BASE + DST] = np.random.default_rng(7).integers(0, 256, DST - SRC, dtype=np.uint8)
    code = b"".join(int(w).to_bytes(16, "little") for w in words)
    dram[WIN_BASE:WIN_BASE + len(code)] = np.frombuffer(code, np.uint8)
    return dram


def _run(fast, words, **kw):
    dram = _image(words)
    res = fast.run(dram, window_base=WIN_BASE, window_size=WIN_SIZE, prog_base=0, prog_len=len(words),
                   max_cycles=100_000, **kw)
    return res, dram


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def fast(request, build_dir):
    return FastRtl(CONFIGS[request.param], build_dir)


def test_loads_overlap_and_each_token_follows_its_lines(fast):
    """Back to back, a LOAD's round trip hides behind the one before it: three LOADs of 64 beats take at most the
    first's cycles plus two times 64 and a few (one after the other they took a round trip each, > 40 more);
    every STORE behind a token writes back exactly the golden simulator's lines, with the load engine's NOP and
    zero-row LOAD among them, with and without back-pressure; the performance model is within 5 % of the RTL."""
    cfg = fast.cfg
    lines = 64 * cfg.dma_bytes // cfg.cols
    for gap in (False, True):
        words = _loads(lines, 3, gap_words=gap)
        gold = _image(words)
        assert GoldenSim(cfg, gold, window_base=WIN_BASE, window_size=WIN_SIZE).run(words).status == Fault.NONE
        for stall in (0, 25):
            res, dram = _run(fast, words, stall_percent=stall, seed=stall, dram_latency=LATENCY)
            assert res.code == Fault.NONE and np.array_equal(dram, gold), (gap, stall, res.code)
    def only_loads(n):
        return [encode(make("LOAD", buf=0, sram=k * lines, dram=SRC + k * 0x1000, rows=1, lines=lines, stride=0))
                for k in range(n)] + [encode(make("FINISH"))]

    one = _run(fast, only_loads(1), dram_latency=LATENCY)[0].counters["CYCLES"]
    words = only_loads(3)
    three = _run(fast, words, dram_latency=LATENCY)[0].counters["CYCLES"]
    assert three - one <= 2 * 64 + 4, (one, three)  # 64 beats a LOAD
    model = PerfModel(cfg, PerfParams(rd_latency=LATENCY + 2, wr_latency=LATENCY + 2)).run(words).cycles
    assert abs(model / three - 1) < 0.05, (model, three)


def test_a_bus_error_names_the_load_it_came_with(fast):
    """Two LOADs in flight: an error response to a beat of the first stops the run with BUS_ERROR at its pc (0), to
    a beat of the second at the second's (1), although the second had started before the first's beats were in."""
    cfg = fast.cfg
    lines = 64 * cfg.dma_bytes // cfg.cols
    words = _loads(lines, 2)
    for k, pc in ((0, 0), (1, 1)):
        lo = WIN_BASE + SRC + k * 0x1000 + 32 * cfg.dma_bytes  # a beat in the middle of LOAD k
        res, _ = _run(fast, words, slverr={"read": (lo, lo + cfg.dma_bytes)}, dram_latency=LATENCY)
        assert res.done and (res.code, res.pc) == (Fault.BUS_ERROR, pc), (k, res.code, res.pc)
