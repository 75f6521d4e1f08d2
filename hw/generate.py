"""Verilog of the accelerator top level plus its register map (``systolica hw generate``, :mod:`systolica.cli.hw`).

Writes into the output folder:

- ``systolica_accel.v``: the top level for the configuration (ports ``ap_clk``,
  ``ap_rst_n``, ``s_axi_control_*``, ``m_axi_gmem<i>_*``, ``interrupt``);
- ``systolica_accel.il``: the same netlist in RTLIL, Yosys's own format, which the
  synthesis flows read: Yosys parses it in about a second where its Verilog frontend
  takes most of a half-hour synthesis on the large presets;
- ``regmap.json`` and ``regmap.md``: the CSRs, generated from
  :data:`systolica.csr.REGISTERS` (the same table the hardware and the driver use),
  with the configuration, its hash and the port list;
- ``config.toml``: the configuration it was built from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from systolica.config import AccelConfig
from systolica.csr import CSR_SPACE, ID_MAGIC, REGISTERS

from .accelerator import Accelerator, top_port_names
from .buffers import ALL_BUFFER_MEMORIES, undefined_collisions
from .dma import ADDR_BITS

__all__ = ["TOP_NAME", "generate", "convert", "register_map", "register_map_markdown", "verilog_ports"]

TOP_NAME = "systolica_accel"


def register_map(cfg: AccelConfig) -> dict:
    """The register map as plain data (what ``regmap.json`` holds)."""
    return {
        "top": TOP_NAME, "config": cfg.to_dict(), "config_hash": f"{cfg.hash32():08x}", "version": f"{ID_MAGIC:08x}",
        "csr_bytes": CSR_SPACE, "m_axi_addr_bits": ADDR_BITS, "m_axi_data_bits": cfg.dma_bits,
        "m_axi_ports": [f"m_axi_gmem{p}" for p in range(cfg.dma_ports)],
        "registers": [{"name": r.name, "offset": r.offset, "access": r.access, "reset": r.reset, "doc": r.doc}
                      for r in REGISTERS],
        "ports": top_port_names(cfg),
    }


def register_map_markdown(cfg: AccelConfig) -> str:
    lines = [f"# {TOP_NAME} register map ({cfg.name})", "",
             f"Config hash (ID register): `{cfg.hash32():08x}`. AXI4-Lite `s_axi_control`, {CSR_SPACE} bytes; "
             f"AXI4 masters {', '.join(f'`m_axi_gmem{p}`' for p in range(cfg.dma_ports))}: {ADDR_BITS}-bit "
             f"addresses (WIN_BASE_HI:WIN_BASE_LO + 32-bit window offsets), {cfg.dma_bits}-bit data.", "",
             "| offset | name | access | reset | description |", "| --- | --- | --- | --- | --- |"]
    for r in REGISTERS:
        doc = r.doc.replace("|", "\\|")  # a bare | would split the table cell
        lines.append(f"| `{r.offset:#04x}` | {r.name} | {r.access} | `{r.reset:#x}` | {doc} |")
    return "\n".join(lines) + "\n"


def verilog_ports(text: str, module: str = TOP_NAME) -> dict[str, tuple[str, int]]:
    """Ports of ``module`` in Verilog text: name -> (direction, width)."""
    m = re.search(rf"^module {re.escape(module)}\((.*?)\);(.*?)^endmodule", text, re.S | re.M)
    if m is None:
        raise ValueError(f"no module {module!r} in the Verilog text")
    ports = {}
    for d, hi, lo, name in re.findall(r"^\s*(input|output)\s+(?:wire\s+|reg\s+)?(?:\[(\d+):(\d+)\]\s*)?(\\?\S+?)\s*;",
                                      m.group(2), re.M):
        ports[name] = (d, int(hi) - int(lo) + 1 if hi else 1)
    return ports


def convert(elaboratable, name: str) -> tuple[str, str]:
    """``(rtlil, verilog)`` text of an Amaranth component, from one elaboration.

    The Verilog is what ``amaranth.back.verilog.convert`` writes (it converts the same
    RTLIL with Yosys); both come from one elaboration, which is most of the time.  The RTLIL, which the
    Yosys flows synthesize, marks the buffers' read ports as undefined on a collision with their write
    port (:func:`~systolica.hw.buffers.undefined_collisions`); the Verilog, which simulators run, keeps
    Amaranth's "old word" (the design stops a run that would tell them apart: ``BUFFER_COLLISION``).
    """
    from amaranth.back import rtlil, verilog

    il = rtlil.convert(elaboratable, name=name, emit_src=False)
    to_verilog = getattr(verilog, "_convert_rtlil_text", None)  # Amaranth 0.5's own RTLIL -> Verilog step
    # (an Amaranth without it: elaborate a second time)
    text = verilog.convert(elaboratable, name=name, emit_src=False) if to_verilog is None else to_verilog(il)
    return undefined_collisions(il, ALL_BUFFER_MEMORIES), text


def generate(cfg: AccelConfig, out_dir: str | Path, *, uram: bool = False,
             progress: Callable[[str], None] | None = None) -> dict[str, Path]:
    """Write Verilog, register map (JSON, markdown) and config of ``cfg`` into ``out_dir``.

    ``uram``: the target has UltraRAM; the large buffers are marked ``ram_style = "ultra"``.
    ``progress`` is told each step as it starts (the elaboration and conversion take most of the time).
    """
    step = progress or (lambda s: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    step(f"elaborating the accelerator ({cfg.rows}x{cfg.cols}) and writing RTLIL and Verilog")
    il, text = convert(Accelerator(cfg, uram=uram), TOP_NAME)
    step("checking the ports and writing the register map")
    have = set(verilog_ports(text))
    want = set(top_port_names(cfg))
    if have != want:  # the port names are a contract with the Vivado packaging: never ship others
        raise RuntimeError(f"generated top-level ports differ from the contract: missing {sorted(want - have)}, "
                           f"extra {sorted(have - want)}")
    paths = {"verilog": out / f"{TOP_NAME}.v", "rtlil": out / f"{TOP_NAME}.il", "json": out / "regmap.json", "markdown": out / "regmap.md",
             "config": out / "config.toml"}
    paths["verilog"].write_text(text)
    paths["rtlil"].write_text(il)
    paths["json"].write_text(json.dumps(register_map(cfg), indent=2) + "\n")
    paths["markdown"].write_text(register_map_markdown(cfg))
    cfg.save(paths["config"])
    return paths
