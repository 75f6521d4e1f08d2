"""The comparison: rows of systems side by side, as a rich table and as JSON.

Ratios are computed against a reference row (PyTorch CPU when it ran, else the first measured row),
so the table reads "systolica on kv260 decodes N x faster than PyTorch on this CPU".
"""

from __future__ import annotations

import json
import platform
from collections.abc import Sequence
from pathlib import Path

from systolica.bench.baselines import BaselineResult

__all__ = ["reference_row", "comparison", "render_table", "write_json", "SCHEMA"]

SCHEMA = "systolica-bench/1"


def reference_row(rows: Sequence[BaselineResult]) -> BaselineResult | None:
    """The row ratios are taken against: PyTorch CPU if it ran, else the first row with a decode figure
    (never a board row whose fit is not a measured yes: it is hypothetical)."""
    ok = [r for r in rows if r.skipped is None and r.decode_tokens_per_s
          and (r.extra.get("fit") is None or r.extra["fit"]["state"] == "yes")]
    for r in ok:
        if r.name.startswith("PyTorch cpu"):
            return r
    return ok[0] if ok else None


def comparison(rows: Sequence[BaselineResult]) -> list[dict]:
    """Every row as a dict with the derived figures and the ratios to :func:`reference_row`."""
    ref = reference_row(rows)
    out = []
    for r in rows:
        d = r.to_dict()
        d["decode_speedup_vs_ref"] = (r.decode_tokens_per_s / ref.decode_tokens_per_s
                                      if ref and r.decode_tokens_per_s else None)
        d["ttft_speedup_vs_ref"] = (ref.ttft_s / r.ttft_s if ref and r.ttft_s and ref.ttft_s else None)
        d["tokens_per_joule_vs_ref"] = (r.tokens_per_joule / ref.tokens_per_joule
                                        if ref and r.tokens_per_joule and ref.tokens_per_joule else None)
        d["reference"] = ref.name if ref else None
        out.append(d)
    return out


def _f(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def render_table(rows: Sequence[BaselineResult], title: str = "systolica bench"):
    """A :class:`rich.table.Table` of the comparison."""
    from rich.table import Table

    t = Table(title=title, show_lines=False)
    t.add_column("system", justify="left", no_wrap=True)
    for col, just in (("TTFT ms", "right"), ("decode tok/s", "right"), ("x ref", "right"),
                      ("% of bound", "right"), ("power W", "right"), ("tok/J", "right"), ("$/Mtok", "right"),
                      ("fits board", "left"), ("note", "left")):
        t.add_column(col, justify=just)
    for d in comparison(rows):
        frac = d["extra"].get("decode_fraction_of_bound")
        if d["skipped"]:
            t.add_row(d["name"], "-", "-", "-", "-", "-", "-", "-", "-", f"skipped: {d['skipped']}")
            continue
        fit = d["extra"].get("fit")
        if d["extra"].get("roofline"):
            clock = d["extra"].get("clock") or {}
            note = (f"modelled, {clock['label']}" if clock.get("label") else
                    f"modelled at {clock.get('mhz', d['extra'].get('clock_mhz', 0)):g} MHz ({clock.get('basis', 'assumed')})")
        else:
            note = "measured"
        power = d["extra"].get("power")
        if power:
            note += f", power {power['basis']}"
        else:
            note += ", power measured" if "measured" in (d["power_source"] or "") else ", power stated"
        hypothetical = fit is not None and fit["state"] != "yes"
        if hypothetical:
            note += ", HYPOTHETICAL: " + ("does not fit" if fit["state"] == "no" else "fit not measured")
        fits = "-" if fit is None else d["extra"].get("fit_label", fit["state"])
        t.add_row(d["name"], _f(d["ttft_s"] and d["ttft_s"] * 1e3, ".1f"), _f(d["decode_tokens_per_s"], ".1f"),
                  _f(d["decode_speedup_vs_ref"], ".2f"), _f(frac and 100 * frac, ".0f"), _f(d["power_w"], ".1f"),
                  _f(d["tokens_per_joule"], ".2f"), _f(d["usd_per_mtok"], ".3f"),
                  fits if not hypothetical else f"[red]{fits}[/red]", note, style="dim" if hypothetical else None)
    return t


def write_json(path: str | Path, rows: Sequence[BaselineResult], meta: dict, sweeps: dict | None = None) -> dict:
    """Write the comparison (and the sweeps behind the plots) as JSON; returns what was written."""
    doc = {"schema": SCHEMA, "meta": {**meta, "host": platform.node(), "python": platform.python_version(),
                                      "machine": platform.machine(), "processor": platform.processor()},
           "rows": comparison(rows), "sweeps": sweeps or {}}
    Path(path).write_text(json.dumps(doc, indent=1, default=str))
    return doc


def render_batch_table(sweeps: dict):
    """The by-batch comparison: a row per system and batch (tokens/s, tokens/J, $/Mtok, where the figure comes
    from), then the crossovers."""
    from rich.table import Table

    t = Table(title="by batch size (sequences decoded together)")
    for col, just in (("system", "left"), ("batch", "right"), ("decode tok/s", "right"), ("tokens/J", "right"),
                      ("$/Mtok", "right"), ("source", "left")):
        t.add_column(col, justify=just)
    for name, pts in sweeps.get("batch", {}).items():
        for p in pts:
            if p.get("fits") is False and p.get("served_as") is None:
                t.add_row(name, str(p["batch"]), "does not fit", "", "", p.get("why", "")[:70])
                continue
            f = [p.get("decode_tokens_per_s"), p.get("tokens_per_joule"), p.get("usd_per_mtok")]
            t.add_row(name, str(p["batch"]), *("-" if v is None else f"{v:,.3g}" for v in f), p.get("source", ""))
    xs = sweeps.get("batch_crossovers", [])
    if xs:
        t.caption = "crossovers: " + "; ".join(f"{x['metric']}: {x['ahead']} passes {x['behind']} at batch "
                                               f"{x['batch']}" for x in xs)
    return t

