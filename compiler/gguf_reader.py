"""GGUF front end: a llama-family GGUF checkpoint becomes a :class:`~systolica.model.Model`.

Hyper-parameters come from the ``{arch}.*`` metadata, the tokenizer from
``tokenizer.ggml.*``, and every tensor is dequantized (``gguf.quants``) to float32.
GGUF lists a tensor's dimensions innermost first (``ne[0]`` is the contiguous one),
so a matrix with ``ne = [in, out]`` is a numpy ``(out, in)`` array: already the
``[out_features, in_features]`` layout of the Model contract.  llama q/k rows in GGUF
are already in the adjacent-pairs RoPE order (the converter permuted them), which is
the Model contract's order too, so nothing is permuted here.

Errors name the file and the field or tensor: :class:`GGUFError` for a truncated or
foreign file, a missing key, an unsupported architecture, variant or tensor type;
shapes are checked with :meth:`Model.check`.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import gguf
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from systolica.model import Model, ModelConfig, ModelError
from systolica.tokenizer import Tokenizer

__all__ = ["read_gguf", "read_gguf_metadata", "GGUFError", "SUPPORTED_TYPES", "ARCHITECTURES"]

GGUF_MAGIC = b"GGUF"
ARCHITECTURES = ("llama",)  # SmolLM, TinyLlama, Llama 2, Mistral conversions all say "llama"
Q = GGMLQuantizationType
SUPPORTED_TYPES = (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1,
                   Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K)
_LLAMA_TENSORS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                  "ffn_down")


class GGUFError(ModelError):
    """A GGUF file that cannot become a Model; the message names the file and the field or tensor."""


# ------------------------------------------------------------------ metadata
def _field_value(field: gguf.ReaderField):
    """A metadata field as a Python value (str, int, float, bool, or a list of them)."""
    t = field.types[0]
    if t == GGUFValueType.ARRAY:
        if len(field.types) > 1 and field.types[1] == GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]
        if len(field.types) > 1 and field.types[1] == GGUFValueType.ARRAY:
            return None  # nested arrays: no llama key uses them
        return [field.parts[i][0].item() for i in field.data]
    if t == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8", errors="replace")
    v = field.parts[field.data[0]][0].item()
    return bool(v) if t == GGUFValueType.BOOL else v


def _open(path: Path) -> gguf.GGUFReader:
    if not path.is_file():
        raise GGUFError(f"{path}: no such file")
    size = path.stat().st_size
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise GGUFError(f"{path}: not a GGUF file (magic {magic!r}, expected {GGUF_MAGIC!r})")
    try:
        return gguf.GGUFReader(path)
    except Exception as e:  # the reader fails with whatever numpy says about a short memmap
        why = _diagnose(path, size)
        raise GGUFError(f"{path}: {why or 'corrupt GGUF file'} ({type(e).__name__}: {e})") from e


def _diagnose(path: Path, size: int) -> str | None:
    """Walk the GGUF layout by hand to name the key or tensor where the file is cut or wrong."""
    scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0

    def take(n: int, what: str) -> bytes:
        nonlocal pos
        if pos + n > len(buf):
            raise EOFError(f"truncated: {what} needs bytes {pos}..{pos + n} but the file has {size} bytes")
        pos += n
        return buf[pos - n:pos]

    def u(fmt: str, what: str) -> int:
        return struct.unpack("<" + fmt, take(struct.calcsize(fmt), what))[0]

    def string(what: str) -> str:
        return take(u("Q", what), what).decode("utf-8", errors="replace")

    def value(t: int, what: str) -> None:
        if t == 8:
            string(what)
        elif t == 9:
            et, n = u("I", what), u("Q", what)
            if et in scalar:
                take(scalar[et] * n, what)
            else:
                for _ in range(n):
                    value(et, what)
        elif t in scalar:
            take(scalar[t], what)
        else:
            raise ValueError(f"{what} has unknown value type {t}")

    try:
        take(4, "magic")
        version = u("I", "version")
        if version not in (2, 3):
            return f"GGUF version {version} is not supported (2 or 3)"
        n_tensors, n_kv = u("Q", "tensor count"), u("Q", "metadata count")
        alignment = 32
        for i in range(n_kv):
            key = string(f"metadata key #{i}")
            t = u("I", f"type of metadata key {key!r}")
            start = pos
            value(t, f"metadata key {key!r}")
            if key == "general.alignment" and t == 4:
                alignment = struct.unpack("<I", buf[start:start + 4])[0]
        infos = []
        for i in range(n_tensors):
            name = string(f"name of tensor #{i}")
            nd = u("I", f"tensor {name!r} header")
            ne = [u("Q", f"tensor {name!r} header") for _ in range(nd)]
            ttype, off = u("I", f"tensor {name!r} header"), u("Q", f"tensor {name!r} header")
            infos.append((name, ne, ttype, off))
        data_start = -(-pos // alignment) * alignment
        for name, ne, ttype, off in infos:
            try:
                block, tsize = GGML_QUANT_SIZES[GGMLQuantizationType(ttype)]
            except (ValueError, KeyError):
                return f"tensor {name!r} has unknown type id {ttype}"
            end = data_start + off + int(np.prod(ne, dtype=np.int64)) // block * tsize
            if end > size:
                return f"truncated: tensor {name!r} data ends at byte {end} but the file has {size} bytes"
    except (EOFError, ValueError) as e:
        return str(e)
    return None


def read_gguf_metadata(path: str | os.PathLike) -> dict:
    """All metadata of a GGUF file as Python values (arrays as lists), without loading tensors."""
    reader = _open(Path(path))
    return {k: _field_value(f) for k, f in reader.fields.items() if not k.startswith("GGUF.")}


# ------------------------------------------------------------------ tensors
def _dequant_simple(raw: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """Q8_0 / Q4_0 / Q4_1 in one vectorized pass (gguf.quants loops over row groups: several times slower).

    Blocks of 32 elements: Q8_0 = f16 d, 32 x int8 q -> q*d; Q4_0 = f16 d, 16 bytes of nibbles (low nibbles
    are elements 0..15, high nibbles 16..31) -> (q-8)*d; Q4_1 = f16 d, f16 m, nibbles -> q*d + m.
    """
    size = GGML_QUANT_SIZES[qtype][1]
    b = np.ascontiguousarray(raw).reshape(-1, size)
    d = b[:, 0:2].copy().view("<f2").astype(np.float32)  # (blocks, 1)
    if qtype == Q.Q8_0:
        return (b[:, 2:].view(np.int8).astype(np.float32) * d).reshape(raw.shape[0], -1)
    start = 2 if qtype == Q.Q4_0 else 4
    nib = b[:, start:start + 16]
    q = np.concatenate([nib & 0x0F, nib >> 4], axis=1).astype(np.float32)  # (blocks, 32)
    if qtype == Q.Q4_0:
        return ((q - 8.0) * d).reshape(raw.shape[0], -1)
    m = b[:, 2:4].copy().view("<f2").astype(np.float32)
    return (q * d + m).reshape(raw.shape[0], -1)


def _dequantize(t: gguf.ReaderTensor, path: Path) -> np.ndarray:
    """One tensor as float32 in numpy order: ``ne`` reversed, so a matrix is (out, in)."""
    qtype = GGMLQuantizationType(t.tensor_type)
    if qtype not in SUPPORTED_TYPES:
        raise GGUFError(f"{path}: tensor {t.name!r} has type {qtype.name}, which systolica does not read; "
                        f"supported: {', '.join(q.name for q in SUPPORTED_TYPES)}")
    shape = tuple(int(d) for d in reversed(t.shape.tolist()))
    if qtype == Q.F32:
        out = np.array(t.data, dtype=np.float32)
    elif qtype == Q.F16:
        out = np.asarray(t.data).astype(np.float32)
    elif qtype in (Q.Q8_0, Q.Q4_0, Q.Q4_1):
        out = _dequant_simple(np.asarray(t.data), qtype)
    else:
        out = gguf.quants.dequantize(np.asarray(t.data), qtype).astype(np.float32, copy=False)
    if out.size != int(np.prod(shape, dtype=np.int64)):
        raise GGUFError(f"{path}: tensor {t.name!r} holds {out.size} values, its shape {shape} needs "
                        f"{int(np.prod(shape))}")
    return out.reshape(shape)


def _model_name(gguf_name: str) -> str | None:
    """``blk.0.attn_q.weight`` -> ``blk.0.attn_q``; ``.bias`` -> ``_b``."""
    if gguf_name.endswith(".weight"):
        return gguf_name[: -len(".weight")]
    if gguf_name.endswith(".bias"):
        return gguf_name[: -len(".bias")] + "_b"
    return None


def _allowed(name: str, n_layers: int) -> bool:
    if name in ("token_embd", "output_norm", "output"):
        return True
    parts = name.split(".")
    return (len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and int(parts[1]) < n_layers
            and parts[2] in _LLAMA_TENSORS)


# ------------------------------------------------------------------ the front end
def read_gguf(path: str | os.PathLike, *, load_tokenizer: bool = True) -> Model:
    """Read a llama-architecture GGUF checkpoint into a checked :class:`Model`.

    Parameters
    ----------
    path : path-like
        The ``.gguf`` file.
    load_tokenizer : bool
        Build the tokenizer from ``tokenizer.ggml.*`` (when the file has one).

    Returns
    -------
    Model
        float32 weights in the Model contract's names and ``[out, in]`` layout; ``metadata``
        holds the source path, ``general.*`` keys and each tensor's GGUF type.

    Raises
    ------
    GGUFError
        Not a GGUF file, truncated, unsupported architecture / RoPE variant / tensor type,
        a required metadata key missing, an unexpected tensor, or a shape that does not
        fit the hyper-parameters (the message names the field or tensor).
    """
    path = Path(path)
    reader = _open(path)
    meta = {k: _field_value(f) for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    if "general.architecture" not in meta:
        raise GGUFError(f"{path}: metadata key 'general.architecture' is missing")
    arch = meta["general.architecture"]
    if arch not in ARCHITECTURES:
        raise GGUFError(f"{path}: unsupported architecture {arch!r} (general.architecture); systolica reads GGUF "
                        f"models of architecture {', '.join(map(repr, ARCHITECTURES))}")

    def key(k: str, default=None, kind=int):
        full = f"{arch}.{k}"
        if full not in meta:
            if default is None:
                raise GGUFError(f"{path}: metadata key {full!r} is missing")
            return default
        v = meta[full]
        if isinstance(v, list):  # per-layer values: fine when they agree
            if len(set(v)) != 1:
                raise GGUFError(f"{path}: metadata key {full!r} differs between layers ({v}); not supported")
            v = v[0]
        return kind(v)

    dim = key("embedding_length")
    n_heads = key("attention.head_count")
    n_kv = key("attention.head_count_kv", n_heads)
    tensors = {t.name: t for t in reader.tensors}
    tokens = meta.get("tokenizer.ggml.tokens")
    embd = tensors.get("token_embd.weight")
    vocab_default = len(tokens) if tokens else (int(embd.shape[1]) if embd is not None else None)
    cfg = ModelConfig(arch="llama", dim=dim, n_layers=key("block_count"), n_heads=n_heads, n_kv_heads=n_kv,
                      ffn_dim=key("feed_forward_length"), vocab_size=key("vocab_size", vocab_default),
                      max_seq=key("context_length", 2048), norm_eps=key("attention.layer_norm_rms_epsilon", 1e-5, float),
                      rope_base=key("rope.freq_base", 10000.0, float), tied_output="output.weight" not in tensors,
                      name=str(meta.get("general.name") or path.stem))
    try:
        cfg.check()
    except ModelError as e:
        raise GGUFError(f"{path}: {e}") from None
    hd = cfg.head_dim
    for k, want in (("rope.dimension_count", hd), ("attention.key_length", hd), ("attention.value_length", hd)):
        got = key(k, want)
        if got != want:
            raise GGUFError(f"{path}: {arch}.{k}={got} but head_dim={want}; partial or uneven heads are not supported")
    scaling = meta.get(f"{arch}.rope.scaling.type", "none")
    if scaling not in ("none", None) and float(meta.get(f"{arch}.rope.scaling.factor", 1.0)) != 1.0:
        raise GGUFError(f"{path}: {arch}.rope.scaling.type={scaling!r} is not supported (plain RoPE only)")

    weights: dict[str, np.ndarray] = {}
    types: dict[str, str] = {}
    for t in reader.tensors:
        name = _model_name(t.name)
        if name is None or not _allowed(name, cfg.n_layers):
            raise GGUFError(f"{path}: unexpected tensor {t.name!r} for architecture {arch!r} "
                            f"(e.g. rope_freqs or biases are not supported)")
        weights[name] = _dequantize(t, path)
        types[name] = GGMLQuantizationType(t.tensor_type).name
    tok = None
    if load_tokenizer and "tokenizer.ggml.model" in meta:
        tok = Tokenizer.from_gguf({k: v for k, v in meta.items() if k.startswith("tokenizer.ggml.")})
    metadata = {"source": str(path), "format": "gguf", "tensor_types": types,
                "general": {k: v for k, v in meta.items() if k.startswith("general.") and not isinstance(v, list)}}
    model = Model(cfg, weights, tokenizer=tok, metadata=metadata)
    try:
        model.check()
    except ModelError as e:
        raise GGUFError(f"{path}: {e}") from None
    return model
