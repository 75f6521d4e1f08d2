"""A transformer model as the rest of systolica sees it: hyper-parameters plus named float weights.

Front ends (GGUF, safetensors) produce a :class:`Model`; the float and quantized
reference models and the compiler consume one.  Weight names follow llama.cpp's
GGUF names, and every matrix is stored in PyTorch's ``[out_features, in_features]``
layout as float32, whatever the checkpoint stored:

=========================  ======================  =========================================
name                       shape                   notes
=========================  ======================  =========================================
``token_embd``             (vocab, dim)
``position_embd``          (n_ctx, dim)            GPT-2 only (learned positions)
``blk.{i}.attn_norm``      (dim,)                  RMSNorm / LayerNorm gain
``blk.{i}.attn_norm_b``    (dim,)                  GPT-2 only (LayerNorm bias)
``blk.{i}.attn_q``         (n_heads*hd, dim)       llama: RoPE pairs adjacent (GGUF order)
``blk.{i}.attn_k``         (n_kv_heads*hd, dim)
``blk.{i}.attn_v``         (n_kv_heads*hd, dim)
``blk.{i}.attn_output``    (dim, n_heads*hd)
``blk.{i}.attn_{q,k,v,output}_b``  (out,)         GPT-2 only (biases)
``blk.{i}.ffn_norm``       (dim,)                  (+ ``ffn_norm_b`` for GPT-2)
``blk.{i}.ffn_gate``       (ffn, dim)              llama only (SwiGLU gate)
``blk.{i}.ffn_up``         (ffn, dim)              (+ ``ffn_up_b`` for GPT-2)
``blk.{i}.ffn_down``       (dim, ffn)              (+ ``ffn_down_b`` for GPT-2)
``output_norm``            (dim,)                  (+ ``output_norm_b`` for GPT-2)
``output``                 (vocab, dim)            absent when tied to ``token_embd``
=========================  ======================  =========================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

__all__ = ["ModelConfig", "Model", "ModelError", "check_tokens"]


class ModelError(ValueError):
    """A model whose hyper-parameters or weights are inconsistent, naming the field or tensor."""


@dataclass(frozen=True)
class ModelConfig:
    arch: Literal["llama", "gpt2"]
    dim: int  # residual width
    n_layers: int
    n_heads: int  # query heads
    n_kv_heads: int  # key/value heads (grouped-query attention when < n_heads)
    ffn_dim: int  # hidden width of the MLP
    vocab_size: int
    max_seq: int = 2048  # context length the model was trained for
    norm_eps: float = 1e-5
    rope_base: float = 10000.0  # llama only
    tied_output: bool = False  # output projection shares token_embd
    name: str = "model"

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.n_heads // self.n_kv_heads

    def check(self) -> None:
        if self.arch not in ("llama", "gpt2"):
            raise ModelError(f"unsupported architecture {self.arch!r}: systolica lowers 'llama' and 'gpt2'")
        for k in ("dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "vocab_size", "max_seq"):
            if getattr(self, k) <= 0:
                raise ModelError(f"{k}={getattr(self, k)} must be positive")
        if self.dim % self.n_heads:
            raise ModelError(f"dim={self.dim} is not a multiple of n_heads={self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ModelError(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}")
        if self.head_dim % 2:
            raise ModelError(f"head_dim={self.head_dim} must be even (RoPE rotates pairs)")


@dataclass
class Model:
    config: ModelConfig
    weights: dict[str, np.ndarray]  # float32, names and layouts as in the module docstring
    tokenizer: object | None = None  # systolica.tokenizer.Tokenizer, when the checkpoint carried one
    metadata: dict = field(default_factory=dict)
    #: GGUF Q4_0 / Q4_1 tensors as their 4-bit codes and fp16 scales (numerics_int4.Q4Weights), by model name;
    #: ``weights`` holds their dequantized floats as for every tensor.  ``--weights int4`` keeps these codes.
    q4: dict = field(default_factory=dict)

    def w(self, name: str) -> np.ndarray:
        try:
            return self.weights[name]
        except KeyError:
            raise ModelError(f"model {self.config.name!r} has no tensor {name!r}") from None

    def output_weight(self) -> np.ndarray:
        return self.weights["token_embd"] if self.config.tied_output else self.w("output")

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        c = self.config
        hd = c.head_dim
        s: dict[str, tuple[int, ...]] = {"token_embd": (c.vocab_size, c.dim), "output_norm": (c.dim,)}
        if not c.tied_output:
            s["output"] = (c.vocab_size, c.dim)
        gpt2 = c.arch == "gpt2"
        if gpt2:
            s["position_embd"] = (c.max_seq, c.dim)
            s["output_norm_b"] = (c.dim,)
        for i in range(c.n_layers):
            p = f"blk.{i}."
            s[p + "attn_norm"] = (c.dim,)
            s[p + "attn_q"] = (c.n_heads * hd, c.dim)
            s[p + "attn_k"] = (c.n_kv_heads * hd, c.dim)
            s[p + "attn_v"] = (c.n_kv_heads * hd, c.dim)
            s[p + "attn_output"] = (c.dim, c.n_heads * hd)
            s[p + "ffn_norm"] = (c.dim,)
            s[p + "ffn_up"] = (c.ffn_dim, c.dim)
            s[p + "ffn_down"] = (c.dim, c.ffn_dim)
            if gpt2:
                for n, shp in (("attn_norm_b", c.dim), ("ffn_norm_b", c.dim), ("attn_q_b", c.n_heads * hd),
                               ("attn_k_b", c.n_kv_heads * hd), ("attn_v_b", c.n_kv_heads * hd),
                               ("attn_output_b", c.dim), ("ffn_up_b", c.ffn_dim), ("ffn_down_b", c.dim)):
                    s[p + n] = (shp,)
            else:
                s[p + "ffn_gate"] = (c.ffn_dim, c.dim)
        return s

    def check(self) -> None:
        """Raise :class:`ModelError` naming the first missing or mis-shaped tensor."""
        self.config.check()
        for name, shape in self.expected_shapes().items():
            if name not in self.weights:
                raise ModelError(f"model {self.config.name!r}: tensor {name!r} is missing (expected shape {shape})")
            got = tuple(self.weights[name].shape)
            if got != shape:
                raise ModelError(f"model {self.config.name!r}: tensor {name!r} has shape {got}, expected {shape}")
            if not np.all(np.isfinite(self.weights[name])):
                raise ModelError(f"model {self.config.name!r}: tensor {name!r} holds NaN or Inf")


def check_tokens(tokens, vocab_size: int, pos: int, limit: int, limit_name: str) -> np.ndarray:
    """``tokens`` as a flat int64 array, checked before a forward pass that starts at position ``pos``.

    Raises
    ------
    ValueError
        No tokens, an id outside ``0 .. vocab_size - 1`` (the first one is named), or ``pos + T``
        beyond ``limit`` positions (``limit_name`` says which limit, e.g. ``"max_seq=256"``).
    """
    toks = np.asarray(tokens, dtype=np.int64).reshape(-1)
    if toks.size == 0:
        raise ValueError("prefill needs at least one token, got an empty sequence")
    bad = toks[(toks < 0) | (toks >= vocab_size)]
    if bad.size:
        raise ValueError(f"token id {int(bad[0])} is outside the vocabulary 0..{vocab_size - 1}")
    if pos + toks.size > limit:
        raise ValueError(f"context full: {pos} cached + {toks.size} new tokens exceed {limit_name}; call reset()")
    return toks
