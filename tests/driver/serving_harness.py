"""What the serving tests share: a tiny llama compiled with a 3-wide batched decode step, and its runtime."""

from __future__ import annotations

from systolica.compiler.compile import compile_model
from systolica.config import preset
from systolica.driver.device import open_device
from systolica.driver.runtime import Runtime
from systolica.testmodels import random_model

CFG = preset("tiny")


def batched_artifact(batch: int = 3, max_seq: int = 40):
    model = random_model("llama", dim=48, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=72, vocab=300, seed=3,
                         max_seq=max_seq)
    return compile_model(model, CFG, page=8, max_seq=max_seq, prefill_chunk=4, batch=batch)


def golden_runtime(art) -> Runtime:
    return Runtime(art, open_device("golden", CFG, dram_bytes=art.dram_bytes + (1 << 16)))
