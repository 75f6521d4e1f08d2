"""The KV page the compiler chooses (compiler/kv_page.py): 64 tokens, less for a small scratchpad or a short
context; ``compile_model`` without a page uses it and records it.  Golden == reference at the chosen page:
tests/compiler/test_lowering.py::test_chosen_page_bit_exact."""

from __future__ import annotations

import pytest

from systolica.boards.board import board_config
from systolica.compiler.compile import CompileError, compile_model
from systolica.compiler.kv_page import DEFAULT_PAGE, KV_SPAD_SHARE, choose_page, page_and_context, page_choice
from systolica.config import preset
from systolica.layout import kv_tile, lines_for
from systolica.model import ModelConfig
from systolica.testmodels import random_model

#: SmolLM2-135M's shape (head_dim 64)
SMOLLM2 = ModelConfig(arch="llama", dim=576, n_layers=30, n_heads=9, n_kv_heads=3, ffn_dim=1536, vocab_size=49152,
                      max_seq=8192, tied_output=True)


def _slots_lines(cfg, c, page: int) -> int:
    return 2 * kv_tile(page.bit_length() - 1, lines_for(c.head_dim, cfg.cols)).lines


@pytest.mark.parametrize("cfg", [board_config("kv260"), board_config("pynq-z2"), preset("default")],
                         ids=lambda c: c.name)
def test_default_page_is_64_for_smollm2(cfg):
    assert DEFAULT_PAGE == 64
    assert choose_page(cfg, SMOLLM2) == 64
    assert choose_page(cfg, SMOLLM2, max_seq=256) == 64
    ch = page_choice(cfg, SMOLLM2, 256)
    assert (ch.page, ch.source) == (64, "chosen") and "default 64" in ch.why


@pytest.mark.parametrize("spad_kib, want", [(32, 32), (16, 16), (8, 8), (1, 1)])
def test_a_small_scratchpad_gets_a_smaller_page(spad_kib, want):
    """default config (cols 8, head_dim 64: 8 lines a head): a tile is 18 lines a token, two slots 36; the
    scratchpad's half is 1024 lines at 16 KiB."""
    cfg = preset("default").replace(name=f"spad{spad_kib}", spad_kib=spad_kib)
    ch = page_choice(cfg, SMOLLM2, 512)
    assert ch.page == want and ch.page & (ch.page - 1) == 0
    assert want == 1 or _slots_lines(cfg, SMOLLM2, want) <= cfg.spad_lines // KV_SPAD_SHARE
    assert want == 1 or _slots_lines(cfg, SMOLLM2, 2 * want) > cfg.spad_lines // KV_SPAD_SHARE  # the largest
    assert f"{cfg.spad_lines}-line scratchpad" in ch.why


@pytest.mark.parametrize("max_seq, want", [(1, 1), (2, 2), (3, 4), (17, 32), (20, 32), (32, 32), (33, 64),
                                           (64, 64), (65, 64), (4096, 64)])
def test_never_more_than_max_seq_needs(max_seq, want):
    assert choose_page(preset("default"), SMOLLM2, max_seq) == want


def test_page_and_context_rounds_to_the_page_the_compiler_chooses():
    """A caller that rounds its context to whole pages and then passes no page gets the page it rounded to."""
    for c in (SMOLLM2, random_model(max_seq=48).config, random_model(max_seq=100).config):
        for cfg in (preset("tiny"), preset("default"), preset("default").replace(name="s8", spad_kib=8)):
            for tokens in range(1, 300):
                page, max_seq = page_and_context(cfg, c, tokens)
                assert max_seq <= c.max_seq and max_seq % page == 0 or max_seq == c.max_seq
                assert max_seq >= min(tokens, c.max_seq)
                assert choose_page(cfg, c, max_seq) == page, (c.max_seq, cfg.name, tokens)
    assert page_and_context(preset("default"), SMOLLM2, 30, page=16) == (16, 32)


def test_compile_model_records_the_chosen_or_requested_page():
    model = random_model("llama", dim=48, n_layers=1, n_heads=4, n_kv_heads=2, vocab=64, seed=1, max_seq=128)
    art = compile_model(model, preset("tiny"), max_seq=128, prefill_chunk=4)
    assert art.page == choose_page(preset("tiny"), model.config, 128) == 64
    assert art.manifest["kv_page"]["source"] == "chosen"
    art = compile_model(model, preset("tiny"), page=16, max_seq=128, prefill_chunk=4)
    assert art.page == 16 and art.manifest["kv_page"]["source"] == "requested"
    assert compile_model(model, preset("tiny"), max_seq=20, prefill_chunk=4).page == 32
    with pytest.raises(CompileError, match="page=12 must be a power of two"):
        compile_model(model, preset("tiny"), page=12, max_seq=128)


def test_a_small_scratchpad_compiles_at_its_chosen_page():
    cfg = preset("tiny").replace(name="spad2", spad_kib=2)  # 512 lines: two 64-token tiles (head_dim 12) are 1024
    model = random_model("llama", dim=48, n_layers=1, n_heads=4, n_kv_heads=2, vocab=64, seed=1, max_seq=128)
    art = compile_model(model, cfg, max_seq=128, prefill_chunk=4)
    assert art.page == choose_page(cfg, model.config, 128) == 16
    assert "scratchpad" in art.manifest["kv_page"]["why"]
