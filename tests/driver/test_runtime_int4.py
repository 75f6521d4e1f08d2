"""The runtime on the golden backend with a --weights int4 artifact: the integer reference's greedy tokens, and
metrics that count the 4-bit weight streams."""

from __future__ import annotations

import numpy as np

from systolica.compiler.compile import compile_model
from systolica.compiler.gguf_reader import read_gguf
from systolica.compiler.writers import write_gguf
from systolica.config import preset
from systolica.driver.device import open_device
from systolica.driver.runtime import Metrics, Runtime
from systolica.quant_model import quantize_model
from systolica.reference_quant import QuantRunner
from systolica.testmodels import random_model

CFG = preset("tiny")


def test_int4_artifact_generates_the_reference_tokens(tmp_path):
    src = random_model("llama", dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96, vocab=200, seed=7,
                       max_seq=64)
    model = read_gguf(write_gguf(src, tmp_path / "m.gguf", "Q4_1"))
    art = compile_model(model, CFG, page=16, max_seq=64, prefill_chunk=8, act_split=True, weights="int4")
    rt = Runtime(art, open_device("golden", CFG, dram_bytes=art.dram_bytes + (1 << 16)))
    prompt = [3, 141, 59, 26, 5, 35, 89, 79, 32, 38, 46]
    m = Metrics("golden", CFG.clock_mhz)
    got = [s.token for s in rt.generate(prompt, max_new_tokens=12, stop=[], metrics=m)]
    ref = QuantRunner(quantize_model(model, max_seq=64, act_split=True, weights="int4"), page=art.page)
    logits, want = ref.prefill(prompt), []
    for _ in range(12):
        want.append(int(np.argmax(np.asarray(logits).reshape(-1, model.config.vocab_size)[-1])))
        logits = ref.decode(want[-1])
    assert got == want
    streams = art.manifest["stats"]["decode"]["stream_bytes_by_format"]
    assert set(streams) == {"Q4_1"}  # the tied Q4_1 embedding is the LM head: 4-bit too
    assert m.dma_bytes_per_token >= art.manifest["stats"]["decode"]["weight_bytes"]  # measured >= counted
