"""Tokenizers from GGUF metadata and tokenizer.json: encode, decode, streaming, errors, the real model's."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import tokenizers
from tokenizers import pre_tokenizers, trainers
from tokenizers.models import BPE

from systolica.compiler.gguf_reader import read_gguf, read_gguf_metadata
from systolica.compiler.model_zoo import locate_default_model
from systolica.compiler.writers import write_gguf
from systolica.testmodels import random_model
from systolica.tokenizer import TOKEN_TYPES, Tokenizer, TokenizerError

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, there was a little girl named Lily. She liked to play in the park with her friends.",
    "In 2024 the accelerator ran 135 million parameters at 250 MHz; the year before it ran 42 million.",
    "Systolic arrays stream weights through a grid of multiply-accumulate cells, one hop per cycle.",
    "the then these those there their them they this that with without within while which where when",
] * 4
SAMPLES = ["The fox jumps over the lazy dog in 2024!", "  leading spaces and\ttabs\nnew lines  ",
           "café naïve — 日本語 🙂 end", "x", "", "ünïcödé: Ωμέγα"]


@pytest.fixture(scope="module")
def trained_bpe() -> tokenizers.Tokenizer:
    """A small byte-level BPE (GPT-2 style) trained here, standing in for a checkpoint's tokenizer."""
    tok = tokenizers.Tokenizer(BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=["<|endoftext|>", "<|im_start|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def _gguf_fields(tok: tokenizers.Tokenizer, pre: str = "default") -> dict:
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    special = {a["content"] for a in spec["added_tokens"]}
    types = [TOKEN_TYPES["control"] if t in special else TOKEN_TYPES["normal"] for t in tokens]
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.merges": merges, "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 0}


def test_gpt2_bpe_from_gguf_matches_library(trained_bpe):
    tok = Tokenizer.from_gguf(_gguf_fields(trained_bpe))
    assert tok.kind == "gpt2" and tok.vocab_size == trained_bpe.get_vocab_size() and not tok.add_bos
    for s in SAMPLES + CORPUS[:5]:
        ids = tok.encode(s)
        assert ids == trained_bpe.encode(s).ids, s
        assert tok.decode(ids) == s == trained_bpe.decode(ids)
    assert tok.encode("<|im_start|>the") == [1] + trained_bpe.encode("the").ids  # control tokens are matched whole
    assert tok.decode([1, *tok.encode("hi"), 0]) == "hi"  # ...and not rendered
    assert tok.decode([1, *tok.encode("hi")], skip_special=False) == "<|im_start|>hi"
    assert tok.encode("hi", add_bos=True)[0] == 0


def test_gpt2_digits_pre_tokenizer(trained_bpe):
    """tokenizer.ggml.pre='smollm' splits every digit (llama.cpp's \\p{N} rule); 'default' does not."""
    plain = Tokenizer.from_gguf(_gguf_fields(trained_bpe, "default"))
    digits = Tokenizer.from_gguf(_gguf_fields(trained_bpe, "smollm"))
    s = "In 2024 it ran 135 million"
    d_ids = digits.encode(s)
    assert digits.decode(d_ids) == s
    pieces = [digits.decode([i]) for i in d_ids]
    assert {"2", "0", "4", "1", "3", "5"} <= set(pieces)
    assert all(not (any(c.isdigit() for c in p) and len(p.strip()) > 1) for p in pieces)
    assert len(plain.encode(s)) < len(d_ids)  # the trained vocabulary has multi-digit tokens


def _train_spm_vocab() -> tuple[list[str], list[float], list[int]]:
    """A SentencePiece-style vocabulary: specials, 256 byte tokens, characters, then merged pieces by score."""
    words = Counter()
    for line in CORPUS:
        for w in line.split(" "):
            words[tuple("\u2581" + w)] += 1
    chars = sorted({c for w in words for c in w})
    pieces: list[str] = []
    for _ in range(150):  # greedy BPE training: the most frequent adjacent pair becomes a piece
        pairs = Counter()
        for w, n in words.items():
            for a, b in zip(w, w[1:], strict=False):
                pairs[a, b] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        pieces.append(a + b)
        merged = Counter()
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == (a, b):
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [TOKEN_TYPES["unknown"], TOKEN_TYPES["control"], TOKEN_TYPES["control"]] + [TOKEN_TYPES["byte"]] * 256
    scores = [0.0] * len(tokens)
    for i, p in enumerate(pieces):  # earlier merges score higher, as in SentencePiece
        tokens.append(p)
        scores.append(-float(i))
        types.append(TOKEN_TYPES["normal"])
    for i, c in enumerate(chars):
        if c not in tokens:
            tokens.append(c)
            scores.append(-1000.0 - i)
            types.append(TOKEN_TYPES["normal"])
    return tokens, scores, types


def _spm_oracle(text: str, tokens: list[str], scores: list[float], types: list[int]) -> list[int]:
    """llama.cpp's SentencePiece tokenizer, naively: merge the best-scoring adjacent pair (leftmost on ties)."""
    vocab = {t: i for i, t in enumerate(tokens) if types[i] in (TOKEN_TYPES["normal"], TOKEN_TYPES["user_defined"])}
    syms = list(("\u2581" + text.replace(" ", "\u2581")) if text else "")
    while True:
        best = None
        for i in range(len(syms) - 1):
            p = syms[i] + syms[i + 1]
            if p in vocab and (best is None or scores[vocab[p]] > best[0]):
                best = (scores[vocab[p]], i)
        if best is None:
            break
        i = best[1]
        syms[i:i + 2] = [syms[i] + syms[i + 1]]
    ids = []
    for s in syms:
        ids.extend([vocab[s]] if s in vocab else [tokens.index(f"<0x{b:02X}>") for b in s.encode("utf-8")])
    return ids


@pytest.fixture(scope="module")
def spm() -> tuple[Tokenizer, list[str], list[float], list[int]]:
    tokens, scores, types = _train_spm_vocab()
    meta = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.scores": scores,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2}
    return Tokenizer.from_gguf(meta), tokens, scores, types


def test_spm_matches_llama_cpp_algorithm(spm):
    tok, tokens, scores, types = spm
    assert tok.kind == "llama" and tok.add_bos and tok.bos_id == 1
    for s in SAMPLES + CORPUS[:5] + ["the there then", "zebra Zebra ZEBRA"]:
        ids = tok.encode(s, add_bos=False)
        assert ids == _spm_oracle(s, tokens, scores, types), s
        assert tok.decode(ids) == s == tok.hf.decode(ids)
        assert tok.encode(s) == [1] + ids
    ids = tok.encode("é", add_bos=False)  # not in the vocabulary: byte fallback, two UTF-8 bytes
    assert [tokens[i] for i in ids] == ["\u2581", "<0xC3>", "<0xA9>"]


@pytest.mark.parametrize("which", ["gpt2", "llama"])
def test_stream_decoder_holds_split_characters(which, trained_bpe, spm):
    tok = Tokenizer.from_gguf(_gguf_fields(trained_bpe)) if which == "gpt2" else spm[0]
    text = "Grüße, 日本語 🙂 the end"
    ids = tok.encode(text)
    st = tok.stream()
    pieces = [st.push(i) for i in ids]
    tail = st.flush()
    assert "".join(pieces) + tail == tok.decode(ids) == text
    assert "" in pieces  # a multi-byte character split across tokens waited for its last byte
    assert not any("\ufffd" in p for p in pieces)


def test_stream_decoder_any_ids(trained_bpe, spm):
    """For arbitrary id sequences (broken UTF-8 included) the stream equals decode, specials and all."""
    import random
    rng = random.Random(0)
    for tok in (Tokenizer.from_gguf(_gguf_fields(trained_bpe)), spm[0]):
        for skip in (True, False):
            for _ in range(30):
                ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randrange(1, 12))]
                st = tok.stream(skip_special=skip)
                assert "".join(st.push(i) for i in ids) + st.flush() == tok.decode(ids, skip_special=skip)


def test_tokenizer_json(tmp_path, trained_bpe, spm):
    trained_bpe.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>", "add_bos_token": False}))
    tok = Tokenizer.from_file(tmp_path / "tokenizer.json")
    assert tok.kind == "gpt2" and tok.eos_id == 0 and not tok.add_bos
    for s in SAMPLES:
        assert tok.encode(s) == trained_bpe.encode(s).ids
        assert tok.decode(tok.encode(s)) == s
    d = tmp_path / "spm"
    d.mkdir()
    (d / "tokenizer.json").write_text(spm[0].hf.to_str())
    tok2 = Tokenizer.from_file(d / "tokenizer.json")
    assert tok2.kind == "llama" and tok2.bos_id == 1 and tok2.eos_id == 2 and tok2.add_bos
    for s in SAMPLES:
        assert tok2.encode(s) == spm[0].encode(s)
        assert tok2.decode(tok2.encode(s)) == s
    (d / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="cannot read tokenizer"):
        Tokenizer.from_file(d / "tokenizer.json")


def test_tokenizer_travels_in_gguf(tmp_path, trained_bpe):
    fields = _gguf_fields(trained_bpe)
    model = random_model("llama", dim=32, n_layers=1, n_heads=2, vocab=len(fields["tokenizer.ggml.tokens"]), seed=0)
    m = read_gguf(write_gguf(model, tmp_path / "m.gguf", fields=fields))
    assert isinstance(m.tokenizer, Tokenizer)
    assert m.tokenizer.encode(SAMPLES[0]) == trained_bpe.encode(SAMPLES[0]).ids
    assert read_gguf(tmp_path / "m.gguf", load_tokenizer=False).tokenizer is None


def test_tokenizer_survives_the_artifact_round_trip(trained_bpe, spm):
    for tok in (Tokenizer.from_gguf(_gguf_fields(trained_bpe)), spm[0]):
        back = Tokenizer.from_dict(json.loads(json.dumps(tok.to_dict())))
        for s in SAMPLES:
            assert back.encode(s) == tok.encode(s)
            assert back.decode(tok.encode(s)) == tok.decode(tok.encode(s))
        assert (back.bos_id, back.eos_id, back.add_bos, back.kind) == (tok.bos_id, tok.eos_id, tok.add_bos, tok.kind)
    with pytest.raises(TokenizerError, match="cannot be rebuilt"):
        Tokenizer.from_dict({"kind": "gpt2"})


def test_tokenizer_errors(trained_bpe):
    fields = _gguf_fields(trained_bpe)
    with pytest.raises(TokenizerError, match="tokenizer.ggml.model='rwkv' is not supported"):
        Tokenizer.from_gguf(dict(fields, **{"tokenizer.ggml.model": "rwkv"}))
    with pytest.raises(TokenizerError, match="tokenizer.ggml.pre='qwen9' is not supported"):
        Tokenizer.from_gguf(dict(fields, **{"tokenizer.ggml.pre": "qwen9"}))
    with pytest.raises(TokenizerError, match="lacks 'tokenizer.ggml.merges'"):
        Tokenizer.from_gguf({k: v for k, v in fields.items() if k != "tokenizer.ggml.merges"})
    with pytest.raises(TokenizerError, match="token_type has 3 entries, tokenizer.ggml.tokens 420"):
        Tokenizer.from_gguf(dict(fields, **{"tokenizer.ggml.token_type": [1, 1, 1]}))
    tok = Tokenizer.from_gguf(fields)
    with pytest.raises(TokenizerError, match="token id 420 is outside the vocabulary"):
        tok.decode([420])


# ------------------------------------------------------------------ the real model's tokenizer
@pytest.mark.slow
def test_real_model_tokenizer():
    path = locate_default_model()
    if path is None:
        pytest.skip("default model not cached; run: python -m systolica.compiler.model_zoo fetch")
    meta = read_gguf_metadata(path)
    tok = Tokenizer.from_gguf({k: v for k, v in meta.items() if k.startswith("tokenizer.ggml.")})
    assert (tok.kind, tok.vocab_size, tok.bos_id, tok.eos_id, tok.add_bos) == ("gpt2", 49152, 1, 2, False)
    s = "Hello world! In 2024 the café served 日本語 tea."
    ids = tok.encode(s)
    assert tok.decode(ids) == s
    assert [tok.decode([i]) for i in tok.encode("2024")] == ["2", "0", "2", "4"]
    assert tok.encode("<|im_start|>user") == [1, 4093]
    assert tok.decode([1, 4093, 2]) == "user"
