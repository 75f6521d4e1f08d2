"""Which units a routing congestion comes from: router2's per-net heatmap summed by the units in the net names.

``nextpnr-ecp5 --router router2 --router2-heatmap PREFIX`` writes, each router iteration N,
``PREFIX_congestion_by_net_N.csv``: one line ``net,overused wires`` per net.  Summed by the first hierarchy
levels of the net names (``dut.compute.aseq``, ``dut.load``, ...), they say which units a router that does not
converge is stuck in, and the largest single nets name the broadcast signals behind it.

    python -m systolica.boards.nextpnr_congestion <out>/ecp5/heat/route [--depth 3] [--nets 10]
        [--plot map.png] [--placed <out>/ecp5/placed.json]

``--plot`` draws where on the die the overuse is (router2's per-tile map, :mod:`.congestion_map`), and
``--placed`` (a placed netlist of the same run) names the units placed in the hottest tiles.
"""

from __future__ import annotations

import argparse
import collections
import csv
import re
from pathlib import Path

__all__ = ["latest_heatmap", "congestion_by_unit", "congestion_summary", "main"]


def latest_heatmap(prefix: str | Path, kind: str = "net") -> Path | None:
    """The last complete ``PREFIX_congestion_by_<kind>_N.csv`` (the one before the newest, which may be half
    written); ``kind``: ``net`` or ``coordinate`` (the per-tile map)."""
    prefix = Path(prefix)
    found = sorted(((int(m.group(1)), p) for p in prefix.parent.glob(f"{prefix.name}_congestion_by_{kind}_*.csv")
                    if (m := re.search(r"_(\d+)\.csv$", p.name))), key=lambda t: t[0])
    if not found:
        return None
    return found[-2][1] if len(found) > 1 else found[-1][1]


def _unit(net: str, depth: int) -> str:
    parts = net.split(".")
    keep = depth if net.startswith("dut.compute.") else depth - 1
    u = ".".join(parts[:keep]) if net.startswith("dut.") else parts[0]
    return re.sub(r"(_(LUT4|TRELLIS|PFUMX|CCU2C|L6MUX|DP16KD|MULT18X18D)\w*)|\[\d+\]$", "", u)


def congestion_by_unit(path: str | Path, depth: int = 3) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(units by overused wires, nets by overused wires), largest first, of one ``congestion_by_net`` file;
    nextpnr's own nets (``$PACKER_GND_NET``, ...) are left out."""
    units: collections.Counter = collections.Counter()
    nets = []
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if len(row) < 2 or row[0].startswith("$"):
                continue
            try:
                n = int(row[1])
            except ValueError:
                continue
            units[_unit(row[0], depth)] += n
            nets.append((row[0], n))
    nets.sort(key=lambda t: -t[1])
    return units.most_common(), nets


def congestion_summary(prefix: Path) -> str:
    """``; congested: <unit> N%, ...`` from router2's latest per-net heatmap, or '' without one."""
    path = latest_heatmap(prefix)
    if path is None:
        return ""
    units, _ = congestion_by_unit(path)
    total = sum(n for _, n in units) or 1
    top = ", ".join(f"{u} {100 * n / total:.0f}%" for u, n in units[:4])
    return (f"; congested (router2, {path.name}): {top}{_congestion_map(path)}") if top else ""


def _congestion_map(net_csv: Path) -> str:
    """``; <where the overuse is>, map <png>`` from the same iteration's per-tile heatmap, or '' without one."""
    from systolica.boards.congestion_map import congestion_grid, coordinate_heatmap_of, hot_region, plot_congestion

    coord = coordinate_heatmap_of(net_csv)
    try:
        grid = congestion_grid(coord)
    except (OSError, ValueError):
        return ""
    region = hot_region(grid)
    try:
        png = plot_congestion(grid, net_csv.parent.parent / "congestion.png", f"{coord.name}: where the route is stuck",
                              region)
    except RuntimeError:  # no matplotlib: the description alone
        return f"; {region.describe()}"
    return f"; {region.describe()}; map {png}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m systolica.boards.nextpnr_congestion", description=__doc__.split("\n")[0])
    ap.add_argument("prefix", type=Path, help="the --router2-heatmap prefix, or one congestion_by_net CSV")
    ap.add_argument("--depth", type=int, default=3, help="hierarchy levels of dut.compute.* nets (default 3)")
    ap.add_argument("--nets", type=int, default=10, help="largest single nets to list (default 10)")
    ap.add_argument("--plot", type=Path, metavar="PNG", help="draw the per-tile congestion map of the same iteration")
    ap.add_argument("--placed", type=Path, metavar="JSON",
                    help="nextpnr's placed netlist (--write): the units placed where the overuse is")
    a = ap.parse_args(argv)
    path = a.prefix if a.prefix.suffix == ".csv" else latest_heatmap(a.prefix)
    if path is None or not Path(path).exists():
        ap.error(f"no {a.prefix}_congestion_by_net_N.csv (nextpnr --router router2 --router2-heatmap {a.prefix})")
    units, nets = congestion_by_unit(path, a.depth)
    total = sum(n for _, n in units) or 1
    print(f"{path.name}: {total:,} overused wires on the units' nets")
    for u, n in units[:15]:
        print(f"  {n:8,}  {100 * n / total:5.1f}%  {u}")
    print("largest nets:")
    for name, n in nets[:a.nets]:
        print(f"  {n:8,}  {name}")
    if a.plot or a.placed:
        _where(ap, Path(path), a.plot, a.placed)
    return 0


def _where(ap, net_csv: Path, plot: Path | None, placed: Path | None) -> None:
    """The per-tile map of the iteration of ``net_csv``: its hot region (and who is placed there), and a PNG."""
    import json

    from systolica.boards.congestion_map import congestion_grid, coordinate_heatmap_of, hot_region, plot_congestion
    from systolica.boards.ecp5_paths import bel_locations, cell_kinds

    coord = coordinate_heatmap_of(net_csv)
    if not coord.exists():
        ap.error(f"no {coord.name} beside {net_csv.name} (router2 writes both with --router2-heatmap)")
    grid = congestion_grid(coord)
    doc = json.loads(placed.read_text()) if placed else None
    region = hot_region(grid, 0.5, bel_locations(doc) if doc else None, cell_kinds(doc) if doc else None)
    print(f"where ({coord.name}): {region.describe()}")
    if plot:
        plot_congestion(grid, plot, f"{coord.name}: {int(grid.sum()):,} overuse", region)
        print(f"map: {plot}")


if __name__ == "__main__":
    raise SystemExit(main())
