"""The float reference model in PyTorch: the CPU and CUDA baselines of ``systolica bench``.

Same maths as :mod:`systolica.reference_float` (llama: RMSNorm, adjacent-pair RoPE, GQA, SwiGLU;
GPT-2: LayerNorm, learned positions, biases, tanh GELU), written with batched tensors and a
preallocated KV cache so that a decode step is a handful of kernels.  ``torch`` is imported when
a :class:`TorchModel` is built, never at module import.
"""

from __future__ import annotations

import math

import numpy as np

from systolica.model import Model

__all__ = ["TorchModel"]


class TorchModel:
    """A :class:`~systolica.model.Model` on a torch device.

    Parameters
    ----------
    model : Model
        The checkpoint (float32 weights).
    device : str
        ``"cpu"`` or ``"cuda"``.
    dtype : str
        ``"float32"`` (default on CPU) or ``"float16"`` / ``"bfloat16"``.
    max_seq : int
        Cache capacity in positions.
    batch : int
        Sequences decoded side by side (they share nothing but the weights).
    """

    def __init__(self, model: Model, device: str = "cpu", dtype: str = "float32", max_seq: int = 512, batch: int = 1):
        import torch

        self.torch = torch
        c = self.cfg = model.config
        self.dev = torch.device(device)
        self.dt = getattr(torch, dtype)
        self.w = {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)).to(self.dev, self.dt)
                  for k, v in model.weights.items()}
        self.w_out = self.w["token_embd"] if c.tied_output else self.w["output"]
        self.max_seq, self.batch = int(max_seq), int(batch)
        hd = c.head_dim
        shape = (c.n_layers, self.batch, c.n_kv_heads, self.max_seq, hd)  # (L, B, Hkv, S, hd)
        self.k = torch.zeros(shape, device=self.dev, dtype=self.dt)
        self.v = torch.zeros(shape, device=self.dev, dtype=self.dt)
        inv = c.rope_base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.arange(self.max_seq, dtype=torch.float64)[:, None] * inv[None, :]  # (S, hd/2)
        self.cos, self.sin = ang.cos().to(self.dev, self.dt), ang.sin().to(self.dev, self.dt)
        self.pos = 0

    def reset(self) -> None:
        self.pos = 0

    def sync(self) -> None:
        if self.dev.type == "cuda":
            self.torch.cuda.synchronize()

    # ------------------------------------------------------------ blocks
    def _norm(self, x, name: str):
        F = self.torch.nn.functional
        if self.cfg.arch == "gpt2":
            return F.layer_norm(x, x.shape[-1:], self.w[name], self.w[name + "_b"], self.cfg.norm_eps)
        return x * self.torch.rsqrt((x * x).mean(-1, keepdim=True) + self.cfg.norm_eps) * self.w[name]

    def _lin(self, x, name: str):
        b = self.w.get(name + "_b")
        y = x @ self.w[name].T
        return y if b is None else y + b

    def _rope(self, x, pos: int):  # x (B, T, heads, hd): rotate adjacent pairs (GGUF "normal" layout)
        T = x.shape[1]
        cos, sin = self.cos[pos:pos + T][None, :, None, :], self.sin[pos:pos + T][None, :, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return self.torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)

    def forward(self, tokens) -> object:
        """Run ``tokens`` (B, T) at positions ``pos .. pos+T-1``; returns logits of the last row (B, vocab)."""
        torch, c = self.torch, self.cfg
        toks = torch.as_tensor(np.asarray(tokens, dtype=np.int64), device=self.dev).reshape(self.batch, -1)
        B, T = toks.shape
        p0 = self.pos
        if p0 + T > self.max_seq:
            raise ValueError(f"context full: {p0} + {T} positions exceed max_seq={self.max_seq}")
        hd, H, Hkv = c.head_dim, c.n_heads, c.n_kv_heads
        x = self.w["token_embd"][toks]  # (B, T, dim)
        if c.arch == "gpt2":
            x = x + self.w["position_embd"][p0:p0 + T]
        qpos = torch.arange(p0, p0 + T, device=self.dev)
        mask = torch.arange(p0 + T, device=self.dev)[None, :] <= qpos[:, None]  # (T, S): causal
        for i in range(c.n_layers):
            p = f"blk.{i}."
            h = self._norm(x, p + "attn_norm")
            q = self._lin(h, p + "attn_q").view(B, T, H, hd)
            k = self._lin(h, p + "attn_k").view(B, T, Hkv, hd)
            v = self._lin(h, p + "attn_v").view(B, T, Hkv, hd)
            if c.arch == "llama":
                q, k = self._rope(q, p0), self._rope(k, p0)
            self.k[i, :, :, p0:p0 + T] = k.transpose(1, 2)
            self.v[i, :, :, p0:p0 + T] = v.transpose(1, 2)
            kk, vv = self.k[i, :, :, :p0 + T], self.v[i, :, :, :p0 + T]  # (B, Hkv, S, hd)
            qg = q.transpose(1, 2).reshape(B, Hkv, c.group * T, hd)  # heads of a group share their KV head
            s = (qg @ kk.transpose(-1, -2)) / math.sqrt(hd)  # (B, Hkv, group*T, S)
            s = s.view(B, Hkv, c.group, T, -1).masked_fill(~mask, float("-inf"))
            o = (torch.softmax(s.float(), dim=-1).to(self.dt).view(B, Hkv, c.group * T, -1) @ vv)
            o = o.view(B, H, T, hd).transpose(1, 2).reshape(B, T, H * hd)
            x = x + self._lin(o, p + "attn_output")
            h = self._norm(x, p + "ffn_norm")
            if c.arch == "gpt2":
                a = torch.nn.functional.gelu(self._lin(h, p + "ffn_up"), approximate="tanh")
            else:
                a = torch.nn.functional.silu(self._lin(h, p + "ffn_gate")) * self._lin(h, p + "ffn_up")
            x = x + self._lin(a, p + "ffn_down")
        self.pos = p0 + T
        return self._norm(x[:, -1], "output_norm") @ self.w_out.T  # (B, vocab)
