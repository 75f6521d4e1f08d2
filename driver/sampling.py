"""Choosing the next token from logits: greedy, temperature, top-k and top-p (nucleus) sampling.

Sampling runs on the host, on the logits the accelerator wrote to DRAM; it is a
few microseconds per token next to the milliseconds a decode step takes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SamplingParams", "Sampler", "SamplingError"]


class SamplingError(ValueError):
    """Sampling parameters out of range, naming the parameter and its value."""


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens.  ``temperature == 0`` is greedy (the first maximum, like ARGMAX)."""

    temperature: float = 0.0
    top_k: int = 0  # 0: no top-k cut
    top_p: float = 1.0  # 1.0: no nucleus cut
    seed: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.temperature < float("inf"):  # also NaN
            raise SamplingError(f"temperature={self.temperature} must be >= 0 and finite (0 means greedy)")
        if self.seed is not None and not 0 <= self.seed < 1 << 64:
            raise SamplingError(f"seed={self.seed} must be in 0..2**64-1")
        if self.top_k < 0:
            raise SamplingError(f"top_k={self.top_k} must be >= 0 (0 disables it)")
        if not 0.0 < self.top_p <= 1.0:
            raise SamplingError(f"top_p={self.top_p} must be in (0, 1] (1 disables it)")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class Sampler:
    """Stateful sampler (owns the random generator so a seeded run is reproducible)."""

    def __init__(self, params: SamplingParams):
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        """The distribution sampled from, after temperature, top-k and top-p."""
        p = self.params
        z = np.asarray(logits, np.float64) / max(p.temperature, 1e-8)
        if p.top_k and p.top_k < z.size:
            kth = np.partition(z, -p.top_k)[-p.top_k]
            z = np.where(z < kth, -np.inf, z)
        z = z - z.max()
        probs = np.exp(z)
        probs /= probs.sum()
        if p.top_p < 1.0:
            order = np.argsort(-probs, kind="stable")
            cum = np.cumsum(probs[order])
            keep = cum - probs[order] < p.top_p  # the smallest prefix whose mass reaches top_p
            mask = np.zeros_like(probs, dtype=bool)
            mask[order[keep]] = True
            probs = np.where(mask, probs, 0.0)
            probs /= probs.sum()
        return probs

    def __call__(self, logits: np.ndarray) -> int:
        if self.params.greedy:
            return int(np.argmax(logits))
        probs = self.probabilities(logits)
        return int(self.rng.choice(probs.size, p=probs))
