"""The golden backend: a :class:`~systolica.driver.device.Device` whose accelerator is the golden simulator.

It behaves like the hardware at the register level: the host writes the program
and data into DRAM buffers, sets PROG_BASE / PROG_LEN / WIN_BASE / WIN_SIZE, writes
START, and reads STATUS, ERROR_CODE, ERROR_PC and the counters back.  The
program is fetched from the simulated DRAM, not handed over as Python objects,
so the runtime exercises exactly the path it uses on a board.
"""

from __future__ import annotations

import numpy as np

from systolica.config import AccelConfig
from systolica.driver.run_to_completion import ArenaBuffer, RunToCompletionDevice
from systolica.faults import Fault
from systolica.isa import WORD_BYTES
from systolica.program import words_from_bytes  # re-exported: the driver's callers import it from here
from systolica.sim.golden import GoldenSim

__all__ = ["GoldenDevice", "ArenaBuffer", "words_from_bytes"]


class GoldenDevice(RunToCompletionDevice):
    """Golden-simulator accelerator with a register file and a DRAM arena.

    Parameters
    ----------
    cfg
        Configuration the simulated hardware is "built" from (its hash is the ID register).
    dram_bytes
        Size of the simulated DRAM (default ``cfg.dram_bytes``); allocation is lazy (zero pages).
    cycle_model
        Optional callable ``(program_words, counters) -> dict`` of cycle counters (the performance
        model); without it the cycle CSRs read 0.
    """

    name = "golden"

    def __init__(self, cfg: AccelConfig, dram_bytes: int | None = None, cycle_model=None):
        super().__init__(cfg, dram_bytes)
        self._sim: GoldenSim | None = None
        self._sim_window: tuple[int, int] | None = None
        self.cycle_model = cycle_model
        self.last_result = None
        self._fetched: dict[tuple[int, int], tuple] = {}  # (base, words) -> (bytes seen, their words)
        self._readonly: list[tuple[int, int]] = []  # arena (offset, size) ranges nothing writes any more

    def declare_readonly(self, buffer, offset: int, size: int) -> None:
        """Promise that ``size`` bytes at ``offset`` of ``buffer`` (one of :meth:`alloc`'s) are not written again
        (the weights, once placed): the golden simulator then keeps what GEMM_STREAM reads there converted
        instead of reading it again every run, and a STORE into it raises instead of running."""
        if not (offset >= 0 and offset + size <= buffer.view.size):
            raise ValueError(f"read-only range of {size} bytes at {offset:#x} is outside the {buffer.view.size}-byte buffer")
        self._readonly.append((buffer.offset + offset, size))
        self._sim_window = None  # the next run builds a simulator that knows it

    def _soft_reset(self) -> None:
        super()._soft_reset()
        if self._sim is not None:
            self._sim.reset()

    def _execute(self, off: int, win_size: int, base: int, n: int) -> tuple[Fault, int, dict]:
        if self._sim_window != (off, win_size):
            ro = [(max(o, off) - off, min(o + n, off + win_size) - max(o, off)) for o, n in self._readonly
                  if o < off + win_size and off < o + n]
            self._sim = GoldenSim(self.cfg, self.arena, window_base=off, window_size=win_size, readonly=ro)
            self._sim_window = (off, win_size)
        sim = self._sim
        # Fetch as the hardware does: words that lie outside the window fault before they run.
        fit = max(0, min(n, (win_size - base) // WORD_BYTES)) if base % WORD_BYTES == 0 else 0
        words = self._fetch_words(sim.window[base:base + fit * WORD_BYTES], base)
        res = sim.run(words, raise_on_fault=False)
        status, pc = res.status, res.pc
        if fit < n and status in (Fault.NONE, Fault.PROGRAM_OVERRUN) and (status != Fault.NONE or pc >= fit):
            status, pc = Fault.DMA_WINDOW, fit
        self.last_result = res
        c = res.counters
        counters = {"INSTRS": c.instructions, "DMA_RD_BYTES": c.dma_read_bytes + c.fetch_bytes,
                    "DMA_WR_BYTES": c.dma_write_bytes}
        if self.cycle_model:
            counters.update(self.cycle_model(words, c))
        return status, pc, counters

    def _fetch_words(self, raw: np.ndarray, base: int) -> list[int]:
        """The words in ``raw``; only those whose bytes changed since the last run from ``base`` are decoded
        again (the runtime patches a few words of a decode step per token)."""
        key = (base, raw.size)
        seen = self._fetched.get(key)
        if seen is None:
            words = words_from_bytes(raw)
            if len(self._fetched) >= 4:
                self._fetched.clear()
            self._fetched[key] = (raw.copy(), words)
            return words
        old, words = seen
        rows = raw.reshape(-1, WORD_BYTES)
        changed = np.flatnonzero((rows != old.reshape(-1, WORD_BYTES)).any(axis=1))
        if changed.size:
            words = list(words)
            for i in changed.tolist():
                words[i] = int.from_bytes(rows[i].tobytes(), "little")
            old.reshape(-1, WORD_BYTES)[changed] = rows[changed]
            self._fetched[key] = (old, words)
        return list(words)

    def close(self) -> None:
        self._sim = None
