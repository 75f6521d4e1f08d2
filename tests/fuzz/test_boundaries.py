"""Each input class of issue 16 that crashed, hung or passed silently: now exit 2 with one line naming it."""

from __future__ import annotations

import io
import json
import struct
import zipfile

import pytest
from fuzz_harness import _tensor_positions, classify_cli, rezip, run_cli

from systolica.compiler.compile import compile_model
from systolica.compiler.writers import write_gguf
from systolica.config import preset
from systolica.testmodels import random_model

TOKENS = [chr(0x100 + i) if i < 60 else f"t{i}" for i in range(64)]
TOK = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "default", "tokenizer.ggml.tokens": TOKENS,
       "tokenizer.ggml.merges": ["t 1"], "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 1}
MODEL = random_model("llama", dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=48, vocab=64, seed=2, max_seq=64)


def _expect_error(argv, *fragments, timeout=30):
    rc, out, err, esc = run_cli(argv, timeout)
    outcome, line = classify_cli(rc, out, err, esc, must_fail=True)
    assert outcome == "error", (outcome, line, err[-500:])
    for f in fragments:
        assert f in line, (f, line)
    return line


@pytest.mark.parametrize("fields, fragment", [
    ({"tokenizer.ggml.merges": ["zz qq"]}, "tokenizer in tokenizer.ggml.* cannot be built"),
    ({"llama.context_length": "2048"}, "'llama.context_length' is str"),
    ({"llama.attention.layer_norm_rms_epsilon": float("nan")}, "layer_norm_rms_epsilon'=nan is out of range"),
    ({"llama.rope.freq_base": 0.0}, "rope.freq_base'=0.0 is out of range"),
    ({"llama.block_count": 0xFFFF_FFF0}, "'llama.block_count'=4294967280 is out of range"),
    ({"tokenizer.ggml.eos_token_id": 64}, "eos_token_id'=64 is out of range [0, 63]"),
])
def test_gguf_metadata(tmp_path, fields, fragment):
    path = write_gguf(MODEL, tmp_path / "m.gguf", fields={**TOK, **fields})
    _expect_error(["compile", str(path), "-o", str(tmp_path / "o.systolica"), "--config", "tiny"], fragment)


@pytest.mark.parametrize("edit, fragment", [
    ("zero_dims", "has 0 dimensions"),
    ("zero_dim", "has a zero dimension"),
    ("overlap", "data offset"),
    ("huge_dim", "needs more bytes than the file has"),
])
def test_gguf_tensor_infos(tmp_path, edit, fragment):
    path = write_gguf(MODEL, tmp_path / "m.gguf", fields=TOK)
    t = _tensor_positions(path)
    b = bytearray(path.read_bytes())
    if edit == "zero_dims":
        struct.pack_into("<I", b, t[3]["n_dims"][0], 0)
    elif edit == "zero_dim":
        struct.pack_into("<Q", b, t[3]["dims"][0], 0)
    elif edit == "huge_dim":
        struct.pack_into("<Q", b, t[3]["dims"][0], 1 << 62)
    else:
        struct.pack_into("<Q", b, t[3]["offset"][0], struct.unpack_from("<Q", b, t[2]["offset"][0])[0])
    path.write_bytes(bytes(b))
    _expect_error(["compile", str(path), "-o", str(tmp_path / "o.systolica"), "--config", "tiny"], fragment)


@pytest.fixture(scope="module")
def art_bytes():
    return compile_model(MODEL, preset("tiny"), page=16, max_seq=64, prefill_chunk=4).to_bytes()


def _edited(data: bytes, edit) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        members = {n: z.read(n) for n in z.namelist()}
    man = json.loads(members["manifest.json"])
    man = edit(man)
    return rezip(members, man)


def _set(path, value):
    def edit(man):
        d = man
        for k in path[:-1]:
            d = d[k]
        if value is KeyError:
            del d[path[-1]]
        else:
            d[path[-1]] = value
        return man
    return edit


@pytest.mark.parametrize("edit, fragment", [
    (_set(("kv", "page"), 0), "kv.page = 0 is out of range"),
    (_set(("kv", "page"), -16), "kv.page = -16 is out of range"),
    (_set(("regions", 0, "offset"), 1 << 40), "regions[0].offset"),
    (_set(("programs", "decode", "patches", 0, 0), 10 ** 6), "names instruction 1000000"),
    (_set(("kv",), KeyError), "manifest kv is missing"),
    (lambda man: [man], "manifest.json is a list, not an object"),
    (_set(("programs",), {}), "have no 'decode' program"),
    (_set(("dram_top",), 1 << 40), "dram_top = 1099511627776 is out of range"),
])
def test_artifact_manifest(art_bytes, edit, fragment):
    from systolica.artifact import Artifact, ArtifactError

    with pytest.raises(ArtifactError) as e:
        Artifact.from_bytes(_edited(art_bytes, edit), config=preset("tiny"), source="a.systolica")
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_artifact_flipped_byte_and_cut(art_bytes):
    from systolica.artifact import Artifact, ArtifactError

    for bad in (art_bytes[:len(art_bytes) // 2], art_bytes[:100] + bytes([art_bytes[100] ^ 0xFF]) + art_bytes[101:]):
        with pytest.raises(ArtifactError):
            Artifact.from_bytes(bad, config=preset("tiny"))


@pytest.mark.parametrize("opt, value", [
    ("--temperature", "nan"), ("--temperature", "inf"), ("--seed", "-1"), ("--timeout", "0"), ("--timeout", "-1"),
    ("--timeout", "nan"), ("--board", ""), ("--page", "3"), ("--max-seq", "0"),
])
def test_run_arguments(tmp_path, opt, value):
    argv = ["run", "--model", str(tmp_path / "never-read.gguf"), f"{opt}={value}", "x"]
    if opt != "--board":
        argv[1:1] = ["--config", "tiny"]
    _expect_error(argv)


def test_run_prompt_not_utf8(tmp_path):
    _expect_error(["run", "--config", "tiny", "--model", str(tmp_path / "x.gguf"), "a\udcffb"], "not valid UTF-8")


@pytest.mark.parametrize("text, fragment", [
    (b"[accel]\npreset = \"tiny\"\nbogus = 1\n", "unknown field(s) bogus"),
    (b"[accel]\nname = \"\xff\"\n", "not UTF-8 text"),
    (b"[accel]\nclock_mhz = inf\n", "clock_mhz=inf"),
])
def test_config_toml(tmp_path, text, fragment):
    (tmp_path / "c.toml").write_bytes(text)
    _expect_error(["info", "--config", str(tmp_path / "c.toml")], fragment)
