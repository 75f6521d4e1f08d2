"""The Pareto plot of ``systolica dse`` (:mod:`systolica.cli.dse`): tokens/s vs array MACs, energy vs tokens/s."""

from __future__ import annotations

from pathlib import Path

__all__ = ["plot_pareto", "plot_asic"]


def plot_pareto(points: list[dict], front: set[int], path: str | Path) -> Path:
    """Tokens/s vs array MACs and energy per token vs tokens/s.  Filled: fits (measured); hollow:
    does not fit; faint x: fit not measured; ringed: Pareto front (among measured fits only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    boards = sorted({p["board"] for p in points})
    for bi, b in enumerate(boards):
        for i, p in enumerate(points):
            if p["board"] != b:
                continue
            if p.get("fit") == "yes":
                kw = {"color": f"C{bi}", "marker": "o", "markerfacecolor": f"C{bi}"}
            elif p.get("fit") == "no":
                kw = {"color": f"C{bi}", "marker": "o", "markerfacecolor": "none", "alpha": 0.6}
            else:
                kw = {"color": f"C{bi}", "marker": "x", "alpha": 0.45}
            kw["linestyle"] = "none"
            a1.plot(p["macs"], p["decode_tokens_per_s"], **kw)
            a2.plot(p["decode_tokens_per_s"], p["joules_per_token"], **kw)
            if i in front:
                for ax, xy in ((a1, (p["macs"], p["decode_tokens_per_s"])),
                               (a2, (p["decode_tokens_per_s"], p["joules_per_token"]))):
                    ax.plot(*xy, marker="o", markersize=13, markerfacecolor="none", color="k", linestyle="none")
        a1.plot([], [], "o", color=f"C{bi}", label=f"{b} (fits, measured)")
    a1.plot([], [], "o", color="k", markerfacecolor="none", markersize=13, label="Pareto front (measured fits)")
    a1.plot([], [], "o", color="gray", markerfacecolor="none", label="does NOT fit (synthesis)")
    a1.plot([], [], "x", color="gray", alpha=0.45, label="fit not measured")
    a1.set_xscale("log")
    a1.set_xlabel("array MACs (rows x cols)")
    a1.set_ylabel("decode tokens/s (modelled, assumed clock)")
    a2.set_xlabel("decode tokens/s (modelled, assumed clock)")
    a2.set_ylabel("energy per token (J, board power figure)")
    a2.set_yscale("log")
    return _save(fig, (a1, a2), path)


def plot_asic(points: list[dict], front: set[int], path: str | Path) -> Path:
    """``systolica dse --asic``: tokens/s vs area and energy per token vs tokens/s of the points with a measured ASIC
    estimate (one colour per array shape; ringed: Pareto front; x: a swept clock above the measured Fmax)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    meas = [(i, p) for i, p in enumerate(points) if p.get("area_mm2") is not None]
    shapes = sorted({(p["rows"], p["cols"]) for _, p in meas})
    for i, p in meas:
        c = f"C{shapes.index((p['rows'], p['cols']))}"
        kw = {"color": c, "linestyle": "none", "marker": "x" if p["clock"].get("met") is False else "o"}
        a1.plot(p["area_mm2"], p["decode_tokens_per_s"], **kw)
        if p.get("joules_per_token") is not None:
            a2.plot(p["decode_tokens_per_s"], p["joules_per_token"], **kw)
        if i in front:
            a1.plot(p["area_mm2"], p["decode_tokens_per_s"], "o", ms=13, mfc="none", color="k")
            a2.plot(p["decode_tokens_per_s"], p["joules_per_token"], "o", ms=13, mfc="none", color="k")
    for si, (r, c) in enumerate(shapes):
        a1.plot([], [], "o", color=f"C{si}", label=f"{r}x{c}")
    a1.plot([], [], "o", color="k", mfc="none", ms=13, label="Pareto front")
    a1.plot([], [], "x", color="gray", label="clock above measured Fmax")
    n_missing = len(points) - len(meas)
    a1.set_title(f"NanGate 45 nm, measured estimates ({n_missing} point(s) not measured, not shown)", fontsize=9)
    a1.set_xlabel("area (mm^2: cells from synthesis + SRAM model)")
    a1.set_ylabel("decode tokens/s (performance model)")
    a2.set_xlabel("decode tokens/s (performance model)")
    a2.set_ylabel("energy per token (J, standard cells, OpenSTA)")
    return _save(fig, (a1, a2), path)


def _save(fig, axes, path) -> Path:
    """Grid on every panel, the first panel's legend, then write ``path`` and free the figure."""
    import matplotlib.pyplot as plt

    for a in axes:
        a.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
