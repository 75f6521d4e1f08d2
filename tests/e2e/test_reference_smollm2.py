"""The integer reference against the float reference on a trained model (SmolLM2-135M-Instruct, Q4_1 GGUF).

Slow (about a minute on two cores) and needs the checkpoint, fetched once with
``python -m systolica.compiler.model_zoo fetch`` (never at test time).
"""

from __future__ import annotations

import numpy as np
import pytest

from systolica.reference_float import FloatModel
from systolica.reference_quant import QuantRunner, quantize_model

pytestmark = pytest.mark.slow

PASSAGE = ("The sun is the star at the center of the Solar System. It is a massive, nearly perfect sphere of hot "
           "plasma, heated to incandescence by nuclear fusion reactions in its core.")


def test_trained_model_agreement(smollm2):
    """Teacher-forced over the 38 tokens of PASSAGE.

    Measured: top-1 agreement 0.79 (30/38), the float top-1 always within the
    integer top-5, logit error relative RMS 0.16 (mean |error| 0.80 on logits of
    std 6.2), matrices' quantization error 0.85% RMS on average.  The logit error is
    much larger than on random models (~0.05) because trained activations have
    outlier channels (row max / row RMS of 10-20 at the norms' outputs): a row with
    one power-of-two scale spends its 127 levels on the outlier.  Simulating only
    that activation rounding in float gives 0.21 on the same text, so the integers
    are as good as the format allows.  Thresholds leave room for numerics changes:
    top-1 >= 0.7, top-5 containment >= 0.95, relative RMS < 0.25.
    """
    m = smollm2
    ids = m.tokenizer.encode(PASSAGE)[:40]
    qm = quantize_model(m, max_seq=64)
    mats = [e for k, e in qm.errors.items() if k in qm.mats]
    lf = FloatModel(m, np.float32).prefill(ids)  # (T, vocab)
    lq = QuantRunner.logits_float(QuantRunner(qm, page=16).prefill(ids))
    T = len(ids)
    best = lf.argmax(1)
    top1 = float(np.mean(best == lq.argmax(1)))
    top5 = float(np.mean([best[i] in np.argsort(lq[i])[-5:] for i in range(T)]))
    rel = float(np.sqrt(np.mean((lq - lf) ** 2)) / lf.std())
    print(f"SmolLM2-135M, {T} tokens: top-1 {top1:.3f}, top-5 containment {top5:.3f}, logit rel RMS {rel:.3f}, "
          f"mean |err| {np.abs(lq - lf).mean():.3f} (logit std {lf.std():.2f}); matrix quant error mean "
          f"{np.mean(mats):.4f}, max {np.max(mats):.4f}")
    assert np.mean(mats) < 0.012 and np.max(mats) < 0.02
    assert top1 >= 0.7 and top5 >= 0.95 and rel < 0.25


def test_trained_model_prefill_equals_decode(smollm2):
    ids = smollm2.tokenizer.encode("The capital of France is")
    run = QuantRunner(quantize_model(smollm2, max_seq=32), page=4)
    full = run.prefill(ids)
    run.reset()
    np.testing.assert_array_equal(np.stack([run.decode(t) for t in ids]), full)
