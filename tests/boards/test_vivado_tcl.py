"""The Vivado batch script, run through tclsh against recording stubs of Vivado's commands."""

from __future__ import annotations

from xml.etree import ElementTree

import pytest

from systolica import csr
from systolica.boards.board import load_board
from systolica.boards.hwh import HwhError, check_hwh, expected_registers
from systolica.boards.ports import PortError, axi_interfaces, check_top, parse_ports
from systolica.boards.vivado import build_tcl, hp_ports, link_script
from systolica.boards.vivado_ip import IP_VLNV, kernel_xml, tcl_str

VIVADO_BOARDS = ["pynq-z2", "zcu104", "kv260", "ultra96v2", "u250"]


def _build(name, tmp_path, fake_top, run_tcl, verilog=None):
    b = load_board(name)
    cfg = b.config
    (tmp_path / "hdl").mkdir()
    text = verilog if verilog is not None else fake_top(cfg)
    (tmp_path / "hdl" / "systolica_top.v").write_text(text)
    ports = parse_ports(text)
    intfs = axi_interfaces(ports)
    script = tmp_path / "build.tcl"
    script.write_text(build_tcl(b, cfg, "systolica_top", ["hdl/systolica_top.v"]))
    proc, calls = run_tcl(script, list(ports), list(intfs), tmp_path)
    return b, ports, intfs, proc, calls


@pytest.mark.parametrize("name", VIVADO_BOARDS)
def test_tcl_runs_and_names_exist(name, tmp_path, fake_top, run_tcl):
    b, ports, intfs, proc, calls = _build(name, tmp_path, fake_top, run_tcl)
    assert proc.returncode == 0, proc.stderr
    cmds = [c[0] for c in calls]
    assert "ipx::package_project" in cmds and cmds.count("ipx::add_register") == len(csr.REGISTERS)
    # every accelerator port / interface the script names exists in the Verilog
    for c in calls:
        if c[0] in ("get_bd_pins", "get_bd_intf_pins") and c[1].startswith("accel_0/"):
            pin = c[1].split("/", 1)[1]
            assert pin in (ports if c[0] == "get_bd_pins" else intfs), c
        if c[0] == "ipx::associate_bus_interfaces":
            opts = dict(zip(c[1::2], c[2::2], strict=False))
            assert opts.get("-busif", next(iter(intfs))) in intfs
            assert opts["-clock"] in ports and opts.get("-reset", "ap_rst_n") in ports
    if b.flow == "alveo":
        assert "package_xo" in cmds and "create_bd_design" not in cmds
        return
    # one HP port (and one SmartConnect) per AXI master, clocked by the PL clock
    hp = [c[1] for c in calls if c[0] == "get_bd_intf_pins" and "S_AXI_HP" in c[1]]
    assert len(hp) == b.config.dma_ports == len(hp_ports(b, b.config))
    props = [c for c in calls if c[0] == "set_property" and c[1] == "-dict" and "CONFIG.P" in c[2]]
    assert props and f"{b.config.clock_mhz:g}" in props[0][2]
    ps_ip = "processing_system7" if b.flow == "zynq7" else "zynq_ultra_ps_e"
    assert any(c[0] == "get_ipdefs" and ps_ip in c[-1] for c in calls)
    # the newest installed version of each Xilinx IP is chosen (10.0 sorts after 2.1)
    vlnvs = [c[c.index("-vlnv") + 1] for c in calls if c[0] == "create_bd_cell"]
    assert all(v.endswith(":10.0") for v in vlnvs if v.startswith("xilinx.com:ip:"))
    assert f"xilinx.com:ip:{ps_ip}:10.0" in vlnvs
    assert (tmp_path / "deploy" / f"{name}.bit").exists() and (tmp_path / "deploy" / f"{name}.hwh").exists()


def test_tcl_fails_when_vivado_cannot_infer_an_interface(tmp_path, fake_top, run_tcl):
    b = load_board("kv260")
    verilog = fake_top(b.config).replace("m_axi_gmem1_", "m_axi_xmem1_")
    *_, proc, calls = _build("kv260", tmp_path, fake_top, run_tcl, verilog=verilog)
    assert proc.returncode == 1
    assert "did not infer the AXI interface m_axi_gmem1" in proc.stderr
    assert ["exit", "1"] in calls


def test_port_checks(fake_top):
    cfg = load_board("kv260").config
    good = parse_ports(fake_top(cfg))
    assert cfg.dma_ports == 4  # every HP port of the board
    assert set(check_top(good, cfg.dma_ports, cfg.dma_bits)) == {"s_axi_control", *(f"m_axi_gmem{p}" for p in range(4))}
    with pytest.raises(PortError, match="m_axi_gmem1_rdata is 128 bits, the config says dma_bits=64"):
        check_top(good, 4, 64)
    with pytest.raises(PortError, match="AXI masters beyond dma_ports=1: m_axi_gmem1"):
        check_top(good, 1, 128)
    no_irq = parse_ports(fake_top(cfg).replace("output interrupt", "output irq").replace("assign interrupt", "assign irq"))
    with pytest.raises(PortError, match="no output port 'interrupt'"):
        check_top(no_irq, 4, 128)


def test_parse_non_ansi_ports():
    v = """module a(x); input x; endmodule
    /* amaranth style */ module top(ap_clk, q, d);
      (* src = "x.py:1" *) input ap_clk; wire ap_clk;
      output [31:0] q; reg [31:0] q;
      input [7:0] d;
    endmodule"""
    p = parse_ports(v)
    assert list(p) == ["ap_clk", "q", "d"]
    assert (p["q"].direction, p["q"].width, p["d"].width) == ("output", 32, 8)
    assert list(parse_ports(v, "a")) == ["x"]
    with pytest.raises(PortError, match="module 'zz' not found"):
        parse_ports(v, "zz")


def _emulated_hwh(calls) -> str:
    """The MODULE element Vivado would write for the packaged IP, from the recorded ipx calls."""
    regs: dict[str, dict] = {}
    fields: dict[tuple[str, str], dict] = {}
    for c in calls:
        if c[0] == "ipx::add_register":
            regs[c[1]] = {}
        elif c[0] == "ipx::add_field":
            fields[(c[2].split(":", 1)[1], c[1])] = {}
        elif c[0] == "set_property" and len(c) == 4 and c[3].startswith("register:"):
            regs[c[3].split(":", 1)[1]][c[1].upper()] = c[2]
        elif c[0] == "set_property" and len(c) == 4 and c[3].startswith("field:"):
            _, reg, f = c[3].split(":")
            fields[(reg, f)][c[1].upper()] = c[2]
    root = ElementTree.Element("EDKSYSTEM")
    mod = ElementTree.SubElement(ElementTree.SubElement(root, "MODULES"), "MODULE", FULLNAME="/accel_0",
                                 INSTANCE="accel_0", VLNV=IP_VLNV, MODTYPE="systolica_accel")
    block = ElementTree.SubElement(ElementTree.SubElement(mod, "ADDRESSBLOCKS"), "ADDRESSBLOCK", NAME="reg0",
                                   INTERFACE="s_axi_control")
    regs_el = ElementTree.SubElement(block, "REGISTERS")
    for name, props in regs.items():
        r = ElementTree.SubElement(regs_el, "REGISTER", NAME=name)
        for k, v in props.items():
            ElementTree.SubElement(r, "PROPERTY", NAME=k, VALUE=v)
        fs = ElementTree.SubElement(r, "FIELDS")
        for (reg, f), fp in fields.items():
            if reg == name:
                fe = ElementTree.SubElement(fs, "FIELD", NAME=f)
                for k, v in fp.items():
                    ElementTree.SubElement(fe, "PROPERTY", NAME=k, VALUE=v)
    return ElementTree.tostring(root, encoding="unicode")


@pytest.mark.parametrize("name", ["pynq-z2", "kv260"])
def test_hwh_register_map_equals_csr_map(name, tmp_path, fake_top, run_tcl):
    *_, proc, calls = _build(name, tmp_path, fake_top, run_tcl)
    assert proc.returncode == 0, proc.stderr
    hwh = _emulated_hwh(calls)
    regs = check_hwh(hwh)
    assert {n: r["address_offset"] for n, r in regs.items()} == {r.name: r.offset for r in csr.REGISTERS}
    assert regs["CTRL"]["access"] == "write-only" and regs["ID"]["access"] == "read-only"
    assert regs["STATUS"]["fields"]["DONE"] == {"bit_offset": 1, "bit_width": 1, "access": "read-only"}
    assert regs == expected_registers()
    # descriptions survive Tcl quoting exactly (they contain quotes, brackets and backquotes)
    assert {n: r["description"] for n, r in regs.items()} == {r.name: r.doc for r in csr.REGISTERS}
    # a .hwh whose map differs is refused with the difference named
    broken = hwh.replace('VALUE="0x0C"', 'VALUE="0x10"', 1)
    with pytest.raises(HwhError, match="STATUS.address_offset is 16"):
        check_hwh(broken)


def test_tcl_str_round_trips_through_tclsh(tmp_path):
    import shutil
    import subprocess
    if shutil.which("tclsh") is None:
        pytest.skip("tclsh is not installed")
    s = 'a "quoted" [cmd] $var \\back {brace} `tick`'
    script = tmp_path / "s.tcl"
    script.write_text(f"puts -nonewline {tcl_str(s)}\n")
    out = subprocess.run(["tclsh", str(script)], capture_output=True, text=True, check=True).stdout
    assert out == s


def test_alveo_kernel_xml_and_link_script():
    b = load_board("u250")
    root = ElementTree.fromstring(kernel_xml(b.config))
    k = root.find("kernel")
    assert k.get("hwControlProtocol") == "user_managed" and k.get("vlnv") == IP_VLNV
    ptr = [a for a in k.iter("arg") if a.get("addressQualifier") == "1"]
    assert len(ptr) == 1 and int(ptr[0].get("offset"), 16) == csr.REG["WIN_BASE_LO"].offset
    assert {p.get("name"): p.get("dataWidth") for p in k.iter("port")}["m_axi_gmem0"] == str(b.config.dma_bits)
    assert "DDR[0]" in link_script(b, b.config) and b.platform in link_script(b, b.config)
    with pytest.raises(ValueError, match="dma_ports=1"):
        kernel_xml(b.config.replace(dma_ports=2))


def test_hp_port_limits():
    b = load_board("pynq-z2")
    assert hp_ports(b, b.config) == [0, 2]
    with pytest.raises(ValueError, match="HP ports of pynq-z2 are at most 64 bits"):
        hp_ports(b, b.config.replace(dma_bits=128))
    with pytest.raises(ValueError, match="not Vivado"):
        build_tcl(load_board("ulx3s"), b.config, "top", ["x.v"])


@pytest.fixture(scope="module")
def generated_top(tmp_path_factory):
    """The real top level (systolica.hw.generate) for a small two-port config."""
    from systolica.boards.hdl import write_verilog
    from systolica.config import preset

    cfg = preset("tiny").replace(name="tiny2", dma_ports=2, dma_bits=32)
    paths, ports = write_verilog(cfg, tmp_path_factory.mktemp("hdl"))
    return cfg, paths["verilog"], ports


@pytest.mark.parametrize("name", ["pynq-z2", "kv260"])
def test_tcl_against_generated_verilog(name, generated_top, tmp_path, run_tcl):
    """Every port / interface the script names exists in the Verilog hw.generate writes."""
    from systolica.boards.hdl import top_name

    cfg, verilog, ports = generated_top
    b = load_board(name)
    intfs = check_top(ports, cfg.dma_ports, cfg.dma_bits)
    script = tmp_path / "build.tcl"
    script.write_text(build_tcl(b, cfg, top_name(), [verilog.name]))
    proc, calls = run_tcl(script, list(ports), list(intfs), tmp_path)
    assert proc.returncode == 0, proc.stderr
    named = {c[1].split("/", 1)[1] for c in calls if c[0] in ("get_bd_pins", "get_bd_intf_pins")
             and c[1].startswith("accel_0/")}
    assert named == {"ap_clk", "ap_rst_n", "interrupt", "s_axi_control", "m_axi_gmem0", "m_axi_gmem1"}
    assert named <= set(ports) | set(intfs)
    assert [c for c in calls if c[0] == "set_property" and c[1] == "top"][0][2] == top_name()
