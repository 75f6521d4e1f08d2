"""Continuous batching (driver/serving.py): requests served together get exactly the tokens each gets alone."""

from __future__ import annotations

import numpy as np
import pytest

from systolica.compiler.compile import compile_model
from systolica.config import preset
from systolica.driver.device import open_device
from systolica.driver.runtime import GenerationError, Runtime
from systolica.driver.sampling import SamplingParams
from systolica.driver.serving import BatchServer
from systolica.testmodels import random_model

CFG = preset("tiny")


@pytest.fixture(scope="module")
def art():
    model = random_model("llama", dim=48, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=72, vocab=300, seed=3,
                         max_seq=40)
    return compile_model(model, CFG, page=8, max_seq=40, prefill_chunk=4, batch=3)


def _rt(art) -> Runtime:
    return Runtime(art, open_device("golden", CFG, dram_bytes=art.dram_bytes + (1 << 16)))


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
