"""`systolica run` end to end on a small GGUF model with a real (trained) tokenizer: text in, text out."""

from __future__ import annotations

import json

import pytest
import tokenizers
from tokenizers import pre_tokenizers, trainers
from tokenizers.models import BPE

from systolica.cli import main
from systolica.compiler.writers import write_gguf
from systolica.testmodels import random_model

CORPUS = ["the quick brown fox jumps over the lazy dog", "systolic arrays multiply matrices",
          "a token at a time, streaming text", "hello world, hello accelerator"] * 8


@pytest.fixture(scope="module")
def gguf_model(tmp_path_factory):
    tok = tokenizers.Tokenizer(BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
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
    return write_gguf(model, tmp_path_factory.mktemp("m") / "tiny.gguf", fields=fields)


def _run(capsys, path, *extra):
    rc = main(["run", "--model", str(path), "--config", "tiny", "--max-seq", "64", "-n", "6", "--json", *extra,
               "hello world"])
    assert rc == 0
    return json.loads(capsys.readouterr().out)


def test_run_streams_text_and_reuses_the_cached_artifact(gguf_model, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    first = _run(capsys, gguf_model)
    assert first["prompt_tokens"] >= 2 and 1 <= first["generated_tokens"] <= 6
    assert first["compile_s"] > 0 and first["artifact"].startswith(str(tmp_path))
    assert first["decode"]["instrs"] > 0 or first["generated_tokens"] == 1
    second = _run(capsys, gguf_model)
    assert second["compile_s"] == 0  # served from the cache
    assert second["text"] == first["text"]  # greedy and bit-exact: the same text again


def test_run_with_sampling_and_a_table(gguf_model, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    rc = main(["run", "--model", str(gguf_model), "--config", "tiny", "--max-seq", "64", "-n", "4",
               "--temperature", "0.9", "--top-k", "40", "--seed", "1", "hello"])
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("hello") and "generated tokens" in out


def test_run_refuses_a_missing_model_clearly(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    rc = main(["run", "--model", str(tmp_path / "nope.gguf"), "--config", "tiny", "x"])
    assert rc == 2
    assert "does not exist" in capsys.readouterr().err


def test_run_refuses_bad_options_before_compiling(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    rc = main(["run", "--model", str(tmp_path / "never-read.gguf"), "--config", "tiny", "--temperature", "-1", "x"])
    err = capsys.readouterr().err
    assert rc == 2 and "temperature=-1.0 must be >= 0" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exc:
        main(["run", "--config", "tiny", "-n", "0", "x"])
    assert exc.value.code == 2 and "-n/--max-tokens: 0 must be at least 1" in capsys.readouterr().err


def test_run_refuses_a_prompt_longer_than_the_context(gguf_model, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    rc = main(["run", "--model", str(gguf_model), "--config", "tiny", "--max-seq", "16", "-n", "2",
               "hello world " * 20])
    err = capsys.readouterr().err
    assert rc == 2 and "leaves no room in the compiled context of 16" in err and "--max-seq" in err


def test_run_takes_a_compiled_artifact(gguf_model, capsys, tmp_path, monkeypatch):
    """`systolica compile` then `systolica run --model FILE.systolica`: the artifact runs as it is, on the
    configuration it was compiled for, and writes nothing to the cache."""
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path / "cache"))
    art = tmp_path / "tiny.systolica"
    assert main(["compile", str(gguf_model), "--config", "tiny", "--max-seq", "64", "--act-split", "-o", str(art)]) == 0
    capsys.readouterr()
    from_checkpoint = _run(capsys, gguf_model)  # the same options as the compile above (run compiles with act-split)
    cached = sorted((tmp_path / "cache").rglob("*"))
    for extra in ([], ["--config", "tiny"]):  # without --config: the artifact's own configuration
        rc = main(["run", "--model", str(art), "-n", "6", "--json", *extra, "hello world"])
        out = json.loads(capsys.readouterr().out)
        assert rc == 0 and out["config"] == "tiny" and out["compile_s"] == 0 and out["artifact"] == str(art)
        assert out["text"] == from_checkpoint["text"]  # bit-exact: the checkpoint's text
        assert out["array_macs_per_cycle"] == 4 * 4  # the tiny preset's array
        assert out["macs_per_token"] > 32 * 48  # at least the MLP of its one layer (it was reported as 0)
    assert sorted((tmp_path / "cache").rglob("*")) == cached  # nothing compiled, nothing cached


def test_run_with_an_artifact_refuses_another_config_and_compile_options(gguf_model, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path / "cache"))
    art = tmp_path / "tiny.systolica"
    assert main(["compile", str(gguf_model), "--config", "tiny", "--max-seq", "64", "-o", str(art)]) == 0
    capsys.readouterr()
    rc = main(["run", "--model", str(art), "--config", "default", "x"])
    err = capsys.readouterr().err
    assert rc == 2 and f"--model {art}: compiled for config" in err and "leave out --board/--config" in err
    rc = main(["run", "--model", str(art), "--max-seq", "32", "--page", "8", "x"])
    err = capsys.readouterr().err
    assert rc == 2 and "--max-seq, --page are compile options" in err and "Traceback" not in err
    damaged = tmp_path / "damaged.systolica"
    damaged.write_bytes(art.read_bytes()[:-100])
    rc = main(["run", "--model", str(damaged), "x"])
    err = capsys.readouterr().err
    assert rc == 2 and f"--model {damaged}" in err and "Traceback" not in err
