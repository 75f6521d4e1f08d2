"""``weights="auto"`` (the CLI's default): a checkpoint's own 4-bit matrices stay 4-bit where the config has the
datapath, everything else is int8; on a config without the datapath the program is the int8 one."""

from __future__ import annotations

import pytest

from systolica.compiler.compile import compile_model
from systolica.compiler.gguf_reader import read_gguf
from systolica.compiler.writers import write_gguf
from systolica.config import preset
from systolica.testmodels import random_model

CFG = preset("tiny")


def _model(tmp_path, kind):
    src = random_model("llama", dim=64, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=96, vocab=96, seed=3,
                       max_seq=32)
    return read_gguf(write_gguf(src, tmp_path / f"m_{kind}.gguf", kind))


def _compile(model, cfg, weights):
    return compile_model(model, cfg, page=16, max_seq=32, prefill_chunk=4, weights=weights)


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1"])
def test_auto_keeps_the_checkpoints_4bit_matrices(tmp_path, kind):
    model = _model(tmp_path, kind)
    art = _compile(model, CFG, "auto")
    formats = art.manifest["quant_formats"]
    stored = {n for n in formats if n in model.q4 or (n == "output" and "token_embd" in model.q4
                                                       and model.config.tied_output)}
    assert stored and all(formats[n].startswith(f"int4 {kind}") for n in stored), formats
    assert all(formats[n].startswith("int8") for n in formats if n not in stored), formats
    assert art.manifest["weight_format"] == "auto" and art.manifest["weight_format_used"] == "auto"
    # the same program as asking for int4 when every matrix of the checkpoint is 4-bit codes
    four = _compile(model, CFG, "int4")
    if all(n in stored for n in formats):
        assert art.programs["decode"].words == four.programs["decode"].words


def test_auto_is_int8_on_a_float_checkpoint_and_without_the_datapath(tmp_path):
    f16 = _model(tmp_path, "F16")
    a, b = _compile(f16, CFG, "auto"), _compile(f16, CFG, "int8")
    assert all(f.startswith("int8") for f in a.manifest["quant_formats"].values())
    assert a.programs["decode"].words == b.programs["decode"].words
    q4 = _model(tmp_path, "Q4_1")
    no4 = CFG.replace(name="tiny_d4", dma_ports=4)  # cols 4 is not a multiple of 2 x 4 ports: no 4-bit datapath
    c = _compile(q4, no4, "auto")
    assert c.manifest["weight_format_used"] == "int8"
    assert all(f.startswith("int8") for f in c.manifest["quant_formats"].values())
