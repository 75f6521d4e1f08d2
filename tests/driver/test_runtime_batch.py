"""Batched decode (continuous batching): B sequences in one decode_batch run give, bit for bit, the logits each
gives alone, whatever their positions and KV pages, and sequences join and leave between steps."""

from __future__ import annotations

import numpy as np
import pytest

from systolica.artifact import ArtifactError, StepState
from systolica.compiler.compile import compile_model
from systolica.config import preset
from systolica.driver.device import open_device
from systolica.driver.runtime import GenerationError, Runtime
from systolica.testmodels import random_model

CFG = preset("tiny")


@pytest.fixture(scope="module", params=[("llama", False), ("llama", True), ("gpt2", False)],
                ids=["llama", "llama-split", "gpt2"])
def compiled(request):
    arch, split = request.param
    kw = {"n_kv_heads": 2} if arch == "llama" else {}
    model = random_model(arch, dim=48, n_layers=2, n_heads=4, ffn_dim=72, vocab=300, seed=9, max_seq=48, **kw)
    return compile_model(model, CFG, page=8, max_seq=48, prefill_chunk=4, act_split=split, batch=4)


def _runtime(art) -> Runtime:
    return Runtime(art, open_device("golden", CFG, dram_bytes=art.dram_bytes + (1 << 16)))


def _alone(art, prompt: list[int], steps: list[int]) -> list[np.ndarray]:
    """The logits of each decode step of one sequence on its own runtime (prefill, then decode)."""
    rt = _runtime(art)
    seq = rt.new_sequence()
    rt.prefill(seq, prompt)
    return [rt.decode(seq, t)[0] for t in steps]


def test_batched_steps_equal_each_sequence_alone_as_sequences_join_and_leave(compiled):
    rng = np.random.default_rng(1)
    prompts = [[int(t) for t in rng.integers(1, 300, n)] for n in (3, 9, 1, 14, 6)]  # pages cross at 8
    steps = [[int(t) for t in rng.integers(1, 300, 7)] for _ in prompts]
    want = [_alone(compiled, p, s) for p, s in zip(prompts, steps, strict=True)]
    rt = _runtime(compiled)
    assert rt.max_batch == 4
    seqs = [rt.new_sequence() for _ in prompts]
    # the sequences take pages in an interleaved order: their block tables are not contiguous
    for i in (3, 0, 4, 1, 2):
        rt.prefill(seqs[i], prompts[i])
    done = [0] * len(prompts)
    # which sequences run in each step: 0, 1, 2 start; 3 joins at step 2; 1 leaves after 3; 4 joins when room
    plan = [[0, 1, 2], [2, 0, 1], [3, 0, 1, 2], [1, 3, 0, 2], [4, 2, 3, 0], [0, 4, 3, 2], [3, 4, 2, 0],
            [4, 3, 1], [4, 2, 1], [1, 4], [4, 1], [3]]
    for group in plan:
        group = [i for i in group if done[i] < len(steps[i])]
        if not group:
            continue
        logits, stats = rt.decode_batch([seqs[i] for i in group], [steps[i][done[i]] for i in group])
        assert logits.shape == (len(group), int(compiled.manifest["model"]["vocab_size"]))
        for row, i in enumerate(group):
            np.testing.assert_array_equal(logits[row], want[i][done[i]], err_msg=f"sequence {i} step {done[i]}")
            done[i] += 1
    assert done == [len(s) for s in steps]


def test_one_weight_read_serves_the_batch(compiled):
    """A batched step reads the weights once: its DMA read bytes are far below B single decode steps'."""
    rt = _runtime(compiled)
    seqs = [rt.new_sequence() for _ in range(4)]
    for s in seqs:
        rt.prefill(s, [5, 6, 7])
    _, one = rt.decode(seqs[0], 3)
    _, four = rt.decode_batch(seqs, [3, 4, 5, 6])
    w = compiled.manifest["stats"]["decode"]["stream_bytes"]
    assert w > 0
    assert four.dma_rd_bytes < one.dma_rd_bytes + w // 2 < 4 * one.dma_rd_bytes


def test_batched_step_refuses_bad_batches(compiled):
    rt = _runtime(compiled)
    seqs = [rt.new_sequence() for _ in range(5)]
    with pytest.raises(GenerationError, match="at most 4"):
        rt.decode_batch(seqs, [1] * 5)
    with pytest.raises(GenerationError, match="twice"):
        rt.decode_batch([seqs[0], seqs[0]], [1, 2])
    with pytest.raises(GenerationError, match="2 sequences and 3 tokens"):
        rt.decode_batch(seqs[:2], [1, 2, 3])
    with pytest.raises(ArtifactError, match="StepState.rows"):
        compiled.patched_image("decode_batch", StepState(0, [1, 2], [0]))
    with pytest.raises(ArtifactError, match="row 1: positions 48..48 exceed"):
        compiled.patched_image("decode_batch", StepState(0, [1, 2], [], rows=[(0, [0]), (48, list(range(7)))]))


def test_patched_batched_image_is_the_patched_program(compiled):
    from systolica.program import words_to_bytes

    rng = np.random.default_rng(4)
    n_pages, page = int(compiled.manifest["kv"]["n_pages"]), compiled.page
    for _ in range(20):
        n = int(rng.integers(1, 5))
        rows = []
        for _r in range(n):
            pos = int(rng.integers(0, 48))
            rows.append((pos, [int(p) for p in rng.choice(n_pages, -(-(pos + 1) // page), replace=False)]))
        st = StepState(0, [int(t) for t in rng.integers(0, 300, n)], [], rows=rows)
        assert bytes(compiled.patched_image("decode_batch", st)) == \
            words_to_bytes(compiled.patched_program("decode_batch", st))
