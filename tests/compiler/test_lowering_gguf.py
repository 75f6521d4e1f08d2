"""A GGUF checkpoint (written with the front end's writer) through the compiler to the golden simulator."""

from __future__ import annotations

import pytest
from lowering_harness import GoldenRunner, assert_lockstep

from systolica.artifact import Artifact
from systolica.compiler.compile import compile_model
from systolica.compiler.gguf_reader import read_gguf
from systolica.compiler.writers import write_gguf
from systolica.config import preset
from systolica.reference_quant import QuantRunner, quantize_model
from systolica.testmodels import random_model


@pytest.mark.parametrize("ttype", ["F16", "Q8_0", "Q4_0"])
def test_gguf_checkpoint_bit_exact(tmp_path, ttype):
    src = random_model("llama", dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96, vocab=96, tied=ttype == "Q4_0",
                       max_seq=48, seed=11)
    path = write_gguf(src, tmp_path / "m.gguf", ttype)
    model = read_gguf(path)
    art = compile_model(model, preset("tiny"), page=8, max_seq=48, prefill_chunk=4)
    out = tmp_path / "m.systolica"
    art.save(out)
    art = Artifact.load(out, config=preset("tiny"))  # what the runtime gets
    gold, ref = GoldenRunner(art), QuantRunner(quantize_model(model), page=art.page)
    prompt = [3, 14, 15, 92, 65, 35]
    assert_lockstep(gold, ref, prompt, first=7)


def test_cli_compile_random_model(tmp_path, capsys):
    from systolica.cli import main

    out = tmp_path / "r.systolica"
    rc = main(["compile", "random:llama:dim=32,n_layers=1,n_heads=2,vocab=64,max_seq=32", "--config", "tiny",
               "-o", str(out), "--page", "8"])
    assert rc == 0 and out.is_file()
    text = capsys.readouterr().out
    assert "decode" in text and "prefill" in text and "weight bytes read per decode token" in text
    art = Artifact.load(out)
    assert f"{art.manifest['stats']['decode']['instructions']:,}" in text


def test_cli_compile_for_a_board(tmp_path, capsys):
    """--board takes a board's accelerator configuration (as 'systolica run' does), not only presets."""
    from systolica.boards.board import board_config
    from systolica.cli import main

    out = tmp_path / "b.systolica"
    spec = "random:llama:dim=32,n_layers=1,n_heads=2,vocab=64,max_seq=32"
    assert main(["compile", spec, "--board", "kv260", "-o", str(out)]) == 0
    assert Artifact.load(out).manifest["config_hash"] == board_config("kv260").hash_hex()
    assert main(["compile", spec, "--board", "no-such-board", "-o", str(out)]) == 2
    assert "known boards:" in capsys.readouterr().err


def test_cli_compile_reports_too_large(tmp_path, capsys):
    from systolica.cli import main

    toml = tmp_path / "small.toml"
    toml.write_text(preset("tiny").replace(name="small", dram_bytes=1 << 16).to_toml())
    rc = main(["compile", "random:llama:dim=64,vocab=512,max_seq=64", "--config", str(toml), "-o",
               str(tmp_path / "x.systolica")])
    assert rc == 2
    assert "bytes of DRAM" in capsys.readouterr().err


def test_tokenizer_travels_in_the_artifact(tmp_path):
    import tokenizers
    from tokenizers import pre_tokenizers, trainers
    from tokenizers.models import BPE

    from systolica.tokenizer import Tokenizer

    hf = tokenizers.Tokenizer(BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = tokenizers.decoders.ByteLevel()
    hf.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 4,
                           trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                               show_progress=False))
    hf.save(str(tmp_path / "tokenizer.json"))
    tok = Tokenizer.from_file(tmp_path / "tokenizer.json")
    model = random_model("llama", dim=32, n_layers=1, n_heads=2, vocab=tok.vocab_size, max_seq=16)
    model.tokenizer = tok
    compile_model(model, preset("tiny"), page=8).save(tmp_path / "m.systolica")
    back = Tokenizer.from_dict(Artifact.load(tmp_path / "m.systolica").manifest["tokenizer"])
    text = "the lazy fox"
    assert back.encode(text) == tok.encode(text) and back.decode(tok.encode(text)) == text


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_safetensors_checkpoint_bit_exact(tmp_path, arch):
    from systolica.compiler.safetensors_reader import read_safetensors
    from systolica.compiler.writers import write_safetensors

    src = random_model(arch, dim=40, n_layers=1, n_heads=4, n_kv_heads=2 if arch == "llama" else 4, vocab=70,
                       max_seq=32, seed=12)
    model = read_safetensors(write_safetensors(src, tmp_path / "ckpt", "float16"))
    art = compile_model(model, preset("default"), page=8, max_seq=32, prefill_chunk=4)
    gold, ref = GoldenRunner(art), QuantRunner(quantize_model(model), page=art.page)
    prompt = [1, 2, 3, 4, 5, 6, 7]
    assert_lockstep(gold, ref, prompt, first=9)
