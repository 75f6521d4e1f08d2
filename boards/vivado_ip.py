"""Vivado IP packaging of the accelerator, with its register map.

The packaged IP carries one ``ipx::add_register`` entry per CSR of
:mod:`systolica.csr` (and bit fields where the CSR module names bits), so the
``.hwh`` Vivado writes lists them and PYNQ's ``DefaultIP.register_map`` works.
Vivado infers the AXI interfaces from the port names; the script checks that it
did and stops with a message naming the interface if not.

Also here: the ``kernel.xml`` that turns the same IP into a Vitis RTL kernel for
the Alveo cards.
"""

from __future__ import annotations

from xml.sax.saxutils import quoteattr

from systolica import csr
from systolica.boards.ports import CLOCK, CONTROL, IRQ, RESET, gmem_name
from systolica.config import AccelConfig

__all__ = ["VivadoError", "IP_VENDOR", "IP_LIBRARY", "IP_NAME", "IP_VERSION", "IP_VLNV", "REG_BLOCK", "REG_RANGE",
           "ACCESS", "register_fields", "tcl_str", "package_ip_tcl", "kernel_xml"]



class VivadoError(ValueError):
    """A board / configuration pair the Vivado flow cannot build, with the reason."""


IP_VENDOR = "systolica.dev"
IP_LIBRARY = "accel"
IP_NAME = "systolica_accel"
IP_VERSION = "1.0"
#: What PYNQ driver classes bind to (``bindto = [IP_VLNV]``).
IP_VLNV = f"{IP_VENDOR}:{IP_LIBRARY}:{IP_NAME}:{IP_VERSION}"
REG_BLOCK = "reg0"
#: The smallest segment a block design maps (4 KiB); the CSRs use the first csr.CSR_SPACE bytes.
REG_RANGE = 4096

#: csr access kind -> (IP-XACT access, modifiedWriteValue)
ACCESS = {"ro": ("read-only", ""), "rw": ("read-write", ""), "wo": ("write-only", ""),
          "w1c": ("read-write", "oneToClear")}

# Bit fields the CSR module names: (register, [(field, mask)]).  Registers not listed
# get one field spanning all 32 bits, named like the register.
_BITS = {
    "CTRL": [("START", csr.CTRL_START), ("SOFT_RESET", csr.CTRL_SOFT_RESET)],
    "STATUS": [("BUSY", csr.STATUS_BUSY), ("DONE", csr.STATUS_DONE), ("ERROR", csr.STATUS_ERROR)],
    "IRQ_ENABLE": [("DONE", csr.IRQ_DONE)],
    "IRQ_STATUS": [("DONE", csr.IRQ_DONE)],
}


def _mask_bits(mask: int) -> tuple[int, int]:
    """(offset, width) of a contiguous bit mask."""
    low = (mask & -mask).bit_length() - 1
    width = (mask >> low).bit_length()
    if (mask >> low) != (1 << width) - 1:
        raise VivadoError(f"mask {mask:#x} is not contiguous")
    return low, width


def register_fields(reg: csr.Reg) -> list[tuple[str, int, int]]:
    """Fields ``(name, bit_offset, bit_width)`` of a CSR as the IP declares them."""
    if reg.name in _BITS:
        return [(name, *_mask_bits(mask)) for name, mask in _BITS[reg.name]]
    return [(reg.name, 0, 32)]


def tcl_str(s: str) -> str:
    """A Tcl double-quoted word that stands for exactly ``s`` (no substitution happens)."""
    out = s
    for ch in "\\\"$[]":
        out = out.replace(ch, "\\" + ch)
    return '"' + out.replace("\n", "\\n") + '"'


def _register_data() -> list[str]:
    lines = []
    for r in csr.REGISTERS:
        access, mwv = ACCESS[r.access]
        fields = " ".join(
            f"[list {name} {off} {width} {access} {tcl_str(mwv)}]" for name, off, width in register_fields(r))
        lines.append(f"    [list {r.name} 0x{r.offset:02X} {access} {tcl_str(r.doc)} [list {fields}]] \\")
    return lines


def package_ip_tcl(cfg: AccelConfig, top: str, verilog_files: list[str]) -> str:
    """TCL that packages ``top`` (from ``verilog_files``, relative to the script) as IP into ``$ip_dir``.

    Expects the caller's script to define ``here``, ``part``, ``ip_dir``, ``proj_dir`` and ``fail``.
    """
    masters = [gmem_name(i) for i in range(cfg.dma_ports)]
    files = " ".join(f'"$here/{f}"' for f in verilog_files)
    return "\n".join([
        "# ---- 1. package the accelerator as IP ------------------------------------------",
        'create_project -force systolica_pkg "$proj_dir/pkg" -part $part',
        f"add_files -norecurse [list {files}]",
        f"set_property top {top} [current_fileset]",
        "update_compile_order -fileset sources_1",
        f"ipx::package_project -root_dir $ip_dir -vendor {IP_VENDOR} -library {IP_LIBRARY} "
        "-taxonomy /UserIP -import_files -set_current true",
        "set core [ipx::current_core]",
        f"set_property name {IP_NAME} $core",
        f"set_property version {IP_VERSION} $core",
        "set_property display_name {systolica transformer accelerator} $core",
        f"set_property description {tcl_str(f'systolica accelerator, config {cfg.name} (hash {cfg.hash32():08x})')} $core",
        "# Vivado infers AXI interfaces from <prefix>_<signal> port names; make sure it did.",
        f"foreach busif [list {CONTROL} {' '.join(masters)}] {{",
        "    if {[llength [ipx::get_bus_interfaces $busif -of_objects $core]] == 0} {",
        "        ipx::infer_bus_interfaces xilinx.com:interface:aximm_rtl:1.0 $core",
        "    }",
        "    if {[llength [ipx::get_bus_interfaces $busif -of_objects $core]] == 0} {",
        '        fail "Vivado did not infer the AXI interface $busif from the port names of the top level"',
        "    }",
        f"    ipx::associate_bus_interfaces -busif $busif -clock {CLOCK} $core",
        "}",
        f"ipx::associate_bus_interfaces -clock {CLOCK} -reset {RESET} $core",
        f"set rst_if [ipx::get_bus_interfaces {RESET} -of_objects $core]",
        'if {[llength $rst_if] == 0} { fail "no reset interface for ' + RESET + '" }',
        "set pol [ipx::get_bus_parameters POLARITY -of_objects $rst_if]",
        "if {[llength $pol] == 0} { set pol [ipx::add_bus_parameter POLARITY $rst_if] }",
        "set_property value ACTIVE_LOW $pol",
        f"if {{[llength [ipx::get_bus_interfaces {IRQ} -of_objects $core]] == 0}} {{",
        f"    ipx::infer_bus_interface {IRQ} xilinx.com:signal:interrupt_rtl:1.0 $core",
        "}",
        f"set irq_if [ipx::get_bus_interfaces {IRQ} -of_objects $core]",
        "set sens [ipx::get_bus_parameters SENSITIVITY -of_objects $irq_if]",
        "if {[llength $sens] == 0} { set sens [ipx::add_bus_parameter SENSITIVITY $irq_if] }",
        "set_property value LEVEL_HIGH $sens",
        "",
        "# The register map (systolica.csr): PYNQ's register_map is built from these entries.",
        f"set mm [ipx::get_memory_maps {CONTROL} -of_objects $core]",
        "if {[llength $mm] == 0} {",
        f"    set mm [ipx::add_memory_map {CONTROL} $core]",
        f"    set_property slave_memory_map_ref {CONTROL} [ipx::get_bus_interfaces {CONTROL} -of_objects $core]",
        "}",
        "set block [lindex [ipx::get_address_blocks -of_objects $mm] 0]",
        f"if {{[llength $block] == 0}} {{ set block [ipx::add_address_block {REG_BLOCK} $mm] }}",
        f"set_property range {REG_RANGE} $block",
        "set_property usage register $block",
        "proc add_register {block name offset access desc fields} {",
        "    set reg [ipx::add_register $name $block]",
        "    set_property address_offset $offset $reg",
        "    set_property size 32 $reg",
        "    set_property access $access $reg",
        "    set_property description $desc $reg",
        "    foreach f $fields {",
        "        lassign $f fname bit width faccess mwv",
        "        set field [ipx::add_field $fname $reg]",
        "        set_property bit_offset $bit $field",
        "        set_property bit_width $width $field",
        "        set_property access $faccess $field",
        '        if {$mwv ne ""} { set_property modified_write_value $mwv $field }',
        "    }",
        "}",
        "set registers [list \\",
        *_register_data(),
        "]",
        "foreach r $registers { add_register $block {*}$r }",
        "",
        "ipx::create_xgui_files $core",
        "ipx::update_checksums $core",
        "ipx::check_integrity $core",
        "ipx::save_core $core",
        "close_project",
        "",
    ])


def kernel_xml(cfg: AccelConfig) -> str:
    """Vitis ``kernel.xml`` for the Alveo flow: a user-managed RTL kernel.

    The host drives the CSRs itself (``hwControlProtocol="user_managed"``), so the
    kernel's control protocol is ours, not ``ap_ctrl_hs``.  The DRAM window base
    (``WIN_BASE_LO/HI``) is the 64-bit pointer argument that ties ``m_axi_gmem0`` to
    a memory bank; Vitis needs one pointer argument per master port.
    """
    if cfg.dma_ports != 1:
        raise VivadoError(f"the Alveo kernel supports dma_ports=1 (one window pointer), got {cfg.dma_ports}")
    ports = [f'      <port name="{CONTROL}" mode="slave" range="0x{REG_RANGE:X}" dataWidth="32" '
             'portType="addressable" base="0x0"/>',
             f'      <port name="{gmem_name(0)}" mode="master" range="0xFFFFFFFFFFFFFFFF" '
             f'dataWidth="{cfg.dma_bits}" portType="addressable" base="0x0"/>']
    win = csr.REG["WIN_BASE_LO"].offset
    args = [f'      <arg name="WIN_BASE" addressQualifier="1" id="0" port="{gmem_name(0)}" size="0x8" '
            f'offset="0x{win:X}" type="void*" hostOffset="0x0" hostSize="0x8"/>']
    scalars = [r for r in csr.REGISTERS if r.access == "rw" and not r.name.startswith("WIN_BASE")]
    for i, r in enumerate(scalars, start=1):
        args.append(f'      <arg name="{r.name}" addressQualifier="0" id="{i}" port="{CONTROL}" size="0x4" '
                    f'offset="0x{r.offset:X}" type="uint" hostOffset="0x0" hostSize="0x4"/>')
    return "\n".join([
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<root versionMajor="1" versionMinor="6">',
        f'  <kernel name="{IP_NAME}" language="ip_c" vlnv="{IP_VLNV}" attributes="" '
        'preferredWorkGroupSizeMultiple="0" workGroupSize="1" interrupt="true" hwControlProtocol="user_managed">',
        "    <ports>", *ports, "    </ports>",
        "    <args>", *args, "    </args>",
        "  </kernel>",
        "</root>",
        f"<!-- config {quoteattr(cfg.name)} hash {cfg.hash32():08x} -->",
        "",
    ])
