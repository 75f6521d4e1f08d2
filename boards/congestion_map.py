"""Where on the die a route is congested: router2's per-tile heatmap as a map, and the units placed there.

``nextpnr-ecp5 --router router2 --router2-heatmap PREFIX`` writes, each router iteration N,
``PREFIX_congestion_by_coordinate_N.csv``: one line per tile column ``x``, one value per tile row ``y`` (the
overuse of the wires of that tile that more than one net wants).  :mod:`.nextpnr_congestion` says which nets
are stuck; this module says *where*: whether the overuse is spread over the die (the design is too large for
the part) or packed into one region (too much logic in one place, which a smaller or narrower unit there
relieves), and, with the placed netlist, which units sit in that region.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from systolica.boards.nextpnr_congestion import _unit, latest_heatmap

__all__ = ["HotRegion", "coordinate_heatmap_of", "congestion_grid", "hot_region", "plot_congestion", "latest_coordinate_heatmap"]


def latest_coordinate_heatmap(prefix: str | Path) -> Path | None:
    """The last complete ``PREFIX_congestion_by_coordinate_N.csv`` (the newest may be half written)."""
    return latest_heatmap(prefix, "coordinate")


def coordinate_heatmap_of(net_csv: str | Path) -> Path:
    """The per-tile map router2 wrote in the same iteration as the per-net heatmap ``net_csv``."""
    net_csv = Path(net_csv)
    return net_csv.with_name(net_csv.name.replace("_congestion_by_net_", "_congestion_by_coordinate_"))


def congestion_grid(path: str | Path) -> np.ndarray:
    """The heatmap as an int array indexed ``[x, y]`` (nextpnr writes a line per ``x``); short lines are padded."""
    rows = []
    for line in Path(path).read_text().splitlines():
        cells = [c for c in line.strip().split(",") if c.strip()]
        if cells:
            try:
                rows.append([int(c) for c in cells])
            except ValueError as e:
                raise ValueError(f"{path}: not a router2 congestion_by_coordinate file ({e})") from None
    if not rows:
        raise ValueError(f"{path}: empty congestion map")
    grid = np.zeros((len(rows), max(len(r) for r in rows)), dtype=np.int64)
    for x, r in enumerate(rows):
        grid[x, :len(r)] = r
    return grid


@dataclass(frozen=True)
class HotRegion:
    """The fewest tiles that hold ``share`` of a route's overuse, and what is placed in them."""

    share: float  # of the total overuse, e.g. 0.5
    tiles: int  # tiles in the region
    die_tiles: int  # tiles of the map
    x: tuple[int, int]  # the central 80% of the overuse along x (10th to 90th percentile, inclusive)
    y: tuple[int, int]  # and along y
    units: list[tuple[str, int, float]]  # (unit, its cells in the region, that share of the unit's cells), most first
    kinds: list[tuple[str, int, float]] = ()  # (cell kind, its cells in the region, that share of all of that kind)

    def describe(self, n: int = 6) -> str:
        box = (self.x[1] - self.x[0] + 1) * (self.y[1] - self.y[0] + 1)
        head = (f"{self.share:.0%} of the overuse in {self.tiles} of {self.die_tiles} tiles "
                f"({self.tiles / self.die_tiles:.1%} of the die); 80% of it along each axis within x {self.x[0]}-"
                f"{self.x[1]}, y {self.y[0]}-{self.y[1]} ({box / self.die_tiles:.0%} of the die)")
        if not self.units:
            return head
        total = sum(c for _, c, _ in self.units) or 1
        body = ", ".join(f"{u} {100 * c / total:.0f}% ({f:.0%} of its cells)" for u, c, f in self.units[:n])
        kinds = ", ".join(f"{k} {f:.0%}" for k, _, f in sorted(self.kinds, key=lambda x: -x[2])[:n])
        return f"{head}; placed there: {body}" + (f"; share of each kind of cell there: {kinds}" if kinds else "")


def hot_region(grid: np.ndarray, share: float = 0.5, locations: dict[str, tuple[int, int]] | None = None,
               kinds: dict[str, str] | None = None) -> HotRegion:
    """The region of the hottest tiles holding ``share`` of the overuse; with ``locations`` (cell -> tile, from
    :func:`systolica.boards.ecp5_paths.bel_locations` of the placed netlist) the units of the cells in it, and with
    ``kinds`` (cell -> kind, :func:`~systolica.boards.ecp5_paths.cell_kinds`) what share of each kind of cell is
    there (block RAMs over-represented there against logic: the overuse is at the block-RAM rows)."""
    if not 0 < share <= 1:
        raise ValueError(f"share={share} must be in (0, 1]")
    flat = grid.ravel()
    total = int(flat.sum())
    if total == 0:
        return HotRegion(share, 0, grid.size, (0, 0), (0, 0), [])
    order = np.argsort(flat)[::-1]
    need = int(np.searchsorted(np.cumsum(flat[order]), share * total) + 1)
    hot = np.zeros(grid.shape, dtype=bool)
    hot.ravel()[order[:need]] = True

    def central(weights: np.ndarray) -> tuple[int, int]:
        c = np.cumsum(weights) / total
        return int(np.searchsorted(c, 0.1)), int(np.searchsorted(c, 0.9))
    units: list[tuple[str, int, float]] = []
    by_kind: list[tuple[str, int, float]] = []
    if locations:
        inside: collections.Counter = collections.Counter()
        every: collections.Counter = collections.Counter()
        k_in: collections.Counter = collections.Counter()
        k_all: collections.Counter = collections.Counter()
        for cell, (x, y) in locations.items():
            u, k = _unit(cell, 3), (kinds or {}).get(cell)
            every[u] += 1
            k_all[k] += 1
            if x < grid.shape[0] and y < grid.shape[1] and hot[x, y]:
                inside[u] += 1
                k_in[k] += 1
        units = [(u, c, c / every[u]) for u, c in inside.most_common()]
        by_kind = [(k, c, c / k_all[k]) for k, c in k_in.most_common() if k is not None]
    return HotRegion(share, need, grid.size, central(grid.sum(axis=1)), central(grid.sum(axis=0)), units, by_kind)


def plot_congestion(grid: np.ndarray, out: str | Path, title: str = "", region: HotRegion | None = None) -> Path:
    """The map as a PNG: x across, y down (nextpnr's tile coordinates), the region's bounding box drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError:
        raise RuntimeError("the congestion map needs matplotlib: pip install matplotlib") from None
    out = Path(out)
    fig, ax = plt.subplots(figsize=(7, 7 * grid.shape[1] / max(grid.shape[0], 1) + 0.8))
    im = ax.imshow(grid.T, cmap="inferno", interpolation="nearest", origin="upper")
    fig.colorbar(im, ax=ax, shrink=0.8, label="overuse of the tile's wires (router2)")
    if region is not None and region.tiles:
        (x0, x1), (y0, y1) = region.x, region.y
        ax.add_patch(Rectangle((x0 - 0.5, y0 - 0.5), x1 - x0 + 1, y1 - y0 + 1, fill=False, ec="cyan", lw=1.2,
                               label="80% of the overuse along x and along y"))
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("tile x")
    ax.set_ylabel("tile y")
    ax.set_title(title or f"routing congestion: {int(grid.sum()):,} in all", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
