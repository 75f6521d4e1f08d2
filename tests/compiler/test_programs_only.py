"""The programs-only compile (compiler/programs_only.py) gives the words of a full compile, bit for bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from systolica.boards.board import load_board
from systolica.compiler.compile import compile_model
from systolica.compiler.programs_only import ModelShape, compile_programs, placeholder_quant
from systolica.config import preset
from systolica.quant_model import QuantError, quantize_model
from systolica.testmodels import random_model

CONFIGS = [preset("tiny"), preset("default"), load_board("kv260").config, load_board("pynq-z2").config,
           load_board("zcu104").config]


def _same_programs(full, only) -> None:
    assert only.manifest["programs_only"] is True and only.image.size == 0
    assert list(only.programs) == list(full.programs)
    for kind, prog in full.programs.items():
        assert only.programs[kind].words == prog.words, kind  # the encoded words, patched to the first step
    # what patching and timing read: patch lists, rows, regions, KV layout, row sizes, weight placement
    for key in ("programs", "regions", "kv", "kv_page", "rows", "logits", "weights", "dram_top", "max_seq", "act_split",
                "config_hash"):
        assert only.manifest[key] == full.manifest[key], key
    for kind in full.programs:
        a, b = full.manifest["stats"][kind], only.manifest["stats"][kind]
        assert a == b, kind


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("act_split", [False, True])
def test_programs_equal_a_full_compile_on_small_models(arch, act_split):
    model = random_model(arch, dim=48, n_layers=2, n_heads=4, n_kv_heads=2 if arch == "llama" else None, ffn_dim=72,
                         vocab=200, seed=7, max_seq=64, tied=arch == "gpt2")
    for cfg in CONFIGS:
        full = compile_model(model, cfg, page=16, max_seq=32, prefill_chunk=16, act_split=act_split)
        _same_programs(full, compile_programs(model, cfg, page=16, max_seq=32, prefill_chunk=16,
                                              act_split=act_split))


def test_programs_equal_a_full_compile_at_the_chosen_page():
    """No page given: both compiles choose the same one (64 here, 16 on a 2 KiB scratchpad) and the same words."""
    model = random_model("llama", dim=48, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=72, vocab=200, seed=7,
                         max_seq=128)
    for cfg, page in ((preset("tiny"), 64), (preset("tiny").replace(name="spad2", spad_kib=2), 16),
                      (load_board("kv260").config, 64)):
        full = compile_model(model, cfg, max_seq=128, prefill_chunk=8, act_split=True)
        assert full.page == page, cfg.name
        _same_programs(full, compile_programs(model, cfg, max_seq=128, prefill_chunk=8, act_split=True))


def test_programs_equal_a_full_compile_on_a_smollm2_shaped_layer():
    """SmolLM2-135M's block shape (dim 576, 9/3 heads, ffn 1536), on the boards a sweep uses; from its shape alone."""
    model = random_model("llama", dim=576, n_layers=1, n_heads=9, n_kv_heads=3, ffn_dim=1536, vocab=256, seed=3,
                         max_seq=64, tied=True)
    shape = ModelShape.of(model)
    for cfg in CONFIGS[2:]:
        for rows in (8, 16, 32):
            c = cfg.reshaped(rows, rows, name=f"{cfg.name}-{rows}", dma_bits=min(cfg.dma_bits, rows * 8))
            _same_programs(compile_model(model, c, page=16, max_seq=32), compile_programs(shape, c, page=16, max_seq=32))


def test_programs_equal_a_full_compile_on_smollm2_itself():
    from systolica.compiler.gguf_reader import read_gguf
    from systolica.compiler.model_zoo import locate_default_model

    path = locate_default_model()
    if path is None:
        pytest.skip("the default model is not cached (python -m systolica.compiler.model_zoo fetch)")
    model = read_gguf(path, load_tokenizer=False, layers=1)
    cfg = load_board("kv260").config
    _same_programs(compile_model(model, cfg, page=16, max_seq=32), compile_programs(model, cfg, page=16, max_seq=32))


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_placeholder_has_the_names_shapes_and_shifts_of_quantize_model(arch):
    model = random_model(arch, dim=32, n_layers=2, n_heads=4, vocab=64, seed=1, max_seq=48, tied=arch == "llama")
    qm = quantize_model(model, max_seq=48)
    ph = placeholder_quant(ModelShape.of(model), 48)
    assert list(ph.mats) == list(qm.mats)
    for k, m in qm.mats.items():
        assert (ph.mats[k].q.shape, ph.mats[k].mult.shape, ph.mats[k].shift) == (m.q.shape, m.mult.shape, m.shift), k
        assert not ph.mats[k].q.any()
    assert {k: v.shape for k, v in ph.fx.items()} == {k: v.shape for k, v in qm.fx.items()}
    assert (None if qm.rope is None else qm.rope.shape) == (None if ph.rope is None else ph.rope.shape)
    assert ph.eps_q32 == qm.eps_q32


def test_shape_truncates_and_round_trips():
    model = random_model("llama", dim=32, n_layers=3, n_heads=4, vocab=64, seed=2)
    shape = ModelShape.of(model)
    one = shape.truncated(1)
    assert one.config.n_layers == 1 and set(one.shifts) == {k for k in shape.shifts if not k.startswith("blk.")
                                                            or k.startswith("blk.0.")}
    assert ModelShape.from_json(shape.to_json()) == shape


def test_a_shift_that_does_not_fit_fails_as_the_full_compile_does():
    model = random_model("llama", dim=32, n_layers=1, n_heads=4, vocab=64, seed=2)
    w = dict(model.weights)
    w["blk.0.ffn_up"] = w["blk.0.ffn_up"] * np.float32(1e6)  # |w| ~ 1e5: no S >= FX_FRAC
    big = dataclasses.replace(model, weights=w)
    with pytest.raises(QuantError) as full:
        compile_model(big, preset("tiny"), max_seq=32)
    with pytest.raises(QuantError) as only:
        compile_programs(big, preset("tiny"), max_seq=32)
    assert str(only.value) == str(full.value)


def test_a_programs_only_artifact_does_not_run():
    from systolica.artifact import ArtifactError
    from systolica.compiler.programs_only import compile_programs
    from systolica.config import preset
    from systolica.driver.device import open_device
    from systolica.driver.runtime import Runtime
    from systolica.testmodels import random_model

    cfg = preset("tiny")
    art = compile_programs(random_model("llama", dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=40, vocab=64,
                                        seed=1, max_seq=16), cfg, page=16, max_seq=16, prefill_chunk=4)
    with pytest.raises(ArtifactError, match="programs-only compile"):
        Runtime(art, open_device("golden", cfg, dram_bytes=1 << 20))


@pytest.mark.parametrize("ttype", ["Q4_1", "F16"])
def test_int4_programs_equal_a_full_int4_compile(tmp_path, ttype):
    """--weights int4: the 4-bit matrices' formats, group shifts and REQUANT shifts travel in the shape (and its
    JSON), so the words (GEMM_STREAM wfmt/gshift, w of every block) are a full compile's."""
    from systolica.compiler.gguf_reader import read_gguf
    from systolica.compiler.writers import write_gguf

    src = random_model("llama", dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96, vocab=96, seed=3,
                       max_seq=64, tied=False)
    model = read_gguf(write_gguf(src, tmp_path / "m.gguf", ttype))
    shape = ModelShape.of(model, "int4")
    # every matrix; the LM head too where the checkpoint holds it as 4-bit codes (Q4_1), else it stays int8
    assert len(shape.formats) == (15 if ttype == "Q4_1" else 14)
    assert ModelShape.from_json(shape.to_json()) == shape
    for cfg in CONFIGS[:3]:
        full = compile_model(model, cfg, page=16, max_seq=32, prefill_chunk=16, weights="int4")
        _same_programs(full, compile_programs(shape, cfg, page=16, max_seq=32, prefill_chunk=16))
