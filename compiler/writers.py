"""Write a :class:`Model` as a checkpoint: GGUF (llama) or safetensors + config.json (GPT-2, llama).

The writers are the inverse of the front ends, so tests can make checkpoints of any
shape and tensor type from random weights and read them back; they also turn a
model into a file another tool (llama.cpp, transformers) can load.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import gguf
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from safetensors.numpy import save_file

from systolica.model import Model, ModelError

from .safetensors_reader import gguf_to_hf_rows

__all__ = ["write_gguf", "write_safetensors", "WRITABLE_TYPES"]

Q = GGMLQuantizationType
WRITABLE_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")  # those gguf.quants can quantize


def _gguf_name(name: str) -> str:
    return name[:-2] + ".bias" if name.endswith("_b") else name + ".weight"


def _add_field(w: gguf.GGUFWriter, key: str, value) -> None:
    if isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, (int, np.integer)):
        w.add_uint32(key, int(value)) if value >= 0 else w.add_int32(key, int(value))
    elif isinstance(value, (float, np.floating)):
        w.add_float32(key, float(value))
    elif isinstance(value, str):
        w.add_string(key, value)
    else:
        w.add_array(key, list(value))


def write_gguf(model: Model, path: str | os.PathLike, tensor_type: str = "F32", *,
               types: Mapping[str, str] | None = None, fields: Mapping[str, object] | None = None,
               arch: str = "llama", prequantized: Mapping[str, tuple[str, np.ndarray]] | None = None) -> Path:
    """Write a llama :class:`Model` as GGUF, quantizing matrices to ``tensor_type``.

    Parameters
    ----------
    model : Model
        A llama model (GPT-2 is not written as GGUF).
    path : path-like
        Output file.
    tensor_type : str
        Type of every matrix: one of :data:`WRITABLE_TYPES`.  Norm gains (1-D) stay F32,
        as llama.cpp writes them.  Quantized types need rows that are a multiple of the
        block size (32 elements).
    types : mapping, optional
        Per-tensor override, by Model name (``"token_embd": "Q8_0"``).
    fields : mapping, optional
        Extra or replacing metadata, full keys (``"tokenizer.ggml.model": "gpt2"``); ints are written
        as uint32, floats as float32, sequences as arrays, and None leaves the key out.
    arch : str
        ``general.architecture`` and the prefix of the hyper-parameter keys (tests write foreign ones).
    prequantized : mapping, optional
        Tensors written as given instead of from ``model.weights``: name -> (GGUF type name, uint8 array
        of shape ``(rows, bytes per row)``), for types ``gguf.quants`` cannot quantize (K-quants).

    Raises
    ------
    ModelError
        A type is unknown, or a row length is not a multiple of the type's block size.
    """
    path = Path(path)
    c = model.config
    if c.arch != "llama":
        raise ModelError(f"write_gguf writes llama models; model {c.name!r} is {c.arch!r} (use write_safetensors)")
    w = gguf.GGUFWriter(str(path), arch)
    meta: dict[str, object] = {"general.name": c.name}
    for k, v in (("context_length", c.max_seq), ("embedding_length", c.dim), ("block_count", c.n_layers),
                 ("feed_forward_length", c.ffn_dim), ("attention.head_count", c.n_heads),
                 ("attention.head_count_kv", c.n_kv_heads), ("vocab_size", c.vocab_size),
                 ("rope.dimension_count", c.head_dim), ("attention.layer_norm_rms_epsilon", float(c.norm_eps)),
                 ("rope.freq_base", float(c.rope_base))):
        meta[f"{arch}.{k}"] = v
    meta.update(fields or {})
    for k, v in meta.items():
        if v is not None:  # None in ``fields`` leaves a key out
            _add_field(w, k, v)
    for name, arr in model.weights.items():
        if name == "output" and c.tied_output:
            continue
        if prequantized and name in prequantized:
            qname, raw = prequantized[name]
            w.add_tensor(_gguf_name(name), np.ascontiguousarray(raw, dtype=np.uint8), raw_shape=raw.shape,
                         raw_dtype=Q[qname])
            continue
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        tname = (types or {}).get(name, tensor_type) if arr.ndim > 1 else "F32"
        if tname not in WRITABLE_TYPES:
            raise ModelError(f"tensor {name!r}: type {tname!r} is not writable; use one of {', '.join(WRITABLE_TYPES)}")
        if tname == "F32":
            w.add_tensor(_gguf_name(name), arr)
        elif tname == "F16":
            w.add_tensor(_gguf_name(name), arr.astype(np.float16))
        else:
            qtype = Q[tname]
            block = GGML_QUANT_SIZES[qtype][0]
            if arr.shape[-1] % block:
                raise ModelError(f"tensor {name!r}: rows of {arr.shape[-1]} elements cannot be stored as {tname} "
                                 f"(blocks of {block})")
            q = gguf.quants.quantize(arr, qtype)
            w.add_tensor(_gguf_name(name), q, raw_shape=q.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_safetensors(model: Model, directory: str | os.PathLike, dtype: str = "float32",
                      tokenizer_json: str | os.PathLike | None = None) -> Path:
    """Write a :class:`Model` as a Hugging Face checkpoint: ``config.json`` + ``model.safetensors``.

    GPT-2 gets ``Conv1D`` ``[in, out]`` weights with q/k/v fused in ``c_attn``; llama gets
    ``q_proj``/``k_proj`` rows in the half-split RoPE order transformers expects.

    Parameters
    ----------
    model : Model
    directory : path-like
        Created if needed.
    dtype : {"float32", "float16"}
    tokenizer_json : path-like, optional
        Copied next to the weights as ``tokenizer.json``.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    c, src = model.config, model.weights
    if dtype not in ("float32", "float16"):
        raise ModelError(f"dtype {dtype!r}: write_safetensors writes 'float32' or 'float16'")
    out: dict[str, np.ndarray] = {}
    if c.arch == "gpt2":
        if c.n_kv_heads != c.n_heads:
            raise ModelError(f"GPT-2 has no grouped-query attention: n_kv_heads={c.n_kv_heads} != n_heads={c.n_heads}")
        cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": c.dim, "n_layer": c.n_layers,
               "n_head": c.n_heads, "n_inner": c.ffn_dim, "n_positions": c.max_seq, "n_ctx": c.max_seq,
               "vocab_size": c.vocab_size, "layer_norm_epsilon": c.norm_eps, "activation_function": "gelu_new",
               "tie_word_embeddings": c.tied_output}
        out.update({"wte.weight": src["token_embd"], "wpe.weight": src["position_embd"],
                    "ln_f.weight": src["output_norm"], "ln_f.bias": src["output_norm_b"]})
        if not c.tied_output:
            out["lm_head.weight"] = src["output"]
        for i in range(c.n_layers):
            p, q = f"h.{i}.", f"blk.{i}."
            out[p + "attn.c_attn.weight"] = np.concatenate([src[q + n] for n in ("attn_q", "attn_k", "attn_v")]).T
            out[p + "attn.c_attn.bias"] = np.concatenate([src[q + n + "_b"] for n in ("attn_q", "attn_k", "attn_v")])
            for hf_n, n in (("attn.c_proj", "attn_output"), ("mlp.c_fc", "ffn_up"), ("mlp.c_proj", "ffn_down")):
                out[p + hf_n + ".weight"] = src[q + n].T  # Conv1D stores [in, out]
                out[p + hf_n + ".bias"] = src[q + n + "_b"]
            for hf_n, n in (("ln_1", "attn_norm"), ("ln_2", "ffn_norm")):
                out[p + hf_n + ".weight"], out[p + hf_n + ".bias"] = src[q + n], src[q + n + "_b"]
    elif c.arch == "llama":
        cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": c.dim,
               "num_hidden_layers": c.n_layers, "num_attention_heads": c.n_heads, "num_key_value_heads": c.n_kv_heads,
               "intermediate_size": c.ffn_dim, "vocab_size": c.vocab_size, "max_position_embeddings": c.max_seq,
               "rms_norm_eps": c.norm_eps, "rope_theta": c.rope_base, "tie_word_embeddings": c.tied_output,
               "hidden_act": "silu"}
        out.update({"model.embed_tokens.weight": src["token_embd"], "model.norm.weight": src["output_norm"]})
        if not c.tied_output:
            out["lm_head.weight"] = src["output"]
        for i in range(c.n_layers):
            p, q = f"model.layers.{i}.", f"blk.{i}."
            out[p + "self_attn.q_proj.weight"] = gguf_to_hf_rows(src[q + "attn_q"], c.n_heads)
            out[p + "self_attn.k_proj.weight"] = gguf_to_hf_rows(src[q + "attn_k"], c.n_kv_heads)
            for hf_n, n in (("self_attn.v_proj", "attn_v"), ("self_attn.o_proj", "attn_output"),
                            ("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"), ("mlp.down_proj", "ffn_down"),
                            ("input_layernorm", "attn_norm"), ("post_attention_layernorm", "ffn_norm")):
                out[p + hf_n + ".weight"] = src[q + n]
    else:
        raise ModelError(f"unsupported architecture {c.arch!r}")
    cfg["torch_dtype"] = dtype
    save_file({k: np.ascontiguousarray(v, dtype=dtype) for k, v in out.items()}, str(d / "model.safetensors"),
              metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    if tokenizer_json is not None:
        (d / "tokenizer.json").write_bytes(Path(tokenizer_json).read_bytes())
    return d
