"""Same model, same prompt: the golden and rtl backends give identical tokens and identical counters.

The RTL run is the generated Verilog of the whole accelerator under Verilator, driven
by the unchanged runtime through cocotb (random AXI back-pressure on every channel).
Instructions retired and DMA bytes are counted by both backends and must agree; the
golden backend has no clock, so cycle counts exist on the RTL only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from systolica.compiler.compile import compile_model
from systolica.config import preset
from systolica.driver.device import open_device
from systolica.driver.runtime import Metrics, Runtime, prefill_runs
from systolica.sim.fast_harness import cocotb_build
from systolica.testmodels import random_model

pytestmark = pytest.mark.rtl
HERE = Path(__file__).parent
PROMPT = [7, 3, 250, 18, 99]
N = 4


def test_golden_and_rtl_generate_the_same_tokens(build_dir, tmp_path):
    cfg = preset("tiny")
    model = random_model("llama", dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=40, vocab=260, seed=9,
                         max_seq=32)
    art = compile_model(model, cfg, page=16, max_seq=32, prefill_chunk=4)
    # the prompt is a head-less chunk and a run of fewer rows than its program (emptied rows on the RTL)
    assert [(r.kind, r.rows) for r in prefill_runs(art, len(PROMPT))] == [("prefill_nohead", 2), ("prefill", 3)]
    path = tmp_path / "tiny.systolica"
    art.save(path)

    m_g = Metrics("golden", cfg.clock_mhz)
    rt = Runtime(art, open_device("golden", cfg, dram_bytes=art.dram_bytes + 8192))
    golden = [s.token for s in rt.generate(PROMPT, N, stop=[], metrics=m_g)]

    b = cocotb_build(cfg, build_dir)  # the same cached build as the top-level tests
    mem = 1 << (art.dram_bytes + 0x2000).bit_length()
    res = b.run("cocotb_runtime", HERE, params={"cfg": cfg.to_dict(), "artifact": str(path), "mem": mem,
                                               "prompt": PROMPT, "n": N, "pause": 0.2}).check()
    rtl, m_r = res.metrics["tokens"], res.metrics["metrics"]
    print(f"\ngolden tokens {golden}\nrtl tokens    {rtl}\nrtl cycles: prefill {m_r['prefill']['cycles']}, "
          f"decode {m_r['decode']['cycles']}")
    assert rtl == golden
    for phase, g in (("prefill", m_g.prefill), ("decode", m_g.decode)):
        assert m_r[phase]["instrs"] == g.instrs, phase
        assert m_r[phase]["dma_wr_bytes"] == g.dma_wr_bytes, phase
        assert m_r[phase]["dma_rd_bytes"] == g.dma_rd_bytes, phase
        assert m_r[phase]["cycles"] > 0


def _golden_and_fast_rtl(art, cfg, build_dir, prompt, n):
    """``(golden tokens, golden metrics, rtl tokens, rtl metrics)`` of ``n`` greedy tokens after ``prompt``: the
    golden backend, then ``--backend rtl`` (the fast harness, 20% AXI stalls)."""
    m_g = Metrics("golden", cfg.clock_mhz)
    golden = [s.token for s in Runtime(art, open_device("golden", cfg, dram_bytes=art.dram_bytes + 8192))
              .generate(prompt, n, stop=[], metrics=m_g)]
    m_r = Metrics("rtl", cfg.clock_mhz)
    dev = open_device("rtl", cfg, dram_bytes=art.dram_bytes + 8192, build_dir=build_dir, stall_percent=20)
    rtl = [s.token for s in Runtime(art, dev).generate(prompt, n, stop=[], metrics=m_r)]
    return golden, m_g, rtl, m_r


def test_fast_rtl_backend_generates_the_golden_tokens(build_dir, tmp_path):
    """`--backend rtl` outside cocotb: the Verilator C++ harness, no Python on the clock edge."""
    cfg = preset("tiny")
    model = random_model("llama", dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=40, vocab=260, seed=9,
                         max_seq=32)
    art = compile_model(model, cfg, page=16, max_seq=32, prefill_chunk=4)
    golden, m_g, rtl, m_r = _golden_and_fast_rtl(art, cfg, build_dir, PROMPT, N)
    assert rtl == golden
    assert (m_r.prefill.instrs, m_r.decode.instrs) == (m_g.prefill.instrs, m_g.decode.instrs)
    assert m_r.decode.dma_rd_bytes == m_g.decode.dma_rd_bytes and m_r.decode.cycles > 0
    assert m_r.decode_tokens_per_s is not None
    # behind a 64-cycle DRAM (RtlDevice passes dram_latency to the harness): the same tokens
    slow = open_device("rtl", cfg, dram_bytes=art.dram_bytes + 8192, build_dir=build_dir, dram_latency=64)
    assert [s.token for s in Runtime(art, slow).generate(PROMPT, N, stop=[])] == golden
    assert slow.last_result.dram_latency == 64 and slow.last_result.ports[0].rd_beats > 0


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1"])
def test_int4_model_on_rtl_generates_the_reference_tokens(build_dir, tmp_path, kind):
    """A whole --weights int4 model: every GEMM_STREAM of its matrices takes 4-bit codes and group scales, and the
    RTL's tokens are the golden backend's and the integer reference's."""
    import numpy as np

    from systolica.compiler.gguf_reader import read_gguf
    from systolica.compiler.writers import write_gguf
    from systolica.quant_model import quantize_model
    from systolica.reference_quant import QuantRunner

    prompt, n = [7, 3, 250, 18, 99, 41], 5
    cfg = preset("tiny")
    src = random_model("llama", dim=64, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=96, vocab=260, seed=11,
                       max_seq=32)
    model = read_gguf(write_gguf(src, tmp_path / "m.gguf", kind))
    art = compile_model(model, cfg, page=16, max_seq=32, prefill_chunk=4, weights="int4")
    assert kind in art.manifest["stats"]["decode"]["stream_bytes_by_format"]
    golden, m_g, rtl, m_r = _golden_and_fast_rtl(art, cfg, build_dir, prompt, n)
    ref = QuantRunner(quantize_model(model, max_seq=32, weights="int4"), page=art.page)
    logits, want = ref.prefill(prompt), []
    for _ in range(n):
        want.append(int(np.argmax(np.asarray(logits).reshape(-1, model.config.vocab_size)[-1])))
        logits = ref.decode(want[-1])
    print(f"\n{kind}: tokens {rtl}; decode {m_r.decode.cycles} cycles, {m_r.decode.dma_rd_bytes} bytes read")
    assert rtl == golden == want
    assert (m_r.prefill.instrs, m_r.decode.instrs) == (m_g.prefill.instrs, m_g.decode.instrs)
    assert (m_r.prefill.dma_rd_bytes, m_r.decode.dma_rd_bytes) == (m_g.prefill.dma_rd_bytes, m_g.decode.dma_rd_bytes)


def test_batched_decode_on_rtl_gives_each_sequence_its_golden_logits(build_dir):
    """A decode_batch run of 3 sequences at different positions (one on its second KV page) on the RTL (the C++
    harness, 20% stalls): every row's logits equal the golden run of that sequence alone, and the counters agree."""
    import numpy as np

    cfg = preset("tiny")
    model = random_model("llama", dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=40, vocab=260, seed=9,
                         max_seq=32)
    art = compile_model(model, cfg, page=8, max_seq=32, prefill_chunk=4, batch=3)
    prompts = [[7, 3], [250, 18, 99, 5, 6, 7, 8, 9, 10], [11, 12, 13, 14]]

    def prefilled(dev):
        rt = Runtime(art, dev)
        seqs = [rt.new_sequence() for _ in prompts]
        for s, p in zip(seqs, prompts, strict=True):
            rt.prefill(s, p)
        return rt, seqs

    alone = []
    for i, p in enumerate(prompts):
        rt = Runtime(art, open_device("golden", cfg, dram_bytes=art.dram_bytes + 8192))
        s = rt.new_sequence()
        rt.prefill(s, p)
        alone.append(rt.decode(s, 40 + i)[0])
    rt_g, seqs_g = prefilled(open_device("golden", cfg, dram_bytes=art.dram_bytes + 8192))
    lg_g, st_g = rt_g.decode_batch(seqs_g, [40, 41, 42])
    rt_r, seqs_r = prefilled(open_device("rtl", cfg, dram_bytes=art.dram_bytes + 8192, build_dir=build_dir,
                                         stall_percent=20))
    lg_r, st_r = rt_r.decode_batch(seqs_r, [40, 41, 42])
    np.testing.assert_array_equal(lg_r, lg_g)
    np.testing.assert_array_equal(lg_g, np.stack(alone))
    assert (st_r.instrs, st_r.dma_rd_bytes, st_r.dma_wr_bytes) == (st_g.instrs, st_g.dma_rd_bytes, st_g.dma_wr_bytes)
    assert st_r.cycles > 0


@pytest.mark.parametrize("kind, region", [("read", "weights"), ("write", "logits")])
def test_bus_error_during_generation_raises_bus_error(build_dir, kind, region):
    """An AXI SLVERR on a weight read or on the logits write stops the run: the runtime raises BusError
    naming the faulting instruction, a GEMM_STREAM (the weight ports) or a STORE (the C++ DRAM model injects
    the error)."""
    from systolica.isa import decode as decode_word
    from systolica.sim.faults import BusError, SimFault

    cfg = preset("tiny")
    model = random_model("llama", dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=40, vocab=260, seed=9,
                         max_seq=32)
    art = compile_model(model, cfg, page=16, max_seq=32, prefill_chunk=4)
    dev = open_device("rtl", cfg, dram_bytes=2 * (art.dram_bytes + 8192), build_dir=build_dir)  # room for two
    rt = Runtime(art, dev)
    r = art.region(region)
    lo = rt.window.physical_address + r["offset"]
    dev.slverr = {kind: (lo + 16, lo + 32)}
    with pytest.raises(BusError) as e:
        list(rt.generate(PROMPT, N, stop=[]))
    assert isinstance(e.value, SimFault) and e.value.fault.name == "BUS_ERROR"
    op = decode_word(art.programs["prefill"].words[e.value.pc]).op  # the first run (prefill) faulted
    assert op == ("GEMM_STREAM" if kind == "read" else "STORE"), (op, str(e.value))
    dev.slverr = {}  # the device runs cleanly afterwards: the same tokens as a fresh golden run
    golden = [s.token for s in Runtime(art, open_device("golden", cfg, dram_bytes=art.dram_bytes + 8192))
              .generate(PROMPT, N, stop=[])]
    assert [s.token for s in Runtime(art, dev).generate(PROMPT, N, stop=[])] == golden
