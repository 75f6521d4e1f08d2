"""The performance model behind the golden device: the runtime's metrics get time at the board clock."""

from __future__ import annotations

import pytest

from systolica.compiler.compile import compile_model
from systolica.config import preset
from systolica.driver.golden_device import GoldenDevice
from systolica.driver.runtime import Metrics, Runtime
from systolica.sim.perf import PerfModel, cycle_model
from systolica.testmodels import random_model

CFG = preset("tiny")


@pytest.fixture(scope="module")
def art():
    model = random_model("llama", dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, vocab=128, seed=2,
                         max_seq=48)
    return compile_model(model, CFG, page=16, max_seq=48, prefill_chunk=4)


def test_cycle_model_fills_the_runtime_metrics(art):
    dev = GoldenDevice(CFG, dram_bytes=art.dram_bytes + (1 << 16), cycle_model=cycle_model(CFG))
    rt = Runtime(art, dev)
    m = Metrics("golden", CFG.clock_mhz)
    toks = [s.token for s in rt.generate([5, 9, 13, 2, 7], max_new_tokens=4, stop=[], metrics=m)]
    assert len(toks) == 4
    assert m.has_cycles and m.prefill.cycles > 0 and m.decode.cycles > 0
    assert m.ttft_s == pytest.approx(m.prefill.cycles / (CFG.clock_mhz * 1e6))
    assert m.decode_tokens_per_s is not None and m.decode_tokens_per_s > 0
    assert 0 < m.array_utilization <= 1
    for st in (m.prefill, m.decode):
        assert 0 < st.load_busy <= st.cycles and 0 < st.compute_busy <= st.cycles and st.store_busy <= st.cycles
        # read beats of the model = bytes the golden simulator read (data + fetched words) / port width
        assert st.dma_beats * CFG.dma_bytes == st.dma_rd_bytes


def test_adapter_reports_what_the_model_computes_for_the_patched_program(art):
    timed = cycle_model(CFG)
    words = list(art.programs["decode"].words)
    got = timed(words, None)
    want = PerfModel(CFG).run(words).counters()
    assert got == want
    assert set(got) == {"CYCLES", "LOAD_BUSY", "COMPUTE_BUSY", "STORE_BUSY", "ARRAY_BUSY", "DMA_BEATS"}


def test_adapter_claims_no_time_for_a_program_that_cannot_finish():
    assert cycle_model(CFG)([0x1E], None) == {}  # an illegal word: the device reports the fault instead


def test_prefill_beats_decode_per_token(art):
    """A prefill chunk reuses each weight for several rows: fewer cycles per token than decode."""
    pm = PerfModel(CFG)
    pre = pm.run(art.programs["prefill"]).cycles / art.rows("prefill")
    dec = pm.run(art.programs["decode"]).cycles
    assert pre < dec
