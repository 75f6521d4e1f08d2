"""The fast RTL path (Verilator C++ harness, C++ DRAM model) against the golden simulator.

No Python runs on the clock edge, so hundreds of random programs fit in a few
seconds; half of them run with random AXI stalls in the C++ DRAM model.
"""

from __future__ import annotations

import numpy as np
import pytest

from systolica import wstream4
from systolica.config import preset
from systolica.faults import Fault
from systolica.sim.accel_programs import FAULT_KINDS, RTL_RANDOM_OPS, random_program
from systolica.sim.fast_harness import FastRtl
from systolica.sim.golden import GoldenSim

pytestmark = pytest.mark.rtl

MEM, WIN_BASE, WIN_SIZE = 1 << 18, 0x1_0000, 0x2_0000
DATA_LO, DATA_HI = 0x1000, 0x9000  # room for GEMM_STREAM's pages on 4 weight ports


#: the tiny preset; with 4 weight ports (GEMM_STREAM: a whole tile a beat) and 3 attention rows a KV pass
#: (config.attn_rows) taking turns on two sets of p * v lanes (config.attn_pv_shared, attn_pv_sets; as kv260), its attention p * v and GELU
#: constants on multipliers (config.dsp_muls), the sigmoid's quotient by the seeded Newton pipeline
#: (config.act_newton), ATTN / ATTN_OUT beside a GEMM_STREAM that runs on (config.attn_beside), no softmax unit
#: (config.softmax_unit: its programs draw no SOFTMAX), and, as kv260, full-width line units beside a one-lane
#: activation unit (config.nonlinear_lanes: 4 beats a line) and a two-lane norm unit (config.rowpass_lanes: 2); with 2-lane line units (each 4-lane buffer line in 2 beats: hw/line_serial.py), 2 DMA
#: ports, 2 attention rows on one shared set of p * v lanes (as pynq-z2) and the array's products in logic
#: (config.array_lut_muls); and with 2-lane line units whose activation, norm and softmax units have one
#: lane (4 beats a line: config.nonlinear_lanes), an array with two MACs per multiplier
#: (config.macs_per_dsp) and an attention unit for heads of at most 2 lines (config.attn_head_lines: the random
#: programs' largest); their programs must give the same bytes.  tiny_d4 also reads its weights ahead of each
#: GEMM_STREAM (config.wstream_ahead), and tiny_l2_d2 does too, taking them two beats a cycle (config.wstream_pairs)
CONFIGS = {"tiny": (preset("tiny"), 500),
           "tiny_l2_d2": (preset("tiny").replace(name="tiny_l2_d2", line_lanes=2, dma_ports=2, attn_rows=2,
                                                 attn_pv_shared=1, array_lut_muls=1, wstream_ahead=256,
                                                 wstream_pairs=1), 250),
           "tiny_d4": (preset("tiny").replace(name="tiny_d4", dma_ports=4, attn_rows=3, dsp_muls=1, attn_pv_shared=1,
                                              attn_pv_sets=2, softmax_unit=0, act_newton=1, attn_beside=1,
                                              load_ports=4, nonlinear_lanes=1, rowpass_lanes=2,
                                              wstream_ahead=32), 250),
           "tiny_l2_n1_p2": (preset("tiny").replace(name="tiny_l2_n1_p2", line_lanes=2, nonlinear_lanes=1,
                                                    macs_per_dsp=2, attn_head_lines=2), 250)}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def fast(request, build_dir):
    cfg, n = CONFIGS[request.param]
    return FastRtl(cfg, build_dir), n


def test_fast_path_random_programs_match_golden(fast):
    fast, n = fast
    cfg = fast.cfg
    rng = np.random.default_rng(2024)
    dram = np.zeros(MEM, np.uint8)
    words, retired, mismatches, outcomes, per_op, q4 = 0, 0, [], {}, {}, 0
    for i in range(n):
        kind = None if rng.random() < 0.4 else str(rng.choice(FAULT_KINDS))
        prog = random_program(cfg, rng, n_ops=int(rng.integers(3, 20)), data_lo=DATA_LO, data_hi=DATA_HI,
                              win_size=WIN_SIZE, fault=kind, dump_at=DATA_HI)  # every buffer region to DRAM
        dram[WIN_BASE + DATA_LO:WIN_BASE + DATA_HI] = rng.integers(0, 256, DATA_HI - DATA_LO, dtype=np.uint8)
        code = b"".join(int(w).to_bytes(16, "little") for w in prog.words)
        dram[WIN_BASE:WIN_BASE + len(code)] = np.frombuffer(code, np.uint8)
        gold_dram = dram.copy()
        # a fresh process has empty buffers: so does a fresh golden simulator
        gold = GoldenSim(cfg, gold_dram, window_base=WIN_BASE, window_size=WIN_SIZE).run(
            prog.words, raise_on_fault=False)
        res = fast.run(dram, window_base=WIN_BASE, window_size=WIN_SIZE, prog_base=0, prog_len=len(prog.words),
                       max_cycles=200_000, stall_percent=30 if i % 2 else 0, seed=i)
        words += len(prog.words)
        q4 += sum(1 for x in prog.instrs if x.op == "GEMM_STREAM" and x.fields.get("wfmt", 0) in (1, 2))
        retired += gold.counters.instructions
        for op, k in gold.counters.per_op.items():
            per_op[op] = per_op.get(op, 0) + k
        outcomes[gold.status.name] = outcomes.get(gold.status.name, 0) + 1
        bad = []
        if not res.done:
            bad.append("no interrupt")
        if res.code != gold.status or (gold.status != Fault.NONE and res.pc != gold.pc):
            bad.append(f"RTL {res.code.name}@{res.pc}, golden {gold.status.name}@{gold.pc}: {gold.message}")
        if not np.array_equal(dram, gold_dram):
            bad.append(f"DRAM differs at {int(np.count_nonzero(dram != gold_dram))} bytes")
        if res.counters["INSTRS"] != gold.counters.instructions:
            bad.append(f"INSTRS {res.counters['INSTRS']} golden {gold.counters.instructions}")
        if res.counters["DMA_WR_BYTES"] != gold.counters.dma_write_bytes:
            bad.append(f"DMA_WR_BYTES {res.counters['DMA_WR_BYTES']} golden {gold.counters.dma_write_bytes}")
        if res.violations:
            bad.append(f"{res.violations} accesses outside the window")
        if bad:
            mismatches.append((i, kind, bad))
            dram[:] = gold_dram  # keep going from the reference state
    print(f"\nfast path ({cfg.name}): {n} random programs, {words} words, {retired} instructions retired (golden), "
          f"{len(mismatches)} mismatches; outcomes {outcomes}; executed {per_op}")
    assert not mismatches, mismatches[:3]
    assert len(outcomes) >= 7, outcomes
    built = [op for op in RTL_RANDOM_OPS if op != "SOFTMAX" or cfg.softmax_unit]  # the ops this config executes
    assert all(per_op.get(op, 0) > 0 for op in built) and ("SOFTMAX" in per_op) == bool(cfg.softmax_unit), per_op
    assert (q4 > 10) == (wstream4.config_problem(cfg) is None), q4  # 4-bit GEMM_STREAMs where the array takes them


def _stream4(fast, rng, *, m, n, k, wfmt, gshift, acc=0, stall=20, seed=0):
    """LOAD activations, one 4-bit GEMM_STREAM over random DRAM bytes (codes and scales), STORE its lines; run on
    the RTL and the golden simulator: ``(rtl result, golden result, rtl DRAM, golden DRAM, the stored bytes)``."""
    from systolica.isa import encode, make
    from systolica.sim.accel_programs import serialize

    cfg = fast.cfg
    C = cfg.cols
    ops = [make("LOAD", buf=0, sram=0, dram=DATA_LO, rows=1, lines=m * k, stride=C * m * k),
           make("GEMM_STREAM", dst=0, a=0, w=DATA_LO + 0x1000, m=m, k=k, n=n, acc=acc, wfmt=int(wfmt), gshift=gshift),
           make("STORE", buf=1, sram=0, dram=DATA_HI - 0x1000, rows=1, lines=m * n, stride=4 * C * m * n)]
    words = [encode(i) for i in serialize(ops)] + [encode(make("FINISH"))]
    dram = np.zeros(MEM, np.uint8)
    dram[WIN_BASE + DATA_LO:WIN_BASE + DATA_HI] = rng.integers(0, 256, DATA_HI - DATA_LO, dtype=np.uint8)
    code = b"".join(int(w).to_bytes(16, "little") for w in words)
    dram[WIN_BASE:WIN_BASE + len(code)] = np.frombuffer(code, np.uint8)
    gold_dram = dram.copy()
    gold = GoldenSim(cfg, gold_dram, window_base=WIN_BASE, window_size=WIN_SIZE).run(words, raise_on_fault=False)
    res = fast.run(dram, window_base=WIN_BASE, window_size=WIN_SIZE, prog_base=0, prog_len=len(words),
                   max_cycles=50_000, stall_percent=stall, seed=seed)
    out = slice(WIN_BASE + DATA_HI - 0x1000, WIN_BASE + DATA_HI - 0x1000 + 4 * C * m * n)
    return res, gold, dram, gold_dram, out


def test_int4_stream_matches_golden_or_is_refused(fast):
    """A GEMM_STREAM with 4-bit weights (Q4_0 / Q4_1, group shifts 0 and 5) gives the golden simulator's
    accumulator lines on a config with the 4-bit datapath (several groups along K, several rows and output
    lines); a config without it (cols not a multiple of 2 x dma_ports) stops with ILLEGAL_FIELD at its PC, as
    the golden simulator does."""
    from systolica.isa import WFmt
    from systolica.numerics_int4 import GROUP

    fast, _ = fast
    cfg = fast.cfg
    ok = wstream4.config_problem(cfg) is None
    rng = np.random.default_rng(5)
    m, n, k = 3, 2, 2 * GROUP // cfg.cols
    for fmt, gshift in ((WFmt.Q4_0, 0), (WFmt.Q4_1, 0), (WFmt.Q4_0, 5), (WFmt.Q4_1, 5)):
        res, gold, dram, gold_dram, out = _stream4(fast, rng, m=m, n=n, k=k, wfmt=fmt, gshift=gshift, seed=int(fmt))
        assert res.done and res.code == gold.status, (fmt, res.code, gold.status, gold.message)
        if ok:
            assert gold.status == Fault.NONE and np.any(gold_dram[out] != 0), gold.message
        else:
            assert gold.status == Fault.ILLEGAL_FIELD and res.pc == gold.pc, (res.code, res.pc, gold.pc)
        assert np.array_equal(dram, gold_dram), (fmt, gshift, dram[out].view("<i4"), gold_dram[out].view("<i4"))


def test_int4_scale_ring_full_and_two_groups_a_beat(build_dir):
    """Four weight ports at 8 columns: a Q4_0 scale beat holds two groups (a ring row of two); a scale ring of
    q4_groups = 4 (two rows) that output lines of 3 and 4 groups fill, so their scales wait for the ring's rows
    to free; odd group counts leave half rows.  Every result is the golden simulator's."""
    from systolica.numerics_int4 import GROUP

    cfg = preset("default").replace(name="default_d4_q4", dma_ports=4, q4_groups=4)
    fast = FastRtl(cfg, build_dir)
    rng = np.random.default_rng(4)
    for fmt in (1, 2):
        for m, n, groups in ((1, 4, 4), (3, 3, 4), (2, 3, 1), (1, 2, 3), (4, 2, 2), (1, 2, 5)):
            res, gold, dram, gold_dram, _ = _stream4(fast, rng, m=m, n=n, k=groups * GROUP // cfg.cols, wfmt=fmt,
                                                     gshift=1, acc=1, stall=25, seed=fmt)
            want = Fault.ILLEGAL_FIELD if groups > cfg.q4_groups else Fault.NONE
            assert gold.status == want and res.done and res.code == want, (fmt, m, n, groups, res.code, gold.message)
            assert np.array_equal(dram, gold_dram), (fmt, m, n, groups)


def _run_words(fast, cfg, words):
    """``words`` from PC 0 on the RTL and on the golden simulator: ``(rtl result, golden result)``."""
    dram = np.zeros(MEM, np.uint8)
    code = b"".join(int(w).to_bytes(16, "little") for w in words)
    dram[WIN_BASE:WIN_BASE + len(code)] = np.frombuffer(code, np.uint8)
    gold = GoldenSim(cfg, dram.copy(), window_base=WIN_BASE, window_size=WIN_SIZE).run(words, raise_on_fault=False)
    res = fast.run(dram, window_base=WIN_BASE, window_size=WIN_SIZE, prog_base=0, prog_len=len(words),
                   max_cycles=20_000)
    return res, gold


def test_softmax_without_a_softmax_unit_is_illegal_opcode(build_dir):
    """On a config built without a softmax unit (``softmax_unit = 0``) a SOFTMAX stops with ILLEGAL_OPCODE at its
    PC on the RTL, as on the golden simulator (which names the field), after the instructions before it; the same
    word runs on a config with the unit."""
    from systolica.isa import encode, make

    words = [encode(make("NOP")), encode(make("SOFTMAX", src=0, dst=8, rows=1, n=4)), encode(make("FINISH"))]
    for name, want in (("tiny_d4", Fault.ILLEGAL_OPCODE), ("tiny", Fault.NONE)):
        cfg = CONFIGS[name][0]
        assert cfg.softmax_unit == int(want == Fault.NONE)
        res, gold = _run_words(FastRtl(cfg, build_dir), cfg, words)
        assert gold.status == want and res.done and res.code == want, (name, res.code, gold.status, gold.message)
        if want != Fault.NONE:
            assert gold.pc == res.pc == 1 and "softmax_unit = 0" in gold.message, (gold.pc, res.pc, gold.message)


def test_attn_head_longer_than_the_unit_is_illegal_field(build_dir):
    """On a config whose attention unit takes heads of at most ``attn_head_lines`` lines, an ATTN or ATTN_OUT with
    a longer ``hd`` stops with ILLEGAL_FIELD at its PC on the RTL, as on the golden simulator (which says why),
    and the instructions before it complete; a head of exactly the limit runs."""
    from systolica.isa import encode, make

    cfg = CONFIGS["tiny_l2_n1_p2"][0]
    lim = cfg.attn_max_lines
    assert lim == 2
    fast = FastRtl(cfg, build_dir)
    for op, hd, want in (("ATTN", lim + 1, Fault.ILLEGAL_FIELD), ("ATTN_OUT", lim + 3, Fault.ILLEGAL_FIELD),
                         ("ATTN_OUT", lim, Fault.NONE)):
        fields = dict(state=0, nq=1, hd=hd) | (dict(q=0, qexp=8, kv=16, t=0, page_log2=0) if op == "ATTN"
                                                else dict(dst=64))
        words = [encode(make("NOP")), encode(make(op, **fields)), encode(make("FINISH"))]
        res, gold = _run_words(fast, cfg, words)
        assert gold.status == want and res.done and res.code == want, (op, hd, res.code, gold.status, gold.message)
        if want != Fault.NONE:
            assert gold.pc == res.pc == 1, (gold.pc, res.pc)
            assert f"{op}.hd={hd}" in gold.message and "attn_head_lines" in gold.message, gold.message


def _beside_programs(cfg, what: str):
    """(both, stream only, the other only, neither): a GEMM_STREAM with no pushes, then ``what``: "attention" (an
    ATTN chain of three 64-token tiles for 3 query rows after a NOP, and its ATTN_OUT) or "line ops" (SILU, MUL, ADD and ROPE
    over the vector buffer); each program LOADs first and STOREs of every buffer last."""
    from systolica.isa import Engine, encode, make
    from systolica.sim.accel_programs import dump_stores, serialize

    sp = 4096 if cfg.spad_lines >= 4096 else cfg.spad_lines
    vl = min(cfg.vbuf_lines, 256) // 4  # four regions of the vector buffer
    loads = [make("LOAD", buf=0, sram=0, dram=DATA_LO, rows=1, lines=sp, stride=0),
             make("LOAD", buf=2, sram=0, dram=DATA_LO, rows=1, lines=2 * vl, stride=0)]
    stream = make("GEMM_STREAM", dst=0, a=sp // 2, w=DATA_LO, m=1, k=8, n=48, acc=0, wfmt=0, gshift=0)
    if what == "attention":
        tile = dict(q=sp // 2, qexp=3 * sp // 4, kv=0, state=0, nq=3, hd=2, t=64, page_log2=6, offset=63, causal=0)
        # a NOP first goes on beside the stream too (the compiler's relay of the KV STOREs' token to the LOADs)
        other = [make("NOP", engine=int(Engine.COMPUTE)), make("ATTN", **tile, init=1), make("ATTN", **tile, init=0),
                 make("ATTN", **tile, init=0), make("ATTN_OUT", dst=64, state=0, nq=3, hd=2)]
    else:
        other = [make("SILU", dst=2 * vl, src=0, rows=1, lines=vl),
                 make("MUL", dst=3 * vl, a=2 * vl, b=vl, rows=1, lines=vl, shift=16),
                 make("ADD", dst=2 * vl, a=3 * vl, b=0, rows=1, lines=vl, bcast=0),
                 make("ROPE", dst=3 * vl, src=vl, table=0, rows=2, heads=1, hd=vl // 4)]
    tail = [*dump_stores(cfg, DATA_HI), make("FINISH")]
    return {name: [encode(i) for i in serialize([*loads, *body, *tail])]
            for name, body in (("both", [stream, *other]), ("stream", [stream]), ("other", other), ("none", []))}


@pytest.mark.parametrize("what", ["attention", "line ops"])
def test_attention_and_line_ops_run_beside_a_gemm_stream(fast, what):
    """config.attn_beside: an ATTN chain (a NOP first), or the vector unit's line ops (but REQUANT), behind a GEMM_STREAM that
    pushes no token run while the stream does (the pair takes well under the sum of their cycles alone); without
    it they take their turns.  Bit-exact either way."""
    fast, _ = fast
    cfg = fast.cfg
    rng = np.random.default_rng(7)
    dram = np.zeros(MEM, np.uint8)
    dram[WIN_BASE + DATA_LO:WIN_BASE + DATA_HI] = rng.integers(0, 256, DATA_HI - DATA_LO, dtype=np.uint8)
    base = dram.copy()
    cycles = {}
    for name, words in _beside_programs(cfg, what).items():
        dram[:] = base
        code = b"".join(int(w).to_bytes(16, "little") for w in words)
        dram[WIN_BASE:WIN_BASE + len(code)] = np.frombuffer(code, np.uint8)
        gold = dram.copy()
        g = GoldenSim(cfg, gold, window_base=WIN_BASE, window_size=WIN_SIZE).run(words, raise_on_fault=False)
        res = fast.run(dram, window_base=WIN_BASE, window_size=WIN_SIZE, prog_base=0, prog_len=len(words),
                       max_cycles=200_000)
        assert g.status == Fault.NONE and res.code == Fault.NONE, (name, g.status, g.message, res.code)
        assert np.array_equal(dram, gold), f"{name}: DRAM differs at {int(np.count_nonzero(dram != gold))} bytes"
        cycles[name] = res.counters["CYCLES"]
    own = {k: cycles[k] - cycles["none"] for k in ("stream", "other", "both")}  # less the LOADs and the STOREs
    shorter = min(own["stream"], own["other"])
    print(f"\n{cfg.name}: cycles of their own: stream {own['stream']}, {what} {own['other']}, both {own['both']}")
    if cfg.attn_beside:
        assert own["both"] < own["stream"] + own["other"] - shorter // 2, own
    else:
        assert own["both"] > own["stream"] + own["other"] - shorter // 4, own


def test_compiled_gqa_decode_step_matches_golden(fast):
    """A compiled decode step of a GQA model (three KV heads of three query heads, four pages of context) on the
    RTL: the whole DRAM window -- logits and the KV cache's new token -- is the golden simulator's, bit for bit,
    behind a DRAM latency of 40 cycles and random back-pressure.  With attn_beside (tiny_d4) the program is
    ordered by GQA group (compiler/gqa_groups.py): the next group's weight streams run beside a group's ATTNs,
    and its LOADs are striped over the four ports (config.load_ports).  Without back-pressure the performance
    model gives the RTL's cycles within 5%."""
    _compiled_gqa_run(fast, "decode", 58, [5])  # three whole pages and a tail of 11 tokens


def test_compiled_gqa_prefill_chunk_matches_golden(fast):
    """The same for a prefill chunk of four rows across a page boundary (positions 46-49, page 16): with
    attn_beside ordered by GQA group too, Q, K and V group-major, its KV STOREs a row and head each, its page LOADs
    behind them (the chunk completes page 2)."""
    _compiled_gqa_run(fast, "prefill_nohead", 46, [5, 9, 2, 7])


def _compiled_gqa_run(fast, kind: str, pos: int, tokens: list[int]) -> None:
    from systolica.artifact import StepState
    from systolica.compiler.compile import compile_model
    from systolica.testmodels import random_model

    fast, _ = fast
    cfg = fast.cfg
    model = random_model("llama", dim=72, n_layers=1, n_heads=9, n_kv_heads=3, ffn_dim=48, vocab=64, seed=3,
                         max_seq=80)
    art = compile_model(model, cfg, page=16, max_seq=80, prefill_chunk=4)
    assert (art.manifest["kv"]["heads"], art.page) == (3, 16) and art.rows(kind) >= len(tokens)
    words = art.patched_program(kind, StepState(pos, tokens, list(range(art.pages_needed(pos, len(tokens))))))
    window = 1 << int(art.dram_bytes - 1).bit_length()
    dram = np.zeros(window, np.uint8)
    dram[:art.image.size] = art.image  # the image, and random bytes for the KV cache's earlier tokens
    kv = art.manifest["kv"]
    dram[kv["base"]:kv["base"] + kv["n_pages"] * kv["heads"] * kv["tile_bytes"]] = np.random.default_rng(2).integers(
        0, 256, kv["n_pages"] * kv["heads"] * kv["tile_bytes"], dtype=np.uint8)
    prog_base = art.region(f"program:{kind}")["offset"]
    raw = np.frombuffer(b"".join(int(w).to_bytes(16, "little") for w in words), np.uint8)
    dram[prog_base:prog_base + raw.size] = raw
    gold, start = dram.copy(), dram.copy()
    g = GoldenSim(cfg, gold, window_base=0, window_size=window).run(words, raise_on_fault=False)
    res = fast.run(dram, window_base=0, window_size=window, prog_base=prog_base, prog_len=len(words),
                   stall_percent=15, dram_latency=40)
    assert g.status == Fault.NONE and res.code == Fault.NONE, (g.status, res.code)
    assert np.array_equal(dram, gold), f"DRAM differs at {int(np.count_nonzero(dram != gold))} bytes"
    # without back-pressure: the performance model (its DRAM latency + 2, as systolica.bench.layer_rtl) within 5%
    from systolica.sim.perf import PerfModel
    from systolica.sim.perf_costs import PerfParams

    dram[:] = start
    res = fast.run(dram, window_base=0, window_size=window, prog_base=prog_base, prog_len=len(words),
                   dram_latency=40)
    model = PerfModel(cfg, PerfParams(rd_latency=42, wr_latency=42)).run(words).cycles
    rtl = res.counters["CYCLES"]
    print(f"\n{cfg.name}: GQA {kind} at {pos}: RTL {rtl} cycles, model {model} ({model / rtl - 1:+.1%})")
    assert res.code == Fault.NONE and abs(model / rtl - 1) < 0.05


def test_striped_load_error_on_any_port_stops_with_its_pc(build_dir):
    """config.load_ports: a LOAD's bursts go to the ports in turn (hw/striped_reader.py).  An error response to the
    burst on each port stops the run with BUS_ERROR and the LOAD's pc (the accelerator then runs the same program
    cleanly, bit-exact); without errors the lines are the golden simulator's, with and without back-pressure."""
    from systolica.isa import encode, make

    cfg = CONFIGS["tiny_d4"][0]
    assert cfg.load_ports == cfg.dma_ports == 4
    fast = FastRtl(cfg, build_dir)
    burst = cfg.max_burst * cfg.dma_bytes
    lines = 6 * burst // cfg.cols  # six bursts: two rounds of the ports and more
    ops = [make("LOAD", buf=0, sram=0, dram=DATA_LO, rows=1, lines=lines, stride=0, push_next=True),
           make("NOP", engine=1, pop_prev=True, push_next=True),  # the STORE waits for the LOAD
           make("STORE", buf=0, sram=0, dram=DATA_HI - 0x2000, rows=1, lines=lines, stride=0, pop_prev=True),
           make("FINISH")]
    words = [encode(i) for i in ops]
    code = b"".join(int(w).to_bytes(16, "little") for w in words)
    rng = np.random.default_rng(3)
    base = np.zeros(MEM, np.uint8)
    base[WIN_BASE + DATA_LO:WIN_BASE + DATA_HI] = rng.integers(0, 256, DATA_HI - DATA_LO, dtype=np.uint8)
    base[WIN_BASE:WIN_BASE + len(code)] = np.frombuffer(code, np.uint8)
    gold = base.copy()
    assert GoldenSim(cfg, gold, window_base=WIN_BASE, window_size=WIN_SIZE).run(words).status == Fault.NONE
    for b in range(5):  # the burst on port b % 4 answers SLVERR
        lo = WIN_BASE + DATA_LO + b * burst
        dram = base.copy()
        res = fast.run(dram, window_base=WIN_BASE, window_size=WIN_SIZE, prog_base=0, prog_len=len(words),
                       max_cycles=20_000, slverr={"read": (lo, lo + cfg.dma_bytes)}, stall_percent=20, seed=b)
        assert res.done and (res.code, res.pc) == (Fault.BUS_ERROR, 0), (b, res.code, res.pc)
    for stall in (0, 30):
        dram = base.copy()
        res = fast.run(dram, window_base=WIN_BASE, window_size=WIN_SIZE, prog_base=0, prog_len=len(words),
                       max_cycles=20_000, stall_percent=stall, seed=stall)
        assert res.code == Fault.NONE and np.array_equal(dram, gold), stall


@pytest.mark.parametrize("via", ["stream", "line op"])
def test_weights_read_ahead_wait_for_the_store_that_wrote_them(build_dir, via):
    """config.wstream_ahead (hw/weight_ahead.py): a GEMM_STREAM's weight ports start when it is dispatched, but
    not before every compute instruction up to it has popped its tokens.  A STORE writes the stream's weights (four
    ports' pages) and the stream waits for it through a token -- its own pop, or the pop of a line op before it --
    so it must read what the STORE wrote, not what DRAM held before: the accumulator the STORE after it writes out
    is the golden simulator's, with and without back-pressure."""
    from systolica.isa import make
    from systolica.sim.accel_programs import serialize

    cfg = CONFIGS["tiny_d4"][0]
    assert cfg.wstream_ahead and cfg.dma_ports == 4
    fast = FastRtl(cfg, build_dir)
    C, P, k, n = cfg.cols, cfg.dma_ports, 8, 4
    per_port = n * k * (C // P)  # lines each port reads (layout.py, Weight streams)
    w = DATA_LO + 0x4000  # the weights: per_port lines at w + p * 4 KiB
    ops = [make("LOAD", buf=0, sram=0, dram=DATA_LO, rows=1, lines=k, stride=0),  # the activation row
           make("LOAD", buf=0, sram=64, dram=DATA_LO + 0x1000, rows=P, lines=per_port, stride=C * per_port),
           make("STORE", buf=0, sram=64, dram=w, rows=P, lines=per_port, stride=4096)]  # the new weights
    if via == "line op":  # the pop is the ADD's; the stream has none of its own
        ops.append(make("ADD", dst=0, a=0, b=8, rows=1, lines=8, bcast=0))
    ops += [make("GEMM_STREAM", dst=0, a=0, w=w, m=1, k=k, n=n, acc=0),
            make("STORE", buf=1, sram=0, dram=DATA_HI - 0x1000, rows=1, lines=n, stride=0)]
    words = [int(x) for x in _encode_all(serialize(ops) + [make("FINISH")])]
    pop = [x for x in serialize(ops) if x.op == "GEMM_STREAM"][0]
    assert (pop.pop_next or pop.pop_prev) == (via == "stream")
    base = _image(words, seed=5)
    gold = base.copy()
    assert GoldenSim(cfg, gold, window_base=WIN_BASE, window_size=WIN_SIZE).run(words).status == Fault.NONE
    out = slice(WIN_BASE + DATA_HI - 0x1000, WIN_BASE + DATA_HI - 0x1000 + n * 4 * C)
    stale = base.copy()  # what the stream would give reading the weights DRAM held before the STORE
    GoldenSim(cfg, stale, window_base=WIN_BASE, window_size=WIN_SIZE).run(
        [x for x, op in zip(words, serialize(ops) + [make("FINISH")], strict=True)
         if not (op.op == "STORE" and op.fields["dram"] == w)], raise_on_fault=False)
    assert not np.array_equal(stale[out], gold[out])  # the test can tell them apart
    for stall in (0, 30):
        dram = base.copy()
        res = fast.run(dram, window_base=WIN_BASE, window_size=WIN_SIZE, prog_base=0, prog_len=len(words),
                       max_cycles=50_000, stall_percent=stall, seed=stall, dram_latency=60)
        assert res.code == Fault.NONE and np.array_equal(dram[out], gold[out]), (via, stall)
        assert np.array_equal(dram, gold), (via, stall)


def _image(words, seed: int) -> np.ndarray:
    """A DRAM image: random bytes between DATA_LO and DATA_HI of the window, the program at its start."""
    dram = np.zeros(MEM, np.uint8)
    dram[WIN_BASE + DATA_LO:WIN_BASE + DATA_HI] = np.random.default_rng(seed).integers(
        0, 256, DATA_HI - DATA_LO, dtype=np.uint8)
    code = b"".join(int(x).to_bytes(16, "little") for x in words)
    dram[WIN_BASE:WIN_BASE + len(code)] = np.frombuffer(code, np.uint8)
    return dram


def _encode_all(instrs):
    from systolica.isa import encode

    return [encode(i) for i in instrs]


def test_paired_weights_make_up_the_lines_read_ahead(build_dir):
    """config.wstream_pairs (hw/weight_stream.py): while a long line op runs, the ports read the next GEMM_STREAM's
    weights ahead into their even and odd FIFOs (256 lines a port), and the array then takes them two beats a
    cycle.  A stream of 512 lines a port behind an ADD of ~260 cycles: bit-exact with golden, the RTL's cycles
    within 3 % of the performance model that gains those cycles (``OpCost.pair_gain``: the FIFO's lines less a
    round trip), and at least 120 cycles fewer than the model of the same design taking a beat a cycle."""
    from systolica.isa import make
    from systolica.sim.accel_programs import serialize
    from systolica.sim.perf import PerfModel
    from systolica.sim.perf_costs import PerfParams

    cfg = CONFIGS["tiny_l2_d2"][0]
    assert cfg.wstream_pairs and cfg.wstream_ahead == 256
    fast = FastRtl(cfg, build_dir)
    k, n = 8, 32
    w = DATA_LO + 0x2000
    ops = [make("LOAD", buf=0, sram=0, dram=DATA_LO, rows=1, lines=k, stride=0),
           make("ADD", dst=0, a=0, b=128, rows=1, lines=128, bcast=0),  # the line op the weights are read behind
           make("GEMM_STREAM", dst=0, a=0, w=w, m=1, k=k, n=n, acc=0),
           make("STORE", buf=1, sram=0, dram=DATA_HI - 0x1000, rows=1, lines=n, stride=0)]
    sops = serialize(ops)
    words = [int(x) for x in _encode_all(sops + [make("FINISH")])]
    dram = _image(words, seed=11)
    gold = dram.copy()
    assert GoldenSim(cfg, gold, window_base=WIN_BASE, window_size=WIN_SIZE).run(words).status == Fault.NONE
    res = fast.run(dram, window_base=WIN_BASE, window_size=WIN_SIZE, prog_base=0, prog_len=len(words),
                   max_cycles=50_000, dram_latency=60)
    assert res.code == Fault.NONE and np.array_equal(dram, gold)
    params = PerfParams(rd_latency=60, wr_latency=60)
    paired = PerfModel(cfg, params).run(words)
    single = PerfModel(cfg.replace(wstream_pairs=0), params).run(words)
    add = [x.op for x in sops].index("ADD")
    assert paired.end[add] - paired.start[add] > 200  # the line op is long enough to fill the FIFOs behind
    rtl = res.sim_cycles
    assert abs(rtl - paired.cycles) <= 0.03 * paired.cycles, (rtl, paired.cycles, single.cycles)
    assert rtl <= single.cycles - 120, (rtl, paired.cycles, single.cycles)
