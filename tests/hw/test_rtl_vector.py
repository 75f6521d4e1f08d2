"""VectorUnit as Verilog under Verilator + cocotb, bit-exact with numerics."""

from __future__ import annotations

from pathlib import Path

import pytest

from systolica.config import preset
from systolica.hw import vector_unit
from systolica.sim.rtl_build import build

pytestmark = pytest.mark.rtl
HERE = Path(__file__).parent


def test_vector_unit_rtl(build_dir):
    cfg = preset("tiny")
    b = build("vector_unit", lambda: vector_unit.VectorUnit(cfg), {"cfg": cfg.to_dict()}, build_dir,
              deps=(vector_unit,))
    res = b.run("cocotb_vector", HERE, params={"cfg": cfg.to_dict(),
                                               "runs": [[1, 0.3, 0.3], [2, 0.5, 0.2], [3, 0.0, 0.0]]})
    res.check()
    # one line per cycle at full rate
    assert res.metrics["lines_per_cycle"] == 1.0, res.metrics
