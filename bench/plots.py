"""Plots of ``systolica bench``: roofline, tokens/s vs prompt length and batch, energy per token.

matplotlib is imported inside each function (Agg backend: files only, no display).  Each function
takes the JSON document :func:`systolica.bench.report.write_json` produces, so plots can be redrawn
from a saved run.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["plot_all", "plot_roofline", "plot_prompt_sweep", "plot_batch_sweep", "plot_energy"]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _hypothetical(row: dict) -> str:
    """'' for a row that fits its board (or is no board row); else why its figures are hypothetical."""
    fit = row["extra"].get("fit")
    if fit is None or fit["state"] == "yes":
        return ""
    return "does not fit" if fit["state"] == "no" else "fit not measured"


def _hypothetical_names(doc: dict) -> dict[str, str]:
    return {r["name"]: _hypothetical(r) for r in doc["rows"]}


def plot_roofline(doc: dict, path: Path) -> Path:
    """Attainable MAC/s vs arithmetic intensity per board, with the decode and prefill points reached."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, r in enumerate(x for x in doc["rows"] if x["extra"].get("roofline") and not x["skipped"]):
        roof, work, ex = r["extra"]["roofline"], r["extra"]["work"], r["extra"]
        color = f"C{i}"
        hyp = _hypothetical(r)
        tag = f" ({hyp})" if hyp else ""
        face = "none" if hyp else color  # hollow markers: the board cannot hold this design (or nobody measured)
        ridge = roof["ridge_macs_per_byte"]
        xs = [ridge / 100, ridge, ridge * 100]
        ax.loglog(xs, [min(roof["peak_macs_per_s"], x * roof["dram_bytes_per_s"]) for x in xs], color=color,
                  label=f"{r['device']} roof")
        dec_i = work["matmul_macs"] / work["weight_bytes"]
        ax.loglog([dec_i], [r["decode_tokens_per_s"] * work["matmul_macs"]], "o", color=color,
                  markerfacecolor=face, label=f"{r['device']} decode{tag}")
        chunk = max(1, int(ex.get("prefill_rows", 1)))
        ax.loglog([dec_i * chunk], [ex["prefill_tokens_per_s"] * work["matmul_macs"]], "s", color=color,
                  markerfacecolor=face, label=f"{r['device']} prefill{tag}")
    ax.set_xlabel("arithmetic intensity (MACs per DRAM byte)")
    ax.set_ylabel("MAC/s")
    ax.set_title("Roofline (modelled at board clock)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_prompt_sweep(doc: dict, path: Path) -> Path:
    """Decode tokens/s and time to first token vs prompt length."""
    plt = _plt()
    sw = doc["sweeps"].get("prompt", {})
    hyp = _hypothetical_names(doc)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for name, pts in sw.items():
        lens = [p["prompt_tokens"] for p in pts]
        style, label = ("o--", f"{name} ({hyp[name]})") if hyp.get(name) else ("o-", name)
        a1.plot(lens, [p["decode_tokens_per_s"] for p in pts], style, label=label, mfc="none" if hyp.get(name) else None)
        a2.plot(lens, [p["ttft_s"] * 1e3 for p in pts], style, label=label, mfc="none" if hyp.get(name) else None)
    a1.set_xlabel("prompt tokens")
    a1.set_ylabel("decode tokens/s")
    a2.set_xlabel("prompt tokens")
    a2.set_ylabel("time to first token (ms)")
    a2.set_yscale("log")
    for a in (a1, a2):
        a.grid(True, alpha=0.3)
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_batch_sweep(doc: dict, path: Path) -> Path:
    """Decode tokens/s, tokens/J and $/Mtok vs batch, one line per system, crossovers marked (x)."""
    plt = _plt()
    sw = doc["sweeps"].get("batch", {})
    hyp = _hypothetical_names(doc)
    panels = (("decode_tokens_per_s", "decode tokens/s (all sequences)"), ("tokens_per_joule", "tokens per joule"),
              ("usd_per_mtok", "$ per million tokens (lower is better)"))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, (key, label) in zip(axes, panels, strict=True):
        for i, (name, pts) in enumerate(sw.items()):
            xs = [p["batch"] for p in pts if p.get(key)]
            ys = [p[key] for p in pts if p.get(key)]
            if not xs:
                continue
            proj = "projected" in name
            style = "o--" if hyp.get(name) or proj else "o-"
            ax.plot(xs, ys, style, color=f"C{i}", label=f"{name} ({hyp[name]})" if hyp.get(name) else name)
            for p in pts:
                if p.get("fits") is False:  # a batch the buffers do not hold (served in smaller steps, if at all)
                    ax.axvline(p["batch"], color=f"C{i}", alpha=0.15, lw=6)
        for x in doc["sweeps"].get("batch_crossovers", []):
            if x["metric"] != key:
                continue
            pts = {p["batch"]: p[key] for p in sw.get(x["ahead"], []) if p.get(key)}
            if x["batch"] in pts:
                ax.plot([x["batch"]], [pts[x["batch"]]], "kx", ms=10, mew=2)
                ax.annotate(f"{x['ahead'].split(' (')[0]} ahead", (x["batch"], pts[x["batch"]]), fontsize=6,
                            textcoords="offset points", xytext=(4, 4))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch (sequences decoded together)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=6)
    fig.suptitle("by batch size: systolica from the performance model of its batched decode step; dashed: "
                 "projected or without a measured fit; x: crossover", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_energy(doc: dict, path: Path) -> Path:
    """Joules per decoded token of every system that ran (lower is better)."""
    plt = _plt()
    rows = [r for r in doc["rows"] if not r["skipped"] and r["tokens_per_joule"]]
    fig, ax = plt.subplots(figsize=(9, 1.0 + 0.45 * max(len(rows), 1)))
    bars = ax.barh([r["name"] + (f" [{_hypothetical(r)}]" if _hypothetical(r) else "") for r in rows],
                   [1 / r["tokens_per_joule"] for r in rows],
                   color=["C0" if r["extra"].get("roofline") else "C1" for r in rows])
    for bar, r in zip(bars, rows, strict=True):
        if _hypothetical(r):  # greyed and hatched: the board cannot be shown to hold this design
            bar.set_color("0.8")
            bar.set_hatch("//")
            bar.set_edgecolor("0.4")
    ax.set_xscale("log")
    ax.set_xlabel("energy per token (J), stated or measured power / decode tokens/s")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_all(doc: dict, out_dir: str | Path) -> list[Path]:
    """Write every plot into ``out_dir`` (created); returns the files."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    return [plot_roofline(doc, d / "roofline.png"), plot_prompt_sweep(doc, d / "tokens_vs_prompt.png"),
            plot_batch_sweep(doc, d / "tokens_vs_batch.png"), plot_energy(doc, d / "energy_per_token.png")]
