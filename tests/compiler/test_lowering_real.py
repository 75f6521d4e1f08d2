"""A real pretrained checkpoint (SmolLM2-135M-Instruct, Q4_1 GGUF) compiled and run on the golden simulator.

Slow (a few minutes on two cores) and needs the checkpoint, fetched once with
``python -m systolica.compiler.model_zoo fetch`` (never at test time).
"""

from __future__ import annotations

import resource
import time

import numpy as np
import pytest
from lowering_harness import GoldenRunner

from systolica.compiler.compile import compile_model
from systolica.compiler.model_zoo import locate_default_model
from systolica.config import preset

pytestmark = pytest.mark.slow

PASSAGE = ("The sun is the star at the center of the Solar System. It is a massive, nearly perfect sphere of hot "
           "plasma, heated to incandescence by nuclear fusion reactions in its core.")


@pytest.fixture(scope="module")
def compiled():
    path = locate_default_model()
    if path is None:
        pytest.skip("SmolLM2 checkpoint not fetched: run `python -m systolica.compiler.model_zoo fetch`")
    from systolica.compiler.gguf_reader import read_gguf

    model = read_gguf(path)
    t0 = time.perf_counter()
    art = compile_model(model, preset("default"), page=16, max_seq=128, prefill_chunk=16)
    secs = time.perf_counter() - t0
    st = art.manifest["stats"]
    print(f"\nSmolLM2-135M on 'default': compile {secs:.1f} s, peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB, DRAM {art.dram_bytes:,} B, "
          f"decode {st['decode']['instructions']:,} instructions, weight bytes/token {st['decode']['weight_bytes']:,}, "
          f"prefill rows {st.get('prefill', {}).get('rows')}")
    return model, art


def test_greedy_continuation_is_sensible(compiled):
    model, art = compiled
    tok = model.tokenizer
    gold = GoldenRunner(art)
    logits = gold.prefill(tok.encode("The capital of France is"))
    out = []
    for _ in range(6):
        out.append(int(np.argmax(logits)))
        logits = gold.decode(out[-1])
    text = tok.decode(out)
    print(f"greedy continuation: {text!r}")
    assert "Paris" in text


@pytest.mark.parametrize("act_split", [False, True])
def test_teacher_forced_agreement_with_float(compiled, act_split):
    """Every step bit-exact with the integer reference; top-1 agreement with the float model reported.

    The agreement is a property of the quantization scheme (docs/quantization.md), which the
    lowering reproduces exactly (all 38 steps bit-exact); the bound below only catches a regression.
    Plain int8 activations measured 79-82% over this 38-token passage (as the numerics evolved),
    short of the issue's 90%; ``act_split`` (int8 part + residual) is the numerics' answer to that.
    """
    import inspect

    from systolica.reference_float import FloatModel
    from systolica.reference_quant import QuantRunner, quantize_model

    model, art = compiled
    if act_split:
        if "act_split" not in inspect.signature(quantize_model).parameters:
            pytest.skip("quantize_model has no act_split yet")
        art = compile_model(model, preset("default"), page=16, max_seq=128, prefill_chunk=16, act_split=True)
    kw = {"act_split": True} if act_split else {}
    ids = model.tokenizer.encode(PASSAGE)[:40]
    flt = FloatModel(model, dtype=np.float32).prefill(ids)  # (T, vocab)
    ref = QuantRunner(quantize_model(model, max_seq=128, **kw), page=art.page).prefill(ids)  # prefill == decode
    gold = GoldenRunner(art)
    got = np.array([gold.decode(t) for t in ids])
    bad = [i for i in range(len(ids)) if not np.array_equal(got[i], ref[i])]
    assert not bad, f"golden differs from the integer reference at steps {bad}"
    rate = float(np.mean(got.argmax(axis=1) == flt.argmax(axis=1)))
    print(f"act_split={act_split}: teacher-forced top-1 agreement with the float reference {rate:.1%} over "
          f"{len(ids)} tokens")
    assert rate >= 0.75
