"""The cached performance model (per-program analysis, sim/perf_plan.py) gives the uncached model's results exactly."""

from __future__ import annotations

import numpy as np
import pytest

from systolica.artifact import StepState
from systolica.compiler.compile import compile_model
from systolica.config import preset
from systolica.isa import OPS, Engine, Instr, encode, make
from systolica.sim.perf import PerfError, PerfModel
from systolica.sim.perf_costs import COST_FIELDS, PerfParams, cost_signature, op_cost
from systolica.sim.perf_plan import clear_plans, plan_for
from systolica.sim.perf_validate import suite
from systolica.sim.roofline import board_params
from systolica.testmodels import random_model

PARAMS = [PerfParams(), PerfParams(fetch_contention=False), PerfParams(gemm="line_dot", beat_cycles=2.5),
          PerfParams(rd_latency=40, wr_latency=30, outstanding=2, ar_wait=1, burst_min=3, token_latency=2,
                     fetch_latency=3, vector_latency=5, attn_latency=4, weight_cols_per_cycle=2, store_tail=1)]


def same(a, b) -> bool:
    return (a.to_dict() == b.to_dict() and a.start == b.start and a.end == b.end
            and list(a.per_op_cycles) == list(b.per_op_cycles) and a.beside_cycles == b.beside_cycles)


def check(cfg, words, params) -> None:
    for p in params:
        ref = PerfModel(cfg, p, cache=False).run(words)
        got = PerfModel(cfg, p).run(words)
        assert same(ref, got), (p, ref.to_dict(), got.to_dict())


@pytest.mark.parametrize("name", ["tiny", "default", "tiny-beside", "tiny-ahead"])
def test_validation_suite_and_random_programs_time_alike(name):
    # tiny-beside: GEMM_STREAMs that run on behind the ATTNs after them (config.attn_beside); tiny-ahead: their
    # weights read ahead as well (config.wstream_ahead)
    cfg = preset(name.split("-")[0]).replace(attn_beside=int(name != "tiny" and name != "default"),
                                             wstream_ahead=32 if name.endswith("ahead") else 0)
    clear_plans()
    for prog in suite(cfg, n_random=8, seed=11):
        check(cfg, prog["words"], PARAMS)


# (config, arch, model shape, config changes); "beside": decode by GQA group beside the weight streams, its LOADs
# striped over both ports (config.attn_beside, config.load_ports)
ARTS = [("tiny", "llama", {}, {}), ("default", "llama", {"dim": 64, "n_heads": 4, "n_kv_heads": 2}, {}),
        ("tiny", "gpt2", {"dim": 32, "n_heads": 2}, {}),
        ("default", "beside", {"dim": 64, "n_heads": 4, "n_kv_heads": 2}, {"attn_beside": 1, "dma_ports": 2, "load_ports": 2}),
        ("default", "ahead", {"dim": 64, "n_heads": 4, "n_kv_heads": 2},
         {"attn_beside": 1, "dma_ports": 2, "load_ports": 2, "wstream_ahead": 32})]


@pytest.fixture(scope="module", params=ARTS, ids=lambda a: f"{a[0]}-{a[1]}")
def art(request):
    name, arch, kw, changes = request.param
    shape = {"dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab": 96, "max_seq": 48, **kw}
    if arch == "gpt2":
        shape.pop("n_kv_heads")
    model = random_model("gpt2" if arch == "gpt2" else "llama", seed=3, **shape)  # ("beside", "ahead": llama)
    return compile_model(model, preset(name).replace(**changes), page=16, max_seq=48, prefill_chunk=4)


def test_compiled_steps_time_alike_under_board_params(art):
    """Decode steps at growing positions (patched programs that reuse the first step's analysis) and prefill."""
    cfg = art.config
    params = [*PARAMS, board_params(cfg, dram_gbps=2.1), board_params(cfg, dram_gbps=15.4, clock_mhz=300)]
    clear_plans()
    for pos in (0, 1, 15, 16, 17, 40):
        words = art.patched_program("decode", StepState(pos, [3], list(range(art.pages_needed(pos, 1)))))
        check(cfg, words, params)
    rows = art.rows("prefill")
    for pos in (0, rows, 2 * rows):
        st = StepState(pos, [1] * rows, list(range(art.pages_needed(pos, rows))))
        check(cfg, art.patched_program("prefill", st), params)


def test_a_patched_step_reuses_the_analysis(art):
    clear_plans()
    cfg = art.config
    a = plan_for(cfg, art.patched_program("decode", StepState(16, [3], [0, 1])))
    b = plan_for(cfg, art.patched_program("decode", StepState(30, [3], [0, 1])))
    assert b.seq is a.seq and b.words != a.words  # one analysis, other words
    assert plan_for(cfg, list(b.words)) is b  # the same words again: the same plan


def test_a_changed_token_flag_gets_its_own_analysis():
    cfg = preset("tiny")
    clear_plans()
    c = cfg.cols
    ld = make("LOAD", buf=0, sram=0, dram=0x1000, rows=2, lines=2, stride=2 * c)
    base = [encode(ld), encode(make("NOP", engine=int(Engine.COMPUTE))), encode(make("FINISH"))]
    flag = [encode(Instr("LOAD", ld.fields, push_next=True)),
            encode(make("NOP", engine=int(Engine.COMPUTE), pop_prev=True)), encode(make("FINISH"))]
    a, b = plan_for(cfg, base), plan_for(cfg, flag)
    assert b.seq is not a.seq
    check(cfg, base, PARAMS)
    check(cfg, flag, PARAMS)


def test_errors_are_the_uncached_models():
    cfg = preset("tiny")
    bad = [[encode(make("NOP", engine=int(Engine.COMPUTE), pop_prev=True)), encode(make("FINISH"))],
           [encode(make("NOP", engine=1))], [0x1E, encode(make("FINISH"))]]
    for words in bad:
        with pytest.raises(PerfError) as ref:
            PerfModel(cfg, cache=False).run(words)
        clear_plans()
        with pytest.raises(PerfError) as got:
            PerfModel(cfg).run(words)
        assert str(got.value) == str(ref.value)


def test_cost_depends_only_on_the_signature():
    """Fields outside COST_FIELDS (addresses, shifts, flags) and DRAM bits above 4 KiB never change op_cost."""
    rng = np.random.default_rng(5)
    cfgs = [preset("tiny"), preset("default")]
    for spec in OPS:
        for _ in range(30):
            f = {x.name: int(rng.integers(0, min(1 << x.bits, 300))) for x in spec.fields if not x.signed}
            if spec.name == "NOP":
                f["engine"] = int(rng.integers(0, 3))
            g = {k: (int(rng.integers(0, min(1 << x.bits, 300))) if k not in COST_FIELDS else v)
                 for (k, v), x in zip(f.items(), [x for x in spec.fields if not x.signed], strict=True)}
            for k in ("dram", "stride"):  # DMA addresses and strides are whole beats
                for d in (f, g):
                    if k in d:
                        d[k] &= ~63
            if "dram" in g:
                g["dram"] = f["dram"] + (int(rng.integers(1, 1 << 10)) << 12)
            a, b = make(spec.name, **f), make(spec.name, **g)
            assert cost_signature(a) == cost_signature(b)
            for cfg in cfgs:
                for p in PARAMS[:3]:
                    assert op_cost(cfg, p, a) == op_cost(cfg, p, b), (spec.name, f, g)


def test_attention_beside_the_streams_is_counted_apart():
    """A decode step ordered by GQA group: the ATTN cycles that overlap a running GEMM_STREAM are reported in
    ``beside_cycles`` (within the ATTNs' own cycles), and the cycle breakdown's attention share leaves them out."""
    from systolica.bench.cycle_breakdown import breakdown

    cfg = preset("default").replace(attn_beside=1, dma_ports=2, load_ports=2)
    model = random_model("llama", seed=3, dim=72, n_layers=2, n_heads=6, n_kv_heads=3, vocab=96, max_seq=96)
    art = compile_model(model, cfg, page=16, max_seq=96, prefill_chunk=4)
    r = PerfModel(cfg).run(art.patched_program("decode", StepState(80, [3], list(range(6)))))
    assert 0 < r.beside_cycles.get("ATTN", 0) <= r.per_op_cycles["ATTN"]
    b = breakdown([r], peak_macs=cfg.rows * cfg.cols, what="decode")
    attn = r.per_op_cycles["ATTN"] + r.per_op_cycles["ATTN_OUT"]
    attn_beside = r.beside_cycles.get("ATTN", 0) + r.beside_cycles.get("ATTN_OUT", 0)
    assert b["shares"]["attention"] == pytest.approx((attn - attn_beside) / r.cycles)
    assert b["shares"]["attention_beside"] > 0
    plain = PerfModel(preset("default")).run(compile_model(model, preset("default"), page=16, max_seq=96,
                                                           prefill_chunk=4).patched_program(
        "decode", StepState(80, [3], list(range(6)))))
    assert plain.beside_cycles == {}


def test_line_ops_beside_the_streams_are_counted_apart():
    """A prefill chunk with SwiGLU in several blocks: the next gate block streams while this block's SILU and MUL
    run (config.attn_beside), their overlap is in ``beside_cycles``, the cached and uncached paths agree, and the
    breakdown's line-op share leaves it out."""
    from systolica.bench.cycle_breakdown import breakdown

    cfg = preset("default").replace(attn_beside=1, dma_ports=2, load_ports=2)
    model = random_model("llama", seed=3, dim=72, n_layers=1, n_heads=6, n_kv_heads=3, ffn_dim=1536, vocab=96,
                         max_seq=96)
    art = compile_model(model, cfg, page=16, max_seq=96, prefill_chunk=8)
    words = art.patched_program("prefill", StepState(0, list(range(1, 9)), [0]))
    r = PerfModel(cfg).run(words)
    clear_plans()
    assert PerfModel(cfg, cache=False).run(words).beside_cycles == r.beside_cycles
    assert 0 < r.beside_cycles.get("SILU", 0) <= r.per_op_cycles["SILU"]
    b = breakdown([r], peak_macs=cfg.rows * cfg.cols, what="prefill")
    line = sum(c for op, c in r.per_op_cycles.items() if op in ("SILU", "MUL", "ADD", "ROPE", "REQUANT", "QUANT",
                                                                 "RMSNORM"))
    off = sum(c for op, c in r.beside_cycles.items() if op not in ("ATTN", "ATTN_OUT"))
    assert b["shares"]["line ops"] == pytest.approx((line - off) / r.cycles)
    assert b["shares"]["line_ops_beside"] == pytest.approx(off / r.cycles) and off > 0
