"""Random models with realistic weight statistics, for tests and for writing test checkpoints.

A toy model (dim 48, two layers) initialised like a big one (std 0.02) would be
almost the identity: at dim 4096 a 0.02-std matrix has a gain of about
0.02 * sqrt(4096) = 1.3 per layer, at dim 48 only 0.14, so attention would be
uniform and every logit near zero.  :func:`random_model` therefore scales each
matrix by its fan-in (``std = weight_gain / sqrt(fan_in)``: 0.0156 at dim 4096,
the same order as trained checkpoints), so a small model has the signal
propagation of a large one: attention scores of order one, SwiGLU/GELU in their
non-linear range, logits spread over a few units.  As in GPT-2's initialisation
the two projections that write into the residual stream (``attn_output``,
``ffn_down``) are scaled by ``1 / sqrt(2 * n_layers)``.  Rows get a log-normal
scale spread so per-channel quantization has something to do, and norm gains are
``1 + N(0, gain_std)``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from systolica.model import Model, ModelConfig, ModelError

__all__ = ["random_model"]


def random_model(arch: Literal["llama", "gpt2"] = "llama", dim: int = 64, n_layers: int = 2, n_heads: int = 4,
                 n_kv_heads: int | None = None, ffn_dim: int | None = None, vocab: int = 256, tied: bool = False,
                 seed: int = 0, *, max_seq: int = 256, rope_base: float = 10000.0, norm_eps: float = 1e-5,
                 weight_gain: float = 1.0, row_spread: float = 0.25, gain_std: float = 0.1,
                 bias_std: float = 0.1, name: str | None = None) -> Model:
    """A :class:`~systolica.model.Model` with random float32 weights of realistic statistics.

    Parameters
    ----------
    arch : {"llama", "gpt2"}
        Architecture; GPT-2 gets biases, LayerNorm betas and learned positions.
    dim, n_layers, n_heads : int
        Residual width, number of blocks, number of query heads.
    n_kv_heads : int, optional
        Key/value heads (grouped-query attention when fewer than ``n_heads``); default ``n_heads``.
    ffn_dim : int, optional
        MLP hidden width; default ``4 * dim`` for GPT-2 and ``round(8/3 * dim)`` (even) for llama.
    vocab : int
        Vocabulary size.
    tied : bool
        Share ``token_embd`` as the output projection (no ``output`` tensor).
    seed : int
        Seed of the generator; the same arguments give the same weights on every machine.
    max_seq : int
        Context length (rows of ``position_embd`` for GPT-2).
    rope_base, norm_eps : float
        Written into the config.
    weight_gain : float
        Matrix std is ``weight_gain / sqrt(fan_in)`` (see the module docstring).
    row_spread : float
        Sigma of the log-normal per-output-row scale of every matrix (0: all rows alike).
    gain_std : float
        Std of the norm gains around 1.
    bias_std : float
        Std of biases and LayerNorm betas (GPT-2).
    name : str, optional
        Model name; default describes the shape.

    Returns
    -------
    Model
        Checked with :meth:`Model.check`.

    Raises
    ------
    ModelError
        The hyper-parameters are inconsistent (e.g. ``dim`` not a multiple of ``n_heads``).
    """
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if ffn_dim is None:
        ffn_dim = 4 * dim if arch == "gpt2" else 2 * round(8 * dim / 6)
    if weight_gain <= 0:
        raise ModelError(f"weight_gain={weight_gain} must be positive")
    cfg = ModelConfig(arch=arch, dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
                      ffn_dim=ffn_dim, vocab_size=vocab, max_seq=max_seq, norm_eps=norm_eps, rope_base=rope_base,
                      tied_output=tied,
                      name=name or f"random-{arch}-d{dim}-l{n_layers}-h{n_heads}kv{n_kv_heads}-f{ffn_dim}-v{vocab}")
    cfg.check()
    rng = np.random.default_rng(seed)
    resid = 1.0 / np.sqrt(2.0 * n_layers)  # GPT-2's scaling of the residual projections

    def matrix(out: int, inp: int, scale: float = 1.0) -> np.ndarray:
        rows = np.exp(row_spread * rng.standard_normal((out, 1)))  # per-channel spread
        return (rng.standard_normal((out, inp)) * rows * (scale * weight_gain / np.sqrt(inp))).astype(np.float32)

    def gain(n: int) -> np.ndarray:
        return (1.0 + gain_std * rng.standard_normal(n)).astype(np.float32)

    def bias(n: int) -> np.ndarray:
        return (bias_std * rng.standard_normal(n)).astype(np.float32)

    hd = cfg.head_dim
    # Embedding rows of norm ~1: the first norm sees unit-scale rows, a tied output gives logits of std ~1.
    w: dict[str, np.ndarray] = {"token_embd": matrix(vocab, dim)}
    if arch == "gpt2":
        w["position_embd"] = (0.5 * matrix(max_seq, dim)).astype(np.float32)
    for i in range(n_layers):
        p = f"blk.{i}."
        w[p + "attn_norm"] = gain(dim)
        w[p + "attn_q"] = matrix(n_heads * hd, dim)
        w[p + "attn_k"] = matrix(n_kv_heads * hd, dim)
        w[p + "attn_v"] = matrix(n_kv_heads * hd, dim)
        w[p + "attn_output"] = matrix(dim, n_heads * hd, resid)
        w[p + "ffn_norm"] = gain(dim)
        w[p + "ffn_up"] = matrix(ffn_dim, dim)
        w[p + "ffn_down"] = matrix(dim, ffn_dim, resid)
        if arch == "gpt2":
            for n, size in (("attn_norm_b", dim), ("ffn_norm_b", dim), ("attn_q_b", n_heads * hd),
                            ("attn_k_b", n_kv_heads * hd), ("attn_v_b", n_kv_heads * hd), ("attn_output_b", dim),
                            ("ffn_up_b", ffn_dim), ("ffn_down_b", dim)):
                w[p + n] = bias(size)
        else:
            w[p + "ffn_gate"] = matrix(ffn_dim, dim)
    w["output_norm"] = gain(dim)
    if arch == "gpt2":
        w["output_norm_b"] = bias(dim)
    if not tied:
        w["output"] = matrix(vocab, dim)
    model = Model(cfg, w, metadata={"source": "systolica.testmodels.random_model", "seed": seed})
    model.check()
    return model
