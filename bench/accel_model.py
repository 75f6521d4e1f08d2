"""systolica on a board, modelled: the compiled programs timed by the performance model at the board's clock.

The runtime's schedule is replayed without the data: prefill runs the prompt in the runs of
:func:`systolica.driver.runtime.prefill_runs`; decode runs one step per token.  Every run is the
program patched for its step (positions, KV pages, valid tokens per tile), so attention costs grow
with the context as they do on the hardware.  The board gives the DRAM bandwidth and latency
(:func:`systolica.sim.roofline.board_params`), its power and price (``boards/<name>.toml``); the row's
``extra["roofline_report"]`` sets the figures beside the board's and the design's roofs
(:mod:`systolica.bench.roofline_report`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from systolica.artifact import Artifact, StepState
from systolica.bench.baselines import BaselineResult
from systolica.bench.costs import CostInputs, board_usd_per_hour, load_costs
from systolica.bench.cycle_breakdown import breakdown
from systolica.boards.board import Board
from systolica.config import AccelConfig
from systolica.driver.runtime import prefill_runs
from systolica.sim.perf import PerfModel, PerfResult
from systolica.sim.perf_costs import PerfParams
from systolica.sim.roofline import Roofline, board_params, model_work

__all__ = ["BoardSpec", "board_spec", "AccelTimer", "model_on_board", "prefill_breakdown", "sweep_breakdowns"]


@dataclass(frozen=True)
class BoardSpec:
    """What the model needs from a board description."""

    name: str
    config: AccelConfig
    dram_gbps: float  # what the DRAM delivers (peak x controller efficiency)
    power_w: float
    price_usd: float
    source: str  # the board file
    clock: dict | None = None  # clock_basis(): the clock the rows use and its basis (None: the config's target)
    # the board file itself (its memory figures and their sources), when loaded from one
    board: Board | None = field(default=None, compare=False, repr=False)

    @property
    def clock_mhz(self) -> float:
        return float(self.clock["mhz"]) if self.clock else self.config.clock_mhz


def board_spec(name: str) -> BoardSpec:
    """The :class:`BoardSpec` of a board in ``boards/`` (raises the boards' ``BoardError`` for unknown names)."""
    from systolica.boards.board import load_board
    from systolica.boards.fit_status import clock_basis

    b = load_board(name)
    peak = b.window_peak_gbps or b.dram_peak_gbps
    return BoardSpec(b.name, b.config, peak * b.dram_efficiency, b.power_w, b.price_usd, str(b.path),
                     clock=clock_basis(b.config, board=b), board=b)


class AccelTimer:
    """Times the runs of a compiled model on one configuration."""

    def __init__(self, art: Artifact, params: PerfParams):
        self.art = art
        self.cfg = art.config
        self.model = PerfModel(self.cfg, params)
        self.page = art.page

    def run(self, kind: str, pos: int, tokens: Sequence[int]) -> PerfResult:
        """The model's timeline of one run of program ``kind`` at position ``pos`` over ``tokens``."""
        pages = list(range(self.art.pages_needed(pos, len(tokens))))
        return self.model.run(self.art.patched_program(kind, StepState(pos, list(tokens), pages)))

    def _cycles(self, kind: str, pos: int, tokens: Sequence[int]) -> int:
        return self.run(kind, pos, tokens).cycles

    def prefill_results(self, prompt: Sequence[int]) -> list[PerfResult]:
        """The runs of the whole prompt, scheduled as :meth:`Runtime.prefill` schedules it."""
        return [self.run(r.kind, r.start, prompt[r.start:r.start + r.rows]) for r in prefill_runs(self.art, len(prompt))]

    def prefill_cycles(self, prompt: Sequence[int]) -> int:
        """Cycles of the whole prompt, scheduled as :meth:`Runtime.prefill` schedules it."""
        return sum(r.cycles for r in self.prefill_results(prompt))

    def decode_cycles(self, pos: int, token: int = 0) -> int:
        return self._cycles("decode", pos, [token])

    def attention_added(self, pos: int, token: int = 0) -> float:
        """The share of the decode step at ``pos`` that attention adds: its cycles less those of the same step with
        every ATTN, ATTN_OUT and LOAD / STORE of the KV cache taking one cycle (:meth:`PerfModel.run_without`), over
        its cycles.  Attention beside a weight stream or the ports' read-ahead costs nothing here; on the critical
        path it counts, whichever of the attention unit and the pages' LOADs holds it."""
        kv = self.art.region("kv")
        lo, hi = kv["offset"], kv["offset"] + kv["size"]

        def free(ins) -> bool:
            return ins.op in ("ATTN", "ATTN_OUT") or (ins.op in ("LOAD", "STORE") and lo <= ins.fields["dram"] < hi)

        words = self.art.patched_program("decode", StepState(pos, [token], list(range(self.art.pages_needed(pos, 1)))))
        whole = self.model.run(words).cycles
        return (whole - self.model.run_without(words, free).cycles) / whole


def model_on_board(art: Artifact, spec: BoardSpec, prompt: Sequence[int], n_tokens: int, *,
                   gemm: str = "systolic", costs: CostInputs | None = None) -> BaselineResult:
    """systolica's row of the comparison table for ``spec``: TTFT, decode tokens/s, roofline fractions."""
    costs = costs or load_costs()
    cfg = art.config
    params = board_params(cfg, dram_gbps=spec.dram_gbps, base=PerfParams(gemm=gemm))
    timer = AccelTimer(art, params)
    f = spec.clock_mhz * 1e6  # measured Fmax where place and route ran, else the assumed target
    pre_runs = timer.prefill_results(list(prompt))
    pre = sum(r.cycles for r in pre_runs)
    dec_runs = [timer.run("decode", len(prompt) + j, [0]) for j in range(max(n_tokens - 1, 1))]
    steps = [r.cycles for r in dec_runs]
    dec_s = sum(steps) / f
    tps = len(steps) / dec_s
    roof = Roofline.for_config(cfg, dram_gbps=spec.dram_gbps, clock_mhz=spec.clock_mhz, name=spec.name)  # tps's clock
    work = model_work(_model_config(art), weight_bytes=int(art.manifest["stats"]["decode"]["weight_bytes"]))
    ctx = len(prompt) + len(steps) // 2
    # decode reads its weights with GEMM_STREAM through every port (the roofline's LOAD path is one port), capped by
    # the board's DRAM: the bound sim/roofline.py's board report calls min(board roof, design stream bound)
    stream = roof.stream_bytes_per_s if spec.dram_gbps is None else min(roof.stream_bytes_per_s, spec.dram_gbps * 1e9)
    dec_bound = stream / work.decode_bytes(ctx)
    pre_bound = roof.prefill_bound_tokens_per_s(work, len(prompt) // 2)
    res = BaselineResult(f"systolica {spec.name} (modelled)", spec.name, ttft_s=pre / f, decode_tokens_per_s=tps,
                         power_w=spec.power_w, power_source=f"stated board power ({spec.source})",
                         usd_per_hour=board_usd_per_hour(spec.price_usd, spec.power_w, costs),
                         cost_source=f"${spec.price_usd:g} over {costs.amortization_years.value:g} years + "
                                     f"{spec.power_w:g} W at ${costs.electricity.value}/kWh")
    res.extra = {"config": cfg.to_dict(), "gemm": gemm, "clock_mhz": spec.clock_mhz, "params": params.to_dict(),
                 "prefill_cycles": pre, "decode_cycles_per_token": sum(steps) / len(steps),
                 "roofline": roof.to_dict(), "work": work.to_dict(),
                 "decode_bound_tokens_per_s": dec_bound, "decode_fraction_of_bound": tps / dec_bound,
                 "prefill_tokens_per_s": len(prompt) / (pre / f),
                 "prefill_bound_tokens_per_s": pre_bound,
                 "prefill_fraction_of_bound": len(prompt) / (pre / f) / pre_bound,
                 "decode_context": ctx, "prompt_tokens": len(prompt),
                 "cycle_breakdown": {
                     "prefill": prefill_breakdown(pre_runs, cfg, work, len(prompt)),
                     "decode": breakdown(dec_runs, peak_macs=cfg.rows * cfg.cols,
                                         what=f"decode {len(steps)} step{'s' * (len(steps) > 1)}, context {len(prompt)}-"
                                              f"{len(prompt) + len(steps) - 1}")}}
    if spec.clock:
        res.extra["clock"] = spec.clock
    if spec.board is not None:
        from systolica.bench.roofline_report import board_roofline

        rows = max((art.rows(k) for k in ("prefill", "prefill_nohead") if k in art.programs), default=0)
        res.extra["roofline_report"] = board_roofline(
            spec.board, cfg, work, clock=spec.clock or {"mhz": spec.clock_mhz}, decode_context=ctx,
            prompt_tokens=len(prompt), prefill_rows=rows, decode_tps=tps, prefill_tps=len(prompt) / (pre / f),
            prefill_passes=len(prefill_runs(art, len(prompt))))
    return res


def prefill_breakdown(runs: list[PerfResult], cfg: AccelConfig, work, n: int) -> dict:
    """:func:`~systolica.bench.cycle_breakdown.breakdown` of a prompt's ``runs`` against the roofline's compute
    bound (``work.macs_per_token`` at half the prompt, for each of its ``n`` tokens)."""
    return breakdown(runs, macs_bound=work.macs_per_token(n // 2) * n, peak_macs=cfg.rows * cfg.cols,
                     what=f"prefill {n} tokens")


def sweep_breakdowns(timer: AccelTimer, prompt: Sequence[int]) -> dict[str, dict]:
    """The prefill of ``prompt`` and the decode step after it, broken down (a point of the prompt sweep)."""
    art, n = timer.art, len(prompt)
    work = model_work(_model_config(art), weight_bytes=int(art.manifest["stats"]["decode"]["weight_bytes"]))
    return {f"prefill@{n}": prefill_breakdown(timer.prefill_results(prompt), timer.cfg, work, n),
            f"decode@{n}": breakdown([timer.run("decode", n, [0])], peak_macs=timer.cfg.rows * timer.cfg.cols,
                                     what=f"decode at context {n}") | {"attention_adds": timer.attention_added(n)}}


def _model_config(art: Artifact):
    from systolica.model import ModelConfig

    m = art.manifest["model"]
    keys = ("arch", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "vocab_size", "max_seq", "norm_eps",
            "rope_base", "tied_output", "name")
    return ModelConfig(**{k: m[k] for k in keys})
