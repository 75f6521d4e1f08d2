"""Quantization pass: weights to the accelerator's formats, exactly as the integer reference does it.

The compiler never quantizes on its own: it calls :func:`systolica.quant_model.quantize_model`,
the function the integer reference (:mod:`systolica.reference_quant`) runs on, so the DRAM image
holds the very integers the reference multiplies.  This pass adds the checks the lowering needs
(every matrix the graph names exists with the shape it expects) and the per-tensor error report.
"""

from __future__ import annotations

from dataclasses import dataclass

from systolica.compiler.ir import Graph, IRError, verify
from systolica.model import Model
from systolica.quant_model import QuantModel, quantize_model

__all__ = ["QuantReport", "quantize", "check_quantized", "error_table"]


@dataclass(frozen=True)
class QuantReport:
    """Per-tensor relative RMS error ``||deq - w|| / ||w||`` of the converted weights."""

    errors: dict[str, float]

    @property
    def worst(self) -> tuple[str, float]:
        return max(self.errors.items(), key=lambda kv: kv[1])

    @property
    def mean_matrix_error(self) -> float:
        vals = [v for k, v in self.errors.items() if not k.endswith(("_norm", "_b", "embd"))]
        return sum(vals) / max(1, len(vals))


def quantize(model: Model, graph: Graph, max_seq: int, weights: str = "int8") -> tuple[QuantModel, QuantReport]:
    """Quantize ``model`` for a context of ``max_seq`` positions (matrices as ``weights``: "int8" or "int4") and
    check it against ``graph``.

    Raises
    ------
    systolica.quant_model.QuantError
        A tensor whose scale does not fit the REQUANT shift field, or an epsilon out of range.
    IRError
        The graph names a weight the quantized model lacks, or shapes disagree.
    """
    # act_split only when asked: the keyword is newer than the rest of quantize_model's signature
    qm = quantize_model(model, max_seq=max_seq, **({"act_split": True} if graph.act_split else {}),
                        **({"weights": weights} if weights != "int8" else {}))
    check_quantized(graph, qm)
    return qm, QuantReport(dict(qm.errors))


def check_quantized(graph: Graph, qm: QuantModel) -> None:
    """Check a quantized model against ``graph``: every matrix, norm gain and bias it names, with its shape.

    Raises
    ------
    IRError
        The graph names a weight the quantized model lacks, shapes disagree, or act_split differs.
    """
    if bool(getattr(qm, "act_split", False)) != graph.act_split:
        raise IRError(f"the graph has act_split={graph.act_split}, the quantized model {getattr(qm, 'act_split', None)}")
    shapes = {k: tuple(m.shape) for k, m in qm.mats.items()}
    verify(graph, shapes)
    for n in graph.nodes:
        if n.op == "norm" and n.attrs["weight"] not in qm.fx:
            raise IRError(f"norm node names gain {n.attrs['weight']!r}, which the quantized model lacks")
        b = n.attrs.get("bias")
        if b and b not in qm.fx:
            raise IRError(f"linear node names bias {b!r}, which the quantized model lacks")


def error_table(report: QuantReport, top: int = 8) -> list[tuple[str, float]]:
    """The ``top`` worst tensors, worst first."""
    return sorted(report.errors.items(), key=lambda kv: -kv[1])[:top]
