"""The token protocol (deadlock freedom, double buffering) and the IR verifier."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from lowering_harness import GoldenRunner

from systolica.artifact import StepState
from systolica.compiler.compile import compile_model
from systolica.compiler.ir import IRError, build_graph, verify
from systolica.compiler.schedule import ScheduleError, Scheduler, verify_tokens
from systolica.config import preset
from systolica.isa import Engine, decode, make
from systolica.program import Program
from systolica.testmodels import random_model


@pytest.fixture(scope="module")
def art():
    m = random_model("llama", dim=48, n_layers=2, n_heads=4, n_kv_heads=2, vocab=100, max_seq=64, seed=3)
    return compile_model(m, preset("tiny"), page=16, max_seq=64, prefill_chunk=4)


def _pairs(instrs):
    """(producer, consumer) index pairs: the k-th push on a queue feeds the k-th pop."""
    fifo = {q: [] for q in range(4)}
    out = []
    push = {(Engine.LOAD, "next"): 0, (Engine.COMPUTE, "prev"): 1, (Engine.COMPUTE, "next"): 2,
            (Engine.STORE, "prev"): 3}
    pop = {(Engine.COMPUTE, "prev"): 0, (Engine.LOAD, "next"): 1, (Engine.STORE, "prev"): 2,
           (Engine.COMPUTE, "next"): 3}
    for i, ins in enumerate(instrs):
        for side in ("prev", "next"):
            if getattr(ins, f"pop_{side}"):
                out.append((fifo[pop[(ins.engine, side)]].pop(0), i))
        for side in ("prev", "next"):
            if getattr(ins, f"push_{side}"):
                fifo[push[(ins.engine, side)]].append(i)
    return out


def test_programs_pass_the_deadlock_check(art):
    for prog in art.programs.values():
        peaks = verify_tokens(prog.instrs(), art.config.queue_depth)
        assert max(peaks.values()) <= art.config.queue_depth


def test_mult_rows_double_buffered(art):
    """Multiplier LOADs wait for the block before last, never the GEMM_STREAM just before them."""
    ins = art.programs["decode"].instrs()
    embd = art.region("token_embd")["offset"]
    waits = dict((c, p) for p, c in _pairs(ins))
    last_gemm, checked = -1, 0
    for i, x in enumerate(ins):
        if x.op == "GEMM_STREAM":
            last_gemm = i
        elif x.op == "LOAD" and x.dram < embd and i in waits and last_gemm >= 0:
            assert waits[i] < last_gemm, (f"LOAD {i} waits for {ins[waits[i]].op} {waits[i]}, GEMM_STREAM {last_gemm} "
                                          "is last")
            checked += 1
    assert checked >= 5

def test_kv_store_then_load_relayed_through_compute(art):
    ins = art.programs["decode"].instrs()
    pairs = _pairs(ins)
    relays = [i for i, x in enumerate(ins) if x.op == "NOP"]
    assert relays
    for n in relays:  # a NOP pops the store's token and feeds a LOAD
        assert any(ins[p].op == "STORE" and c == n for p, c in pairs)
        assert any(p == n and ins[c].op == "LOAD" for p, c in pairs)


def test_verify_tokens_rejects_broken_protocols():
    ld = make("LOAD", push_next=True, rows=0)
    use = make("GEMM", pop_prev=True)
    fin = make("FINISH")
    assert verify_tokens([ld, use, fin], 2)["load->compute"] == 1
    with pytest.raises(ScheduleError, match="pops the empty load->compute queue"):
        verify_tokens([use, ld, fin], 2)
    with pytest.raises(ScheduleError, match="tokens left"):
        verify_tokens([ld, fin], 2)
    with pytest.raises(ScheduleError, match="3th token into load->compute"):
        verify_tokens([ld, ld, ld, use, use, use, fin], 2)


def test_scheduler_pairs_hazards():
    s = Scheduler({})
    a = s.emit("LOAD", buf=0, rows=1, lines=1, writes=["spad:a"])
    b = s.emit("GEMM", m=1, k=1, n=1, reads=["spad:a"], writes=["acc:c"])
    c = s.emit("LOAD", buf=0, rows=1, lines=1, writes=["spad:a"])  # WAR on a: waits for the GEMM
    out = s.finish()
    assert out[a].flags["push_next"] and out[b].flags["pop_prev"]
    assert out[b].flags["push_prev"] and out[c].flags["pop_next"]
    verify_tokens([e.instr() for e in out], 2)


def test_tokens_matter_on_the_golden_simulator(art):
    """Without the token flags the decoupled load engine runs ahead and the logits change."""
    good = GoldenRunner(art)
    ref = good.prefill([1, 2, 3, 4, 5])
    st = StepState(0, [1], good.block_table)
    words = art.patched_program("decode", st)
    flagless = [w & ~(0xF << 5) for w in words]
    assert [decode(w).op for w in flagless] == [decode(w).op for w in words]
    bad = GoldenRunner(art)
    bad.sim.run(Program(flagless, art.config))
    assert not np.array_equal(art.read_logits(bad.sim.window), ref)


def test_ir_verifier_catches_broken_graphs():
    m = random_model("llama", dim=32, n_layers=1, n_heads=2, vocab=64, max_seq=32)
    g = build_graph(m.config)
    verify(g)
    shapes = {k: v.shape for k, v in m.weights.items()}
    with pytest.raises(IRError, match="weight 'blk.0.attn_q' has 30 outputs"):
        verify(g, dict(shapes, **{"blk.0.attn_q": (30, 32)}))
    g2 = build_graph(m.config)
    g2.nodes[1], g2.nodes[2] = g2.nodes[2], g2.nodes[1]  # quant before the norm that feeds it
    with pytest.raises(IRError, match="read before any node writes it"):
        verify(g2)
    g3 = build_graph(m.config)
    g3.nodes[3] = dataclasses.replace(g3.nodes[3], outputs=(g3.nodes[2].outputs[0],))
    with pytest.raises(IRError, match="written twice|row shape|writes a vbuf"):
        verify(g3)
