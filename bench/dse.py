"""Design-space exploration: configurations x boards x models, timed by the performance model.

Each point compiles the model for one :class:`~systolica.config.AccelConfig` (a board's ``[accel]``
table with the array shape and DMA width changed) and times a decode step and a prefill with the
performance model at the board's clock and DRAM (:mod:`systolica.bench.accel_model`).

Models deeper than 2 layers are timed by **layer extrapolation**: blocks have identical shapes, so
the cycles of an ``L``-layer model are ``c(1) + (L - 1) * (c(2) - c(1))``, from compiles of its first
one and two layers (the embedding and output projection are in both).

A point needs programs, not weights: the model's shape (:func:`model_shapes`: its configuration and each
matrix's REQUANT shift; of a GGUF only the metadata and the first two blocks are read) is read once per
sweep, and each configuration's programs come from the programs-only compile
(:mod:`systolica.compiler.programs_only`: the words of a full compile, bit for bit, without quantizing or
packing a weight), ~0.3 s of CPU for the two depths of SmolLM2; points that differ only in clock or DRAM
bandwidth share them (:func:`program_key`), and timing a point takes ~20 ms of CPU.

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

import itertools
import json
import math
import os
import sys
from collections.abc import Callable, Sequence

from systolica.bench.dse_programs import (
    _shape_key,
    model_shapes,
    program_key,
    programs_for,
    truncate_layers,
)

__all__ = ["pareto_front", "front_of", "variants", "evaluate", "make_tasks", "run_tasks", "synthesize_missing",
           "OBJECTIVES", "truncate_layers", "programs_for", "program_key"]

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


_PHASE = {"decode": 0.0, "prefill": 0.0}  # CPU seconds this process spent timing each phase (run_tasks reports them)


def _timed(cfg, params, progs: dict) -> tuple[int, int]:
    """(decode cycles, prefill cycles) of the programs under ``params``, extrapolated to all layers."""
    import time

    from systolica.sim.perf import PerfModel

    model = PerfModel(cfg, params)
    t0 = time.process_time()
    dec = [sum(model.run(w).cycles for w in d) for d, _ in progs["depths"]]
    t1 = time.process_time()
    pre = [sum(model.run(w).cycles for w in p) for _, p in progs["depths"]]
    _PHASE["decode"] += t1 - t0
    _PHASE["prefill"] += time.process_time() - t1
    if len(dec) == 1:
        return dec[0], pre[0]
    L = progs["n_layers"]
    return dec[0] + (L - 1) * (dec[1] - dec[0]), pre[0] + (L - 1) * (pre[1] - pre[0])


def _board_facts(task: dict, memo: dict | None):
    """(config, board spec, board, fit status, measured record, clock basis) of a task's board and configuration;
    ``memo`` keeps them for the points of one group (one configuration, read at one moment)."""
    from systolica.bench.accel_model import board_spec
    from systolica.boards.board import load_board
    from systolica.boards.fit_status import clock_basis, fit_status
    from systolica.config import AccelConfig

    key = (task["board"], json.dumps(task["config"], sort_keys=True))
    got = memo.get(key) if memo is not None else None
    if got is None:
        cfg = AccelConfig.from_dict(dict(task["config"]))
        spec = board_spec(task["board"])
        board = load_board(task["board"])
        st = fit_status(cfg, board)
        rec = st.record if st.measured else None
        got = (cfg, spec, board, st, rec, clock_basis(cfg, rec, board))
        if memo is not None:
            memo[key] = got
    return got


def evaluate(task: dict, programs: dict | None = None, _memo: dict | None = None) -> dict:
    """One design point: ``task`` = {model, board, config (dict), prompt_len, gemm, and optionally clock_mhz and
    dram_gbps (sweep values; default the board's)}; picklable both ways.  ``programs``: :func:`programs_for`'s
    (looked up when not given)."""
    from systolica.sim.perf_costs import PerfParams
    from systolica.sim.roofline import board_params

    cfg, spec, board, st, rec, clock = _board_facts(task, _memo)
    clock = dict(clock)  # each point its own
    dram = float(task.get("dram_gbps") or spec.dram_gbps)
    out = {"model": task["model"], "board": task["board"], "config": cfg.name, "rows": cfg.rows, "cols": cfg.cols,
           "dma_bits": cfg.dma_bits, "clock_mhz": cfg.clock_mhz, "gemm": task["gemm"], "dram_gbps": dram,
           "dram_basis": "swept" if task.get("dram_gbps") else "board", "weights": task.get("weights", "int8")}
    if out["weights"] != "int8":
        out["weights_note"] = "performance model of the RTL's 4-bit weight datapath (hw/group_scaler.py; checked against RTL cycles on tiny)"
    from systolica.boards.fit_status import power_basis

    if task.get("clock_mhz"):  # a swept clock: met only where a measured Fmax reaches it
        f_mhz = float(task["clock_mhz"])
        fmax = clock.get("measured_fmax_mhz")
        met = None if fmax is None else f_mhz <= fmax
        clock = {**clock, "mhz": f_mhz, "basis": "swept", "met": met,
                 "source": f"swept clock; {'Fmax ' + format(fmax, 'g') + ' MHz measured' if fmax else 'timing not measured'}"}
    try:
        progs = programs if programs is not None else programs_for(task)
        if "error" in progs:
            out["error"] = progs["error"]
            return out
        params = board_params(cfg, dram_gbps=dram, clock_mhz=clock["mhz"], base=PerfParams(gemm=task["gemm"]))
        dec, pre = _timed(cfg, params, progs)
        rows = progs["rows"]
    except Exception as e:  # noqa: BLE001 - a config the model does not fit is a result, not a crash
        out["error"] = f"{type(e).__name__}: {e}"
        return out
    measured = rec.resources.as_dict() if rec is not None else {}
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
    for m in dict.fromkeys((p.get("model"), p.get("weights", "int8")) for p in points):  # int4: a front of its own
        idx = [i for i, p in enumerate(points) if (p.get("model"), p.get("weights", "int8")) == m
               and p.get("fit") == "yes" and "error" not in p
               and (p.get("clock") or {}).get("met") is not False]  # a swept clock above the measured Fmax
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
               dma_bits: Sequence[int], prompt_len: int = 16, gemm: str = "systolic",
               clocks: Sequence[float] = (), dram_gbps: Sequence[float] = (),
               weights: Sequence[str] = ("int8",)) -> list[dict]:
    """Every (model, board, configuration variant, clock, DRAM bandwidth) as a task for :func:`evaluate`.

    ``clocks`` (MHz) and ``dram_gbps`` sweep what the compiled programs do not depend on: a point per value, timed
    on the same programs (empty: the board's clock basis and DRAM)."""
    from systolica.boards.board import load_board

    tasks = []
    for b in boards:
        board = load_board(b)
        widths = [d for d in dma_bits if d <= board.pl_port_bits]  # an HP port is no wider than the board's
        for cfg in variants(board.config, shapes, widths):
            for m, w in itertools.product(models, weights):
                for f, g in itertools.product(clocks or [None], dram_gbps or [None]):
                    t = {"model": m, "board": b, "config": cfg.to_dict(), "prompt_len": prompt_len, "gemm": gemm}
                    if w != "int8":  # int4: timed by the performance model of a datapath the RTL lacks
                        t["weights"] = w
                    if f is not None:
                        t["clock_mhz"] = float(f)
                    if g is not None:
                        t["dram_gbps"] = float(g)
                    tasks.append(t)
    return tasks


def _prepare(task: dict, shapes: tuple[int, list] | None = None) -> tuple[dict, float]:
    """A task's programs (:func:`programs_for`) and the CPU seconds they took here."""
    import time

    c0 = time.process_time()
    got = programs_for(task, shapes)
    return got, time.process_time() - c0


def _evaluate_group(progs: dict, tasks: list[dict]) -> tuple[list[dict], float, dict]:
    """The points of ``tasks`` on ``progs``, the CPU seconds they took and the seconds per timing phase."""
    import time

    c0 = time.process_time()
    before = dict(_PHASE)
    memo: dict = {}
    out = [evaluate(t, progs, memo) for t in tasks]
    return out, time.process_time() - c0, {k: _PHASE[k] - before[k] for k in _PHASE}


def _groups(tasks: Sequence[dict], size: int) -> tuple[list[str], dict[str, list[int]], list[tuple[str, list[int]]]]:
    """Tasks by program key (first-seen order) and the chunks of at most ``size`` tasks of one key each."""
    by_key: dict[str, list[int]] = {}
    for i, t in enumerate(tasks):
        by_key.setdefault(program_key(t), []).append(i)
    chunks = [(k, idx[j:j + size]) for k, idx in by_key.items() for j in range(0, len(idx), size)]
    return list(by_key), by_key, chunks


def _warm_imports() -> None:
    """Import what the workers run before they fork from this process (each would pay ~0.5 s of imports)."""
    import systolica.bench.accel_model  # noqa: F401 - the performance model, the runtime's prefill schedule
    import systolica.boards.fit_status  # noqa: F401
    import systolica.compiler.programs_only  # noqa: F401
    import systolica.sim.perf_plan  # noqa: F401


def run_tasks(tasks: Sequence[dict], *, workers: int | None = None, ray_address: str | None = None,
              progress: Callable[[int, int], None] = lambda done, total: None, stats: dict | None = None) -> list[dict]:
    """Evaluate tasks in parallel: local processes by default, a Ray cluster with ``ray_address``
    (``"local"`` starts Ray on this machine).  Results come back in task order.

    Each model's shape (:func:`model_shapes`: its configuration and matrix shifts) is read once, here.  Points that
    share programs (:func:`program_key`: the same model, configuration less clock, prompt) are compiled once: first
    every distinct program set (in parallel, or from the on-disk cache), then the points in chunks of one program
    set each (in local processes a set's points start as soon as it is ready).  ``stats``, if given, receives
    ``compiled`` and ``cached`` (program sets), ``seconds`` (wall) and ``cpu_seconds`` (this process and the workers'
    tasks together), and per stage ``stage_seconds`` (wall: ``shapes``; ``programs``, until the last program set was
    ready; ``points``, the rest), ``stage_cpu_seconds`` (``programs`` and ``points``, the workers' CPU) and
    ``phase_seconds`` (``decode``/``prefill``: the CPU of timing each phase, summed over the points)."""
    import time

    t0, c0 = time.perf_counter(), time.process_time()
    n = len(tasks)
    if stats is None:
        stats = {}
    shapes = {}
    for m, w in dict.fromkeys(_shape_key(t) for t in tasks):
        try:
            shapes[m, w] = model_shapes(m, w)
        except Exception:  # noqa: BLE001 - each point reports it (programs_for raises it again there)
            shapes[m, w] = None
    t_shapes = time.perf_counter()
    if ray_address:
        host = ray_address.rpartition(":")[0] if ":" in ray_address else ray_address
        if (ray_address == "local" or host in ("localhost", "::1") or host.startswith("127.")) \
                and "ray" not in sys.modules:
            # Ray swaps a loopback address for the machine's own (and binds there): keep 127.0.0.1, so that a local
            # instance listens on loopback only and a head started on 127.0.0.1 can be reached; read at import
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        try:
            import ray
        except ImportError:
            raise RuntimeError("--ray needs Ray: pip install -e .[ray] (or pip install ray)") from None
        if not ray.is_initialized():
            ray.init(address=None if ray_address == "local" else ray_address, ignore_reinit_error=True,
                     log_to_driver=False)
        nodes = max(1, int(ray.cluster_resources().get("CPU", 1)))
        keys, by_key, chunks = _groups(tasks, max(1, math.ceil(n / (4 * nodes))))
        prep = ray.remote(_prepare)
        firsts = [tasks[by_key[k][0]] for k in keys]
        prepared = ray.get([prep.remote(t, shapes[_shape_key(t)]) for t in firsts])
        t_progs = time.perf_counter()
        progs = {k: p for k, (p, _) in zip(keys, prepared, strict=True)}
        group = ray.remote(_evaluate_group)
        refs = {k: ray.put(p) for k, p in progs.items()}
        evaluated = ray.get([group.remote(refs[k], [tasks[i] for i in idx]) for k, idx in chunks])
        progress(n, n)
    else:
        from concurrent.futures import ProcessPoolExecutor

        w = max(1, min(workers or os.cpu_count() or 1, n))
        keys, by_key, chunks = _groups(tasks, max(1, math.ceil(n / (4 * w))))
        firsts = [tasks[by_key[k][0]] for k in keys]
        evaluated = []
        done = 0
        if w == 1 or len(chunks) == 1:
            prepared = [_prepare(t, shapes[_shape_key(t)]) for t in firsts]
            t_progs = time.perf_counter()
            progs = {k: p for k, (p, _) in zip(keys, prepared, strict=True)}
            for k, idx in chunks:
                evaluated.append(_evaluate_group(progs[k], [tasks[i] for i in idx]))
                done += len(idx)
                progress(done, n)
        else:
            from concurrent.futures import FIRST_COMPLETED, wait

            _warm_imports()
            with ProcessPoolExecutor(max_workers=w) as ex:
                # a program set's points are queued as soon as it is ready: no worker waits for the slowest compile
                pending = {ex.submit(_prepare, t, shapes[_shape_key(t)]): ("prep", k) for k, t in zip(keys, firsts,
                                                                                                 strict=True)}
                ready: dict[str, tuple[dict, float]] = {}
                parts: dict[int, tuple] = {}
                t_progs = None
                while pending:
                    finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for f in finished:
                        what, k = pending.pop(f)
                        if what == "prep":
                            ready[k] = f.result()
                            if len(ready) == len(keys):
                                t_progs = time.perf_counter()
                            for j, (kj, idx) in enumerate(chunks):
                                if kj == k:
                                    pending[ex.submit(_evaluate_group, ready[k][0], [tasks[i] for i in idx])] = \
                                        ("points", j)
                        else:
                            parts[k] = f.result()
                            done += len(chunks[k][1])
                            progress(done, n)
                prepared = [ready[k] for k in keys]
                progs = {k: ready[k][0] for k in keys}
                evaluated = [parts[j] for j in range(len(chunks))]
    out: list[dict] = [{}] * n
    for (_k, idx), (part, _cpu, _ph) in zip(chunks, evaluated, strict=True):
        for i, r in zip(idx, part, strict=True):
            out[i] = r
    t_end = time.perf_counter()
    in_process = not ray_address and (w == 1 or len(chunks) == 1)  # then the workers' CPU is this process's
    prog_cpu = sum(c for _, c in prepared)
    point_cpu = sum(c for _, c, _ in evaluated)
    here = time.process_time() - c0
    stats.update(compiled=sum(bool(p.get("compiled")) for p in progs.values()),
                 cached=sum(not p.get("compiled") for p in progs.values()), seconds=t_end - t0,
                 cpu_seconds=here if in_process else here + prog_cpu + point_cpu,
                 stage_seconds={"shapes": t_shapes - t0, "programs": t_progs - t_shapes, "points": t_end - t_progs},
                 stage_cpu_seconds={"programs": prog_cpu, "points": point_cpu},
                 phase_seconds={k: sum(ph[k] for _, _, ph in evaluated) for k in _PHASE})
    return out
