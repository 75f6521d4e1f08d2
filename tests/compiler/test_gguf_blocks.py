"""read_gguf_blocks (the layout walk) reads the model read_gguf(layers=...) reads, and fails where it fails."""

from __future__ import annotations

import numpy as np
import pytest

from systolica.compiler.gguf_layout import read_layout
from systolica.compiler.gguf_reader import GGUFError, _field_value, _open, read_gguf, read_gguf_blocks
from systolica.compiler.writers import WRITABLE_TYPES, write_gguf
from systolica.testmodels import random_model

TOKENS = [chr(0x100 + i) if i < 60 else f"t{i}" for i in range(64)]
TOK = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "default", "tokenizer.ggml.tokens": TOKENS,
       "tokenizer.ggml.merges": ["t 1"], "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 1,
       "tokenizer.ggml.token_type": [1] * 64, "tokenizer.ggml.add_bos_token": True}
MODEL = random_model("llama", dim=64, n_layers=3, n_heads=2, n_kv_heads=1, ffn_dim=96, vocab=64, seed=2, max_seq=64)


def _same(a, b) -> None:
    assert a.config == b.config and a.metadata == b.metadata and list(a.weights) == list(b.weights)
    for k, w in a.weights.items():
        assert w.dtype == b.weights[k].dtype and np.array_equal(w, b.weights[k]), k


@pytest.mark.parametrize("ttype", WRITABLE_TYPES)
def test_blocks_are_read_gguf_with_layers(tmp_path, ttype):
    path = write_gguf(MODEL, tmp_path / "m.gguf", ttype, fields=TOK)
    for layers in (1, 2, 5):
        got = read_gguf_blocks(path, layers)
        _same(read_gguf(path, load_tokenizer=False, layers=layers), got)
        assert got.config.n_layers == min(layers, 3) and got.metadata["file_n_layers"] == 3
    full = read_gguf(path, load_tokenizer=False)
    assert "file_n_layers" not in full.metadata  # a plain read keeps its metadata as before
    assert np.array_equal(full.weights["blk.1.ffn_up"], read_gguf_blocks(path, 2).weights["blk.1.ffn_up"])


def test_the_walk_keeps_the_metadata_the_gguf_package_reads(tmp_path):
    path = write_gguf(MODEL, tmp_path / "m.gguf", "Q4_1", fields={**TOK, "general.name": "née", "x.f": 0.1,
                                                                  "x.flag": False, "x.floats": [0.5, 1.25]})
    why, meta, tensors = read_layout(path)
    want = {k: _field_value(f) for k, f in _open(path).fields.items() if not k.startswith("GGUF.")}
    assert why is None and meta == want
    assert [type(v) for v in meta.values()] == [type(v) for v in want.values()]
    assert [t[0] for t in tensors] == [t.name for t in _open(path).tensors]


def test_blocks_of_the_default_model():
    from systolica.compiler.model_zoo import locate_default_model

    path = locate_default_model()
    if path is None:
        pytest.skip("the default model is not cached (python -m systolica.compiler.model_zoo fetch)")
    _same(read_gguf(path, load_tokenizer=False, layers=2), read_gguf_blocks(path, 2))


def test_a_damaged_file_fails_with_read_gguf_s_message(tmp_path):
    path = write_gguf(MODEL, tmp_path / "m.gguf", "Q8_0", fields=TOK)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(GGUFError) as a:
        read_gguf(cut, layers=1)
    with pytest.raises(GGUFError) as b:
        read_gguf_blocks(cut, 1)
    assert str(a.value) == str(b.value) and "truncated" in str(b.value)
    (tmp_path / "no.gguf").write_bytes(b"GGUX" + bytes(60))
    with pytest.raises(GGUFError, match="not a GGUF file"):
        read_gguf_blocks(tmp_path / "no.gguf", 1)
