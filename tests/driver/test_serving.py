"""Continuous batching (driver/serving.py): requests served together get exactly the tokens each gets alone."""

from __future__ import annotations

import numpy as np
import pytest
from serving_harness import CFG, batched_artifact
from serving_harness import golden_runtime as _rt

from systolica.compiler.compile import compile_model
from systolica.driver.runtime import GenerationError
from systolica.driver.sampling import SamplingParams
from systolica.driver.serving import BatchServer
from systolica.testmodels import random_model


@pytest.fixture(scope="module")
def art():
    return batched_artifact()


def test_requests_served_together_get_the_tokens_each_gets_alone(art):
    rng = np.random.default_rng(2)
    prompts = [[int(t) for t in rng.integers(1, 300, n)] for n in (5, 2, 11, 7, 3)]
    lengths = [6, 9, 3, 8, 60]  # the last runs into the end of the compiled context (40)
    sampling = [None, SamplingParams(temperature=0.8, top_k=20, seed=4), None, None, None]
    alone = [[s.token for s in _rt(art).generate(p, n, sampling=sp, stop=[])]
             for p, n, sp in zip(prompts, lengths, sampling, strict=True)]
    srv = BatchServer(_rt(art))
    ids = [srv.submit(p, n, sampling=sp, stop=[]) for p, n, sp in zip(prompts[:3], lengths[:3], sampling[:3],
                                                                       strict=True)]
    events = srv.step() + srv.step()
    ids += [srv.submit(p, n, stop=[]) for p, n in zip(prompts[3:], lengths[3:], strict=True)]  # join mid-way
    events += list(srv.run())
    assert srv.idle
    for rid, want in zip(ids, alone, strict=True):
        st = srv.stats(rid)
        assert st.tokens == want, f"request {rid}"
        assert [e.token for e in events if e.request == rid] == want
        assert [e.done for e in events if e.request == rid][-1]
    assert srv.stats(ids[4]).stop_reason == "context full" and len(alone[4]) == 40 - len(prompts[4]) + 1
    assert srv.stats(ids[0]).stop_reason == "max_new_tokens" and srv.stats(ids[0]).ttft_s > 0
    # every decode row is a token after a request's first; fewer steps than rows: requests shared decode steps
    assert srv.batch_rows == sum(len(t) - 1 for t in alone) and srv.steps < srv.batch_rows - 10
    assert srv.rt.pool.free == srv.rt.pool.n_pages  # every finished request gave its pages back


def test_server_refuses_a_batch_the_artifact_cannot_run(art):
    with pytest.raises(GenerationError, match="1..3"):
        BatchServer(_rt(art), max_batch=4)
    srv = BatchServer(_rt(art))
    with pytest.raises(GenerationError, match="no room"):
        srv.submit(list(range(1, 41)))
    with pytest.raises(GenerationError, match="max_new_tokens"):
        srv.submit([1, 2], max_new_tokens=0)


def test_a_shared_prompt_prefix_is_prefilled_once():
    """Two requests whose prompts share a 64-token prefix (8 full pages of 8): the second forks the first's
    sequence, prefills only its own suffix (fewer instructions and DMA reads than its prefill alone), and both get
    the tokens of an unshared run; pages are reference-counted and all come back."""
    model = random_model("llama", dim=48, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=72, vocab=300, seed=3,
                         max_seq=96)
    art = compile_model(model, CFG, page=8, max_seq=96, prefill_chunk=4, batch=2)
    rng = np.random.default_rng(6)
    prefix = [int(t) for t in rng.integers(1, 300, 64)]
    prompts = [prefix + [11, 12, 13], prefix + [21, 22, 23, 24, 25]]
    alone = [[s.token for s in _rt(art).generate(p, 6, stop=[])] for p in prompts]
    rt = _rt(art)
    solo = rt.new_sequence()
    _, unshared = rt.prefill(solo, prompts[1])
    solo.release()
    srv = BatchServer(rt)
    ids = [srv.submit(p, 6, stop=[]) for p in prompts]
    list(srv.run())
    for rid, want in zip(ids, alone, strict=True):
        assert srv.stats(rid).tokens == want
    second = srv.stats(ids[1])
    assert second.shared_prefix_tokens == 64 and srv.stats(ids[0]).shared_prefix_tokens == 0
    assert srv.prefill_tokens_saved == 64 and srv.prefill_tokens == sum(map(len, prompts)) - 64
    assert second.prefill.instrs < unshared.instrs and second.prefill.dma_rd_bytes < unshared.dma_rd_bytes
    assert rt.pool.free == rt.pool.n_pages


def test_fork_shares_full_pages_and_copies_the_partial_one():
    model = random_model("llama", dim=48, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=72, vocab=300, seed=3,
                         max_seq=40)
    art = compile_model(model, CFG, page=8, max_seq=40, prefill_chunk=4, batch=2)  # a KV pool of 2 contexts
    rt = _rt(art)
    prompt = [int(t) for t in np.random.default_rng(8).integers(1, 300, 20)]
    a = rt.new_sequence()
    rt.prefill(a, prompt)
    b = rt.fork(a, 19)  # pages 0, 1 shared; page 2 (tokens 16..18) copied
    assert b.block_table[:2] == a.block_table[:2] and b.block_table[2] != a.block_table[2]
    assert [rt.pool.refs(p) for p in a.block_table] == [2, 2, 1]
    lb, _ = rt.prefill(b, prompt[19:])  # the last prompt token again, at position 19
    c = rt.new_sequence()
    lc, _ = rt.prefill(c, prompt)
    np.testing.assert_array_equal(lb, lc)
    for s in (a, b, c):
        s.release()
    assert rt.pool.free == rt.pool.n_pages
    with pytest.raises(ValueError, match="fork of 30 tokens"):
        rt.fork(c, 30)
