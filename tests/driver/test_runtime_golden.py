"""The runtime on the golden backend: same tokens and logits as the integer reference, paging, errors."""

from __future__ import annotations

import numpy as np
import pytest

from systolica.compiler.compile import compile_model
from systolica.config import preset
from systolica.driver.device import ConfigMismatchError, open_device
from systolica.driver.kv_cache import KVCacheFull, PagePool
from systolica.driver.runtime import Metrics, Runtime
from systolica.driver.sampling import SamplingParams
from systolica.quant_model import quantize_model
from systolica.reference_quant import QuantRunner
from systolica.testmodels import random_model

CFG = preset("tiny")


@pytest.fixture(scope="module")
def compiled():
    model = random_model("llama", dim=48, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=72, vocab=300, seed=5,
                         max_seq=64)
    art = compile_model(model, CFG, page=16, max_seq=64, prefill_chunk=8)
    return model, art


def _reference_greedy(model, prompt, n, page):
    ref = QuantRunner(quantize_model(model, max_seq=64), page=page)
    logits = ref.prefill(prompt)
    out = []
    for _ in range(n):
        tok = int(np.argmax(np.asarray(logits).reshape(-1, model.config.vocab_size)[-1]))
        out.append(tok)
        logits = ref.decode(tok)
    return out


def test_greedy_tokens_equal_the_integer_reference(compiled):
    model, art = compiled
    rt = Runtime(art, open_device("golden", CFG, dram_bytes=art.dram_bytes + (1 << 16)))
    prompt = [3, 141, 59, 26, 5, 35, 89, 79, 32, 38, 46]  # 11 tokens: a head-less chunk, then the logits run
    m = Metrics("golden", CFG.clock_mhz)
    got = [s.token for s in rt.generate(prompt, max_new_tokens=20, stop=[], metrics=m)]
    assert got == _reference_greedy(model, prompt, 20, art.page)
    assert m.prompt_tokens == 11 and m.generated_tokens == 20
    assert m.prefill.instrs > 0 and m.decode.instrs > 0
    assert m.dma_bytes_per_token >= art.manifest["stats"]["decode"]["weight_bytes"]
    assert rt.pool.free == rt.pool.n_pages  # the sequence gave its pages back
    # host speed: each phase's wall time holds the simulator's own time of that phase, and the whole run both
    assert m.prefill_host_s >= m.prefill.host_s > 0 and m.decode_host_s >= m.decode.host_s > 0
    assert m.prefill_host_s + m.decode_host_s <= m.host_s
    assert m.host_decode_tokens_per_s == pytest.approx(19 / m.decode_host_s)
    assert m.host_prefill_tokens_per_s == pytest.approx(11 / m.prefill_host_s)
    assert {"host_prefill_tokens_per_s", "host_decode_tokens_per_s"} <= set(m.to_dict())


def test_two_sequences_interleaved_share_the_page_pool(compiled):
    _, art = compiled
    rt = Runtime(art, open_device("golden", CFG, dram_bytes=art.dram_bytes + (1 << 16)))
    a, b = rt.new_sequence(), rt.new_sequence()
    la, _ = rt.prefill(a, [1, 2, 3, 4, 5])
    lb, _ = rt.prefill(b, [9, 8, 7])
    la2, _ = rt.decode(a, 6)
    # Interleaving must not change a's result: compare with a fresh run of a alone.
    c = rt.new_sequence()
    rt.prefill(c, [1, 2, 3, 4, 5])
    lc2, _ = rt.decode(c, 6)
    np.testing.assert_array_equal(la2, lc2)
    assert set(a.block_table).isdisjoint(b.block_table)


def test_sampling_is_reproducible_with_a_seed(compiled):
    _, art = compiled
    rt = Runtime(art, open_device("golden", CFG, dram_bytes=art.dram_bytes + (1 << 16)))
    sp = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=11)
    a = [s.token for s in rt.generate([5, 6, 7], 8, sampling=sp, stop=[])]
    b = [s.token for s in rt.generate([5, 6, 7], 8, sampling=sp, stop=[])]
    assert a == b and len(a) == 8


def test_artifact_for_another_config_is_refused(compiled):
    _, art = compiled
    with pytest.raises(ConfigMismatchError, match="recompile"):
        Runtime(art, open_device("golden", preset("default"), dram_bytes=1 << 20))


def test_text_prompt_without_tokenizer_and_bad_ids_are_clear(compiled):
    _, art = compiled
    rt = Runtime(art, open_device("golden", CFG, dram_bytes=art.dram_bytes + (1 << 16)))
    with pytest.raises(ValueError, match="no tokenizer"):
        list(rt.generate("hello"))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        list(rt.generate([1, 99999]))


def test_page_pool_runs_out_with_a_clear_message():
    pool = PagePool(2, 16)
    pool.take(), pool.take()
    with pytest.raises(KVCacheFull, match="all 2 KV pages"):
        pool.take()


def test_chunked_prompt_equals_token_by_token(compiled):
    """A prompt longer than the prefill program: head-less chunks, then one run with the logits ending with the
    prompt -- its logits and the continuation equal feeding every token through decode, bit for bit."""
    model, art = compiled
    chunk = art.rows("prefill")
    assert 21 % chunk and chunk < 21  # the case under test: more than one run, not of whole chunks
    rt = Runtime(art, open_device("golden", CFG, dram_bytes=art.dram_bytes + (1 << 16)))
    prompt = [int(t) for t in np.random.default_rng(3).integers(0, 300, 21)]
    a = rt.new_sequence()
    la, sa = rt.prefill(a, prompt)
    assert a.pos == len(prompt) and a.tokens == prompt
    b = rt.new_sequence()
    for t in prompt:
        lb, _ = rt.decode(b, t)
    assert np.array_equal(la, lb)
    ta, tb = int(np.argmax(la)), int(np.argmax(lb))
    assert np.array_equal(rt.decode(a, ta)[0], rt.decode(b, tb)[0])  # the KV entries are the same
    a.release()
    b.release()
