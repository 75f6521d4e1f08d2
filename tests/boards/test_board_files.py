"""Board description files: every one loads, its figures agree, its config fits the board."""

from __future__ import annotations

import re

import pytest

from systolica.boards.board import BOARD_DIR, Board, BoardError, board_config, list_boards, load_board, parse_board
from systolica.config import AccelConfig

BOARDS = list_boards()
REQUIRED = {"pynq-z2", "zcu104", "kv260", "ultra96v2", "u250", "ulx3s", "orangecrab"}


def test_required_boards_present():
    assert set(BOARDS) >= REQUIRED


@pytest.mark.parametrize("name", BOARDS)
def test_board_figures_consistent(name):
    b = load_board(name)
    assert isinstance(b, Board) and b.name == name
    # PL-reachable bandwidth is ports x width x the accelerator clock
    assert b.pl_bandwidth_gbps == pytest.approx(b.pl_bandwidth_computed_gbps, rel=1e-3)
    # peak DRAM bandwidth is bus width x transfer rate (within the rounding of the sources)
    assert b.dram_peak_gbps == pytest.approx(b.dram_bus_bits / 8 * b.dram_mtps / 1000, rel=0.02)
    assert 0 < b.dram_efficiency <= 1
    for k, v in b.resources.as_dict().items():
        assert v >= 0, k
    assert b.resources.lut > 0 and b.resources.ff > 0 and b.resources.dsp > 0 and b.resources.bram > 0
    assert b.power_w > 0 and b.price_usd > 0 and b.accel_mhz > 0


@pytest.mark.parametrize("name", BOARDS)
def test_board_config_fits_board(name):
    b = load_board(name)
    c = b.config
    assert isinstance(c, AccelConfig) and c.name == name
    assert c.clock_mhz == b.accel_mhz
    assert c.dma_ports <= b.pl_ports and c.dma_bits <= b.pl_port_bits
    # the DRAM window is inside the board's DRAM and reachable with 32-bit offsets
    assert c.dram_bytes <= min(b.dram_bytes, 1 << 32)
    # address fields are 16 bits: every buffer has at most 65536 lines
    assert max(c.spad_lines, c.acc_lines, c.vbuf_lines) <= 1 << 16
    # one int8 MAC per DSP (MULT18X18D on ECP5): the array needs at most the board's DSPs
    assert c.rows * c.cols <= b.resources.dsp
    # on-chip buffers fit the block RAM (+ UltraRAM) bits of the part
    buf_kbits = (c.spad_kib + c.acc_kib + c.vbuf_kib) * 8
    assert buf_kbits <= b.resources.bram * b.bram_kbits + b.resources.uram * 288
    assert b.accel_dram_gbps <= b.dram_peak_gbps
    # and the hardware generator accepts it (a scratchpad line is whole DMA beats)
    from systolica.boards.fit import hardware_problem

    assert hardware_problem(c) is None


@pytest.mark.parametrize("name", BOARDS)
def test_every_figure_names_its_source(name):
    """Each figure line of a board file carries a source tag ([S: ...], [V...], [?...]) or a derivation."""
    text = (BOARD_DIR / f"{name}.toml").read_text()
    section = None
    for line in text.splitlines():
        m = re.match(r"\[(\w+)\]", line)
        if m:
            section = m.group(1)
            continue
        if section in ("resources", "memory", "clock", "cost") and "=" in line and not line.startswith("#"):
            key = line.split("=")[0].strip()
            if key == "bram_kbits":
                continue
            comment = line.partition("#")[2]
            assert re.search(r"\[(S|V|\?)[:\]\s]| x ", comment), f"{name}: {line!r} has no source"


def test_board_config_helper_and_unknown_board():
    assert board_config("kv260") == load_board("kv260").config
    with pytest.raises(BoardError, match=r"unknown board 'zcu999'.*known boards: .*kv260.*pynq-z2"):
        load_board("zcu999")
    with pytest.raises(BoardError, match="unknown board"):
        board_config("nope")


def _text(name: str) -> str:
    return (BOARD_DIR / f"{name}.toml").read_text()


def test_malformed_board_files_are_rejected():
    good = _text("pynq-z2")
    with pytest.raises(BoardError, match="missing table \\[accel\\]"):
        parse_board(good.split("[accel]")[0], source="x.toml")
    with pytest.raises(BoardError, match="flow='quartus'"):
        parse_board(good.replace('flow = "zynq7"', 'flow = "quartus"'), source="x.toml")
    with pytest.raises(BoardError, match="not a valid AccelConfig.*rows=1"):
        parse_board(good.replace("rows = 8", "rows = 1"), source="x.toml")
    with pytest.raises(BoardError, match="lut='many' must be"):
        parse_board(good.replace("lut = 53200", 'lut = "many"'), source="x.toml")
    with pytest.raises(BoardError, match="ecp5 board needs"):
        parse_board(_text("ulx3s").replace('clock_pin = "G2"', ""), source="x.toml")
    with pytest.raises(BoardError, match="dram_mbytes=-512 must be a positive"):
        parse_board(good.replace("dram_mbytes = 512", "dram_mbytes = -512"), source="x.toml")
    with pytest.raises(BoardError, match="accel_mhz=nan must be a positive"):
        parse_board(good.replace("accel_mhz = 100.0", "accel_mhz = nan"), source="x.toml")
    with pytest.raises(BoardError, match="dram_efficiency=1.5 must be in"):
        parse_board(good.replace("dram_efficiency = 0.75", "dram_efficiency = 1.5"), source="x.toml")


def test_board_file_by_path(tmp_path):
    p = tmp_path / "myboard.toml"
    p.write_text(_text("pynq-z2").replace('name = "pynq-z2"', 'name = "myboard"', 1))
    assert load_board(p).name == "myboard"
    q = tmp_path / "other.toml"
    q.write_text(_text("pynq-z2"))
    with pytest.raises(BoardError, match="differs from the file name"):
        load_board(q)
