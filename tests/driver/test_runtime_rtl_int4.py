"""A whole --weights int4 model through the runtime on the RTL: every GEMM_STREAM of its weights takes 4-bit
codes and group scales, and the tokens are the golden backend's and the integer reference's."""

from __future__ import annotations

import numpy as np
import pytest

from systolica.compiler.compile import compile_model
from systolica.compiler.gguf_reader import read_gguf
from systolica.compiler.writers import write_gguf
from systolica.config import preset
from systolica.driver.device import open_device
from systolica.driver.runtime import Metrics, Runtime
from systolica.quant_model import quantize_model
from systolica.reference_quant import QuantRunner
from systolica.testmodels import random_model

pytestmark = pytest.mark.rtl
PROMPT = [7, 3, 250, 18, 99, 41]
N = 5


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1"])
def test_int4_model_on_rtl_generates_the_reference_tokens(build_dir, tmp_path, kind):
    cfg = preset("tiny")
    src = random_model("llama", dim=64, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=96, vocab=260, seed=11,
                       max_seq=32)
    model = read_gguf(write_gguf(src, tmp_path / "m.gguf", kind))
    art = compile_model(model, cfg, page=16, max_seq=32, prefill_chunk=4, weights="int4")
    assert kind in art.manifest["stats"]["decode"]["stream_bytes_by_format"]
    m_g = Metrics("golden", cfg.clock_mhz)
    golden = [s.token for s in Runtime(art, open_device("golden", cfg, dram_bytes=art.dram_bytes + 8192))
              .generate(PROMPT, N, stop=[], metrics=m_g)]
    m_r = Metrics("rtl", cfg.clock_mhz)
    dev = open_device("rtl", cfg, dram_bytes=art.dram_bytes + 8192, build_dir=build_dir, stall_percent=20)
    rtl = [s.token for s in Runtime(art, dev).generate(PROMPT, N, stop=[], metrics=m_r)]
    ref = QuantRunner(quantize_model(model, max_seq=32, weights="int4"), page=art.page)
    logits, want = ref.prefill(PROMPT), []
    for _ in range(N):
        want.append(int(np.argmax(np.asarray(logits).reshape(-1, model.config.vocab_size)[-1])))
        logits = ref.decode(want[-1])
    print(f"\n{kind}: tokens {rtl}; decode {m_r.decode.cycles} cycles, {m_r.decode.dma_rd_bytes} bytes read")
    assert rtl == golden == want
    assert (m_r.prefill.instrs, m_r.decode.instrs) == (m_g.prefill.instrs, m_g.decode.instrs)
    assert (m_r.prefill.dma_rd_bytes, m_r.decode.dma_rd_bytes) == (m_g.prefill.dma_rd_bytes, m_g.decode.dma_rd_bytes)
