"""``systolica bench``: systolica on boards (modelled at the board clock) beside CPU/GPU baselines.

    systolica bench --model default --boards kv260,zcu104,pynq-z2 -n 8 --json out.json --plots plots/

What it measures and how: :mod:`systolica.bench.compare`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from systolica.cli.exits import EXIT_OK
from systolica.cli.options import (
    UsageError,
    add_jobs,
    add_json,
    add_max_tokens,
    add_page,
    add_plots,
    add_synth,
    emit_json,
    json_to_stdout,
)
from systolica.cli.progress import progress_enabled, steps

__all__ = ["Bench", "csv", "int_csv"]


def csv(s: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``."""
    return [x.strip() for x in s.split(",") if x.strip()]


def int_csv(s: str, option: str) -> list[int]:
    """Comma-separated whole numbers >= 1; a bad item is a one-line error naming ``option``."""
    out = []
    for x in csv(s):
        if not x.isdigit() or int(x) < 1:
            raise UsageError(f"{option} item {x!r} is not a whole number >= 1")
        out.append(int(x))
    return out


class Bench:
    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        from systolica.bench.baselines import BASELINES
        from systolica.bench.compare import DEFAULT_PROMPT

        p.add_argument("--model", default="default",
                       help="'default' (SmolLM2-135M, fetch: python -m systolica.compiler.model_zoo fetch), a "
                            "checkpoint path, or random:ARCH[:k=v,...]")
        p.add_argument("--boards", default="kv260,zcu104,pynq-z2", help="comma-separated board names")
        p.add_argument("--weights", default="int8", metavar="FORMATS",
                       help="matrix weight formats to compare, comma-separated: int8, int4 or int8,int4 (int4 rows: the "
                            "performance model of the RTL's 4-bit datapath; default int8)")
        p.add_argument("--activations", default="plain", metavar="MODES",
                       help="activation quantization to compare, comma-separated: plain (one int8 exponent per row), "
                            "split (int8 part + int8 residual: ~15-bit, twice the GEMM rows) or plain,split "
                            "(default plain)")
        p.add_argument("--prompt", default=DEFAULT_PROMPT, help="prompt text")
        add_max_tokens(p, 8, old=True)
        p.add_argument("--baselines", default="numpy,torch-cpu,torch-cuda,llama.cpp,golden",
                       help=f"comma-separated, from {', '.join(BASELINES)} ('' for none)")
        add_page(p)
        p.add_argument("--gemm", choices=("systolic", "line_dot"), default="systolic",
                       help="GEMM datapath to model: the RTL's systolic array (default) or the earlier line-dot one")
        p.add_argument("--sweep-prompts", default="", help="prompt lengths for the tokens/s-vs-prompt plot, e.g. 8,32,128")
        p.add_argument("--batches", "--batch", default="",
                       help="batch sizes to compare (sequences decoded together), e.g. 1,4,16,64: tokens/s, "
                            "tokens/J and $/Mtok per batch, a table and plots with the crossovers")
        add_jobs(p, "CPU threads of the PyTorch and llama.cpp baselines", None, old=("--threads",))
        add_synth(p, "the row says 'fit: not measured'")
        add_json(p, "the comparison (rows, sweeps, metadata)")
        add_plots(p, "the plots: roofline, tokens/s vs prompt length and batch, energy per token")

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        import json
        import tempfile

        from rich.console import Console

        from systolica.bench.compare import load_any_model, prompt_ids, run_bench
        from systolica.bench.report import render_table, write_json
        from systolica.bench.roofline_report import render_roofline, roofline_sources

        to_stdout = json_to_stdout(args)
        con = Console(emoji=False, stderr=to_stdout)  # model specs like random:llama:... are not emoji codes
        if not con.is_terminal:  # files and pipes: wide enough for the table without wrapping
            con = Console(width=200, emoji=False, stderr=to_stdout)
        weights = csv(args.weights)
        bad = [w for w in weights if w not in ("int8", "int4")]
        if bad or not weights:
            raise UsageError(f"--weights {args.weights!r}: give int8, int4 or int8,int4")
        acts = csv(args.activations)
        if not acts or any(a not in ("plain", "split") for a in acts) or len(set(acts)) < len(acts):
            raise UsageError(f"--activations {args.activations!r}: give plain, split or plain,split")
        sweep_prompts = int_csv(args.sweep_prompts, "--sweep-prompts")
        batches = int_csv(args.batches, "--batches")
        t0 = time.perf_counter()
        with steps(progress_enabled(args), "loading model", transient=True) as step:
            model = load_any_model(args.model)
            prompt = prompt_ids(model, args.prompt)
            gguf = None
            if args.model == "default":
                from systolica.compiler.model_zoo import locate_default_model

                gguf = str(locate_default_model())
            elif args.model.endswith(".gguf"):
                gguf = args.model
            rows, sweeps = run_bench(model, boards=csv(args.boards), prompt=prompt, n_tokens=args.max_tokens,
                                     baselines=csv(args.baselines), gemm=args.gemm, prompt_sweep=sweep_prompts,
                                     batches=batches, gguf_path=gguf, threads=args.jobs, synth=args.synth,
                                     synth_timeout=args.synth_timeout, progress=step, weights=weights,
                                     page=args.page, activations=acts)
        title = f"{model.config.name}: prompt {len(prompt)} tokens, {args.max_tokens} generated"
        roofs = [r.extra["roofline_report"] for r in rows if r.extra.get("roofline_report")]
        if not to_stdout:
            con.print(render_table(rows, title))
            pages = [f"{r.name} {r.extra['kv_page']['page']} ({r.extra['kv_page']['source']})"
                     for r in rows if r.extra.get("kv_page")]
            if pages:
                con.print("KV page, tokens: " + ", ".join(pages), highlight=False, markup=False)
            if roofs:
                con.print(render_roofline(roofs, f"roofline per board ({model.config.name})"))
                for line in roofline_sources(roofs):
                    con.print(line, highlight=False, markup=False)
            cyc = [(r.extra.get("roofline_report", {}).get("board", r.name), r.extra["cycle_breakdown"])
                   for r in rows if r.extra.get("cycle_breakdown")]
            if cyc:
                from systolica.bench.cycle_breakdown import render_breakdown

                con.print(render_breakdown(cyc, f"where the cycles go ({model.config.name})"))
        if sweeps.get("batch") and not to_stdout:
            from systolica.bench.report import render_batch_table

            con.print(render_batch_table(sweeps))
        hypothetical = [r.name for r in rows if r.extra.get("fit") and r.extra["fit"]["state"] != "yes"]
        if hypothetical:
            con.print(f"[yellow]hypothetical (no measured fit): {', '.join(hypothetical)} -- their figures are what "
                      "the design would do IF it fit its board at the assumed clock")
        meta = {"model": args.model, "model_name": model.config.name, "prompt": args.prompt,
                "prompt_tokens": len(prompt), "tokens": args.max_tokens, "gemm": args.gemm, "threads": args.jobs,
                "page": args.page, "activations": acts,
                "seconds": round(time.perf_counter() - t0, 1)}
        doc = None
        if args.json is not None or args.plots:
            with tempfile.TemporaryDirectory(prefix="systolica-bench-") as tmp:  # write_json writes a file
                doc = write_json(Path(tmp) / "bench.json", rows, meta, sweeps)
            doc = json.loads(json.dumps(doc, default=str))
            written = emit_json(args.json, doc)
            if written is not None:
                con.print(f"JSON: {written}")
        if args.plots:
            from systolica.bench.plots import plot_all

            for f in plot_all(doc, args.plots):
                con.print(f"plot: {f}")
        return EXIT_OK
