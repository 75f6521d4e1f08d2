"""Weight bytes per cycle of a decode GEMV (GEMM_STREAM, m = 1) on the Verilated accelerator.

    python -m systolica.bench.stream_rate --board kv260 [--n 96 --k 36] [--latency 100]

Runs one program with a GEMM_STREAM of ``n`` output lines x ``k`` K lines on the fast RTL harness and the
same program without it, and reports ``DMA_RD_BYTES`` / ``CYCLES`` of the difference (RTL counters) beside
the ports' peak (``dma_ports x dma_bytes``); the result is checked bit for bit against the golden simulator.
``--latency``: cycles of DRAM read latency in the harness's DRAM model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from systolica import wstream
from systolica.config import AccelConfig, preset
from systolica.isa import encode, make

__all__ = ["measure", "main"]


def _config(name: str) -> AccelConfig:
    if name in ("tiny", "default", "large"):
        return preset(name)
    from systolica.boards.board import board_config
    return board_config(name)


def measure(cfg: AccelConfig, n: int, k: int, *, latency: int = 0, build_dir: Path | None = None) -> dict:
    """``{"bytes", "cycles", "bytes_per_cycle", "peak", "fraction", "exact"}`` of one GEMV of ``n`` x ``k`` lines."""
    from systolica.sim.fast_harness import FastRtl
    from systolica.sim.golden import GoldenSim

    c = cfg.cols
    win_base, win_size = 0x10000, 1 << 24
    w_at, a_at, out_at = 0x100000, 0x2000, 0x40000
    need = w_at + wstream.port_span(wstream.port_bytes(n, k, cfg) + 4096, cfg)
    if need > win_size:
        raise ValueError(f"a GEMV of {n} x {k} lines needs {need:#x} bytes of window; at most {win_size:#x}")
    dram = np.zeros(win_base + win_size, np.uint8)
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (n * c, k * c), dtype=np.int8)
    wstream.scatter(dram[win_base:], w_at, wstream.port_streams(w, cfg), cfg)
    a = rng.integers(-128, 128, (1, k * c), dtype=np.int8)
    dram[win_base + a_at:win_base + a_at + a.size] = a.view(np.uint8).ravel()
    fr = FastRtl(cfg, build_dir or Path.home() / ".cache" / "systolica" / "rtl")
    counters, exact = {}, True
    for stream in (False, True):
        body = make("GEMM_STREAM", dst=0, a=0, w=w_at, m=1, k=k, n=n, acc=0, pop_prev=True, push_next=True) \
            if stream else make("NOP", engine=1, pop_prev=True, push_next=True)
        words = [encode(i) for i in (
            make("LOAD", buf=0, sram=0, dram=a_at, rows=1, lines=k, stride=k * c, push_next=True), body,
            make("STORE", buf=1, sram=0, dram=out_at, rows=1, lines=n, stride=n * c * 4, pop_prev=True),
            make("FINISH"))]
        d = dram.copy()
        code = b"".join(int(x).to_bytes(16, "little") for x in words)
        d[win_base:win_base + len(code)] = np.frombuffer(code, np.uint8)
        gold = d.copy()
        GoldenSim(cfg, gold, window_base=win_base, window_size=win_size).run(words)
        res = fr.run(d, window_base=win_base, window_size=win_size, prog_base=0, prog_len=len(words),
                     max_cycles=50_000_000, dram_latency=latency)
        exact &= bool(np.array_equal(d, gold)) and res.code.name == "NONE"
        counters[stream] = res.counters
    cyc = counters[True]["CYCLES"] - counters[False]["CYCLES"]
    byt = counters[True]["DMA_RD_BYTES"] - counters[False]["DMA_RD_BYTES"]
    peak = cfg.dma_ports * cfg.dma_bytes
    return {"bytes": byt, "cycles": cyc, "bytes_per_cycle": byt / cyc, "peak": peak, "fraction": byt / cyc / peak,
            "exact": exact}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m systolica.bench.stream_rate", description=__doc__.splitlines()[0])
    ap.add_argument("--board", default="kv260", help="board preset or config preset (default kv260)")
    ap.add_argument("--n", type=int, default=96, help="output lines of the GEMV (default 96: SmolLM2's ffn 1536 / 16)")
    ap.add_argument("--k", type=int, default=36, help="K lines of the GEMV (default 36: dim 576 / 16)")
    ap.add_argument("--latency", type=int, default=0, help="DRAM read latency in cycles (default 0)")
    args = ap.parse_args(argv)
    cfg = _config(args.board)
    r = measure(cfg, args.n, args.k, latency=args.latency)
    print(f"{args.board}: {cfg.rows}x{cfg.cols}, {cfg.dma_ports} x {cfg.dma_bits}-bit ports, DRAM latency "
          f"{args.latency} cycles; GEMV {args.n} x {args.k} lines: {r['bytes']} weight bytes in {r['cycles']} cycles "
          f"= {r['bytes_per_cycle']:.2f} B/cycle of {r['peak']} ({100 * r['fraction']:.1f}%) [RTL counters]; "
          f"bit-exact vs golden: {r['exact']}")
    return 0 if r["exact"] else 3


if __name__ == "__main__":
    sys.exit(main())
