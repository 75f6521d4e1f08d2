"""The completions endpoint: concurrent clients over HTTP get the tokens each gets from generate() alone."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest
from serving_harness import batched_artifact
from serving_harness import golden_runtime as _rt

from systolica.driver.http_server import CompletionServer


@pytest.fixture(scope="module")
def art():
    return batched_artifact()


@pytest.fixture
def server(art):
    srv = CompletionServer(_rt(art), port=0, model_name="tiny").start()
    yield srv
    srv.stop()


def _post(port: int, body: dict, raw: bool = False):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read().decode() if raw else json.loads(r.read())


def test_concurrent_completions_get_their_own_tokens(art, server):
    rng = np.random.default_rng(5)
    prompts = [[int(t) for t in rng.integers(1, 300, n)] for n in (4, 9, 2, 6)]
    want = [[s.token for s in _rt(art).generate(p, 7, stop=[])] for p in prompts]
    got: dict[int, dict] = {}

    def client(i):
        got[i] = _post(server.port, {"prompt": prompts[i], "max_tokens": 7, "stop_token_ids": []})

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for i, w in enumerate(want):
        ch = got[i]["choices"][0]
        assert ch["tokens"] == w and ch["finish_reason"] == "length"
        assert got[i]["usage"] == {"prompt_tokens": len(prompts[i]), "completion_tokens": 7,
                                   "total_tokens": len(prompts[i]) + 7}
    assert server.srv.steps < sum(len(w) - 1 for w in want)  # the clients shared batched decode steps


def test_streamed_completion_and_errors(art, server):
    body = _post(server.port, {"prompt": [5, 6, 7], "max_tokens": 4, "stream": True, "stop_token_ids": []},
                 raw=True)
    events = [line[6:] for line in body.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    want = [s.token for s in _rt(art).generate([5, 6, 7], 4, stop=[])]
    assert [c["choices"][0]["tokens"][0] for c in chunks] == want
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    with pytest.raises(urllib.error.HTTPError) as e:
        _post(server.port, {"prompt": {"no": 1}})
    assert e.value.code == 400 and "prompt must be" in json.loads(e.value.read())["error"]["message"]
    with pytest.raises(urllib.error.HTTPError) as e:
        _post(server.port, {"prompt": [1, 2], "temperature": -1})
    assert e.value.code == 400 and "temperature" in json.loads(e.value.read())["error"]["message"]
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=10) as r:
        h = json.loads(r.read())
    assert h["ok"] and h["max_batch"] == 3


def test_a_fault_stops_the_scheduler_and_later_requests_get_503(art):
    """An accelerator fault during a step: the waiting request gets a 500 naming it, later ones a 503 (nothing
    hangs)."""
    rt = _rt(art)
    srv = CompletionServer(rt, port=0).start()
    try:
        def broken(*a, **k):
            raise RuntimeError("DMA_WINDOW fault at pc 12 (injected)")

        rt.decode_batch = broken
        with pytest.raises(urllib.error.HTTPError) as e:
            _post(srv.port, {"prompt": [5, 6, 7], "max_tokens": 4, "stop_token_ids": []})
        assert e.value.code == 500 and "DMA_WINDOW" in json.loads(e.value.read())["error"]["message"]
        with pytest.raises(urllib.error.HTTPError) as e:
            _post(srv.port, {"prompt": [5, 6], "max_tokens": 2})
        assert e.value.code == 503 and "scheduler stopped" in json.loads(e.value.read())["error"]["message"]
    finally:
        srv.stop()
