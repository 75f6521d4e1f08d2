"""--weights int4: GGUF Q4_0 / Q4_1 matrices streamed as their own 4-bit codes (float ones quantized to 4-bit
groups), compiled, run on the golden simulator and compared with the integer reference bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from lowering_harness import GoldenRunner, assert_lockstep

from systolica.compiler.compile import compile_model
from systolica.compiler.gguf_reader import GGUFError, read_gguf
from systolica.compiler.writers import write_gguf
from systolica.config import preset
from systolica.isa import WFmt
from systolica.quant_int4 import Q4Matrix
from systolica.quant_model import QuantError, quantize_model
from systolica.reference_quant import QuantRunner
from systolica.testmodels import random_model


def _model(tied: bool = True):
    return random_model("llama", dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96, vocab=96, tied=tied,
                        max_seq=48, seed=11)


@pytest.mark.parametrize("ttype", ["Q4_0", "Q4_1"])
@pytest.mark.parametrize("split", [False, True])
def test_q4_checkpoint_keeps_its_codes_and_is_bit_exact(tmp_path, ttype, split):
    model = read_gguf(write_gguf(_model(), tmp_path / "m.gguf", ttype))
    assert set(model.q4) >= {"blk.0.ffn_down", "token_embd"}
    qm = quantize_model(model, act_split=split, weights="int4")
    for name, m in qm.mats.items():  # every matrix (the tied LM head too: the checkpoint holds it as Q4)
        assert isinstance(m, Q4Matrix) and m.wfmt == WFmt[ttype] and m.source == "codes kept", name
        assert np.array_equal(m.codes, model.q4["token_embd" if name == "output" else name].codes)
    art = compile_model(model, preset("tiny"), page=8, max_seq=48, prefill_chunk=4, act_split=split, weights="int4")
    assert art.manifest["weight_format"] == "int4"
    assert all(f.startswith(f"int4 {ttype} (codes kept)") for f in art.manifest["quant_formats"].values())
    dec = art.manifest["stats"]["decode"]
    assert set(dec["stream_bytes_by_format"]) == {ttype}
    int8 = compile_model(model, preset("tiny"), page=8, max_seq=48, prefill_chunk=4, act_split=split)
    ratio = dec["stream_bytes"] / int8.manifest["stats"]["decode"]["stream_bytes"]
    assert ratio <= (0.625 if ttype == "Q4_1" else 0.5625) + 0.02, ratio  # codes + scales (+ line padding)
    gold, ref = GoldenRunner(art), QuantRunner(qm, page=art.page)
    assert_lockstep(gold, ref, [3, 14, 15, 92, 65, 35], first=7, steps=8)


def test_float_checkpoint_is_quantized_and_the_lm_head_stays_int8(tmp_path):
    model = _model(tied=False)
    qm = quantize_model(model, weights="int4")
    assert not isinstance(qm.mats["output"], Q4Matrix)
    assert "LM head stays int8" in qm.format_of("output")
    m = qm.mats["blk.1.ffn_up"]
    assert isinstance(m, Q4Matrix) and m.source == "quantized" and m.wfmt == WFmt.Q4_1
    assert 0.01 < qm.errors["blk.1.ffn_up"] <= 0.10  # measured against the float weights
    assert "int4 Q4_1 (quantized)" in qm.report()
    art = compile_model(model, preset("tiny"), page=8, max_seq=48, prefill_chunk=4, weights="int4")
    assert set(art.manifest["stats"]["decode"]["stream_bytes_by_format"]) == {"Q4_1", "INT8"}
    assert_lockstep(GoldenRunner(art), QuantRunner(qm, page=art.page), [5, 1, 77, 40], first=9, steps=6)


def test_unknown_weight_format_is_refused():
    with pytest.raises(QuantError, match="weights='int3': choose one of int8, int4"):
        quantize_model(_model(), weights="int3")


def test_nan_scale_in_a_q4_tensor_is_refused_naming_it(tmp_path):
    import gguf

    path = write_gguf(_model(), tmp_path / "m.gguf", "Q4_1")
    t = next(t for t in gguf.GGUFReader(path).tensors if t.name == "blk.1.ffn_gate.weight")
    raw = bytearray(path.read_bytes())
    raw[t.data_offset + 20 * 3:t.data_offset + 20 * 3 + 2] = np.float16(np.nan).tobytes()  # block 3: row 1 (of 2 blocks) block 1
    path.write_bytes(bytes(raw))
    with pytest.raises(GGUFError, match=r"blk.1.ffn_gate.weight: scale of row 1 block 1 is nan"):
        read_gguf(path)


def test_cli_compile_int4_prints_each_matrix_format_and_error(tmp_path, capsys):
    from systolica.cli import main

    path = write_gguf(_model(tied=False), tmp_path / "m.gguf", "Q4_1", types={"output": "Q8_0"})
    out = tmp_path / "m.systolica"
    assert main(["compile", str(path), "--config", "tiny", "-o", str(out), "--page", "8", "--weights", "int4"]) == 0
    text = capsys.readouterr().out
    assert "matrix formats (--weights int4" in text and "int4 Q4_1 (codes kept), gshift=" in text
    assert "LM head stays int8" in text  # the Q8_0 output matrix
    assert "weight-stream bytes per decode token by format (compiled program): Q4_1" in text
