"""Design-space exploration: configurations x boards x models, timed by the performance model.

Each point compiles the model for one :class:`~systolica.config.AccelConfig` (a board's ``[accel]``
table with the array shape and DMA width changed) and times a decode step and a prefill with the
performance model at the board's clock and DRAM (:mod:`systolica.bench.accel_model`).

Models deeper than 2 layers are timed by **layer extrapolation**: blocks have identical shapes, so
the cycles of an ``L``-layer model are ``c(1) + (L - 1) * (c(2) - c(1))``, from compiles of its first
one and two layers (the embedding and output projection are in both).  That keeps a point of a
30-layer model at a few seconds.

Fit comes only from measured synthesis (:func:`systolica.boards.fit_status.fit_status`): a point is
``yes`` / ``no`` when the shared synthesis cache holds a Yosys run of its configuration for the board's
family (``systolica hw build``, or ``systolica dse --synth``), ``no`` when the hardware generator refuses the
configuration, and ``not measured`` otherwise.  Its DSP / BRAM / LUT counts are the measured ones
(``None`` when not measured).  The clock is :func:`~systolica.boards.fit_status.clock_basis`: the measured Fmax
where place and route of the configuration is cached (ECP5), else the board's target, labelled assumed
(Xilinx rows carry the ECP5 proxy Fmax beside it); power is the board file's figure with the basis its
comment gives (measured / datasheet / assumed).

:func:`pareto_front` keeps the points no other point beats on every objective; :func:`front_of` applies it
per model among the points whose fit was measured and is ``yes`` only.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence
from functools import lru_cache

__all__ = ["pareto_front", "front_of", "variants", "evaluate", "make_tasks", "run_tasks", "synthesize_missing",
           "OBJECTIVES", "truncate_layers"]

#: (key, sense) of the Pareto objectives: decode speed up; DSPs, BRAM and energy per token down.
OBJECTIVES: tuple[tuple[str, str], ...] = (("decode_tokens_per_s", "max"), ("dsp", "min"), ("bram", "min"),
                                           ("joules_per_token", "min"))


def _dominates(a: dict, b: dict, objectives) -> bool:
    better = False
    for key, sense in objectives:
        x, y = (a[key], b[key]) if sense == "max" else (-a[key], -b[key])
        if x < y:
            return False
        if x > y:
            better = True
    return better


def pareto_front(points: Sequence[dict], objectives: Sequence[tuple[str, str]] = OBJECTIVES) -> list[int]:
    """Indices of the non-dominated points (in input order); equal points are all kept.

    Raises
    ------
    ValueError
        For a sense other than ``"max"``/``"min"`` or a point missing an objective.
    """
    for key, sense in objectives:
        if sense not in ("max", "min"):
            raise ValueError(f"objective {key!r}: sense {sense!r} must be 'max' or 'min'")
    for i, p in enumerate(points):
        missing = [k for k, _ in objectives if k not in p or p[k] is None]
        if missing:
            raise ValueError(f"point {i} has no value for {', '.join(missing)}")
    return [i for i, p in enumerate(points)
            if not any(_dominates(q, p, objectives) for j, q in enumerate(points) if j != i)]


def variants(base, shapes: Sequence[tuple[int, int]], dma_bits: Sequence[int]) -> list:
    """Valid configurations from ``base`` with each (rows, cols) and DMA width; invalid ones are skipped."""
    from systolica.config import ConfigError

    out = []
    for (r, c), d in itertools.product(shapes, dma_bits):
        if c * 8 < d:  # a scratchpad line must be a whole number of DMA beats (hw/engines.py)
            continue
        try:
            out.append(base.reshaped(r, c, name=f"{base.name}-{r}x{c}-d{d}", dma_bits=d))
        except ConfigError:
            continue
    return out


def truncate_layers(model, n: int):
    """The model's first ``n`` blocks with its embedding, final norm and output (same shapes)."""
    from systolica.model import Model

    keep = {k: v for k, v in model.weights.items() if not k.startswith("blk.") or int(k.split(".")[1]) < n}
    return Model(dataclasses.replace(model.config, n_layers=n), keep, model.tokenizer, model.metadata)


@lru_cache(maxsize=4)
def _model(spec: str):
    from systolica.bench.compare import load_any_model

    return load_any_model(spec)


def _time(model, cfg, spec, prompt_len: int, gemm: str) -> tuple[int, int, int]:
    """(decode cycles at context prompt_len, prefill cycles of the prompt, prefill rows)."""
    from systolica.bench.accel_model import AccelTimer
    from systolica.compiler.compile import compile_model
    from systolica.sim.perf_costs import PerfParams
    from systolica.sim.roofline import board_params

    max_seq = -(-(prompt_len + 2) // 16) * 16
    art = compile_model(model, cfg, page=16, max_seq=max_seq, prefill_chunk=16)
    timer = AccelTimer(art, board_params(cfg, dram_gbps=spec.dram_gbps, base=PerfParams(gemm=gemm)))
    prompt = [1 + (i % (model.config.vocab_size - 1)) for i in range(prompt_len)]
    rows = art.rows("prefill") if "prefill" in art.programs else 1
    return timer.decode_cycles(prompt_len), timer.prefill_cycles(prompt), rows


def evaluate(task: dict) -> dict:
    """One design point: ``task`` = {model, board, config (dict), prompt_len, gemm}; picklable both ways."""
    from systolica.bench.accel_model import board_spec
    from systolica.boards.board import load_board
    from systolica.config import AccelConfig

    cfg = AccelConfig.from_dict(dict(task["config"]))
    spec = dataclasses.replace(board_spec(task["board"]), config=cfg)
    board = load_board(task["board"])
    model = _model(task["model"])
    L = model.config.n_layers
    out = {"model": task["model"], "board": task["board"], "config": cfg.name, "rows": cfg.rows, "cols": cfg.cols,
           "dma_bits": cfg.dma_bits, "clock_mhz": cfg.clock_mhz, "gemm": task["gemm"]}
    try:
        if L > 2:  # blocks are alike: extrapolate from one and two of them
            d1, p1, rows = _time(truncate_layers(model, 1), cfg, spec, task["prompt_len"], task["gemm"])
            d2, p2, _ = _time(truncate_layers(model, 2), cfg, spec, task["prompt_len"], task["gemm"])
            dec, pre = d1 + (L - 1) * (d2 - d1), p1 + (L - 1) * (p2 - p1)
        else:
            dec, pre, rows = _time(model, cfg, spec, task["prompt_len"], task["gemm"])
    except Exception as e:  # noqa: BLE001 - a config the model does not fit is a result, not a crash
        out["error"] = f"{type(e).__name__}: {e}"
        return out
    from systolica.boards.fit_status import clock_basis, fit_status, power_basis

    st = fit_status(cfg, board)
    rec = st.record if st.measured else None
    measured = rec.resources.as_dict() if rec is not None else {}
    clock = clock_basis(cfg, rec, board)
    power = power_basis(board)
    f = clock["mhz"] * 1e6
    tps = f / dec
    out.update({k: measured.get(k) for k in ("lut", "ff", "dsp", "bram", "uram")},
               macs=cfg.rows * cfg.cols, decode_cycles=dec, prefill_cycles=pre, prefill_rows=rows,
               decode_tokens_per_s=tps, ttft_s=pre / f,
               fit=st.state, fits=st.fits, fit_tightest=st.tightest, fit_reason=st.reason,
               buffers_in_ff=list(st.buffers_in_ff),
               utilization={r.kind: r.utilization for r in st.report.rows} if st.report else None,
               clock=clock, power=power, power_w=power["watts"], joules_per_token=power["watts"] / tps)
    return out


def front_of(points: Sequence[dict], objectives: Sequence[tuple[str, str]] = OBJECTIVES) -> set[int]:
    """Indices of ``points`` on a Pareto front per model, chosen among measured fits only (``fit == "yes"``):
    a design that does not fit, or whose fit was never measured, is never ranked."""
    front: set[int] = set()
    for m in dict.fromkeys(p.get("model") for p in points):
        idx = [i for i, p in enumerate(points) if p.get("model") == m and p.get("fit") == "yes" and "error" not in p]
        if idx:
            front |= {idx[j] for j in pareto_front([points[i] for i in idx], objectives)}
    return front


def synthesize_missing(tasks: Sequence[dict], *, timeout: float = 3600.0, say=lambda s: None) -> list[dict]:
    """Run Yosys (one configuration at a time) for every task's configuration that has no current
    synthesis in the shared cache and that the hardware generator accepts; returns a record per run."""
    from systolica.boards.board import load_board
    from systolica.boards.fit import hardware_problem
    from systolica.boards.synth_cache import cache_dir, lookup, synthesize
    from systolica.config import AccelConfig

    done, out = set(), []
    for t in tasks:
        board = load_board(t["board"])
        cfg = AccelConfig.from_dict(dict(t["config"]))
        key = (board.family, board.resources.uram > 0, cfg.hash_hex())
        if key in done or hardware_problem(cfg):
            continue
        done.add(key)
        rec = lookup(cfg, board)
        if rec is not None and not rec.stale:
            continue
        work = cache_dir() / "work" / f"{board.family}-{cfg.hash_hex()[:12]}"
        rec = synthesize(cfg, board, workdir=work, timeout=timeout, say=say)
        out.append({"board": board.name, "config": cfg.name, "seconds": rec.seconds, "cache": str(rec.path)})
    return out


def make_tasks(models: Sequence[str], boards: Sequence[str], shapes: Sequence[tuple[int, int]],
               dma_bits: Sequence[int], prompt_len: int = 16, gemm: str = "systolic") -> list[dict]:
    """Every (model, board, configuration variant) as a task for :func:`evaluate`."""
    from systolica.boards.board import load_board

    tasks = []
    for b in boards:
        board = load_board(b)
        widths = [d for d in dma_bits if d <= board.pl_port_bits]  # an HP port is no wider than the board's
        for cfg in variants(board.config, shapes, widths):
            for m in models:
                tasks.append({"model": m, "board": b, "config": cfg.to_dict(), "prompt_len": prompt_len, "gemm": gemm})
    return tasks


def run_tasks(tasks: Sequence[dict], *, workers: int | None = None, ray_address: str | None = None,
              progress: Callable[[int, int], None] = lambda done, total: None) -> list[dict]:
    """Evaluate tasks in parallel: local processes by default, a Ray cluster with ``ray_address``
    (``"local"`` starts Ray on this machine).  Results come back in task order."""
    n = len(tasks)
    if ray_address:
        try:
            import ray
        except ImportError:
            raise RuntimeError("--ray needs Ray: pip install -e .[ray] (or pip install ray)") from None
        if not ray.is_initialized():
            ray.init(address=None if ray_address == "local" else ray_address, ignore_reinit_error=True)
        remote = ray.remote(evaluate)
        refs = [remote.remote(t) for t in tasks]
        out = ray.get(refs)
        progress(n, n)
        return out
    import os
    from concurrent.futures import ProcessPoolExecutor

    w = workers or os.cpu_count() or 1
    if w == 1 or n == 1:
        out = []
        for i, t in enumerate(tasks):
            out.append(evaluate(t))
            progress(i + 1, n)
        return out
    with ProcessPoolExecutor(max_workers=min(w, n)) as ex:
        out = []
        for i, r in enumerate(ex.map(evaluate, tasks, chunksize=max(1, math.ceil(n / (4 * w))))):
            out.append(r)
            progress(i + 1, n)
        return out
