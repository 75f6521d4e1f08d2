"""The instruction programs of a compile without the weights: for timing them (``systolica dse``).

:func:`~systolica.compiler.compile.compile_model` spends most of its time converting weights (quantization,
~60 %) and packing them into the DRAM image; the performance model needs neither.  The programs depend on the
weights in one way only: a matrix's REQUANT ``shift`` field is ``S - FX_FRAC``, with one ``S`` per tensor chosen
from its largest channel scale (:func:`systolica.numerics.quant_weight`), i.e. from its largest ``|w|``.  Every
other field follows from the model's hyper-parameters and the DRAM layout, which depends on shapes only.

So :class:`ModelShape` keeps a model's configuration and each matrix's ``S`` (one reduction per tensor,
:meth:`ModelShape.of`), and :func:`compile_programs` runs the compiler's own passes after quantization
(``compile._compile``) on a stand-in :class:`~systolica.quant_model.QuantModel` whose arrays are zero-strided
zeros of the right shapes and whose shifts are the real ones, laying the DRAM image out without filling it
(``build_image(fill=False)``).  Its programs are the words of a full compile, bit for bit
(``tests/compiler/test_programs_only.py``: a small llama and GPT-2 model and SmolLM2's first block on several
configurations); its artifact has no DRAM image (``manifest["programs_only"]``) and is for timing only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from systolica import numerics as nx
from systolica.artifact import Artifact
from systolica.compiler.compile import _check_args, _compile, _graph
from systolica.compiler.kv_page import page_choice
from systolica.compiler.quantize_pass import check_quantized
from systolica.config import AccelConfig
from systolica.isa import WFmt
from systolica.model import Model, ModelConfig
from systolica.quant_int4 import Q4Matrix
from systolica.quant_model import (
    WEIGHT_FORMATS,
    QuantError,
    QuantMatrix,
    QuantModel,
    _q4_matrix,
    _quant_matrix,
    eps_to_q32,
    wants_q4,
)

__all__ = ["ModelShape", "compile_programs", "placeholder_quant"]


def _matrices(c: ModelConfig) -> list[str]:
    """The names of :attr:`QuantModel.mats` for ``c``, as :func:`~systolica.quant_model.quantize_model` makes them."""
    names = []
    for i in range(c.n_layers):
        p = f"blk.{i}."
        names += [p + n for n in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_up", "ffn_down")
                  + (() if c.arch == "gpt2" else ("ffn_gate",))]
    return names + ["output"]


@dataclass(frozen=True)
class ModelShape:
    """What the programs of a model depend on: its hyper-parameters and each matrix's tensor shift ``S``.

    Attributes
    ----------
    config : ModelConfig
        The model's hyper-parameters (``n_layers`` included).
    shifts : dict[str, int]
        ``QuantMatrix.shift`` of every matrix of :attr:`QuantModel.mats` (``"output"`` included).
    """

    config: ModelConfig
    shifts: dict[str, int]
    #: matrices of a ``weights="int4"`` shape that became 4-bit: name -> ``(wfmt, gshift)`` (their shift in
    #: ``shifts`` is the Q4 matrix's); the others are int8
    formats: dict[str, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, model: Model, weights: str = "int8") -> ModelShape:
        """The shape of ``model``: its config and each matrix's ``S`` from the largest ``|w|`` of the tensor
        (``quant_weight`` of that one value: the same ``S``, and the same :class:`QuantError` when it does not fit
        the REQUANT field).

        With ``weights="int4"`` each matrix is converted as ``quantize_model`` converts it (its 4-bit group scales
        decide the shift and the group shift: no shortcut there), and the 4-bit ones are listed in ``formats``.

        Raises
        ------
        ModelError, QuantError
            As :func:`~systolica.quant_model.quantize_model` would.
        """
        if weights not in WEIGHT_FORMATS:
            raise QuantError(f"weights={weights!r}: choose one of {', '.join(WEIGHT_FORMATS)}")
        model.check()
        c = model.config
        qscale = 1.0 / np.sqrt(c.head_dim)  # folded into Wq, as quantize_model does
        shifts, formats = {}, {}
        for name in _matrices(c):
            w = model.output_weight() if name == "output" else model.w(name)
            if wants_q4(name, model, weights):
                scale = qscale if name.endswith(".attn_q") else 1.0
                m4 = _q4_matrix(name, model, np.asarray(w, np.float64) * scale, scale, {})
                if m4 is not None:
                    shifts[name], formats[name] = m4.shift, (int(m4.wfmt), m4.gshift)
                    continue
            m = np.float64(max(float(w.max()), -float(w.min()))) if w.size else np.float64(0.0)
            if name.endswith(".attn_q"):
                m = m * qscale  # max |w * s| = max |w| * s, rounding included (s > 0: monotonic)
            shifts[name] = _quant_matrix(name, np.array([[m]])).shift
        return cls(c, shifts, formats)

    def truncated(self, n: int) -> ModelShape:
        """The shape of the model's first ``n`` blocks with its embedding, final norm and output."""
        import dataclasses

        c = dataclasses.replace(self.config, n_layers=n)
        keep = _matrices(c)
        return ModelShape(c, {k: self.shifts[k] for k in keep}, {k: v for k, v in self.formats.items() if k in keep})

    def to_json(self) -> dict:
        import dataclasses

        return {"config": dataclasses.asdict(self.config), "shifts": dict(self.shifts),
                "formats": {k: list(v) for k, v in self.formats.items()}}

    @classmethod
    def from_json(cls, d: dict) -> ModelShape:
        return cls(ModelConfig(**d["config"]), {k: int(v) for k, v in d["shifts"].items()},
                   {k: (int(v[0]), int(v[1])) for k, v in d.get("formats", {}).items()})


def _zeros(shape: tuple[int, ...], dtype) -> np.ndarray:
    return np.broadcast_to(np.zeros((), dtype), shape)  # read-only, no memory


def placeholder_quant(shape: ModelShape, max_seq: int, act_split: bool = False) -> QuantModel:
    """A :class:`QuantModel` with the names, shapes and shifts :func:`quantize_model` gives ``shape``'s model, and
    zeros (zero-strided, read-only) for every value: enough for layout and lowering, not for running.

    Raises
    ------
    QuantError
        The norm epsilon does not fit its field (as ``quantize_model``).
    """
    c = shape.config
    expected = Model(c, {}).expected_shapes()
    mats = {}
    for name in _matrices(c):
        N, K = expected["token_embd" if name == "output" and c.tied_output else name]
        if name in shape.formats:  # a 4-bit matrix: codes and scales of zeros, its real shifts
            wfmt, gshift = shape.formats[name]
            g = _zeros((N, K // 32), np.int64)
            mats[name] = Q4Matrix(name, _zeros((N, K), np.uint8), g, g if wfmt == WFmt.Q4_1 else None,
                                  _zeros((N,), np.int64), gshift, _zeros((N,), np.int32), int(shape.shifts[name]),
                                  "placeholder", 0.0)
            continue
        mats[name] = QuantMatrix(name, _zeros((N, K), np.int8), _zeros((N,), np.int32), int(shape.shifts[name]))
    fx = {k: _zeros(s, np.int32) for k, s in expected.items() if k not in mats}
    rope = None
    if c.arch != "gpt2":
        nx.rope_table(np.arange(0), c.head_dim, c.rope_base)  # its ValueError for an odd head_dim, as quantize_model
        rope = _zeros((max_seq, c.head_dim), np.int32)
    return QuantModel(c, mats, fx, rope, eps_to_q32(c.norm_eps), {}, act_split=bool(act_split))


def compile_programs(model: ModelShape | Model, cfg: AccelConfig, page: int | None = None, max_seq: int | None = None,
                     prefill_chunk: int = 16, progress: Callable[[str], None] | None = None,
                     act_split: bool = False, weights: str = "int8") -> Artifact:
    """The artifact of :func:`~systolica.compiler.compile.compile_model` less its DRAM image and tokenizer: the same
    programs (bit for bit), patch lists, regions and KV layout, for timing with the performance model.

    ``manifest["programs_only"]`` is True and the image is empty: it cannot run a model.  Arguments and errors as
    ``compile_model``'s (a weight's value never fails here beyond its shift: the shifts come from
    :meth:`ModelShape.of`).
    """
    t0 = time.perf_counter()
    say = progress or (lambda s: None)
    shape = model if isinstance(model, ModelShape) else ModelShape.of(model, weights)
    c = shape.config
    max_seq = _check_args(c, cfg, page, max_seq, prefill_chunk)
    say("graph")
    g = _graph(c, cfg, act_split)
    kv_page = page_choice(cfg, c, max_seq, page)
    qm = placeholder_quant(shape, max_seq, act_split)
    check_quantized(g, qm)
    art = _compile(g, qm, cfg, kv_page=kv_page, max_seq=max_seq, prefill_chunk=prefill_chunk, act_split=act_split,
                   say=say, t0=t0, tokenizer=None, metadata={}, quant_errors={}, fill=False)
    art.manifest["programs_only"] = True
    return art
