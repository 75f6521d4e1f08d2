"""Every RAM of the top level has at most one write and one read port: what a block RAM has.

A memory with a second write port becomes flip-flops in Yosys and Vivado, one with more read ports is
copied per port; docs/boards.md measured that no board fitted while the buffers broke this rule.  The
census elaborates the whole design (no Verilog), so this runs in the default test run for every preset.
"""

from __future__ import annotations

import re

import pytest

from systolica.boards.board import load_board
from systolica.config import preset
from systolica.hw.accelerator import Accelerator
from systolica.hw.buffers import URAM_MIN_BITS, buffer_copies, memory_port_census

CONFIGS = {"tiny": lambda: preset("tiny"), "default": lambda: preset("default"),
           "pynq-z2": lambda: load_board("pynq-z2").config, "kv260": lambda: load_board("kv260").config,
           # a third scratchpad copy, the attention unit's (config.attn_beside)
           "tiny-beside": lambda: preset("tiny").replace(attn_beside=1)}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def census(request):
    cfg = CONFIGS[request.param]()
    return cfg, memory_port_census(Accelerator(cfg))


def test_every_ram_has_one_write_and_one_read_port(census):
    cfg, mems = census
    rams = [m for m in mems if m[3] > 0]
    assert rams, "the census found no RAM at all"
    bad = [m for m in rams if m[3] > 1 or m[4] > 1]
    assert not bad, f"{cfg.name}: RAMs with more ports than a block RAM has (name, depth, width, W, R): {bad}"


def test_buffers_are_the_expected_copies(census):
    cfg, mems = census
    by_name = {m[0]: m for m in mems}
    depth = {"spad": cfg.spad_lines, "acc": cfg.acc_lines, "vbuf": cfg.vbuf_lines}
    width = {"spad": 8 * cfg.cols, "acc": 32 * cfg.cols, "vbuf": 32 * cfg.cols}
    for buf, copies in buffer_copies(cfg).items():
        for copy in copies:
            name = f"top.{buf}_{copy}_mem" if copy else f"top.{buf}_mem"
            assert by_name[name][1:5] == (depth[buf], width[buf], 1, 1), by_name[name]


def test_uram_marks_only_large_buffers():
    cfg = load_board("kv260").config
    mems = [m for m in memory_port_census(Accelerator(cfg, uram=True)) if m[3] > 0]
    ultra = {m[0] for m in mems if m[5] == "ultra"}
    assert ultra == {m[0] for m in mems if m[1] * m[2] >= URAM_MIN_BITS}
    assert {"top.spad_a_mem", "top.spad_w_mem"} <= ultra  # 16384 x 128 bits each
    # 7-series style: no buffer attribute; only the attention unit's score buffers ask for block RAM (they would
    # take a URAM288 each on UltraScale+, where block RAM is otherwise unused), and the exp tables (read-only,
    # read synchronously): two a lane of the activation unit and two an exp2 pipeline of the attention unit, and the
    # reciprocal seeds
    marked = {m[0]: m[5] for m in memory_port_census(Accelerator(cfg)) if m[5]}
    assert marked and set(marked.values()) == {"block"}, marked
    # (one score buffer a query row of the attention unit: umem, umem_r1, ..)
    scores = [n for n in marked if re.fullmatch(r".*\.umem(_r\d+)?", n)]
    assert len(scores) == cfg.attn_rows
    tables = [n for n in marked if re.fullmatch(r".*\.act\.exp_(base|delta)_\d+", n)]
    assert len(tables) == 2 * cfg.nonlinear_width
    attn_tables = [n for n in marked if re.fullmatch(r".*\.aseq\.unit\.exp_(base|delta)(_r\d+)?", n)]
    assert len(attn_tables) == 2 * cfg.attn_pv_sets  # an exp2 pipeline a set of p.V lanes (kv260: 3)
    # the seeded Newton quotient's seed ROM, one a lane of the activation unit (config.act_newton: kv260)
    seeds = [n for n in marked if re.fullmatch(r".*\.act\.recip_seed_\d+", n)]
    assert len(seeds) == cfg.nonlinear_width * cfg.act_newton
    # the weight ports' line FIFOs when they read ahead (config.wstream_ahead), one a port, or two, even and odd
    # lines, where the array takes two beats a cycle (config.wstream_pairs: kv260, pynq-z2)
    ahead = [n for n in marked if re.fullmatch(r".*\.wstream\.q\d+[eo]?\.storage", n)]
    assert len(ahead) == cfg.dma_ports * bool(cfg.wstream_ahead) * (1 + cfg.wstream_pairs)
    assert len(scores) + len(tables) + len(attn_tables) + len(seeds) + len(ahead) == len(marked), marked
