"""The integer reference: the quantized model computed with :mod:`systolica.numerics`, op by op.

Layer (a), the one-time weight conversion (:func:`quantize_model`,
:class:`QuantModel`), lives in :mod:`systolica.quant_model` and is re-exported
here; read its docstring for the per-tensor decisions (REQUANT shift
``S - FX_FRAC``, logits, ``eps_q32``, GPT-2's split ``c_attn``, the 1/sqrt(hd)
folded into ``attn_q``).  Layer (b), :class:`QuantRunner`, runs prefill and
decode on integers, following ``docs/quantization.md`` line by line; each
line's comment names the ISA op the compiler emits for it, so the golden
simulator, running the compiled program, must give the same integers.

Decisions of this layer:

- Every op is row-wise (a row is one token, or one head of one token): a
  prefill of T tokens is T decode steps bit for bit (the tests assert it).
- Embedding: a LOAD of the fx row of ``token_embd`` (GPT-2: plus an ADD of the
  fx ``position_embd`` row).  RoPE rows come from the table by position.
- KV cache: per layer and KV head, pages of P tokens (P a power of two, the
  ATTN ``page_log2`` field).  A page holds int8 K and V rows and their int8
  exponents (one per token, QUANT of each head's row).
- Attention: query head h reads KV head ``h // group``; one ATTN per (token,
  KV head, page) over the ``group`` query heads of that KV head (``nq``), pages
  in order from the first, ``offset = position - page's first position``,
  ``causal = 1``, ``t`` = tokens written into the page so far.  In a prefill
  the later tokens of the prompt are already in the last page; ``causal``
  masks them, and ``numerics.attn_tile`` works on the valid prefix only, so the
  result equals the decode step's.  Pages after the query's own page hold no
  valid token (ATTN leaves the state unchanged) and are not visited.
- Logits: fx int32 ``(T, vocab)`` from the output REQUANT; :meth:`QuantRunner.logits_float`
  gives the float view.
"""

from __future__ import annotations

import numpy as np

from systolica import numerics as nx
from systolica.model import check_tokens
from systolica.numerics_int4 import stream_acc_prepared
from systolica.quant_model import QuantError, QuantMatrix, QuantModel, quantize_model

__all__ = ["QuantRunner", "QuantModel", "QuantMatrix", "QuantError", "quantize_model", "MAX_PAGE"]

MAX_PAGE = 1 << 12  # ATTN.t is 12 bits (<= 4095 tokens), so the largest power-of-two page that fits is 2**11


class QuantRunner:
    """Integer prefill/decode of a :class:`QuantModel` with a paged int8 KV cache.

    Parameters
    ----------
    qmodel : QuantModel
        From :func:`quantize_model`.
    page : int
        KV page (ATTN tile) size P in tokens: a power of two, at most 2048.  The
        online softmax rounds per tile, so the compiler must use the same P.
    trace : bool
        Keep every intermediate fx/int8 array of the last call in :attr:`taps`
        (name -> array, e.g. ``"blk.0.attn_q"``), to find where another
        implementation first diverges.

    Examples
    --------
    >>> run = QuantRunner(quantize_model(model), page=16)
    >>> fx = run.prefill([1, 5, 9])                # int32 (3, vocab)
    >>> nxt = int(nx.argmax(fx[-1:])[0])
    >>> fx1 = run.decode(nxt)                      # int32 (vocab,)
    """

    def __init__(self, qmodel: QuantModel, page: int = 16, trace: bool = False):
        page = int(page)
        if page < 1 or page >= MAX_PAGE or page & (page - 1):
            raise ValueError(f"page={page} must be a power of two from 1 to {MAX_PAGE // 2} (ATTN page_log2, t < 4096)")
        self.qm = qmodel
        self.cfg = qmodel.config
        self.page = page
        self.trace = trace
        self.taps: dict[str, np.ndarray] = {}
        limit = self.cfg.max_seq if qmodel.rope is None else min(self.cfg.max_seq, qmodel.rope.shape[0])
        self.max_positions = limit
        self.reset()

    def reset(self) -> None:
        """Empty the KV cache; the next token is at position 0."""
        self.pos = 0
        # kv[layer] = list of pages; a page is (K int8 (Hkv, P, hd), K exps int8 (Hkv, P), V, V exps)
        self.kv: list[list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = [
            [] for _ in range(self.cfg.n_layers)]

    # ---------------------------------------------------------------- public API
    def prefill(self, tokens) -> np.ndarray:
        """Run ``tokens`` at positions ``pos .. pos+T-1``; returns fx int32 logits ``(T, vocab)``."""
        toks = check_tokens(tokens, self.cfg.vocab_size, self.pos, self.max_positions,
                            f"{self.max_positions} positions")
        self.taps = {}
        positions = np.arange(self.pos, self.pos + toks.size)
        logits = self._forward(toks, positions)
        self.pos += toks.size
        return logits

    def decode(self, token: int) -> np.ndarray:
        """One decode step: fx int32 logits ``(vocab,)`` of the token after ``token``."""
        return self.prefill([int(token)])[0]

    @staticmethod
    def logits_float(fx: np.ndarray) -> np.ndarray:
        """The real values of fx logits (float64)."""
        return nx.from_fx(fx)

    # ---------------------------------------------------------------- helpers (one ISA op each)
    def _tap(self, name: str, value: np.ndarray) -> np.ndarray:
        if self.trace:
            self.taps[name] = value
        return value

    def _quant_in(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """QUANT of a linear layer's input: (T, n) fx -> int8 rows + exps; 2T rows when act_split."""
        return nx.quant_rows_split(x) if self.qm.act_split else nx.quant_rows(x)  # QUANT split=act_split

    def _linear(self, xq: np.ndarray, xe: np.ndarray, name: str) -> np.ndarray:
        """GEMM + REQUANT (+ ADD of the split halves) (+ ADD bcast=1 of the bias): int8 rows -> fx rows."""
        w = self.qm.mats[name]
        # GEMM (int32, T or 2T rows); GEMM_STREAM wfmt=Q4_0/Q4_1: group terms rounded by gshift (numerics_int4)
        acc = stream_acc_prepared(xq, w.operands, w.gshift) if w.wfmt else nx.matmul(xq, w.q)
        y = nx.requant(acc, w.mult, xe, w.requant_shift)  # REQUANT   fx (T or 2T, out), shift = S - FX_FRAC
        if self.qm.act_split:
            t = y.shape[0] // 2
            y = nx.add(y[:t], y[t:])  # ADD       int8 part + residual part
        b = self.qm.fx.get(name + "_b")
        if b is not None:
            y = nx.add(y, b[None, :])  # ADD bcast  bias (GPT-2)
        return self._tap(name, y)

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        fx = self.qm.fx
        if self.cfg.arch == "gpt2":
            y = nx.layernorm(x, fx[name], fx[name + "_b"], self.qm.eps_q32)  # LAYERNORM
        else:
            y = nx.rmsnorm(x, fx[name], self.qm.eps_q32)  # RMSNORM
        return self._tap(name, y)

    # ---------------------------------------------------------------- the model
    def _forward(self, toks: np.ndarray, positions: np.ndarray) -> np.ndarray:
        fx = self.qm.fx
        x = fx["token_embd"][toks]  # LOAD      fx (T, dim): embedding rows
        if self.cfg.arch == "gpt2":
            x = nx.add(x, fx["position_embd"][positions])  # LOAD + ADD  learned positions
        for i in range(self.cfg.n_layers):
            x = self._attn_block(i, x, positions)
            x = self._mlp_block(i, x)
        h = self._norm(x, "output_norm")  # RMSNORM / LAYERNORM
        hq, he = self._quant_in(h)  # QUANT     int8 (T, dim), exps (T,)
        return self._linear(hq, he, "output")  # GEMM + REQUANT  fx logits (T, vocab)

    def _attn_block(self, i: int, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        c, p = self.cfg, f"blk.{i}."
        T, hd, H, Hkv = x.shape[0], c.head_dim, c.n_heads, c.n_kv_heads
        a = self._norm(x, p + "attn_norm")  # RMSNORM / LAYERNORM  fx (T, dim)
        aq, ae = self._quant_in(a)  # QUANT     int8 (T, dim), exps (T,)
        q = self._linear(aq, ae, p + "attn_q")  # GEMM + REQUANT  fx (T, H*hd), 1/sqrt(hd) folded in
        k = self._linear(aq, ae, p + "attn_k")  # GEMM + REQUANT  fx (T, Hkv*hd)
        v = self._linear(aq, ae, p + "attn_v")  # GEMM + REQUANT  fx (T, Hkv*hd)
        if c.arch == "llama":
            table = self.qm.rope[positions]  # LOAD      RoPE rows (T, hd)
            q = self._tap(p + "rope_q", nx.rope(q, table))  # ROPE
            k = self._tap(p + "rope_k", nx.rope(k, table))  # ROPE
        qq, qe = nx.quant_rows(q.reshape(T * H, hd))  # QUANT     one row per head
        kq, ke = nx.quant_rows(k.reshape(T * Hkv, hd))  # QUANT
        vq, ve = nx.quant_rows(v.reshape(T * Hkv, hd))  # QUANT
        self._cache_write(i, positions, kq.reshape(T, Hkv, hd), ke.reshape(T, Hkv),
                          vq.reshape(T, Hkv, hd), ve.reshape(T, Hkv))  # STORE  K/V rows into their pages
        o = self._attention(i, positions, qq.reshape(T, H, hd), qe.reshape(T, H))  # ATTN ... ATTN_OUT
        o = self._tap(p + "attn", o.reshape(T, H * hd))  # fx (T, H*hd)
        oq, oe = self._quant_in(o)  # QUANT
        return nx.add(x, self._linear(oq, oe, p + "attn_output"))  # GEMM + REQUANT (+ bias) + ADD residual

    def _cache_write(self, i: int, positions: np.ndarray, kq, ke, vq, ve) -> None:
        c, P = self.cfg, self.page
        pages = self.kv[i]
        for r, pos in enumerate(positions):
            j, slot = divmod(int(pos), P)
            if j == len(pages):  # a fresh page: the runtime hands the program its address
                pages.append((np.zeros((c.n_kv_heads, P, c.head_dim), np.int8), np.zeros((c.n_kv_heads, P), np.int8),
                              np.zeros((c.n_kv_heads, P, c.head_dim), np.int8), np.zeros((c.n_kv_heads, P), np.int8)))
            K, KE, V, VE = pages[j]
            K[:, slot], KE[:, slot], V[:, slot], VE[:, slot] = kq[r], ke[r], vq[r], ve[r]

    def _attention(self, i: int, positions: np.ndarray, qq: np.ndarray, qe: np.ndarray) -> np.ndarray:
        """Streaming attention over the pages: qq int8 (T, H, hd), qe int8 (T, H) -> fx (T, H, hd)."""
        c, P = self.cfg, self.page
        g = c.group
        written = int(positions[-1]) + 1  # tokens in the cache once this call's K/V are stored
        out = np.empty((len(positions), c.n_heads, c.head_dim), np.int32)
        for r, pos in enumerate(positions):
            for kvh in range(c.n_kv_heads):
                heads = slice(kvh * g, (kvh + 1) * g)  # the nq = group query heads reading this KV head
                state = None  # ATTN init=1 on the first page
                for j in range(int(pos) // P + 1):
                    K, KE, V, VE = self.kv[i][j]
                    t = min(P, written - j * P)  # ATTN.t: valid slots of the page
                    state = nx.attn_tile(qq[r, heads], qe[r, heads], K[kvh, :t], KE[kvh, :t], V[kvh, :t],
                                         VE[kvh, :t], state, offset=int(pos) - j * P, causal=True)  # ATTN
                out[r, heads] = nx.attn_finish(state)  # ATTN_OUT  fx (group, hd)
        return out

    def _mlp_block(self, i: int, x: np.ndarray) -> np.ndarray:
        p = f"blk.{i}."
        b = self._norm(x, p + "ffn_norm")  # RMSNORM / LAYERNORM  fx (T, dim)
        bq, be = self._quant_in(b)  # QUANT
        if self.cfg.arch == "gpt2":
            u = self._linear(bq, be, p + "ffn_up")  # GEMM + REQUANT + ADD bias  fx (T, ffn)
            h = self._tap(p + "ffn_act", nx.gelu(u))  # GELU
        else:
            gt = self._linear(bq, be, p + "ffn_gate")  # GEMM + REQUANT  fx (T, ffn)
            u = self._linear(bq, be, p + "ffn_up")  # GEMM + REQUANT  fx (T, ffn)
            h = self._tap(p + "ffn_act", nx.mul(nx.silu(gt), u, nx.FX_FRAC))  # SILU, MUL shift=FX_FRAC
        hq, he = self._quant_in(h)  # QUANT     int8 (T, ffn)
        return nx.add(x, self._linear(hq, he, p + "ffn_down"))  # GEMM + REQUANT (+ bias) + ADD residual
