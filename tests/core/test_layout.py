"""systolica.layout's formulas, written for both ints and hardware values, mean what the docs say on ints."""

from __future__ import annotations

import random

from systolica.config import preset
from systolica.isa import OP_BY_NAME
from systolica.layout import EXTENTS, dma_end, dma_line_bytes, dma_lines, kv_tile, lines_for, select


def test_select_and_lines_for():
    assert select(True, 1, 2) == 1 and select(0, 1, 2) == 2 and select(3, "a", "b") == "a"
    for n in range(-20, 40):
        for cols in (1, 3, 4, 8):
            assert lines_for(n, cols) == -(-n // cols)  # ceil(n / cols) for every integer


def test_kv_tile_is_p_slots_of_hd_lines():
    for page_log2 in range(6):
        for hd in range(0, 9):
            p = 1 << page_log2
            t = kv_tile(page_log2, hd)
            assert (t.k, t.v, t.kexp, t.vexp, t.lines) == (0, p * hd, 2 * p * hd, 2 * p * hd + p, 2 * p * hd + 2 * p)


def test_dma_formulas():
    cols = 8
    assert dma_line_bytes(0, cols) == cols and dma_line_bytes(1, cols) == dma_line_bytes(2, cols) == 4 * cols
    rng = random.Random(1)
    cfg = preset("default")
    for _ in range(200):
        f = {"buf": rng.randrange(3), "dram": rng.randrange(1 << 32), "stride": rng.randrange(1 << 32),
             "rows": rng.randrange(1, 1 << 16), "lines": rng.randrange(1 << 16), "sram": 0}
        lb = cfg.cols * (1 if f["buf"] == 0 else 4)
        assert dma_end(f, cfg) == f["dram"] + (f["rows"] - 1) * f["stride"] + f["lines"] * lb
        assert dma_lines(f, cfg) == f["rows"] * f["lines"]


def test_extents_on_ints():
    cfg = preset("tiny")
    for op, extents in EXTENTS.items():
        names = [f.name for f in OP_BY_NAME[op].fields]
        assert [e.field for e in extents if e.field not in names] == [], op
        f = dict.fromkeys(names, 3)
        for e in extents:
            n = e.lines(f, cfg)
            assert isinstance(n, int) and n >= 0, (op, e.field)
    add_b = EXTENTS["ADD"][1]
    assert add_b.lines({"rows": 5, "lines": 2, "bcast": 1}, cfg) == 2
    assert add_b.lines({"rows": 5, "lines": 2, "bcast": 0}, cfg) == 10
    quant_dst = EXTENTS["QUANT"][1]
    assert quant_dst.lines({"rows": 5, "lines": 2, "split": 1}, cfg) == 20
    assert quant_dst.lines({"rows": 5, "lines": 2}, cfg) == 10
