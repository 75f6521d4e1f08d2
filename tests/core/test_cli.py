"""The systolica command line: info, asm, disasm, sim, isa-doc, and how errors print."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from systolica import cli, isadoc
from systolica.config import preset
from systolica.program import Program

PROG = """
LOAD buf=VBUF sram=0 dram=0 rows=2 lines=1 stride=16 @push_next
ADD dst=4 a=0 b=1 rows=1 lines=1 @pop_prev @push_next
STORE buf=VBUF sram=4 dram=0x40 rows=1 lines=1 @pop_prev
FINISH
"""


def run(argv, capsys):
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_help_lists_commands_without_importing_them():
    code = ("import sys; from systolica import cli; cli.build_parser([]); "
            "print(any(m.startswith(('systolica.sim', "
            "'systolica.cli.isa', 'systolica.cli.sim', 'rich')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    out = subprocess.run([sys.executable, "-m", "systolica.cli", "--help"], capture_output=True, text=True).stdout
    for name in cli.COMMANDS:
        assert name.split()[0] in out  # a group ("hw") lists its commands in its own --help


def test_info(capsys):
    rc, out, _ = run(["info", "--config", "tiny"], capsys)
    cfg = preset("tiny")
    assert rc == 0
    assert f"{cfg.hash32():08x}" in out and str(cfg.spad_lines) in out and "ATTN_OUT" in out


def test_asm_disasm_round_trip(tmp_path, capsys):
    src = tmp_path / "p.s"
    src.write_text(PROG)
    rc, out, _ = run(["asm", str(src), "--config", "tiny"], capsys)
    assert rc == 0 and "4 instructions" in out
    prog = Program.load(tmp_path / "p.bin", config=preset("tiny"))
    assert [i.op for i in prog.instrs()] == ["LOAD", "ADD", "STORE", "FINISH"]
    rc, out, _ = run(["disasm", str(tmp_path / "p.bin"), "--no-pc"], capsys)
    assert rc == 0
    src2 = tmp_path / "q.s"
    src2.write_text(out)
    run(["asm", str(src2), "-o", str(tmp_path / "q.bin"), "--config", "tiny"], capsys)
    assert (tmp_path / "q.bin").read_bytes() == (tmp_path / "p.bin").read_bytes()
    rc, out, _ = run(["disasm", str(tmp_path / "p.bin")], capsys)
    assert "     2: STORE buf=VBUF" in out and f"{preset('tiny').hash32():08x}" in out


def test_asm_error_is_one_red_line(tmp_path, capsys):
    src = tmp_path / "bad.s"
    src.write_text("FINISH\nGEMM k=99999\n")
    rc, out, err = run(["asm", str(src)], capsys)
    assert rc == cli.EXIT_ERROR
    assert "line 2" in err and "99999" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    with pytest.raises(Exception, match="line 2"):
        cli.main(["--debug", "asm", str(src)])


def _bin(tmp_path, text, cfg="tiny", name="p"):
    from systolica.asm import assemble

    p = tmp_path / f"{name}.bin"
    assemble(text, preset(cfg)).save(p)
    return p


def test_sim_runs_and_reports(tmp_path, capsys):
    dram = np.zeros(64, np.int32)
    dram[:4] = [1, 2, 3, 4]
    dram[4:8] = [10, 20, 30, 40]
    (tmp_path / "d.bin").write_bytes(dram.tobytes())
    prog = _bin(tmp_path, PROG)
    rc, out, _ = run(["sim", str(prog), "--config", "tiny", "--dram", str(tmp_path / "d.bin"),
                      "--dram-out", str(tmp_path / "o.bin"), "--json"], capsys)
    assert rc == 0
    res = json.loads(out)
    assert res["status"] == "NONE" and res["counters"]["instructions"] == 4
    assert res["counters"]["dma_read_bytes"] == 32 and res["counters"]["dma_write_bytes"] == 16
    back = np.fromfile(tmp_path / "o.bin", dtype=np.int32)
    assert list(back[0x10:0x14]) == [11, 22, 33, 44]
    rc, out, _ = run(["sim", str(prog), "--config", "tiny"], capsys)
    assert rc == 0 and "finished" in out and "instructions" in out


def test_sim_fault_exit_code_and_message(tmp_path, capsys):
    prog = _bin(tmp_path, "NOP engine=LOAD\nLOAD buf=ACC sram=0 dram=0x1000000 rows=1 lines=1\nFINISH")
    rc, out, _ = run(["sim", str(prog), "--config", "tiny"], capsys)
    assert rc == 1
    assert "DMA_WINDOW" in out and "pc 1" in out and "LOAD buf=ACC" in out
    rc, out, _ = run(["sim", str(prog), "--config", "tiny", "--json"], capsys)
    res = json.loads(out)
    assert rc == 1 and res["code"] == 3 and res["pc"] == 1


def test_sim_refuses_other_config(tmp_path, capsys):
    prog = _bin(tmp_path, "FINISH", cfg="default")
    rc, _, err = run(["sim", str(prog), "--config", "tiny"], capsys)
    assert rc == cli.EXIT_ERROR and "recompile" in err and "Traceback" not in err
    assert "run with --config default" in err  # names the preset the program was built for


def test_missing_file_and_bad_config(tmp_path, capsys):
    rc, _, err = run(["disasm", str(tmp_path / "none.bin")], capsys)
    assert rc == cli.EXIT_ERROR and "does not exist" in err
    rc, _, err = run(["info", "--config", "nosuch"], capsys)
    assert rc == cli.EXIT_ERROR and "nosuch" in err


def test_isa_doc(tmp_path, capsys):
    out = tmp_path / "isa.md"
    assert run(["isa-doc", "--check", "-o", str(out)], capsys)[0] == 3  # a check failed
    assert run(["isa-doc", "-o", str(out)], capsys)[0] == 0
    assert out.read_text() == isadoc.render()
    assert run(["isa-doc", "--check", "-o", str(out)], capsys)[0] == 0


def test_no_command_prints_help(capsys):
    rc, out, _ = run([], capsys)
    assert rc == cli.EXIT_ERROR and "COMMAND" in out


def test_console_script_entry_point():
    r = subprocess.run(["systolica", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and "systolica" in r.stdout
