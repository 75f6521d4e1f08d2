"""--weights int4 on SmolLM2-135M-Instruct (Q4_1 GGUF: its own codes streamed): bytes per decode token, agreement
with the float reference, and the answer to the capital-of-France prompt.

Slow (minutes on two cores) and needs the checkpoint, fetched once with ``python -m systolica.compiler.model_zoo
fetch`` (never at test time).  Measured 2026-12-02 (bench/weight_formats.py): see docs/quantization.md.
"""

from __future__ import annotations

import numpy as np
import pytest

from systolica.bench.weight_formats import PASSAGE, agreement, decode_weight_bytes

pytestmark = pytest.mark.slow


def test_int4_decode_reads_at_most_100_mb(smollm2):
    from systolica.config import load_config

    b4 = decode_weight_bytes(smollm2, load_config("default"), "int4")
    assert b4["weight_bytes"] <= 100e6, b4
    assert set(b4["stream_bytes_by_format"]) == {"Q4_1", "INT8"}  # the tied Q8_0 LM head stays int8


def test_int4_agreement_with_the_float_reference(smollm2):
    from systolica.reference_float import FloatModel

    ids = smollm2.tokenizer.encode(PASSAGE)
    assert len(ids) >= 60
    lf = FloatModel(smollm2, np.float32).prefill(ids)
    split = agreement(smollm2, ids, "int4", True, lf)
    plain = agreement(smollm2, ids, "int4", False, lf)
    print(f"int4 top-1 agreement over {len(ids)} tokens: plain {plain.top1:.3f}, split {split.top1:.3f}")
    assert split.top1 >= 0.93 and plain.top1 >= 0.75


def test_int4_answers_paris(smollm2):
    from systolica.quant_model import quantize_model
    from systolica.reference_quant import QuantRunner

    ids = smollm2.tokenizer.encode("The capital of France is")
    run = QuantRunner(quantize_model(smollm2, max_seq=32, act_split=True, weights="int4"), page=16)
    tok = int(np.argmax(run.prefill(ids)[-1]))
    assert smollm2.tokenizer.decode([tok]) == " Paris"
