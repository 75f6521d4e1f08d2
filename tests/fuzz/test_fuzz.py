"""Fuzzing what users hand to systolica: every outcome is exit 0 with a correct result, 1 with a fault,
or 2 with one line — never a traceback, a hang or a silent success on a structural defect.

Inputs, by kind (the harness, :mod:`fuzz_harness`, says how each case is judged):

- ``gguf``: seeded mutations of a small generated GGUF checkpoint (byte flips, truncation, tensor-info
  edits, metadata of the wrong type or out of range, broken tokenizer data), through ``systolica compile``;
- ``artifact``: mutations of a compiled tiny artifact (byte flips, manifest edits, re-zipped members),
  loaded and run in process (a damaged artifact is an ``ArtifactError``) and, as the runtime's cached
  artifact, through ``systolica run`` (which must rebuild it and print the right text);
- ``args``: ``systolica run`` option values drawn from valid and invalid pools;
- ``config``: mutated accelerator TOML files through ``systolica info``;
- ``program``: mutated assembly text and program binaries through ``asm``, ``disasm`` and ``sim``;
- ``safetensors``: a GPT-2 checkpoint directory with an edited config.json or a damaged header, through compile.

The default run draws a few hundred cases (well under a minute); ``pytest -m slow tests/fuzz`` draws
more than 2,000.  Both print a table of outcomes per kind.
"""

from __future__ import annotations

import json
import os
import random
import traceback

import pytest
import tokenizers
from fuzz_harness import (
    PROMPTS,
    RUN_OPTIONS,
    Hang,
    Result,
    Tally,
    artifact_mutants,
    classify_cli,
    gguf_mutants,
    run_cli,
    watchdog,
)
from tokenizers import pre_tokenizers, trainers
from tokenizers.models import BPE

from systolica.artifact import Artifact
from systolica.compiler.writers import write_gguf
from systolica.config import preset
from systolica.testmodels import random_model

CFG = preset("tiny")
TIMEOUT_S = float(os.environ.get("SYSTOLICA_FUZZ_TIMEOUT", "30"))  # per case; generous for busy CI machines
CORPUS = ["the quick brown fox jumps over the lazy dog", "hello world, hello accelerator"] * 8
RUN = ["--config", "tiny", "--max-seq", "64", "-n", "3", "--json"]
SEED = int(os.environ.get("SYSTOLICA_FUZZ_SEED", "16"))


# ------------------------------------------------------------------ fixtures: a model, its artifact, its output
@pytest.fixture(scope="module")
def base(tmp_path_factory):
    tok = tokenizers.Tokenizer(BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=280, special_tokens=["<|endoftext|>"],
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                         show_progress=False))
    spec = json.loads(tok.to_str())
    tokens = [t for t, _ in sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    fields = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "default", "tokenizer.ggml.tokens": tokens,
              "tokenizer.ggml.merges": merges, "tokenizer.ggml.token_type": [3] + [1] * (len(tokens) - 1),
              "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 0}
    model = random_model("llama", dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=48, vocab=len(tokens),
                         seed=3, max_seq=64)
    d = tmp_path_factory.mktemp("fuzz")
    path = write_gguf(model, d / "tiny.gguf", fields=fields)
    cache = d / "cache"
    os.environ["SYSTOLICA_CACHE"] = str(cache)
    rc, out, err, esc = run_cli(["run", "--model", str(path), *RUN, "hello world"], 120)
    assert rc == 0 and esc is None, err + (esc or "")
    want = json.loads(out)
    (art_file,) = (cache / "artifacts").glob("*.systolica")
    art_bytes = art_file.read_bytes()
    art = Artifact.from_bytes(art_bytes, config=CFG)
    ids = [5, 17, 42, 7]
    want_ids = _generate(art, ids)
    yield {"dir": d, "model": model, "fields": fields, "gguf": path, "cache_file": art_file, "art": art_bytes,
           "text": want["text"], "ids": ids, "want_ids": want_ids}
    os.environ.pop("SYSTOLICA_CACHE", None)


def _generate(art: Artifact, ids: list[int]) -> list[int]:
    from systolica.driver.device import open_device
    from systolica.driver.runtime import Runtime

    dev = open_device("golden", CFG, dram_bytes=-(-art.dram_bytes // 4096) * 4096 + 4096)
    rt = Runtime(art, dev, timeout_s=10)
    try:
        return [s.token for s in rt.generate(ids, 3, stop=[])]
    finally:
        rt.close()


# ------------------------------------------------------------------ one case per kind
def gguf_case(b, m, i: int) -> Result:
    path = b["dir"] / f"m{i % 4}.gguf"
    if m.data is not None:
        path.write_bytes(m.data)
    else:
        fields = dict(b["fields"])
        tokens, merges = list(fields["tokenizer.ggml.tokens"]), list(fields["tokenizer.ggml.merges"])
        for k, v in m.fields.items():
            if k == "_merge":
                merges[len(merges) // 2] = v
            elif k == "_token":
                tokens[len(tokens) // 2] = v
            elif k == "_tokens_short":
                tokens = tokens[:-1]
            elif k == "_types_short":
                fields["tokenizer.ggml.token_type"] = fields["tokenizer.ggml.token_type"][:-3]
            else:
                fields[k] = v
        fields.update({"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": merges})
        fields.update({k: None for k, v in m.fields.items() if v is None})  # None: the key is left out
        write_gguf(b["model"], path, fields=fields)
    out = b["dir"] / "out.systolica"
    rc, o, e, esc = run_cli(["compile", str(path), "-o", str(out), "--config", "tiny"], TIMEOUT_S)
    outcome, detail = classify_cli(rc, o, e, esc, m.must_fail)
    return Result("gguf", m.name, outcome, detail)


def artifact_case(b, name: str, blob: bytes, must_fail: bool, content: bool) -> Result:
    """Load and run in process: ArtifactError/ProgramError (exit 2), a fault (exit 1), or the right tokens."""
    from systolica.cli import _is_project_error
    from systolica.driver.device import DeviceTimeout
    from systolica.sim.faults import SimFault

    try:
        with watchdog(TIMEOUT_S):
            art = Artifact.from_bytes(blob, config=CFG, source="fuzz.systolica")
            got = _generate(art, b["ids"])
    except Hang:
        return Result("artifact", name, "hang")
    except (SimFault, DeviceTimeout) as e:
        return Result("artifact", name, "fault", str(e)[:100])
    except Exception as e:  # noqa: BLE001 - what escapes is judged here
        if _is_project_error(e) and "\n" not in str(e):
            return Result("artifact", name, "error", str(e)[:100])
        return Result("artifact", name, "traceback", traceback.format_exc().strip().splitlines()[-1])
    if must_fail:
        return Result("artifact", name, "silent", "a structural defect loaded and ran")
    if got != b["want_ids"] and not content:
        return Result("artifact", name, "silent", f"ran and gave tokens {got}, not {b['want_ids']}")
    return Result("artifact", name, "ok")


def cached_artifact_case(b, name: str, blob: bytes, must_fail: bool, content: bool) -> Result:
    """The mutant as the runtime's cached artifact: `systolica run` must rebuild it and print the same text."""
    b["cache_file"].write_bytes(blob)
    try:
        rc, o, e, esc = run_cli(["run", "--model", str(b["gguf"]), *RUN, "hello world"], TIMEOUT_S)
    finally:
        b["cache_file"].write_bytes(b["art"])
    rebuilt = "recompiling" in e
    outcome, detail = classify_cli(rc, o, e, esc, must_fail and not rebuilt,
                                   None if content else (lambda out: json.loads(out)["text"] == b["text"]))
    return Result("artifact", f"cached: {name}", outcome, detail)


def args_case(b, rng: random.Random) -> Result:
    argv = ["run", "--model", str(b["gguf"]), "--config", "tiny", "--json"]
    bad = []
    for opt in rng.sample(sorted(RUN_OPTIONS), rng.randint(1, 4)):
        good, wrong = RUN_OPTIONS[opt]
        if good and rng.random() < 0.5:
            argv += [opt, rng.choice(good)]
        else:
            v = rng.choice(wrong)
            argv += [f"{opt}={v}"] if v.startswith("-") or not v else [opt, v]
            bad.append(f"{opt}={v!r}")
    if "--board" in " ".join(argv):
        argv.remove("--config")
        argv.remove("tiny")
    if "-n" not in argv:
        argv += ["-n", "2"]
    if "--max-seq" not in argv:
        argv += ["--max-seq", "64"]
    prompt = rng.choice(PROMPTS[0]) if rng.random() < 0.8 else rng.choice(PROMPTS[1])
    if prompt in PROMPTS[1]:
        bad.append(f"prompt {prompt!r}")
    argv += ["--", prompt]

    def correct(out: str) -> bool:
        d = json.loads(out)
        return 1 <= d["generated_tokens"] <= 3 and isinstance(d["text"], str)

    rc, o, e, esc = run_cli(argv, TIMEOUT_S)
    outcome, detail = classify_cli(rc, o, e, esc, bool(bad), correct)
    return Result("args", " ".join(bad) or "valid", outcome, detail)


CONFIG_TOML = """[accel]
name = "fuzz"
rows = 4
cols = 4
spad_kib = 16
acc_kib = 8
vbuf_kib = 16
dma_bits = 32
clock_mhz = 100.0
dram_bytes = 16777216
"""
CONFIG_EDITS: list[tuple[str, bool]] = [
    ("rows = 4", False), ("rows = 1000", True), ("rows = \"4\"", True), ("rows = 4.5", True), ("rows = -4", True),
    ("bogus_key = 1", True), ("clock_mhz = nan", True), ("clock_mhz = inf", True), ("clock_mhz = -5.0", True),
    ("dram_bytes = -1", True), ("dram_bytes = 0", True), ("name = \"\"", True), ("name = 5", True),
    ("preset = \"tiny\"", False), ("preset = \"nonesuch\"", True), ("preset = 3", True), ("rows = true", True),
    ("dma_bits = 33", True), ("cols = [4]", True), ("[other]\nx = 1", False), ("line_lanes = 3", True),
]


def config_case(b, rng: random.Random, i: int) -> Result:
    path = b["dir"] / f"c{i % 4}.toml"
    r = rng.random()
    if r < 0.55:
        edit, must_fail = rng.choice(CONFIG_EDITS)
        lines = CONFIG_TOML.splitlines()
        key = edit.split(" ", 1)[0]
        lines = [ln for ln in lines if not ln.startswith(key + " ")] if not edit.startswith("[") else lines
        if edit.startswith("preset"):
            lines = ["[accel]", edit, "bogus = 1" if must_fail and rng.random() < 0.5 else "rows = 4"]
        path.write_text("\n".join(lines + ([edit] if not edit.startswith("preset") else [])) + "\n")
        name = edit.replace("\n", " ")
    elif r < 0.7:
        path.write_bytes(CONFIG_TOML.encode().replace(b"fuzz", rng.choice([b"\xff\xfe", b"\xc3", b"\x80abc"])))
        must_fail, name = True, "non-UTF-8 bytes"
    else:
        raw = bytearray(CONFIG_TOML.encode())
        for _ in range(rng.randint(1, 3)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        path.write_bytes(bytes(raw))
        must_fail, name = False, "random bytes"
    rc, o, e, esc = run_cli(["info", "--config", str(path)], TIMEOUT_S)
    outcome, detail = classify_cli(rc, o, e, esc, must_fail)
    return Result("config", name, outcome, detail)


PROG = """
LOAD buf=VBUF sram=0 dram=0 rows=2 lines=1 stride=16 @push_next
ADD dst=4 a=0 b=1 rows=1 lines=1 @pop_prev @push_next
STORE buf=VBUF sram=4 dram=0x40 rows=1 lines=1 @pop_prev
FINISH
"""


def program_case(b, rng: random.Random, i: int) -> Result:
    """Assembly text and program binaries through asm, disasm and sim (programs are data the hardware checks)."""
    d = b["dir"]
    src, binf = d / f"p{i % 2}.s", d / f"p{i % 2}.bin"
    if rng.random() < 0.4:
        raw = bytearray(PROG.encode())
        for _ in range(rng.randint(1, 3)):
            raw[rng.randrange(len(raw))] = rng.choice([rng.randrange(256), ord(" "), ord("="), ord("9")])
        src.write_bytes(bytes(raw))
        rc, o, e, esc = run_cli(["asm", str(src), "-o", str(binf), "--config", "tiny"], TIMEOUT_S)
        outcome, detail = classify_cli(rc, o, e, esc, False)
        return Result("program", "asm of mutated text", outcome, detail)
    if "prog" not in b:
        src.write_text(PROG)
        assert run_cli(["asm", str(src), "-o", str(binf), "--config", "tiny"], TIMEOUT_S)[0] == 0
        b["prog"] = binf.read_bytes()
    raw = bytearray(b["prog"])
    for _ in range(rng.randint(1, 3)):
        raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
    if rng.random() < 0.15:
        raw = raw[:rng.randrange(len(raw))]
    binf.write_bytes(bytes(raw))
    cmd = rng.choice([["sim", str(binf), "--config", "tiny", "--max-instructions", "1000"],
                      ["disasm", str(binf)], ["sim", str(binf), "--config", "tiny", "--json"]])
    rc, o, e, esc = run_cli(cmd, TIMEOUT_S)
    if rc == 1 and cmd[0] == "sim":  # sim prints its fault to stdout (the table) or as JSON
        return Result("program", f"{cmd[0]} of mutated binary", "fault" if esc is None else "traceback", "")
    outcome, detail = classify_cli(rc, o, e, esc, False)
    return Result("program", f"{cmd[0]} of mutated binary", outcome, detail)


def safetensors_case(b, rng: random.Random, i: int) -> Result:
    """A GPT-2 safetensors directory with an edited config.json or damaged weights file, through compile."""
    import shutil

    from systolica.compiler.writers import write_safetensors

    if "st" not in b:
        b["st"] = b["dir"] / "st"
        write_safetensors(random_model("gpt2", dim=32, n_layers=1, n_heads=2, vocab=64, seed=1, max_seq=32), b["st"])
    d = b["dir"] / f"st{i % 2}"
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(b["st"], d)
    cfg = json.loads((d / "config.json").read_text())
    r = rng.random()
    if r < 0.6:
        key = rng.choice(["n_embd", "n_layer", "n_head", "vocab_size", "n_positions", "layer_norm_epsilon"])
        v = rng.choice(["x", float("nan"), 0, -1, 1 << 40, [1], None, 2.5, True])
        cfg[key] = v
        # a missing epsilon has a default, a missing n_positions its alias n_ctx
        must_fail = v is not None or key not in ("layer_norm_epsilon", "n_positions")
        (d / "config.json").write_text(json.dumps(cfg))
        name = f"config.json {key}={v!r}"
    elif r < 0.7:
        (d / "config.json").write_bytes(rng.choice([b"\xff\xfe{}", b"[1, 2]", b"{", b""]))
        must_fail, name = True, "config.json not an object"
    else:
        (f,) = d.glob("*.safetensors")
        raw = bytearray(f.read_bytes())
        header = 8 + int.from_bytes(raw[:8], "little")
        for _ in range(rng.randint(1, 3)):
            raw[rng.randrange(min(header, len(raw)))] = rng.randrange(256)
        f.write_bytes(bytes(raw))
        must_fail, name = False, "safetensors header byte"
    rc, o, e, esc = run_cli(["compile", str(d), "-o", str(b["dir"] / "st.systolica"), "--config", "tiny"], TIMEOUT_S)
    outcome, detail = classify_cli(rc, o, e, esc, must_fail)
    return Result("safetensors", name, outcome, detail)


# ------------------------------------------------------------------ the runs
def _fuzz(b, n_gguf: int, n_art: int, n_cached: int, n_args: int, n_config: int, n_prog: int, n_st: int,
          seed: int) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    for i, m in enumerate(gguf_mutants(b["gguf"], rng, n_gguf)):
        tally.add(gguf_case(b, m, i))
    arts = artifact_mutants(b["art"], rng, n_art)
    for name, blob, must_fail, content in arts:
        tally.add(artifact_case(b, name, blob, must_fail, content))
    for name, blob, must_fail, content in rng.sample(arts, min(n_cached, len(arts))):
        tally.add(cached_artifact_case(b, name, blob, must_fail, content))
    for _ in range(n_args):
        tally.add(args_case(b, rng))
    for i in range(n_config):
        tally.add(config_case(b, rng, i))
    for i in range(n_prog):
        tally.add(program_case(b, rng, i))
    for i in range(n_st):
        tally.add(safetensors_case(b, rng, i))
    return tally


def _check(tally: Tally) -> None:
    print("\n" + tally.report())
    bad = tally.bad()
    assert not bad, f"{len(bad)} bad outcomes:\n" + "\n".join(
        f"  [{r.kind}] {r.outcome}: {r.case} -> {r.detail}" for r in bad[:40]) + "\n" + tally.report()


def test_fuzz_inputs(base):
    """The default run: ~250 cases over every input kind."""
    _check(_fuzz(base, n_gguf=70, n_art=80, n_cached=12, n_args=40, n_config=50, n_prog=40, n_st=20,
                 seed=SEED))


@pytest.mark.slow
def test_fuzz_inputs_long(base):
    """More than 2,000 cases (``pytest -m slow tests/fuzz``); another seed than the default run."""
    tally = _fuzz(base, n_gguf=700, n_art=800, n_cached=100, n_args=300, n_config=300, n_prog=300,
                  n_st=200, seed=SEED + 1000)
    assert len(tally.results) >= 2000
    _check(tally)


def test_an_accelerator_fault_during_run_exits_1(base, monkeypatch):
    """README: 0 ok, 1 accelerator fault, 2 bad input — a fault in the middle of `systolica run` is a 1."""
    from systolica.driver.accel import Accelerator
    from systolica.faults import Fault
    from systolica.sim.faults import fault_error

    def fault(self, *a, **k):
        raise fault_error(Fault.DMA_WINDOW, 7, "instruction: LOAD ...")

    monkeypatch.setattr(Accelerator, "run", fault)
    rc, o, e, esc = run_cli(["run", "--model", str(base["gguf"]), *RUN, "hello world"], TIMEOUT_S)
    assert esc is None and rc == 1
    assert e.strip().splitlines()[-1].startswith("accelerator fault: DMA_WINDOW at pc 7")


def test_a_damaged_cached_artifact_is_reported_and_rebuilt(base):
    blob = bytearray(base["art"])
    blob[len(blob) // 2] ^= 0xFF
    r = cached_artifact_case(base, "flip", bytes(blob), True, False)
    assert r.outcome == "ok", r
