"""The float reference (systolica.reference_float) and the random test models."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from systolica.model import Model, ModelError
from systolica.reference_float import FloatModel
from systolica.testmodels import random_model

TOKS = np.random.default_rng(123).integers(0, 96, 24)


def _llama(**kw) -> Model:
    args = dict(dim=48, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=136, vocab=96, seed=3)
    args.update(kw)
    return random_model("llama", **args)


def _gpt2(**kw) -> Model:
    args = dict(dim=48, n_layers=2, n_heads=4, vocab=96, seed=4)
    args.update(kw)
    return random_model("gpt2", **args)


# ------------------------------------------------------------------ test models
def test_random_model_is_deterministic_and_checked():
    a, b = _llama(), _llama()
    assert a.weights.keys() == b.weights.keys()
    assert all(np.array_equal(a.weights[k], b.weights[k]) for k in a.weights)
    assert all(v.dtype == np.float32 for v in a.weights.values())
    c = _llama(seed=4)
    assert not np.array_equal(a.weights["blk.0.attn_q"], c.weights["blk.0.attn_q"])
    g = _gpt2(tied=True)
    assert "output" not in g.weights and "position_embd" in g.weights and "blk.1.ffn_up_b" in g.weights


def test_random_model_statistics():
    m = random_model("llama", dim=96, n_layers=4, n_heads=8, vocab=64, seed=0)
    wq = m.weights["blk.0.attn_q"]
    assert abs(wq.std() * np.sqrt(96) - 1.0) < 0.15  # fan-in scaled, gain ~1
    wo = m.weights["blk.0.attn_output"]
    assert abs(wo.std() * np.sqrt(96) * np.sqrt(8) - 1.0) < 0.15  # residual projections / sqrt(2 L)
    g = m.weights["blk.0.attn_norm"]
    assert abs(g.mean() - 1.0) < 0.05 and 0.03 < g.std() < 0.2


def test_random_model_rejects_bad_shapes():
    with pytest.raises(ModelError, match="n_heads"):
        random_model("llama", dim=50, n_heads=4)
    with pytest.raises(ModelError, match="n_kv_heads"):
        random_model("llama", dim=48, n_heads=4, n_kv_heads=3)


# ------------------------------------------------------------------ KV cache
@pytest.mark.parametrize("make", [_llama, _gpt2], ids=["llama", "gpt2"])
def test_decode_with_cache_equals_prefill(make):
    fm = FloatModel(make())
    full = fm.prefill(TOKS)  # (T, vocab)
    assert full.shape == (len(TOKS), 96)
    fm.reset()
    steps = np.stack([fm.decode(t) for t in TOKS])
    np.testing.assert_allclose(steps, full, rtol=0, atol=1e-5)
    fm.reset()  # chunked prefill, then decode, continues the same context
    mixed = np.concatenate([fm.prefill(TOKS[:7]), fm.prefill(TOKS[7:20]), [fm.decode(t) for t in TOKS[20:]]])
    np.testing.assert_allclose(mixed, full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("make", [_llama, _gpt2], ids=["llama", "gpt2"])
def test_causal_no_peeking(make):
    """Logits at position t do not depend on tokens after t."""
    fm = FloatModel(make())
    a = fm.prefill(TOKS)
    fm.reset()
    other = TOKS.copy()
    other[10:] = (other[10:] + 1) % 96
    b = fm.prefill(other)
    np.testing.assert_allclose(a[:10], b[:10], rtol=0, atol=1e-12)
    assert np.abs(a[10:] - b[10:]).max() > 1e-3


# ------------------------------------------------------------------ GQA, tying, RoPE base
def test_gqa_equals_explicit_repeat_of_kv_heads():
    m = _llama(n_heads=6, n_kv_heads=2, dim=72)  # group of 3, head_dim 12
    c = m.config
    hd, g = c.head_dim, c.group
    w = dict(m.weights)
    for i in range(c.n_layers):
        for n in ("attn_k", "attn_v"):
            heads = w[f"blk.{i}.{n}"].reshape(c.n_kv_heads, hd, c.dim)
            w[f"blk.{i}.{n}"] = np.repeat(heads, g, axis=0).reshape(c.n_heads * hd, c.dim)  # kv head h // g
    mha = Model(dataclasses.replace(c, n_kv_heads=c.n_heads), w)
    np.testing.assert_allclose(FloatModel(m).prefill(TOKS), FloatModel(mha).prefill(TOKS), rtol=0, atol=1e-10)


def test_tied_output_uses_token_embedding():
    tied = _llama(tied=True)
    w = dict(tied.weights, output=tied.weights["token_embd"].copy())
    untied = Model(dataclasses.replace(tied.config, tied_output=False), w)
    np.testing.assert_allclose(FloatModel(tied).prefill(TOKS), FloatModel(untied).prefill(TOKS), rtol=0, atol=1e-12)
    w2 = dict(w, output=np.flip(w["output"], axis=0).copy())
    other = Model(dataclasses.replace(tied.config, tied_output=False), w2)
    assert np.abs(FloatModel(other).prefill(TOKS) - FloatModel(tied).prefill(TOKS)).max() > 0.1


def test_rope_base_matters_except_at_position_zero():
    a = FloatModel(_llama()).prefill(TOKS)
    m = _llama()
    b = FloatModel(Model(dataclasses.replace(m.config, rope_base=500000.0), m.weights)).prefill(TOKS)
    np.testing.assert_allclose(a[0], b[0], rtol=0, atol=1e-12)  # angle 0: no rotation whatever the base
    assert np.abs(a[1:] - b[1:]).max() > 1e-2


def test_float32_close_to_float64():
    m = _llama()
    np.testing.assert_allclose(FloatModel(m, np.float32).prefill(TOKS), FloatModel(m).prefill(TOKS),
                               rtol=0, atol=1e-4)


def test_bad_input_is_rejected_with_the_value():
    fm = FloatModel(_llama(max_seq=16))
    with pytest.raises(ValueError, match="token id 96"):
        fm.prefill([1, 96])
    with pytest.raises(ValueError, match="empty"):
        fm.prefill([])
    fm.prefill(TOKS[:10])
    with pytest.raises(ValueError, match="max_seq=16"):
        fm.prefill(TOKS[:7])


# ------------------------------------------------------------------ independent implementations
def _naive_llama(m: Model, toks) -> np.ndarray:
    """Token by token, head by head, RoPE as complex multiplication (as Meta's llama code does)."""
    c, w = m.config, {k: v.astype(np.float64) for k, v in m.weights.items()}
    hd = c.head_dim
    ks: list[list[np.ndarray]] = [[] for _ in range(c.n_layers)]
    vs: list[list[np.ndarray]] = [[] for _ in range(c.n_layers)]
    freqs = 1.0 / c.rope_base ** (np.arange(0, hd, 2) / hd)
    out = []

    def norm(x, g):
        return g * x / np.sqrt((x ** 2).mean() + c.norm_eps)

    def rot(vec, pos):
        z = (vec[0::2] + 1j * vec[1::2]) * np.exp(1j * pos * freqs)
        return np.stack([z.real, z.imag], axis=-1).reshape(-1)

    for pos, t in enumerate(toks):
        x = w["token_embd"][t].copy()
        for i in range(c.n_layers):
            p = f"blk.{i}."
            h = norm(x, w[p + "attn_norm"])
            q, k, v = w[p + "attn_q"] @ h, w[p + "attn_k"] @ h, w[p + "attn_v"] @ h
            ks[i].append(np.concatenate([rot(k[j * hd:(j + 1) * hd], pos) for j in range(c.n_kv_heads)]))
            vs[i].append(v)
            heads = []
            for hh in range(c.n_heads):
                kv = hh // c.group
                qh = rot(q[hh * hd:(hh + 1) * hd], pos)
                sc = np.array([qh @ kk[kv * hd:(kv + 1) * hd] for kk in ks[i]]) / np.sqrt(hd)
                pr = np.exp(sc - sc.max())
                pr /= pr.sum()
                heads.append(sum(pp * vv[kv * hd:(kv + 1) * hd] for pp, vv in zip(pr, vs[i], strict=True)))
            x = x + w[p + "attn_output"] @ np.concatenate(heads)
            h = norm(x, w[p + "ffn_norm"])
            gate = w[p + "ffn_gate"] @ h
            x = x + w[p + "ffn_down"] @ (gate / (1 + np.exp(-gate)) * (w[p + "ffn_up"] @ h))
        out.append(m.output_weight().astype(np.float64) @ norm(x, w["output_norm"]))
    return np.stack(out)


@pytest.mark.parametrize("tied", [False, True])
def test_llama_matches_independent_loop_implementation(tied):
    m = _llama(tied=tied, n_heads=8, n_kv_heads=2, dim=96, rope_base=1000.0)  # head_dim 12
    np.testing.assert_allclose(FloatModel(m).prefill(TOKS[:12]), _naive_llama(m, TOKS[:12]), rtol=0, atol=1e-9)


def test_llama_matches_torch():
    torch = pytest.importorskip("torch", reason="torch is not installed (optional: pip install -e .[gpu])")
    F = torch.nn.functional
    m = _llama(n_heads=8, n_kv_heads=2, dim=96)
    c = m.config
    w = {k: torch.tensor(v, dtype=torch.float64) for k, v in m.weights.items()}
    toks = torch.tensor(TOKS[:16])
    T, hd = len(toks), c.head_dim
    freqs = torch.polar(torch.ones(T, hd // 2, dtype=torch.float64),
                        torch.outer(torch.arange(T, dtype=torch.float64),
                                    1.0 / c.rope_base ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)))

    def rope(x):  # (T, heads, hd) through complex pairs, as Meta's apply_rotary_emb
        z = torch.view_as_complex(x.reshape(T, x.shape[1], hd // 2, 2).contiguous())
        return torch.view_as_real(z * freqs[:, None, :]).reshape(x.shape)

    def rms(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c.norm_eps) * g

    x = w["token_embd"][toks]
    for i in range(c.n_layers):
        p = f"blk.{i}."
        h = rms(x, w[p + "attn_norm"])
        q = rope((h @ w[p + "attn_q"].T).view(T, c.n_heads, hd)).transpose(0, 1)
        k = rope((h @ w[p + "attn_k"].T).view(T, c.n_kv_heads, hd)).repeat_interleave(c.group, 1).transpose(0, 1)
        v = (h @ w[p + "attn_v"].T).view(T, c.n_kv_heads, hd).repeat_interleave(c.group, 1).transpose(0, 1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(0, 1).reshape(T, -1)
        x = x + o @ w[p + "attn_output"].T
        h = rms(x, w[p + "ffn_norm"])
        x = x + (F.silu(h @ w[p + "ffn_gate"].T) * (h @ w[p + "ffn_up"].T)) @ w[p + "ffn_down"].T
    ref = (rms(x, w["output_norm"]) @ w["output"].T).numpy()
    np.testing.assert_allclose(FloatModel(m).prefill(TOKS[:16]), ref, rtol=0, atol=1e-9)


def test_gpt2_matches_independent_loop_implementation():
    m = _gpt2(tied=True)
    c, w = m.config, {k: v.astype(np.float64) for k, v in m.weights.items()}
    hd = c.head_dim
    T = 10

    def ln(x, n):
        mu, var = x.mean(), x.var()
        return (x - mu) / np.sqrt(var + c.norm_eps) * w[n] + w[n + "_b"]

    def lin(x, n):
        return w[n] @ x + w[n + "_b"]

    cache: list[list[tuple]] = [[] for _ in range(c.n_layers)]
    ref = []
    for pos, t in enumerate(TOKS[:T]):
        x = w["token_embd"][t] + w["position_embd"][pos]
        for i in range(c.n_layers):
            p = f"blk.{i}."
            h = ln(x, p + "attn_norm")
            q, k, v = lin(h, p + "attn_q"), lin(h, p + "attn_k"), lin(h, p + "attn_v")
            cache[i].append((k, v))
            o = []
            for hh in range(c.n_heads):
                s = slice(hh * hd, (hh + 1) * hd)
                sc = np.array([q[s] @ kk[s] for kk, _ in cache[i]]) / np.sqrt(hd)
                pr = np.exp(sc - sc.max()) / np.exp(sc - sc.max()).sum()
                o.append(sum(pp * vv[s] for pp, (_, vv) in zip(pr, cache[i], strict=True)))
            x = x + lin(np.concatenate(o), p + "attn_output")
            u = lin(ln(x, p + "ffn_norm"), p + "ffn_up")
            x = x + lin(0.5 * u * (1 + np.tanh(0.7978845608028654 * (u + 0.044715 * u ** 3))), p + "ffn_down")
        ref.append(w["token_embd"] @ ln(x, "output_norm"))
    np.testing.assert_allclose(FloatModel(m).prefill(TOKS[:T]), np.stack(ref), rtol=0, atol=1e-9)


def test_bad_tokens_are_refused_by_both_references():
    from systolica.reference_quant import QuantRunner, quantize_model

    m = _llama(max_seq=8)
    for ref in (FloatModel(m), QuantRunner(quantize_model(m), page=4)):
        with pytest.raises(ValueError, match="at least one token"):
            ref.prefill([])
        with pytest.raises(ValueError, match=r"token id 96 is outside the vocabulary 0\.\.95"):
            ref.prefill([1, 96])
        ref.prefill([1, 2, 3])
        with pytest.raises(ValueError, match="context full: 3 cached \\+ 6 new tokens exceed"):
            ref.prefill([1] * 6)
