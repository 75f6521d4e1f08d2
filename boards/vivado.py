"""Vivado batch script for a board: IP packaging, block design, synthesis, implementation.

``vivado -mode batch -source build.tcl`` (run inside the build folder) packages the
accelerator as IP (:mod:`systolica.boards.vivado_ip`), builds a block design with
the board's processing system (``processing_system7`` on Zynq-7000,
``zynq_ultra_ps_e`` on Zynq UltraScale+): one PS master port for the CSRs, one HP
slave port per ``cfg.dma_ports`` at ``cfg.dma_bits``, the PL clock at
``cfg.clock_mhz``, a reset synchronizer and an AXI interrupt controller (PYNQ's
``Interrupt`` needs one) feeding the PS.  It then runs synthesis and implementation
and copies ``<name>.bit`` and ``<name>.hwh`` into ``deploy/``.  For an Alveo card it
packages a Vitis RTL kernel (``.xo``) instead, which ``link.sh`` links with v++.
"""

from __future__ import annotations

from systolica.boards.board import Board
from systolica.boards.ports import CLOCK, CONTROL, IRQ, RESET, gmem_name
from systolica.boards.vivado_ip import IP_NAME, IP_VLNV, VivadoError, package_ip_tcl, tcl_str
from systolica.config import AccelConfig

__all__ = ["PS_PORTS", "hp_ports", "build_tcl", "link_script"]

# HP port order: on Zynq-7000 HP0/HP1 share one DDR port and HP2/HP3 another, so the
# second port goes to HP2 (as in PYNQ's base overlay); on ZynqMP HP1 and HP2 share an
# XPI port, so the second goes to HP1 [S: UG585, UG1085].
_HP_ORDER = {"zynq7": (0, 2, 1, 3), "zynqmp": (0, 1, 3, 2)}

#: Per PS: IP name, cell, master interface + its clock pin, clock and reset outputs,
#: interrupt input, and HP slave interface/clock templates.
PS_PORTS = {
    "zynq7": dict(ip="processing_system7", cell="ps7", master="M_AXI_GP0", master_clk="M_AXI_GP0_ACLK",
                  clk="FCLK_CLK0", rstn="FCLK_RESET0_N", irq="IRQ_F2P",
                  hp="S_AXI_HP{i}", hp_clk="S_AXI_HP{i}_ACLK"),
    "zynqmp": dict(ip="zynq_ultra_ps_e", cell="zynq_ultra_ps_e_0", master="M_AXI_HPM0_FPD",
                   master_clk="maxihpm0_fpd_aclk", clk="pl_clk0", rstn="pl_resetn0", irq="pl_ps_irq0",
                   hp="S_AXI_HP{i}_FPD", hp_clk="saxihp{i}_fpd_aclk"),
}


def hp_ports(board: Board, cfg: AccelConfig) -> list[int]:
    """Indices of the HP ports the accelerator's AXI masters connect to, in order."""
    if cfg.dma_ports > board.pl_ports:
        raise VivadoError(f"config {cfg.name!r} has dma_ports={cfg.dma_ports}; board {board.name} has "
                         f"{board.pl_ports} HP ports")
    if cfg.dma_bits > board.pl_port_bits:
        raise VivadoError(f"config {cfg.name!r} has dma_bits={cfg.dma_bits}; the HP ports of {board.name} are "
                         f"at most {board.pl_port_bits} bits wide")
    return list(_HP_ORDER[board.flow][:cfg.dma_ports])


def _ps_properties(board: Board, cfg: AccelConfig, hps: list[int]) -> dict[str, str]:
    mhz = f"{cfg.clock_mhz:g}"
    if board.flow == "zynq7":
        props = {"PCW_USE_M_AXI_GP0": "1", "PCW_FPGA0_PERIPHERAL_FREQMHZ": mhz, "PCW_EN_CLK0_PORT": "1",
                 "PCW_EN_RST0_PORT": "1", "PCW_USE_FABRIC_INTERRUPT": "1", "PCW_IRQ_F2P_INTR": "1"}
        for i in hps:
            props[f"PCW_USE_S_AXI_HP{i}"] = "1"
            props[f"PCW_S_AXI_HP{i}_DATA_WIDTH"] = str(board.pl_port_bits)
    else:
        props = {"PSU__USE__M_AXI_GP0": "1", "PSU__USE__M_AXI_GP1": "0", "PSU__FPGA_PL0_ENABLE": "1",
                 "PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ": mhz, "PSU__USE__IRQ0": "1"}
        for i in hps:  # S_AXI_HP<i>_FPD is S_AXI_GP<i+2> in the PS configuration
            props[f"PSU__USE__S_AXI_GP{i + 2}"] = "1"
            props[f"PSU__SAXIGP{i + 2}__DATA_WIDTH"] = str(board.pl_port_bits)
    props.update(board.ps)
    return props


def _block_design_tcl(board: Board, cfg: AccelConfig) -> list[str]:
    ps = PS_PORTS[board.flow]
    hps = hp_ports(board, cfg)
    cell = ps["cell"]
    props = " ".join(f"CONFIG.{k} {tcl_str(v)}" for k, v in _ps_properties(board, cfg, hps).items())
    preset = "1" if board.board_part else "0"
    rule = "processing_system7" if board.flow == "zynq7" else "zynq_ultra_ps_e"
    auto_cfg = (f'{{make_external "FIXED_IO, DDR" apply_board_preset "{preset}" Master "Disable" Slave "Disable"}}'
                if board.flow == "zynq7" else f'{{apply_board_preset "{preset}"}}')
    lines = [
        "# ---- 2. block design -------------------------------------------------------------",
        'create_project -force systolica "$proj_dir/bd" -part $part',
    ]
    if board.board_part:
        lines.append(f"set_property board_part {board.board_part} [current_project]")
    lines += [
        "set_property ip_repo_paths [list $ip_dir] [current_project]",
        "update_ip_catalog",
        "create_bd_design system",
        f"set ps [create_bd_cell -type ip -vlnv [ip_vlnv {ps['ip']}] {cell}]",
        f"apply_bd_automation -rule xilinx.com:bd_rule:{rule} -config {auto_cfg} $ps",
        f"set_property -dict [list {props}] $ps",
        f"set accel [create_bd_cell -type ip -vlnv {IP_VLNV} accel_0]",
        "set rst [create_bd_cell -type ip -vlnv [ip_vlnv proc_sys_reset] rst_0]",
        "set intc [create_bd_cell -type ip -vlnv [ip_vlnv axi_intc] intc_0]",
        "set_property -dict [list CONFIG.C_IRQ_CONNECTION {1}] $intc",
        "set ctrl_sc [create_bd_cell -type ip -vlnv [ip_vlnv smartconnect] ctrl_sc]",
        "set_property -dict [list CONFIG.NUM_SI {1} CONFIG.NUM_MI {2}] $ctrl_sc",
        "",
        "# One PL clock for everything: the accelerator, its AXI ports and the PS port clocks.",
        f"set clk [get_bd_pins {cell}/{ps['clk']}]",
        f"set clk_pins [list accel_0/{CLOCK} rst_0/slowest_sync_clk intc_0/s_axi_aclk ctrl_sc/aclk "
        f"{cell}/{ps['master_clk']}]",
        f"connect_bd_net [get_bd_pins {cell}/{ps['rstn']}] [get_bd_pins rst_0/ext_reset_in]",
        f"set rstn_pins [list accel_0/{RESET} intc_0/s_axi_aresetn ctrl_sc/aresetn]",
        f"connect_bd_intf_net [get_bd_intf_pins {cell}/{ps['master']}] [get_bd_intf_pins ctrl_sc/S00_AXI]",
        f"connect_bd_intf_net [get_bd_intf_pins ctrl_sc/M00_AXI] [get_bd_intf_pins accel_0/{CONTROL}]",
        "connect_bd_intf_net [get_bd_intf_pins ctrl_sc/M01_AXI] [get_bd_intf_pins intc_0/s_axi]",
        f"connect_bd_net [get_bd_pins accel_0/{IRQ}] [get_bd_pins intc_0/intr]",
        f"connect_bd_net [get_bd_pins intc_0/irq] [get_bd_pins {cell}/{ps['irq']}]",
        "# Each AXI master reaches DRAM through its own HP port; a SmartConnect converts",
        "# protocol (AXI4 -> AXI3 on Zynq-7000) and width where they differ.",
        f"set hp_ports [list {' '.join(str(i) for i in hps)}]",
        "set n 0",
        "foreach hp $hp_ports {",
        '    set sc [create_bd_cell -type ip -vlnv [ip_vlnv smartconnect] "mem_sc$n"]',
        "    set_property -dict [list CONFIG.NUM_SI {1} CONFIG.NUM_MI {1}] $sc",
        '    connect_bd_intf_net [get_bd_intf_pins "accel_0/m_axi_gmem$n"] [get_bd_intf_pins "mem_sc$n/S00_AXI"]',
        f'    connect_bd_intf_net [get_bd_intf_pins "mem_sc$n/M00_AXI"] '
        f'[get_bd_intf_pins "{cell}/{ps["hp"].replace("{i}", "${hp}")}"]',
        f'    lappend clk_pins "mem_sc$n/aclk" "{cell}/{ps["hp_clk"].replace("{i}", "${hp}")}"',
        '    lappend rstn_pins "mem_sc$n/aresetn"',
        "    incr n",
        "}",
        "foreach p $clk_pins { connect_bd_net $clk [get_bd_pins $p] }",
        "set rstn [get_bd_pins rst_0/peripheral_aresetn]",
        "foreach p $rstn_pins { connect_bd_net $rstn [get_bd_pins $p] }",
        "assign_bd_address",
        "validate_bd_design",
        "save_bd_design",
        "",
        "# ---- 3. synthesis, implementation, bitstream and hardware handoff ------------------",
        "set bd_file [get_files system.bd]",
        "generate_target all $bd_file",
        "add_files -norecurse [make_wrapper -files $bd_file -top]",
        "set_property top system_wrapper [current_fileset]",
        "update_compile_order -fileset sources_1",
        "launch_runs impl_1 -to_step write_bitstream -jobs $jobs",
        "wait_on_run impl_1",
        'if {[get_property PROGRESS [get_runs impl_1]] ne "100%"} {',
        '    fail "implementation did not finish: see $proj_dir/bd/systolica.runs/impl_1/runme.log"',
        "}",
        "open_run impl_1",
        'file mkdir "$here/reports"',
        'report_timing_summary -file "$here/reports/timing.rpt"',
        'report_utilization -file "$here/reports/utilization.rpt"',
        "set wns [get_property STATS.WNS [get_runs impl_1]]",
        'if {$wns < 0} { puts "systolica: WARNING timing not met (WNS $wns ns) at the requested clock" }',
        'file mkdir "$here/deploy"',
        'set bits [glob -nocomplain "$proj_dir/bd/systolica.runs/impl_1/*.bit"]',
        'if {[llength $bits] == 0} { fail "no bitstream was written" }',
        'file copy -force [lindex $bits 0] "$here/deploy/$name.bit"',
        "# The .hwh moved from .srcs to .gen in Vivado 2020.2.",
        'set hwh [glob -nocomplain "$proj_dir/bd/systolica.gen/sources_1/bd/system/hw_handoff/system.hwh" '
        '"$proj_dir/bd/systolica.srcs/sources_1/bd/system/hw_handoff/system.hwh"]',
        'if {[llength $hwh] == 0} { fail "no hardware handoff (.hwh) was written" }',
        'file copy -force [lindex $hwh 0] "$here/deploy/$name.hwh"',
        'puts "systolica: wrote $here/deploy/$name.bit and $name.hwh (WNS $wns ns)"',
    ]
    return lines


def _alveo_tcl(cfg: AccelConfig) -> list[str]:
    return [
        "# ---- 2. Vitis RTL kernel ----------------------------------------------------------",
        'file mkdir "$here/deploy"',
        f'package_xo -force -xo_path "$here/{IP_NAME}.xo" -kernel_name {IP_NAME} -ip_directory $ip_dir '
        '-kernel_xml "$here/kernel.xml"',
        f'puts "systolica: wrote $here/{IP_NAME}.xo; run link.sh to build deploy/$name.xclbin"',
    ]


def build_tcl(board: Board, cfg: AccelConfig, top: str, verilog_files: list[str], *, jobs: int = 4) -> str:
    """The whole Vivado batch script for ``board`` (paths relative to the script's folder).

    Parameters
    ----------
    board, cfg
        The target and the accelerator configuration the Verilog was generated from.
    top
        Name of the top-level Verilog module.
    verilog_files
        Verilog sources, relative to the folder the script is written to.
    jobs
        Parallel Vivado jobs for ``launch_runs``.
    """
    if board.flow not in ("zynq7", "zynqmp", "alveo"):
        raise VivadoError(f"board {board.name} uses the {board.flow} flow, not Vivado")
    head = [
        f"# Vivado batch build for {board.title}, accelerator config {cfg.name!r} "
        f"(hash {cfg.hash32():08x}), generated by `systolica hw build`.",
        "# Run inside this folder:  vivado -mode batch -source build.tcl",
        "set here [file normalize [file dirname [info script]]]",
        f"set name {tcl_str(board.name)}",
        f"set part {tcl_str(board.part)}",
        'set ip_dir "$here/ip"',
        'set proj_dir "$here/vivado"',
        f"set jobs {int(jobs)}",
        "proc fail {msg} {",
        '    puts stderr "systolica: ERROR: $msg"',
        "    exit 1",
        "}",
        "# The newest installed version of a Xilinx IP, so the script works across Vivado releases.",
        "proc ip_vlnv {name} {",
        '    set defs [lsort -dictionary [get_ipdefs -filter "VLNV =~ xilinx.com:ip:${name}:*"]]',
        '    if {[llength $defs] == 0} { fail "IP $name is not in the catalog of this Vivado" }',
        "    return [lindex $defs end]",
        "}",
        'if {[llength [get_parts -quiet $part]] == 0} { fail "part $part is not installed in this Vivado" }',
        "",
    ]
    body = package_ip_tcl(cfg, top, verilog_files).splitlines()
    tail = _alveo_tcl(cfg) if board.flow == "alveo" else _block_design_tcl(board, cfg)
    return "\n".join(head + body + [""] + tail) + "\n"


def link_script(board: Board, cfg: AccelConfig) -> str:
    """``link.sh`` for an Alveo card: v++ links the kernel into the shell as an .xclbin."""
    return "\n".join([
        "#!/usr/bin/env bash",
        f"# Link the systolica RTL kernel for {board.title}. Needs Vitis (v++) and the installed platform.",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        f'PLATFORM="${{PLATFORM:-{board.platform}}}"',
        "# The one DRAM window lives in DDR bank 0.",
        f'v++ -l -t hw --platform "$PLATFORM" --connectivity.sp {IP_NAME}_1.{gmem_name(0)}:DDR[0] '
        f'--kernel_frequency {cfg.clock_mhz:g} -o deploy/{board.name}.xclbin {IP_NAME}.xo',
        "",
    ])
