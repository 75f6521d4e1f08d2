"""cocotb side of the fast-harness benchmark (``python -m systolica.sim.fast_harness --bench``).

Runs one program from a DRAM image through the cocotbext-axi models and reports
simulated cycles and wall time from START to the interrupt, like the C++ harness.
"""

from __future__ import annotations

import json
import os
import time

import cocotb
import numpy as np
from cocotb.utils import get_sim_time

from systolica.config import AccelConfig
from systolica.csr import CTRL_START, IRQ_DONE
from systolica.sim.tb_accel import AccelTB


@cocotb.test()
async def bench_stream(dut):
    p = json.loads(os.environ["SYSTOLICA_TB"])
    cfg = AccelConfig(**p["cfg"])
    dram = np.load(p["dram"])
    tb = AccelTB(dut, cfg, mem_size=dram.size)
    tb.ram.write(0, dram.tobytes())
    await tb.reset()
    wb, ws = p["window"]
    await tb.set_window(wb, ws)
    await tb.write_reg("PROG_BASE", 0)
    await tb.write_reg("PROG_LEN", p["prog_len"])
    await tb.write_reg("IRQ_ENABLE", IRQ_DONE)
    t_sim, t_wall, t_cpu = get_sim_time("ns"), time.perf_counter(), time.process_time()
    await tb.write_reg("CTRL", CTRL_START)
    ok = await tb.wait_done(50_000_000)
    wall, cpu = time.perf_counter() - t_wall, time.process_time() - t_cpu  # CPU: the simulator and Python in it
    cycles = int((get_sim_time("ns") - t_sim) // 10)
    res = await tb.result(timed_out=not ok)
    np.save(p["out"], np.frombuffer(tb.dram(), np.uint8))
    with open(os.environ["SYSTOLICA_TB_METRICS"], "w") as f:
        json.dump({"sim_cycles": cycles, "wall_s": wall, "cpu_s": cpu, "code": res.code.name, "counters": res.counters}, f)
    assert ok and not tb.violations, (res, tb.violations[:3])
