"""Sampling: greedy is argmax, the cuts remove what they should, seeds reproduce."""

from __future__ import annotations

import numpy as np
import pytest

from systolica.driver.sampling import Sampler, SamplingParams

LOGITS = np.array([1.0, 3.0, 2.0, 3.0, -1.0, 0.5])


def test_greedy_takes_the_first_maximum():
    assert Sampler(SamplingParams())(LOGITS) == 1


def test_top_k_keeps_only_the_k_best():
    probs = Sampler(SamplingParams(temperature=1.0, top_k=3)).probabilities(LOGITS)
    assert set(np.flatnonzero(probs)) == {1, 2, 3}
    assert probs.sum() == pytest.approx(1.0)


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    z = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    probs = Sampler(SamplingParams(temperature=1.0, top_p=0.75)).probabilities(z)
    assert set(np.flatnonzero(probs)) == {0, 1}
    np.testing.assert_allclose(probs[:2], [0.5 / 0.8, 0.3 / 0.8])


def test_temperature_sharpens_and_flattens():
    cold = Sampler(SamplingParams(temperature=0.1)).probabilities(LOGITS)
    hot = Sampler(SamplingParams(temperature=10.0)).probabilities(LOGITS)
    assert cold.max() > 0.49 and hot.max() < 0.3


def test_seeded_sampling_reproduces_and_follows_the_distribution():
    a = [Sampler(SamplingParams(temperature=1.0, seed=7))(LOGITS) for _ in range(3)]
    b = [Sampler(SamplingParams(temperature=1.0, seed=7))(LOGITS) for _ in range(3)]
    assert a == b
    s = Sampler(SamplingParams(temperature=1.0, seed=0))
    draws = np.bincount([s(LOGITS) for _ in range(4000)], minlength=LOGITS.size) / 4000
    np.testing.assert_allclose(draws, s.probabilities(LOGITS), atol=0.03)


@pytest.mark.parametrize("kw", [{"temperature": -1}, {"top_k": -2}, {"top_p": 0.0}, {"top_p": 1.5}])
def test_bad_parameters_are_refused(kw):
    with pytest.raises(ValueError):
        SamplingParams(**kw)
