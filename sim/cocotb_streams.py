"""cocotb 2.x drivers for ``amaranth.lib.stream`` ports of a generated top level.

Amaranth flattens a stream member ``x`` of a component into the Verilog ports
``x__valid``, ``x__ready`` and ``x__payload`` (the payload as one bit vector laid out
by its ``data.Layout``).  :class:`StreamBench` drives any number of such streams from
a single clocked loop — one ``ReadOnly`` and one ``RisingEdge`` per cycle for all of
them, because per-cycle Python is what limits cocotb's speed — with idle cycles on
every source and back-pressure on every sink drawn from seeded random generators.

Import this module only inside a cocotb simulation (it imports ``cocotb``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

__all__ = ["Source", "Sink", "StreamBench", "reset"]


@dataclass
class Source:
    """Beats to drive into ``<name>__payload`` with ``valid``; idle with probability ``idle``."""

    name: str
    layout: Any
    beats: Sequence[Any]
    idle: float = 0.0
    fired: list[int] = field(default_factory=list)  # cycle of each accepted beat
    _i: int = 0
    _valid: bool = False

    @property
    def done(self) -> bool:
        return self._i >= len(self.beats)


@dataclass
class Sink:
    """Collects ``count`` beats from ``<name>__payload``; ``ready`` low with probability ``stall``."""

    name: str
    layout: Any
    count: int
    stall: float = 0.0
    beats: list[Any] = field(default_factory=list)
    fired: list[int] = field(default_factory=list)
    _ready: bool = False

    @property
    def done(self) -> bool:
        return len(self.beats) >= self.count


async def reset(dut, cycles: int = 3, period_ns: int = 10) -> None:
    """Start the clock on ``dut.clk`` (in the simulator, no Python per edge) and pulse ``dut.rst``."""
    Clock(dut.clk, period_ns, unit="ns", impl="gpi").start()
    dut.rst.value = 1
    for _ in range(cycles):
        await RisingEdge(dut.clk)
    dut.rst.value = 0


class StreamBench:
    """Runs sources and sinks together, one loop iteration per clock cycle."""

    def __init__(self, dut, sources: Sequence[Source], sinks: Sequence[Sink], seed: int = 0):
        self.dut, self.sources, self.sinks = dut, list(sources), list(sinks)
        self.rng = random.Random(seed)
        self.cycle = 0

    def _port(self, stream: str, member: str):
        return getattr(self.dut, f"{stream}__{member}")

    async def run(self, max_cycles: int = 1_000_000) -> int:
        """Run until every source has sent and every sink has received; return the cycle count."""
        dut, rng = self.dut, self.rng
        for s in self.sources:
            self._port(s.name, "valid").value = 0
        for k in self.sinks:
            self._port(k.name, "ready").value = 0
        await RisingEdge(dut.clk)
        while not (all(s.done for s in self.sources) and all(k.done for k in self.sinks)):
            if self.cycle >= max_cycles:
                raise AssertionError(f"streams stalled: {self.status()} after {max_cycles} cycles")
            # drive this cycle's inputs (we are just after a rising edge: writes are allowed)
            for s in self.sources:
                # a raised valid stays raised until the beat is taken (stream rule)
                if not s._valid and not s.done and rng.random() >= s.idle:
                    s._valid = True
                    self._port(s.name, "payload").value = int(s.layout.const(s.beats[s._i]).as_bits())
                self._port(s.name, "valid").value = int(s._valid)
            for k in self.sinks:
                k._ready = (not k.done) and rng.random() >= k.stall
                self._port(k.name, "ready").value = int(k._ready)
            await ReadOnly()  # everything combinational has settled: sample the handshakes
            for s in self.sources:
                if s._valid and int(self._port(s.name, "ready").value):
                    s.fired.append(self.cycle)
                    s._i += 1
                    s._valid = False
            for k in self.sinks:
                if k._ready and int(self._port(k.name, "valid").value):
                    k.beats.append(k.layout.from_bits(int(self._port(k.name, "payload").value)))
                    k.fired.append(self.cycle)
            await RisingEdge(dut.clk)
            self.cycle += 1
        for s in self.sources:
            self._port(s.name, "valid").value = 0
        for k in self.sinks:
            self._port(k.name, "ready").value = 0
        return self.cycle

    def status(self) -> str:
        return ", ".join([f"{s.name} sent {s._i}/{len(s.beats)}" for s in self.sources]
                         + [f"{k.name} got {len(k.beats)}/{k.count}" for k in self.sinks])


def log(msg: str) -> None:
    cocotb.log.info(msg)
