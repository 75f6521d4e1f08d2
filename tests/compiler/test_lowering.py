"""Compiled programs on the golden simulator are bit-exact with the integer reference.

Each case compiles a random model, runs a prompt (whole prefill chunks, then decode for the rest)
and then at least 16 greedy decode steps on :class:`GoldenSim`, and compares every step's fx
logits with :class:`~systolica.reference_quant.QuantRunner` run on the same tokens.  Agreement with
the float reference (:class:`~systolica.reference_float.FloatModel`) is reported.
"""

from __future__ import annotations

import numpy as np
import pytest
from lowering_harness import GoldenRunner, assert_lockstep

from systolica import numerics as nx
from systolica.artifact import StepState
from systolica.compiler.compile import compile_model
from systolica.compiler.kv_page import choose_page
from systolica.config import preset
from systolica.isa import decode
from systolica.reference_float import FloatModel
from systolica.reference_quant import QuantRunner, quantize_model
from systolica.testmodels import random_model

# name -> (random_model kwargs, page, max_seq, prefill_chunk)
CASES = {
    # GQA (2 query heads per KV head), untied; dims multiples of 4 but not of 8 for head_dim 12
    "llama-gqa": (dict(arch="llama", dim=48, n_layers=2, n_heads=4, n_kv_heads=2, vocab=100, seed=1), 16, 64, 8),
    # nothing a multiple of the array: dim 44, head_dim 22, ffn 118, vocab 97; tied; one KV head (MQA)
    "llama-odd-tied": (dict(arch="llama", dim=44, n_layers=2, n_heads=2, n_kv_heads=1, vocab=97, tied=True,
                            seed=2), 8, 48, 4),
    # GPT-2: LayerNorm, biases, GELU, learned positions; head_dim 10
    "gpt2": (dict(arch="gpt2", dim=40, n_layers=2, n_heads=4, vocab=90, tied=True, seed=3), 8, 48, 6),
}
PRESETS = ["tiny", "default"]


def _run(case: str, cfg_name: str, prompt_len: int = 11, steps: int = 16):
    kw, page, max_seq, chunk = CASES[case]
    model = random_model(max_seq=max_seq, **kw)
    cfg = preset(cfg_name)
    art = compile_model(model, cfg, page=page, max_seq=max_seq, prefill_chunk=chunk)
    gold = GoldenRunner(art, seed=len(case))
    ref = QuantRunner(quantize_model(model), page=art.page)
    flt = FloatModel(model)
    prompt = [int(t) for t in np.random.default_rng(7).integers(0, kw["vocab"], prompt_len)]
    got, want, fl = [gold.prefill(prompt)], [ref.prefill(prompt)[-1]], [flt.prefill(prompt)[-1]]
    for _ in range(steps):
        tok = int(nx.argmax(want[-1][None, :])[0])
        got.append(gold.decode(tok))
        want.append(ref.decode(tok))
        fl.append(flt.decode(tok))
    return art, gold, np.array(got), np.array(want), np.array(fl)


@pytest.mark.parametrize("cfg_name", PRESETS)
@pytest.mark.parametrize("case", list(CASES))
def test_golden_bit_exact_with_reference(case, cfg_name):
    art, gold, got, want, fl = _run(case, cfg_name)
    assert got.shape == want.shape == (17, CASES[case][0]["vocab"])
    bad = [i for i in range(len(got)) if not np.array_equal(got[i], want[i])]
    assert not bad, f"steps {bad} differ; first max |diff| = {np.abs(got[bad[0]].astype(np.int64) - want[bad[0]]).max()}"
    # both programs ran and covered more than one page of the KV cache
    assert "prefill" in art.programs and art.rows("prefill") > 1
    assert gold.pos > art.page
    # agreement with the float reference (reported; the bound only catches a broken lowering)
    q = nx.from_fx(got)
    rel = float(np.sqrt(np.mean((q - fl) ** 2)) / np.sqrt(np.mean(fl ** 2)))
    top1 = float(np.mean(q.argmax(axis=1) == fl.argmax(axis=1)))
    print(f"\n{case}/{cfg_name}: logits rel RMS error vs float {rel:.3%}, top-1 agreement {top1:.0%} "
          f"over {len(q)} steps")
    assert rel < 0.25


@pytest.mark.parametrize("cfg_name", PRESETS)
def test_chosen_page_bit_exact(cfg_name):
    """No page given: the compiler chooses 64 tokens (compiler/kv_page.py); golden == reference at that page over
    more than one page (prefill in chunks, then decode), the reference built with the artifact's page.  Split
    activations (as ``systolica run``): their ~15 bits keep the online softmax's per-tile rounding, so a reference
    at page 16 differs from row 17 on and this fails."""
    kw, _, _, chunk = CASES["llama-gqa"]
    model = random_model(max_seq=160, **kw)
    cfg = preset(cfg_name)
    art = compile_model(model, cfg, max_seq=160, prefill_chunk=chunk, act_split=True)
    assert art.page == choose_page(cfg, model.config, 160) == 64
    gold, ref = GoldenRunner(art), QuantRunner(quantize_model(model, act_split=True), page=art.page)
    prompt = [int(t) for t in np.random.default_rng(5).integers(0, kw["vocab"], 70)]
    assert_lockstep(gold, ref, prompt, first=3, steps=4)
    assert gold.pos > art.page


@pytest.mark.parametrize("cfg_name", PRESETS)
def test_golden_retires_every_instruction_once(cfg_name):
    """No branches: the golden simulator's instruction count equals the program length."""
    art, gold, *_ = _run("llama-gqa", cfg_name, prompt_len=8, steps=1)
    for kind, n in gold.retired.items():
        assert n == art.manifest["stats"][kind]["instructions"] == len(art.programs[kind])


def _kv_load_bytes(art, words) -> dict[tuple[int, int, int, int], int]:
    """Bytes the KV-cache LOADs of a patched program move: {(layer, physical page, head, byte in the tile): bytes}."""
    kv, cols = art.manifest["kv"], art.config.cols
    tile, base = kv["tile_bytes"], kv["base"]
    out: dict[tuple[int, int, int, int], int] = {}
    for w in words:
        ins = decode(w)
        if ins.op == "LOAD" and ins.rows * ins.lines and base <= ins.dram < base + kv["layers"] * kv["n_pages"] * \
                kv["heads"] * tile:
            t, off = divmod(ins.dram - base, tile)
            layer, rest = divmod(t, kv["n_pages"] * kv["heads"])
            key = (layer, *divmod(rest, kv["heads"]), off)
            out[key] = out.get(key, 0) + ins.rows * ins.lines * cols  # scratchpad lines: cols bytes
    return out


@pytest.mark.parametrize("cfg_name", PRESETS)
def test_kv_loads_move_valid_tokens_only(cfg_name):
    """Decode with 16-token pages at contexts 4 .. 37, so the context ends at every slot of a page, on a page
    boundary (16, 32) and in page 0, 1 and 2: golden == reference bit for bit at every step, and each step's KV LOADs
    move the whole tile of every page before the one the context's last token is in (the tail) and, of the tail with
    v = 1 .. 16 tokens, v tokens of K and of V (v * hd * 2 bytes per KV head, not 16 * hd * 2) and the K exponents
    with v V exponents (three LOADs: a LOAD packs its rows in the scratchpad and the tile's V part starts 16 * hd
    lines after K).  So the step's new token is never in a whole page's LOAD (decode hoists those above its STORE)."""
    kw, page, max_seq, chunk = CASES["llama-gqa"]
    model = random_model(max_seq=max_seq, **kw)
    art = compile_model(model, preset(cfg_name), page=page, max_seq=max_seq, prefill_chunk=chunk)
    gold, ref = GoldenRunner(art, seed=3), QuantRunner(quantize_model(model), page=art.page)
    kv, cols = art.manifest["kv"], art.config.cols
    P, hd = art.page, kv["hd_lines"] * cols  # hd: bytes of a token's K (or V) row of one head, padded to lines
    prompt = [7, 3, 9]
    np.testing.assert_array_equal(gold.prefill(prompt), ref.prefill(prompt)[-1])
    tok, tails = 1, set()
    for _ in range(34):
        n = gold.pos + 1  # the step's context
        moved = _kv_load_bytes(art, art.patched_program("decode", StepState(gold.pos, [tok], gold.block_table)))
        want = {}
        tail = (n - 1) // P
        v = n - tail * P
        for layer in range(kv["layers"]):
            for h in range(kv["heads"]):
                for j in range(tail):
                    want[(layer, gold.block_table[j], h, 0)] = kv["tile_bytes"]
                phys = gold.block_table[tail]
                want[(layer, phys, h, 0)] = v * hd  # K
                want[(layer, phys, h, P * hd)] = v * hd  # V
                want[(layer, phys, h, 2 * P * hd)] = (P + v) * cols  # K exponents, then V's first v
        assert moved == want, f"context {n}"
        tails.add((tail, v))
        want_logits = ref.decode(tok)
        np.testing.assert_array_equal(gold.decode(tok), want_logits, err_msg=f"decode at context {n}")
        tok = int(nx.argmax(want_logits[None, :])[0])
    assert {j for j, _ in tails} == {0, 1, 2} and (0, P) in tails and (1, P) in tails  # tails of 16 tokens too


@pytest.mark.parametrize("cfg_name", PRESETS)
def test_decode_loads_whole_pages_before_its_kv_stores(cfg_name):
    """A decode step's new token is only ever in the tail, so its program LOADs KV head 0's first whole pages (one
    per KV slot) after the last weight stream and before the step's KV STOREs, and the tail's LOADs after them;
    prefill keeps every KV LOAD behind its STOREs.  Where three slots fit half the scratchpad, the whole pages
    go to three slot addresses in turn."""
    kw, page, max_seq, chunk = CASES["llama-gqa"]
    art = compile_model(random_model(max_seq=max_seq, **kw), preset(cfg_name), page=page, max_seq=max_seq,
                        prefill_chunk=chunk)
    kv = art.manifest["kv"]
    P, tile, base = art.page, kv["tile_bytes"], kv["base"]
    region = (base, base + kv["n_pages"] * kv["heads"] * tile)  # layer 0's pages

    def layer0(kind, st):
        ins = [decode(w) for w in art.patched_program(kind, st)]
        stores = [i for i, x in enumerate(ins) if x.op == "STORE" and x.rows and region[0] <= x.dram < region[1]]
        loads = [i for i, x in enumerate(ins) if x.op == "LOAD" and x.rows * x.lines and region[0] <= x.dram < region[1]]
        whole = [i for i in loads if (ins[i].dram - base) % tile == 0 and ins[i].lines * art.config.cols == tile]
        return ins, stores, loads, whole

    pos = 3 * P + 5  # three whole pages and a tail of 6 tokens
    ins, stores, loads, whole = layer0("decode", StepState(pos, [1], list(range(4))))
    n_slots = len({ins[i].sram for i in whole})
    assert n_slots == (3 if 3 * tile // art.config.cols <= art.config.spad_lines // 2 else 2)
    early = [i for i in whole if i < stores[0]]
    assert len(early) == min(n_slots, 3)
    last_stream = max(i for i in range(stores[0]) if ins[i].op == "GEMM_STREAM")
    assert last_stream < early[0]
    assert all(i > stores[-1] for i in loads if i not in whole)  # the tail's three LOADs wait for the STOREs
    _, stores, loads, _ = layer0("prefill", StepState(pos - 2, [1, 2], list(range(4))))
    assert stores and min(loads) > max(stores)


@pytest.mark.slow
@pytest.mark.parametrize("cfg_name", ["tiny", "default", "large"])
def test_bigger_model_long_context(cfg_name):
    kw = dict(arch="llama", dim=96, n_layers=3, n_heads=6, n_kv_heads=2, vocab=300, seed=5)
    model = random_model(max_seq=160, **kw)
    art = compile_model(model, preset(cfg_name), page=16, max_seq=160, prefill_chunk=16)
    gold, ref = GoldenRunner(art), QuantRunner(quantize_model(model), page=art.page)
    prompt = list(range(1, 40))
    assert_lockstep(gold, ref, prompt, first=5, steps=40)


def test_small_buffers_split_n_with_shallow_queues():
    """Buffers so small that the output splits in several blocks (per-row REQUANT), with token queues and
    instruction queues only 2 deep: still bit-exact.  K never splits: GEMM_STREAM reads all of K from DRAM."""
    cfg = preset("tiny").replace(name="narrow", spad_kib=1, acc_kib=1, vbuf_kib=4, queue_depth=2, cmd_depth=2)
    model = random_model("llama", dim=32, n_layers=1, n_heads=2, n_kv_heads=1, vocab=60, max_seq=32, seed=9)
    art = compile_model(model, cfg, page=4, max_seq=32, prefill_chunk=4)
    st = art.manifest["stats"]
    assert art.rows("prefill") > 1
    tilings = st["prefill"]["tilings"]
    assert all(kt == -(-_in_features(model, n) // cfg.cols) for n, (nt, kt) in tilings.items()), tilings
    n_split = [n for n, (nt, kt) in tilings.items() if nt < -(-_out_features(model, n) // cfg.cols)]
    assert n_split, tilings
    per_row = [i for i in art.programs["prefill"].instrs() if i.op == "REQUANT" and i.rows == 1]
    assert per_row, "a split output is requantized row by row"
    gold, ref = GoldenRunner(art), QuantRunner(quantize_model(model), page=art.page)
    prompt = [5, 9, 2, 33, 41, 7, 1, 0, 59]
    assert_lockstep(gold, ref, prompt, first=3)


def _in_features(model, name):
    return (model.output_weight() if name == "output" else model.w(name)).shape[1]


def _out_features(model, name):
    return (model.output_weight() if name == "output" else model.w(name)).shape[0]


def _has_act_split() -> bool:
    import inspect

    return "act_split" in inspect.signature(quantize_model).parameters


@pytest.mark.skipif(not _has_act_split(), reason="quantize_model has no act_split yet")
@pytest.mark.parametrize("case, cfg_name", [("llama-odd-tied", "tiny"), ("gpt2", "default"), ("llama-gqa", "default")])
def test_split_activations_bit_exact(case, cfg_name):
    """QUANT split=1 (int8 part + int8 residual, twice the GEMM rows, halves added) on every linear input."""
    kw, page, max_seq, chunk = CASES[case]
    model = random_model(max_seq=max_seq, **kw)
    art = compile_model(model, preset(cfg_name), page=page, max_seq=max_seq, prefill_chunk=chunk, act_split=True)
    assert art.manifest["act_split"] and art.manifest["stats"]["decode"]["per_op"]["ADD"] > 0
    gold, ref = GoldenRunner(art), QuantRunner(quantize_model(model, act_split=True), page=art.page)
    prompt = [5, 1, 4, 1, 5, 9, 2, 6, 5]
    assert_lockstep(gold, ref, prompt, first=3)
