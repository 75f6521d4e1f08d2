"""Prefill schedules: head-less chunks, runs of fewer rows than the program, the same integers as decode.

A prefill run of ``n`` rows (``n`` up to the program's rows) and a head-less chunk must leave the KV cache
byte for byte as one decode step per token does (the rows past ``n`` write nothing) and give the same logits.
"""

from __future__ import annotations

import numpy as np
import pytest

from systolica.artifact import ArtifactError, StepState
from systolica.compiler.compile import compile_model, min_chunk
from systolica.config import preset
from systolica.driver.device import open_device
from systolica.driver.runtime import GenerationError, PrefillRun, Runtime, prefill_runs
from systolica.isa import decode
from systolica.testmodels import random_model

CFG = preset("tiny")


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "split"])
def compiled(request):
    model = random_model("llama", dim=48, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=72, vocab=300, seed=5,
                         max_seq=64)
    return compile_model(model, CFG, page=16, max_seq=64, prefill_chunk=8, act_split=request.param)


def _runtime(art) -> Runtime:
    return Runtime(art, open_device("golden", CFG, dram_bytes=art.dram_bytes + (1 << 16)))


def _kv(rt: Runtime) -> np.ndarray:
    """The whole KV-cache region of the runtime's DRAM window."""
    reg = rt.art.region("kv")
    return np.asarray(rt.window.view[reg["offset"]:reg["offset"] + reg["size"]]).copy()


def _token_by_token(art, prompt):
    rt = _runtime(art)
    seq = rt.new_sequence()
    for t in prompt:
        logits, _ = rt.decode(seq, t)
    return rt, seq, logits


class _Art:
    """What prefill_runs reads of an artifact: the programs and their rows."""

    def __init__(self, **rows):
        self.programs = dict.fromkeys(rows)
        self._rows = rows

    def rows(self, kind):
        return self._rows[kind]


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 16, 17, 25, 128])
def test_prefill_runs_cover_the_prompt_in_the_fewest_even_runs(n):
    art = _Art(decode=1, prefill=8, prefill_nohead=9)
    runs = prefill_runs(art, n)
    assert [r.start for r in runs] == [sum(x.rows for x in runs[:i]) for i in range(len(runs))]
    assert sum(r.rows for r in runs) == n and all(r.rows >= 1 for r in runs)
    assert runs[-1].kind == "prefill" and runs[-1].rows <= 8
    assert all(r.kind == "prefill_nohead" and r.rows <= 9 for r in runs[:-1])
    fewest = 1 if n <= 8 else 1 + -(-(n - 8) // 9)
    assert len(runs) == fewest
    assert max(r.rows for r in runs) - min(r.rows for r in runs) <= 1 + (n > 8)  # even: no run of a small rest
    if n == 128:
        assert min(r.rows for r in runs) >= 8


def test_prefill_runs_without_prefill_programs_are_decode_steps():
    assert prefill_runs(_Art(decode=1), 3) == [PrefillRun("decode", i, 1) for i in range(3)]
    with pytest.raises(GenerationError, match="empty"):
        prefill_runs(_Art(decode=1), 0)


def test_compiled_programs_and_their_rows(compiled):
    art = compiled
    assert set(art.programs) == {"decode", "prefill", "prefill_nohead"}
    split = art.manifest["act_split"]
    for kind in ("prefill", "prefill_nohead"):
        assert min_chunk(CFG, split) <= art.rows(kind) <= 8 and art.min_rows(kind) == 1
    assert art.min_rows("decode") == 1 == art.rows("decode")
    ops = [i.op for i in art.programs["prefill_nohead"].instrs()]
    assert "STORE" in ops  # the KV cache
    logits = art.region("logits")["offset"]
    stores = [i for i in art.programs["prefill_nohead"].instrs() if i.op == "STORE"]
    assert all(i.dram != logits for i in stores)  # no logits
    assert art.manifest["stats"]["prefill_nohead"]["instructions"] < art.manifest["stats"]["prefill"]["instructions"]


def test_fewer_rows_patch_counts_and_empty_the_rows_past_them(compiled):
    art = compiled
    rows, k = art.rows("prefill"), 2 if art.manifest["act_split"] else 1
    words = art.patched_program("prefill", StepState(0, [7, 8, 9], [0]))
    ins = [decode(w) for w in words]
    gemms = [i for i in ins if i.op == "GEMM_STREAM"]
    assert {i.m for i in gemms} == {3 * k, k}  # the chunk's rows, and the logits row; never 0
    attn = [i for i in ins if i.op == "ATTN"]
    assert sum(i.nq > 0 for i in attn) == 3 * art.manifest["kv"]["heads"] * 2  # 3 rows, page 0 only, 2 layers
    full = [decode(w) for w in art.patched_program("prefill", StepState(0, list(range(rows)), [0]))]
    assert sum(i.op == "STORE" and i.rows > 0 for i in ins) < sum(i.op == "STORE" and i.rows > 0 for i in full)
    with pytest.raises(ArtifactError, match="runs 1 to"):
        art.patched_program("prefill", StepState(0, list(range(rows + 1)), [0]))
    with pytest.raises(ArtifactError, match="runs 1 row"):
        art.patched_program("decode", StepState(0, [1, 2], [0]))


@pytest.mark.parametrize("n", [1, 3, -1], ids=["1", "3", "rows-1"])
def test_short_prompt_in_one_run_equals_token_by_token(compiled, n):
    """A prompt shorter than the prefill program runs as one prefill of ``n`` rows: its logits, the whole KV
    cache (bytes past the prompt untouched) and the next decode step equal ``n`` decode steps."""
    art = compiled
    n = n if n > 0 else art.rows("prefill") + n
    assert 1 <= n < art.rows("prefill")
    assert prefill_runs(art, n) == [PrefillRun("prefill", 0, n)]
    prompt = [int(t) for t in np.random.default_rng(n).integers(0, 300, n)]
    rt = _runtime(art)
    seq = rt.new_sequence()
    logits, st = rt.prefill(seq, prompt)
    assert st.instrs == len(art.programs["prefill"])  # one run
    assert seq.pos == n and seq.tokens == prompt
    ref, rseq, rlogits = _token_by_token(art, prompt)
    np.testing.assert_array_equal(logits, rlogits)
    np.testing.assert_array_equal(_kv(rt), _kv(ref))
    tok = int(np.argmax(logits))
    np.testing.assert_array_equal(rt.decode(seq, tok)[0], ref.decode(rseq, tok)[0])


def test_headless_chunks_fill_the_kv_cache_as_decode_does(compiled):
    """A prompt of several runs (head-less chunks, then the last with the logits): the KV cache, the logits and
    the continuation equal one decode step per token, bit for bit."""
    art = compiled
    n = art.rows("prefill_nohead") + art.rows("prefill") + 3
    runs = prefill_runs(art, n)
    assert [r.kind for r in runs].count("prefill_nohead") >= 2
    prompt = [int(t) for t in np.random.default_rng(11).integers(0, 300, n)]
    rt = _runtime(art)
    seq = rt.new_sequence()
    logits, _ = rt.prefill(seq, prompt)
    ref, rseq, rlogits = _token_by_token(art, prompt)
    np.testing.assert_array_equal(logits, rlogits)
    np.testing.assert_array_equal(_kv(rt), _kv(ref))
    tok = int(np.argmax(logits))
    for _ in range(3):
        a, b = rt.decode(seq, tok)[0], ref.decode(rseq, tok)[0]
        np.testing.assert_array_equal(a, b)
        tok = int(np.argmax(a))


def test_variable_rows_survive_save_and_load(compiled, tmp_path):
    from systolica.artifact import Artifact

    path = tmp_path / "m.systolica"
    compiled.save(path)
    art = Artifact.load(path)
    assert art.min_rows("prefill") == 1 and art.rows("prefill_nohead") == compiled.rows("prefill_nohead")
    st = StepState(0, [1, 2], [0])
    assert art.patched_program("prefill_nohead", st) == compiled.patched_program("prefill_nohead", st)


def test_patched_image_is_the_patched_program_for_any_sequence_of_steps(compiled):
    """The incremental byte image the runtime writes (only words whose patch values changed are rewritten) equals
    the patched program's words for every step, whatever step came before: positions back and forth, other row
    counts, block tables in any page order."""
    from systolica.program import words_to_bytes

    rng = np.random.default_rng(3)
    n_pages, max_seq = int(compiled.manifest["kv"]["n_pages"]), int(compiled.manifest["max_seq"])
    for _ in range(40):
        kind = str(rng.choice(list(compiled.programs)))
        rows = int(rng.integers(compiled.min_rows(kind), compiled.rows(kind) + 1))
        pos = int(rng.integers(0, max_seq - rows + 1))
        table = [int(p) for p in rng.permutation(n_pages)[:compiled.pages_needed(pos, rows)]]
        st = StepState(pos, [int(t) for t in rng.integers(0, 300, rows)], table)
        got = compiled.patched_image(kind, st)
        assert bytes(got) == words_to_bytes(compiled.patched_program(kind, st)), (kind, pos, rows)
