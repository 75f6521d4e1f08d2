"""Float reference of the two model families systolica lowers: llama and GPT-2.

This is the yardstick the integer path is measured against, written to be read:
one function per block, shapes in the comments (T = new tokens, S = tokens in
the cache, H = query heads, Hkv = key/value heads, hd = head_dim).

- llama: RMSNorm, rotary embeddings with the model's base in GGUF's "normal"
  layout (adjacent pairs ``(x[2i], x[2i+1])`` of each head rotate by
  ``pos * base**(-2i/hd)``), grouped-query attention, SwiGLU MLP, tied or
  untied output.
- GPT-2: LayerNorm, learned positions, biases everywhere, GELU (tanh form).

Precision: float64 by default.  The reference exists to measure the quantized
path, so its own rounding (~1e-16 relative) must sit far below what it measures
(~1e-3); float64 also makes prefill vs. decode agree to ~1e-13, so a 1e-5 test
tolerance catches real cache bugs and no rounding noise.  ``dtype=np.float32``
halves the memory for big checkpoints (a 1.1B model is 4.4 GB in float32).
"""

from __future__ import annotations

import numpy as np

from systolica.model import Model, check_tokens

__all__ = ["FloatModel", "rms_norm", "layer_norm", "rope_angles", "apply_rope", "gelu_tanh", "silu"]


# ------------------------------------------------------------------ building blocks
def rms_norm(x: np.ndarray, g: np.ndarray, eps: float) -> np.ndarray:
    """``x / sqrt(mean(x^2) + eps) * g`` over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps) * g + b`` over the last axis (biased variance, as PyTorch)."""
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GPT-2's GELU: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def rope_angles(positions: np.ndarray, head_dim: int, base: float) -> np.ndarray:
    """Rotation angles ``pos * base**(-2i/hd)``, shape ``(len(positions), head_dim // 2)``."""
    inv_freq = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)  # (hd/2,)
    return np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]


def apply_rope(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """Rotate adjacent pairs of each head: ``x`` (T, heads, hd), ``angles`` (T, hd/2)."""
    cos = np.cos(angles)[:, None, :]  # (T, 1, hd/2)
    sin = np.sin(angles)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]  # (T, heads, hd/2) each: the pair (x[2i], x[2i+1])
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_pos: np.ndarray, group: int) -> np.ndarray:
    """Causal grouped-query attention.

    q (T, H, hd) at absolute positions ``q_pos`` (T,); k, v (S, Hkv, hd) for positions 0..S-1.
    Query head h reads KV head ``h // group``.  Returns (T, H, hd).
    """
    T, H, hd = q.shape
    S, Hkv, _ = k.shape
    qg = q.reshape(T, Hkv, group, hd)  # (T, Hkv, group, hd): the heads sharing one KV head, side by side
    scores = np.einsum("tkgd,skd->kgts", qg, k) * q.dtype.type(1.0 / np.sqrt(hd))  # (Hkv, group, T, S); a scalar of q's dtype keeps float32 float32
    future = np.arange(S)[None, :] > q_pos[:, None]  # (T, S): keys after the query
    scores = np.where(future, -np.inf, scores)
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    o = np.einsum("kgts,skd->tkgd", p, v)  # (T, Hkv, group, hd)
    return o.reshape(T, H, hd)


# ------------------------------------------------------------------ the model
class FloatModel:
    """Float inference of a :class:`~systolica.model.Model` with a KV cache.

    Parameters
    ----------
    model : Model
        A checked llama or GPT-2 model.
    dtype : numpy dtype
        Compute precision, ``np.float64`` (default) or ``np.float32``.

    Examples
    --------
    >>> fm = FloatModel(model)
    >>> logits = fm.prefill([1, 5, 9])       # (3, vocab)
    >>> nxt = fm.decode(int(logits[-1].argmax()))  # (vocab,)
    """

    def __init__(self, model: Model, dtype: type = np.float64):
        model.check()
        self.model = model
        self.cfg = model.config
        self.dtype = np.dtype(dtype)
        self.w = {k: np.asarray(v, dtype=self.dtype) for k, v in model.weights.items()}
        self.w_out = self.w["token_embd"] if self.cfg.tied_output else self.w["output"]
        self.reset()

    def reset(self) -> None:
        """Forget the context: the next token is at position 0."""
        c = self.cfg
        self.pos = 0
        # One cache per layer, grown by concatenation: (S, Hkv, hd)
        self.k_cache = [np.zeros((0, c.n_kv_heads, c.head_dim), self.dtype) for _ in range(c.n_layers)]
        self.v_cache = [np.zeros((0, c.n_kv_heads, c.head_dim), self.dtype) for _ in range(c.n_layers)]

    def prefill(self, tokens) -> np.ndarray:
        """Run ``tokens`` (T,) at positions ``pos .. pos+T-1``; returns logits ``(T, vocab)``."""
        toks = check_tokens(tokens, self.cfg.vocab_size, self.pos, self.cfg.max_seq, f"max_seq={self.cfg.max_seq}")
        positions = np.arange(self.pos, self.pos + toks.size)
        logits = self._forward(toks, positions)
        self.pos += toks.size
        return logits

    def decode(self, token: int) -> np.ndarray:
        """One decode step: logits ``(vocab,)`` of the next token after ``token``."""
        return self.prefill([int(token)])[0]

    # ---------------------------------------------------------------- forward
    def _forward(self, toks: np.ndarray, positions: np.ndarray) -> np.ndarray:
        c, w = self.cfg, self.w
        x = w["token_embd"][toks]  # (T, dim)
        if c.arch == "gpt2":
            x = x + w["position_embd"][positions]
        for i in range(c.n_layers):
            x = x + self._attn_block(i, x, positions)
            x = x + self._mlp_block(i, x)
        x = self._norm(x, "output_norm")  # (T, dim)
        return x @ self.w_out.T  # (T, vocab)

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        if self.cfg.arch == "gpt2":
            return layer_norm(x, self.w[name], self.w[name + "_b"], self.cfg.norm_eps)
        return rms_norm(x, self.w[name], self.cfg.norm_eps)

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        y = x @ self.w[name].T  # [out, in] layout
        b = self.w.get(name + "_b")
        return y if b is None else y + b

    def _attn_block(self, i: int, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        c, p = self.cfg, f"blk.{i}."
        T, hd = x.shape[0], c.head_dim
        h = self._norm(x, p + "attn_norm")  # (T, dim)
        q = self._linear(h, p + "attn_q").reshape(T, c.n_heads, hd)  # (T, H, hd)
        k = self._linear(h, p + "attn_k").reshape(T, c.n_kv_heads, hd)  # (T, Hkv, hd)
        v = self._linear(h, p + "attn_v").reshape(T, c.n_kv_heads, hd)  # (T, Hkv, hd)
        if c.arch == "llama":
            ang = rope_angles(positions, hd, c.rope_base)  # (T, hd/2)
            q, k = apply_rope(q, ang).astype(self.dtype), apply_rope(k, ang).astype(self.dtype)
        self.k_cache[i] = np.concatenate([self.k_cache[i], k])  # (S, Hkv, hd)
        self.v_cache[i] = np.concatenate([self.v_cache[i], v])
        o = _attention(q, self.k_cache[i], self.v_cache[i], positions, c.group)  # (T, H, hd)
        return self._linear(o.reshape(T, c.n_heads * hd), p + "attn_output")  # (T, dim)

    def _mlp_block(self, i: int, x: np.ndarray) -> np.ndarray:
        p = f"blk.{i}."
        h = self._norm(x, p + "ffn_norm")  # (T, dim)
        if self.cfg.arch == "gpt2":
            a = gelu_tanh(self._linear(h, p + "ffn_up"))  # (T, ffn)
        else:
            a = silu(self._linear(h, p + "ffn_gate")) * self._linear(h, p + "ffn_up")  # (T, ffn) SwiGLU
        return self._linear(a, p + "ffn_down")  # (T, dim)
