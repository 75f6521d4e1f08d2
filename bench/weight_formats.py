"""int8 against int4 weights on one model: decode weight bytes per token and teacher-forced agreement.

    python -m systolica.bench.weight_formats [--model default] [--config default]

Every figure says its source: weight bytes per decode token are counted from the compiled decode program
(``manifest["stats"]["decode"]``, what its GEMM_STREAMs and parameter LOADs read); agreement is measured,
the integer reference (:class:`~systolica.reference_quant.QuantRunner`, bit-exact with the golden simulator)
against the float reference (:class:`~systolica.reference_float.FloatModel`, float32), teacher-forced over
:data:`PASSAGE`: the fraction of positions whose top-1 token agrees, with plain and split activations.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

__all__ = ["PASSAGE", "Agreement", "agreement", "decode_weight_bytes", "main"]

#: a passage of plain prose and facts, 60+ tokens under SmolLM2's tokenizer (the e2e test checks the count)
PASSAGE = ("Once upon a time, in a small village by the sea, there lived an old fisherman named Tomas. Every "
           "morning he rowed his boat past the lighthouse to catch fish for the market. Water boils at one "
           "hundred degrees Celsius at sea level, and the Earth travels around the Sun once every year. Paris is "
           "the capital of France, and Berlin is the capital of Germany.")


@dataclass(frozen=True)
class Agreement:
    weights: str
    act_split: bool
    tokens: int
    top1: float  # measured: fraction of positions whose argmax equals the float reference's
    mean_abs_err: float  # measured: mean |logit - float logit|


def agreement(model, ids: list[int], weights: str, act_split: bool, float_logits=None) -> Agreement:
    """Teacher-forced top-1 agreement of the integer reference with the float reference over ``ids``."""
    from systolica.quant_model import quantize_model
    from systolica.reference_float import FloatModel
    from systolica.reference_quant import QuantRunner

    lf = FloatModel(model, np.float32).prefill(ids) if float_logits is None else float_logits
    qm = quantize_model(model, max_seq=max(64, len(ids)), act_split=act_split, weights=weights)
    lq = QuantRunner.logits_float(QuantRunner(qm, page=16).prefill(ids))
    return Agreement(weights, act_split, len(ids), float(np.mean(lf.argmax(1) == lq.argmax(1))),
                     float(np.abs(lq - lf).mean()))


def decode_weight_bytes(model, cfg, weights: str, act_split: bool = True) -> dict:
    """The compiled decode program's weight bytes a token: ``weight_bytes`` (all parameters), ``stream_bytes``
    and ``stream_bytes_by_format`` (GEMM_STREAM), counted from the program (no model or assumption)."""
    from systolica.compiler.compile import compile_model

    art = compile_model(model, cfg, page=16, max_seq=64, prefill_chunk=1, act_split=act_split, weights=weights)
    dec = art.manifest["stats"]["decode"]
    return {k: dec[k] for k in ("weight_bytes", "stream_bytes", "stream_bytes_by_format")}


def main(argv: list[str] | None = None) -> int:
    from systolica.compiler.frontend import load_model
    from systolica.config import load_config
    from systolica.reference_float import FloatModel

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default")
    p.add_argument("--config", default="default")
    p.add_argument("--no-bytes", action="store_true", help="skip the compiles (agreement only)")
    args = p.parse_args(argv)
    model = load_model(args.model)
    ids = model.tokenizer.encode(PASSAGE)
    lf = FloatModel(model, np.float32).prefill(ids)
    for w in ("int8", "int4"):
        if not args.no_bytes:
            b = decode_weight_bytes(model, load_config(args.config), w)
            by = ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in b["stream_bytes_by_format"].items())
            print(f"{w}: weight bytes per decode token {b['weight_bytes'] / 1e6:.1f} MB (counted from the compiled "
                  f"decode program; streams: {by})")
        for split in (False, True):
            a = agreement(model, ids, w, split, lf)
            print(f"{w}, {'split' if split else 'plain'} activations: top-1 agreement {a.top1:.3f} over {a.tokens} "
                  f"tokens, mean |logit error| {a.mean_abs_err:.2f} (measured, teacher-forced vs float32)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
