"""4-bit GEMM_STREAMs take at most ``wstream4.MAX_ROWS`` (64) rows: the compiler caps the prefill chunk of a
model with 4-bit matrices there (with a warning naming the limit), refuses a batched decode step of more rows,
and never emits a 4-bit GEMM_STREAM the decoder would fault as ILLEGAL_FIELD."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from lowering_harness import GoldenRunner, assert_lockstep

from systolica import wstream4
from systolica.compiler.compile import CompileError, CompileWarning, compile_model
from systolica.compiler.gguf_reader import read_gguf
from systolica.compiler.writers import write_gguf
from systolica.config import preset
from systolica.isa import decode
from systolica.quant_model import quantize_model
from systolica.reference_quant import QuantRunner
from systolica.testmodels import random_model

MAX_SEQ = 96


@pytest.fixture(scope="module")
def q4_model(tmp_path_factory):
    """A one-layer llama whose every matrix is a Q4_0 checkpoint's (its codes kept)."""
    model = random_model("llama", dim=64, n_layers=1, n_heads=4, n_kv_heads=2, ffn_dim=96, vocab=96, tied=True,
                         max_seq=MAX_SEQ, seed=5)
    return read_gguf(write_gguf(model, tmp_path_factory.mktemp("q4") / "m.gguf", "Q4_0"))


def _q4_stream_rows(art, kind: str) -> list[int]:
    return [i.m for i in map(decode, art.programs[kind].words) if i.op == "GEMM_STREAM" and i.fields.get("wfmt", 0)]


@pytest.mark.parametrize("split", [False, True])
def test_a_large_prefill_chunk_is_capped_at_64_gemm_rows_and_stays_bit_exact(q4_model, split):
    cfg = preset("default")  # on-chip room for more than 64 rows: the chunk would be 72 (split: 41) uncapped
    cap = wstream4.MAX_ROWS // (2 if split else 1)
    with pytest.warns(CompileWarning, match=rf"prefill_chunk=90: .* at most {cap} rows: .* at most 64 rows"):
        big = compile_model(q4_model, cfg, page=16, max_seq=MAX_SEQ, prefill_chunk=90, act_split=split,
                            weights="int4")
    for kind in ("prefill", "prefill_nohead", "decode"):
        rows = _q4_stream_rows(big, kind)
        assert rows and max(rows) <= wstream4.MAX_ROWS, (kind, max(rows))
    assert big.rows("prefill") == cap == big.rows("prefill_nohead")  # the largest chunk the limit allows
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a chunk within the limit: no warning
        small = compile_model(q4_model, cfg, page=16, max_seq=MAX_SEQ, prefill_chunk=12, act_split=split,
                              weights="int4")
    assert small.rows("prefill") <= 12
    prompt = [int(t) for t in np.random.default_rng(3).integers(0, 96, 70)]  # > 64 rows: several runs
    a, b = GoldenRunner(big), GoldenRunner(small)
    np.testing.assert_array_equal(a.prefill(prompt), b.prefill(prompt))
    assert a.pos == b.pos == len(prompt)
    qm = quantize_model(q4_model, act_split=split, weights="int4")
    assert_lockstep(GoldenRunner(big), QuantRunner(qm, page=big.page), prompt, first=7, steps=2)


def test_a_batched_decode_step_past_64_gemm_rows_is_refused(q4_model):
    """(On ``default`` 40 split rows fit on chip: uncapped, its GEMM_STREAMs would have m = 80.)"""
    with pytest.raises(CompileError, match=r"batch=40: .* at most 64 rows .* 32 token rows with split activations"):
        compile_model(q4_model, preset("default"), page=16, max_seq=16, prefill_chunk=1, act_split=True, batch=40,
                      weights="int4")
    art = compile_model(q4_model, preset("default"), page=16, max_seq=16, prefill_chunk=1, act_split=True, batch=32,
                        weights="int4")
    assert max(_q4_stream_rows(art, "decode_batch")) == wstream4.MAX_ROWS


def test_a_config_without_the_4bit_datapath_is_a_compile_error_not_a_fault(q4_model):
    cfg = preset("tiny").replace(name="tiny_noq4", q4_groups=0)
    with pytest.raises(CompileError, match=r"decode program: .* ILLEGAL_FIELD .* no 4-bit datapath"):
        compile_model(q4_model, cfg, page=16, max_seq=16, prefill_chunk=1, weights="int4")
