"""SmolLM2-135M (the default model, compiled as `systolica run` does): one prefill chunk and one decode step
on the plan path and on the per-instruction path, from the same state: all DRAM, buffers and counters equal.

Slow (a whole model: ~4 s of reference simulation after the compile); skipped unless the model and its
artifact are in the cache (`systolica run` once puts them there).
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def _cached_artifact():
    from systolica.compiler.model_zoo import cache_dir, locate_default_model

    gguf = locate_default_model()
    if gguf is None or not any((cache_dir() / "artifacts").glob("SmolLM2-*.systolica")):
        pytest.skip("SmolLM2 and its artifact are not cached (run `systolica run \"hi\"` once)")
    from systolica.bench.host_speed import load_default_artifact

    return load_default_artifact(say=lambda s: None)[0]


def test_smollm2_prefill_and_decode_plan_equals_reference():
    from systolica.bench.host_speed import _prompt_ids
    from systolica.driver.golden_device import GoldenDevice
    from systolica.driver.runtime import Runtime, StepState
    from systolica.sim.golden import GoldenSim

    art = _cached_artifact()
    dev = GoldenDevice(art.config, dram_bytes=-(-art.dram_bytes // 4096) * 4096 + 4096)
    rt = Runtime(art, dev, timeout_s=1e6)
    seq = rt.new_sequence()
    rows = art.rows("prefill")
    ids = _prompt_ids(art, 3 * rows + 1)
    rt.prefill(seq, ids[:2 * rows + 1])  # on the plan path: KV pages filled, plans cached and patched
    sim = dev._sim
    for kind, toks in (("prefill", ids[2 * rows + 1:3 * rows + 1]), ("decode", [ids[0]])):
        seq.reserve(len(toks))
        words = art.patched_program(kind, StepState(seq.pos, list(toks), seq.block_table))
        ref = GoldenSim(art.config, dev.arena.copy(), window_base=sim.window_base, window_size=sim.window.size,
                        fast=False)
        for b in ("spad", "acc", "vbuf"):
            getattr(ref, b)[...] = getattr(sim, b)
        a, b = ref.run(words, raise_on_fault=False), sim.run(words, raise_on_fault=False)
        assert (a.status, a.pc) == (b.status, b.pc), kind
        assert a.counters.to_dict() == b.counters.to_dict(), kind
        for x in ("dram", "spad", "acc", "vbuf"):
            assert np.array_equal(getattr(ref, x), getattr(sim, x)), f"{kind}: {x} differs"
        seq.pos += len(toks)
