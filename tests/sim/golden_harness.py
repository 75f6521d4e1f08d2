"""Helpers shared by the golden-simulator tests: a simulator with DRAM helpers and line-size arithmetic."""

from __future__ import annotations

import numpy as np

from systolica.asm import asm
from systolica.config import AccelConfig, preset
from systolica.sim.golden import GoldenSim

TINY = preset("tiny")


class Harness:
    """A :class:`GoldenSim` over a small DRAM array, with typed put/get at byte offsets."""

    def __init__(self, cfg: AccelConfig = TINY, dram_bytes: int = 1 << 16, **kw):
        self.cfg = cfg
        self.sim = GoldenSim(cfg, np.zeros(dram_bytes, np.uint8), **kw)

    @property
    def cols(self) -> int:
        return self.cfg.cols

    def put(self, addr: int, a: np.ndarray) -> None:
        b = np.ascontiguousarray(a).view(np.uint8).ravel()
        self.sim.window[addr:addr + b.size] = b

    def get(self, addr: int, dtype, shape) -> np.ndarray:
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return self.sim.window[addr:addr + n].view(dtype).reshape(shape).copy()

    def run(self, text: str, **kw):
        return self.sim.run(asm(text), **kw)

    def snapshot(self) -> tuple[np.ndarray, ...]:
        s = self.sim
        return s.dram.copy(), s.spad.copy(), s.acc.copy(), s.vbuf.copy()


def pad_cols(x: np.ndarray, cols: int) -> np.ndarray:
    """Pad the last axis to a multiple of ``cols`` with zeros (rows are whole lines)."""
    n = x.shape[-1]
    width = -(-n // cols) * cols
    out = np.zeros(x.shape[:-1] + (width,), x.dtype)
    out[..., :n] = x
    return out


def same_state(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def run_program(h: Harness, loads, body: str, stores, **kw):
    """LOAD ``loads`` from DRAM, run ``body`` on the compute engine, STORE ``stores``; returns the stored arrays.

    ``loads``: ``(buf, line, array)`` with ``array`` of shape (rows, lines * cols) (int8 for SPAD, int32 else);
    ``stores``: ``(buf, line, rows, lines)``.  Dependency tokens order the three phases.
    """
    cols, addr, text = h.cols, 0, []
    for buf, line, a in loads:
        a = np.ascontiguousarray(a, np.int8 if buf == "SPAD" else np.int32)
        rows, lines = a.shape[0], a.shape[1] // cols
        h.put(addr, a)
        row_bytes = a.shape[1] * a.itemsize
        text.append(f"LOAD buf={buf} sram={line} dram={addr} rows={rows} lines={lines} stride={row_bytes}")
        addr += -(-a.nbytes // 64) * 64
    text += ["NOP engine=LOAD @push_next", "NOP engine=COMPUTE @pop_prev", body, "NOP engine=COMPUTE @push_next",
             "NOP engine=STORE @pop_prev"]
    outs = []
    for buf, line, rows, lines in stores:
        dtype = np.int8 if buf == "SPAD" else np.int32
        text.append(f"STORE buf={buf} sram={line} dram={addr} rows={rows} lines={lines} stride={lines * cols * np.dtype(dtype).itemsize}")
        outs.append((addr, dtype, (rows, lines * cols)))
        addr += -(-rows * lines * cols * np.dtype(dtype).itemsize // 64) * 64
    res = h.run("\n".join(text + ["FINISH"]), **kw)
    assert res.ok, res.message
    return [h.get(a, d, s) for a, d, s in outs]
