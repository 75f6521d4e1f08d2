"""``FastRtl(..., pgo=True)``: the profile-guided build runs programs exactly as the plain build does.

Two more full builds of the tiny top level (instrumented, then optimized with its profile), so the
test is marked slow; the speed it buys is measured by ``python -m systolica.sim.fast_harness --bench --pgo``.
"""

from __future__ import annotations

import numpy as np
import pytest

from systolica.config import preset
from systolica.sim.accel_programs import random_program
from systolica.sim.fast_harness import FastRtl

pytestmark = [pytest.mark.rtl, pytest.mark.slow]

MEM, WIN_BASE, WIN_SIZE, LO, HI = 1 << 18, 0x1_0000, 0x2_0000, 0x1000, 0x9000


def test_pgo_build_runs_programs_like_the_plain_build(build_dir):
    cfg = preset("tiny")
    plain, pgo = FastRtl(cfg, build_dir), FastRtl(cfg, build_dir, pgo=True)
    assert pgo.dir != plain.dir and "-fprofile-use" in pgo.flags["cflags"] and pgo.flags["pgo"] != "off"
    assert list((pgo.dir / "obj").glob("*.gcda")), "the training runs wrote no profile"
    assert "-fprofile-use" in (pgo.dir / "build.log").read_text()
    rng = np.random.default_rng(77)
    for i in range(40):
        prog = random_program(cfg, rng, n_ops=int(rng.integers(3, 20)), data_lo=LO, data_hi=HI, win_size=WIN_SIZE,
                              fault=None, dump_at=HI)
        dram = np.zeros(MEM, np.uint8)
        dram[WIN_BASE + LO:WIN_BASE + HI] = rng.integers(0, 256, HI - LO, dtype=np.uint8)
        code = b"".join(int(w).to_bytes(16, "little") for w in prog.words)
        dram[WIN_BASE:WIN_BASE + len(code)] = np.frombuffer(code, np.uint8)
        a, b = dram.copy(), dram.copy()
        kw = dict(window_base=WIN_BASE, window_size=WIN_SIZE, prog_base=0, prog_len=len(prog.words),
                  max_cycles=200_000, stall_percent=30 if i % 2 else 0, seed=i)
        ra, rb = plain.run(a, **kw), pgo.run(b, **kw)
        assert np.array_equal(a, b), i
        assert (ra.done, ra.code, ra.pc, ra.sim_cycles, ra.counters) == (rb.done, rb.code, rb.pc, rb.sim_cycles,
                                                                         rb.counters), i
