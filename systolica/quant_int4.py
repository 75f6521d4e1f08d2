"""4-bit matrices of the quantized model: GGUF Q4 codes kept (or float weights quantized to 4-bit groups), their
scales as integers, and the REQUANT multipliers that turn an int4 GEMM_STREAM's accumulator into fx.

An int4 GEMM_STREAM leaves ``acc[n] = sum_g rshift_round(T[n, g], gshift)`` (:mod:`systolica.numerics_int4`),
worth ``acc * 2**(gshift - s[n])`` per unit of the activations.  REQUANT stays as it is: with one
``R = max(0, s_max - gshift - FX_FRAC)`` per tensor (the REQUANT ``shift`` field) and
``mult[n] = 2**(R + gshift + FX_FRAC - s[n])`` (a power of two below 2**24), ``rshift_round(acc * mult, R - e)``
is the fx result.  So ``mult`` spans at most 23 octaves: a row whose ``s[n]`` lies more than 23 above the
tensor's smallest is coarsened (its scales rounded to ``s_min + 23``; such a row's scales are 2**-23 of the
largest row's, so it adds almost nothing to any output).

The decisions the compiler and the integer reference share (:func:`q4_from_gguf`, :func:`q4_from_float`,
:func:`to_q4_matrix`) live here, so both hold the very same integers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from systolica import numerics as nx
from systolica.isa import WFmt
from systolica.numerics_int4 import GROUP, Q4Weights, choose_gshift, int_scales, stream_operands

__all__ = ["Q4Matrix", "to_q4_matrix", "q4_from_float", "MULT_LOG2_MAX", "Q4QuantError"]

MULT_LOG2_MAX = 23  # REQUANT multipliers stay below 2**24 (as numerics.quant_weight's)


class Q4QuantError(ValueError):
    """A 4-bit matrix whose scales the REQUANT fields cannot carry, naming the tensor."""


@dataclass(frozen=True)
class Q4Matrix:
    """A 4-bit matrix: ``w[n, k] ~ (D[n, g] * (q - 8) or D * q + Mn) * 2**-s[n]``, ``g = k // 32``."""

    name: str
    codes: np.ndarray  # uint8 (N, K), 0..15
    D: np.ndarray  # int64 (N, G), |D| < 2**15
    Mn: np.ndarray | None  # int64 (N, G) (Q4_1), or None (Q4_0)
    s: np.ndarray  # int64 (N,) per-row shift of the scales
    gshift: int  # GEMM_STREAM.gshift
    mult: np.ndarray  # int32 (N,) powers of two
    shift: int  # S of the tensor: the REQUANT field is S - FX_FRAC, as QuantMatrix
    source: str  # "codes kept" (a GGUF Q4 tensor) or "quantized" (from F16/F32/Q8_0)
    scale_err: float  # largest relative error of an integer scale (numerics_int4.int_scales)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.codes.shape)

    @property
    def wfmt(self) -> WFmt:
        return WFmt.Q4_0 if self.Mn is None else WFmt.Q4_1

    @property
    def requant_shift(self) -> int:
        return self.shift - nx.FX_FRAC

    def dequant(self) -> np.ndarray:
        """The float64 weights the integers stand for (the group rounding of ``gshift`` aside)."""
        n, k = self.codes.shape
        q = self.codes.astype(np.float64).reshape(n, -1, GROUP)
        unit = np.exp2(-self.s)[:, None]
        d = (self.D * unit)[:, :, None]
        w = d * (q - 8) if self.Mn is None else d * q + (self.Mn * unit)[:, :, None]
        return w.reshape(n, k)

    @cached_property
    def operands(self):
        """The weights as :func:`numerics_int4.stream_acc_prepared` takes them, converted once."""
        return stream_operands(self.codes, self.D, self.Mn)

    def describe(self) -> str:
        return f"int4 {self.wfmt.name} ({self.source}), gshift={self.gshift}"


def q4_from_float(w: np.ndarray) -> Q4Weights:
    """Float weights ``(N, K)`` as Q4_1 groups, as ggml's ``quantize_row_q4_1``: per 32 weights along K the fp16
    minimum ``m`` and step ``d = (max - min) / 15`` (both rounded to fp16), codes ``round((w - m) / d)`` in 0..15."""
    w = np.asarray(w, np.float64)
    n, k = w.shape
    if k % GROUP:
        raise ValueError(f"rows of {k} weights are not whole groups of {GROUP}")
    x = w.reshape(n, k // GROUP, GROUP)
    lo, hi = x.min(axis=2), x.max(axis=2)
    m16 = lo.astype(np.float16).astype(np.float64)
    d16 = ((hi - m16) / 15).astype(np.float16).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d16[:, :, None] > 0, np.rint((x - m16[:, :, None]) / d16[:, :, None]), 0)
    codes = np.clip(q, 0, 15).astype(np.uint8).reshape(n, k)
    return Q4Weights(codes, d16, m16)


def to_q4_matrix(name: str, w: Q4Weights, source: str, scale: float = 1.0) -> Q4Matrix:
    """``w``'s codes with integer scales (times ``scale``, e.g. 1/sqrt(head_dim) folded into ``attn_q``), the
    group shift and the REQUANT multipliers (module docstring).  Raises :class:`Q4QuantError` naming ``name``."""
    if scale != 1.0:
        w = Q4Weights(w.codes, w.d.astype(np.float64) * scale,
                      None if w.m is None else w.m.astype(np.float64) * scale)
    D, Mn, s, err = int_scales(w)
    lim = int(s.min()) + MULT_LOG2_MAX
    over = s > lim
    if over.any():  # coarsen the rows of the tiniest scales so that every multiplier fits 24 bits
        delta = (s - lim) * over
        D = nx.rshift_round(D, delta[:, None])
        Mn = None if Mn is None else nx.rshift_round(Mn, delta[:, None])
        s = s - delta
    try:
        gshift = choose_gshift(D, Mn)
    except ValueError as e:
        raise Q4QuantError(f"tensor {name!r}: {e}") from None
    R = max(0, int(s.max()) - gshift - nx.FX_FRAC)
    e = R + gshift + nx.FX_FRAC - s
    if e.min() < 0 or e.max() > MULT_LOG2_MAX or R > 255:
        raise Q4QuantError(f"tensor {name!r}: its group scales (row shifts {int(s.min())}..{int(s.max())}) need "
                           f"REQUANT multipliers 2**{int(e.min())}..2**{int(e.max())} and shift {R}; the fields hold "
                           f"2**0..2**{MULT_LOG2_MAX} and 0..255")
    mult = np.left_shift(np.int64(1), e).astype(np.int32)
    return Q4Matrix(name, w.codes, D, Mn, s, gshift, mult, R + nx.FX_FRAC, source, err)
