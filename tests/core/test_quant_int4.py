"""systolica/quant_int4.py: 4-bit matrices with integer scales and the REQUANT multipliers that give fx results."""

from __future__ import annotations

import numpy as np

from systolica import numerics as nx
from systolica.numerics_int4 import Q4Weights, stream_acc
from systolica.quant_int4 import MULT_LOG2_MAX, q4_from_float, to_q4_matrix


def _fx_linear(m, aq, ae):
    return nx.requant(stream_acc(aq, m.codes, m.D, m.Mn, m.gshift), m.mult, ae, m.requant_shift)


def test_float_weights_quantize_within_half_a_step():
    w = np.random.default_rng(0).standard_normal((8, 96)) * 0.05
    q = q4_from_float(w)
    assert q.codes.max() <= 15 and q.m is not None
    step = np.repeat(q.d, 32, axis=1)
    assert (np.abs(q.dequantize() - w) <= step / 2 + 1e-3 * np.abs(w).max()).all()  # (+ fp16 rounding of m, d)


def test_requant_of_the_int4_accumulator_is_the_fx_dot_product():
    """acc * mult >> (shift - e): the dot product with the dequantized weights, in fx, to the rounding of the
    activations' exponent and of gshift's groups."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 256)) * 0.02
    m = to_q4_matrix("t", q4_from_float(w), "quantized")
    assert m.gshift > 0 and (m.mult > 0).all() and m.mult.max() < 1 << 24
    x = nx.to_fx(rng.standard_normal((3, 256)))
    aq, ae = nx.quant_rows(x)
    got = nx.from_fx(_fx_linear(m, aq, ae))
    want = (aq.astype(np.float64) * np.exp2(ae.astype(np.float64))[:, None]) @ m.dequant().T
    assert np.abs(got - want).max() <= 2e-3 * np.abs(want).max()


def test_rows_of_tiny_scales_are_coarsened_so_every_multiplier_fits():
    rng = np.random.default_rng(2)
    codes = rng.integers(0, 16, (4, 64)).astype(np.uint8)
    d = np.full((4, 2), 1e-2)
    d[3] = 1e-2 * 2.0 ** -30  # 30 octaves below the others: its row shift would need a 2**30 multiplier
    m = to_q4_matrix("t", Q4Weights(codes, d, None), "codes kept")
    e = np.log2(m.mult.astype(np.float64))
    assert e.max() - e.min() <= MULT_LOG2_MAX and m.s.max() - m.s.min() == MULT_LOG2_MAX
    assert np.array_equal(m.D[:3], to_q4_matrix("u", Q4Weights(codes[:3], d[:3], None), "").D)  # others untouched
