"""Tokenizers of the checkpoints systolica reads, built on the Hugging Face ``tokenizers`` library.

Two sources:

- GGUF metadata (``tokenizer.ggml.*``): ``"gpt2"`` byte-level BPE (tokens + merges,
  pre-tokenizer chosen by ``tokenizer.ggml.pre``) and ``"llama"`` SentencePiece BPE
  (tokens + scores, ``▁`` for spaces, ``<0xXX>`` byte fallback).  The SentencePiece
  scores become BPE merges the way Hugging Face's ``LlamaConverter`` does it: every
  split of a piece into two pieces of the vocabulary is a merge, ranked by the score
  of the merged piece, which is the order llama.cpp merges in.
- A ``tokenizer.json`` file (:meth:`Tokenizer.from_file`).

Decoding goes through the raw bytes of each token (:meth:`Tokenizer.token_bytes`), so
a character whose UTF-8 bytes are split across tokens comes out whole, and the
streaming decoder (:class:`StreamDecoder`) gives, token by token, exactly the text
that :meth:`Tokenizer.decode` gives for the whole sequence.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import tokenizers
from tokenizers import AddedToken, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

__all__ = ["Tokenizer", "StreamDecoder", "TokenizerError", "TOKEN_TYPES"]

# GGUF token types (llama.cpp's llama_token_type)
TOKEN_TYPES = {"normal": 1, "unknown": 2, "control": 3, "user_defined": 4, "unused": 5, "byte": 6}
_SPECIAL_TYPES = (2, 3, 5)  # rendered as nothing when decoding with skip_special
_SPIECE = "\u2581"  # SentencePiece's visible space "▁"

# llama.cpp's pre-tokenizer regexes (llama-vocab.cpp), by the value of tokenizer.ggml.pre
_LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_PRE_GPT2 = ("default", "gpt2", "gpt-2", "mpt", "olmo", "jais")
_PRE_DIGITS = ("smollm", "starcoder", "refact", "codeshell", "command-r", "exaone", "minerva")
_PRE_LLAMA3 = ("llama-bpe", "llama3", "smaug-bpe", "dbrx")


class TokenizerError(ValueError):
    """A tokenizer description that is missing a field or uses an unsupported variant."""


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map of the 256 byte values onto printable characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


_UNICODE_TO_BYTE = {c: b for b, c in _byte_to_unicode().items()}


def _byte_level_bytes(piece: str) -> bytes:
    # a character outside the map (an added token's raw text) stands for its own UTF-8 bytes
    return b"".join(bytes([_UNICODE_TO_BYTE[c]]) if c in _UNICODE_TO_BYTE else c.encode("utf-8") for c in piece)


def _spm_bytes(piece: str, token_type: int) -> bytes:
    if token_type == TOKEN_TYPES["byte"] and len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return bytes([int(piece[3:5], 16)])
    return piece.replace(_SPIECE, " ").encode("utf-8")


def _bpe(vocab: dict[str, int], merges: list[tuple[str, str]], **kw) -> BPE:
    try:
        return BPE(vocab, merges, **kw)
    except TypeError:  # an older tokenizers without ignore_merges
        kw.pop("ignore_merges", None)
        return BPE(vocab, merges, **kw)


def _spm_merges(tokens: Sequence[str], scores: Sequence[float], types: Sequence[int]) -> list[tuple[str, str]]:
    """BPE merges equivalent to SentencePiece-BPE scores: a higher-scoring merged piece merges first."""
    vocab = {t: i for i, t in enumerate(tokens)}
    found = []
    for i, piece in enumerate(tokens):
        if types[i] not in (TOKEN_TYPES["normal"], TOKEN_TYPES["user_defined"]) or len(piece) < 2:
            continue
        for k in range(1, len(piece)):
            a, b = piece[:k], piece[k:]
            if a in vocab and b in vocab:
                found.append((-float(scores[i]), i, vocab[a], vocab[b], a, b))
    found.sort()  # by score (descending), then by piece id and the ids of the halves, like Hugging Face
    return [(f[4], f[5]) for f in found]


class Tokenizer:
    """Text <-> token ids for one model.

    Build one with :meth:`from_gguf` or :meth:`from_file`.  ``encode`` adds BOS when the
    model asks for it; ``decode`` and :meth:`stream` drop control tokens unless told not to.
    """

    def __init__(self, hf: tokenizers.Tokenizer, kind: str, token_bytes: list[bytes], special: set[int],
                 bos_id: int | None, eos_id: int | None, add_bos: bool, strip_leading_space: bool):
        self.hf = hf
        self.kind = kind  # "gpt2" (byte-level BPE) or "llama" (SentencePiece BPE)
        self._bytes = token_bytes
        self.special_ids = frozenset(special)
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.add_bos = add_bos
        self.strip_leading_space = strip_leading_space  # SentencePiece's prefix space is not part of the text

    @property
    def vocab_size(self) -> int:
        return len(self._bytes)

    def __repr__(self) -> str:
        return (f"Tokenizer({self.kind}, vocab={self.vocab_size}, bos={self.bos_id}, eos={self.eos_id}, "
                f"add_bos={self.add_bos})")

    # -------------------------------------------------------------- use
    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        """Token ids of ``text``; BOS first when ``add_bos`` (default: what the model wants)."""
        ids = list(self.hf.encode(text, add_special_tokens=False).ids)
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None:
            ids.insert(0, self.bos_id)
        return ids

    def token_bytes(self, token_id: int, skip_special: bool = True) -> bytes:
        """The raw bytes one token stands for (may be part of a UTF-8 character)."""
        tid = int(token_id)
        if not 0 <= tid < len(self._bytes):
            raise TokenizerError(f"token id {tid} is outside the vocabulary (size {len(self._bytes)})")
        if skip_special and tid in self.special_ids:
            return b""
        return self._bytes[tid]

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """Text of ``ids``; bytes that do not form valid UTF-8 become U+FFFD."""
        text = b"".join(self.token_bytes(i, skip_special) for i in ids).decode("utf-8", errors="replace")
        if self.strip_leading_space and text.startswith(" "):
            text = text[1:]
        return text

    def stream(self, skip_special: bool = True) -> StreamDecoder:
        """A :class:`StreamDecoder` for text that arrives one token at a time."""
        return StreamDecoder(self, skip_special)

    # -------------------------------------------------------------- construction
    def to_dict(self) -> dict:
        """A JSON-able form (stored in compiled artifacts); :meth:`from_dict` rebuilds the tokenizer."""
        return {"kind": self.kind, "bos_id": self.bos_id, "eos_id": self.eos_id, "add_bos": self.add_bos,
                "strip_leading_space": self.strip_leading_space, "hf_json": self.hf.to_str(),
                "token_bytes_hex": [b.hex() for b in self._bytes], "special_ids": sorted(self.special_ids)}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Tokenizer:
        """Rebuild from :meth:`to_dict`'s form, as stored in an artifact's manifest."""
        try:
            return cls(tokenizers.Tokenizer.from_str(str(d["hf_json"])), str(d["kind"]),
                       [bytes.fromhex(h) for h in d["token_bytes_hex"]], {int(i) for i in d["special_ids"]},
                       d.get("bos_id"), d.get("eos_id"), bool(d.get("add_bos")), bool(d.get("strip_leading_space")))
        except (KeyError, TypeError, ValueError, Exception) as e:
            raise TokenizerError(f"stored tokenizer cannot be rebuilt: {type(e).__name__}: {e}") from None

    @classmethod
    def from_gguf(cls, meta: Mapping[str, object]) -> Tokenizer:
        """Build from GGUF ``tokenizer.ggml.*`` metadata (decoded to Python values).

        Raises
        ------
        TokenizerError
            A required key is missing, or the tokenizer model / pre-tokenizer is not supported.
        """
        def need(key: str):
            if key not in meta:
                raise TokenizerError(f"GGUF tokenizer metadata lacks {key!r}")
            return meta[key]

        model = str(need("tokenizer.ggml.model"))
        tokens = [str(t) for t in need("tokenizer.ggml.tokens")]
        n = len(tokens)
        types = [int(t) for t in meta.get("tokenizer.ggml.token_type", [TOKEN_TYPES["normal"]] * n)]
        if len(types) != n:
            raise TokenizerError(f"tokenizer.ggml.token_type has {len(types)} entries, tokenizer.ggml.tokens {n}")
        bos = meta.get("tokenizer.ggml.bos_token_id")
        eos = meta.get("tokenizer.ggml.eos_token_id")
        vocab = {t: i for i, t in enumerate(tokens)}
        if model == "gpt2":
            merges = [tuple(str(m).split(" ", 1)) for m in need("tokenizer.ggml.merges")]
            bad = next((m for m in merges if len(m) != 2), None)
            if bad is not None:
                raise TokenizerError(f"tokenizer.ggml.merges entry {bad[0]!r} is not two tokens separated by a space")
            pre = str(meta.get("tokenizer.ggml.pre", "default"))
            hf = tokenizers.Tokenizer(_bpe(vocab, merges, ignore_merges=pre in _PRE_LLAMA3))
            byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
            if pre in _PRE_GPT2:
                hf.pre_tokenizer = byte_level
            elif pre in _PRE_DIGITS:
                hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
            elif pre in _PRE_LLAMA3:
                hf.pre_tokenizer = pre_tokenizers.Sequence([
                    pre_tokenizers.Split(tokenizers.Regex(_LLAMA3_REGEX), behavior="isolated"),
                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
            else:
                raise TokenizerError(f"tokenizer.ggml.pre={pre!r} is not supported; supported: "
                                     f"{', '.join(_PRE_GPT2 + _PRE_DIGITS + _PRE_LLAMA3)}")
            hf.decoder = decoders.ByteLevel()
            raw = [_byte_level_bytes(t) if ty != TOKEN_TYPES["user_defined"] else t.encode("utf-8")
                   for t, ty in zip(tokens, types, strict=True)]
            add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))
            strip = False
        elif model == "llama":
            scores = [float(s) for s in need("tokenizer.ggml.scores")]
            if len(scores) != n:
                raise TokenizerError(f"tokenizer.ggml.scores has {len(scores)} entries, tokenizer.ggml.tokens {n}")
            unk = next((tokens[i] for i in range(n) if types[i] == TOKEN_TYPES["unknown"]), None)
            hf = tokenizers.Tokenizer(_bpe(vocab, _spm_merges(tokens, scores, types), unk_token=unk,
                                           fuse_unk=True, byte_fallback=True))
            prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
            # llama.cpp puts the prefix space before every run of text that follows a special token; so does
            # a normalizer, which the library applies to each piece of text between added tokens
            steps = [normalizers.Prepend(_SPIECE)] if prefix else []
            hf.normalizer = normalizers.Sequence(steps + [normalizers.Replace(" ", _SPIECE)])
            hf.decoder = decoders.Sequence([decoders.Replace(_SPIECE, " "), decoders.ByteFallback(), decoders.Fuse()]
                                           + ([decoders.Strip(" ", 1, 0)] if prefix else []))
            raw = [_spm_bytes(t, ty) for t, ty in zip(tokens, types, strict=True)]
            add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", True))
            strip = prefix
        else:
            raise TokenizerError(f"tokenizer.ggml.model={model!r} is not supported; supported: 'gpt2', 'llama'")
        special = {i for i, ty in enumerate(types) if ty in _SPECIAL_TYPES}
        control = [AddedToken(tokens[i], special=True, normalized=False) for i in sorted(special)
                   if types[i] == TOKEN_TYPES["control"]]
        user = [AddedToken(tokens[i], normalized=False) for i in range(n) if types[i] == TOKEN_TYPES["user_defined"]]
        if control:
            hf.add_special_tokens(control)
        if user:
            hf.add_tokens(user)
        return cls(hf, model, raw, special, None if bos is None else int(bos), None if eos is None else int(eos),
                   add_bos, strip)

    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer:
        """Build from a Hugging Face ``tokenizer.json``; BOS/EOS come from a ``tokenizer_config.json`` beside it.

        Raises
        ------
        TokenizerError
            The file is missing or is not a tokenizer description.
        """
        path = Path(path)
        try:
            spec = json.loads(path.read_text(encoding="utf-8"))
            hf = tokenizers.Tokenizer.from_str(json.dumps(spec))
        except Exception as e:  # OSError, JSON errors, and the bare Exception the library raises on a bad spec
            raise TokenizerError(f"cannot read tokenizer {path}: {e}") from e
        vocab = hf.get_vocab(with_added_tokens=True)
        n = max(vocab.values()) + 1
        pieces = [""] * n
        for t, i in vocab.items():
            pieces[i] = t
        dec = json.dumps(spec.get("decoder") or {})
        byte_level = '"ByteLevel"' in dec
        kind = "gpt2" if byte_level else "llama"
        added = {a["id"]: a for a in spec.get("added_tokens", [])}
        special = {i for i, a in added.items() if a.get("special")}
        raw = []
        for i, p in enumerate(pieces):
            if i in added:
                raw.append(p.encode("utf-8"))
            elif byte_level:
                raw.append(_byte_level_bytes(p))
            else:
                is_byte = len(p) == 6 and p.startswith("<0x") and p.endswith(">")
                raw.append(_spm_bytes(p, TOKEN_TYPES["byte"] if is_byte else TOKEN_TYPES["normal"]))
        cfg_path = path.with_name("tokenizer_config.json")
        cfg = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.exists() else {}

        def tok_id(key: str, fallbacks: tuple[str, ...]) -> int | None:
            v = cfg.get(key)
            if isinstance(v, dict):
                v = v.get("content")
            for name in ((v,) if v else ()) + fallbacks:
                if name in vocab:
                    return vocab[name]
            return None

        bos = tok_id("bos_token", ("<s>", "<|begin_of_text|>"))
        eos = tok_id("eos_token", ("</s>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>"))
        add_bos = bool(cfg.get("add_bos_token", kind == "llama"))
        strip = '"Strip"' in dec or '"Metaspace"' in dec
        return cls(hf, kind, raw, special, bos, eos, add_bos, strip)


class StreamDecoder:
    """Incremental detokenizer: ``push(token)`` returns the text that token completes.

    Bytes of a UTF-8 character split across tokens are held back until the character is
    whole, so the pieces joined (plus :meth:`flush`) equal ``Tokenizer.decode`` of all tokens.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = True):
        self.tokenizer = tokenizer
        self.skip_special = skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._at_start = tokenizer.strip_leading_space

    def push(self, token_id: int) -> str:
        """Feed one token; return the newly completed text ('' while a character is incomplete)."""
        return self._emit(self._utf8.decode(self.tokenizer.token_bytes(token_id, self.skip_special)))

    def flush(self) -> str:
        """End of stream: an incomplete character left over becomes U+FFFD."""
        return self._emit(self._utf8.decode(b"", final=True))

    def _emit(self, text: str) -> str:
        if self._at_start and text:
            self._at_start = False
            if text.startswith(" "):
                text = text[1:]
        return text
