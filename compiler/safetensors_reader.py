"""safetensors + config.json front end: Hugging Face GPT-2 and llama checkpoints become a :class:`Model`.

GPT-2 (``model_type: gpt2``) stores its projections as ``Conv1D`` weights, ``[in, out]``,
and q/k/v fused in ``attn.c_attn``; they are transposed and split here.  The output
projection is tied to ``wte`` unless the checkpoint carries a different ``lm_head``.

llama (``model_type: llama`` / ``mistral``) stores q/k rows in the NeoX "half-split"
RoPE order: per head, element ``i`` pairs with ``i + hd/2``.  The Model contract (and
GGUF) pairs adjacent elements ``(2i, 2i+1)``; :func:`hf_to_gguf_rows` permutes the rows
the way llama.cpp's converter does, so both front ends give one layout.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
from safetensors import safe_open

from systolica.model import Model, ModelConfig, ModelError
from systolica.tokenizer import Tokenizer

__all__ = ["read_safetensors", "hf_to_gguf_rows", "gguf_to_hf_rows", "SafetensorsError"]


class SafetensorsError(ModelError):
    """A safetensors checkpoint that cannot become a Model; names the file and the key or tensor."""


def hf_to_gguf_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Reorder q/k rows from the NeoX half-split RoPE order to adjacent pairs (llama.cpp's ``permute``).

    Per head, row ``i`` and row ``i + hd/2`` (one rotating pair) become rows ``2i`` and ``2i + 1``.
    """
    out = w.shape[0]
    return w.reshape(n_heads, 2, out // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_to_hf_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of :func:`hf_to_gguf_rows`: adjacent pairs back to the half-split order."""
    out = w.shape[0]
    return w.reshape(n_heads, out // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ------------------------------------------------------------------ loading tensors
def _bf16_tensors(file: Path, names: list[str]) -> dict[str, np.ndarray]:
    """numpy has no bfloat16: read those tensors from the raw layout (u64 header length, JSON, data)."""
    with open(file, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name in names:
            start, end = header[name]["data_offsets"]
            f.seek(base + start)
            raw = np.frombuffer(f.read(end - start), dtype="<u2").astype(np.uint32) << 16  # bf16 = top half of f32
            out[name] = raw.view(np.float32).reshape(header[name]["shape"])
    return out


def _load_file(file: Path) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    bf16 = []
    try:
        with safe_open(str(file), framework="numpy") as f:
            for k in f.keys():  # noqa: SIM118 (safe_open is not iterable)
                if f.get_slice(k).get_dtype() == "BF16":
                    bf16.append(k)
                else:
                    out[k] = f.get_tensor(k)
    except Exception as e:  # the library raises its own SafetensorError for a truncated / foreign file
        raise SafetensorsError(f"{file}: cannot read safetensors file: {e}") from e
    out.update(_bf16_tensors(file, bf16))
    return out


def _checkpoint_files(d: Path) -> list[Path]:
    index = d / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        return [d / f for f in sorted(set(weight_map.values()))]
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise SafetensorsError(f"{d}: no *.safetensors file")
    return files


# ------------------------------------------------------------------ the front end
def read_safetensors(path: str | os.PathLike) -> Model:
    """Read a Hugging Face GPT-2 or llama checkpoint directory (config.json + safetensors).

    Parameters
    ----------
    path : path-like
        The directory, or one ``.safetensors`` file with ``config.json`` beside it.
        A ``tokenizer.json`` there becomes the model's tokenizer.

    Returns
    -------
    Model
        Checked, float32, in the Model contract's names and layouts.

    Raises
    ------
    SafetensorsError
        A missing file, config key or tensor, an unsupported model_type, or a shape that
        does not fit the config (the message names it).
    """
    path = Path(path)
    d = path if path.is_dir() else path.parent
    cfg_file = d / "config.json"
    if not cfg_file.exists():
        raise SafetensorsError(f"{d}: config.json is missing")
    try:
        hf = json.loads(cfg_file.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError(f"{cfg_file}: not a JSON text ({str(e).splitlines()[0]})") from None
    if not isinstance(hf, dict):
        raise SafetensorsError(f"{cfg_file}: holds a {type(hf).__name__}, expected a JSON object")
    files = [path] if path.is_file() else _checkpoint_files(d)
    raw: dict[str, np.ndarray] = {}
    for f in files:
        raw.update(_load_file(f))
    mt = hf.get("model_type")
    if mt == "gpt2":
        cfg, w = _gpt2(hf, raw, d)
    elif mt in ("llama", "mistral"):
        cfg, w = _llama(hf, raw, d)
    else:
        raise SafetensorsError(f"{cfg_file}: unsupported model_type {mt!r}; systolica reads 'gpt2' and 'llama'")
    tok = None
    if (d / "tokenizer.json").exists():
        try:
            tok = Tokenizer.from_file(d / "tokenizer.json")
        except Exception as e:  # noqa: BLE001 - the tokenizers library raises bare Exceptions on bad files
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise SafetensorsError(f"{d / 'tokenizer.json'}: cannot be read as a tokenizer ({msg})") from e
    model = Model(cfg, w, tokenizer=tok, metadata={"source": str(path), "format": "safetensors", "hf_config": hf})
    try:
        model.check()
    except ModelError as e:
        raise SafetensorsError(f"{d}: {e}") from None
    return model


def _key(hf: dict, cfg_file: Path, *names: str, default=None):
    for n in names:
        if hf.get(n) is not None:
            return hf[n]
    if default is None:
        raise SafetensorsError(f"{cfg_file}: config key {names[0]!r} is missing")
    return default


def _int(hf: dict, cfg_file: Path, *names: str, default=None) -> int:
    """A hyper-parameter that must be a whole number in 1 .. 2**24 (the message names the key and value)."""
    v = _key(hf, cfg_file, *names, default=default)
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1 << 24:
        raise SafetensorsError(f"{cfg_file}: config key {names[0]!r} = {v!r:.40} must be a whole number in "
                               f"1..{1 << 24}")
    return v


def _float(hf: dict, cfg_file: Path, *names: str, default=None, lo: float, hi: float) -> float:
    """A hyper-parameter that must be a finite number in the open interval (lo, hi)."""
    v = _key(hf, cfg_file, *names, default=default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo < v < hi:  # also NaN
        raise SafetensorsError(f"{cfg_file}: config key {names[0]!r} = {v!r:.40} must be a number in ({lo:g}, {hi:g})")
    return float(v)


def _taker(raw: dict[str, np.ndarray], prefixes: tuple[str, ...], d: Path):
    def take(name: str, optional: bool = False) -> np.ndarray | None:
        for p in prefixes:
            if p + name in raw:
                return np.asarray(raw[p + name], dtype=np.float32)
        if optional:
            return None
        raise SafetensorsError(f"{d}: tensor {prefixes[0] + name!r} is missing")
    return take


def _gpt2(hf: dict, raw: dict[str, np.ndarray], d: Path) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    c = d / "config.json"
    dim = _int(hf, c, "n_embd", "hidden_size")
    act = hf.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise SafetensorsError(f"{c}: activation_function={act!r}; systolica's GPT-2 uses the tanh GELU (gelu_new)")
    take = _taker(raw, ("", "transformer."), d)
    wte = take("wte.weight")
    lm_head = take("lm_head.weight", optional=True)
    tied = lm_head is None or (lm_head.shape == wte.shape and np.array_equal(lm_head, wte))
    cfg = ModelConfig(arch="gpt2", dim=dim, n_layers=_int(hf, c, "n_layer", "num_hidden_layers"),
                      n_heads=_int(hf, c, "n_head", "num_attention_heads"),
                      n_kv_heads=_int(hf, c, "n_head", "num_attention_heads"),
                      ffn_dim=_int(hf, c, "n_inner", default=4 * dim), vocab_size=_int(hf, c, "vocab_size"),
                      max_seq=_int(hf, c, "n_positions", "n_ctx"),
                      norm_eps=_float(hf, c, "layer_norm_epsilon", default=1e-5, lo=0, hi=1), tied_output=tied,
                      name=str(hf.get("_name_or_path") or d.name))
    w = {"token_embd": wte, "position_embd": take("wpe.weight"),
         "output_norm": take("ln_f.weight"), "output_norm_b": take("ln_f.bias")}
    if not tied:
        w["output"] = lm_head
    for i in range(cfg.n_layers):
        p, q = f"h.{i}.", f"blk.{i}."
        qkv = take(p + "attn.c_attn.weight").T  # Conv1D [in, 3*dim] -> [3*dim, in]
        qkv_b = take(p + "attn.c_attn.bias")
        if qkv.shape[0] != 3 * dim:
            raise SafetensorsError(f"{d}: tensor {p + 'attn.c_attn.weight'!r} has shape {qkv.T.shape}, "
                                   f"expected ({dim}, {3 * dim})")
        for j, n in enumerate(("attn_q", "attn_k", "attn_v")):
            w[q + n] = np.ascontiguousarray(qkv[j * dim:(j + 1) * dim])
            w[q + n + "_b"] = qkv_b[j * dim:(j + 1) * dim]
        w[q + "attn_output"] = np.ascontiguousarray(take(p + "attn.c_proj.weight").T)
        w[q + "attn_output_b"] = take(p + "attn.c_proj.bias")
        w[q + "attn_norm"], w[q + "attn_norm_b"] = take(p + "ln_1.weight"), take(p + "ln_1.bias")
        w[q + "ffn_norm"], w[q + "ffn_norm_b"] = take(p + "ln_2.weight"), take(p + "ln_2.bias")
        w[q + "ffn_up"] = np.ascontiguousarray(take(p + "mlp.c_fc.weight").T)
        w[q + "ffn_up_b"] = take(p + "mlp.c_fc.bias")
        w[q + "ffn_down"] = np.ascontiguousarray(take(p + "mlp.c_proj.weight").T)
        w[q + "ffn_down_b"] = take(p + "mlp.c_proj.bias")
    return cfg, w


def _llama(hf: dict, raw: dict[str, np.ndarray], d: Path) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    c = d / "config.json"
    n_heads = _int(hf, c, "num_attention_heads")
    n_kv = _int(hf, c, "num_key_value_heads", default=n_heads)
    if hf.get("rope_scaling"):
        raise SafetensorsError(f"{c}: rope_scaling={hf['rope_scaling']!r} is not supported (plain RoPE only)")
    for k in ("attention_bias", "mlp_bias"):
        if hf.get(k):
            raise SafetensorsError(f"{c}: {k}=true is not supported (systolica's llama has no biases)")
    take = _taker(raw, ("model.", ""), d)
    tied = bool(hf.get("tie_word_embeddings", False))
    if not tied and "lm_head.weight" not in raw:
        raise SafetensorsError(f"{d}: tensor 'lm_head.weight' is missing and config.json says "
                               f"tie_word_embeddings=false")
    cfg = ModelConfig(arch="llama", dim=_int(hf, c, "hidden_size"), n_layers=_int(hf, c, "num_hidden_layers"),
                      n_heads=n_heads, n_kv_heads=n_kv, ffn_dim=_int(hf, c, "intermediate_size"),
                      vocab_size=_int(hf, c, "vocab_size"),
                      max_seq=_int(hf, c, "max_position_embeddings", default=2048),
                      norm_eps=_float(hf, c, "rms_norm_eps", default=1e-6, lo=0, hi=1),
                      rope_base=_float(hf, c, "rope_theta", default=10000.0, lo=1, hi=1e12), tied_output=tied,
                      name=str(hf.get("_name_or_path") or d.name))
    try:
        cfg.check()
    except ModelError as e:
        raise SafetensorsError(f"{c}: {e}") from None
    hd = cfg.head_dim
    w = {"token_embd": take("embed_tokens.weight"), "output_norm": take("norm.weight")}
    if not tied:
        w["output"] = np.asarray(raw["lm_head.weight"], dtype=np.float32)
    for i in range(cfg.n_layers):
        p, q = f"layers.{i}.", f"blk.{i}."
        for n, hf_n, heads in (("attn_q", "self_attn.q_proj", n_heads), ("attn_k", "self_attn.k_proj", n_kv)):
            m = take(p + hf_n + ".weight")
            if m.shape[0] != heads * hd:
                raise SafetensorsError(f"{d}: tensor {'model.' + p + hf_n + '.weight'!r} has {m.shape[0]} rows, "
                                       f"expected {heads} heads x {hd} = {heads * hd}")
            w[q + n] = hf_to_gguf_rows(m, heads)
        for n, hf_n in (("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"),
                        ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"), ("ffn_down", "mlp.down_proj"),
                        ("attn_norm", "input_layernorm"), ("ffn_norm", "post_attention_layernorm")):
            w[q + n] = take(p + hf_n + ".weight")
    return cfg, w
