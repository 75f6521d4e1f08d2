"""The Verilog of the accelerator for a configuration, as the board flows consume it.

Uses the top-level generator of :mod:`systolica.hw` and checks the port names the
board scripts rely on (:func:`systolica.boards.ports.check_top`).  Results are
cached per configuration hash, since conversion of a large array takes a while.
"""

from __future__ import annotations

from pathlib import Path

from systolica.boards.ports import Port, check_top, parse_ports
from systolica.config import AccelConfig

__all__ = ["TOP", "write_verilog"]

#: Module name of the accelerator in the generated Verilog.
TOP = "systolica_top"


def _convert(cfg: AccelConfig) -> str:
    try:
        from systolica.hw import generate
    except ImportError:
        generate = None
    if generate is not None and hasattr(generate, "verilog_text"):
        return generate.verilog_text(cfg, name=TOP)
    from amaranth.back import verilog

    from systolica.hw.accelerator import Accelerator

    return verilog.convert(Accelerator(cfg), name=TOP, emit_src=False)


def write_verilog(cfg: AccelConfig, out_dir: str | Path) -> tuple[Path, dict[str, Port]]:
    """Write ``<out_dir>/systolica_top.v`` for ``cfg`` (reused if already there for the same
    config hash); return its path and checked ports."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{TOP}.v"
    stamp = f"// systolica config {cfg.hash_hex()}\n"
    if not (path.exists() and path.read_text().startswith(stamp)):
        path.write_text(stamp + _convert(cfg))
    ports = parse_ports(path.read_text(), TOP)
    check_top(ports, cfg.dma_ports, cfg.dma_bits)
    return path, ports
