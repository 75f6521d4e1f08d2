"""Attention blocks ordered by GQA group (compiler/gqa_groups.py) on an accelerator with ``attn_beside``.

The golden simulator runs the grouped programs (decode steps and prefill chunks) bit for bit like the integer
reference, over several pages of the KV cache; the programs interleave the next group's weight streams with a
group's ATTNs, and those streams push no token (else the hardware would not run them on); batched decode steps
keep the layer order.
"""

from __future__ import annotations

import dataclasses

import pytest
from lowering_harness import GoldenRunner, assert_lockstep

from systolica.artifact import StepState
from systolica.compiler.compile import compile_model
from systolica.config import preset
from systolica.isa import Engine, decode
from systolica.reference_quant import QuantRunner, quantize_model
from systolica.testmodels import random_model

MODELS = {  # GQA groups of 2 query heads (two KV heads), and SmolLM2's 3 of 3 (three KV heads)
    "gqa2": dict(arch="llama", dim=48, n_layers=2, n_heads=4, n_kv_heads=2, vocab=100, seed=1),
    "gqa3": dict(arch="llama", dim=72, n_layers=2, n_heads=9, n_kv_heads=3, vocab=100, seed=4),
}


def _beside(name: str):
    return dataclasses.replace(preset(name), attn_beside=1)


def _compile(model: str, cfg, max_seq: int = 96):
    return compile_model(random_model(max_seq=max_seq, **MODELS[model]), cfg, page=16, max_seq=max_seq,
                         prefill_chunk=8)


@pytest.mark.parametrize("cfg_name", ["tiny", "default"])
@pytest.mark.parametrize("model", list(MODELS))
def test_grouped_decode_is_bit_exact_with_the_reference(model, cfg_name):
    """19 prompt tokens (grouped prefill chunks of 8, 8 and 3 rows, the second across a page boundary), then 40
    decode steps: contexts from one page (16 tokens) to four, every tail length."""
    kw = MODELS[model]
    m = random_model(max_seq=96, **kw)
    art = compile_model(m, _beside(cfg_name), page=16, max_seq=96, prefill_chunk=8)
    gold, ref = GoldenRunner(art), QuantRunner(quantize_model(m), page=art.page)
    assert_lockstep(gold, ref, list(range(1, 20)), first=5, steps=40)
    assert gold.pos == 59


@pytest.mark.parametrize("max_seq, page", [(16, 16), (24, 8)])
def test_grouped_decode_of_few_pages_is_bit_exact(max_seq, page):
    """One page (or three of 8 tokens): a group's K and V streams end at the tail, back to back (no page to run
    beside), and the relay NOP follows their STOREs at once; golden = integer reference to the last position."""
    m = random_model(max_seq=max_seq, **MODELS["gqa3"])
    art = compile_model(m, _beside("tiny"), page=page, max_seq=max_seq, prefill_chunk=8)
    gold, ref = GoldenRunner(art), QuantRunner(quantize_model(m), page=art.page)
    assert_lockstep(gold, ref, [1, 2, 3], first=3, steps=max_seq - 4)
    assert gold.pos == max_seq - 1


@pytest.mark.parametrize("model", list(MODELS))
def test_own_kv_and_next_q_stream_between_a_groups_attns(model):
    """In every layer each group's pages' ATTNs run beside its own K and V streams and then (but the last group)
    the next group's Q stream: those streams lie between its first ATTN and its ATTN_OUT, none of them pushes a
    token, each REQUANT taking one out comes after ATTNs that ran beside it, and the group's four KV STOREs lie
    there too, before a compute NOP (the relay to the tail's LOADs) that is itself beside a stream.  KV STOREs
    store one head each."""
    art = _compile(model, _beside("tiny"))
    kv_heads = MODELS[model]["n_kv_heads"]
    ins = [decode(w) for w in art.patched_program("decode", StepState(40, [3], list(range(3))))]
    attn_out = [i for i, x in enumerate(ins) if x.op == "ATTN_OUT"]
    assert len(attn_out) == kv_heads * MODELS[model]["n_layers"]
    beside = 0
    for g, end in enumerate(attn_out):
        last = g % kv_heads == kv_heads - 1  # the layer's last group: no next Q to stream
        begin = max(i for i in range(end) if ins[i].op == "ATTN" and ins[i].init)  # the group's first ATTN
        streams = [i for i in range(begin - 1, end) if ins[i].op == "GEMM_STREAM"]
        assert len(streams) >= (2 if last else 3), f"group {g}: {len(streams)} streams beside its ATTNs"
        assert [ins[i].n for i in streams[:2]] == [art.manifest["kv"]["hd_lines"]] * 2, "its own K and V first"
        for s in streams:
            x = ins[s]
            assert not (x.push_prev or x.push_next), f"stream {s} pushes a token: it would not run on"
            nxt = next(i for i in range(s + 1, len(ins)) if ins[i].engine == Engine.COMPUTE and ins[i].op != "ATTN")
            beside += sum(ins[i].op == "ATTN" for i in range(s + 1, nxt))
        stores = [i for i in range(begin, end) if ins[i].op == "STORE" and ins[i].buf == 0]
        relay = [i for i in range(begin, end) if ins[i].op == "NOP" and ins[i].engine == Engine.COMPUTE]
        assert len(stores) == 4 and len(relay) == 1 and stores[-1] < relay[0], (g, stores, relay)
        if not last:
            assert streams[2] < relay[0], f"group {g}: the relay waits beside the next group's Q stream"
    assert beside > 0
    stores = [x for x in ins if x.op == "STORE" and x.buf == 0]
    assert stores and all(x.rows == 1 for x in stores)
    # the layer's Q, K and V mult rows are one LOAD (vector buffer) before its first stream, and every REQUANT of
    # the block reads its rows there: the in-order load engine takes no mult row between the pages
    mats = art.manifest["weights"]["matrices"]
    for layer in range(MODELS[model]["n_layers"]):
        q, v = (mats[f"blk.{layer}.attn_{p}"] for p in ("q", "v"))  # (their rows at whole lines of each other)
        lines = (v["mult"] - q["mult"]) // (4 * art.config.cols) + v["Nl"]
        end = attn_out[(layer + 1) * kv_heads - 1]
        mult, = (i for i, x in enumerate(ins) if x.op == "LOAD" and x.buf == 2 and x.dram == q["mult"])
        x = ins[mult]
        assert (x.rows, x.lines) == (1, lines) and mult < min(i for i in range(mult, end) if ins[i].op == "GEMM_STREAM")
        assert not any(ins[i].op == "LOAD" and ins[i].buf == 2 for i in range(mult + 1, end))
        requants = [ins[i] for i in range(mult, end) if ins[i].op == "REQUANT"]
        assert len(requants) >= 3 * kv_heads and all(x.sram <= r.mult < x.sram + lines for r in requants)


def test_batched_steps_keep_the_layer_order():
    """Batched decode steps (a sequence a row, each its own pages) are not grouped: the same instructions as
    without attn_beside; decode and prefill are."""
    m = random_model(max_seq=64, **MODELS["gqa3"])
    ops = {}
    for beside in (0, 1):
        cfg = dataclasses.replace(preset("tiny"), attn_beside=beside)
        art = compile_model(m, cfg, page=16, max_seq=64, prefill_chunk=8, batch=2)
        ops[beside] = {k: [(x.op, x.fields) for x in (decode(w) for w in art.programs[k].words)]
                       for k in art.programs}
    assert set(ops[0]) == set(ops[1]) and {"prefill", "decode", "decode_batch"} <= set(ops[0])
    assert ops[0]["decode_batch"] == ops[1]["decode_batch"]
    assert ops[0]["decode"] != ops[1]["decode"] and ops[0]["prefill"] != ops[1]["prefill"]


def test_grouped_prefill_streams_beside_the_pages_and_the_tail():
    """In a prefill chunk the next group's K and V stream beside the pages' ATTNs and its K / V STOREs follow
    them there (its page LOADs wait for those STOREs); its Q streams beside the tail's ATTNs and ATTN_OUT, which
    every chunk has (the pages its context fills are not known when compiling).  A group's RoPE and QUANT are one
    instruction for all the chunk's rows (Q, K and V laid out group by group); the STOREs go a row at a time, one
    head each."""
    art = _compile("gqa3", _beside("tiny"))
    T, kv_heads, layers = art.rows("prefill"), MODELS["gqa3"]["n_kv_heads"], MODELS["gqa3"]["n_layers"]
    ins = [decode(w) for w in art.programs["prefill"].words]
    ropes = [x for x in ins if x.op == "ROPE"]
    assert len(ropes) == 2 * kv_heads * layers and all(x.rows == T for x in ropes)
    stores = [x for x in ins if x.op == "STORE" and x.buf == 0]
    assert len(stores) == 4 * T * kv_heads * layers and all(x.rows == 1 for x in stores)
    outs = [i for i, x in enumerate(ins) if x.op == "ATTN_OUT"]
    for g in range(kv_heads * layers):
        if g % kv_heads == kv_heads - 1:
            continue  # the layer's last group: nothing left to stream beside it
        first_out = outs[g * T]  # the group's ATTN_OUTs: T in a row, after the tail's T ATTNs
        q = first_out - T - 1
        assert ins[q].op == "GEMM_STREAM" and all(ins[i].op == "ATTN" for i in range(q + 1, first_out))
        prev = outs[g * T - 1] if g else 0
        begin = min(i for i in range(prev, q) if ins[i].op == "ATTN" and ins[i].init)  # page 0's first row
        kv = [i for i in range(begin - 3, q) if ins[i].op == "GEMM_STREAM"]  # (a stream right before it)
        assert len(kv) >= 2, f"group {g}: the next group's K and V stream beside the pages"
        assert sum(ins[i].op == "STORE" for i in range(begin, q)) == 4 * T
        for i in (*kv, q):
            assert not (ins[i].push_prev or ins[i].push_next), "a stream that pushes does not run on"


def test_without_attn_beside_decode_is_not_grouped():
    """The default configs emit the layer order: no GEMM_STREAM between a group's first ATTN and its ATTN_OUT."""
    art = _compile("gqa3", preset("tiny"))
    ins = [decode(w) for w in art.patched_program("decode", StepState(40, [3], list(range(3))))]
    for end in (i for i, x in enumerate(ins) if x.op == "ATTN_OUT"):
        begin = max(i for i in range(end) if ins[i].op == "ATTN" and ins[i].init)
        assert not any(ins[i].op == "GEMM_STREAM" for i in range(begin, end))


@pytest.mark.parametrize("name", ["kv260", "pynq-z2", "tiny", "default"])
def test_page_estimate_is_the_models_attn_cost_with_its_margins(name):
    """The compiler's estimate of a group's ATTN over a whole page (which sets how many pages a stream spans) is the
    performance model's ATTN cost plus the documented margins, on board presets and plain ones: the compiler cannot
    import the model, so its copy of the model's fixed cycles is checked here (it had drifted when the hardware's
    latency changed, and its per-row term had been kv260's on every config)."""
    from systolica.boards.board import board_config
    from systolica.compiler.gqa_groups import ATTN_JOB_MARGIN, ATTN_ROW_MARGIN, page_attn_cycles
    from systolica.isa import make
    from systolica.sim.perf_costs import PerfParams, _attn

    cfg = board_config(name) if name in ("kv260", "pynq-z2") else preset(name)
    for page, hd_lines, group in ((64, 64 // cfg.cols, 3), (16, 2, 4), (32, 1, 1)):
        ins = make("ATTN", q=0, qexp=0, kv=0, state=0, nq=group, hd=hd_lines, t=page, page_log2=6, offset=page,
                   causal=1, init=0)
        jobs = -(-group // cfg.attn_rows)
        want = _attn(cfg, PerfParams(), ins).exec_cycles + jobs * ATTN_JOB_MARGIN + group * ATTN_ROW_MARGIN
        assert page_attn_cycles(cfg, page, hd_lines, group) == want, (page, hd_lines, group)


def test_qkv_mult_span_takes_rows_at_whole_lines_in_order():
    """One LOAD reads a block's Q, K and V mult rows where they follow each other at whole lines (a line: cols
    int32); rows between lines, out of order or over each other keep one LOAD a stream."""
    from types import SimpleNamespace as M

    from systolica.compiler.gqa_groups import qkv_mult_span

    line = 16 * 4
    q, k, v = M(mult_off=1024, Nl=6), M(mult_off=1024 + 8 * line, Nl=2), M(mult_off=1024 + 10 * line, Nl=2)
    assert qkv_mult_span([q, k, v], 16) == (12, {"q": 0, "k": 8, "v": 10})  # a two-line gap after Q is read too
    assert qkv_mult_span([q, M(mult_off=1024 + 8 * line + 4, Nl=2), v], 16) is None  # K between lines
    assert qkv_mult_span([q, M(mult_off=1024 + 5 * line, Nl=2), v], 16) is None  # K over Q's last row
    assert qkv_mult_span([q, v, k], 16) is None  # out of order
