"""Continuous batching on a trained model: SmolLM2-135M-Instruct on the golden simulator, 4 sequences at a time.

Slow (about a minute on two cores) and needs the checkpoint, fetched once with
``python -m systolica.compiler.model_zoo fetch`` (never at test time).
"""

from __future__ import annotations

import pytest

from systolica.compiler.compile import compile_model
from systolica.config import load_config
from systolica.driver.device import open_device
from systolica.driver.runtime import Runtime
from systolica.driver.serving import BatchServer

pytestmark = pytest.mark.slow

PROMPTS = ["The capital of France is", "Water boils at a temperature of",
           "List three primary colors:", "The largest planet in the Solar System is",
           "Once upon a time, in a small village,", "2 + 2 ="]
LENGTHS = [12, 6, 16, 9, 20, 5]


@pytest.fixture(scope="module")
def art():
    from systolica.compiler.frontend import load_model
    from systolica.compiler.model_zoo import locate_default_model

    path = locate_default_model()
    if path is None:
        pytest.skip("SmolLM2 checkpoint not fetched: run `python -m systolica.compiler.model_zoo fetch`")
    return compile_model(load_model(str(path)), load_config(None), page=16, max_seq=128, prefill_chunk=16,
                         act_split=True, batch=4)


def _rt(art) -> Runtime:
    return Runtime(art, open_device("golden", art.config, dram_bytes=-(-art.dram_bytes // 4096) * 4096 + 4096))


def test_four_sequences_at_a_time_give_each_its_own_tokens(art):
    """Six requests of different prompts and lengths through a 4-wide batched decode (two join when others
    leave): every request's greedy tokens equal those of generate() on it alone, and the first answers Paris."""
    alone = [[s.token for s in _rt(art).generate(p, n, stop=[])] for p, n in zip(PROMPTS, LENGTHS, strict=True)]
    srv = BatchServer(_rt(art))
    ids = [srv.submit(p, n, stop=[]) for p, n in zip(PROMPTS, LENGTHS, strict=True)]
    list(srv.run())
    for rid, want in zip(ids, alone, strict=True):
        assert srv.stats(rid).tokens == want, PROMPTS[rid]
    assert "Paris" in srv.stats(ids[0]).text
    assert srv.steps < srv.batch_rows and srv.batch_rows == sum(n - 1 for n in LENGTHS)
    print(f"\n{srv.steps} batched steps for {srv.batch_rows} decode rows (mean batch {srv.batch_rows / srv.steps:.2f})")
