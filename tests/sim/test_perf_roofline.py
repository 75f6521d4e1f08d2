"""Roofline arithmetic, model work per token, and board timing parameters."""

from __future__ import annotations

import pytest

from systolica.config import preset
from systolica.isa import encode, make
from systolica.model import ModelConfig
from systolica.sim.perf import PerfModel
from systolica.sim.roofline import Roofline, board_params, model_work


def test_roofs_of_a_config():
    cfg = preset("default")  # 8x8, one 64-bit port, 100 MHz
    r = Roofline.for_config(cfg)
    assert r.peak_macs_per_s == pytest.approx(64 * 100e6)
    assert r.dram_bytes_per_s == pytest.approx(8 * 100e6) == r.port_bytes_per_s
    capped = Roofline.for_config(cfg, dram_gbps=0.5, clock_mhz=200)
    assert capped.port_bytes_per_s == pytest.approx(1.6e9) and capped.dram_bytes_per_s == pytest.approx(0.5e9)
    assert capped.peak_macs_per_s == pytest.approx(64 * 200e6)
    assert capped.ridge_macs_per_byte == pytest.approx(64 * 200e6 / 0.5e9)
    assert capped.attainable_macs_per_s(1.0) == pytest.approx(0.5e9)  # memory bound below the ridge
    assert capped.attainable_macs_per_s(1e6) == pytest.approx(capped.peak_macs_per_s)
    with pytest.raises(ValueError, match="dram_gbps"):
        Roofline.for_config(cfg, dram_gbps=0)


def test_model_work_counts_weights_and_attention():
    c = ModelConfig(arch="llama", dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96, vocab_size=100)
    w = model_work(c)
    per_layer = 64 * 64 * 2 + 64 * 32 * 2 + 64 * 96 * 3
    assert w.matmul_macs == 2 * per_layer + 100 * 64 == w.weight_bytes
    assert w.kv_bytes_per_position == 2 * 2 * 32
    assert w.decode_bytes(10) == w.weight_bytes + 10 * 128
    assert w.macs_per_token(10) == w.matmul_macs + 10 * 2 * 2 * 4 * 16
    gpt = model_work(ModelConfig(arch="gpt2", dim=64, n_layers=1, n_heads=4, n_kv_heads=4, ffn_dim=256,
                                 vocab_size=10), weight_bytes=12345)
    assert gpt.weight_bytes == 12345 and gpt.matmul_macs == 64 * 64 * 4 + 64 * 256 * 2 + 640


def test_bounds_are_bandwidth_over_bytes_and_peak_over_macs():
    cfg = preset("default")
    r = Roofline.for_config(cfg, dram_gbps=0.4)
    c = ModelConfig(arch="llama", dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96, vocab_size=100)
    w = model_work(c)
    assert r.decode_bound_tokens_per_s(w) == pytest.approx(0.4e9 / w.weight_bytes)
    assert r.prefill_bound_tokens_per_s(w, 5) == pytest.approx(r.peak_macs_per_s / w.macs_per_token(5))


def test_board_params_and_the_model_never_beat_the_roof():
    cfg = preset("default")
    p = board_params(cfg, dram_gbps=0.4, clock_mhz=200, latency_ns=100)
    assert p.rd_latency == 20
    assert p.beat_cycles == pytest.approx(8 / (0.4e9 / 200e6))  # 8-byte port, 2 bytes a cycle from DRAM
    nbytes = 1 << 16
    prog = [encode(make("LOAD", buf=0, sram=0, dram=0, rows=1, lines=nbytes // cfg.cols, stride=nbytes)),
            encode(make("FINISH"))]
    cyc = PerfModel(cfg, p).run(prog).cycles
    achieved = nbytes / (cyc / 200e6)
    assert achieved <= Roofline.for_config(cfg, dram_gbps=0.4, clock_mhz=200).dram_bytes_per_s
    assert achieved > 0.9 * 0.4e9
    with pytest.raises(ValueError, match="dram_gbps"):
        board_params(cfg, dram_gbps=-1)


@pytest.mark.parametrize("name, roof, limit", [("kv260", 12.8e9, "pl ports"), ("pynq-z2", 1.575e9, "dram")])
def test_board_bandwidth_of_the_board_files(name, roof, limit):
    """min(DRAM peak x efficiency, PL ports x port bits / 8 x clock) from boards/<name>.toml."""
    from systolica.boards.board import load_board
    from systolica.sim.roofline import board_bandwidth

    b = load_board(name)
    bw = board_bandwidth(dram_peak_gbps=b.dram_peak_gbps, dram_efficiency=b.dram_efficiency, pl_ports=b.pl_ports,
                         pl_port_bits=b.pl_port_bits, clock_mhz=b.config.clock_mhz)
    assert bw["roof"] == pytest.approx(roof) and bw["limit"] == limit
    if name == "kv260":  # min(19.2 x 0.8, 4 x 128 / 8 x 200 MHz): the four HP ports, not the DDR4
        assert bw["dram"] == pytest.approx(19.2e9 * 0.8) and bw["pl"] == pytest.approx(4 * 16 * 200e6)
    else:  # min(2.1 x 0.75, 4 x 64 / 8 x 100 MHz): the 16-bit DDR3
        assert bw["dram"] == pytest.approx(2.1e9 * 0.75) and bw["pl"] == pytest.approx(4 * 8 * 100e6)
    assert bw["pl"] == pytest.approx(b.pl_bandwidth_computed_gbps * 1e9)  # the board module's own figure
    half = board_bandwidth(dram_peak_gbps=b.dram_peak_gbps, dram_efficiency=b.dram_efficiency, pl_ports=b.pl_ports,
                           pl_port_bits=b.pl_port_bits, clock_mhz=b.config.clock_mhz / 4)
    assert half["pl"] == pytest.approx(bw["pl"] / 4) and half["roof"] == min(half["pl"], half["dram"])
    r = Roofline.for_config(b.config, dram_gbps=bw["roof"] / 1e9)
    assert r.stream_bytes_per_s == pytest.approx(b.config.dma_ports * b.config.dma_bytes * b.config.clock_mhz * 1e6)
    with pytest.raises(ValueError, match="efficiency"):
        board_bandwidth(dram_peak_gbps=2.1, dram_efficiency=1.5, pl_ports=4, pl_port_bits=64, clock_mhz=100)


def test_weight_ports_never_read_faster_than_the_board_dram():
    """pynq-z2: two 64-bit ports at 100 MHz (16 B a cycle) over a DRAM of 1.575 GB/s (15.75 B a cycle): a decode
    GEMV's GEMM_STREAM costs at least its bytes at the DRAM's rate with board parameters, and the ports' rate
    without them; the cached and the reference model agree."""
    from systolica.boards.board import load_board
    from systolica.isa import encode, make
    from systolica.sim.perf import PerfModel
    from systolica.sim.perf_costs import PerfParams
    from systolica.sim.roofline import board_params

    b = load_board("pynq-z2")
    cfg = b.config
    n, k = 96, 72
    words = [encode(make("GEMM_STREAM", dst=0, a=0, w=0, m=1, k=k, n=n, acc=0)), encode(make("FINISH"))]
    nbytes = n * k * cfg.cols * cfg.cols
    board = board_params(cfg, dram_gbps=b.dram_peak_gbps * b.dram_efficiency)
    assert board.dram_bytes_per_cycle == pytest.approx(15.75)
    slow = PerfModel(cfg, board).run(words).cycles
    assert slow >= nbytes / 15.75
    assert PerfModel(cfg, board, cache=False).run(words).cycles == slow
    fast = PerfModel(cfg, PerfParams(rd_latency=board.rd_latency)).run(words).cycles
    assert nbytes / 16 <= fast < slow
    with pytest.raises(ValueError, match="dram_bytes_per_cycle"):
        PerfParams(dram_bytes_per_cycle=-1.0)
