"""The modelled prefill follows the runtime's schedule: head-less chunks, one run for a short prompt."""

from __future__ import annotations

import pytest

from systolica.bench.accel_model import AccelTimer
from systolica.compiler.compile import compile_model
from systolica.config import preset
from systolica.driver.runtime import prefill_runs
from systolica.sim.perf_costs import PerfParams
from systolica.testmodels import random_model


@pytest.fixture(scope="module")
def timer():
    model = random_model("llama", dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96, vocab=512, seed=3,
                         max_seq=64)
    art = compile_model(model, preset("default"), page=16, max_seq=64, prefill_chunk=16)
    return AccelTimer(art, PerfParams())


def test_prefill_cycles_are_the_runs_of_the_schedule(timer):
    art, prompt = timer.art, list(range(1, 41))
    runs = prefill_runs(art, len(prompt))
    assert len(runs) > 1 and runs[-1].kind == "prefill" and {r.kind for r in runs[:-1]} == {"prefill_nohead"}
    want = sum(timer._cycles(r.kind, r.start, prompt[r.start:r.start + r.rows]) for r in runs)
    assert timer.prefill_cycles(prompt) == want


def test_short_prompt_is_one_run_and_faster_than_decode_steps(timer):
    prompt = [5, 6, 7]
    assert len(prefill_runs(timer.art, 3)) == 1
    steps = sum(timer.decode_cycles(i, t) for i, t in enumerate(prompt))
    assert timer.prefill_cycles(prompt) < steps


def test_headless_chunk_is_cheaper_than_the_chunk_with_logits(timer):
    art = timer.art
    rows = min(art.rows("prefill"), art.rows("prefill_nohead"))
    toks = list(range(rows))
    assert timer._cycles("prefill_nohead", 0, toks) < timer._cycles("prefill", 0, toks)
