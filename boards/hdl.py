"""The Verilog of the accelerator for a configuration, as the board flows consume it.

Calls the top-level generator (:func:`systolica.hw.generate.generate`: Verilog,
``regmap.json``, ``regmap.md``, ``config.toml``) and checks the port names the
board scripts rely on (:func:`systolica.boards.ports.check_top`).  The output is
reused when the folder already holds it for the same configuration hash and the same
``hw/`` sources, since
converting a large array takes a while.
"""

from __future__ import annotations

import json
from pathlib import Path

from systolica.boards.ports import Port, check_top, parse_ports
from systolica.config import AccelConfig

__all__ = ["top_name", "write_verilog"]


def top_name() -> str:
    """Module name of the accelerator in the generated Verilog."""
    from systolica.hw.generate import TOP_NAME

    return TOP_NAME


def write_verilog(cfg: AccelConfig, out_dir: str | Path, *, uram: bool = False
                  ) -> tuple[dict[str, Path], dict[str, Port]]:
    """Generate (or reuse) the top level of ``cfg`` in ``out_dir``.

    ``uram``: the target part has UltraRAM; the large buffers are marked ``ram_style = "ultra"``
    (:func:`systolica.hw.generate.generate`).

    Returns
    -------
    paths
        ``verilog``, ``rtlil``, ``json``, ``markdown``, ``config`` as :func:`systolica.hw.generate.generate` names them.
    ports
        The top level's ports, checked against the names the board flows use.
    """
    from systolica.hw.generate import TOP_NAME, generate

    out = Path(out_dir)
    paths = {"verilog": out / f"{TOP_NAME}.v", "rtlil": out / f"{TOP_NAME}.il", "json": out / "regmap.json", "markdown": out / "regmap.md",
             "config": out / "config.toml"}
    from systolica.boards.synth_cache import hw_digest

    # the hw/ sources the Verilog was generated from, and the URAM flag: either changed regenerates
    stamp, want = out / "hw_digest", f"{hw_digest()}{' uram' if uram else ''}"
    fresh = all(p.exists() for p in paths.values()) and stamp.exists() and stamp.read_text().strip() == want
    if fresh:
        try:
            fresh = json.loads(paths["json"].read_text()).get("config_hash") == f"{cfg.hash32():08x}"
        except (OSError, ValueError):
            fresh = False
    if not fresh:
        paths = generate(cfg, out, uram=uram)
        stamp.write_text(want + "\n")
    ports = parse_ports(paths["verilog"].read_text(), TOP_NAME)
    check_top(ports, cfg.dma_ports, cfg.dma_bits)
    return paths, ports
