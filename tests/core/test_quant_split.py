"""QUANT split: ~15-bit activations as two int8 rows (the int8 part and its residual)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from systolica import numerics as nx
from systolica.config import preset
from systolica.isa import Buf, encode, make
from systolica.sim.golden import GoldenSim


@settings(max_examples=200, deadline=None)
@given(arrays(np.int32, st.tuples(st.integers(1, 6), st.integers(1, 40)),
              elements=st.integers(-(2**31) + 1, 2**31 - 1)))
def test_split_reconstructs_to_half_an_lsb_of_the_residual_scale(x):
    q, e = nx.quant_rows_split(x)
    m = x.shape[0]
    hi, lo = q[:m], q[m:]
    np.testing.assert_array_equal(hi, nx.quant_rows(x)[0])  # the first block is plain QUANT
    assert q.min() >= -127
    rec = nx.dequant_rows(hi, e[:m]).astype(np.int64) + nx.dequant_rows(lo, e[m:]).astype(np.int64)
    # the residual is quantized to half an lsb of 2**e_lo; below one fx lsb, rounding to fx adds one more
    bound = np.maximum(2.0 ** (e[m:].astype(np.float64) + nx.FX_FRAC - 1), 0) + 1
    assert np.all(np.abs(rec - x.astype(np.int64)) <= bound[:, None])


def test_split_is_about_128_times_finer_than_plain_quant():
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((8, 576)) * 2**17).astype(np.int32)
    x[:, 7] *= 60  # an outlier channel, as real checkpoints have
    q1, e1 = nx.quant_rows(x)
    q2, e2 = nx.quant_rows_split(x)
    err1 = np.abs(nx.dequant_rows(q1, e1).astype(np.int64) - x).mean()
    rec = nx.dequant_rows(q2[:8], e2[:8]).astype(np.int64) + nx.dequant_rows(q2[8:], e2[8:])
    err2 = np.abs(rec - x).mean()
    assert err2 * 64 < err1


def test_golden_quant_split_writes_both_blocks():
    cfg = preset("tiny")
    c = cfg.cols
    sim = GoldenSim(cfg, dram=1 << 16)
    rng = np.random.default_rng(2)
    x = rng.integers(-(2**24), 2**24, (3, 2 * c)).astype(np.int32)
    sim.window[0:x.nbytes] = x.view(np.uint8).ravel()
    sim.run([encode(i) for i in [
        make("LOAD", buf=Buf.VBUF, sram=0, dram=0, rows=3, lines=2, stride=8 * c, push_next=True),
        make("QUANT", dst=10, src=0, exps=100, rows=3, lines=2, split=1, pop_prev=True),
        make("FINISH"),
    ]])
    q, e = nx.quant_rows_split(x)
    np.testing.assert_array_equal(sim.spad[10:10 + 12].reshape(6, 2 * c), q)
    np.testing.assert_array_equal(sim.spad[100:106, 0], e)
    assert (sim.spad[100:106, 1:] == 0).all()
    assert encode(make("QUANT", rows=1, lines=1, split=1)) != encode(make("QUANT", rows=1, lines=1))


def test_golden_quant_split_range_check_counts_both_blocks():
    import pytest

    from systolica.sim.faults import SramRangeError

    cfg = preset("tiny")
    sim = GoldenSim(cfg, dram=1 << 16)
    last = cfg.spad_lines - 4  # room for one block of 4 lines, not two
    with pytest.raises(SramRangeError):
        sim.run([encode(make("QUANT", dst=last, src=0, exps=0, rows=4, lines=1, split=1)), encode(make("FINISH"))])
    sim.run([encode(make("QUANT", dst=last, src=0, exps=0, rows=4, lines=1, split=0)), encode(make("FINISH"))])


def test_split_activations_in_the_integer_reference():
    from systolica.quant_model import quantize_model
    from systolica.reference_float import FloatModel
    from systolica.reference_quant import QuantRunner
    from systolica.testmodels import random_model

    model = random_model("llama", dim=48, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=72, vocab=200, seed=3,
                         max_seq=64)
    for name in ("blk.0.attn_norm", "blk.1.ffn_norm"):  # outlier channels, as trained checkpoints have
        model.weights[name][[5, 17]] *= 25.0
    toks = [3, 17, 99, 150, 42, 7, 61, 88, 120, 5, 33, 71]
    ref = FloatModel(model).prefill(toks)
    err = {}
    for split in (False, True):
        qm = quantize_model(model, max_seq=64, act_split=split)
        pre = QuantRunner(qm, page=4).prefill(toks)
        step = QuantRunner(qm, page=4)
        dec = np.stack([step.decode(t) for t in toks])
        np.testing.assert_array_equal(pre, dec)  # row-wise, split or not: prefill == decode bit for bit
        err[split] = np.abs(QuantRunner.logits_float(pre) - ref).mean()
    assert err[True] * 2 < err[False], err
