"""Where a board's cycles go: array utilization and the share of each kind of work, prefill and decode.

The performance model times every instruction on its engine (:class:`systolica.sim.perf.PerfResult`'s
``per_op_cycles``).  The compute engine runs one instruction at a time, so its classes (weights through the
array, attention, the line ops) are parts of its busy time and add up to at most the run's cycles; LOAD and
STORE run on their own engines beside it, so their shares overlap the compute classes.  With
``config.attn_beside`` ATTN / ATTN_OUT and the vector unit's line ops but REQUANT also run beside a GEMM_STREAM
that runs on: ``attention`` and ``line ops`` count only their cycles beside no stream (the time they add),
``attention_beside`` and ``line_ops_beside`` the others.  Neither says what attention costs a decode step: a
cycle beside no stream may still be one the weight ports spend reading ahead, and the KV pages' LOADs may hold
the ATTNs; ``attention_adds`` (the decode points of a prompt sweep, :meth:`AccelTimer.attention_added
<systolica.bench.accel_model.AccelTimer.attention_added>`) is that what-if: the step's cycles less those with
every ATTN, ATTN_OUT and KV-cache LOAD / STORE taking a cycle, over its cycles.  ``array`` is
``ARRAY_BUSY / CYCLES``: the fraction of cycles the systolic array computes.  ``bound`` compares the run
with the array's peak: cycles ÷ (MACs ÷ (rows x cols)), the same MACs the roofline's compute bound counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from systolica.sim.perf import PerfResult

__all__ = ["CLASSES", "op_class", "breakdown", "render_breakdown"]

#: (class, its ops); a compute op not named here is a line op
CLASSES = (("array", ("GEMM_STREAM", "GEMM")), ("attention", ("ATTN", "ATTN_OUT")),
           ("load", ("LOAD",)), ("store", ("STORE",)))
_SKIP = ("NOP", "FINISH")


def op_class(op: str) -> str:
    """The class of one opcode: ``array``, ``attention``, ``load``, ``store`` or ``line ops``."""
    for name, ops in CLASSES:
        if op in ops:
            return name
    return "line ops"


def breakdown(results: Iterable[PerfResult], *, macs_bound: float | None = None, peak_macs: int,
              what: str) -> dict[str, Any]:
    """The figures of some runs together (a prompt's prefill runs, or decode steps).

    ``macs_bound``: MACs the compute bound counts for these runs (None: no compute bound, as for decode, which
    the weight stream bounds); ``peak_macs``: rows x cols of the configuration.
    """
    cycles = busy = macs = 0
    per: dict[str, int] = {}
    beside: dict[str, int] = {}
    for r in results:
        cycles += r.cycles
        busy += r.array_busy
        macs += r.macs
        for op, c in r.per_op_cycles.items():
            if op not in _SKIP:
                k = op_class(op)
                per[k] = per.get(k, 0) + c
        for op, c in r.beside_cycles.items():
            beside[op_class(op)] = beside.get(op_class(op), 0) + c
    for k, c in beside.items():  # the time a class adds: its cycles beside no weight stream
        per[k] = per.get(k, 0) - c
    per["attention_beside"] = beside.get("attention", 0)
    per["line_ops_beside"] = beside.get("line ops", 0)
    if cycles <= 0:
        raise ValueError(f"{what}: no cycles to break down")
    bound_cycles = None if macs_bound is None else macs_bound / peak_macs
    shares = {k: per.get(k, 0) / cycles for k in ("array", "attention", "line ops", "load", "store",
                                                   "attention_beside", "line_ops_beside")}
    return {"what": what, "cycles": cycles, "array_busy": busy, "array_utilization": busy / cycles, "macs": macs,
            "compute_bound_cycles": bound_cycles, "x_compute_bound": cycles / bound_cycles if bound_cycles else None,
            "shares": shares,
            "source": "performance model (sim/perf.py): per-instruction engine cycles; ARRAY_BUSY / CYCLES"}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def render_breakdown(rows: list[tuple[str, dict[str, dict]]], title: str = "where the cycles go"):
    """A :class:`rich.table.Table`: one line per (board, phase) of ``rows`` = [(board, {phase: breakdown})]."""
    from rich.table import Table

    t = Table(title=title, caption="compute-engine shares (array, attention, line ops) add up to at most 100%; "
                                   "LOAD and STORE run beside them; attention, line ops: their cycles beside no weight stream "
                                   "(config.attn_beside); x compute bound: cycles over the model's MACs per token (its LM head "
                                   "included) x prompt tokens / (rows x cols), as the roofline counts them, though a prefill "
                                   "computes the head for its last token only; attention adds: the decode step's cycles less "
                                   "those with ATTN, ATTN_OUT and the KV cache's LOADs and STOREs free, over its cycles (a "
                                   "what-if); performance model")
    for col, just in (("board", "left"), ("phase", "left"), ("cycles", "right"), ("x compute bound", "right"),
                      ("array util %", "right"), ("GEMM %", "right"), ("attention %", "right"),
                      ("attention adds %", "right"),
                      ("line ops %", "right"), ("LOAD %", "right"), ("STORE %", "right")):
        t.add_column(col, justify=just)
    for board, phases in rows:
        for i, b in enumerate(phases.values()):
            s = b["shares"]
            xb = b["x_compute_bound"]
            t.add_row(board if i == 0 else "", b["what"], f"{b['cycles']:,}", "-" if xb is None else f"{xb:.2f}",
                      _pct(b["array_utilization"]), _pct(s["array"]), _pct(s["attention"]),
                      _pct(b.get("attention_adds")), _pct(s["line ops"]),
                      _pct(s["load"]), _pct(s["store"]))
    return t
