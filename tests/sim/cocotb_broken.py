"""A cocotb test that fails on purpose (run by test_rtl_waves.py): the harness must leave a waveform."""

from __future__ import annotations

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles


@cocotb.test()
async def deliberately_wrong(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 20)
    assert int(dut.count.value) == 255, f"count is {int(dut.count.value)} (this test is meant to fail)"
