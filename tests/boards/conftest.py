"""Fixtures for the board tests: a Verilog top level with the accelerator's port names,
and a tclsh harness that runs generated Vivado scripts against recording stubs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from systolica.config import AccelConfig

HERE = Path(__file__).resolve().parent


def _axi_lite(prefix: str, addr_bits: int) -> list[str]:
    return [f"input {prefix}_awvalid", f"output {prefix}_awready", f"input [{addr_bits - 1}:0] {prefix}_awaddr",
            f"input [2:0] {prefix}_awprot", f"input {prefix}_wvalid", f"output {prefix}_wready",
            f"input [31:0] {prefix}_wdata", f"input [3:0] {prefix}_wstrb", f"output {prefix}_bvalid",
            f"input {prefix}_bready", f"output [1:0] {prefix}_bresp", f"input {prefix}_arvalid",
            f"output {prefix}_arready", f"input [{addr_bits - 1}:0] {prefix}_araddr", f"input [2:0] {prefix}_arprot",
            f"output {prefix}_rvalid", f"input {prefix}_rready", f"output [31:0] {prefix}_rdata",
            f"output [1:0] {prefix}_rresp"]


def _axi_master(prefix: str, data_bits: int) -> list[str]:
    d, s = data_bits, data_bits // 8
    out = []
    for ch in ("aw", "ar"):
        out += [f"output {prefix}_{ch}valid", f"input {prefix}_{ch}ready", f"output [63:0] {prefix}_{ch}addr",
                f"output [7:0] {prefix}_{ch}len", f"output [2:0] {prefix}_{ch}size", f"output [1:0] {prefix}_{ch}burst",
                f"output [3:0] {prefix}_{ch}cache", f"output [2:0] {prefix}_{ch}prot"]
    out += [f"output {prefix}_wvalid", f"input {prefix}_wready", f"output [{d - 1}:0] {prefix}_wdata",
            f"output [{s - 1}:0] {prefix}_wstrb", f"output {prefix}_wlast", f"input {prefix}_bvalid",
            f"output {prefix}_bready", f"input [1:0] {prefix}_bresp", f"input {prefix}_rvalid",
            f"output {prefix}_rready", f"input [{d - 1}:0] {prefix}_rdata", f"input [1:0] {prefix}_rresp",
            f"input {prefix}_rlast"]
    return out


def fake_top_verilog(cfg: AccelConfig, top: str = "systolica_top") -> str:
    """A hand-written stand-in with exactly the top level's port names (ANSI style, tied-off outputs)."""
    decls = ["input ap_clk", "input ap_rst_n", *_axi_lite("s_axi_control", 12)]
    for i in range(cfg.dma_ports):
        decls += _axi_master(f"m_axi_gmem{i}", cfg.dma_bits)
    decls.append("output interrupt")
    body = []
    for d in decls:
        if d.startswith("output"):
            body.append(f"  assign {d.split()[-1]} = 0;")
    return f"// stand-in top level\nmodule {top} (\n  " + ",\n  ".join(decls) + "\n);\n" + "\n".join(body) + "\nendmodule\n"


@pytest.fixture(autouse=True, scope="session")
def _private_synth_cache(private_synth_cache):
    """Every test here runs with the empty synthesis cache of tests/conftest.py."""
    yield


@pytest.fixture
def fake_top():
    return fake_top_verilog


def _tcl_list(items) -> str:
    return "[list " + " ".join("{" + i + "}" for i in items) + "]"


def run_tcl_with_stubs(script: Path, ports, busifs, tmp: Path) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """Source ``script`` in tclsh after the Vivado stubs; return the process and the recorded calls."""
    tclsh = shutil.which("tclsh")
    if tclsh is None:
        pytest.skip("tclsh is not installed (apt-get install tcl)")
    log = tmp / "calls.log"
    driver = tmp / "driver.tcl"
    driver.write_text("\n".join([
        f"set ::stub_log {{{log}}}",
        f"set ::stub_ports {_tcl_list(ports)}",
        f"set ::stub_busifs {_tcl_list(busifs)}",
        f"source {{{HERE / 'vivado_stub.tcl'}}}",
        f"source {{{script}}}",
        "close $::stub_fd",
    ]) + "\n")
    proc = subprocess.run([tclsh, str(driver)], capture_output=True, text=True, timeout=60)
    calls = [line.split("\x1f") for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []
    return proc, calls


@pytest.fixture
def run_tcl():
    return run_tcl_with_stubs
