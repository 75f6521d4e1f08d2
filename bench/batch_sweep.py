"""``systolica bench --batches 1,4,16``: decode throughput, energy and cost per token by batch size.

systolica rows: the model is compiled with a batched decode step of ``B`` sequences (``compile_model(batch=B)``)
and the RTL-validated performance model times that program with every sequence at the prompt's length, each on
its own KV pages: tokens/s = B x clock / cycles of one step.  A batch the accelerator's buffers cannot hold is
a point marked ``fits: false`` with the compiler's reason.  PyTorch rows are measured (``run_torch(batch=B)``).
A GPU without a CUDA device here is *projected* from its datasheet (``bench/costs.json``, ``gpu_datasheet``):
tokens/s = min(B x HBM bandwidth / fp16 weight bytes a token, dense fp16 FLOP/s / (2 x parameters)), the
roofline upper bound, labelled so.

Each point carries tokens/J (the row's power basis) and $/Mtok (its $/h); :func:`crossovers` finds, for every
pair of systems, the batch at which one overtakes the other on each metric (the plots mark them).
"""

from __future__ import annotations

from collections.abc import Sequence

from systolica.bench.costs import CostInputs, load_costs, tokens_per_joule, usd_per_mtok

__all__ = ["systolica_batch_points", "gpu_projection_points", "crossovers", "with_costs"]

METRICS = ("decode_tokens_per_s", "tokens_per_joule", "usd_per_mtok")


def with_costs(points: list[dict], power_w: float | None, usd_per_hour: float | None) -> list[dict]:
    """``points`` with tokens/J and $/Mtok from the row's power and hourly cost."""
    for p in points:
        tps = p.get("decode_tokens_per_s")
        p["tokens_per_joule"] = tokens_per_joule(tps, power_w)
        p["usd_per_mtok"] = usd_per_mtok(tps, usd_per_hour)
    return points


def systolica_batch_points(model, spec, prompt: Sequence[int], batches: Sequence[int], *, page: int | None,
                           max_seq: int, gemm: str = "systolic", single_tps: float | None = None,
                           progress=lambda s: None, act_split: bool = False) -> list[dict]:
    """One point per batch size: the batched decode step of ``B`` sequences at context ``len(prompt)``,
    timed by the performance model at the board's clock (``single_tps``: the B = 1 figure of the row; ``page``:
    ``compile_model``'s, None for the compiler's choice; ``act_split``: split activations, as the row's)."""
    from systolica.artifact import StepState
    from systolica.compiler.compile import CompileError, compile_model
    from systolica.compiler.memory import MemoryError_
    from systolica.sim.perf import PerfModel
    from systolica.sim.perf_costs import PerfParams
    from systolica.sim.roofline import board_params

    f = spec.clock_mhz * 1e6
    pts = []
    for b in batches:
        if b == 1 and single_tps is not None:
            pts.append({"batch": 1, "decode_tokens_per_s": single_tps, "fits": True, "source": "performance model"})
            continue
        progress(f"{spec.name}: batched decode of {b}")
        try:
            art = compile_model(model, spec.config, page=page, max_seq=max_seq, prefill_chunk=1, batch=max(b, 2),
                                act_split=act_split)
        except (MemoryError_, CompileError) as e:  # the buffers (or an instruction field) cannot hold B rows
            pts.append({"batch": b, "decode_tokens_per_s": None, "fits": False, "why": str(e).split(";")[0]})
            continue
        ctx, pages = len(prompt), art.pages_needed(len(prompt), 1)
        rows = [(ctx, list(range(r * pages, (r + 1) * pages))) for r in range(b)]
        kind = "decode_batch" if b > 1 else "decode"
        st = StepState(0, [0] * b, [], rows=rows) if b > 1 else StepState(ctx, [0], list(range(pages)))
        pm = PerfModel(spec.config, board_params(spec.config, dram_gbps=spec.dram_gbps, base=PerfParams(gemm=gemm)))
        cycles = pm.run(art.patched_program(kind, st)).cycles
        pts.append({"batch": b, "decode_tokens_per_s": b * f / cycles, "fits": True, "cycles_per_step": cycles,
                    "source": "performance model of the batched program (RTL-validated)"})
    return served_in_smaller_batches(pts)


def served_in_smaller_batches(pts: list[dict]) -> list[dict]:
    """A batch the buffers cannot hold is still served, in steps of the largest batch that fits: such a point
    gets that batch's throughput (``served_as``), so systems compare at every number of concurrent sequences."""
    best = None
    for p in sorted(pts, key=lambda p: p["batch"]):
        if p.get("fits") and p.get("decode_tokens_per_s"):
            best = p
        elif best is not None and p.get("fits") is False:
            p["decode_tokens_per_s"] = best["decode_tokens_per_s"]
            p["served_as"] = best["batch"]
            p["source"] = f"served {best['batch']} at a time (the largest batched step that fits)"
    return pts


def gpu_projection_points(model, gpu: str, batches: Sequence[int], costs: CostInputs | None = None) -> dict:
    """A GPU's roofline by batch from its datasheet, for when no CUDA device is here to measure it."""
    costs = costs or load_costs()
    sheet = costs.gpu_datasheet(gpu)
    from systolica.sim.roofline import model_work

    params = model_work(model.config).macs_per_token(0)  # a MAC per weight a token (the matrices)
    wbytes = 2 * params  # fp16 weights, read once per step for the whole batch
    bw, flops = sheet["hbm_gbps"].value * 1e9, sheet["fp16_tflops"].value * 1e12
    pts = [{"batch": b, "decode_tokens_per_s": min(b * bw / wbytes, flops / (2 * params)), "fits": True,
            "source": f"projected upper bound: datasheet roofline ({sheet['hbm_gbps'].source})"} for b in batches]
    return {"points": with_costs(pts, costs.gpu_power_for(gpu).value, costs.gpu_rent_for(gpu).value),
            "power_source": costs.gpu_power_for(gpu).source, "cost_source": costs.gpu_rent_for(gpu).source}


def crossovers(sweep: dict[str, list[dict]], metric: str = "decode_tokens_per_s") -> list[dict]:
    """For each pair of systems, the first batch at which the one behind at the smallest common batch is ahead
    (for ``usd_per_mtok`` lower is better)."""
    better = (lambda a, b: a < b) if metric == "usd_per_mtok" else (lambda a, b: a > b)
    out = []
    names = sorted(sweep)
    for i, a in enumerate(names):
        for bname in names[i + 1:]:
            va = {p["batch"]: p.get(metric) for p in sweep[a] if p.get(metric) is not None}
            vb = {p["batch"]: p.get(metric) for p in sweep[bname] if p.get(metric) is not None}
            common = sorted(set(va) & set(vb))
            if len(common) < 2:
                continue
            lead = a if better(va[common[0]], vb[common[0]]) else bname
            for x in common[1:]:
                now = a if better(va[x], vb[x]) else bname
                if now != lead:
                    out.append({"metric": metric, "batch": x, "ahead": now, "behind": lead})
                    break
    return out
