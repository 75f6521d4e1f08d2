"""Layer (a) of the quantized model: every weight converted once to the accelerator's formats.

:func:`quantize_model` turns a float :class:`~systolica.model.Model` into a
:class:`QuantModel`; the integer reference (:mod:`systolica.reference_quant`)
runs it, and the compiler lays the same arrays out in DRAM.  Nothing here is
recomputed per token.

Decisions (the compiler must make the same ones to be bit-exact):

- Matrices: ``numerics.quant_weight`` -> int8 ``q [out, in]``, int32 per-row
  ``mult`` and one shift ``S`` per tensor, ``w ~ q * mult * 2**-S``.
- REQUANT shift: a GEMM of quantized activations ``aq * 2**ae`` with such a
  matrix gives ``acc * mult * 2**(ae - S)``; in fx (``FX_FRAC`` fraction bits)
  that is ``rshift_round(acc * mult, S - FX_FRAC - ae)``, so the REQUANT
  ``shift`` field is ``S - FX_FRAC`` (:attr:`QuantMatrix.requant_shift`) and the
  row exponent is subtracted by the hardware.  The field is 8 bits: a tensor
  whose ``S - FX_FRAC`` falls outside 0..255 is refused with :class:`QuantError`.
- Logits: the output projection is one more matrix, ``"output"``, requantized
  the same way to fx logits (int32, saturating; fx holds +-32768, far above any
  real logit).  A tied model quantizes ``token_embd`` a second time as this int8
  matrix; the embedding look-up keeps its own fx copy.
- 1/sqrt(head_dim): folded into ``attn_q`` (and GPT-2's ``attn_q_b``) before
  quantization, so ATTN computes plain ``q . k``.  RoPE is linear, so the order
  of scaling and rotation does not matter.
- GPT-2's fused ``c_attn``: front ends split it into ``attn_q/k/v``; each is
  quantized on its own (its own ``S``).  GEMM is exact, so the compiler may still
  issue one GEMM over the concatenated rows, followed by three REQUANTs over the
  three column ranges, each with its tensor's shift: the integers are the same.
- ``weights="int4"``: matrices as :class:`~systolica.quant_int4.Q4Matrix` (GGUF Q4 codes kept, float ones
  quantized to Q4_1 groups unless too lossy, the LM head int8; :func:`_q4_matrix`); their REQUANT ``mult`` are
  powers of two and the GEMM is GEMM_STREAM's int4 format (``numerics_int4.stream_acc``).
  ``weights="auto"``: the checkpoint's own Q4_0 / Q4_1 matrices keep their codes (4-bit), every other one int8
  (:func:`wants_q4`).
- Vectors (norm gains and betas, biases, embeddings, learned positions):
  ``numerics.to_fx`` int32.  RoPE: ``numerics.rope_table(arange(max_seq), hd, base)``.
- ``eps_q32 = round(norm_eps * 2**32)``, a 24-bit field: ``norm_eps`` must lie in
  ``(0, 2**-8)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from systolica import numerics as nx
from systolica.isa import WFmt
from systolica.model import Model, ModelConfig
from systolica.numerics_int4 import GROUP
from systolica.quant_int4 import Q4Matrix, Q4QuantError, q4_from_float, to_q4_matrix

__all__ = ["QuantError", "QuantMatrix", "QuantModel", "quantize_model", "REQUANT_SHIFT_MAX", "EPS_FIELD_MAX",
           "WEIGHT_FORMATS", "INT4_MAX_ERROR", "INT8_MATRICES", "checkpoint_q4", "wants_q4"]

REQUANT_SHIFT_MAX = 255  # REQUANT.shift is 8 bits (systolica.isa)
EPS_FIELD_MAX = (1 << 24) - 1  # RMSNORM/LAYERNORM.eps is 24 bits
WEIGHT_FORMATS = ("int8", "int4", "auto")
#: with weights="int4", a float (F16/F32/Q8_0) matrix whose 4-bit relative RMS error exceeds this stays int8
#: (4-bit groups of Gaussian-like weights measure ~0.08-0.09; an outlier-heavy tensor more)
INT4_MAX_ERROR = 0.10
#: matrices kept int8 under weights="int4" unless the checkpoint itself holds them as 4-bit codes: the LM head,
#: whose error goes straight into the logits (SmolLM2's tied Q8_0 embedding; see docs/quantization.md)
INT8_MATRICES = ("output",)


class QuantError(ValueError):
    """A model that cannot be represented in the accelerator's formats, naming the tensor and the value."""


@dataclass(frozen=True)
class QuantMatrix:
    """An int8 matrix with per-output-channel multipliers: ``w ~ q * mult[:, None] * 2**-shift``."""

    name: str
    q: np.ndarray  # int8 [out, in]
    mult: np.ndarray  # int32 [out]
    shift: int  # S of the tensor

    @property
    def requant_shift(self) -> int:
        """The REQUANT instruction's ``shift`` field: ``S - FX_FRAC``."""
        return self.shift - nx.FX_FRAC

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.q.shape)

    wfmt = WFmt.INT8

    def describe(self) -> str:
        return f"int8, S={self.shift}"

    def dequant(self) -> np.ndarray:
        """The float matrix this one stands for (float64)."""
        return self.q.astype(np.float64) * self.mult.astype(np.float64)[:, None] * 2.0 ** -self.shift


@dataclass
class QuantModel:
    """All weights of a model in the accelerator's formats.

    Attributes
    ----------
    config : ModelConfig
        The float model's hyper-parameters.
    mats : dict[str, QuantMatrix]
        GGUF names (``blk.{i}.attn_q`` is pre-scaled by 1/sqrt(head_dim)); ``"output"`` always present.
    fx : dict[str, numpy.ndarray]
        int32 fixed-point vectors and tables: norm gains/betas, biases, ``token_embd``, ``position_embd``.
    rope : numpy.ndarray or None
        ``(max_seq, head_dim)`` RoPE table (llama), row = position.
    eps_q32 : int
        Norm epsilon in units of 2**-32.
    act_split : bool
        Quantize every linear layer's input with QUANT ``split=1`` (its int8 part and its int8 residual,
        two GEMM rows per token, requantized and added): ~15-bit activations.  Trained checkpoints have
        outlier channels that one power-of-two int8 scale per row cannot serve (SmolLM2-135M: top-1
        agreement 0.79 -> see docs/quantization.md); decode is memory-bound, so the second row is free there.
    errors : dict[str, float]
        Relative RMS error ``||deq - w|| / ||w||`` of every converted tensor.
    weights : str
        ``"int8"`` or ``"int4"``: the format asked for (``mats`` says what each matrix got).
    notes : dict[str, str]
        Why a matrix got its format under ``weights="int4"`` (int8 fallbacks name their reason).
    """

    config: ModelConfig
    mats: dict[str, QuantMatrix]
    fx: dict[str, np.ndarray]
    rope: np.ndarray | None
    eps_q32: int
    errors: dict[str, float] = field(default_factory=dict)
    act_split: bool = False  # linear inputs as QUANT split=1: int8 part + int8 residual (~15-bit activations)
    weights: str = "int8"
    notes: dict[str, str] = field(default_factory=dict)

    def format_of(self, name: str) -> str:
        """What tensor ``name`` became: ``int8, S=..``, ``int4 Q4_1 (codes kept), gshift=..`` or ``fx int32``,
        with the reason of an int8 fallback."""
        if name not in self.mats:
            return "fx int32"
        note = self.notes.get(name)
        return self.mats[name].describe() + (f" ({note})" if note else "")

    def report(self) -> str:
        """A table of the per-tensor relative RMS quantization errors (measured against the float weights), worst
        first, with each tensor's format."""
        rows = sorted(self.errors.items(), key=lambda kv: -kv[1])
        width = max(len(k) for k in self.errors)
        lines = [f"{'tensor':<{width}}  rel. RMS error  format"]
        for k, e in rows:
            lines.append(f"{k:<{width}}  {e:14.3e}  {self.format_of(k)}")
        return "\n".join(lines)


def _rel_rms(approx: np.ndarray, exact: np.ndarray) -> float:
    exact = np.asarray(exact, dtype=np.float64)
    denom = float(np.sqrt(np.mean(exact * exact)))
    err = float(np.sqrt(np.mean((np.asarray(approx, dtype=np.float64) - exact) ** 2)))
    return err / denom if denom > 0 else err


def _quant_matrix(name: str, w: np.ndarray) -> QuantMatrix:
    try:
        q, mult, shift = nx.quant_weight(np.asarray(w, dtype=np.float64))
    except ValueError as e:
        raise QuantError(f"tensor {name!r}: {e}") from None
    m = QuantMatrix(name, np.asarray(q, dtype=np.int8), np.asarray(mult, dtype=np.int32), int(shift))
    if not 0 <= m.requant_shift <= REQUANT_SHIFT_MAX:
        raise QuantError(f"tensor {name!r}: quant_weight chose S={m.shift}, so the REQUANT shift S-{nx.FX_FRAC}="
                         f"{m.requant_shift} is outside 0..{REQUANT_SHIFT_MAX} (max |w| = {np.abs(w).max():.3g}); "
                         "rescale the tensor")
    return m


def eps_to_q32(eps: float) -> int:
    """``round(eps * 2**32)``, checked against the 24-bit ``eps`` field of RMSNORM/LAYERNORM."""
    e = int(round(float(eps) * 2.0 ** 32))
    if not 0 < e <= EPS_FIELD_MAX:
        raise QuantError(f"norm_eps={eps} is {e} in units of 2^-32; the eps field holds 1..{EPS_FIELD_MAX} "
                         f"(2.3e-10 .. 3.9e-3)")
    return e


def checkpoint_q4(name: str, model: Model):
    """The GGUF Q4 blocks the checkpoint holds for matrix ``name`` (the tied embedding for ``output``), or None."""
    return model.q4.get("token_embd" if name == "output" and model.config.tied_output else name)


def wants_q4(name: str, model: Model, weights: str) -> bool:
    """Whether matrix ``name`` is tried as 4-bit under ``weights``: every one under ``"int4"``, the checkpoint's
    own 4-bit ones under ``"auto"``, none under ``"int8"``."""
    return weights == "int4" or (weights == "auto" and checkpoint_q4(name, model) is not None)


def _q4_matrix(name: str, model: Model, w: np.ndarray, scale: float, notes: dict) -> Q4Matrix | None:
    """The 4-bit form of matrix ``name`` (``w``: its float weights, ``scale`` folded in), or None with the reason
    in ``notes`` when it stays int8.  The checkpoint's own Q4 codes are kept; a float tensor is quantized."""
    blocks = checkpoint_q4(name, model)
    try:
        if blocks is not None:
            return to_q4_matrix(name, blocks, "codes kept", scale)
        if name in INT8_MATRICES:
            notes[name] = "the LM head stays int8 unless the checkpoint holds it as 4-bit codes"
            return None
        if w.shape[1] % GROUP:
            notes[name] = f"K={w.shape[1]} is not whole groups of {GROUP}"
            return None
        m = to_q4_matrix(name, q4_from_float(w), "quantized")
    except Q4QuantError as e:
        notes[name] = str(e)
        return None
    err = _rel_rms(m.dequant(), w)
    if err > INT4_MAX_ERROR:
        notes[name] = f"int4 error {err:.3g} > {INT4_MAX_ERROR}"
        return None
    return m


def quantize_model(model: Model, max_seq: int | None = None, act_split: bool = False,
                   weights: str = "int8") -> QuantModel:
    """Convert every weight of ``model`` once to the accelerator's formats (see the module docstring).

    Parameters
    ----------
    model : Model
        A checked llama or GPT-2 float model.
    max_seq : int, optional
        Positions covered by the RoPE table; default ``model.config.max_seq``.
    act_split : bool
        See :attr:`QuantModel.act_split`.
    weights : {"int8", "int4", "auto"}
        ``"int4"``: GGUF Q4_0 / Q4_1 matrices keep their codes (:mod:`systolica.quant_int4`); float ones are
        quantized to 4-bit groups unless their error passes :data:`INT4_MAX_ERROR`; the LM head
        (:data:`INT8_MATRICES`) stays int8 unless the checkpoint holds it as 4-bit codes.  ``"auto"``: only the
        checkpoint's 4-bit matrices are 4-bit (the rest int8).

    Raises
    ------
    QuantError
        A tensor's shift or the norm epsilon does not fit its instruction field.
    """
    model.check()
    if weights not in WEIGHT_FORMATS:
        raise QuantError(f"weights={weights!r}: choose one of {', '.join(WEIGHT_FORMATS)}")
    c = model.config
    max_seq = c.max_seq if max_seq is None else int(max_seq)
    if max_seq <= 0:
        raise QuantError(f"max_seq={max_seq} must be positive")
    qscale = 1.0 / np.sqrt(c.head_dim)  # folded into Wq (and bq): ATTN computes plain q . k
    mats: dict[str, QuantMatrix] = {}
    fx: dict[str, np.ndarray] = {}
    errors: dict[str, float] = {}
    notes: dict[str, str] = {}

    def add_mat(name: str, w: np.ndarray, scale: float = 1.0) -> None:
        w = np.asarray(w, np.float64) * scale if scale != 1.0 else w
        m4 = _q4_matrix(name, model, np.asarray(w, np.float64), scale, notes) if wants_q4(name, model, weights) \
            else None
        mats[name] = m4 if m4 is not None else _quant_matrix(name, w)
        errors[name] = _rel_rms(mats[name].dequant(), w)

    def add_fx(name: str, v: np.ndarray) -> None:
        fx[name] = np.asarray(nx.to_fx(np.asarray(v, dtype=np.float64)), dtype=np.int32)
        errors[name] = _rel_rms(nx.from_fx(fx[name]), v)

    gpt2 = c.arch == "gpt2"
    add_fx("token_embd", model.w("token_embd"))
    if gpt2:
        add_fx("position_embd", model.w("position_embd"))
    for i in range(c.n_layers):
        p = f"blk.{i}."
        add_mat(p + "attn_q", model.w(p + "attn_q"), qscale)
        for n in ("attn_k", "attn_v", "attn_output", "ffn_up", "ffn_down") + (() if gpt2 else ("ffn_gate",)):
            add_mat(p + n, model.w(p + n))
        for n in ("attn_norm", "ffn_norm"):
            add_fx(p + n, model.w(p + n))
        if gpt2:
            add_fx(p + "attn_q_b", model.w(p + "attn_q_b").astype(np.float64) * qscale)
            for n in ("attn_norm_b", "ffn_norm_b", "attn_k_b", "attn_v_b", "attn_output_b", "ffn_up_b",
                      "ffn_down_b"):
                add_fx(p + n, model.w(p + n))
    add_fx("output_norm", model.w("output_norm"))
    if gpt2:
        add_fx("output_norm_b", model.w("output_norm_b"))
    add_mat("output", model.output_weight())
    rope = None
    if not gpt2:
        rope = np.asarray(nx.rope_table(np.arange(max_seq), c.head_dim, c.rope_base), dtype=np.int32)
    return QuantModel(c, mats, fx, rope, eps_to_q32(c.norm_eps), errors, act_split=bool(act_split), weights=weights,
                      notes=notes)
