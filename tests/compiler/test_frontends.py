"""Front ends: GGUF and safetensors checkpoints of random models read back into the Model contract."""

from __future__ import annotations

import json
import struct

import gguf
import numpy as np
import pytest
from safetensors.numpy import save_file

from systolica.compiler.gguf_reader import GGUFError, read_gguf, read_gguf_metadata
from systolica.compiler.safetensors_reader import SafetensorsError, gguf_to_hf_rows, hf_to_gguf_rows, read_safetensors
from systolica.compiler.writers import write_gguf, write_safetensors
from systolica.model import Model, ModelError
from systolica.reference_float import FloatModel, apply_rope, rope_angles
from systolica.testmodels import random_model

# shapes: dimensions that are not multiples of 8, grouped-query attention, tied and untied output
ODD = dict(dim=44, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=90, vocab=101)  # head_dim 22
QUANT = dict(dim=96, n_layers=2, n_heads=3, n_kv_heads=1, ffn_dim=160, vocab=263)  # rows multiple of 32


def _blocks(x: np.ndarray) -> np.ndarray:
    return x.reshape(-1, 32)


def _check_quant_error(name: str, ttype: str, src: np.ndarray, got: np.ndarray) -> None:
    """Per 32-element block, the error bound of the format.

    ``x ~ q * d (+ m)`` with ``q`` rounded to nearest; ``d`` and ``m`` are stored as float16
    (relative error <= 2**-11), which adds up to ``|q| * d * 2**-11`` (+ ``|m| * 2**-11``).
    """
    b = _blocks(src).astype(np.float64)
    err = np.abs(_blocks(got) - b).max(axis=1)
    amax, lo, hi = np.abs(b).max(axis=1), b.min(axis=1), b.max(axis=1)
    h = 2.0 ** -11
    if ttype == "Q8_0":
        d = amax / 127
        bound = d / 2 + 127 * d * h
    elif ttype == "Q4_0":  # the extreme sets d = -max/8; its opposite (up to +8d) clips to 7d: one step
        d = amax / 8
        bound = d + 8 * d * h
    else:  # Q4_1: d = (max - min)/15, offset m = min
        d = (hi - lo) / 15
        bound = d / 2 + 15 * d * h + np.abs(lo) * h
    assert np.all(err <= bound + 1e-7), f"{name} ({ttype}): error {err.max()} over the bound"
    assert err.max() > 0, f"{name} ({ttype}) came back exact: was it quantized at all?"


@pytest.mark.parametrize("ttype,shape,tied", [
    ("F32", ODD, True), ("F32", ODD, False), ("F16", ODD, False),
    ("Q8_0", QUANT, True), ("Q8_0", QUANT, False), ("Q4_0", QUANT, False), ("Q4_1", QUANT, True)])
def test_gguf_roundtrip(tmp_path, ttype, shape, tied):
    src = random_model("llama", tied=tied, seed=3, rope_base=50000.0, norm_eps=1e-6, max_seq=300, **shape)
    path = write_gguf(src, tmp_path / "m.gguf", ttype)
    got = read_gguf(path)
    c, s = got.config, src.config
    assert (c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.ffn_dim, c.vocab_size, c.max_seq, c.tied_output) == \
        (s.dim, s.n_layers, s.n_heads, s.n_kv_heads, s.ffn_dim, s.vocab_size, s.max_seq, tied)
    assert c.rope_base == 50000.0 and c.norm_eps == pytest.approx(1e-6, rel=1e-6)
    assert set(got.weights) == set(src.weights)
    assert ("output" in got.weights) == (not tied)
    for name, w in src.weights.items():
        g = got.weights[name]
        assert g.dtype == np.float32 and g.shape == w.shape, name
        if w.ndim == 1 or ttype == "F32":
            np.testing.assert_array_equal(g, w, err_msg=name)
        elif ttype == "F16":
            np.testing.assert_array_equal(g, w.astype(np.float16).astype(np.float32), err_msg=name)
        else:
            _check_quant_error(name, ttype, w, g)
        assert got.metadata["tensor_types"][name] == ("F32" if w.ndim == 1 else ttype)


def test_gguf_dimension_order(tmp_path):
    """GGUF lists ne innermost first: ffn_up (ffn, dim) is ne=[dim, ffn] in the file, (ffn, dim) when read."""
    src = random_model("llama", seed=1, **ODD)
    path = write_gguf(src, tmp_path / "m.gguf")
    info = {t.name: [int(d) for d in t.shape] for t in gguf.GGUFReader(path).tensors}
    assert info["blk.0.ffn_up.weight"] == [ODD["dim"], ODD["ffn_dim"]]
    assert info["token_embd.weight"] == [ODD["dim"], ODD["vocab"]]
    got = read_gguf(path)
    assert got.weights["blk.0.ffn_up"].shape == (ODD["ffn_dim"], ODD["dim"])
    x = np.random.default_rng(0).standard_normal(ODD["dim"]).astype(np.float32)
    np.testing.assert_allclose(got.weights["blk.0.ffn_up"] @ x, src.weights["blk.0.ffn_up"] @ x, rtol=1e-6)


def test_gguf_mixed_types_and_logits(tmp_path):
    """A file mixing types (as llama.cpp writes them) reads, and its float logits stay near the source's."""
    src = random_model("llama", seed=5, tied=True, **QUANT)
    path = write_gguf(src, tmp_path / "m.gguf", "Q8_0", types={"token_embd": "F16", "blk.1.ffn_down": "F32"})
    got = read_gguf(path)
    assert got.metadata["tensor_types"]["token_embd"] == "F16"
    assert got.metadata["tensor_types"]["blk.1.ffn_down"] == "F32"
    toks = [1, 7, 200, 33, 5]
    a, b = FloatModel(src).prefill(toks), FloatModel(got).prefill(toks)
    rel = np.abs(a - b).max() / np.abs(a).max()
    assert 0 < rel < 0.05, rel  # Q8_0 weights: about 1% of the logit range


def test_gguf_metadata_only(tmp_path):
    path = write_gguf(random_model("llama", seed=1, **ODD), tmp_path / "m.gguf", fields={"general.note": "hi"})
    meta = read_gguf_metadata(path)
    assert meta["general.architecture"] == "llama" and meta["general.note"] == "hi"
    assert meta["llama.embedding_length"] == ODD["dim"]


# ------------------------------------------------------------------ malformed GGUF
@pytest.fixture
def gguf_bytes(tmp_path) -> bytes:
    return write_gguf(random_model("llama", seed=2, **ODD), tmp_path / "ok.gguf").read_bytes()


def test_gguf_truncated_in_tensor_data(tmp_path, gguf_bytes):
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(gguf_bytes[: len(gguf_bytes) - 1000])
    with pytest.raises(GGUFError, match=r"truncated: tensor '[\w.]+' data ends at byte \d+ but the file has \d+"):
        read_gguf(bad)


def test_gguf_truncated_in_metadata(tmp_path, gguf_bytes):
    cut = gguf_bytes.index(b"llama.feed_forward_length") + 10  # inside that key's name
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(gguf_bytes[:cut])
    with pytest.raises(GGUFError, match="truncated: metadata key"):
        read_gguf(bad)


def test_gguf_bad_magic(tmp_path, gguf_bytes):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"GGML" + gguf_bytes[4:])
    with pytest.raises(GGUFError, match=r"not a GGUF file \(magic b'GGML'"):
        read_gguf(bad)
    with pytest.raises(GGUFError, match="no such file"):
        read_gguf(tmp_path / "absent.gguf")


def test_gguf_unsupported_architecture(tmp_path):
    path = write_gguf(random_model("llama", seed=2, **ODD), tmp_path / "m.gguf", arch="mamba")
    with pytest.raises(GGUFError, match=r"unsupported architecture 'mamba' \(general.architecture\)"):
        read_gguf(path)


def test_gguf_unsupported_tensor_type(tmp_path, gguf_bytes):
    # retype blk.1.attn_v from F32 (0) to I32 (26): same bytes per element, so the file stays well formed
    name = b"blk.1.attn_v.weight"
    at = gguf_bytes.index(name) + len(name)
    n_dims = struct.unpack_from("<I", gguf_bytes, at)[0]
    type_at = at + 4 + 8 * n_dims
    assert struct.unpack_from("<I", gguf_bytes, type_at)[0] == 0
    patched = bytearray(gguf_bytes)
    struct.pack_into("<I", patched, type_at, int(gguf.GGMLQuantizationType.I32))
    bad = tmp_path / "i32.gguf"
    bad.write_bytes(bytes(patched))
    with pytest.raises(GGUFError, match=r"tensor 'blk.1.attn_v.weight' has type I32, which systolica does not read"):
        read_gguf(bad)


def test_gguf_inconsistent_shapes(tmp_path):
    src = random_model("llama", seed=2, **ODD)
    w = dict(src.weights)
    w["blk.1.attn_k"] = w["blk.1.attn_k"][:-2]  # 20 rows where n_kv_heads * head_dim = 22
    path = write_gguf(Model(src.config, w), tmp_path / "m.gguf")
    with pytest.raises(GGUFError, match=r"tensor 'blk.1.attn_k' has shape \(20, 44\), expected \(22, 44\)"):
        read_gguf(path)
    path = write_gguf(src, tmp_path / "h.gguf", fields={"llama.attention.head_count": 3})
    with pytest.raises(GGUFError, match="dim=44 is not a multiple of n_heads=3"):
        read_gguf(path)


def test_gguf_missing_metadata_key(tmp_path):
    path = write_gguf(random_model("llama", seed=2, **ODD), tmp_path / "m.gguf",
                      fields={"llama.feed_forward_length": None})
    with pytest.raises(GGUFError, match="metadata key 'llama.feed_forward_length' is missing"):
        read_gguf(path)


def test_gguf_writer_refuses_unaligned_rows(tmp_path):
    with pytest.raises(ModelError, match=r"rows of 44 elements cannot be stored as Q4_0 \(blocks of 32\)"):
        write_gguf(random_model("llama", seed=2, **ODD), tmp_path / "m.gguf", "Q4_0")


# ------------------------------------------------------------------ safetensors
@pytest.mark.parametrize("arch,tied,dtype", [("llama", True, "float32"), ("llama", False, "float16"),
                                             ("gpt2", True, "float32"), ("gpt2", False, "float32")])
def test_safetensors_roundtrip(tmp_path, arch, tied, dtype):
    shape = dict(ODD, n_kv_heads=None if arch == "gpt2" else 1)
    src = random_model(arch, tied=tied, seed=4, **shape)
    got = read_safetensors(write_safetensors(src, tmp_path / "ck", dtype=dtype))
    assert got.config.tied_output == tied and got.config.arch == arch
    assert set(got.weights) == set(src.weights)
    for name, w in src.weights.items():
        want = w if dtype == "float32" else w.astype(np.float16).astype(np.float32)
        np.testing.assert_array_equal(got.weights[name], want, err_msg=name)
    toks = [3, 9, 27, 81]
    np.testing.assert_allclose(FloatModel(got).prefill(toks), FloatModel(src).prefill(toks),
                               atol=0 if dtype == "float32" else 0.05)


def test_safetensors_gpt2_conv1d_layout(tmp_path):
    """Hand-made HF GPT-2 tensors (Conv1D [in, out], fused qkv, 'transformer.' prefix) land in [out, in]."""
    rng = np.random.default_rng(0)
    dim, ffn, vocab, ctx = 12, 20, 17, 8
    t = {"transformer.wte.weight": rng.standard_normal((vocab, dim)), "transformer.wpe.weight": rng.standard_normal((ctx, dim)),
         "transformer.ln_f.weight": np.ones(dim), "transformer.ln_f.bias": np.zeros(dim)}
    p = "transformer.h.0."
    t.update({p + "ln_1.weight": np.ones(dim), p + "ln_1.bias": np.zeros(dim), p + "ln_2.weight": np.ones(dim),
              p + "ln_2.bias": np.zeros(dim), p + "attn.c_attn.weight": rng.standard_normal((dim, 3 * dim)),
              p + "attn.c_attn.bias": rng.standard_normal(3 * dim), p + "attn.c_proj.weight": rng.standard_normal((dim, dim)),
              p + "attn.c_proj.bias": rng.standard_normal(dim), p + "mlp.c_fc.weight": rng.standard_normal((dim, ffn)),
              p + "mlp.c_fc.bias": rng.standard_normal(ffn), p + "mlp.c_proj.weight": rng.standard_normal((ffn, dim)),
              p + "mlp.c_proj.bias": rng.standard_normal(dim), p + "attn.bias": np.tril(np.ones((1, 1, ctx, ctx)))})
    save_file({k: v.astype(np.float32) for k, v in t.items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": dim, "n_layer": 1, "n_head": 2,
                                                      "n_positions": ctx, "vocab_size": vocab, "n_inner": ffn}))
    m = read_safetensors(tmp_path)
    x = rng.standard_normal(dim).astype(np.float32)
    qkv = x @ t[p + "attn.c_attn.weight"] + t[p + "attn.c_attn.bias"]  # how HF's Conv1D computes
    for j, n in enumerate(("attn_q", "attn_k", "attn_v")):
        np.testing.assert_allclose(m.weights[f"blk.0.{n}"] @ x + m.weights[f"blk.0.{n}_b"], qkv[j * dim:(j + 1) * dim],
                                   rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(m.weights["blk.0.ffn_up"] @ x, x @ t[p + "mlp.c_fc.weight"], rtol=1e-5, atol=1e-5)
    assert m.config.tied_output and m.config.ffn_dim == ffn and m.config.max_seq == ctx


def _neox_rope(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """transformers' llama RoPE: x (T, heads, hd), element i pairs with i + hd/2 (rotate_half)."""
    half = x.shape[-1] // 2
    cos = np.cos(np.concatenate([angles, angles], -1))[:, None, :]
    sin = np.sin(np.concatenate([angles, angles], -1))[:, None, :]
    rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


def test_llama_qk_permutation_preserves_rope_scores(tmp_path):
    """HF q/k (half-split RoPE) read through the front end give the same RoPE'd q.k scores with adjacent pairs."""
    rng = np.random.default_rng(7)
    dim, H, Hkv, T, base = 48, 4, 2, 9, 10000.0
    hd = dim // H
    src = random_model("llama", dim=dim, n_layers=1, n_heads=H, n_kv_heads=Hkv, ffn_dim=40, vocab=30, seed=7)
    write_safetensors(src, tmp_path)  # then overwrite q/k with HF-layout matrices made here, not by our writer
    from safetensors.numpy import load_file
    raw = load_file(str(tmp_path / "model.safetensors"))
    wq_hf, wk_hf = rng.standard_normal((H * hd, dim)), rng.standard_normal((Hkv * hd, dim))
    raw["model.layers.0.self_attn.q_proj.weight"] = wq_hf.astype(np.float32)
    raw["model.layers.0.self_attn.k_proj.weight"] = wk_hf.astype(np.float32)
    save_file(raw, str(tmp_path / "model.safetensors"))
    m = read_safetensors(tmp_path)

    x = rng.standard_normal((T, dim))
    ang = rope_angles(np.arange(T), hd, base)

    def scores(q, k):  # (H, T, T), query head h reads kv head h // (H / Hkv)
        k = np.repeat(k, H // Hkv, axis=1)
        return np.einsum("thd,shd->hts", q, k)

    q_hf = _neox_rope((x @ wq_hf.T).reshape(T, H, hd), ang)
    k_hf = _neox_rope((x @ wk_hf.T).reshape(T, Hkv, hd), ang)
    wq, wk = m.weights["blk.0.attn_q"].astype(np.float64), m.weights["blk.0.attn_k"].astype(np.float64)
    q = apply_rope((x @ wq.T).reshape(T, H, hd), ang)
    k = apply_rope((x @ wk.T).reshape(T, Hkv, hd), ang)
    np.testing.assert_allclose(scores(q, k), scores(q_hf, k_hf), rtol=1e-5, atol=1e-4)
    # the rotated vectors themselves are the HF ones with each head's rows reordered
    np.testing.assert_allclose(hf_to_gguf_rows(q_hf.reshape(T, H * hd).T, H).T, q.reshape(T, H * hd), atol=1e-4)
    # without the permutation the scores differ: the test can fail
    q_bad = apply_rope((x @ wq_hf.T).reshape(T, H, hd), ang)
    k_bad = apply_rope((x @ wk_hf.T).reshape(T, Hkv, hd), ang)
    assert np.abs(scores(q_bad, k_bad) - scores(q_hf, k_hf)).max() > 1.0
    np.testing.assert_array_equal(gguf_to_hf_rows(hf_to_gguf_rows(wq_hf, H), H), wq_hf)


def test_safetensors_bf16(tmp_path):
    """numpy has no bfloat16: such tensors are widened by hand (bf16 is the top half of float32)."""
    src = random_model("llama", seed=8, tied=True, **ODD)
    d = write_safetensors(src, tmp_path)
    from safetensors.numpy import load_file
    raw = load_file(str(d / "model.safetensors"))
    header, blobs, off = {}, [], 0
    for k, v in raw.items():  # rewrite every tensor as BF16 (truncated float32)
        b = (np.ascontiguousarray(v, np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        header[k] = {"dtype": "BF16", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    got = read_safetensors(d)
    w = src.weights["blk.0.ffn_up"]
    want = ((w.view(np.uint32) >> 16) << 16).view(np.float32)
    np.testing.assert_array_equal(got.weights["blk.0.ffn_up"], want)


def test_safetensors_errors(tmp_path):
    src = random_model("llama", seed=9, **ODD)
    d = write_safetensors(src, tmp_path / "a")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(dict(cfg, model_type="mamba")))
    with pytest.raises(SafetensorsError, match="unsupported model_type 'mamba'"):
        read_safetensors(d)
    (d / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k != "intermediate_size"}))
    with pytest.raises(SafetensorsError, match="config key 'intermediate_size' is missing"):
        read_safetensors(d)
    (d / "config.json").write_text(json.dumps(dict(cfg, attention_bias=True)))
    with pytest.raises(SafetensorsError, match="attention_bias=true is not supported"):
        read_safetensors(d)
    (d / "config.json").write_text(json.dumps(dict(cfg, intermediate_size=91)))
    with pytest.raises(SafetensorsError, match=r"tensor 'blk.0.ffn_up' has shape \(90, 44\), expected \(91, 44\)"):
        read_safetensors(d)
    (d / "config.json").write_text(json.dumps(cfg))
    from safetensors.numpy import load_file
    raw = load_file(str(d / "model.safetensors"))
    del raw["model.layers.1.mlp.up_proj.weight"]
    save_file(raw, str(d / "model.safetensors"))
    with pytest.raises(SafetensorsError, match="tensor 'model.layers.1.mlp.up_proj.weight' is missing"):
        read_safetensors(d)
    (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:500])
    with pytest.raises(SafetensorsError, match="cannot read safetensors file"):
        read_safetensors(d)
    with pytest.raises(SafetensorsError, match="config.json is missing"):
        read_safetensors(tmp_path)


@pytest.mark.parametrize("ktype", ["Q4_K", "Q6_K"])
def test_gguf_k_quants(tmp_path, ktype):
    """K-quant tensors (256-element super-blocks) come back (out, in) through gguf.quants' dequantizer."""
    src = random_model("llama", dim=256, n_layers=1, n_heads=4, ffn_dim=512, vocab=40, seed=11)
    qt = gguf.GGMLQuantizationType[ktype]
    block, size = gguf.GGML_QUANT_SIZES[qt]
    rows, cols = src.weights["blk.0.ffn_down"].shape  # (256, 512): two super-blocks per row
    raw = np.random.default_rng(0).integers(0, 256, (rows, cols // block * size), dtype=np.uint8)
    blocks = raw.reshape(rows, cols // block, size)
    scale = np.frombuffer(np.float16(0.01).tobytes(), dtype=np.uint8)
    if ktype == "Q6_K":  # layout: ql[128] qh[64] scales[16] d(f16)
        blocks[:, :, 208:210] = scale
    else:  # layout: d(f16) dmin(f16) scales[12] qs[128]
        blocks[:, :, 0:2] = scale
        blocks[:, :, 2:4] = scale
    got = read_gguf(write_gguf(src, tmp_path / "k.gguf", prequantized={"blk.0.ffn_down": (ktype, raw)}))
    w = got.weights["blk.0.ffn_down"]
    assert w.shape == (rows, cols) and np.all(np.isfinite(w)) and np.abs(w).max() > 0
    assert got.metadata["tensor_types"]["blk.0.ffn_down"] == ktype
    # row r of the matrix is row r of the raw bytes: dequantizing one row alone gives the same values
    np.testing.assert_array_equal(w[3], gguf.quants.dequantize(raw[3:4], qt).reshape(-1))
    np.testing.assert_array_equal(got.weights["blk.0.ffn_up"], src.weights["blk.0.ffn_up"])


# ------------------------------------------------------------------ the real model
@pytest.mark.slow
def test_real_model_reads_and_continues_text():
    from systolica.compiler.model_zoo import locate_default_model
    path = locate_default_model()
    if path is None:
        pytest.skip("default model not cached; run: python -m systolica.compiler.model_zoo fetch")
    m = read_gguf(path)
    c = m.config
    assert (c.arch, c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.ffn_dim, c.vocab_size, c.tied_output) == \
        ("llama", 576, 30, 9, 3, 1536, 49152, True)
    assert c.rope_base == 100000.0 and c.max_seq == 8192
    assert set(m.metadata["tensor_types"].values()) == {"F32", "Q4_1", "Q8_0"}
    fm = FloatModel(m, dtype=np.float32)
    tok = m.tokenizer
    logits = fm.prefill(tok.encode("The capital of France is"))[-1]
    out = []
    for _ in range(4):
        out.append(int(logits.argmax()))
        logits = fm.decode(out[-1])
    assert "Paris" in tok.decode(out)


def test_load_model_dispatch(tmp_path):
    from systolica.compiler.frontend import load_model
    src = random_model("llama", seed=12, **ODD)
    g = write_gguf(src, tmp_path / "m.gguf")
    renamed = tmp_path / "m.bin"
    renamed.write_bytes(g.read_bytes())  # recognised by its magic, not its name
    d = write_safetensors(src, tmp_path / "hf")
    for source in (g, renamed, d, d / "model.safetensors"):
        np.testing.assert_array_equal(load_model(source).weights["blk.1.ffn_up"], src.weights["blk.1.ffn_up"])
    (tmp_path / "junk.bin").write_bytes(b"\x00" * 64)
    with pytest.raises(ModelError, match=r"unknown checkpoint format \(magic b'\\x00"):
        load_model(tmp_path / "junk.bin")
    with pytest.raises(ModelError, match="no such file or directory"):
        load_model(tmp_path / "nothing")


def test_load_model_random_spec():
    from systolica.compiler.frontend import load_model
    m = load_model("random:llama:dim=32,n_layers=1,n_heads=2,vocab=64,tied=true,seed=3")
    ref = random_model("llama", dim=32, n_layers=1, n_heads=2, vocab=64, tied=True, seed=3)
    assert m.config == ref.config
    np.testing.assert_array_equal(m.weights["blk.0.ffn_up"], ref.weights["blk.0.ffn_up"])
    with pytest.raises(ModelError, match=r"dim='x' is neither an integer nor true/false"):
        load_model("random:llama:dim=x")
    with pytest.raises(ModelError, match="unknown key.*width"):
        load_model("random:llama:width=32")
    with pytest.raises(ModelError, match="is not key=value"):
        load_model("random:llama:dim")


@pytest.mark.parametrize("ttype", ["Q8_0", "Q4_0", "Q4_1"])
def test_fast_dequantize_matches_gguf(ttype):
    """The vectorized Q8_0/Q4_x decoder gives gguf.quants' values bit for bit, on arbitrary block bytes."""
    from systolica.compiler.gguf_reader import _dequant_simple
    qt = gguf.GGMLQuantizationType[ttype]
    size = gguf.GGML_QUANT_SIZES[qt][1]
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 256, (7, 3 * size), dtype=np.uint8)  # 7 rows of 96 elements
    blocks = raw.reshape(7, 3, size)
    scales = rng.uniform(-0.05, 0.05, (7, 3, 2)).astype("<f2")  # finite d (and m for Q4_1)
    blocks[:, :, 0:4 if ttype == "Q4_1" else 2] = scales.view(np.uint8)[..., : 4 if ttype == "Q4_1" else 2]
    np.testing.assert_array_equal(_dequant_simple(raw, qt), gguf.quants.dequantize(raw, qt))
