"""Cycle costs of single instructions: the parameters of the performance model and one cost per op.

:func:`op_cost` says how many cycles an instruction keeps its engine in the
``EXEC`` state (see ``hw/engines.py``: every engine goes IDLE -> POP -> EXEC
-> PUSH), how many cycles the systolic array accepts operands, and how many
DMA beats it moves.  :mod:`systolica.sim.perf` places these costs on the three
engines' timelines with the dependency tokens.

The DMA costs replay the burst schedule of ``hw/dma.py`` burst by burst: every
row is split into INCR bursts of at most ``max_burst`` beats that do not cross
a 4 KiB boundary; an address is issued at most every ``2 + ar_wait`` cycles
(``arvalid`` is a register that drops for a cycle after each handshake); at
most ``outstanding`` bursts are in flight; data beats of a burst start
``rd_latency`` cycles after its address and follow each other at
``beat_cycles`` cycles per beat (1 when the DRAM keeps up with the port).

GEMM has two datapaths: ``"systolic"`` is the weight-stationary array of
``hw/systolic_array.py`` as ``hw/gemm_sequencer.py`` drives it (a weight tile of
``rows x cols`` loads in ``cols / P`` cycles into the shadow registers while the
active ones compute one activation row per cycle; the array's pipeline (:func:`array_latency`) and
the accumulator per instruction); ``"line_dot"`` is the top level's first compute
engine (one ``cols``-lane dot product per cycle, then 4 cycles to add the output
line into the accumulator), kept to compare datapaths.
GEMM_STREAM (:func:`_gemm_stream`) is the systolic GEMM with its weights read from DRAM by the
``dma_ports`` weight ports (``hw/weight_stream.py``) instead of the scratchpad: a first-order cost whose
RTL calibration is pending (one constant checked on "tiny", :data:`WSTREAM_STARTUP`).
The line ops (ADD, MUL, REQUANT, ARGMAX, SILU, GELU, ROPE; QUANT, SOFTMAX, RMSNORM,
LAYERNORM) follow the RTL's vector and row-pass sequencers: ``cfg.line_beats`` cycles per
buffer line and pass (the line units have ``cfg.line_width`` lanes; SILU and GELU ``cfg.nonlinear_beats``,
on ``cfg.nonlinear_width`` lanes; the norms and SOFTMAX ``cfg.rowpass_beats``, on ``cfg.rowpass_width`` lanes), fixed cycles per row
for the row statistics, calibrated latencies.  ATTN and ATTN_OUT follow the attention
sequencer (one K or V line a cycle; a reciprocal per ATTN_OUT row), calibrated on the RTL.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from functools import cache, lru_cache

from systolica.config import AccelConfig
from systolica.isa import Buf, Instr
from systolica.sim.perf_dma import (
    LOAD_TAIL_CYCLES,
    dma_read_cycles,
    dma_read_timing,
    dma_write_cycles,
    rd_round_trip,
    transfer_bursts,
    wr_round_trip,
)

__all__ = ["PerfParams", "OpCost", "rd_round_trip", "wr_round_trip", "op_cost", "cost_signature", "COST_FIELDS", "array_latency", "dma_read_cycles", "dma_read_timing", "dma_write_cycles", "line_bytes", "GEMM_DATAPATHS",
           "VECTOR_PASSES", "VECTOR_EXTRA_LATENCY", "vector_extra_latency", "WSTREAM_STARTUP"]

GEMM_DATAPATHS = ("line_dot", "systolic")
RECIP_CYCLES = 33  # hw/recip.py: one reciprocal, request to result

#: Passes over the row of each line op and its fixed cycles per row, as the RTL runs them
#: (``hw/vector_sequencer.py``, ``hw/rowpass_sequencer.py`` and the units' docstrings).  A pass takes
#: ``cfg.line_beats`` cycles per buffer line: the line units have ``cfg.line_width`` lanes and see a
#: ``cols``-wide line as ``cols / line_width`` beats.  Per row: QUANT (split 0) the max pass, its drain and
#: the scale (11 cycles: its statistics take a stage more than its output, and its beats enter through a register), the q pass, a header; SOFTMAX the
#: max, sum and output passes, the reciprocal (35 cycles), the max and sum drains, a header; the norms the (mean,) max and sum-of-squares passes, the reciprocal of
#: ``n``, the rsqrt's Newton steps, the output pass.  ``QUANT_SPLIT`` is QUANT with ``split = 1``.
VECTOR_PASSES: dict[str, tuple[int, int]] = {
    "REQUANT": (1, 0), "QUANT": (2, 11), "QUANT_SPLIT": (3, 21), "ADD": (1, 0), "MUL": (1, 0),
    "RMSNORM": (3, 87), "LAYERNORM": (4, 97), "SILU": (1, 0), "GELU": (1, 0), "ROPE": (1, 0), "SOFTMAX": (3, 51),
    "ARGMAX": (1, 0),
}
#: lines read ahead of a LAYERNORM output pass at full width: the FIFO's 4 (hw/rowpass_sequencer.py _DEPTH)
#: and the second and third of the unit's three beat registers (a line a beat; RTL tiny: 687 -> 683 cycles for 4
#: rows with two, 700 -> 696 with three, 2026-12-07)
ROWPASS_FIFO_LINES = 6
#: beats read ahead of a LAYERNORM output pass cut into beats (hw/rowpass_sequencer.py ``_beat_feed``): the
#: FIFO's 16 and the unit's three beat registers
ROWPASS_FEED_AHEAD = 19
#: The line ops that run on the activation, norm and softmax units (``cfg.nonlinear_width`` lanes).
NONLINEAR_OPS = frozenset({"SILU", "GELU", "RMSNORM", "LAYERNORM", "SOFTMAX"})
#: Those of them on the row-pass sequencer's norm and softmax units (``cfg.rowpass_width`` lanes).
ROWPASS_OPS = frozenset({"RMSNORM", "LAYERNORM", "SOFTMAX"})
#: Pipeline depth beyond ``vector_latency`` of the unit an op runs on: the activation unit's exp LUT and
#: pipelined divider (``hw/activation.py``); SOFTMAX's exp pipeline (17 stages) drains after the last beat; the
#: norm unit's output pass is a pipeline of 14 stages; QUANT's of 5 (its stage 0 since 2026-12-07); the row-pass sequencer's beat register adds
#: one to each; a ROPE line waits a
#: cycle for its sin line (read through the same vector-buffer port as cos); the vector unit's ops (ADD, MUL,
#: REQUANT, ROPE, ARGMAX) pass its input register (``hw/vector_unit.py`` stage 0).  Calibrated on
#: the RTL top level (tiny, line_lanes 0 and 2: every line op within 1 cycle for rows of 16+ lines); then the
#: line units were pipelined for ECP5's 100 MHz (2026-12-01 evening): VectorUnit.LATENCY 3 -> 10 stages and
#: ActivationUnit.latency 20 -> 71 (their ops' entries grew by 7 and 51), and the row-pass units (QUANT's
#: three-stage beat pipeline, SOFTMAX's exp pipeline, the norm's output pipeline); then the activation unit's
#: two constant products (GELU's x3 * C1, w * C2) became shift-and-add trees in LUTs, a stage longer each
#: (ActivationUnit.latency 71 -> 73: SILU / GELU + 2, measured on the RTL sequencer); then the vector sequencer's
#: lines were registered before its serializers (2026-12-07: every vector-sequencer op + 1), then its read data
#: as they come from the block RAMs (+ 1 again, but ROPE: a 64-line ROPE's RTL cycles did not move, a 2-line
#: one's + 1, measured on the fast harness; the entry fits the long one), and the activation unit's clip took two stages (SILU / GELU + 1, through ActivationUnit.latency
#: 73 -> 74 below).
VECTOR_EXTRA_LATENCY: dict[str, int] = {"SILU": 73, "GELU": 73, "ROPE": 10, "SOFTMAX": 18, "RMSNORM": 13, "LAYERNORM": 14,
                                        "ADD": 10, "MUL": 10, "REQUANT": 10, "ARGMAX": 10, "QUANT": 5, "QUANT_SPLIT": 5}
#: ActivationUnit.latency the SILU / GELU entries above were measured at (the restoring divider's pipeline); a
#: configuration with another depth (``act_newton``: 57) moves them by the difference
ACT_LATENCY_CALIBRATED = 73


@cache
def _act_latency(newton: bool) -> int:
    from systolica.hw.activation import activation_latency

    return activation_latency(AccelConfig(act_newton=int(newton)))


#: Cycles more of QUANT and SOFTMAX where the row-pass sequencer cuts lines into beats on their way into its FIFO
#: (``cfg.rowpass_beats > 1``, hw/rowpass_sequencer.py ``_beat_feed``): measured on the fast harness (tiny, 2 lanes,
#: with and without one-lane units: 610 / 296 RTL cycles where the model had 609 / 295; the norms are exact
#: without it), not derived
ROWPASS_FEED_LATENCY = 1


def vector_extra_latency(cfg: AccelConfig, key: str) -> int:
    """:data:`VECTOR_EXTRA_LATENCY` of ``key`` on ``cfg``: SILU / GELU follow its activation unit's depth; QUANT and
    SOFTMAX pay :data:`ROWPASS_FEED_LATENCY` where the row-pass sequencer feeds beats."""
    extra = VECTOR_EXTRA_LATENCY.get(key, 0)
    if key in ("SILU", "GELU"):
        extra += _act_latency(bool(cfg.act_newton)) - ACT_LATENCY_CALIBRATED
    if key in ("QUANT", "QUANT_SPLIT", "SOFTMAX") and cfg.rowpass_beats > 1:
        extra += ROWPASS_FEED_LATENCY
    return extra


@dataclass(frozen=True)
class PerfParams:
    """Timing parameters of the performance model (cycles of the accelerator clock).

    The defaults are calibrated on the RTL top level behind the cocotb testbench's AxiRam
    (:mod:`systolica.sim.perf_validate`); :func:`systolica.sim.roofline.board_params` gives a board's.

    Attributes
    ----------
    rd_latency : int
        AXI read latency: address handshake to first data beat.  ~100 ns of DDR on a Zynq board
        (20-30 cycles at 200 MHz); a few cycles for the testbench's AxiRam.
    wr_latency : int
        Last write beat to the write response (B).
    ar_wait, aw_wait : int
        Cycles an address waits for ``ready`` (0: the subordinate accepts at once).
    outstanding : int
        Bursts in flight per DMA (``DmaReader``/``DmaWriter`` default 4).
    ar_gap : int
        Cycles from one address handshake to the next (2: ``arvalid``/``awvalid`` are registers).
    burst_min : int
        Fewest cycles a burst occupies the data channel (the subordinate's turnaround between bursts).
    store_tail : int
        Cycles from the last write response to the end of a STORE (the engine's ``busy`` -> done).
    beat_cycles : float
        Cycles per data beat; > 1 when the DRAM delivers less than the port's width each cycle.
    gemm : str
        ``"systolic"`` (the weight-stationary array behind ``hw/gemm_sequencer.py``, the RTL's GEMM) or
        ``"line_dot"`` (the earlier one-dot-product-a-cycle datapath, kept for comparison).
    weight_cols_per_cycle : int
        Weight columns (scratchpad lines) the systolic array takes per cycle (``P``).
    vector_latency : int
        Pipeline depth of the vector unit (fill + drain per instruction).
    attn_latency : int
        Fixed cycles per job of one ATTN tile (a job: up to ``attn_rows`` query rows through the tile together;
        the pipeline drains between K and V; the rescales follow the V lines, inside their drain: 52 -> 43 cycles,
        2026-12-06; and the first row's end, its new sum, shift and header: 43 + 11 = 54 since the rows' ends are
        one pipeline, 2026-12-06).
    attn_row_latency : int
        Fixed cycles per query row of one ATTN tile beyond the first row's end: its header beat in and its header
        line out (13 when each row's end waited for the row before: 2 since they are one pipeline).
    fetch_latency : int
        Extra cycles of instruction fetch beyond the read latency (prefetch FIFO, registers).
    token_latency : int
        Cycles from a token push to the consumer seeing it (the token queue's register).
    fetch_contention : bool
        Instruction fetch shares the load engine's read port with GEMM_STREAM's weight port 0
        (``hw/accelerator.py``): words fetched while a LOAD or a GEMM_STREAM runs stretch it by their beats.
    dram_bytes_per_cycle : float
        What the DRAM behind all ports delivers per cycle (the board's DRAM peak x efficiency / clock); 0 for
        no limit beyond the ports (the RTL harnesses).  GEMM_STREAM's ports together never read faster.
    """

    rd_latency: int = 2
    wr_latency: int = 2
    ar_wait: int = 0
    aw_wait: int = 0
    outstanding: int = 4
    ar_gap: int = 2
    burst_min: int = 1
    store_tail: int = 0
    beat_cycles: float = 1.0
    gemm: str = "systolic"
    weight_cols_per_cycle: int = 1
    vector_latency: int = 2
    attn_latency: int = 54
    attn_row_latency: int = 2
    fetch_latency: int = 0
    token_latency: int = 1
    fetch_contention: bool = True
    dram_bytes_per_cycle: float = 0.0

    def __post_init__(self) -> None:
        if self.gemm not in GEMM_DATAPATHS:
            raise ValueError(f"gemm={self.gemm!r} must be one of {', '.join(GEMM_DATAPATHS)}")
        for k in ("rd_latency", "wr_latency", "ar_wait", "aw_wait", "ar_gap", "burst_min", "store_tail", "vector_latency", "attn_latency",
                  "attn_row_latency",
                  "fetch_latency", "token_latency"):
            if getattr(self, k) < 0:
                raise ValueError(f"{k}={getattr(self, k)} must be >= 0 cycles")
        if not self.dram_bytes_per_cycle >= 0:
            raise ValueError(f"dram_bytes_per_cycle={self.dram_bytes_per_cycle} must be >= 0 (0: no limit)")
        if self.outstanding < 1 or self.weight_cols_per_cycle < 1:
            raise ValueError(f"outstanding={self.outstanding} and weight_cols_per_cycle="
                             f"{self.weight_cols_per_cycle} must be >= 1")
        if not self.beat_cycles >= 1.0:
            raise ValueError(f"beat_cycles={self.beat_cycles} must be >= 1 (a port moves at most one beat a cycle)")

    def replace(self, **kw) -> PerfParams:
        return replace(self, **kw)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class OpCost:
    """What one instruction costs on its engine."""

    exec_cycles: int  # cycles in the EXEC state (>= 1)
    array_busy: int = 0  # cycles the array accepted operands (ARRAY_BUSY)
    rd_beats: int = 0  # DMA read beats (DMA_BEATS, without fetch)
    wr_beats: int = 0
    macs: int = 0
    pair_gain: int = 0  # config.wstream_pairs: cycles a GEMM_STREAM saves at most from lines read ahead
    # a LOAD (hw/load_engine.py: two in flight): its EXEC ends ``issue_cycles`` after its start, once its last burst
    # is asked for (0: at ``exec_cycles``), and the next word on the load engine may start then; its beats come
    # after the previous LOAD's, so it ends no sooner than ``tail`` cycles after that one's end
    issue_cycles: int = 0
    tail: int = 0


def line_bytes(cfg: AccelConfig, buf: int) -> int:
    """Bytes of one line of buffer ``buf`` (int8 scratchpad, int32 accumulator / vector buffer)."""
    return cfg.cols * (1 if buf == Buf.SPAD else 4)


@lru_cache(maxsize=1 << 16)
def _dma_cost(cfg: AccelConfig, p: PerfParams, op: str, buf: int, dram4k: int, stride: int, rows: int,
              lines: int) -> OpCost:
    lb = line_bytes(cfg, buf)
    beats = lines * lb // cfg.dma_bytes if rows and lines else 0
    bursts = transfer_bursts(cfg, dram4k, stride, rows, beats) if beats else []
    total = sum(bursts)
    if op == "LOAD":
        if cfg.load_ports > 1:  # striped (hw/striped_reader.py): a port takes a burst while its FIFO has room for it
            from systolica.hw.striped_reader import FIFO_BURSTS
            p = replace(p, outstanding=cfg.load_ports * FIFO_BURSTS)
        cycles, issue, lead = dma_read_timing(bursts, p)
        if not bursts:
            return OpCost(cycles)
        return OpCost(cycles, rd_beats=total, issue_cycles=min(cycles, issue), tail=cycles - lead + LOAD_TAIL_CYCLES)
    return OpCost(dma_write_cycles(bursts, p), wr_beats=total)


def array_latency(cfg: AccelConfig) -> int:
    """Cycles from an activation beat entering the systolic array to its output line (hw/systolic_array.py's
    ``SystolicArray.latency``): the input registers (after the handshake, then the activation's), a cycle a row, the product register; with one MAC a DSP
    the ``cols - 1`` cycles of the activation's pass along a row (de-skewed at the bottom), with two MACs a
    DSP (a broadcast row) one, the fabric sum of the DSP chains."""
    return cfg.rows + 3 + (cfg.cols - 1 if cfg.macs_per_dsp == 1 else 1)


#: stages of the accumulator's read-add-write (``hw/accumulator.py``: the read data registered, the add, the
#: write of the registered sum): a GEMM's last line is written this many cycles after it leaves the array
ACC_STAGES = 3


def _gemm(cfg: AccelConfig, p: PerfParams, m: int, k: int, n: int, acc: int = 0) -> OpCost:
    cols, rows = cfg.cols, cfg.rows
    macs = m * k * cols * n * cols
    if m == 0 or n == 0:
        return OpCost(1)
    if p.gemm == "line_dot":
        # per output line: cols*k dot products (one a cycle), DRAIN, READ_ACC, WAIT_ACC, WRITE
        per_line = cols * k + 4 if k else 5
        return OpCost(m * n * per_line + 1, array_busy=m * n * cols * k, macs=macs)
    # weight-stationary (hw/gemm_sequencer.py): K in tiles of `rows` elements, N in tiles of `cols` outputs; a
    # tile's weights stream in at P lines a cycle into the shadow registers while the active ones take the m
    # activation rows of the previous tile; the last tile needs no next weights.  Then the array's pipeline and
    # the accumulator's read-add-write (calibrated on the RTL: 5 more cycles, one the prefetched lines' register, and
    # the accumulator's stages).
    if k == 0:
        # acc=0 writes a zero line a cycle through the accumulator's stages (the last ACC_STAGES cycles later); acc=1
        # leaves them
        return OpCost((0 if acc else m * n + ACC_STAGES) + 1)
    tiles = n * -(-k * cols // rows)
    load = -(-cols // p.weight_cols_per_cycle)
    cycles = load + (tiles - 1) * max(m, load) + m + array_latency(cfg) + 5 + ACC_STAGES
    return OpCost(cycles, array_busy=tiles * m, macs=macs)


#: GEMM_STREAM's fixed cycles beyond the DRAM read latency (``rd_latency``) and the tiles: the weight ports'
#: first request, the line FIFO and P-line join (``hw/weight_stream.py``), the array's drain into the accumulator.
#: First order, RTL CALIBRATION PENDING: this constant makes COMPUTE_BUSY exact for single GEMM_STREAMs
#: (m 1..16, k 1..16, n 1..4) on the fast RTL harness of "tiny" with 1 and 2 ports and rd_latency 2, where the
#: DRAM keeps up; latency, other configs and contention with LOADs are not fitted (RTL-vs-model tests to come).
WSTREAM_STARTUP = 4 + ACC_STAGES  # (+1: GEMM's prefetched activation line is registered)
#: an int4 GEMM_STREAM's group lines pass the group scaler (``hw/group_scaler.py``: s0 .. s5) before the accumulator
GROUP_SCALER_CYCLES = 5


def _stream_share(cfg: AccelConfig, k: int, wfmt: int) -> float:
    """Bytes an int4 stream reads per byte of the int8 stream of the same tiles (:mod:`systolica.wstream4`:
    half a byte a code plus the group scales, each section padded to whole lines); 1.0 for int8."""
    from systolica import wstream, wstream4

    if wfmt not in (1, 2) or not wstream4.whole_groups(k, cfg):  # int8, or a word that faults ILLEGAL_FIELD
        return 1.0
    return wstream4.port_row_bytes(k, wfmt, cfg) / wstream.port_row_bytes(k, cfg)


def _gemm_stream(cfg: AccelConfig, p: PerfParams, m: int, k: int, n: int, acc: int = 0, wfmt: int = 0) -> OpCost:
    """GEMM_STREAM, first order (RTL CALIBRATION PENDING: see :data:`WSTREAM_STARTUP`).

    ``wfmt`` Q4_0 / Q4_1 (4-bit codes with group scales, ``hw/group_scaler.py``): the weight ports deliver the
    same bytes a cycle, now carrying two weights a byte plus the scales (:func:`_stream_share` of the int8
    bytes), and the array takes a code beat (``2P`` columns) a cycle, so a tile's load time shrinks by that
    share; the group scaler adds :data:`GROUP_SCALER_CYCLES` of latency after the array.

    The systolic GEMM's tile schedule (:func:`_gemm`) with each tile's weights coming from the weight ports: a
    ``cols x cols`` tile is ``cols`` weight lines of ``bpl = cols / dma_bytes`` beats, ``cols / P`` of them per
    port, so the ports fill it in ``cols * bpl / P`` cycles when the DRAM keeps up with all ``P`` ports
    (``beat_cycles == 1``; the board parameters do not say how far beyond one port it keeps up) and in
    ``cols * bpl * beat_cycles`` when it does not keep up with even one (then more ports add nothing).  Tiles
    overlap their weights with the previous tile's ``m`` rows, so a tile costs ``max(load, m)``; then the
    DRAM latency and :data:`WSTREAM_STARTUP` once per instruction.  Not modelled yet: LOADs and instruction
    fetch sharing the DRAM with the weight ports while both run, a port with too few bursts in flight for the
    DRAM latency (``config.wstream_latency`` below it: tiny_d4 at latency 40 with 4 bursts of 16 beats was 8 %
    slower on the RTL, with 16 the model's -3.6 %), burst and page boundaries (``w`` is not in
    :data:`COST_FIELDS`), and the ``line_dot`` datapath (GEMM_STREAM is costed as on the systolic array)."""
    cols, rows, P = cfg.cols, cfg.rows, cfg.dma_ports
    macs = m * k * cols * n * cols
    if m == 0 or n == 0:
        return OpCost(1)
    if k == 0:
        return OpCost((0 if acc else m * n + ACC_STAGES) + 1)  # no weights to read: as GEMM
    bpl = max(1, cols // cfg.dma_bytes)  # beats of one weight line (a narrower line still takes a beat)
    share = _stream_share(cfg, k, wfmt)  # int4: fewer bytes (and beats) per tile, same bytes a cycle (a model)
    per_tile = share * (cols * bpl * p.beat_cycles if p.beat_cycles > 1 else cols * bpl / P)
    if p.dram_bytes_per_cycle > 0:  # all ports share the board's DRAM: a tile's cols x cols bytes at its rate
        per_tile = max(per_tile, share * cols * cols / p.dram_bytes_per_cycle)
    tiles = n * -(-k * cols // rows)
    load = max(1.0, per_tile * n * k / tiles)  # an array tile's share of the stream (square: per_tile), fractional
    # at a DRAM rate that is not a whole number of cycles a tile: rounded once for the whole stream, not per tile
    cycles = rd_round_trip(p) + WSTREAM_STARTUP + math.ceil(load + (tiles - 1) * max(m, load)) + m + array_latency(cfg)
    cycles += GROUP_SCALER_CYCLES if share != 1.0 else 0
    # config.wstream_pairs: a tile whose lines wait in the FIFOs takes the array's 2P columns a cycle (an int8
    # stream), max(m, cols * bpl / 2P) cycles instead of max(m, load); the lines read ahead decide how many do
    gain = 0
    if cfg.wstream_pairs and share == 1.0:
        gain = max(0, math.floor(tiles * (max(m, load) - max(m, cols * bpl / (2 * P)))))
    return OpCost(cycles, array_busy=tiles * m, rd_beats=math.ceil(share * n * k * cols * bpl), macs=macs,
                  pair_gain=gain)


def _vector(cfg: AccelConfig, p: PerfParams, ins: Instr) -> OpCost:
    f = ins.fields
    key = "QUANT_SPLIT" if ins.op == "QUANT" and f.get("split") else ins.op
    passes, per_row = VECTOR_PASSES[key]
    cols = cfg.cols
    rows = f.get("rows", 0)
    if ins.op in ("RMSNORM", "LAYERNORM", "SOFTMAX", "ARGMAX"):
        lines = -(-f["n"] // cols)
    elif ins.op == "ROPE":
        lines = f["heads"] * f["hd"]
    else:
        lines = f["lines"]
    if rows == 0 or (lines == 0 and ins.op != "QUANT"):
        return OpCost(1)
    # one beat a cycle: of line_width lanes, of nonlinear_width lanes on the activation unit, of rowpass_width on the
    # norm and softmax units
    per_line = (cfg.rowpass_beats if ins.op in ROWPASS_OPS else cfg.nonlinear_beats if ins.op in NONLINEAR_OPS
                else cfg.line_beats)
    if ins.op == "ROPE":  # cos and sin lines through one vector-buffer port: at least 2 cycles a line
        per_line = max(per_line, 2)
    beats = passes * rows * lines * per_line
    if ins.op == "LAYERNORM" and per_line < 2:
        # the output pass reads x and gamma, then beta through port b: a line every 2 cycles into the row-pass
        # FIFO (4 lines and a beat register, filled ahead during the row statistics), drained at one a cycle
        beats += rows * max(0, lines - ROWPASS_FIFO_LINES)
    elif ins.op == "LAYERNORM":
        # cut into beats on the way in: a line every per_line + 1 cycles (beta a cycle after x and gamma), one
        # cycle short a line, less the beats read ahead into the FIFO during the row statistics
        beats += rows * max(0, lines - ROWPASS_FEED_AHEAD)
    return OpCost(beats + rows * per_row + p.vector_latency + vector_extra_latency(cfg, key))


#: Cycles of an ATTN over an empty tile (t = 0) beyond its rows' lines (the sequencer's start and drain; RTL)
ATTN_BYPASS_LATENCY = 7


def _attn(cfg: AccelConfig, p: PerfParams, ins: Instr) -> OpCost:
    f = ins.fields
    nq, hd, t, cols = f["nq"], f["hd"], f["t"], cfg.cols
    if nq == 0 or hd == 0:
        return OpCost(1)
    # (hw/attn_sequencer.py, hw/attention_unit.py) per job of up to attn_rows query rows: K and V at one line a
    # cycle (2 * t * hd) and the pipeline drains (attn_latency); per row: the header and the hd query lines, the
    # hd state lines in and out (line_beats cycles each: the state-line datapath has line_width lanes) and its
    # header line out (attn_row_latency); the rows' new sums and shifts are one pipeline, a row a cycle, whose
    # first row's end is in the job's attn_latency (hw/attn_row_end.py).  A tile with t = 0 bypasses the unit: each row's state line and hd output lines
    # are copied through at a line a cycle (calibrated on the RTL)
    if t == 0:
        return OpCost(nq * (1 + hd) + ATTN_BYPASS_LATENCY, array_busy=0, macs=0)
    R = cfg.attn_rows
    jobs = -(-nq // R)
    # + 5: the sequencer's start, its read's register, the beat's register before its FIFO, the FIFO's output
    # register and its output register
    cyc = jobs * (2 * t * hd + p.attn_latency) + nq * (hd + hd * cfg.line_beats + p.attn_row_latency) + 5
    if cfg.attn_pv_shared and R > 1:
        # the job's n rows take turns on attn_pv_sets exp2 pipelines and sets of p.V lanes, a slot of S rows at a
        # time: a V line every ceil(n / S) cycles, not every cycle (that many - 1 more a line), the rescales of
        # state A one slot a cycle, and the last line's slots (hw/attention_unit.py; calibrated on the RTL:
        # sim/perf_validate.py, attn_nq*)
        S = cfg.attn_pv_sets
        rows = [min(R, nq - j * R) for j in range(jobs)]
        cyc += sum((-(-n // S) - 1) * (t * hd + 1) + 2 for n in rows)
    return OpCost(cyc, array_busy=0, macs=2 * nq * t * hd * cols)


def _attn_out(cfg: AccelConfig, p: PerfParams, nq: int, hd: int) -> OpCost:
    """ATTN_OUT: per row the ``l`` beat, one reciprocal (35 cycles: registered), then the ``hd`` lines of ``o`` scaled
    (``line_beats`` cycles each on the state-line datapath), the last out of its 9 stages before the next row."""
    return OpCost(nq * (hd * cfg.line_beats + RECIP_CYCLES + 12) + 5) if nq and hd else OpCost(1)


#: The instruction fields :func:`op_cost` reads (of ``dram`` only the offset in its 4 KiB page, where bursts split):
#: buffer addresses, shifts, epsilons, masks and flags do not change what an instruction costs.
COST_FIELDS = frozenset({"buf", "dram", "stride", "rows", "lines", "m", "k", "n", "acc", "split", "heads", "hd", "nq", "t",
                         "wfmt"})


def cost_signature(ins: Instr) -> tuple:
    """What :func:`op_cost` depends on in ``ins``: instructions with equal signatures cost the same on every
    configuration and :class:`PerfParams` (the performance model prices each signature once)."""
    return (ins.op, *((v & 4095 if k == "dram" else v) for k, v in ins.fields.items() if k in COST_FIELDS))


#: cycles between a compute instruction's token handshake and its sequencer's start (a register:
#: hw/compute_engine.py), on top of every compute op's own cost
COMPUTE_START_CYCLES = 1


def op_cost(cfg: AccelConfig, p: PerfParams, ins: Instr) -> OpCost:
    """The cost of one decoded instruction on accelerator ``cfg`` with timing ``p`` (it reads only the
    fields in :data:`COST_FIELDS`)."""
    c = _op_cost(cfg, p, ins)
    if ins.op in ("LOAD", "STORE"):
        return c
    return replace(c, exec_cycles=c.exec_cycles + COMPUTE_START_CYCLES)


def _op_cost(cfg: AccelConfig, p: PerfParams, ins: Instr) -> OpCost:
    op = ins.op
    f = ins.fields
    if op in ("LOAD", "STORE"):
        return _dma_cost(cfg, p, op, f["buf"], f["dram"] & 4095, f["stride"], f["rows"], f["lines"])
    if op == "GEMM":
        return _gemm(cfg, p, f["m"], f["k"], f["n"], f["acc"])
    if op == "GEMM_STREAM":
        return _gemm_stream(cfg, p, f["m"], f["k"], f["n"], f["acc"], f.get("wfmt", 0))
    if op in VECTOR_PASSES:
        return _vector(cfg, p, ins)
    if op == "ATTN":
        return _attn(cfg, p, ins)
    if op == "ATTN_OUT":
        return _attn_out(cfg, p, f["nq"], f["hd"])
    return OpCost(1)  # NOP, FINISH
