"""Accelerator configuration: the one description of an accelerator instance.

Everything that depends on the shape of the hardware (the Amaranth generators,
the compiler's tiling, the golden simulator's buffer sizes, the driver's checks)
reads it from an :class:`AccelConfig`.  Its :meth:`AccelConfig.hash32` is burnt
into the hardware's ID register and stamped into every compiled program, so a
program can never run on hardware of another shape.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 board images
    import tomli as tomllib

__all__ = ["AccelConfig", "ConfigError", "PRESETS", "preset", "load_config", "ATTN_HD_MAX"]

#: the largest ``hd`` (head_dim in lines) of ATTN / ATTN_OUT: their 6-bit field (systolica/isa.py)
ATTN_HD_MAX = 63


class ConfigError(ValueError):
    """An accelerator configuration that cannot be built, with the reason."""


def _pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


def _burst_lines(max_burst: int, dma_bytes: int, cols: int) -> int:
    """Lines of ``cols`` bytes one burst of ``max_burst`` beats carries (at most a 4 KiB page; at least one line)."""
    return max(1, min(max_burst, 4096 // dma_bytes) * dma_bytes // cols)


@dataclass(frozen=True)
class AccelConfig:
    """Shape of one accelerator instance.

    Buffers are addressed in *lines*.  A scratchpad line holds ``cols`` int8
    elements, an accumulator or vector-buffer line ``cols`` int32 elements, so a
    line is exactly what one row of the systolic array consumes or produces in
    one cycle.  Instruction address fields are 16 bits wide, which bounds every
    buffer at 65536 lines.
    """

    name: str = "default"
    rows: int = 8  # systolic array rows R (reduction depth per pass)
    cols: int = 8  # systolic array columns C (= lanes of every buffer line)
    in_bits: int = 8  # operand width: int8 activations and weights
    acc_bits: int = 32  # accumulator width: int32
    spad_kib: int = 128  # int8 scratchpad: activations, weight tiles, KV tiles
    acc_kib: int = 64  # int32 accumulator buffer: matmul results
    vbuf_kib: int = 128  # int32 vector buffer: residual stream, norms, attention state (a 135M model's
    # SwiGLU row is 1536 words: 128 KiB holds a prefill chunk of several tokens)
    dma_bits: int = 64  # data width of one AXI master port
    dma_ports: int = 1  # number of AXI master ports to DRAM
    max_burst: int = 16  # AXI burst length in beats (AXI4 allows up to 256)
    queue_depth: int = 8  # depth of each dependency-token queue between engines
    cmd_depth: int = 16  # depth of each engine's instruction queue
    clock_mhz: float = 100.0  # target clock of the accelerator
    dram_bytes: int = 1 << 29  # DRAM window the accelerator may address (bytes)
    line_lanes: int = 0  # lanes L of the line datapath (vector/activation/norm/quant/softmax units): a
    # cols-wide buffer line goes through it in cols / L beats; 0 means cols (one line a cycle)
    nonlinear_lanes: int = 0  # lanes N of the activation, norm and softmax units (SILU/GELU, RMSNORM/LAYERNORM,
    # SOFTMAX: the units with wide multipliers, exp tables and dividers per lane): a line goes through them in
    # cols / N beats; 0 means line_width.  A divisor of line_width.
    rowpass_lanes: int = 0  # lanes of the row-pass sequencer's norm and softmax units (RMSNORM / LAYERNORM, SOFTMAX)
    # when they should differ from the activation unit's: a norm lane is a few multipliers, an activation lane
    # exp tables and a quotient, so a part may give the norms (a prefill's dependent chain) more lanes than
    # SILU / GELU; 0 means nonlinear_lanes' width.  A divisor of line_width.
    macs_per_dsp: int = 1  # int8 MACs per DSP multiplier of the systolic array: 2 packs the two products of
    # horizontally adjacent PEs (same broadcast activation) into one 8 x 25-bit multiply (half the DSPs; the
    # column adds then go to fabric carry chains)
    q4_groups: int = 64  # 4-bit weights (GEMM_STREAM Q4_0 / Q4_1): groups of 32 along K whose scales the array
    # holds (a matrix's K may be at most 32 * q4_groups); 0: no 4-bit datapath (its GEMM_STREAMs are ILLEGAL_FIELD)
    attn_rows: int = 1  # query rows the attention unit takes through one KV tile together (parallel dot
    # products): the rows of a GQA group share each K and V line read; at most line_width (each row's score
    # scaling uses one lane multiplier of the state-line datapath)
    attn_pv_shared: int = 0  # 1: the query rows of a job share one set of p * v lanes (cols of them): the V phase takes
    # n cycles a V line for a job of n rows (K still once for all of them), so a row costs its K-side products, score
    # buffer and exp2 pipeline, not a copy of the lanes' p * v products, shifts and 56-bit sums (~9.6k LUT a row at
    # 16 lanes on xcup, docs/boards.md); 0: a copy of the lanes per row, V at one line a cycle
    softmax_unit: int = 1  # 1: the row-pass sequencer has a softmax unit (the SOFTMAX line op); 0: it has none and
    # SOFTMAX is ILLEGAL_OPCODE on this configuration -- the compiler emits no SOFTMAX (attention runs ATTN /
    # ATTN_OUT with its own exp2), so the board presets leave out its nonlinear_lanes lanes of exp tables,
    # reciprocal and products (5.2k LUT and 40 DSP at kv260's 4 lanes on xcup)
    attn_pv_sets: int = 1  # with attn_pv_shared: the sets of p * v lanes (and exp2 pipelines) the rows of a job take
    # turns on: a V line stays ceil(n / sets) cycles for a job of n rows (rows s, s + sets, ... on set s); at most
    # attn_rows
    array_lut_muls: int = 0  # 1: the systolic array's int8 products as shift-and-add in LUTs, not multipliers -- for
    # parts whose few multipliers sit far from the logic around them (ECP5: 141 of the 85F's 156 MULT18X18D, spread
    # over the die, put the array's products ~100 tiles from their registers); 0: one multiplier a PE
    dsp_muls: int = 0  # 1: the products that are otherwise shift-and-add in LUTs go on DSP multipliers -- the
    # attention unit's p * v (29 x 8 bits, one a lane and row: p's low 24 bits on one DSP, the top 5 in logic) and
    # the activation unit's GELU constants (x3 * C1, w * C2: four 18 x 18 pieces each); 0: in LUTs, for parts whose
    # multipliers are scarce (ECP5's 156 MULT18X18D).  On Xilinx parts with DSPs to spare, 1 saves ~250 LUT per
    # attention lane and ~1,000 per activation lane
    act_newton: int = 0  # 1: the activation unit's sigmoid quotient floor(2**60 / d) by a seeded Newton step pair on
    # seven 18 x 18 multiplier pieces a lane (numerics_nonlinear.recip_seeded; 15 stages); 0: a restoring divider of
    # 31 stages in LUTs (~1,700 LUT a lane more on xcup), for parts whose multipliers are scarce.  The same bits either way
    attn_beside: int = 0  # 1: a GEMM_STREAM without pushes runs on while the compute engine goes on with the ATTN and
    # ATTN_OUT behind it (the attention unit reads its K / V / query lines through a third copy of the scratchpad,
    # its exponent lines through the "w" copy a stream does not use; the two share no buffer they write), so a
    # decode step streams weights during attention; 0: one compute instruction at a time
    load_ports: int = 1  # read ports a LOAD's bursts are striped over (1, or dma_ports): burst b through port b mod
    # load_ports, each port's data through a FIFO of two bursts (hw/striped_reader.py), so that a LOAD beside a
    # GEMM_STREAM (decode's KV pages) takes a load_ports-th of each weight port's bandwidth, not one port's all
    attn_head_lines: int = 0  # largest head_dim in lines (head_dim / cols) that ATTN / ATTN_OUT take (a larger
    # ``hd`` is ILLEGAL_FIELD): the attention unit's query and p * V memories are that deep; 0: the ISA's 63.  16
    # at 8 columns takes head_dim 128 (llama-family) in ECP5 LUT-RAM a lane one TRELLIS_DPR16X4 deep instead of 4
    wstream_ahead: int = 0  # > 0: a GEMM_STREAM's weight ports start when it is dispatched, not when it executes (once
    # the ports are done with the stream before and every compute instruction before it has popped its tokens), so
    # the DRAM latency hides behind the line ops before it; each port's line FIFO is this deep (block RAM) and, until
    # its stream executes, takes only the bursts it has room for (a LOAD behind them on the same port is never held
    # up).  At least two bursts of lines; 0: the ports start with the instruction (a FIFO of 32 lines)
    wstream_pairs: int = 0  # 1: each port's FIFO is two (even and odd lines) and the array takes an int8 stream's
    # two beats a cycle when both are there, twice the ports' rate: lines the ports read ahead while the line ops
    # before a stream run are made up as it executes, so the ports stay busy through those (needs wstream_ahead,
    # whose depth is then what they can read ahead, and the 4-bit datapath's 2P-column array); 0: a beat a cycle
    wstream_latency: int = 256  # cycles of DRAM read latency each weight port keeps enough bursts in flight to hide
    # (hw/weight_stream.py stream_outstanding: ceil(latency / burst) + 2, 3..16).  More is not free: a port answers in
    # order, so a LOAD's burst on it (a KV page beside the stream, striped over the same ports) waits behind every
    # weight beat in flight there.  Size it for the board's DRAM, not beyond (docs/hardware.md); below the latency a
    # run sees, the ports fall behind, which the performance model does not know

    # ----------------------------------------------------------------- sizes
    @property
    def lanes(self) -> int:
        """Elements per buffer line (one array row's worth)."""
        return self.cols

    @property
    def burst_lines(self) -> int:
        """Scratchpad lines one weight-port burst carries (``max_burst`` beats, at most a 4 KiB page; at least one line)."""
        return _burst_lines(self.max_burst, self.dma_bytes, self.cols)

    @property
    def line_width(self) -> int:
        """Lanes of the line units' datapath: ``line_lanes``, or ``cols`` when that is 0."""
        return self.line_lanes or self.cols

    @property
    def line_beats(self) -> int:
        """Beats (cycles at full rate) the line units take per ``cols``-wide buffer line."""
        return self.cols // self.line_width

    @property
    def nonlinear_width(self) -> int:
        """Lanes of the activation, norm and softmax units: ``nonlinear_lanes``, or ``line_width`` when 0."""
        return self.nonlinear_lanes or self.line_width

    @property
    def rowpass_width(self) -> int:
        """Lanes of the norm and softmax units: ``rowpass_lanes``, or ``nonlinear_width`` when 0."""
        return self.rowpass_lanes or self.nonlinear_width

    @property
    def rowpass_beats(self) -> int:
        """Beats (cycles at full rate) the norm and softmax units take per buffer line."""
        return self.cols // self.rowpass_width

    @property
    def attn_max_lines(self) -> int:
        """Largest ATTN / ATTN_OUT ``hd`` (head_dim in lines): ``attn_head_lines``, or the ISA field's 63 when 0."""
        return self.attn_head_lines or ATTN_HD_MAX

    @property
    def nonlinear_beats(self) -> int:
        """Beats (cycles at full rate) the activation, norm and softmax units take per buffer line."""
        return self.cols // self.nonlinear_width

    def reshaped(self, rows: int, cols: int, **changes) -> AccelConfig:
        """This config with an array of ``rows`` x ``cols``, the line datapath scaled with it.

        A shape sweep keeps the line units' beats per line (``line_beats``), so their share of the
        hardware stays what the base config chose: ``line_lanes`` becomes ``cols / line_beats``, at
        least 2 (ROPE pairs lanes) and a divisor of ``cols``; full width stays full width.
        """
        lanes = 0
        if self.line_lanes and self.line_lanes != self.cols:
            lanes = max(2, cols // self.line_beats)
            while lanes < cols and (cols % lanes or lanes % 2):
                lanes += 1
            lanes = 0 if lanes >= cols else lanes
        width = lanes or cols
        def share(n: int, of: int, base: int) -> int:  # n lanes of a datapath of `of`: the same share of `base`
            if not n or n == of:
                return 0
            k = max(1, base // (of // n))
            while base % k:
                k -= 1
            return 0 if k >= base else k

        # the nonlinear (and row-pass) units keep their share of the line datapath (line_width / nonlinear_width)
        nl = share(self.nonlinear_lanes, self.line_width, width)
        changes.setdefault("rowpass_lanes", share(self.rowpass_lanes, self.line_width, width))
        changes.setdefault("attn_rows", min(self.attn_rows, width, 8))  # each row needs a lane multiplier
        changes.setdefault("attn_pv_sets", min(self.attn_pv_sets, max(1, changes["attn_rows"])))
        if self.wstream_ahead and "wstream_ahead" not in changes:  # still at least two bursts of the new lines
            bursts = 2 * _burst_lines(self.max_burst, self.dma_bytes, cols)
            changes["wstream_ahead"] = max(self.wstream_ahead, 1 << (bursts - 1).bit_length())
        if self.wstream_pairs and "wstream_pairs" not in changes:  # only where the array still takes 2P columns
            changes["wstream_pairs"] = int(cols % (2 * self.dma_ports) == 0 and cols <= 32)
        return self.replace(rows=rows, cols=cols, line_lanes=lanes, nonlinear_lanes=nl, **changes)

    @property
    def spad_lines(self) -> int:
        return self.spad_kib * 1024 // self.cols

    @property
    def acc_lines(self) -> int:
        return self.acc_kib * 1024 // (self.cols * 4)

    @property
    def vbuf_lines(self) -> int:
        return self.vbuf_kib * 1024 // (self.cols * 4)

    @property
    def dma_bytes(self) -> int:
        """Bytes one AXI port moves per beat."""
        return self.dma_bits // 8

    @property
    def peak_macs_per_cycle(self) -> int:
        return self.rows * self.cols

    @property
    def peak_dram_bytes_per_cycle(self) -> int:
        return self.dma_bytes * self.dma_ports

    # ------------------------------------------------------------ validation
    def __post_init__(self) -> None:
        problems = list(self._problems())
        if problems:
            raise ConfigError(f"invalid accelerator config {self.name!r}: " + "; ".join(problems))

    def _problems(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "name":
                if not isinstance(v, str) or not v:
                    yield "name must be a non-empty string"
                continue
            want = float if f.name == "clock_mhz" else int
            if isinstance(v, bool) or not isinstance(v, (int, float) if want is float else int):
                yield f"{f.name}={v!r} must be {want.__name__}"
                return
        for k in ("rows", "cols"):
            v = getattr(self, k)
            if not 2 <= v <= 64:
                yield f"{k}={v} must be in 2..64 (an array edge below 2 is not systolic; above 64 no FPGA has the DSPs)"
        if self.line_lanes and not (self.line_lanes >= 2 and self.line_lanes % 2 == 0
                                    and self.cols % self.line_lanes == 0):
            yield (f"line_lanes={self.line_lanes} must be 0 (= cols) or an even number >= 2 that divides "
                   f"cols={self.cols} (ROPE rotates pairs of lanes; a line is cut into cols / line_lanes beats)")
        if self.nonlinear_lanes and not (self.nonlinear_lanes >= 1 and self.line_width % self.nonlinear_lanes == 0):
            yield (f"nonlinear_lanes={self.nonlinear_lanes} must be 0 (= line_width) or a divisor of "
                   f"line_width={self.line_width} (the activation, norm and softmax units cut a beat into sub-beats)")
        if self.rowpass_lanes and not (self.rowpass_lanes >= 1 and self.line_width % self.rowpass_lanes == 0):
            yield (f"rowpass_lanes={self.rowpass_lanes} must be 0 (= nonlinear width) or a divisor of "
                   f"line_width={self.line_width} (the row-pass sequencer cuts its lines into beats of that many lanes)")
        if self.macs_per_dsp not in (1, 2) or (self.macs_per_dsp == 2 and self.cols % 2):
            yield (f"macs_per_dsp={self.macs_per_dsp} must be 1, or 2 with an even cols (two adjacent columns "
                   f"share one multiplier); cols={self.cols}")
        if not (isinstance(self.attn_rows, int) and 1 <= self.attn_rows <= min(8, self.line_width)):
            yield (f"attn_rows={self.attn_rows} must be in 1..min(8, line_width={self.line_width}) (each query row "
                   f"of a tile scales its scores on one lane multiplier of the attention unit's state-line datapath)")
        if not 1 <= self.attn_pv_sets <= max(1, self.attn_rows) or (self.attn_pv_sets > 1 and not self.attn_pv_shared):
            yield (f"attn_pv_sets={self.attn_pv_sets} must be 1, or with attn_pv_shared = 1 at most attn_rows="
                   f"{self.attn_rows} (the sets of p * v lanes the rows of a job take turns on)")
        if self.softmax_unit not in (0, 1):
            yield f"softmax_unit={self.softmax_unit} must be 0 (no softmax unit: SOFTMAX is an illegal opcode) or 1"
        if self.attn_pv_shared not in (0, 1):
            yield (f"attn_pv_shared={self.attn_pv_shared} must be 0 (a copy of the p * v lanes per query row) or 1 "
                   f"(the rows share them: V at n cycles a line)")
        if self.array_lut_muls not in (0, 1) or (self.array_lut_muls and self.macs_per_dsp != 1):
            yield (f"array_lut_muls={self.array_lut_muls} must be 0 (one multiplier a PE) or 1 (products in LUTs, "
                   f"with macs_per_dsp=1; it is {self.macs_per_dsp})")
        if self.dsp_muls not in (0, 1):
            yield f"dsp_muls={self.dsp_muls} must be 0 (narrow and constant products in LUTs) or 1 (on DSP multipliers)"
        if self.attn_beside not in (0, 1):
            yield (f"attn_beside={self.attn_beside} must be 0 (one compute instruction at a time) or 1 (ATTN / ATTN_OUT "
                   f"beside a GEMM_STREAM, on a scratchpad copy of their own)")
        if self.load_ports not in (1, self.dma_ports):
            yield (f"load_ports={self.load_ports} must be 1 (LOAD through gmem0) or dma_ports={self.dma_ports} (its "
                   f"bursts striped over every read port)")
        if self.act_newton not in (0, 1):
            yield (f"act_newton={self.act_newton} must be 0 (the sigmoid's quotient by a restoring divider) or 1 (by a "
                   f"seeded Newton step pair on multipliers)")
        if self.wstream_ahead and not (_pow2(self.wstream_ahead) and self.wstream_ahead >= 2 * self.burst_lines):
            yield (f"wstream_ahead={self.wstream_ahead} must be 0 (the weight ports start with their GEMM_STREAM) or a "
                   f"power of two of at least two bursts, {2 * self.burst_lines} lines (max_burst={self.max_burst} beats "
                   f"of {self.dma_bytes} bytes, lines of cols={self.cols} bytes)")
        if self.wstream_pairs not in (0, 1):
            yield f"wstream_pairs={self.wstream_pairs} must be 0 (a weight beat a cycle) or 1 (two when the FIFOs have them)"
        elif self.wstream_pairs and not self.wstream_ahead:
            yield ("wstream_pairs=1 needs wstream_ahead > 0: the ports read ahead only with it, and only lines read "
                   "ahead can be taken two a cycle")
        elif self.wstream_pairs and (not self.q4_groups or self.cols % (2 * self.dma_ports) or self.cols > 32):
            yield (f"wstream_pairs=1 needs the 4-bit datapath's array of 2 x dma_ports = {2 * self.dma_ports} weight "
                   f"columns a beat: q4_groups > 0 and cols={self.cols} a multiple of {2 * self.dma_ports}, at most 32")
        if not (isinstance(self.wstream_latency, int) and 16 <= self.wstream_latency <= 4096):
            yield (f"wstream_latency={self.wstream_latency} must be a whole number of cycles in 16..4096 (the DRAM read "
                   f"latency the weight ports keep bursts in flight for; default 256)")
        if not (isinstance(self.attn_head_lines, int) and 0 <= self.attn_head_lines <= ATTN_HD_MAX):
            yield (f"attn_head_lines={self.attn_head_lines} must be 0 (the ISA's {ATTN_HD_MAX}) or 1..{ATTN_HD_MAX} "
                   f"(the largest head_dim in lines of {self.cols} elements that ATTN takes)")
        if not (self.q4_groups == 0 or (_pow2(self.q4_groups) and 2 <= self.q4_groups <= 1024)):
            yield (f"q4_groups={self.q4_groups} must be 0 (no 4-bit datapath) or a power of two in 2..1024 "
                   f"(groups of 32 weights along K whose scales the array holds)")
        if self.in_bits != 8:
            yield f"in_bits={self.in_bits}: only int8 operands are implemented"
        if self.acc_bits != 32:
            yield f"acc_bits={self.acc_bits}: only int32 accumulation is implemented"
        if self.dma_bits not in (32, 64, 128, 256, 512):
            yield f"dma_bits={self.dma_bits} must be one of 32, 64, 128, 256, 512 (AXI data widths)"
        if not 1 <= self.dma_ports <= 4:
            yield f"dma_ports={self.dma_ports} must be in 1..4 (Zynq has 4 HP ports)"
        if 1 <= self.dma_ports <= 4 and self.cols % self.dma_ports:
            yield (f"cols={self.cols} must be a multiple of dma_ports={self.dma_ports} (each weight port feeds "
                   f"cols / dma_ports columns of the array, see GEMM_STREAM)")
        if not (_pow2(self.max_burst) and self.max_burst <= 256):
            yield f"max_burst={self.max_burst} must be a power of two <= 256 (AXI4 burst length)"
        for k in ("queue_depth", "cmd_depth"):
            v = getattr(self, k)
            if not (_pow2(v) and 2 <= v <= 256):
                yield f"{k}={v} must be a power of two in 2..256 (FIFO depth)"
        for k, lines in (("spad_kib", "spad_lines"), ("acc_kib", "acc_lines"), ("vbuf_kib", "vbuf_lines")):
            v = getattr(self, k)
            if v <= 0:
                yield f"{k}={v} must be positive"
                continue
            n = getattr(self, lines)
            if n > 1 << 16:
                yield f"{k}={v} gives {n} lines; address fields are 16 bits, so at most 65536 lines"
            if n < 4 * self.rows:
                yield f"{k}={v} gives only {n} lines; need at least 4 x rows = {4 * self.rows} to double-buffer a tile"
        if not 0 < self.clock_mhz < 1e5:
            yield f"clock_mhz={self.clock_mhz} must be a positive number of MHz below 100000"
        if not (_pow2(self.dram_bytes) and (1 << 16) <= self.dram_bytes <= (1 << 32)):
            yield f"dram_bytes={self.dram_bytes} must be a power of two between 64 KiB and 4 GiB (32-bit DMA addresses)"

    # ------------------------------------------------------------------ hash
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def _canonical(self) -> bytes:
        d = self.to_dict()
        d.pop("name")  # the name is a label; two configs of equal shape are the same hardware
        if d["line_lanes"] in (0, d["cols"]):  # full-width line units: the hardware (and hash) of before the field
            d.pop("line_lanes")
        if d["macs_per_dsp"] == 1:  # one MAC per multiplier: the hardware (and hash) of before the field
            d.pop("macs_per_dsp")
        if d["nonlinear_lanes"] in (0, self.line_width):  # as wide as the line datapath: the hash of before the field
            d.pop("nonlinear_lanes")
        if d["rowpass_lanes"] in (0, self.nonlinear_width):  # the activation's lanes: the hash of before the field
            d.pop("rowpass_lanes")
        if d["attn_rows"] == 1:  # one query row per tile pass: the hardware (and hash) of before the field
            d.pop("attn_rows")
        if d["attn_pv_shared"] == 0:  # a copy of the p * v lanes per row: the hardware (and hash) of before the field
            d.pop("attn_pv_shared")
        if d["attn_pv_sets"] == 1:  # one set of shared lanes: the hardware (and hash) of before the field
            d.pop("attn_pv_sets")
        if d["softmax_unit"] == 1:  # with a softmax unit: the hardware (and hash) of before the field
            d.pop("softmax_unit")
        if d["dsp_muls"] == 0:  # those products in LUTs: the hardware (and hash) of before the field
            d.pop("dsp_muls")
        if d["array_lut_muls"] == 0:  # the array's products on multipliers: the hardware (and hash) of before the field
            d.pop("array_lut_muls")
        if d["attn_beside"] == 0:  # one compute instruction at a time: the hardware (and hash) of before the field
            d.pop("attn_beside")
        if d["load_ports"] == 1:  # LOAD through gmem0 alone: the hardware (and hash) of before the field
            d.pop("load_ports")
        if d["act_newton"] == 0:  # the restoring divider: the hardware (and hash) of before the field
            d.pop("act_newton")
        if d["wstream_ahead"] == 0:  # the weight ports start with their instruction: the hardware (and hash) of before
            d.pop("wstream_ahead")
        if d["wstream_pairs"] == 0:  # a weight beat a cycle: the hardware (and hash) of before the field
            d.pop("wstream_pairs")
        if d["wstream_latency"] == 256:  # the weight ports' bursts in flight of before the field (and hash)
            d.pop("wstream_latency")
        if d["attn_head_lines"] in (0, ATTN_HD_MAX):  # the ISA's whole hd field: the hardware (and hash) of before it
            d.pop("attn_head_lines")
        d["clock_mhz"] = float(d["clock_mhz"])
        return json.dumps(d, sort_keys=True, separators=(",", ":")).encode()

    def hash_hex(self) -> str:
        """Full SHA-256 of the hardware-relevant fields."""
        return hashlib.sha256(self._canonical()).hexdigest()

    def hash32(self) -> int:
        """The 32-bit hash the hardware reports in its ID register."""
        return int(self.hash_hex()[:8], 16)

    # ------------------------------------------------------------------ TOML
    def to_toml(self) -> str:
        lines = ["# systolica accelerator configuration", "[accel]"]
        for f in fields(self):
            v = getattr(self, f.name)
            lines.append(f"{f.name} = {json.dumps(v)}")
        return "\n".join(lines) + "\n"

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_toml())

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, source: str = "config") -> AccelConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"{source}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        if "clock_mhz" in d and isinstance(d["clock_mhz"], int):
            d = {**d, "clock_mhz": float(d["clock_mhz"])}
        return cls(**d)

    @classmethod
    def from_toml(cls, text: str, *, source: str = "config") -> AccelConfig:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{source}: not valid TOML: {e}") from None
        table = data.get("accel", data)
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: [accel] must be a table")
        base = table.pop("preset", None)
        if base is not None:
            if not isinstance(base, str):
                raise ConfigError(f"{source}: preset = {base!r} must be a preset name ({', '.join(sorted(PRESETS))})")
            return cls.from_dict({**preset(base).to_dict(), **table}, source=source)
        return cls.from_dict(table, source=source)

    @classmethod
    def load(cls, path: str | Path) -> AccelConfig:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"config file {p} does not exist")
        if not p.is_file():
            raise ConfigError(f"config {p} is not a file")
        try:
            text = p.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(f"{p}: not UTF-8 text (byte {e.start}: {e.reason}); a config is a TOML file") from None
        return cls.from_toml(text, source=str(p))

    def replace(self, **changes: Any) -> AccelConfig:
        return dataclasses.replace(self, **changes)


PRESETS: dict[str, AccelConfig] = {
    # Small enough that a full-top-level Verilator build takes well under a minute.
    "tiny": AccelConfig(name="tiny", rows=4, cols=4, spad_kib=16, acc_kib=8, vbuf_kib=16,
                        dma_bits=32, dma_ports=1, max_burst=16, queue_depth=4, cmd_depth=8,
                        clock_mhz=100.0, dram_bytes=1 << 24),
    "default": AccelConfig(name="default"),
    # 16x16 with a 128-bit port: what a Zynq UltraScale+ HP port gives.
    "large": AccelConfig(name="large", rows=16, cols=16, spad_kib=256, acc_kib=128, vbuf_kib=128,
                         dma_bits=128, dma_ports=2, max_burst=64, queue_depth=8, cmd_depth=32,
                         clock_mhz=200.0, dram_bytes=1 << 31),
}


def preset(name: str) -> AccelConfig:
    """A named configuration (``tiny``, ``default``, ``large`` or a board preset)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"no preset named {name!r}; presets: {', '.join(sorted(PRESETS))}") from None


def load_config(spec: str | Path | None) -> AccelConfig:
    """A config from a preset name or a TOML path; ``None`` gives the default preset."""
    if spec is None:
        return PRESETS["default"]
    s = str(spec)
    if s in PRESETS:
        return PRESETS[s]
    if s.endswith(".toml") or Path(s).exists():
        return AccelConfig.load(s)
    raise ConfigError(f"{s!r} is neither a preset ({', '.join(sorted(PRESETS))}) nor a TOML file")
