"""GEMM_STREAM with 4-bit weights (wfmt Q4_0 / Q4_1) in the golden simulator: codes and group scales gathered
from the striped DRAM pages, bit-exact against numerics_int4 (stream_acc, and int4_group_gemm when gshift = 0)."""

from __future__ import annotations

import numpy as np
import pytest
from golden_harness import Harness
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from systolica import numerics_int4 as n4
from systolica import wstream, wstream4
from systolica.config import preset
from systolica.faults import Fault
from systolica.isa import WFmt, decode, encode, make
from systolica.sim.faults import SimFault

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _program(cfg, m, k, n, w, acc, fmt, gshift):
    c = cfg.cols
    return "\n".join([
        f"LOAD buf=SPAD sram=0 dram=0x0 rows={m} lines={k} stride={k * c}",
        f"LOAD buf=ACC sram=0 dram=0x1000 rows={m} lines={n} stride={n * c * 4} @push_next",
        f"GEMM_STREAM dst=0 a=0 w={w:#x} m={m} k={k} n={n} acc={int(acc)} wfmt={int(fmt)} gshift={gshift} "
        "@pop_prev @push_next",
        f"STORE buf=ACC sram=0 dram=0x3000 rows={m} lines={n} stride={n * c * 4} @pop_prev",
        "FINISH"])


def _weights(rng, rows, kc, fmt, scale_bits=16):
    codes = rng.integers(0, 16, (rows, kc)).astype(np.uint8)
    g = kc // n4.GROUP
    lim = 1 << (scale_bits - 1)
    D = rng.integers(-lim, lim, (rows, g))
    Mn = rng.integers(-lim, lim, (rows, g)) if fmt == WFmt.Q4_1 else None
    return codes, D, Mn


def test_isa_fields_round_trip():
    ins = make("GEMM_STREAM", dst=1, a=2, w=0x40, m=1, k=8, n=3, acc=1, wfmt=int(WFmt.Q4_1), gshift=15)
    back = decode(encode(ins))
    assert back.wfmt == 2 and back.gshift == 15 and back.k == 8 and back.spec.used_bits == 128


@pytest.mark.parametrize("name", ["tiny", "default", "large"])
@pytest.mark.parametrize("fmt", [WFmt.Q4_0, WFmt.Q4_1])
def test_layout_round_trips_and_counts_bytes(name, fmt):
    cfg = preset(name)
    c, n = cfg.cols, 3
    k = 64 // c
    rng = np.random.default_rng(1)
    codes, D, Mn = _weights(rng, n * c, k * c, fmt)
    st_ = wstream4.port_streams(codes, D, Mn, cfg)
    r = c // cfg.dma_ports
    g = k * c // n4.GROUP
    pad = lambda x: -(-x // c) * c  # noqa: E731
    assert st_.shape == (cfg.dma_ports, n * (pad(g * r * wstream4.scale_bytes(fmt)) + pad(k * r * c // 2)))
    win = np.zeros(wstream.port_span(st_.shape[1], cfg) + 2 * 4096, np.uint8)
    w = wstream.address(4096, 0, cfg)
    wstream.scatter(win, w, st_, cfg)
    got = wstream4.gather(win, w, n, k, fmt, cfg)
    assert np.array_equal(got[0], codes) and np.array_equal(got[1], D)
    assert (got[2] is None) if Mn is None else np.array_equal(got[2], Mn)
    # a Q4_1 stream is at most 0.625 bytes a weight plus under a line of padding per section and output line
    int8_bytes = wstream.port_bytes(n, k, cfg)
    assert st_.shape[1] <= int8_bytes * (0.625 if fmt == WFmt.Q4_1 else 0.5625) + 2 * n * c


@pytest.mark.parametrize("fmt", [WFmt.Q4_0, WFmt.Q4_1])
def test_stream_acc_with_no_shift_is_the_exact_group_gemm(fmt):
    rng = np.random.default_rng(2)
    codes, D, Mn = _weights(rng, 8, 128, fmt, scale_bits=12)
    a = rng.integers(-128, 128, (3, 128), dtype=np.int8)
    w = n4.Q4Weights(codes, np.ones(D.shape, np.float32), None if Mn is None else np.ones(D.shape, np.float32))
    exact = n4.int4_group_gemm(a, w, D, Mn)
    assert np.abs(exact).max() < 2**31
    assert np.array_equal(n4.stream_acc(a, codes, D, Mn, 0), exact.astype(np.int32))
    for gs in (0, 3, 15):  # the batched float32 form is the definition (group_terms), bit for bit
        ref = n4.rshift_round(n4.group_terms(a, codes, D, Mn), gs).sum(axis=2)
        assert np.array_equal(n4.stream_acc(a, codes, D, Mn, gs), ref.astype(np.int32))
    # a shift rounds each group: within G / 2 units of 2**gshift of the exact sum
    g = D.shape[1]
    got = n4.stream_acc(a, codes, D, Mn, 5).astype(np.int64)
    assert np.abs(got * 32 - exact).max() <= 32 * g / 2


@pytest.mark.parametrize("fmt", [WFmt.Q4_0, WFmt.Q4_1])
def test_chosen_gshift_never_wraps(fmt):
    """Full-range scales over K = 1,536 (SmolLM2's ffn_down) and the extreme activations: the sum of the rounded
    terms stays inside int32 with choose_gshift's shift, and one bit less could leave it."""
    rng = np.random.default_rng(3)
    codes, D, Mn = _weights(rng, 4, 1536, fmt)
    codes[0] = 15 if fmt == WFmt.Q4_1 else 0
    D[0] = -(1 << 15)
    if Mn is not None:
        Mn[0] = -(1 << 15)
    s = n4.choose_gshift(D, Mn)
    assert s > 0
    a = np.full((1, 1536), -128, np.int8)
    wide = n4.rshift_round(n4.group_terms(a, codes, D, Mn), s).sum(axis=2)
    assert np.abs(wide).max() < 2**31
    assert n4.acc_bound(D, Mn) >> (s - 1) >= 2**31 - D.shape[1] - 1


@SETTINGS
@given(st.sampled_from([1, 2, 4]), st.sampled_from([WFmt.Q4_0, WFmt.Q4_1]), st.integers(1, 3),
       st.integers(1, 3), st.integers(1, 4), st.booleans(), st.integers(0, 15), st.integers(0, 2**32 - 1),
       st.integers(0, 300), st.booleans())
def test_golden_int4_stream_matches_stream_acc(ports, fmt, m, groups, n, acc, gshift, seed, line0, fast):
    """Any port count, format, shift and start line (streams that cross pages), plan and reference paths."""
    cfg = preset("tiny").replace(name=f"tiny{ports}", dma_ports=ports)
    if ports == 4:  # a code line holds two of a port's columns: 2 x 4 ports need 8 columns
        cfg = cfg.reshaped(8, 8, name="tiny8x8p4")
    c = cfg.cols
    k = groups * n4.GROUP // c
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k * c), dtype=np.int8)
    codes, D, Mn = _weights(rng, n * c, k * c, fmt)
    c0 = rng.integers(-2**31, 2**31, (m, n * c), dtype=np.int64).astype(np.int32)
    h = Harness(cfg, dram_bytes=1 << 17, fast=fast)
    h.put(0, a)
    h.put(0x1000, c0)
    wa = 0x8000 + line0 * c
    wstream.scatter(h.sim.window, wa, wstream4.port_streams(codes, D, Mn, cfg), cfg)
    h.run(_program(cfg, m, k, n, wa, acc, fmt, gshift))
    want = n4.stream_acc(a, codes, D, Mn, gshift)
    if acc:
        want = (want.astype(np.int64) + c0).astype(np.int32)
    assert np.array_equal(h.get(0x3000, np.int32, (m, n * c)), want)
    assert h.sim.counters.dma_read_bytes >= wstream4.port_bytes(n, k, fmt, cfg) * ports


@pytest.mark.parametrize("fields, fault", [
    ({"wfmt": 3}, Fault.ILLEGAL_FIELD),  # no such format
    ({"wfmt": 0, "gshift": 2}, Fault.ILLEGAL_FIELD),  # a group shift on int8 weights
    ({"wfmt": 1, "k": 6}, Fault.ILLEGAL_FIELD),  # 6 lines of 4 = 24 weights: not whole groups of 32
    ({"wfmt": 2, "w": 0x10000 - 64}, Fault.DMA_WINDOW),  # the scales and codes run past the window
    ({"wfmt": 2, "w": 0x8002}, Fault.DMA_ALIGN),
    ({"wfmt": 1, "m": 65}, Fault.ILLEGAL_FIELD),  # more rows than the array's group partial sums
    ({"wfmt": 2, "k": 8 * 65}, Fault.ILLEGAL_FIELD),  # 65 groups: more than q4_groups = 64 scales
])
def test_int4_stream_faults(fields, fault):
    cfg = preset("tiny")
    h = Harness(cfg)
    f = {"w": 0x8000, "m": 1, "k": 8, "wfmt": 1, "gshift": 0} | fields
    with pytest.raises(SimFault) as e:
        h.run(f"GEMM_STREAM dst=0 a=0 w={f['w']} m={f['m']} k={f['k']} n=2 acc=0 wfmt={f['wfmt']} gshift={f['gshift']}"
              "\nFINISH")
    assert e.value.fault == fault


def test_readonly_int4_weights_are_gathered_once_and_stay_exact():
    from systolica.sim.golden import GoldenSim

    cfg = preset("tiny").replace(name="tiny2", dma_ports=2)
    c, m, k, n = cfg.cols, 2, 16, 3
    rng = np.random.default_rng(5)
    codes, D, Mn = _weights(rng, n * c, k * c, WFmt.Q4_1)
    dram = np.zeros(1 << 17, np.uint8)
    wa = 0x8000 + 12 * c
    wstream.scatter(dram, wa, wstream4.port_streams(codes, D, Mn, cfg), cfg)
    end = wstream4.stream_end({"w": wa, "n": n, "k": k, "wfmt": 2}, cfg)
    h = Harness(cfg)
    h.sim = GoldenSim(cfg, dram, fast=True, readonly=[(0x8000, end - 0x8000)])
    for _ in range(3):
        a = rng.integers(-128, 128, (m, k * c), dtype=np.int8)
        h.put(0, a)
        h.run(_program(cfg, m, k, n, wa, False, WFmt.Q4_1, 4))
        assert np.array_equal(h.get(0x3000, np.int32, (m, n * c)), n4.stream_acc(a, codes, D, Mn, 4))
    assert any(key[0] == "q4" for key in h.sim._stream_weights)
