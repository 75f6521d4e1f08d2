"""cocotb module (run by :mod:`systolica.sim.perf_validate`): run programs on the RTL top level, read the counters.

Parameters arrive as JSON in ``$SYSTOLICA_TB``: ``cfg`` (the AccelConfig dict) and ``programs``
(a JSON file of ``[{"name", "words": [hex...]}]``).  For each program the DRAM data region is filled
with random bytes, the program runs with no AXI back-pressure, and the cycle counters plus the wall
time of the simulation go to ``$SYSTOLICA_TB_METRICS`` as ``{"runs": [...]}``.

Only imported inside a cocotb simulation.
"""

from __future__ import annotations

import json
import os
import time

import cocotb
import numpy as np

from systolica.config import AccelConfig
from systolica.sim.tb_accel import AccelTB

MEM = 1 << 20
WIN_BASE = 0x1_0000
WIN_SIZE = 0x8_0000
DATA_LO, DATA_HI = 0x1_0000, 0x7_0000  # the programs keep their data here (below: the program words)


@cocotb.test()
async def perf_counters(dut):
    """Every program of the list: cycles and busy counters as the hardware reports them."""
    p = json.loads(os.environ["SYSTOLICA_TB"])
    cfg = AccelConfig(**p["cfg"])
    with open(p["programs"]) as f:
        progs = json.loads(f.read())
    tb = AccelTB(dut, cfg, mem_size=MEM)
    await tb.reset()
    await tb.set_window(WIN_BASE, WIN_SIZE)
    tb.set_pauses(0.0)
    rng = np.random.default_rng(5)
    tb.ram.write(WIN_BASE + DATA_LO, rng.integers(0, 256, DATA_HI - DATA_LO, dtype=np.uint8).tobytes())
    runs = []
    for prog in progs:
        words = [int(w, 16) for w in prog["words"]]
        t0 = time.perf_counter()
        res = await tb.run(words, prog_base=0, timeout_cycles=prog.get("timeout", 2_000_000))
        wall = time.perf_counter() - t0
        runs.append({"name": prog["name"], "code": int(res.code), "timed_out": res.timed_out,
                     "counters": res.counters, "wall_s": wall})
    path = os.environ.get("SYSTOLICA_TB_METRICS")
    if path:
        with open(path, "w") as out:
            json.dump({"runs": runs}, out)
    bad = [r for r in runs if r["code"] or r["timed_out"]]
    assert not bad, bad[:3]
