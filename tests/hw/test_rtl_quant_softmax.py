"""QuantUnit and SoftmaxUnit as Verilog under Verilator + cocotb (one cached build of both): random rows
with idle cycles on the input and back-pressure on the output, bit-exact with systolica.numerics;
cycles per row at full rate."""

from __future__ import annotations

from pathlib import Path

import pytest
from hw_rtl_units import UnitsTop

from systolica.config import preset
from systolica.hw import fixed, quant_unit, recip, softmax_unit
from systolica.hw.quant_unit import QuantUnit
from systolica.hw.softmax_unit import SoftmaxUnit

pytestmark = pytest.mark.rtl
HERE = Path(__file__).parent
UNIT_CFG = preset("tiny")  # 4 lanes, as the hardware core's unit tests
ROW_LINES = 16  # lines per row of the full-rate (cycle count) runs


class QuantSoftmaxUnits(UnitsTop):
    """One Verilog top with both units; ports ``quant_<member>`` and ``softmax_<member>``."""

    def __init__(self):
        super().__init__({"quant": QuantUnit(UNIT_CFG), "softmax": SoftmaxUnit(UNIT_CFG)})


@pytest.fixture(scope="module")
def units(build_dir):
    from systolica.sim.rtl_build import build

    return build("quant_softmax", QuantSoftmaxUnits, {"unit_cfg": UNIT_CFG.to_dict()}, build_dir,
                 deps=(quant_unit, softmax_unit, fixed, recip))


def test_quant_unit_rtl(units):
    runs = [{"seed": 11, "rows": 60, "idle": 0.3, "stall": 0.3},
            {"seed": 12, "rows": 60, "idle": 0.6, "stall": 0.1},
            {"seed": 13, "rows": 60, "idle": 0.1, "stall": 0.6}]
    res = units.run("cocotb_quant_softmax", HERE, testcase="quant", params={"runs": runs, "lines": ROW_LINES}).check()
    met = res.metrics
    print(f"\nquant: {met}")
    assert met["carry_rows"] > 0, met  # the s0 + 1 case was exercised
    L = ROW_LINES
    # the row streams in 2 (3) times at one line per cycle; a handful of cycles of framing per row
    assert 2 * L <= met["cycles_per_row_split0"] <= 2 * L + 11, met
    assert 3 * L <= met["cycles_per_row_split1"] <= 3 * L + 21, met  # the unit takes 2L + 11 and 3L + 21 at full rate


def test_softmax_unit_rtl(units):
    runs = [{"seed": 21, "rows": 40, "max_n": 40, "idle": 0.3, "stall": 0.3},
            {"seed": 22, "rows": 40, "max_n": 9, "idle": 0.1, "stall": 0.6},
            # volume at full rate: ~2e4 elements (a wrong rounding deep in exp_fx flips few outputs)
            {"seed": 23, "rows": 600, "max_n": 64, "idle": 0.0, "stall": 0.0}]
    res = units.run("cocotb_quant_softmax", HERE, testcase="softmax",
                    params={"runs": runs, "lines": ROW_LINES}).check()
    met = res.metrics
    print(f"\nsoftmax: {met}")
    assert met["elements"] > 10_000, met
    # three passes at one line per cycle plus the reciprocal (35 cycles) and the exp pipeline's drain per row
    assert 3 * ROW_LINES + 35 <= met["cycles_per_row"] <= 3 * ROW_LINES + 55, met
