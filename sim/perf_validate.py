"""Validate the performance model against the RTL top level's cycle counters.

``python -m systolica.sim.perf_validate [--config tiny] [--random 20] [--json out.json]`` builds (or reuses)
the Verilator model of :class:`systolica.hw.accelerator.Accelerator`, runs a suite of programs on it
(GEMMs of growing K, DMA-bound loads and stores, double-buffered weight streaming, token-serialized
random programs), and sets each program's CYCLES beside the model's prediction.  It prints the error
distribution and the speed of the model relative to the RTL simulation.

:func:`compiled_programs` adds a compiled model's decode steps and prefill (with the artifact's DRAM
image) for :func:`run_fast`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from systolica.config import AccelConfig, load_config
from systolica.isa import Engine, encode, make
from systolica.sim.perf import PerfModel
from systolica.sim.perf_costs import PerfParams

__all__ = ["suite", "compiled_programs", "run_rtl", "run_fast", "compare", "summarize", "RTL_PARAMS", "main"]

#: Timing of the cocotb testbench's AxiRam behind the ports: the PerfParams defaults were fitted on this
#: suite (a grid over read/write latency, address gap, burst turnaround, fetch latency, store tail).
RTL_PARAMS = PerfParams()

_DATA_LO = 0x1_0000


def _finish(instrs) -> list[int]:
    return [encode(i) for i in instrs] + [encode(make("FINISH"))]


def vector_cases() -> list[tuple[str, int, int]]:
    """(op, rows, lines) of the vector-unit programs: the ops the RTL runs, small to long."""
    return [(op, r, n) for op in ("ADD", "MUL", "REQUANT", "ARGMAX", "SILU", "GELU") for r, n in ((1, 4), (4, 16), (8, 32))]


def _vector_instr(cfg: AccelConfig, op: str, rows: int, lines: int):
    big = rows * lines
    if op in ("ADD", "MUL"):
        return make(op, dst=0, a=big, b=2 * big, rows=rows, lines=lines, **({"shift": 8} if op == "MUL" else {}))
    if op == "REQUANT":
        return make(op, dst=0, src=0, mult=big, exps=0, rows=rows, lines=lines, shift=4)
    if op == "ARGMAX":
        return make(op, dst=0, src=big, rows=rows, n=lines * cfg.cols)
    return make(op, dst=0, src=big, rows=rows, lines=lines)


def suite(cfg: AccelConfig, n_random: int = 12, seed: int = 3) -> list[dict]:
    """Programs ``[{"name", "words"}]`` covering the model's rules; data lives at ``_DATA_LO`` and above."""
    from systolica import wstream4
    from systolica.numerics_int4 import GROUP
    from systolica.sim.accel_programs import random_program, serialize, weight_stream_program

    c, out = cfg.cols, []
    d = _DATA_LO
    for k in (1, 2, 4, 8, 16):  # GEMM cycles grow with K
        n = 2
        prog = [make("LOAD", buf=0, sram=0, dram=d, rows=3, lines=k, stride=k * c),
                make("LOAD", buf=0, sram=256, dram=d + 0x4000, rows=n * c, lines=k, stride=k * c, push_next=True),
                make("GEMM", dst=0, a=0, w=256, m=3, k=k, n=n, acc=0, pop_prev=True, push_next=True),
                make("STORE", buf=1, sram=0, dram=d + 0x8000, rows=3, lines=n, stride=n * c * 4, pop_prev=True)]
        out.append({"name": f"gemm_k{k}", "words": _finish(prog)})
    for lines in (64, 512, 2048):  # DMA bound: bytes / bandwidth
        ld = [make("LOAD", buf=0, sram=0, dram=d, rows=1, lines=lines, stride=lines * c)]
        out.append({"name": f"load_{lines * c}B", "words": _finish(ld)})
        st = [make("NOP", engine=int(Engine.COMPUTE), push_next=True),
              make("STORE", buf=0, sram=0, dram=d + 0x2_0000, rows=1, lines=lines, stride=lines * c, pop_prev=True)]
        out.append({"name": f"store_{lines * c}B", "words": _finish(st)})
    ld = [make("LOAD", buf=1, sram=0, dram=d, rows=16, lines=8, stride=8 * c * 4 + 64)]  # strided, 2-D
    out.append({"name": "load_strided", "words": _finish(ld)})
    for k_lines, n_lines, n_tiles in ((16, 2, 8), (8, 1, 16), (32, 2, 6), (4, 4, 10), (32, 2, 48)):
        prog = weight_stream_program(cfg, k_lines=k_lines, n_tiles=n_tiles, n_lines=n_lines, w_dram=d + 0x1000,
                                     a_dram=d, out_dram=d + 0x800)
        out.append({"name": f"stream_k{k_lines}_n{n_lines}_t{n_tiles}", "words": [encode(i) for i in prog]})
    if wstream4.config_problem(cfg) is None:  # 4-bit weight streams: scale and code sections, the group scaler
        group = GROUP // c  # K lines a group of 32 weights
        for fmt, m, groups, n in ((1, 1, 4, 8), (2, 1, 4, 8), (2, 1, 1, 24), (1, 8, 2, 4), (2, 16, 2, 2)):
            k = groups * group
            prog = serialize([
                make("LOAD", buf=0, sram=0, dram=d, rows=1, lines=m * k, stride=m * k * c),
                make("GEMM_STREAM", dst=0, a=0, w=d + 0x1000, m=m, k=k, n=n, wfmt=fmt, gshift=3),
                make("STORE", buf=1, sram=0, dram=d + 0x8000, rows=1, lines=m * n, stride=m * n * c * 4)])
            out.append({"name": f"stream_q4_{fmt}_m{m}_g{groups}_n{n}", "words": _finish(prog)})
    for op, rows, lines in vector_cases():  # one line a cycle through the vector / activation units
        out.append({"name": f"{op.lower()}_{rows}x{lines}", "words": _finish([_vector_instr(cfg, op, rows, lines)])})
    for op in ("RMSNORM", "LAYERNORM"):  # the norm unit's passes, its scalar states and its output pipeline
        for rows, lines in ((1, 4), (4, 16), (2, 40)):
            big = rows * lines
            ins = make(op, dst=0, src=big, gamma=2 * big, rows=rows, n=lines * cfg.cols, eps=43)
            out.append({"name": f"{op.lower()}_{rows}x{lines}", "words": _finish([ins])})
    for nq, hd, t in ((1, 1, 16), (3, 2, 16), (5, 2, 8), (4, 1, 15), (2, 2, 0), (5, 1, 0), (9, 1, 16)):
        # GQA groups of several rows (jobs of attn_rows rows through each tile), two tiles and the finish
        kv = [dict(q=0, qexp=256, kv=512 + 128 * j, state=0, nq=nq, hd=hd, t=t, page_log2=4, offset=20, causal=1,
                   init=int(j == 0)) for j in range(2)]
        prog = [make("ATTN", **f) for f in kv] + [make("ATTN_OUT", dst=nq * (hd + 1), state=0, nq=nq, hd=hd)]
        out.append({"name": f"attn_nq{nq}_hd{hd}_t{t}", "words": _finish(prog)})
    rng = np.random.default_rng(seed)
    for i in range(n_random):
        rp = random_program(cfg, rng, n_ops=int(rng.integers(4, 20)), data_lo=d, data_hi=d + 0x4000,
                            win_size=0x8_0000)
        out.append({"name": f"random_{i}", "words": rp.words})
    return out


def compiled_programs(art) -> list[dict]:
    """The decode steps (positions 3 and 17: one and two KV tiles) and a prefill chunk of a compiled artifact
    (:class:`systolica.artifact.Artifact`), with its DRAM image and where its program region lies (``image``,
    ``prog_base``, ``window``), for :func:`run_fast`.  The caller compiles (sim does not import the compiler)."""
    from systolica.artifact import StepState

    window = 1 << int(art.dram_bytes - 1).bit_length()
    out = []
    for kind, pos in (("decode", 3), ("decode", 17), ("prefill", 0)):
        rows = art.rows(kind)
        words = art.patched_program(kind, StepState(pos, [1] * rows, list(range(art.pages_needed(pos, rows)))))
        out.append({"name": f"compiled_{kind}_pos{pos}", "words": words, "image": art.image, "window": window,
                    "prog_base": art.region(f"program:{kind}")["offset"]})
    if "decode_batch" in art.programs:  # a batched step: every row its own sequence, at 3, 17, 9, ... on own pages
        rows = art.rows("decode_batch")
        pos = [(3, 17, 9, 30)[r % 4] for r in range(rows)]
        tables, nxt = [], 0
        for p in pos:
            n = art.pages_needed(p, 1)
            tables.append(list(range(nxt, nxt + n)))
            nxt += n
        words = art.patched_program("decode_batch", StepState(0, [1] * rows, [], rows=list(zip(pos, tables,
                                                                                             strict=True))))
        out.append({"name": f"compiled_decode_batch{rows}", "words": words, "image": art.image, "window": window,
                    "prog_base": art.region("program:decode_batch")["offset"]})
    return out


def run_rtl(cfg: AccelConfig, programs: list[dict], build_root: str | Path) -> list[dict]:
    """Run ``programs`` on the Verilator build of the top level; returns the per-program runs."""
    from systolica.hw.accelerator import Accelerator
    from systolica.sim.rtl_build import build

    # deps=None: every file of hw/ is part of the cache key, so any change to the hardware rebuilds
    b = build("systolica_accel", lambda: Accelerator(cfg), {"cfg": cfg.to_dict()}, build_root)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([{"name": p["name"], "words": [f"{w:x}" for w in p["words"]]} for p in programs], f)
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:  # cocotb's runner passes this process's sys.path on to the simulator's Python
        sys.path.insert(0, here)
    res = b.run("perf_rtl_tb", here, params={"cfg": cfg.to_dict(), "programs": f.name},
                testcase="perf_counters")
    runs = res.metrics.get("runs")
    if not runs:
        raise RuntimeError(f"the RTL run wrote no counters; see {res.results_xml}")
    return runs


def run_fast(cfg: AccelConfig, programs: list[dict], build_root: str | Path) -> list[dict]:
    """Run ``programs`` on :class:`systolica.sim.fast_harness.FastRtl` (Verilator + C++ DRAM model): the
    fastest RTL path.  ``wall_s`` is the simulation time inside the harness (no process start-up)."""
    from systolica.sim.fast_harness import FastRtl
    from systolica.sim.perf_rtl_tb import DATA_HI, DATA_LO, MEM, WIN_BASE, WIN_SIZE

    fast = FastRtl(cfg, build_root)
    data = np.random.default_rng(5).integers(0, 256, DATA_HI - DATA_LO, dtype=np.uint8)
    runs = []
    for p in programs:
        raw = np.frombuffer(b"".join(int(w).to_bytes(16, "little") for w in p["words"]), np.uint8)
        if "image" in p:  # a compiled program: its own window, image and program region (compiled_programs)
            dram = np.zeros(p["window"], np.uint8)
            dram[:len(p["image"])] = p["image"]
            dram[p["prog_base"]:p["prog_base"] + len(raw)] = raw
            r = fast.run(dram, window_base=0, window_size=p["window"], prog_base=p["prog_base"],
                         prog_len=len(p["words"]))
        else:
            dram = np.zeros(MEM, np.uint8)
            dram[WIN_BASE + DATA_LO:WIN_BASE + DATA_HI] = data
            dram[WIN_BASE:WIN_BASE + len(raw)] = raw
            r = fast.run(dram, window_base=WIN_BASE, window_size=WIN_SIZE, prog_base=0, prog_len=len(p["words"]))
        runs.append({"name": p["name"], "code": int(r.code), "timed_out": not r.done, "counters": r.counters,
                     "wall_s": r.wall_s})
    return runs


def compare(cfg: AccelConfig, programs: list[dict], runs: list[dict], params: PerfParams = RTL_PARAMS) -> list[dict]:
    """Model vs RTL per program: cycles, relative error, busy counters, and the model's own time."""
    rows = []
    by_name = {r["name"]: r for r in runs}
    for p in programs:
        r = by_name[p["name"]]
        t0 = time.perf_counter()
        pred = PerfModel(cfg, params).run(p["words"])  # a fresh model: no cached decodes
        model_s = time.perf_counter() - t0
        rc = r["counters"]
        rows.append({"name": p["name"], "words": [f"{w:032x}" for w in p["words"]],
                     "instructions": len(p["words"]), "rtl_cycles": rc["CYCLES"],
                     "model_cycles": pred.cycles, "error": (pred.cycles - rc["CYCLES"]) / rc["CYCLES"],
                     "rtl": {k: rc[k] for k in ("LOAD_BUSY", "COMPUTE_BUSY", "STORE_BUSY", "ARRAY_BUSY",
                                                "DMA_BEATS")},
                     "model": pred.counters(), "rtl_wall_s": r["wall_s"], "model_s": model_s})
    return rows


def summarize(rows: list[dict]) -> dict:
    """Error distribution (absolute relative error) and speed-up over the RTL simulation."""
    errs = [abs(r["error"]) for r in rows]
    speed = [r["rtl_wall_s"] / r["model_s"] for r in rows if r["model_s"] > 0]
    return {"programs": len(rows), "mean_abs_error": statistics.fmean(errs), "median_abs_error": statistics.median(errs),
            "max_abs_error": max(errs), "within_5pct": sum(e <= 0.05 for e in errs),
            "worst": max(rows, key=lambda r: abs(r["error"]))["name"],
            "rtl_cycles_per_s": sum(r["rtl_cycles"] for r in rows) / sum(r["rtl_wall_s"] for r in rows),
            "speedup_median": statistics.median(speed), "speedup_total": sum(r["rtl_wall_s"] for r in rows) /
            sum(r["model_s"] for r in rows)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m systolica.sim.perf_validate", description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="tiny", help="accelerator preset or TOML (default: tiny)")
    ap.add_argument("--random", type=int, default=12, help="random token-serialized programs (default 12)")
    ap.add_argument("--seed", type=int, default=3, help="seed of the random programs (default 3)")
    ap.add_argument("--build-dir", default="build", help="Verilator build cache (default: ./build)")
    ap.add_argument("--fast", action="store_true",
                    help="run on the fast harness (Verilator + C++ DRAM model) instead of cocotb")
    ap.add_argument("--json", help="write every program's figures here")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    progs = suite(cfg, args.random, args.seed)
    runs = (run_fast if args.fast else run_rtl)(cfg, progs, args.build_dir)
    rows = compare(cfg, progs, runs)
    for r in rows:
        print(f"{r['name']:24s} {r['instructions']:4d} instr  RTL {r['rtl_cycles']:7d}  model {r['model_cycles']:7d}"
              f"  error {100 * r['error']:+6.2f}%")
    s = summarize(rows)
    print(json.dumps(s, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": s, "programs": rows}, indent=1))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
