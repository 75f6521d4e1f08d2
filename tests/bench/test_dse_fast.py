"""The fast DSE path: programs-only compiles from a model's shape, read once, give a full compile's programs."""

from __future__ import annotations

import json

import pytest

from systolica.bench import dse, dse_programs
from systolica.bench.dse import evaluate, make_tasks, model_shapes, programs_for, run_tasks
from systolica.config import AccelConfig

MODEL = "random:llama:dim=32,n_layers=4,n_heads=4,n_kv_heads=2,vocab=128"


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    dse_programs._PROGRAMS.clear()
    dse_programs._SHAPES.clear()
    yield
    dse_programs._PROGRAMS.clear()
    dse_programs._SHAPES.clear()


def test_programs_are_those_of_full_compiles_of_the_first_blocks():
    """What a point times (1 and 2 blocks of a 4-block model) is the words compile_model gives those models."""
    for board, shape, width in (("pynq-z2", (8, 8), 64), ("kv260", (16, 16), 128), ("zcu104", (32, 32), 128)):
        t = make_tasks([MODEL], [board], [shape], [width])[0]
        got = programs_for(t)
        assert got["compiled"] and got["n_layers"] == 4 and len(got["depths"]) == 2
        cfg = AccelConfig.from_dict(t["config"])
        for depth, (dec, pre) in zip((1, 2), got["depths"], strict=True):
            ref = dse_programs._runs(dse_programs.truncate_layers(dse_programs._model(MODEL), depth), cfg, t["prompt_len"])
            assert (dec, pre) == ref[:2], (board, depth)
        assert got["rows"] == ref[2]


def test_the_model_shape_is_read_once_and_cached_on_disk(tmp_path, monkeypatch):
    from systolica.compiler.gguf_reader import read_gguf
    from systolica.compiler.programs_only import ModelShape
    from systolica.compiler.writers import write_gguf
    from systolica.testmodels import random_model

    path = write_gguf(random_model("llama", dim=32, n_layers=3, n_heads=2, n_kv_heads=1, ffn_dim=64, vocab=64,
                                   seed=4, max_seq=64), tmp_path / "m.gguf", "Q8_0")
    L, shapes = model_shapes(str(path))
    want = ModelShape.of(read_gguf(path, layers=2))
    assert L == 3 and shapes == [want.truncated(1), want]
    cached = list((tmp_path / "dse-programs").glob("shape-*.json"))
    assert len(cached) == 1
    dse_programs._SHAPES.clear()  # as a new process: from the disk, the file is not read
    import systolica.compiler.gguf_reader as gr

    def boom(*a, **k):
        raise AssertionError("the checkpoint was read again")

    with monkeypatch.context() as mp:
        mp.setattr(gr, "read_gguf_blocks", boom)
        assert model_shapes(str(path)) == (L, shapes)
    # a GGUF point times the programs of its first blocks' full compiles
    t = make_tasks([str(path)], ["pynq-z2"], [(8, 8)], [64])[0]
    cfg = AccelConfig.from_dict(t["config"])
    got = programs_for(t)
    model = read_gguf(path)
    for depth, (dec, pre) in zip((1, 2), got["depths"], strict=True):
        assert (dec, pre) == dse_programs._runs(dse_programs.truncate_layers(model, depth), cfg, 16)[:2]


def test_a_missing_model_is_a_failed_point_not_a_crash(tmp_path):
    tasks = make_tasks([str(tmp_path / "nothere.gguf")], ["pynq-z2"], [(8, 8)], [64])
    pts = run_tasks(tasks, workers=1)
    assert "error" in pts[0] and "nothere" in pts[0]["error"]


def test_run_stats_say_cold_or_warm_and_where_the_time_went():
    from systolica.cli.dse import summary_line

    tasks = make_tasks([MODEL], ["pynq-z2"], [(8, 8)], [64], clocks=[50, 100], dram_gbps=[1.0, 4.0])
    cold: dict = {}
    first = run_tasks(tasks, workers=2, stats=cold)
    assert cold["compiled"] == 1 and cold["cached"] == 0
    assert set(cold["stage_seconds"]) == {"shapes", "programs", "points"}
    assert cold["stage_cpu_seconds"]["programs"] > 0 and cold["stage_cpu_seconds"]["points"] > 0
    assert cold["cpu_seconds"] >= cold["stage_cpu_seconds"]["points"] and cold["phase_seconds"]["prefill"] > 0
    line = summary_line(len(first), cold, "2 local process(es)")
    assert "4 points in" in line and "points/s" in line and "cold: 1 program set(s) compiled, 0 from the cache" in line
    dse_programs._PROGRAMS.clear()
    warm: dict = {}
    assert run_tasks(tasks, workers=2, stats=warm) == first
    assert "warm: 0 program set(s) compiled, 1 from the cache" in summary_line(4, warm, "here")


def test_a_sweep_of_a_hundred_points_prints_its_rate(tmp_path, capsys):
    from systolica.cli import main

    out = tmp_path / "dse.json"
    rc = main(["dse", "--models", MODEL, "--boards", "pynq-z2,kv260", "--shapes", "8x8,16x16", "--dma-bits", "64",
               "--clocks", "100,150,200,250,300", "--dram-gbps", "1,2,4,8,16", "-j", "2", "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())["timing"]
    assert doc["points"] == 100 and doc["programs_compiled"] == 4 and doc["points_per_s"] > 0
    text = " ".join(capsys.readouterr().out.split())
    assert "100 points in" in text and "points/s on 2 local process(es); cold: 4 program set(s) compiled" in text


def test_points_of_one_group_do_not_share_their_clock():
    tasks = make_tasks([MODEL], ["pynq-z2"], [(8, 8)], [64], dram_gbps=[1.0, 4.0])
    memo: dict = {}
    progs = programs_for(tasks[0])
    a, b = (evaluate(t, progs, memo) for t in tasks)
    assert a["clock"] == b["clock"] and a["clock"] is not b["clock"] and len(memo) == 1


def test_int4_points_beside_int8_ones():
    """--weights int8,int4: a program set per format (the int4 one's GEMM_STREAMs stream 4-bit codes), int4 points
    labelled as the performance model of a datapath the RTL lacks, and faster where the weights bound decode."""
    from systolica.isa import decode

    # a model whose weight streams bound decode (MODEL's are too small: its line-op chains do, and pynq-z2 reads
    # int8 weights ahead of them two beats a cycle, config.wstream_pairs)
    big = "random:llama:dim=256,n_layers=2,n_heads=4,n_kv_heads=2,ffn_dim=768,vocab=128"
    t8, t4 = make_tasks([big], ["pynq-z2"], [(8, 8)], [64], weights=("int8", "int4"))
    assert "weights" not in t8 and t4["weights"] == "int4"
    assert dse.program_key(t8) != dse.program_key(t4)
    dec = programs_for(t4)["depths"][-1][0]
    fmts = {decode(w).wfmt for run in dec for w in run if decode(w).op == "GEMM_STREAM"}
    assert fmts == {0, 2}  # Q4_1 matrices and the int8 LM head
    p8, p4 = evaluate(t8), evaluate(t4)
    assert p8["weights"] == "int8" and "4-bit weight datapath" in p4["weights_note"]
    assert p4["decode_tokens_per_s"] > p8["decode_tokens_per_s"]
