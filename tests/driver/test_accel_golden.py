"""Register-level control over the golden backend: programs fetched from DRAM, faults, config checks, timeouts."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import csr, numerics
from systolica.config import preset
from systolica.driver.accel import Accelerator
from systolica.driver.device import ConfigMismatchError, DeviceTimeout, open_device
from systolica.driver.golden_device import GoldenDevice
from systolica.isa import Buf, encode, make
from systolica.sim.faults import DmaWindowError, IllegalOpcodeError

CFG = preset("tiny")
C = CFG.cols


def _gemm_program(m, k_lines, n_lines, a_off, w_off, out_off):
    k, n = k_lines * C, n_lines * C
    return [
        make("LOAD", buf=Buf.SPAD, sram=0, dram=a_off, rows=m, lines=k_lines, stride=k),
        make("LOAD", buf=Buf.SPAD, sram=m * k_lines, dram=w_off, rows=n, lines=k_lines, stride=k, push_next=True),
        make("GEMM", dst=0, a=0, w=m * k_lines, m=m, k=k_lines, n=n_lines, pop_prev=True, push_next=True),
        make("STORE", buf=Buf.ACC, sram=0, dram=out_off, rows=m, lines=n_lines, stride=4 * n, pop_prev=True),
        make("FINISH"),
    ]


def _place(buf, off, instrs):
    raw = b"".join(encode(i).to_bytes(16, "little") for i in instrs)
    buf.view[off:off + len(raw)] = np.frombuffer(raw, np.uint8)
    return len(instrs)


def test_program_fetched_from_dram_computes_the_numerics_gemm():
    dev = open_device("golden", CFG, dram_bytes=1 << 20)
    acc = Accelerator(dev)
    acc.check_config(CFG.hash32())
    rng = np.random.default_rng(1)
    m, kl, nl = 3, 2, 2
    a = rng.integers(-128, 128, (m, kl * C), dtype=np.int8)
    w = rng.integers(-128, 128, (nl * C, kl * C), dtype=np.int8)
    win = dev.alloc(1 << 16)
    win.view[0x1000:0x1000 + a.size] = a.view(np.uint8).ravel()
    win.view[0x2000:0x2000 + w.size] = w.view(np.uint8).ravel()
    n = _place(win, 0, _gemm_program(m, kl, nl, 0x1000, 0x2000, 0x3000))
    stats = acc.run(win, 0, n)
    out = win.view[0x3000:0x3000 + m * nl * C * 4].view(np.int32).reshape(m, nl * C)
    np.testing.assert_array_equal(out, numerics.matmul(a, w))
    assert stats.instrs == n
    assert stats.dma_wr_bytes == out.nbytes
    assert stats.dma_rd_bytes == a.nbytes + w.nbytes + 16 * n


def test_fault_names_the_pc_and_instruction_and_the_device_stays_usable():
    dev = GoldenDevice(CFG, dram_bytes=1 << 20)
    acc = Accelerator(dev)
    win = dev.alloc(1 << 14)
    bad = [make("LOAD", buf=Buf.SPAD, sram=0, dram=(1 << 14) - 4, rows=1, lines=2, stride=0), make("FINISH")]
    n = _place(win, 0, bad)
    with pytest.raises(DmaWindowError) as e:
        acc.run(win, 0, n)
    assert e.value.pc == 0 and "LOAD" in str(e.value)
    assert dev.read_csr(csr.REG["ERROR_CODE"].offset) == 3
    n = _place(win, 0, [make("NOP", engine=1), make("FINISH")])
    acc.run(win, 0, n)  # usable again: the next run finishes cleanly
    assert dev.read_csr(csr.REG["ERROR_CODE"].offset) == 0


def test_illegal_word_in_dram_is_reported_with_its_pc():
    dev = GoldenDevice(CFG, dram_bytes=1 << 20)
    acc = Accelerator(dev)
    win = dev.alloc(1 << 12)
    _place(win, 0, [make("NOP", engine=1)])
    win.view[16:32] = 0  # opcode 0 is illegal: zeroed memory never runs
    with pytest.raises(IllegalOpcodeError) as e:
        acc.run(win, 0, 2)
    assert e.value.pc == 1 and "illegal" in str(e.value)


def test_program_running_out_of_the_window_faults_instead_of_fetching_outside():
    dev = GoldenDevice(CFG, dram_bytes=1 << 20)
    acc = Accelerator(dev)
    win = dev.alloc(64)  # room for 4 words; the program claims 8
    _place(win, 0, [make("NOP", engine=1)] * 4)
    with pytest.raises(DmaWindowError) as e:
        acc.run(win, 0, 8)
    assert e.value.pc == 4


def test_config_mismatch_says_what_to_do():
    acc = Accelerator(GoldenDevice(CFG, dram_bytes=1 << 16))
    with pytest.raises(ConfigMismatchError, match=r"recompile.*--config"):
        acc.check_config(preset("default").hash32(), "artifact smollm2.syst")


class _HungDevice(GoldenDevice):
    """Hardware that never raises DONE: the watchdog must reset it."""

    resets = 0

    def wait_done(self, timeout_s):
        return False

    def _soft_reset(self):
        self.resets += 1
        super()._soft_reset()


def test_timeout_resets_the_device():
    dev = _HungDevice(CFG, dram_bytes=1 << 16)
    acc = Accelerator(dev, timeout_s=0.01)
    win = dev.alloc(64)
    n = _place(win, 0, [make("FINISH")])
    with pytest.raises(DeviceTimeout, match="reset"):
        acc.run(win, 0, n)
    assert dev.resets == 1
    assert dev.read_csr(csr.REG["STATUS"].offset) == 0
