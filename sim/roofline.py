"""Roofline of an accelerator on a board, and the work a model needs per token.

The two roofs: the array's peak (``rows x cols`` MACs a cycle at the clock) and the DRAM bandwidth the
accelerator can read with (the load engine's one read port, ``dma_bits`` wide, capped by what the
board's DRAM delivers: fetch and LOAD share ``gmem0``; a second port only carries stores).  GEMM_STREAM
reads weights through every port (``dma_ports x dma_bits``: :attr:`Roofline.stream_bytes_per_s`), and
the board itself caps any design at :func:`board_bandwidth` (DRAM peak x controller efficiency, or
what its PL ports carry at the clock, whichever is less).  Decode
(one token, matrix x vector) must read every weight once per token, so its bound is
``bandwidth / bytes per token``; prefill reuses each weight across the rows of a chunk, so its bound
is ``peak MAC/s / MACs per token``.  :func:`board_params` turns a board's DRAM figures into the
performance model's timing parameters.

This module takes plain numbers (GB/s, MHz, ns) so that the simulator does not depend on the board
descriptions; :mod:`systolica.bench` reads those and passes them in.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from systolica.config import AccelConfig
from systolica.model import ModelConfig
from systolica.sim.perf_costs import PerfParams

__all__ = ["Roofline", "ModelWork", "model_work", "board_params", "board_bandwidth", "DRAM_LATENCY_NS"]

#: Read latency of a Zynq PS DDR controller seen from a PL AXI port (~100-150 ns: interconnect + DDR
#: page miss); used when a board gives no figure.  UG1085 quotes no single number; measured HP-port
#: latencies on ZynqMP in the literature are 100-200 ns.
DRAM_LATENCY_NS = 120.0


@dataclass(frozen=True)
class Roofline:
    """Peak compute and bandwidth of one accelerator configuration at one clock."""

    name: str
    clock_mhz: float
    peak_macs_per_s: float
    dram_bytes_per_s: float  # what the load engine can read
    port_bytes_per_s: float  # the read port's width x clock (before the DRAM cap)
    stream_bytes_per_s: float = 0.0  # every port's width x clock: GEMM_STREAM's weight path (before the DRAM cap)

    @classmethod
    def for_config(cls, cfg: AccelConfig, *, clock_mhz: float | None = None, dram_gbps: float | None = None,
                   name: str | None = None) -> Roofline:
        """The roofline of ``cfg`` at ``clock_mhz`` (default the config's) under a DRAM of ``dram_gbps``.

        Raises
        ------
        ValueError
            For a non-positive clock or bandwidth.
        """
        f = float(clock_mhz if clock_mhz is not None else cfg.clock_mhz)
        if not f > 0:
            raise ValueError(f"clock_mhz={f} must be positive")
        if dram_gbps is not None and not dram_gbps > 0:
            raise ValueError(f"dram_gbps={dram_gbps} must be positive")
        port = cfg.dma_bytes * f * 1e6
        bw = port if dram_gbps is None else min(port, dram_gbps * 1e9)
        return cls(name or cfg.name, f, cfg.rows * cfg.cols * f * 1e6, bw, port, cfg.dma_ports * port)

    @property
    def ridge_macs_per_byte(self) -> float:
        """Arithmetic intensity (MACs per DRAM byte) above which the array, not DRAM, is the limit."""
        return self.peak_macs_per_s / self.dram_bytes_per_s

    def attainable_macs_per_s(self, intensity: float) -> float:
        """min(peak, intensity x bandwidth): the roofline at ``intensity`` MACs per byte."""
        return min(self.peak_macs_per_s, intensity * self.dram_bytes_per_s)

    def decode_bound_tokens_per_s(self, work: ModelWork, context: int = 0) -> float:
        return self.dram_bytes_per_s / work.decode_bytes(context)

    def prefill_bound_tokens_per_s(self, work: ModelWork, context: int = 0) -> float:
        return self.peak_macs_per_s / work.macs_per_token(context)

    def to_dict(self) -> dict:
        return {**asdict(self), "ridge_macs_per_byte": self.ridge_macs_per_byte}


@dataclass(frozen=True)
class ModelWork:
    """Weights and MACs of one token of a model (int8 weights: one byte and one MAC per weight)."""

    name: str
    weight_bytes: int  # matrices read per decode token (int8), output projection included
    kv_bytes_per_position: int  # int8 K and V of every layer for one cached position
    attn_macs_per_position: int  # q.k and p.v MACs per cached position, all layers
    matmul_macs: int  # weight MACs per token

    def decode_bytes(self, context: int = 0) -> int:
        """DRAM bytes a decode step reads at ``context`` cached positions."""
        return self.weight_bytes + context * self.kv_bytes_per_position

    def macs_per_token(self, context: int = 0) -> int:
        return self.matmul_macs + context * self.attn_macs_per_position

    def to_dict(self) -> dict:
        return asdict(self)


def model_work(c: ModelConfig, *, weight_bytes: int | None = None) -> ModelWork:
    """The per-token work of a model from its shape; ``weight_bytes`` overrides the weight count
    (a compiled artifact's ``stats.decode.weight_bytes`` includes tile padding)."""
    hd, kv = c.head_dim, c.n_kv_heads * c.head_dim
    attn = c.dim * c.dim * 2 + c.dim * kv * 2  # q, o; k, v
    mlp = c.dim * c.ffn_dim * (3 if c.arch == "llama" else 2)  # gate, up, down / fc, proj
    macs = c.n_layers * (attn + mlp) + c.vocab_size * c.dim
    return ModelWork(name=c.name, weight_bytes=int(weight_bytes if weight_bytes is not None else macs),
                     kv_bytes_per_position=2 * c.n_layers * kv, attn_macs_per_position=2 * c.n_layers * c.n_heads * hd,
                     matmul_macs=macs)


def board_bandwidth(*, dram_peak_gbps: float, dram_efficiency: float, pl_ports: int, pl_port_bits: int,
                    clock_mhz: float) -> dict[str, float | str]:
    """The board's bandwidth roof in bytes/s: ``min(DRAM peak x efficiency, PL ports x port bits / 8 x clock)``.

    Returns ``dram`` and ``pl`` (the two terms), ``roof`` (the smaller) and ``limit`` (``"dram"`` or
    ``"pl ports"``: which one it is).  No accelerator on the board reads faster, however many ports it has.

    Raises
    ------
    ValueError
        For a non-positive figure, or an efficiency above 1.
    """
    figs = {"dram_peak_gbps": dram_peak_gbps, "pl_ports": pl_ports, "pl_port_bits": pl_port_bits,
            "clock_mhz": clock_mhz, "dram_efficiency": dram_efficiency}
    bad = {k: v for k, v in figs.items() if not v > 0}
    if bad or dram_efficiency > 1:
        raise ValueError(f"board bandwidth needs positive figures and an efficiency in (0, 1]: got {bad or figs}")
    dram = dram_peak_gbps * dram_efficiency * 1e9
    pl = pl_ports * pl_port_bits / 8 * clock_mhz * 1e6
    return {"dram": dram, "pl": pl, "roof": min(dram, pl), "limit": "dram" if dram <= pl else "pl ports"}


def board_params(cfg: AccelConfig, *, dram_gbps: float, clock_mhz: float | None = None,
                 latency_ns: float = DRAM_LATENCY_NS, base: PerfParams | None = None) -> PerfParams:
    """Timing parameters of ``cfg`` on a board: the read latency in cycles of its clock, and the cycles per
    beat when the DRAM delivers less than the port's width each cycle."""
    f = float(clock_mhz if clock_mhz is not None else cfg.clock_mhz)
    if not (f > 0 and dram_gbps > 0 and latency_ns >= 0):
        raise ValueError(f"clock_mhz={f}, dram_gbps={dram_gbps}, latency_ns={latency_ns}: need positive clock "
                         "and bandwidth, latency >= 0")
    lat = round(latency_ns * f / 1000.0)
    per_cycle = dram_gbps * 1e9 / (f * 1e6)
    beat = max(1.0, cfg.dma_bytes / per_cycle)
    b = base or PerfParams()
    return b.replace(rd_latency=lat, wr_latency=lat, beat_cycles=beat, dram_bytes_per_cycle=per_cycle)
