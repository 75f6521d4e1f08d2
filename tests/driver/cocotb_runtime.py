"""cocotb side of test_runtime_rtl.py: the unchanged runtime generating tokens on the RTL.

The runtime is blocking host code; it runs in a ``cocotb.task.bridge`` thread and every
register access it makes is an AXI4-Lite transaction on the simulated accelerator.
"""

from __future__ import annotations

import json
import os

import cocotb
from cocotb.task import bridge

from systolica.artifact import Artifact
from systolica.config import AccelConfig
from systolica.driver.rtl_device import CocotbRtlDevice
from systolica.driver.runtime import Metrics, Runtime
from systolica.sim.tb_accel import AccelTB


@cocotb.test()
async def runtime_generates_on_rtl(dut):
    p = json.loads(os.environ["SYSTOLICA_TB"])
    cfg = AccelConfig.from_dict(p["cfg"])
    art = Artifact.load(p["artifact"], config=cfg)
    tb = AccelTB(dut, cfg, mem_size=p["mem"])
    await tb.reset()
    if p.get("pause"):
        tb.set_pauses(p["pause"], seed=3)

    def host():
        rt = Runtime(art, CocotbRtlDevice(tb, cfg), timeout_s=p.get("timeout_s", 0.05))
        m = Metrics("rtl", cfg.clock_mhz)
        toks = [s.token for s in rt.generate(p["prompt"], p["n"], stop=[], metrics=m)]
        return toks, m.to_dict()

    toks, metrics = await bridge(host)()
    assert not tb.violations, tb.violations[:3]
    with open(os.environ["SYSTOLICA_TB_METRICS"], "w") as f:
        json.dump({"tokens": toks, "metrics": metrics}, f, default=str)
