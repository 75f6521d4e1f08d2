"""GGUF front end: a llama-family GGUF checkpoint becomes a :class:`~systolica.model.Model`.

Hyper-parameters come from the ``{arch}.*`` metadata, the tokenizer from
``tokenizer.ggml.*``, and every tensor is dequantized (``gguf.quants``) to float32.
GGUF lists a tensor's dimensions innermost first (``ne[0]`` is the contiguous one),
so a matrix with ``ne = [in, out]`` is a numpy ``(out, in)`` array: already the
``[out_features, in_features]`` layout of the Model contract.  llama q/k rows in GGUF
are already in the adjacent-pairs RoPE order (the converter permuted them), which is
the Model contract's order too, so nothing is permuted here.

Errors name the file and the field or tensor: :class:`GGUFError` for a truncated or
foreign file (the layout is walked and bounded by the file size first, see
:mod:`~systolica.compiler.gguf_layout`), a missing key, a hyper-parameter of the wrong
type, not finite or out of range, a special-token id outside the vocabulary, a tokenizer
that cannot be built, an unsupported architecture, variant or tensor type; shapes are
checked with :meth:`Model.check`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import gguf
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from systolica.model import Model, ModelConfig, ModelError
from systolica.numerics_int4 import Q4Error, from_gguf_blocks
from systolica.tokenizer import Tokenizer

from .gguf_layout import check_layout

__all__ = ["read_gguf", "read_gguf_blocks", "read_gguf_metadata", "GGUFError", "SUPPORTED_TYPES", "ARCHITECTURES"]

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


def _check_magic(path: Path) -> None:
    """:class:`GGUFError` unless ``path`` is a file that starts with the GGUF magic."""
    if not path.is_file():
        raise GGUFError(f"{path}: no such file")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise GGUFError(f"{path}: not a GGUF file (magic {magic!r}, expected {GGUF_MAGIC!r})")


def _open(path: Path) -> gguf.GGUFReader:
    _check_magic(path)
    # The gguf package trusts every count in the file (an array of 2**60 elements loops for hours), so the
    # layout is walked and bounded by the file size first; only a file that passes is handed to it.
    why = check_layout(path)
    if why is not None:
        raise GGUFError(f"{path}: {why}")
    try:
        return gguf.GGUFReader(path)
    except Exception as e:  # noqa: BLE001 - whatever the package says about a file the walk accepted
        raise GGUFError(f"{path}: corrupt GGUF file ({type(e).__name__}: {e})") from e


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


_MAX_HPARAM = 1 << 24  # no width, head count or context of a real model comes near 16 M


def _typed(path: Path, key: str, v, kind, lo, hi):
    """``v`` as ``kind`` (int or float), finite and within ``[lo, hi]``, or a :class:`GGUFError` naming the key."""
    ok = (isinstance(v, int) and not isinstance(v, bool)) or (kind is float and isinstance(v, float))
    if not ok:
        want = "an integer" if kind is int else "a number"
        raise GGUFError(f"{path}: metadata key {key!r} is {type(v).__name__} {v!r:.40}, expected {want}")
    v = kind(v)
    if not math.isfinite(v) or not lo <= v <= hi:
        raise GGUFError(f"{path}: metadata key {key!r}={v} is out of range [{lo}, {hi}]")
    return v


def _check_token_ids(path: Path, meta: dict, vocab_size: int) -> None:
    """Special-token ids must name tokens of the vocabulary (and of the embedding)."""
    tokens = meta.get("tokenizer.ggml.tokens")
    if isinstance(tokens, list) and tokens and len(tokens) != vocab_size:
        raise GGUFError(f"{path}: tokenizer.ggml.tokens has {len(tokens)} tokens, the model's vocabulary "
                        f"{vocab_size}")
    n = vocab_size
    for k in ("bos", "eos", "unknown", "padding", "separator", "eot", "eom"):
        full = f"tokenizer.ggml.{k}_token_id"
        if full in meta:
            _typed(path, full, meta[full], int, 0, n - 1)
    types = meta.get("tokenizer.ggml.token_type")
    if types is not None and isinstance(tokens, list) and (not isinstance(types, list) or len(types) != len(tokens)):
        raise GGUFError(f"{path}: tokenizer.ggml.token_type does not have one entry per token ({len(tokens)})")


# ------------------------------------------------------------------ the front end
def read_gguf(path: str | os.PathLike, *, load_tokenizer: bool = True, layers: int | None = None) -> Model:
    """Read a llama-architecture GGUF checkpoint into a checked :class:`Model`.

    Parameters
    ----------
    path : path-like
        The ``.gguf`` file.
    load_tokenizer : bool
        Build the tokenizer from ``tokenizer.ggml.*`` (when the file has one).
    layers : int, optional
        Read only the first ``layers`` blocks (with the embedding, final norm and output): the model's
        ``config.n_layers`` is then ``min(layers, the file's)`` and ``metadata["file_n_layers"]`` the file's
        block count.  Every tensor name is still checked; only the skipped blocks are not dequantized
        (what a design-space sweep that extrapolates from 1 and 2 blocks reads).

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
    return _to_model(path, meta, reader.tensors, load_tokenizer, layers)


class _Tensor:
    """What :func:`_dequantize` and :func:`_to_model` read of a ``gguf.ReaderTensor``."""

    __slots__ = ("name", "tensor_type", "shape", "data")

    _ITEM = {Q.F16: np.float16, Q.F32: np.float32, Q.F64: np.float64, Q.I8: np.int8, Q.I16: np.int16,
             Q.I32: np.int32, Q.I64: np.int64}  # other types: bytes per row, as the gguf package shapes them

    def __init__(self, mm: np.ndarray, name: str, ne: list[int], ttype: int, begin: int):
        self.name, self.tensor_type = name, GGMLQuantizationType(ttype)
        self.shape = np.array(ne, dtype=np.uint64)
        block, tsize = GGML_QUANT_SIZES[self.tensor_type]
        n = int(np.prod(ne, dtype=np.int64))
        dims = tuple(reversed(ne))
        item = self._ITEM.get(self.tensor_type)
        if item is None:
            item, dims = np.uint8, (*dims[:-1], dims[-1] // block * tsize)
        self.data = mm[begin:begin + n * tsize // block].view(np.dtype(item).newbyteorder("<")).reshape(dims)


def read_gguf_blocks(path: str | os.PathLike, layers: int) -> Model:
    """``read_gguf(path, load_tokenizer=False, layers=layers)``, the same model, from the layout walk
    (:func:`~systolica.compiler.gguf_layout.read_layout`) instead of the ``gguf`` package's reader, which builds a
    numpy view per metadata value (~4 s of SmolLM2's ~4.5 s, for its vocabulary and merges).  For reading a
    model's shape quickly (``systolica dse``); the same checks, tensors from a memory map.

    Raises
    ------
    GGUFError
        As :func:`read_gguf`.
    """
    from .gguf_layout import read_layout

    path = Path(path)
    _check_magic(path)
    why, meta, infos = read_layout(path)
    if why is not None:
        raise GGUFError(f"{path}: {why}")
    mm = np.memmap(path, mode="r")
    return _to_model(path, meta, [_Tensor(mm, *t) for t in infos], False, layers)


def _to_model(path: Path, meta: dict, reader_tensors, load_tokenizer: bool, layers: int | None) -> Model:
    if "general.architecture" not in meta:
        raise GGUFError(f"{path}: metadata key 'general.architecture' is missing")
    arch = meta["general.architecture"]
    if arch not in ARCHITECTURES:
        raise GGUFError(f"{path}: unsupported architecture {arch!r} (general.architecture); systolica reads GGUF "
                        f"models of architecture {', '.join(map(repr, ARCHITECTURES))}")

    def key(k: str, default=None, kind=int, lo=1, hi=_MAX_HPARAM):
        """A hyper-parameter of the right type, finite and in ``[lo, hi]`` (per-layer lists must agree)."""
        full = f"{arch}.{k}"
        if full not in meta:
            if default is None:
                raise GGUFError(f"{path}: metadata key {full!r} is missing")
            return default
        v = meta[full]
        if isinstance(v, list):  # per-layer values: fine when they agree
            if not v or len(set(v)) != 1:
                raise GGUFError(f"{path}: metadata key {full!r} differs between layers ({v[:8]}); not supported")
            v = v[0]
        return _typed(path, full, v, kind, lo, hi)

    tensors = {t.name: t for t in reader_tensors}
    dim = key("embedding_length")
    n_heads = key("attention.head_count")
    n_kv = key("attention.head_count_kv", n_heads)
    # each block has nine tensors: a block count beyond the tensors is a lie (and would make checks spin)
    n_layers = key("block_count", hi=max(1, len(tensors)))
    tokens = meta.get("tokenizer.ggml.tokens")
    if tokens is not None and not isinstance(tokens, list):
        raise GGUFError(f"{path}: tokenizer.ggml.tokens is {type(tokens).__name__}, expected an array of strings")
    embd = tensors.get("token_embd.weight")
    vocab_default = len(tokens) if tokens else (int(embd.shape[1]) if embd is not None else None)
    cfg = ModelConfig(arch="llama", dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv,
                      ffn_dim=key("feed_forward_length"), vocab_size=key("vocab_size", vocab_default),
                      max_seq=key("context_length", 2048),
                      norm_eps=key("attention.layer_norm_rms_epsilon", 1e-5, float, lo=0.0, hi=1.0),
                      rope_base=key("rope.freq_base", 10000.0, float, lo=1.0, hi=1e12),
                      tied_output="output.weight" not in tensors, name=str(meta.get("general.name") or path.stem))
    if cfg.norm_eps <= 0 or cfg.rope_base <= 1:
        raise GGUFError(f"{path}: {arch}.attention.layer_norm_rms_epsilon={cfg.norm_eps} must be > 0 and "
                        f"{arch}.rope.freq_base={cfg.rope_base} > 1")
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
    factor = _typed(path, f"{arch}.rope.scaling.factor", meta.get(f"{arch}.rope.scaling.factor", 1.0), float, 0.0,
                    1e6)
    if scaling not in ("none", None) and factor != 1.0:
        raise GGUFError(f"{path}: {arch}.rope.scaling.type={scaling!r} is not supported (plain RoPE only)")

    file_layers = cfg.n_layers
    if layers is not None:
        if layers < 1:
            raise GGUFError(f"{path}: layers={layers} must be at least 1")
        cfg = dataclasses.replace(cfg, n_layers=min(int(layers), file_layers))
    weights: dict[str, np.ndarray] = {}
    types: dict[str, str] = {}
    q4: dict = {}
    for t in reader_tensors:
        name = _model_name(t.name)
        if name is None or not _allowed(name, file_layers):
            raise GGUFError(f"{path}: unexpected tensor {t.name!r} for architecture {arch!r} "
                            f"(e.g. rope_freqs or biases are not supported)")
        if not _allowed(name, cfg.n_layers):
            continue  # a block past ``layers``
        weights[name] = _dequantize(t, path)
        types[name] = GGMLQuantizationType(t.tensor_type).name
        if types[name] in ("Q4_0", "Q4_1") and weights[name].ndim == 2:  # keep the codes: --weights int4
            try:
                q4[name] = from_gguf_blocks(np.asarray(t.data), types[name], weights[name].shape, t.name)
            except Q4Error as e:
                raise GGUFError(f"{path}: {e}") from None
    _check_token_ids(path, meta, cfg.vocab_size)
    tok = None
    if load_tokenizer and "tokenizer.ggml.model" in meta:
        try:
            tok = Tokenizer.from_gguf({k: v for k, v in meta.items() if k.startswith("tokenizer.ggml.")})
        except Exception as e:  # noqa: BLE001 - the BPE builder raises a bare Exception on a bad token or merge
            raise GGUFError(f"{path}: the tokenizer in tokenizer.ggml.* cannot be built: "
                            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
    metadata = {"source": str(path), "format": "gguf", "tensor_types": types,
                "general": {k: v for k, v in meta.items() if k.startswith("general.") and not isinstance(v, list)}}
    if layers is not None:
        metadata["file_n_layers"] = file_layers
    model = Model(cfg, weights, tokenizer=tok, metadata=metadata, q4=q4)
    try:
        model.check()
    except ModelError as e:
        raise GGUFError(f"{path}: {e}") from None
    return model
