"""The buffers' read ports are undefined on a collision in the RTLIL that Yosys synthesizes, and only theirs.

Amaranth writes every read port as "the old word when the write port writes the same address"; a block RAM's two
ports do not promise that, so Yosys emulated it with a register of the write data and a multiplexer on every
read data bit (hw/buffers.py ``undefined_collisions``).  The accelerator stops a run that would tell the two
apart (``BUFFER_COLLISION``); here: the marking itself, and what it does to the mapping (Yosys, when installed).
"""

from __future__ import annotations

import re
import subprocess

import pytest
from amaranth.hdl import Module, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import preset
from systolica.faults import Fault
from systolica.hw.accelerator import Accelerator
from systolica.hw.buffers import ALL_BUFFER_MEMORIES, buffer_copies, undefined_collisions
from systolica.hw.generate import convert
from systolica.sim.faults import BufferCollisionError, fault_error


class _TwoMemories(wiring.Component):
    """A buffer-named memory and another, each with one write and one synchronous read port."""

    def __init__(self, depth: int = 1024, width: int = 64):
        self.depth, self.width = depth, width
        ports = {}
        for n in ("a", "b"):
            ports |= {f"{n}_wa": In(10), f"{n}_wd": In(width), f"{n}_we": In(1), f"{n}_ra": In(10), f"{n}_re": In(1),
                      f"{n}_rd": Out(width)}
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        for n, mem_name in (("a", "vbuf_a_mem"), ("b", "other_mem")):
            m.submodules[mem_name] = mem = memory.Memory(shape=unsigned(self.width), depth=self.depth, init=[])
            wp, rp = mem.write_port(), mem.read_port()
            m.d.comb += [wp.addr.eq(getattr(self, f"{n}_wa")), wp.data.eq(getattr(self, f"{n}_wd")),
                         wp.en.eq(getattr(self, f"{n}_we")), rp.addr.eq(getattr(self, f"{n}_ra")),
                         rp.en.eq(getattr(self, f"{n}_re")), getattr(self, f"{n}_rd").eq(rp.data)]
        return m


def _masks(il: str) -> dict[str, str]:
    """MEMID -> COLLISION_X_MASK of every synchronous read port in ``il``."""
    out = {}
    for cell in re.findall(r"cell \$memrd_v2 .*?\n\s*end\n", il, re.S):
        memid = re.search(r'parameter \\MEMID "\\\\(\S+)"', cell).group(1)
        out[memid] = re.search(r"parameter \\COLLISION_X_MASK (\S+)", cell).group(1)
    return out


def test_only_the_buffers_read_ports_are_marked():
    from amaranth.back import rtlil

    il = rtlil.convert(_TwoMemories(), name="t", emit_src=False)
    assert _masks(il) == {"vbuf_a_mem": "1'0", "other_mem": "1'0"}  # Amaranth: the old word
    marked = undefined_collisions(il, list(ALL_BUFFER_MEMORIES))
    assert _masks(marked) == {"vbuf_a_mem": "1'1", "other_mem": "1'0"}
    assert len(marked) == len(il)  # nothing else changed: one character a port
    assert undefined_collisions(marked, list(ALL_BUFFER_MEMORIES)) == marked


def test_the_top_level_rtlil_marks_every_buffer_copy_and_the_verilog_keeps_the_old_word():
    cfg = preset("tiny").replace(attn_beside=1)
    il, verilog = convert(Accelerator(cfg), "systolica_accel")
    masks = _masks(il)
    want = {f"{b}_{c}_mem" if c else f"{b}_mem" for b, copies in buffer_copies(cfg).items() for c in copies}
    assert {k for k, v in masks.items() if v.endswith("'1")} == want
    assert all(v.endswith("'0") for k, v in masks.items() if k not in want)  # FIFOs and tables: untouched
    assert "BUFFER_COLLISION" not in verilog  # (the fault is a code, not a name, in the Verilog)


def test_the_fault_has_its_code_and_exception():
    assert Fault.BUFFER_COLLISION == 10
    err = fault_error(Fault.BUFFER_COLLISION, 7, "line read as written")
    assert isinstance(err, BufferCollisionError) and err.pc == 7


def _yosys_or_skip() -> list[str]:
    from systolica.boards.yosys import YosysError, yosys_command

    try:
        return yosys_command()
    except YosysError as e:
        pytest.skip(f"Yosys is not installed: {e}")


class _OneMemory(wiring.Component):
    """One 1024 x 64 memory named ``mem_name``, one write and one synchronous read port."""

    def __init__(self, mem_name: str):
        self.mem_name = mem_name
        super().__init__({"wa": In(10), "wd": In(64), "we": In(1), "ra": In(10), "re": In(1), "rd": Out(64)})

    def elaborate(self, platform):
        m = Module()
        m.submodules[self.mem_name] = mem = memory.Memory(shape=unsigned(64), depth=1024, init=[])
        wp, rp = mem.write_port(), mem.read_port()
        m.d.comb += [wp.addr.eq(self.wa), wp.data.eq(self.wd), wp.en.eq(self.we), rp.addr.eq(self.ra),
                     rp.en.eq(self.re), self.rd.eq(rp.data)]
        return m


def _ecp5_cells(tmp_path, mem_name: str) -> dict[str, int]:
    """Cell counts of ``_OneMemory(mem_name)`` after ``synth_ecp5``'s memory mapping (before LUT mapping)."""
    from amaranth.back import rtlil

    il = undefined_collisions(rtlil.convert(_OneMemory(mem_name), name="t", emit_src=False), list(ALL_BUFFER_MEMORIES))
    (tmp_path / f"{mem_name}.il").write_text(il)
    out = subprocess.run([*_yosys_or_skip(), "-q", "-p",
                          f"read_rtlil {mem_name}.il; synth_ecp5 -top t -run :map_luts; tee -o {mem_name}.stat stat"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    text = (tmp_path / f"{mem_name}.stat").read_text()
    return {k: int(n) for n, k in re.findall(r"^\s+(\d+)\s+(\S+)\s*$", text, re.M)}


def test_ecp5_maps_a_marked_buffer_to_block_rams_alone(tmp_path):
    """The marked memory is DP16KD block RAMs and nothing else; the same memory unmarked keeps Yosys's emulation
    of the old word: flip-flops and a multiplexer a read data bit."""
    marked = _ecp5_cells(tmp_path, "vbuf_a_mem")
    plain = _ecp5_cells(tmp_path, "other_mem")
    assert marked.get("DP16KD", 0) == plain.get("DP16KD", 0) > 0, (marked, plain)
    assert marked.get("TRELLIS_FF", 0) == 0 and marked.get("$_MUX_", 0) == 0, marked
    assert plain.get("TRELLIS_FF", 0) >= 64 and plain.get("$_MUX_", 0) >= 64, plain


@pytest.mark.rtl
def test_an_op_that_reads_a_line_as_it_writes_it_stops_with_buffer_collision(build_dir):
    """An ADD whose output lines run ``k`` lines ahead of its input in the vector buffer: with ``k`` the line
    datapath's latency in lines it reads each line in the cycle the line is written, where a block RAM gives either
    word.  That run stops with ``BUFFER_COLLISION`` at the ADD's pc; every smaller ``k`` (outputs behind, on or
    just ahead of the inputs) gives the golden simulator's bytes.  (A larger ``k`` reads lines the op itself wrote
    earlier: the RTL and the golden simulator differ there, a program the decoder does not yet reject.)"""
    import numpy as np

    from systolica.isa import encode, make
    from systolica.sim.fast_harness import FastRtl
    from systolica.sim.golden import GoldenSim

    cfg = preset("tiny")
    mem, win_base, win_size, data = 1 << 18, 0x1_0000, 0x2_0000, 0x1000
    lines, src = 24, 8
    fast = FastRtl(cfg, build_dir)
    rng = np.random.default_rng(5)
    seen = []
    for k in range(-2, 17):
        ops = [make("LOAD", buf=2, sram=0, dram=data, rows=1, lines=2 * lines + 16, stride=0, push_next=True),
               make("ADD", dst=src + k, a=src, b=lines + 16, rows=1, lines=lines, bcast=0, pop_prev=True,
                    push_next=True),
               make("STORE", buf=2, sram=0, dram=data + 0x4000, rows=1, lines=2 * lines + 16, stride=0,
                    pop_prev=True),
               make("FINISH")]
        words = [encode(i) for i in ops]
        code = b"".join(int(w).to_bytes(16, "little") for w in words)
        base = np.zeros(mem, np.uint8)
        base[win_base + data:win_base + data + 0x4000] = rng.integers(0, 256, 0x4000, dtype=np.uint8)
        base[win_base:win_base + len(code)] = np.frombuffer(code, np.uint8)
        gold = base.copy()
        assert GoldenSim(cfg, gold, window_base=win_base, window_size=win_size).run(words).status == Fault.NONE
        dram = base.copy()
        res = fast.run(dram, window_base=win_base, window_size=win_size, prog_base=0, prog_len=len(words),
                       max_cycles=20_000)
        assert res.done, k
        if res.code == Fault.BUFFER_COLLISION:
            assert res.pc == 1, (k, res.pc)  # the ADD
            break
        assert res.code == Fault.NONE and np.array_equal(dram, gold), (k, res.code)
        seen.append(k)
    else:
        raise AssertionError(f"no offset up to 16 lines collided: {seen}")
    assert len(seen) >= 5, seen  # outputs behind, on and a few lines ahead of the inputs ran cleanly first
