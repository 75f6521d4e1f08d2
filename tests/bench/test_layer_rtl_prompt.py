"""`python -m systolica.bench.layer_rtl --prefill --prompt N`: the chunks of a prompt, one after another, summed."""

from __future__ import annotations

import pytest

from systolica.bench.layer_rtl import run_prompt
from systolica.config import preset


def _fake(rows: int, calls: list):
    """A stand-in for run_layer (no RTL): chunk at position p costs 1000 + 10 p cycles, 700 of them busy."""
    def run(cfg, context, *, prefill, say, **kw):
        assert prefill
        calls.append(context)
        cycles = 1000 + 10 * context
        return {"rows": rows, "context": context, "cycles": cycles, "array_busy": 700, "array_utilization": 700 / cycles,
                "model_cycles": cycles - 20, "model_array_utilization": 700 / (cycles - 20), "exact": context != 14}
    return run


def test_prompt_runs_every_whole_chunk_from_position_0_and_sums_them():
    calls: list[int] = []
    p = run_prompt(preset("tiny"), 128, run=_fake(7, calls), say=lambda s: None, page=32)
    assert calls == list(range(0, 126, 7))  # 18 chunks of 7: positions 0..125; 126..132 would pass the prompt
    assert (p["chunks"], p["tokens"], p["rows"], p["page"]) == (18, 126, 7, 32)
    cycles = sum(1000 + 10 * c for c in calls)
    assert p["cycles"] == cycles and p["array_busy"] == 700 * 18
    assert p["array_utilization"] == pytest.approx(700 * 18 / cycles)
    assert p["model_cycles"] == cycles - 20 * 18
    assert p["model_array_utilization"] == pytest.approx(700 * 18 / (cycles - 20 * 18))
    assert p["exact"] is False  # one chunk (position 14) was not bit-exact: the whole prompt is not


def test_prompt_shorter_than_a_chunk_or_not_positive_is_refused():
    with pytest.raises(ValueError, match="shorter than one prefill chunk"):
        run_prompt(preset("tiny"), 5, run=_fake(7, []), say=lambda s: None)
    with pytest.raises(ValueError, match="positive number of tokens"):
        run_prompt(preset("tiny"), 0, run=_fake(7, []), say=lambda s: None)
