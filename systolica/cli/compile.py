"""``systolica compile MODEL (--config X | --board Y) -o FILE``: a checkpoint to a versioned artifact.

MODEL is whatever :func:`systolica.compiler.frontend.load_model` reads: a ``.gguf`` file, a
directory with ``config.json`` + ``*.safetensors``, ``default`` (the cached default model) or
``random:ARCH[:key=value,...]`` (a :func:`systolica.testmodels.random_model`, for trying a
configuration without a checkpoint).  The summary's instruction counts are the instructions
each program retires: programs have no branches, so the golden simulator retires every word
once (the tests check this against the simulator's counters).
"""

from __future__ import annotations

import argparse
import time

from systolica.cli.exits import EXIT_OK
from systolica.cli.options import add_board, add_config, add_output, add_page, add_weights, count
from systolica.cli.progress import progress_enabled, steps

__all__ = ["Compile"]


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


class Compile:
    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("model", help="a .gguf file, a safetensors directory, 'default' (the cached default model), "
                                      "or random:ARCH[:k=v,...]")
        g = p.add_mutually_exclusive_group()
        add_config(g)
        add_board(g)
        add_output(p, "artifact file to write (.systolica)", required=True, metavar="FILE")
        add_page(p)
        p.add_argument("--max-seq", type=count(1), default=None, metavar="N",
                       help="longest context (default: the model's)")
        p.add_argument("--prefill-chunk", type=count(1), default=16, metavar="N",
                       help="rows of the prefill program, an upper bound: reduced until it fits on chip, and to 64 GEMM "
                            "rows with 4-bit weights (default 16)")
        p.add_argument("--batch", type=count(1), default=1, metavar="B",
                       help="also compile a batched decode step serving up to B sequences at once (continuous "
                            "batching: one weight read for all of them; the KV cache holds B full contexts); "
                            "default 1: none")
        p.add_argument("--act-split", action=argparse.BooleanOptionalAction, default=False,
                       help="~15-bit activations: every linear input as an int8 part plus an int8 residual "
                            "(default here: off; 'systolica run' compiles with it)")
        add_weights(p)

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        from rich.console import Console
        from rich.table import Table

        from systolica.cli.run import resolve_config  # --board / --config exactly as 'systolica run' reads them
        from systolica.compiler.compile import compile_model
        from systolica.compiler.frontend import load_model

        cfg = resolve_config(args.board, args.config)
        t0 = time.perf_counter()
        with steps(progress_enabled(args), f"reading {args.model}", transient=True) as step:
            model = load_model(args.model)
            art = compile_model(model, cfg, page=args.page, max_seq=args.max_seq, prefill_chunk=args.prefill_chunk,
                                progress=lambda s: step(f"compiling: {s}"),
                                act_split=args.act_split, batch=args.batch, weights=args.weights)
            step(f"writing {args.output}")
            art.save(args.output)
        man = art.manifest
        out = Console()
        t = Table(title=f"{man['model']['name']} -> {args.output} (accelerator {cfg.name!r}, {cfg.hash_hex()[:8]})")
        for col in ("program", "rows", "instructions", "load / compute / store", "patched", "weight bytes"):
            t.add_column(col, justify="right")
        b = Table(title="on-chip buffers (lines used / capacity)")
        for col in ("program", "spad", "acc", "vbuf"):
            b.add_column(col, justify="right")
        for kind, s in man["stats"].items():
            pe = s["per_engine"]
            t.add_row(kind, str(s["rows"]), f"{s['instructions']:,}",
                      f"{pe.get('LOAD', 0):,} / {pe.get('COMPUTE', 0):,} / {pe.get('STORE', 0):,}",
                      f"{s['patches']:,}", _human(s["weight_bytes"]))
            b.add_row(kind, *(f"{u[0]:,} / {u[1]:,}" for u in s["onchip"].values()))
        out.print(t)
        out.print(b)
        kinds: dict[str, int] = {}
        for r in man["regions"]:
            kinds[r["kind"]] = kinds.get(r["kind"], 0) + r["size"]
        d = Table(title="DRAM window")
        d.add_column("region kind")
        d.add_column("bytes", justify="right")
        for k, v in kinds.items():
            d.add_row(k, _human(v))
        d.add_row("total", f"{_human(man['dram_top'])} of {_human(cfg.dram_bytes)}")
        out.print(d)
        fmts = man.get("quant_formats", {})
        if args.weights != "int8":  # which matrix got which format, and its error against the float weights
            q = Table(title=f"matrix formats (--weights {args.weights}; error: relative RMS vs the float weights, "
                            "measured)")
            for col in ("tensor", "format", "rel. RMS error"):
                q.add_column(col, justify="right" if col == "rel. RMS error" else "left")
            for name, f in sorted(fmts.items(), key=lambda kv: -man["quant_errors"].get(kv[0], 0.0)):
                q.add_row(name, f, f"{man['quant_errors'].get(name, float('nan')):.3e}")
            out.print(q)
            by = man["stats"]["decode"].get("stream_bytes_by_format", {})
            out.print("weight-stream bytes per decode token by format (compiled program): "
                      + ", ".join(f"{k} {v:,}" for k, v in by.items()))
        kp = man.get("kv_page", {"source": "requested"})
        out.print(f"KV page: {art.page} tokens ({kp['source']}{': ' + kp['why'] if kp['source'] == 'chosen' else ''})")
        worst = max(man["quant_errors"].items(), key=lambda kv: kv[1])
        out.print(f"weight bytes read per decode token: {man['stats']['decode']['weight_bytes']:,}; "
                  f"worst quantization error {worst[0]} {worst[1]:.2e}; compiled in {time.perf_counter() - t0:.2f} s")
        return EXIT_OK
