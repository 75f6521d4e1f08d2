"""The pynq backend against the real `pynq` package, with PYNQ's device layer replaced by a simulated board.

`pynq.MMIO` and `pynq.allocate` are PYNQ's own code; only the layer below them
(`pynq.Device`: register reads/writes and buffer allocation) is a simulated board
whose accelerator is the golden simulator.  On a real board the same runtime
code talks to the bitstream instead (tests marked `board`).

`pynq` pins numpy < 2 (as PYNQ board images have it), so the tests marked `pynq`
run in a second environment of their own (README, "Tests"); where `pynq` is not
installed they skip and say so.  This module imports without it.
"""

from __future__ import annotations

import functools
import sys

import numpy as np
import pytest

from systolica import numerics
from systolica.config import preset
from systolica.driver.accel import Accelerator
from systolica.driver.device import DeviceError
from systolica.driver.golden_device import GoldenDevice
from systolica.driver.pynq_device import PynqDevice, find_accelerator_ip
from systolica.isa import Buf, encode, make

CFG = preset("tiny")
BASE = 0xA000_0000


@functools.cache
def _simulated_board_class():
    import pynq

    class SimulatedBoard(pynq.Device):
        """PYNQ's device layer for a board whose accelerator is the golden simulator."""

        def __init__(self, golden: GoldenDevice):
            super().__init__("systolica-simulated-board")
            self.capabilities = {"REGISTER_RW": True}
            self.golden = golden

        def read_registers(self, address, length):
            return self.golden.read_csr(address - BASE).to_bytes(4, "little")[:length]

        def write_registers(self, address, data):
            self.golden.write_csr(address - BASE, int.from_bytes(bytes(data), "little"))

        def allocate(self, shape, dtype, **kwargs):
            nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
            region = self.golden.alloc(nbytes)
            return pynq.buffer.PynqBuffer(shape, dtype, buffer=self.golden.arena, offset=region.offset, device=self,
                                          device_address=region.physical_address, coherent=True)

    return SimulatedBoard


def _install(monkeypatch, golden: GoldenDevice):
    """Make a simulated board over ``golden`` PYNQ's active device for one test; monkeypatch puts back (or
    removes) what was there, so no other test sees it."""
    import pynq

    sim = _simulated_board_class()(golden)
    monkeypatch.setattr(pynq.Device, "_active_device", sim, raising=False)  # what the active_device setter writes
    assert pynq.Device.active_device is sim
    return sim


@pytest.fixture
def board(monkeypatch):
    return _install(monkeypatch, GoldenDevice(CFG, dram_bytes=1 << 20))


@pytest.mark.pynq
def test_gemm_through_pynq_mmio_and_allocate(board):
    dev = PynqDevice(CFG, base_addr=BASE)
    acc = Accelerator(dev)
    acc.check_config(CFG.hash32())
    c = CFG.cols
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (2, c), dtype=np.int8)
    w = rng.integers(-128, 128, (c, c), dtype=np.int8)
    win = dev.alloc(1 << 14)
    import pynq

    assert isinstance(win.view, pynq.buffer.PynqBuffer)
    win.view[0x1000:0x1000 + a.size] = a.view(np.uint8).ravel()
    win.view[0x2000:0x2000 + w.size] = w.view(np.uint8).ravel()
    prog = [
        make("LOAD", buf=Buf.SPAD, sram=0, dram=0x1000, rows=2, lines=1, stride=c),
        make("LOAD", buf=Buf.SPAD, sram=2, dram=0x2000, rows=c, lines=1, stride=c, push_next=True),
        make("GEMM", dst=0, a=0, w=2, m=2, k=1, n=1, pop_prev=True, push_next=True),
        make("STORE", buf=Buf.ACC, sram=0, dram=0x3000, rows=2, lines=1, stride=4 * c, pop_prev=True),
        make("FINISH"),
    ]
    raw = b"".join(encode(i).to_bytes(16, "little") for i in prog)
    win.view[:len(raw)] = np.frombuffer(raw, np.uint8)
    stats = acc.run(win, 0, len(prog))
    out = np.asarray(win.view[0x3000:0x3000 + 2 * c * 4]).view(np.int32).reshape(2, c)
    np.testing.assert_array_equal(out, numerics.matmul(a, w))
    assert stats.instrs == len(prog)


@pytest.mark.pynq
def test_missing_bitstream_and_hwh_are_named(tmp_path, board):
    with pytest.raises(DeviceError, match="does not exist"):
        PynqDevice(CFG, tmp_path / "systolica.bit")
    (tmp_path / "systolica.bit").write_bytes(b"\0" * 16)
    with pytest.raises(DeviceError, match=r"systolica\.hwh is missing"):
        PynqDevice(CFG, tmp_path / "systolica.bit")


def test_finding_the_accelerator_in_an_overlay():
    ip = {"axi_dma_0": {"type": "xilinx.com:ip:axi_dma:7.1"},
          "accel": {"type": "systolica.dev:hls:systolica:1.0", "phys_addr": BASE, "addr_range": 4096}}
    assert find_accelerator_ip(ip)[0] == "accel"
    with pytest.raises(DeviceError, match="no systolica accelerator IP; IPs found: axi_dma_0"):
        find_accelerator_ip({"axi_dma_0": {"type": "xilinx.com:ip:axi_dma:7.1"}})


@pytest.mark.pynq
def test_runtime_through_pynq_generates_what_the_golden_backend_does(monkeypatch):
    from systolica.compiler.compile import compile_model
    from systolica.driver.device import open_device
    from systolica.driver.runtime import Runtime
    from systolica.testmodels import random_model

    model = random_model("llama", dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=40, vocab=260, seed=9,
                         max_seq=32)
    art = compile_model(model, CFG, page=16, max_seq=32, prefill_chunk=4)
    golden = Runtime(art, open_device("golden", CFG, dram_bytes=art.dram_bytes + 8192))
    want = [s.token for s in golden.generate([7, 3, 250, 18, 99], 6, stop=[])]

    _install(monkeypatch, GoldenDevice(CFG, dram_bytes=art.dram_bytes + (1 << 16)))
    rt = Runtime(art, PynqDevice(CFG, base_addr=BASE))
    got = [s.token for s in rt.generate([7, 3, 250, 18, 99], 6, stop=[])]
    assert got == want


@pytest.mark.pynq
def test_the_simulated_board_is_gone_after_its_test():
    """No fake device outlives the test that installed it: PYNQ's own lookup is back for the next test."""
    import pynq

    before = vars(pynq.Device).get("_active_device", "unset")
    with pytest.MonkeyPatch.context() as mp:
        sim = _install(mp, GoldenDevice(CFG, dram_bytes=1 << 16))
        assert pynq.Device.active_device is sim
    assert vars(pynq.Device).get("_active_device", "unset") == before
    assert not isinstance(before, _simulated_board_class())


def test_without_pynq_the_backend_says_what_to_install(monkeypatch):
    """Runs everywhere: with `pynq` not importable, opening the backend names the package and the extra."""
    monkeypatch.setitem(sys.modules, "pynq", None)  # `import pynq` raises ImportError
    with pytest.raises(DeviceError, match=r"needs the `pynq` package: pip install -e \.\[board\]"):
        PynqDevice(CFG, base_addr=BASE)
