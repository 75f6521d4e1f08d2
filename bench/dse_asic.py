"""ASIC points of the design-space sweep (``systolica dse --asic``): NanGate 45 nm area, Fmax and power beside
decode tokens/s, for array shapes of one base configuration.

A point is one (model, array shape, clock, DRAM bandwidth).  Its area, Fmax and power come only from a measured
ASIC estimate of its configuration (``systolica hw build --asic --config C``, cached by
:mod:`systolica.boards.asic_cache`; ``dse --asic --synth`` runs the missing ones): cell area from synthesis, the
SRAM buffers from the estimate's stated macro model, Fmax and power from OpenSTA.  Without one a point is
``asic: not measured``: its speed is listed, its area is not, and it is never ranked.

- **Clock**: the measured Fmax (OpenSTA, typical corner, wire-load model) unless ``--clocks`` sweeps it; a swept
  clock above the measured Fmax is ``met: false`` and never on the front.
- **Power**: the report's standard-cell power, OpenSTA at its own target clock; at another clock the dynamic part
  (internal + switching) scales with the clock and leakage stays (**assumed**).  SRAM macros and DRAM are not in it
  (the report says so), so energy per token is the logic's.
- **DRAM**: ``--dram-gbps`` or :data:`ASIC_DRAM_GBPS` (**assumed**: one LPDDR4-3200 x32 channel).
- **Speed**: the performance model (validated against RTL cycles) on the same programs as the FPGA sweep
  (:func:`systolica.bench.dse.programs_for`).

The Pareto front (:data:`ASIC_OBJECTIVES`: decode tokens/s up, area and energy per token down) is per model among
the measured points.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["ASIC_DRAM_GBPS", "ASIC_OBJECTIVES", "asic_tasks", "asic_point", "asic_front", "synthesize_missing_asic",
           "power_at"]

#: assumed DRAM of an ASIC point without --dram-gbps: one LPDDR4-3200 x32 channel, 3200 MT/s x 4 bytes
ASIC_DRAM_GBPS = 12.8
ASIC_DRAM_SOURCE = "assumed: one LPDDR4-3200 x32 channel (3200 MT/s x 4 B = 12.8 GB/s)"
#: (key, sense): decode speed up; area and energy per token down
ASIC_OBJECTIVES: tuple[tuple[str, str], ...] = (("decode_tokens_per_s", "max"), ("area_mm2", "min"),
                                                ("joules_per_token", "min"))


def asic_tasks(models: Sequence[str], base: str, shapes: Sequence[tuple[int, int]], *, prompt_len: int = 16,
               clocks: Sequence[float] = (), dram_gbps: Sequence[float] = ()) -> list[dict]:
    """Every (model, shape of preset/TOML ``base``, clock, DRAM bandwidth) as a task for :func:`asic_point`."""
    import itertools

    from systolica.bench.dse import variants
    from systolica.config import load_config

    cfg0 = load_config(base)
    tasks = []
    for cfg in variants(cfg0, shapes, [cfg0.dma_bits]):
        for m, f, g in itertools.product(models, clocks or [None], dram_gbps or [None]):
            tasks.append({"model": m, "board": "asic", "config": cfg.to_dict(), "prompt_len": prompt_len,
                          "gemm": "systolic", "clock_mhz": None if f is None else float(f),
                          "dram_gbps": None if g is None else float(g)})
    return tasks


def power_at(power: dict[str, Any], mhz: float) -> float | None:
    """Standard-cell power (W) at ``mhz`` from a report's OpenSTA figures at its own clock: dynamic scaled with the
    clock (assumed), leakage as measured; ``None`` when the report has no dynamic power."""
    if power.get("total") is None or not power.get("clock_mhz"):
        return None
    leak = float(power.get("leakage") or 0.0)
    dyn = float(power["total"]) - leak
    return (leak + dyn * mhz / float(power["clock_mhz"])) * 1e-3


def asic_point(task: dict, programs: dict | None = None) -> dict:
    """One ASIC design point (see the module docstring)."""
    from systolica.bench.dse import _timed, programs_for
    from systolica.boards.asic_cache import lookup
    from systolica.config import AccelConfig
    from systolica.sim.perf_costs import PerfParams
    from systolica.sim.roofline import board_params

    cfg = AccelConfig.from_dict(dict(task["config"]))
    rep = lookup(cfg, "top")
    fmax = ((rep or {}).get("timing") or {}).get("fmax_mhz")
    dram = float(task.get("dram_gbps") or ASIC_DRAM_GBPS)
    out: dict[str, Any] = {"model": task["model"], "board": "asic", "config": cfg.name, "rows": cfg.rows,
                           "cols": cfg.cols, "dma_bits": cfg.dma_bits, "dram_gbps": dram,
                           "dram_source": "swept" if task.get("dram_gbps") else ASIC_DRAM_SOURCE,
                           "asic": "measured" if rep else "not measured", "fmax_mhz": fmax}
    if task.get("clock_mhz"):
        mhz = float(task["clock_mhz"])
        clock = {"mhz": mhz, "basis": "swept", "met": None if fmax is None else mhz <= fmax}
    elif fmax:
        clock = {"mhz": float(fmax), "basis": "measured Fmax (OpenSTA)", "met": True}
    else:
        clock = {"mhz": cfg.clock_mhz, "basis": "assumed (the config's clock; no ASIC timing measured)", "met": None}
    out["clock"] = clock
    try:
        progs = programs if programs is not None else programs_for(task)
        if "error" in progs:
            return {**out, "error": progs["error"]}
        params = board_params(cfg, dram_gbps=dram, clock_mhz=clock["mhz"], base=PerfParams(gemm="systolic"))
        dec, pre = _timed(cfg, params, progs)
    except Exception as e:  # noqa: BLE001 - a config the model does not fit is a result, not a crash
        return {**out, "error": f"{type(e).__name__}: {e}"}
    f = clock["mhz"] * 1e6
    tps = f / dec
    out.update(decode_cycles=dec, prefill_cycles=pre, decode_tokens_per_s=tps, ttft_s=pre / f)
    if rep:
        watts = power_at(rep.get("power") or {}, clock["mhz"])
        out.update(area_mm2=rep["area"]["total_mm2"], logic_um2=rep["area"]["logic_um2"],
                   sram_um2=rep["area"]["sram_um2"], area_source=f"{rep['area']['logic_source']}; SRAM: "
                   f"{rep['area']['sram_source']}", units={k: v["area_um2"] for k, v in rep["units"].items()},
                   power_w=watts, joules_per_token=None if watts is None else watts / tps,
                   power_source=("OpenSTA standard-cell power at "
                                 f"{rep['power'].get('clock_mhz')} MHz, dynamic scaled to the point's clock (assumed); "
                                 "SRAM macros and DRAM not included") if watts is not None else
                   rep["power"].get("source"), report=rep["cache_path"])
    else:
        out.update(area_mm2=None, power_w=None, joules_per_token=None,
                   area_source="not measured (systolica hw build --asic --config C, or dse --asic --synth)")
    return out


def asic_front(points: Sequence[dict]) -> set[int]:
    """Indices of ``points`` on the Pareto front per model, among measured points (area and energy known) whose
    clock is met."""
    from systolica.bench.dse import pareto_front

    front: set[int] = set()
    for m in dict.fromkeys(p.get("model") for p in points):
        idx = [i for i, p in enumerate(points) if p.get("model") == m and "error" not in p
               and p.get("asic") == "measured" and p.get("joules_per_token") is not None
               and p["clock"].get("met") is not False]
        if idx:
            front |= {idx[j] for j in pareto_front([points[i] for i in idx], ASIC_OBJECTIVES)}
    return front


def synthesize_missing_asic(tasks: Sequence[dict], *, timeout: float = 3600.0,
                            say: Callable[[str], None] = lambda s: None) -> list[dict]:
    """Run the ASIC estimate of the whole accelerator (one configuration at a time) for every task's configuration
    without a current cached report; each is cached.  Returns a record per run."""
    from systolica.boards.asic import asic_estimate
    from systolica.boards.asic_cache import lookup, store
    from systolica.config import AccelConfig

    done, out = set(), []
    for t in tasks:
        cfg = AccelConfig.from_dict(dict(t["config"]))
        if cfg.hash_hex() in done:
            continue
        done.add(cfg.hash_hex())
        if lookup(cfg, "top") is not None:
            continue
        say(f"ASIC estimate of {cfg.name} ({cfg.rows}x{cfg.cols}): NanGate 45 nm, minutes to tens of minutes")
        rep = asic_estimate("top", cfg, timeout=timeout, say=say)
        out.append({"config": cfg.name, "seconds": sum(rep["seconds"].values()), "cache": str(store(rep, cfg))})
    return out
