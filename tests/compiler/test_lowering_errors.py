"""Bad input to the compiler and to the artifact loader gives specific, named errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from systolica.artifact import FORMAT_VERSION, Artifact, ArtifactError, StepState
from systolica.compiler.compile import CompileError, compile_model
from systolica.compiler.memory import MemoryError_
from systolica.config import preset
from systolica.model import Model, ModelError
from systolica.testmodels import random_model


@pytest.fixture(scope="module")
def small():
    return random_model("llama", dim=32, n_layers=1, n_heads=2, vocab=64, max_seq=32, seed=4)


@pytest.fixture(scope="module")
def art(small):
    return compile_model(small, preset("tiny"), page=8, max_seq=32, prefill_chunk=4)


def test_model_too_large_for_dram_window(small):
    cfg = preset("tiny").replace(dram_bytes=1 << 16)
    big = random_model("llama", dim=64, n_layers=2, n_heads=4, vocab=512, max_seq=64, seed=1)
    with pytest.raises(MemoryError_, match=r"needs [\d,]+ bytes of DRAM.*window.*65,536.*token_embd"):
        compile_model(big, cfg, page=16, max_seq=64)


def test_model_too_large_for_scratchpad(small):
    cfg = preset("tiny").replace(spad_kib=1)  # 256 lines: not even one row's activations and KV tiles
    with pytest.raises(MemoryError_, match=r"spad.*(overflow|not enough)"):
        compile_model(random_model("llama", dim=256, n_layers=1, n_heads=2, vocab=64, max_seq=256), cfg,
                      page=64, max_seq=256)


def test_prefill_chunk_shrinks_to_fit_vbuf(small):
    art = compile_model(random_model("llama", dim=64, n_layers=1, n_heads=4, vocab=64, max_seq=64), preset("tiny"),
                        page=16, max_seq=64, prefill_chunk=64)
    rows = art.rows("prefill")
    assert 1 < rows < 64
    use, cap = art.manifest["stats"]["prefill"]["onchip"]["vbuf"]
    assert use <= cap


def test_unsupported_architecture_and_missing_tensor(small):
    bad_arch = Model(dataclasses.replace(small.config, arch="mpt"), small.weights)
    with pytest.raises(ModelError, match="unsupported architecture 'mpt'"):
        compile_model(bad_arch, preset("tiny"))
    w = dict(small.weights)
    del w["blk.0.ffn_gate"]
    with pytest.raises(ModelError, match="'blk.0.ffn_gate' is missing"):
        compile_model(Model(small.config, w), preset("tiny"))
    w = dict(small.weights, **{"blk.0.attn_k": np.zeros((8, 32), np.float32)})
    with pytest.raises(ModelError, match=r"'blk.0.attn_k' has shape \(8, 32\)"):
        compile_model(Model(small.config, w), preset("tiny"))


@pytest.mark.parametrize("kw, msg", [(dict(page=12), "page=12 must be a power of two"),
                                     (dict(max_seq=10_000), "max_seq=10000 must be in 1..32"),
                                     (dict(prefill_chunk=0), "prefill_chunk=0")])
def test_bad_compile_arguments(small, kw, msg):
    with pytest.raises(CompileError, match=msg):
        compile_model(small, preset("tiny"), **kw)


def test_head_longer_than_the_attention_unit_takes(small):
    """A config whose attention unit takes heads of fewer lines than the model's (attn_head_lines) is refused
    with both numbers; one that takes them compiles."""
    hdl = small.config.head_dim // preset("tiny").cols  # 16 / 4 = 4 lines
    with pytest.raises(CompileError, match=rf"at most {hdl - 1} lines .*head_dim=16 is {hdl} lines"):
        compile_model(small, preset("tiny").replace(attn_head_lines=hdl - 1), page=8, max_seq=32)
    assert compile_model(small, preset("tiny").replace(attn_head_lines=hdl), page=8, max_seq=32).programs


def test_artifact_round_trip(art, tmp_path):
    p = tmp_path / "m.systolica"
    art.save(p)
    back = Artifact.load(p, config=preset("tiny"))
    assert back.manifest == art.manifest
    assert back.programs == art.programs and np.array_equal(back.image, art.image)
    st = StepState(9, [3], [2, 0, 1])
    assert back.patched_program("decode", st) == art.patched_program("decode", st)


def test_artifact_refuses_other_config_version_and_garbage(art, tmp_path):
    p = tmp_path / "m.systolica"
    art.save(p)
    with pytest.raises(ArtifactError, match="compiled for config .* recompile with --config default"):
        Artifact.load(p, config=preset("default"))
    for v in (99, 1):  # 1: row-major weights and LOAD + GEMM tiles, before the weight streams
        old = Artifact(dict(art.manifest, version=v), art.programs, art.image)
        with pytest.raises(ArtifactError, match=f"format version {v}; this systolica reads version {FORMAT_VERSION}"):
            Artifact.from_bytes(old.to_bytes())
    with pytest.raises(ArtifactError, match="not a zip archive"):
        Artifact.from_bytes(b"GGUF" + bytes(100))
    with pytest.raises(ArtifactError, match="does not exist"):
        Artifact.load(tmp_path / "nope.systolica")
    data = p.read_bytes()
    with pytest.raises(ArtifactError):
        Artifact.from_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("st, msg", [
    (StepState(0, [1, 2], [0]), "runs 1 rows, got 2 tokens"),
    (StepState(0, [64], [0]), "token id 64 is outside the vocabulary 0..63"),
    (StepState(32, [1], [0, 1, 2, 3, 0]), "exceed the compiled context max_seq=32"),
    (StepState(9, [1], [0]), "block table has 1 pages, positions up to 9 need 2"),
    (StepState(0, [1], [7]), "physical page 7; the KV cache has 4"),
])
def test_step_state_errors(art, st, msg):
    with pytest.raises(ArtifactError, match=msg):
        art.patched_program("decode", st)


def test_patching_changes_only_listed_fields(art):
    a = art.patched_program("decode", StepState(0, [0], [0]))
    b = art.patched_program("decode", StepState(13, [5], [3, 1]))
    listed = {p[0] for p in art.manifest["programs"]["decode"]["patches"]}
    changed = {i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y}
    assert changed and changed <= listed
