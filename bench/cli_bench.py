"""``systolica bench``: systolica on boards (modelled at the board clock) beside CPU/GPU baselines.

    systolica bench --model default --boards kv260,zcu104,pynq-z2 --tokens 8 --json out.json --plots plots/

The model is compiled once per board configuration; its programs are timed by the performance
model (:mod:`systolica.bench.accel_model`).  Each board row states its fit (from a measured synthesis
in the shared cache, :mod:`systolica.boards.fit_status`: yes / no / not measured), its clock (the board's
target, assumed) and its power basis (measured / datasheet / assumed); a row that does not fit, or whose
fit was never measured, is flagged as hypothetical.  ``--synth`` runs Yosys first for a board
configuration the cache lacks.  The baselines run the same model on the same prompt on this machine.  Output: a terminal table, optionally JSON and plots (roofline, tokens/s vs prompt
length and batch, energy per token).  RTL simulation of whole models is not offered: the RTL top
level executes LOAD/STORE/GEMM/NOP only (``hw/decode.py`` ``RTL_OPS``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from systolica.bench.errors import BenchError

__all__ = ["Bench", "load_any_model", "prompt_ids", "run_bench"]

DEFAULT_PROMPT = "The capital of France is"


def load_any_model(spec: str):
    """``default``, a checkpoint path, or ``random:ARCH[:k=v,...]`` (a test model)."""
    if spec.startswith("random:"):
        from systolica.compiler.cli_compile import load_model

        return load_model(spec)
    from systolica.compiler.frontend import load_model

    return load_model(spec)


def prompt_ids(model, text: str, length: int | None = None) -> list[int]:
    """Token ids of ``text`` (bytes mod vocab without a tokenizer), cycled or cut to ``length`` if given."""
    tok = model.tokenizer
    ids = tok.encode(text) if tok is not None else [b % model.config.vocab_size for b in text.encode()]
    if not ids:
        raise BenchError("the prompt gives no tokens; pass a non-empty --prompt")
    if length is not None:
        ids = (ids * (length // len(ids) + 1))[:length]
    return ids


def _csv(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def run_bench(model, *, boards: list[str], prompt: list[int], n_tokens: int, baselines: list[str],
              gemm: str = "systolic", prompt_sweep: list[int] = (), batches: list[int] = (),
              gguf_path: str | None = None, threads: int | None = None, synth: bool = False,
              synth_timeout: float = 3600.0, progress=lambda s: None) -> tuple[list, dict]:
    """Rows of the comparison and the sweeps behind the plots.

    ``synth``: run Yosys for a board configuration without a current cached synthesis (slow);
    otherwise such a row's fit is "not measured"."""
    from systolica.bench.accel_model import AccelTimer, board_spec, model_on_board
    from systolica.bench.baselines import run_baselines, run_torch
    from systolica.compiler.compile import compile_model
    from systolica.sim.perf_costs import PerfParams
    from systolica.sim.roofline import board_params

    need = max([len(prompt) + n_tokens, *prompt_sweep]) + 2
    page = 16
    max_seq = min(model.config.max_seq, -(-need // page) * page)
    rows, sweeps = [], {"prompt": {}, "batch": {}}
    for name in boards:
        spec = board_spec(name)
        progress(f"compiling for {name}")
        art = compile_model(model, spec.config, page=page, max_seq=max_seq, prefill_chunk=16)
        progress(f"timing {name}")
        row = model_on_board(art, spec, prompt, n_tokens, gemm=gemm)
        row.extra["prefill_rows"] = art.rows("prefill") if "prefill" in art.programs else 1
        _attach_fit(row, name, spec.config, synth=synth, timeout=synth_timeout, progress=progress)
        rows.append(row)
        timer = AccelTimer(art, board_params(spec.config, dram_gbps=spec.dram_gbps, base=PerfParams(gemm=gemm)))
        f = spec.clock_mhz * 1e6
        pts = []
        for n in prompt_sweep:
            ids = (prompt * (n // len(prompt) + 1))[:n]
            pts.append({"prompt_tokens": n, "ttft_s": timer.prefill_cycles(ids) / f,
                        "decode_tokens_per_s": f / timer.decode_cycles(n)})
        if pts:
            sweeps["prompt"][row.name] = pts
        if batches:  # one decode program per sequence: B sequences take B times as long
            sweeps["batch"][row.name] = [{"batch": b, "decode_tokens_per_s": row.decode_tokens_per_s} for b in batches]
    progress("baselines")
    rows += run_baselines(model, prompt, n_tokens, baselines, gguf_path=gguf_path, threads=threads)
    for dev in [d for d in ("cpu", "cuda") if f"torch-{d}" in baselines]:
        ran = next((r for r in rows if r.name == f"PyTorch {dev}" and r.skipped is None), None)
        if ran is None:
            continue
        if batches:
            progress(f"PyTorch {dev} batch sweep")
            sweeps["batch"][ran.name] = [{"batch": b, "decode_tokens_per_s": run_torch(
                model, prompt, max(n_tokens, 3), dev, batch=b, threads=threads).decode_tokens_per_s} for b in batches]
        if prompt_sweep:
            progress(f"PyTorch {dev} prompt sweep")
            pts = []
            for n in prompt_sweep:
                r = run_torch(model, (prompt * (n // len(prompt) + 1))[:n], 3, dev, threads=threads)
                pts.append({"prompt_tokens": n, "ttft_s": r.ttft_s, "decode_tokens_per_s": r.decode_tokens_per_s})
            sweeps["prompt"][ran.name] = pts
    return rows, sweeps


def _attach_fit(row, board_name: str, cfg, *, synth: bool, timeout: float, progress) -> None:
    """Fit (measured or not), clock and power basis of a board row, in ``row.extra`` and its sources."""
    from systolica.boards.board import load_board
    from systolica.boards.fit_status import NOT_MEASURED, clock_basis, fit_status, power_basis

    board = load_board(board_name)
    st = fit_status(cfg, board)
    if synth and st.state == NOT_MEASURED:
        from systolica.boards.synth_cache import cache_dir, synthesize

        progress(f"Yosys synthesis of {cfg.name} for {board.name} (slow)")
        rec = synthesize(cfg, board, workdir=cache_dir() / "work" / f"{board.family}-{cfg.hash_hex()[:12]}",
                         timeout=timeout)
        st = fit_status(cfg, board, record=rec)
    power = power_basis(board)
    row.extra["fit"] = st.to_dict()
    row.extra["fit_label"] = st.label()
    row.extra["clock"] = clock_basis(cfg, st.record if st.measured else None, board)
    row.extra["power"] = power
    row.power_source = f"{power['basis']}: {power['source']}"


class Bench:
    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        from systolica.bench.baselines import BASELINES

        p.add_argument("--model", default="default",
                       help="'default' (SmolLM2-135M, fetch: python -m systolica.compiler.model_zoo fetch), a "
                            "checkpoint path, or random:ARCH[:k=v,...]")
        p.add_argument("--boards", default="kv260,zcu104,pynq-z2", help="comma-separated board names")
        p.add_argument("--prompt", default=DEFAULT_PROMPT, help="prompt text")
        p.add_argument("--tokens", type=int, default=8, help="tokens to generate (default 8)")
        p.add_argument("--baselines", default="numpy,torch-cpu,torch-cuda,llama.cpp",
                       help=f"comma-separated, from {', '.join(BASELINES)} ('' for none)")
        p.add_argument("--gemm", choices=("systolic", "line_dot"), default="systolic",
                       help="GEMM datapath to model: the RTL's systolic array (default) or the earlier line-dot one")
        p.add_argument("--sweep-prompts", default="", help="prompt lengths for the tokens/s-vs-prompt plot, e.g. 8,32,128")
        p.add_argument("--batches", default="", help="batch sizes for the tokens/s-vs-batch plot, e.g. 1,2,4")
        p.add_argument("--threads", type=int, default=None,
                       help="CPU threads of the PyTorch and llama.cpp baselines (default: one per core)")
        p.add_argument("--synth", action="store_true",
                       help="run Yosys for a board configuration without a cached synthesis (10 to 40 minutes each for the presets on 2 cores); "
                            "without it the row says 'fit: not measured'")
        p.add_argument("--synth-timeout", type=float, default=3600.0, help="seconds per Yosys run (default 3600)")
        p.add_argument("--json", help="write the comparison as JSON here")
        p.add_argument("--plots", help="write the plots (PNG) into this folder")

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        from rich.console import Console

        from systolica.bench.report import render_table, write_json

        con = Console(emoji=False)  # model specs like random:llama:... are not emoji codes
        if not con.is_terminal:  # files and pipes: wide enough for the table without wrapping
            con = Console(width=200, emoji=False)
        if args.tokens < 1:
            raise BenchError(f"--tokens={args.tokens} must be at least 1")
        t0 = time.perf_counter()
        with con.status("loading model") as st:
            model = load_any_model(args.model)
            prompt = prompt_ids(model, args.prompt)
            gguf = None
            if args.model == "default":
                from systolica.compiler.model_zoo import locate_default_model

                gguf = str(locate_default_model())
            elif args.model.endswith(".gguf"):
                gguf = args.model
            rows, sweeps = run_bench(model, boards=_csv(args.boards), prompt=prompt, n_tokens=args.tokens,
                                     baselines=_csv(args.baselines), gemm=args.gemm,
                                     prompt_sweep=[int(x) for x in _csv(args.sweep_prompts)],
                                     batches=[int(x) for x in _csv(args.batches)], gguf_path=gguf, threads=args.threads,
                                     synth=args.synth, synth_timeout=args.synth_timeout,
                                     progress=lambda s: st.update(s))
        title = f"{model.config.name}: prompt {len(prompt)} tokens, {args.tokens} generated"
        con.print(render_table(rows, title))
        hypothetical = [r.name for r in rows if r.extra.get("fit") and r.extra["fit"]["state"] != "yes"]
        if hypothetical:
            con.print(f"[yellow]hypothetical (no measured fit): {', '.join(hypothetical)} -- their figures are what "
                      "the design would do IF it fit its board at the assumed clock")
        meta = {"model": args.model, "model_name": model.config.name, "prompt": args.prompt,
                "prompt_tokens": len(prompt), "tokens": args.tokens, "gemm": args.gemm, "threads": args.threads,
                "seconds": round(time.perf_counter() - t0, 1)}
        doc = None
        if args.json or args.plots:
            import json
            import tempfile

            with tempfile.TemporaryDirectory(prefix="systolica-bench-") as tmp:  # the plots need the document only
                path = args.json or str(Path(tmp) / "bench.json")
                doc = write_json(path, rows, meta, sweeps)
            doc = json.loads(json.dumps(doc, default=str))
            if args.json:
                con.print(f"JSON: {args.json}")
        if args.plots:
            from systolica.bench.plots import plot_all

            for f in plot_all(doc, args.plots):
                con.print(f"plot: {f}")
        return 0
