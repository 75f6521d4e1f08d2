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


def test_breakdown_adds_up_to_the_model_runs(timer):
    from systolica.bench.accel_model import sweep_breakdowns
    from systolica.bench.cycle_breakdown import op_class

    prompt = list(range(1, 41))
    parts = sweep_breakdowns(timer, prompt)
    pre, dec = parts["prefill@40"], parts["decode@40"]
    runs = timer.prefill_results(prompt)
    assert pre["cycles"] == timer.prefill_cycles(prompt) == sum(r.cycles for r in runs)
    assert pre["array_utilization"] == sum(r.array_busy for r in runs) / pre["cycles"]
    attn = sum(c for r in runs for op, c in r.per_op_cycles.items() if op_class(op) == "attention")
    assert pre["shares"]["attention"] == attn / pre["cycles"] > 0
    # the compute engine runs one instruction at a time: its classes fit in the run
    for b in (pre, dec):
        assert 0 < sum(b["shares"][k] for k in ("array", "attention", "line ops")) <= 1
    assert dec["cycles"] == timer.decode_cycles(40) and dec["x_compute_bound"] is None
    cfg = timer.cfg
    assert pre["x_compute_bound"] == pre["cycles"] / pre["compute_bound_cycles"] > 1
    assert pre["compute_bound_cycles"] * cfg.rows * cfg.cols > pre["macs"] * 0.9  # the roofline's MACs, not fewer


def test_attention_share_grows_with_the_context(timer):
    from systolica.bench.accel_model import sweep_breakdowns

    short = sweep_breakdowns(timer, [3] * 4)["decode@4"]["shares"]["attention"]
    long = sweep_breakdowns(timer, [3] * 60)["decode@60"]["shares"]["attention"]
    assert 0 < short < long


def test_attention_added_is_the_step_less_the_step_with_attention_free(timer):
    """What attention adds to a decode step: the step's cycles less those with every ATTN, ATTN_OUT and KV-cache
    LOAD / STORE taking a cycle; more than the ATTNs alone add, at most their cycles with the LOADs' and STOREs', and
    growing with the context."""
    from systolica.artifact import StepState
    from systolica.bench.accel_model import sweep_breakdowns
    from systolica.isa import decode
    from systolica.sim.perf import PerfModel

    art, model = timer.art, PerfModel(timer.cfg, timer.model.p, cache=False)
    words = art.patched_program("decode", StepState(60, [0], list(range(art.pages_needed(60, 1)))))
    whole = model.run(words)
    kv = art.region("kv")
    kv_ops = [i for i in map(decode, words) if i.op in ("LOAD", "STORE") and
              kv["offset"] <= i.fields["dram"] < kv["offset"] + kv["size"]]
    assert {i.op for i in kv_ops} == {"LOAD", "STORE"}  # the pages read, the new token's K and V written
    attn_only = model.run_without(words, lambda ins: ins.op in ("ATTN", "ATTN_OUT"))
    assert attn_only.cycles < whole.cycles and attn_only.per_op_cycles["ATTN"] < whole.per_op_cycles["ATTN"]
    added = timer.attention_added(60)
    own = sum(whole.per_op_cycles[op] for op in ("ATTN", "ATTN_OUT", "LOAD", "STORE"))
    assert 0 < (whole.cycles - attn_only.cycles) / whole.cycles < added <= own / whole.cycles
    short = sweep_breakdowns(timer, [3] * 4)["decode@4"]["attention_adds"]
    assert 0 < short < sweep_breakdowns(timer, [3] * 60)["decode@60"]["attention_adds"] == added


def test_breakdown_table_has_a_line_per_phase(timer):
    from rich.console import Console

    from systolica.bench.accel_model import sweep_breakdowns
    from systolica.bench.cycle_breakdown import render_breakdown

    parts = sweep_breakdowns(timer, [3] * 20)
    t = render_breakdown([("tinyboard", parts)])
    assert t.row_count == 2
    con = Console(width=200, record=True)
    con.print(t)
    text = con.export_text()
    assert "tinyboard" in text and "prefill 20 tokens" in text and "decode at context 20" in text
    assert f"{100 * parts['prefill@20']['array_utilization']:.1f}" in text
