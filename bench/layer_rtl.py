"""One SmolLM2-shaped transformer layer, compiled for a board preset, decoded on the Verilated accelerator.

    python -m systolica.bench.layer_rtl --board kv260 --context 256 --latency 100

Compiles a one-block llama with SmolLM2-135M's shapes (dim 576, 9 query / 3 KV heads of 64, ffn 1536; a small
vocabulary so that the layer, not the LM head, is what is timed) for the board's accelerator, runs the decode
step at position ``--context`` on the fast RTL harness (Verilator + C++ DRAM model with ``--latency`` cycles of
read latency), and prints the RTL counters -- ``DMA_RD_BYTES / CYCLES`` beside the ports' peak
(``dma_ports x dma_bytes``) and the weight bytes per cycle -- beside the cycle performance model of the same
program at the same DRAM latency.  The run is checked bit for bit against the golden simulator.

``--prefill`` runs the compiler's prefill chunk from position ``--context`` instead and prints the array's
utilization; ``--prefill --prompt N`` runs every whole chunk of an N-token prompt from position 0, one after
another (``python -m systolica.bench.layer_rtl --board kv260 --prefill --prompt 128``), and sums them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from systolica.config import AccelConfig

__all__ = ["run_layer", "main"]

SMOLLM2_LAYER = dict(arch="llama", dim=576, n_layers=1, n_heads=9, n_kv_heads=3, ffn_dim=1536, vocab=256, seed=3)


def run_layer(cfg: AccelConfig, context: int, *, latency: int = 100, build_dir: Path | None = None,
              say=print, model=None, batch: int = 1, weights: str = "int8", page: int | None = None,
              prefill: bool = False) -> dict:
    """RTL and model figures of the decode step at position ``context`` (see the module docstring).

    ``model``: a :class:`~systolica.model.Model` to decode instead of the one SmolLM2-shaped layer (for
    example the whole SmolLM2, ``--model default``).  ``batch`` > 1: the batched decode step of that many
    sequences, every one at ``context`` on its own KV pages.  ``weights``: ``compile_model``'s matrix format
    (``"auto"`` or ``"int4"``: the 4-bit GEMM_STREAMs of a Q4 checkpoint; the one layer is float, so int4 there
    quantizes it to 4-bit groups).  ``page``: the KV page in tokens (``None``, the default: the compiler's choice, as
    ``systolica compile`` / ``run`` / ``bench`` make it; docs/performance.md's figures since 2026-12-05 are at it).
    ``prefill``: instead of a decode step, the prefill chunk the compiler chose (``prefill_nohead``, its rows)
    starting at position ``context``."""
    from systolica.artifact import StepState
    from systolica.compiler.compile import compile_model
    from systolica.compiler.kv_page import page_and_context
    from systolica.sim.fast_harness import FastRtl
    from systolica.sim.golden import GoldenSim
    from systolica.sim.perf import PerfModel
    from systolica.sim.perf_costs import PerfParams
    from systolica.testmodels import random_model

    what = "the model" if model is not None else "a SmolLM2-shaped layer"
    need = context + (16 if prefill else 1)  # positions the run writes (a prefill chunk is at most 16 rows)
    if model is None:  # positions for whole pages of the page asked for, or of the largest the compiler chooses
        room = page or 64
        model = random_model(**SMOLLM2_LAYER, max_seq=-(-need // room) * room)
    page, max_seq = page_and_context(cfg, model.config, need, page)
    say(f"compiling {what} for {cfg.name} (context {context}, KV page {page})")
    art = compile_model(model, cfg, page=page, max_seq=max_seq, prefill_chunk=16, batch=batch, weights=weights)
    rows = art.rows("prefill_nohead") if prefill else 1
    pages = art.pages_needed(context, rows)
    kind = "prefill_nohead" if prefill else "decode_batch" if batch > 1 else "decode"
    st = (StepState(0, [7 + r for r in range(batch)], [], rows=[(context, list(range(r * pages, (r + 1) * pages)))
                                                               for r in range(batch)])
          if batch > 1 else StepState(context, [7 + r for r in range(rows)], list(range(pages))))
    words = art.patched_program(kind, st)
    window = 1 << int(art.dram_bytes - 1).bit_length()
    dram = np.zeros(window, np.uint8)
    dram[:len(art.image)] = art.image
    rng = np.random.default_rng(1)  # a KV cache of earlier tokens: any int8 data is a valid cache
    kv = art.region("kv")
    dram[kv["offset"]:kv["offset"] + kv["size"]] = rng.integers(0, 256, kv["size"], dtype=np.uint8)
    base = art.region(f"program:{kind}")["offset"]
    raw = np.frombuffer(b"".join(int(w).to_bytes(16, "little") for w in words), np.uint8)
    dram[base:base + len(raw)] = raw
    gold = dram.copy()
    GoldenSim(cfg, gold, window_size=window).run(words)
    say(f"building / running the RTL ({len(words)} instructions, DRAM latency {latency} cycles)")
    fr = FastRtl(cfg, build_dir or Path.home() / ".cache" / "systolica" / "rtl")
    t0 = time.perf_counter()
    res = fr.run(dram, window_base=0, window_size=window, prog_base=base, prog_len=len(words),
                 max_cycles=100_000_000, dram_latency=latency)
    wall = time.perf_counter() - t0
    c = res.counters
    weight_bytes = int(art.manifest["stats"]["decode"].get("stream_bytes", 0))
    model = PerfModel(cfg, PerfParams(rd_latency=latency + 2, wr_latency=latency + 2)).run(words)
    peak = cfg.dma_ports * cfg.dma_bytes
    return {"config": cfg.name, "context": context, "page": page, "latency": latency, "instructions": len(words),
            "batch": batch, "kind": kind, "rows": rows, "array_utilization": c["ARRAY_BUSY"] / c["CYCLES"],
            "model_array_utilization": model.array_busy / model.cycles,
            "weights": weights, "stream_bytes_by_format": art.manifest["stats"]["decode"].get("stream_bytes_by_format"),
            "exact": bool(np.array_equal(dram, gold)) and res.code.name == "NONE", "code": res.code.name,
            "cycles": c["CYCLES"], "dma_rd_bytes": c["DMA_RD_BYTES"], "weight_bytes": weight_bytes,
            "rd_bytes_per_cycle": c["DMA_RD_BYTES"] / c["CYCLES"], "weight_bytes_per_cycle": weight_bytes / c["CYCLES"],
            "peak": peak, "compute_busy": c["COMPUTE_BUSY"], "array_busy": c["ARRAY_BUSY"],
            "model_cycles": model.cycles, "model_error": (model.cycles - c["CYCLES"]) / c["CYCLES"],
            "model_per_op_cycles": model.per_op_cycles, "rtl_wall_s": wall}


def run_prompt(cfg: AccelConfig, prompt: int, *, run=run_layer, say=print, **kw) -> dict:
    """Every whole prefill chunk of a ``prompt``-token prompt from position 0, chunk after chunk (:func:`run_layer`
    with ``prefill=True`` at positions 0, R, 2R, ... while a chunk of R rows fits), and their sums: the array's
    utilization over the prompt on the RTL beside the model's (a shorter last chunk is left out: the compiler runs it
    as another program)."""
    if not (isinstance(prompt, int) and prompt >= 1):
        raise ValueError(f"prompt={prompt!r} must be a positive number of tokens")
    if kw.get("page") is None:  # every chunk on the page the compiler chooses for the whole prompt, as a serving run
        from systolica.compiler.kv_page import choose_page
        from systolica.testmodels import random_model

        model = kw.get("model") or random_model(**SMOLLM2_LAYER, max_seq=-(-(prompt + 16) // 64) * 64)
        kw["page"] = choose_page(cfg, model.config, min(prompt, model.config.max_seq))
    chunks: list[dict] = []
    start = 0
    while True:
        r = run(cfg, start, prefill=True, say=say, **kw)
        if r["rows"] > prompt:
            raise ValueError(f"a prompt of {prompt} tokens is shorter than one prefill chunk ({r['rows']} rows)")
        chunks.append(r)
        start += r["rows"]
        say(f"chunk {len(chunks)} (positions {r['context']}-{start - 1}): {r['cycles']} cycles, array "
            f"{100 * r['array_utilization']:.1f}%, bit-exact {r['exact']}")
        if start + r["rows"] > prompt:
            break
    cycles = sum(r["cycles"] for r in chunks)
    busy = sum(r["array_busy"] for r in chunks)
    model = sum(r["model_cycles"] for r in chunks)
    model_busy = sum(r["model_array_utilization"] * r["model_cycles"] for r in chunks)
    return {"prompt": prompt, "tokens": start, "chunks": len(chunks), "rows": chunks[0]["rows"], "page": kw["page"],
            "cycles": cycles, "array_busy": busy, "array_utilization": busy / cycles, "model_cycles": model,
            "model_array_utilization": model_busy / model, "model_error": (model - cycles) / cycles,
            "exact": all(r["exact"] for r in chunks), "per_chunk": chunks}


def main(argv: list[str] | None = None) -> int:
    from systolica.bench.stream_rate import _config

    ap = argparse.ArgumentParser(prog="python -m systolica.bench.layer_rtl", description=__doc__.splitlines()[0])
    ap.add_argument("--board", default="kv260", help="board preset or config preset (default kv260)")
    ap.add_argument("--context", type=int, default=256, help="position of the decoded token (default 256)")
    ap.add_argument("--latency", type=int, default=100, help="DRAM read latency in cycles (default 100)")
    ap.add_argument("--model", help="decode this model instead of one layer: 'default' (SmolLM2-135M) or a "
                                    "checkpoint path (a whole token of SmolLM2 on kv260 is ~2.5 M cycles)")
    ap.add_argument("--attn-rows", type=int, help="the board preset with this many attention rows (config.attn_rows)")
    ap.add_argument("--page", default="auto",
                    help="KV page in tokens, or 'auto' for the compiler's choice (default auto)")
    ap.add_argument("--batch", type=int, default=1, help="decode this many sequences in one batched step (default 1)")
    ap.add_argument("--weights", choices=("int8", "int4", "auto"), default="int8",
                    help="matrix weights (compile_model's weights; default int8)")
    ap.add_argument("--prefill", action="store_true",
                    help="run the compiler's prefill chunk (its rows) from position --context instead of a decode "
                         "step, and report the array's utilization")
    ap.add_argument("--prompt", type=int,
                    help="with --prefill: every whole chunk of a prompt of this many tokens from position 0, one after "
                         "another, and the array's utilization over all of them (one layer: ~1 minute a chunk)")
    args = ap.parse_args(argv)
    if args.prompt is not None and not args.prefill:
        ap.error("--prompt needs --prefill")
    cfg = _config(args.board)
    if args.attn_rows is not None:
        cfg = cfg.replace(name=f"{cfg.name}_a{args.attn_rows}", attn_rows=args.attn_rows)
    model = None
    if args.model:
        from systolica.compiler.frontend import load_model
        from systolica.compiler.model_zoo import fetch_default_model
        model = load_model(fetch_default_model(verbose=False) if args.model == "default" else args.model)
    what = (f"model {args.model}" if args.model else "one SmolLM2-shaped layer") + f", {args.weights} weights" + \
        (f", {args.batch} sequences in one batched step" if args.batch > 1 else "")
    kw = dict(latency=args.latency, say=lambda s: print(s, file=sys.stderr), model=model, batch=args.batch,
              weights=args.weights, page=None if args.page == "auto" else int(args.page))
    if args.prompt is not None:
        p = run_prompt(cfg, args.prompt, **kw)
        print(f"{args.board}: {what}, prefill of the first {p['tokens']} tokens of a {p['prompt']}-token prompt "
              f"({p['chunks']} chunks of {p['rows']} rows, KV page {p['page']}), DRAM latency {args.latency} cycles [RTL counters]: "
              f"{p['cycles']} cycles, array busy {p['array_busy']} ({100 * p['array_utilization']:.1f}%); bit-exact "
              f"vs golden: {p['exact']}")
        print(f"  performance model of the same programs: {p['model_cycles']} cycles ({100 * p['model_error']:+.1f}% "
              f"vs RTL), array {100 * p['model_array_utilization']:.1f}%")
        return 0 if p["exact"] else 3
    r = run_layer(cfg, args.context, prefill=args.prefill, **kw)
    if args.prefill:
        print(f"{args.board}: {what}, prefill chunk of {r['rows']} rows from position {r['context']} (KV page "
              f"{r['page']}), DRAM latency {r['latency']} cycles, {r['instructions']} instructions [RTL counters]: "
              f"{r['cycles']} cycles, array busy {r['array_busy']} ({100 * r['array_utilization']:.1f}%); "
              f"bit-exact vs golden: {r['exact']}")
        print(f"  performance model of the same program: {r['model_cycles']} cycles ({100 * r['model_error']:+.1f}% "
              f"vs RTL), array {100 * r['model_array_utilization']:.1f}%")
        return 0 if r["exact"] else 3
    print(f"{args.board}: {what}, decode at context {r['context']} (KV page {r['page']}), DRAM latency {r['latency']} "
          f"cycles, {r['instructions']} instructions [RTL counters]: {r['cycles']} cycles, "
          f"DMA_RD_BYTES/CYCLES = {r['rd_bytes_per_cycle']:.2f} B/cycle of {r['peak']} "
          f"({100 * r['rd_bytes_per_cycle'] / r['peak']:.1f}%), weights {r['weight_bytes_per_cycle']:.2f} B/cycle "
          f"({100 * r['weight_bytes_per_cycle'] / r['peak']:.1f}%), compute busy {r['compute_busy']}, "
          f"array busy {r['array_busy']}; bit-exact vs golden: {r['exact']}")
    print(f"  performance model of the same program: {r['model_cycles']} cycles ({100 * r['model_error']:+.1f}% vs RTL); "
          f"per op: {dict(sorted(r['model_per_op_cycles'].items(), key=lambda kv: -kv[1]))}")
    return 0 if r["exact"] else 3


if __name__ == "__main__":
    sys.exit(main())
