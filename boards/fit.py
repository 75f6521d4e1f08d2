"""Does a configuration fit a board, and what is the largest array that does?

The fit check sets resource counts (from Yosys synthesis of the generated
Verilog, :mod:`systolica.boards.yosys`) against the board's resources with a
margin: placement and routing rarely succeed above ~80% LUT use, and the block
design around the accelerator (interconnect, reset, interrupt controller) takes
its share too.

Sweeping every ``rows x cols`` through Yosys would take hours, so the sweep uses
a :class:`ResourceModel` calibrated on one or two synthesized configurations:
LUT, FF and DSP grow with the number of processing elements (``rows*cols``);
block RAM follows the buffer shapes (a line of ``cols`` lanes is as wide as the
tiles it needs, RAMB36 is at most 72 bits wide).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from systolica.boards.board import Board, Resources
from systolica.config import AccelConfig, ConfigError

__all__ = ["FitError", "DEFAULT_MARGIN", "FitRow", "FitReport", "fit_check", "ResourceModel", "bram_tiles",
           "candidate_shapes", "hardware_problem", "largest_fit"]

class FitError(ValueError):
    """A fit check that cannot be made as asked (bad margin, nothing to calibrate on)."""


#: Use at most this share of any resource (the rest is for routing and the block design).
DEFAULT_MARGIN = 0.8


@dataclass(frozen=True)
class FitRow:
    kind: str
    used: float
    available: float
    limit: float  # available x margin

    @property
    def utilization(self) -> float:
        return self.used / self.available if self.available else (math.inf if self.used else 0.0)

    @property
    def fits(self) -> bool:
        return self.used <= self.limit


@dataclass(frozen=True)
class FitReport:
    board: str
    config: str
    rows: tuple[FitRow, ...]
    margin: float
    source: str  # "yosys ..." (measured), "estimate ..." or "model"

    @property
    def fits(self) -> bool:
        return all(r.fits for r in self.rows)

    @property
    def worst(self) -> FitRow:
        return max(self.rows, key=lambda r: r.used / r.limit if r.limit else (math.inf if r.used else 0))

    def summary(self) -> str:
        w = self.worst
        if self.source.startswith("estimate"):
            verdict = "is ESTIMATED to be within the limits of" if self.fits else "is ESTIMATED to exceed"
        else:
            verdict = "fits" if self.fits else "does NOT fit"
        return (f"config {self.config} {verdict} {self.board} (limit {self.margin:.0%} of each resource; "
                f"tightest: {w.kind} {w.used:g}/{w.available:g} = {w.utilization:.0%})")


def fit_check(board: Board, used: Resources, *, config: str = "", margin: float = DEFAULT_MARGIN,
              source: str = "yosys") -> FitReport:
    """Compare ``used`` with ``board``'s resources; a resource fits when used <= available x margin."""
    if not 0 < margin <= 1:
        raise FitError(f"margin={margin} must be in (0, 1]")
    avail = board.resources
    rows = []
    for kind in Resources.KINDS:
        u, a = getattr(used, kind), getattr(avail, kind)
        if a == 0 and u == 0:
            continue  # no UltraRAM on the part and none used
        rows.append(FitRow(kind, u, a, a * margin))
    return FitReport(board.name, config, tuple(rows), margin, source)


#: (depth, width) aspect ratios of one block-RAM tile in simple dual-port mode: RAMB36 (7-series and
#: UltraScale+, widths with parity bits) and ECP5's DP16KD (18 Kb)
RAM_SHAPES = {
    "xilinx": ((512, 72), (1024, 36), (2048, 18), (4096, 9), (8192, 4), (16384, 2), (32768, 1)),
    "ecp5": ((512, 36), (1024, 18), (2048, 9), (4096, 4), (8192, 2), (16384, 1)),
}


#: a URAM288 (UltraScale+): 4K words of 72 bits, one aspect ratio
URAM_SHAPE = (4096, 72)


def buffer_tiles(cfg: AccelConfig, family: str, uram: bool = False) -> tuple[int, int]:
    """``(block-RAM tiles, URAM288s)`` the buffers need at least: each copy of each buffer
    (``hw.buffers.BUFFER_COPIES``: one per read port compute needs at once) in the tile aspect ratio that
    wastes least; with ``uram`` (an UltraScale+ target) the copies the generator marks ``ram_style =
    "ultra"`` (``hw.buffers.URAM_MIN_BITS`` or more) in URAM288s instead."""
    from systolica.hw.buffers import URAM_MIN_BITS, buffer_copies, buffer_ports

    shapes = RAM_SHAPES["ecp5" if family == "ecp5" else "xilinx"]
    depth = {"spad": cfg.spad_lines, "acc": cfg.acc_lines, "vbuf": cfg.vbuf_lines}
    bram = ultra = 0
    for name, (_, width) in buffer_ports(cfg).items():
        copies = len(buffer_copies(cfg)[name])
        if uram and width * depth[name] >= URAM_MIN_BITS:
            ultra += copies * math.ceil(width / URAM_SHAPE[1]) * math.ceil(depth[name] / URAM_SHAPE[0])
        else:
            bram += copies * min(math.ceil(width / w) * math.ceil(depth[name] / d) for d, w in shapes)
    return bram, ultra


def bram_tiles(cfg: AccelConfig, family: str, uram: bool = False) -> int:
    """Block-RAM tiles of :func:`buffer_tiles`."""
    return buffer_tiles(cfg, family, uram)[0]


@dataclass(frozen=True)
class ResourceModel:
    """``lut, ff, dsp = fixed + per_pe x rows x cols``; ``bram = bram_scale x`` the buffers' block-RAM
    tiles, ``uram = uram_scale x`` their URAM288s (:func:`buffer_tiles`; ``uram``: the target has URAM)."""

    family: str
    fixed: Resources
    per_pe: Resources
    bram_scale: float = 1.0
    uram: bool = False
    uram_scale: float = 1.0

    def predict(self, cfg: AccelConfig) -> Resources:
        pes = cfg.rows * cfg.cols
        bram, ultra = buffer_tiles(cfg, self.family, self.uram)
        return Resources(lut=self.fixed.lut + self.per_pe.lut * pes, ff=self.fixed.ff + self.per_pe.ff * pes,
                         dsp=round(self.fixed.dsp + self.per_pe.dsp * pes),
                         bram=round(self.bram_scale * bram, 1), uram=math.ceil(self.uram_scale * ultra))

    @classmethod
    def calibrate(cls, family: str, points: Sequence[tuple[AccelConfig, Resources]], *,
                  uram: bool = False) -> ResourceModel:
        """Fit to synthesized points (of a target with URAM when ``uram``).  One point: everything
        proportional to rows x cols (over-estimates growth, so a suggestion errs small); two or more
        with different sizes: least squares for the fixed and per-PE parts."""
        if not points:
            raise FitError("calibrate needs at least one synthesized configuration")
        sizes = {c.rows * c.cols for c, _ in points}
        fixed, per = {}, {}
        for k in ("lut", "ff", "dsp"):
            xs = [c.rows * c.cols for c, _ in points]
            ys = [getattr(r, k) for _, r in points]
            if len(sizes) == 1:
                fixed[k], per[k] = 0.0, sum(ys) / sum(xs)
            else:
                mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
                slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
                slope = max(slope, 0.0)
                fixed[k], per[k] = max(my - slope * mx, 0.0), slope
        tiles = [(r, buffer_tiles(c, family, uram)) for c, r in points]
        ratios = [r.bram / t[0] for r, t in tiles if t[0]]
        scale = max(ratios) if ratios and max(ratios) > 0 else 1.0
        uratios = [r.uram / t[1] for r, t in tiles if t[1]]  # the score buffer may join the buffers in URAM
        uscale = max(uratios) if uratios and max(uratios) > 0 else 1.0
        return cls(family, Resources(lut=fixed["lut"], ff=fixed["ff"], dsp=fixed["dsp"]),
                   Resources(lut=per["lut"], ff=per["ff"], dsp=per["dsp"]), scale, uram, uscale)


def candidate_shapes(sizes: Sequence[int] = (2, 4, 8, 16, 32, 64), max_aspect: int = 4) -> list[tuple[int, int]]:
    """``(rows, cols)`` pairs to try, largest first; near-square first among equals."""
    shapes = [(r, c) for r in sizes for c in sizes if max(r, c) <= max_aspect * min(r, c)]
    return sorted(shapes, key=lambda s: (-s[0] * s[1], abs(s[0] - s[1]), -s[1]))


def hardware_problem(cfg: AccelConfig) -> str | None:
    """Why the hardware generator would refuse ``cfg`` beyond AccelConfig's own checks, or None.

    The rules (square array, a scratchpad line is a whole number of DMA beats, fetch width) live in
    ``systolica.hw.accelerator.config_problems``; they are asked, not restated here.
    """
    from systolica.hw.accelerator import config_problems

    problems = config_problems(cfg)
    return "; ".join(problems) if problems else None


def largest_fit(board: Board, base: AccelConfig, estimate: Callable[[AccelConfig], Resources], *,
                margin: float = DEFAULT_MARGIN, shapes: Sequence[tuple[int, int]] | None = None
                ) -> tuple[AccelConfig, FitReport] | None:
    """The largest ``rows x cols`` variant of ``base`` whose estimate fits ``board``.

    Buffers keep ``base``'s sizes; a shape for which they are invalid (fewer than
    4 x rows lines, more than 65536) or that the hardware generator refuses (not
    square, a scratchpad line narrower than a DMA beat) is skipped.  Returns ``None`` if
    nothing fits.
    """
    for r, c in shapes if shapes is not None else candidate_shapes():
        try:
            cfg = base.reshaped(r, c, name=f"{board.name}-{r}x{c}")
        except ConfigError:
            continue
        if hardware_problem(cfg):
            continue
        report = fit_check(board, estimate(cfg), config=cfg.name, margin=margin, source="model")
        if report.fits:
            return cfg, report
    return None
