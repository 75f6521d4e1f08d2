"""Exit codes by error kind, mapped in one place: 0 ok, 1 accelerator fault, 2 bad input, 3 a check failed."""

from __future__ import annotations

import json

import pytest

from systolica import cli
from systolica.cli.exits import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_FAULT, CheckFailed, exit_code
from systolica.config import ConfigError, preset
from systolica.faults import Fault

SPEC = "random:llama:dim=32,n_layers=1,n_heads=2,vocab=64,max_seq=32"


def _run(argv, capsys):
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_exit_code_of_each_error_kind():
    from systolica.cli.options import UsageError
    from systolica.driver.device import DeviceError, DeviceFault, DeviceTimeout
    from systolica.sim.faults import DmaWindowError, TokenDeadlockError

    assert exit_code(DmaWindowError(Fault.DMA_WINDOW, 3, "row 2")) == EXIT_FAULT
    assert exit_code(TokenDeadlockError(Fault.TOKEN_DEADLOCK, 0, "")) == EXIT_FAULT
    assert exit_code(DeviceTimeout("no DONE after 1 s")) == EXIT_FAULT
    assert exit_code(DeviceFault("unknown error code 99")) == EXIT_FAULT
    assert exit_code(DeviceError("no bitstream")) == EXIT_BAD_INPUT  # cannot be used: not a fault of a run
    assert exit_code(ConfigError("unknown key")) == EXIT_BAD_INPUT
    assert exit_code(UsageError("bad option")) == EXIT_BAD_INPUT
    assert exit_code(FileNotFoundError("x")) == EXIT_BAD_INPUT
    assert exit_code(CheckFailed("stale")) == EXIT_CHECK_FAILED
    assert exit_code(ZeroDivisionError()) is None  # a bug keeps its traceback


def test_a_bug_keeps_its_traceback(monkeypatch):
    from systolica.cli import isa

    def broken(args):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(isa.Info, "main", staticmethod(broken))
    with pytest.raises(ZeroDivisionError):
        cli.main(["info"])


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("art") / "r.systolica"
    assert cli.main(["compile", SPEC, "--config", "tiny", "-o", str(out), "--page", "8"]) == 0
    return out


@pytest.mark.parametrize("fault", ["sim", "timeout", "device"])
def test_an_accelerator_fault_during_run_exits_1(artifact, fault, capsys, monkeypatch):
    """The fault stops the run with one line naming it, exit 1 -- whatever kind of fault the backend raised."""
    from systolica.driver import runtime
    from systolica.driver.device import DeviceFault, DeviceTimeout
    from systolica.sim.faults import DmaWindowError

    exc = {"sim": DmaWindowError(Fault.DMA_WINDOW, 7, "LOAD row 3 at 0x1000000"),
           "timeout": DeviceTimeout("golden: no DONE after 1.0 s"),
           "device": DeviceFault("rtl: the accelerator touched 64 bytes outside its DRAM window")}[fault]

    def faulting(self, prompt, *a, **k):
        raise exc
        yield  # a generator, as the real one

    monkeypatch.setattr(runtime.Runtime, "generate", faulting)
    capsys.readouterr()
    rc, _, err = _run(["run", "--model", str(artifact), "-n", "2", "x"], capsys)
    assert rc == EXIT_FAULT
    assert _one_line(err).startswith("accelerator fault: ") and str(exc) in err
    rc, out, err = _run(["run", "--model", str(artifact), "-n", "2", "--json", "x"], capsys)
    assert rc == EXIT_FAULT and out == "" and "accelerator fault" in err
    with pytest.raises(type(exc)):
        cli.main(["--debug", "run", "--model", str(artifact), "-n", "2", "x"])


@pytest.mark.parametrize("argv,words", [
    (["info", "--config", "nosuch"], "nosuch"),
    (["run", "--temperature", "nan", "x"], "temperature"),
    (["bench", "--model", SPEC, "--boards", "pynq-z2", "--baselines", "", "--sweep-prompts", "8,x"], "item 'x'"),
    (["dse", "--models", SPEC, "--boards", "pynq-z2", "--dma-bits", "64,wide"], "wide"),
    (["hw", "build", "--board", "pynq-z2", "--unit", "array"], "--asic"),
    (["compile", SPEC, "--config", "tiny", "-o", "x.systolica", "--page", "3"], "power of two"),
])
def test_bad_input_exits_2_with_one_line(argv, words, capsys, tmp_path, monkeypatch):
    """Named errors and argparse's own refusals (which exit through SystemExit) both give 2 and one line."""
    monkeypatch.chdir(tmp_path)
    try:
        rc = cli.main(argv)
    except SystemExit as e:  # argparse: usage line + error line
        rc = e.code
    err = capsys.readouterr().err
    assert rc == EXIT_BAD_INPUT and words in err and "Traceback" not in err


def test_a_stale_document_is_a_failed_check(tmp_path, capsys):
    doc = tmp_path / "isa.md"
    doc.write_text("old\n")
    rc, _, err = _run(["isa-doc", "--check", "-o", str(doc)], capsys)
    assert rc == EXIT_CHECK_FAILED and _one_line(err).startswith("check failed: ") and "stale" in err


def test_rtl_differing_from_golden_is_a_failed_check(tmp_path, capsys, monkeypatch):
    """``sim --rtl``: RTL and golden simulator disagree -> exit 3 (the harness is stubbed: no Verilator build)."""
    from systolica.asm import assemble
    from systolica.cli import sim

    prog = tmp_path / "p.bin"
    assemble("NOP engine=LOAD\nFINISH", preset("tiny")).save(prog)

    def fake_rtl(cfg, dram_in, prog_base, n_words, waves, **kw):
        dram = dram_in.copy()
        if not fake_rtl.same:
            dram[0] ^= 1
        return {"fault": "NONE", "pc": 0, "cycles": 10, "cycles_per_s": 1, "counters": {}, "violations": 0,
                "waves": None, "wall_s": 0.0, "dram": dram}

    monkeypatch.setattr(sim, "_run_rtl", fake_rtl)
    argv = ["sim", str(prog), "--config", "tiny", "--rtl", "--window", str(1 << 16), "--json"]
    fake_rtl.same = True
    rc, out, _ = _run(argv, capsys)
    assert rc == 0 and json.loads(out)["rtl"]["agree"]
    fake_rtl.same = False
    rc, out, _ = _run(argv, capsys)
    assert rc == EXIT_CHECK_FAILED and not json.loads(out)["rtl"]["same_dram"]


def test_a_design_that_does_not_fit_is_a_failed_check(tmp_path, monkeypatch, capsys):
    """``hw build --estimate`` of an array far too big for the board: exit 3, and fit.json says why."""
    from systolica.boards import hdl
    from systolica.boards.board import load_board

    def fake_write(cfg, out_dir, **kw):  # no Verilog generation: the estimate needs none
        out_dir.mkdir(parents=True, exist_ok=True)
        v = out_dir / "systolica_accel.v"
        v.write_text("module systolica_accel(); endmodule\n")
        return {"verilog": v, "markdown": v}, {}

    monkeypatch.setattr(hdl, "write_verilog", fake_write)
    big = tmp_path / "big.toml"
    big.write_text(load_board("ultra96v2").config.reshaped(64, 64).to_toml())
    out = tmp_path / "b"
    rc = cli.main(["hw", "build", "--board", "ultra96v2", "--config", str(big), "--estimate", "-o", str(out),
                   "--json", str(tmp_path / "fit.json")])
    assert rc == EXIT_CHECK_FAILED
    fit = json.loads((tmp_path / "fit.json").read_text())
    assert fit["estimate_within_limits"] is False and fit == json.loads((out / "fit.json").read_text())


def test_json_without_a_file_is_stdout_only_and_with_one_a_file(tmp_path, capsys):
    """``--json`` has one meaning in every command: stdout (nothing else there) without FILE, the file with one."""
    from systolica.asm import assemble

    prog = tmp_path / "p.bin"
    assemble("NOP engine=LOAD\nFINISH", preset("tiny")).save(prog)
    rc, out, _ = _run(["sim", "--json", str(prog), "--config", "tiny"], capsys)  # does not swallow PROGRAM
    assert rc == 0 and json.loads(out)["status"] == "NONE"
    rc, out, _ = _run(["sim", str(prog), "--config", "tiny", "--json", str(tmp_path / "r.json")], capsys)
    assert rc == 0 and "finished" in out and json.loads((tmp_path / "r.json").read_text())["status"] == "NONE"
    rc, out, _ = _run(["sim", str(prog), "--config", "tiny", f"--json={tmp_path / 'plain'}"], capsys)
    assert rc == 0 and json.loads((tmp_path / "plain").read_text())["status"] == "NONE"


def test_run_json_reports_the_macs_of_a_decode_step():
    """``run --json``'s ``macs_per_token`` comes from the model's shape (it was a constant 0)."""
    from systolica.driver.runtime import _decode_macs

    class _Art:
        manifest = {"model": {"arch": "llama", "dim": 32, "n_layers": 1, "n_heads": 2, "n_kv_heads": 2, "ffn_dim": 48,
                              "vocab_size": 64, "name": "m"}}

    weights = 32 * 32 * 2 + 32 * 32 * 2 + 32 * 48 * 3 + 64 * 32
    assert _decode_macs(_Art(), 0) == weights
    assert _decode_macs(_Art(), 10) == weights + 10 * 2 * 2 * 16  # q.k and p.v per cached position
    _Art.manifest = {"model": "not a shape"}
    assert _decode_macs(_Art(), 3) is None


TIMING = """\
| Design Timing Summary
| ---------------------

    WNS(ns)      TNS(ns)  TNS Failing Endpoints  TNS Total Endpoints
    -------      -------  ---------------------  -------------------
     {wns}      -1.000                     {fail}                48211
"""


@pytest.mark.parametrize("wns,rc", [("0.250", 0), ("-0.400", EXIT_CHECK_FAILED)])
def test_vivado_missing_the_clock_is_a_failed_check(wns, rc, tmp_path, monkeypatch, capsys):
    """``hw build --vivado`` (a stand-in ``vivado`` on PATH writes the timing summary): WNS < 0 exits 3."""
    import os
    import stat

    from systolica.boards import deploy, hdl

    def fake_write(cfg, out_dir, **kw):
        out_dir.mkdir(parents=True, exist_ok=True)
        v = out_dir / "systolica_accel.v"
        v.write_text("module systolica_accel(); endmodule\n")
        return {"verilog": v, "markdown": v}, {}

    monkeypatch.setattr(hdl, "write_verilog", fake_write)
    monkeypatch.setattr(deploy, "check_deploy", lambda board, d, cfg: [])  # no real bitstream to check
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path / "cache"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (tmp_path / "timing.rpt").write_text(TIMING.format(wns=wns, fail=0 if wns[0] != "-" else 17))
    exe = bindir / "vivado"
    exe.write_text(f"#!/bin/sh\nmkdir -p reports && cp {tmp_path / 'timing.rpt'} reports/timing.rpt\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    got = cli.main(["hw", "build", "--board", "pynq-z2", "--estimate", "--vivado", "-o", str(tmp_path / "b")])
    out = capsys.readouterr().out
    assert got == rc and "WNS" in out
