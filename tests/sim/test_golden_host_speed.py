"""The host-speed benchmark runs end to end on a tiny model, and says so when llama.cpp is missing."""

from __future__ import annotations

import sys

from systolica.bench import host_speed
from systolica.compiler.compile import compile_model
from systolica.config import preset
from systolica.testmodels import random_model


def test_golden_host_speed_on_a_tiny_model():
    model = random_model("llama", dim=48, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=72, vocab=300, seed=5,
                         max_seq=64)
    art = compile_model(model, preset("tiny"), page=16, max_seq=64, prefill_chunk=8)
    r = host_speed.golden_host_speed(art, prompt_tokens=11, decode_tokens=3)
    assert r.prefill_tokens == 11 and r.decode_tokens == 3
    assert r.decode_tokens_per_s > 0 and r.prefill_s > 0 and "plans" in r.note


def test_llama_cpp_missing_is_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    r = host_speed.llama_cpp_speed("model.gguf")
    assert r.decode_tokens_per_s is None and "not installed" in r.note
