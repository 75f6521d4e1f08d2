"""The byte layout of a GGUF file, walked before the ``gguf`` package reads it.

The package trusts every count in the file: an array that claims 2**60 elements makes
its reader loop for hours, a tensor with a zero or absurd dimension makes the later
checks spin.  :func:`check_layout` walks header, metadata and tensor infos with the
package's own value and tensor types, checking each count against the bytes left
before trusting it, so its work and memory are proportional to the file size; it
also checks what ggml's reader checks: 1..4 dimensions, none zero, whole blocks of
the tensor type, data in info order, each aligned, inside the file and not overlapping.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

import gguf
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

__all__ = ["check_layout", "read_layout"]

_SCALAR_DTYPES = {t: np.dtype(d).newbyteorder("<") for t, d in gguf.GGUFReader.gguf_scalar_to_np.items()}
_SCALAR_BYTES = {t: d.itemsize for t, d in _SCALAR_DTYPES.items()}
_MAX_DIMS = 4  # GGML_MAX_DIMS


def check_layout(path: Path) -> str | None:
    """Walk the GGUF layout (types from the ``gguf`` package) and say what is cut or wrong, else None.

    Every count is checked against the bytes left before it is trusted, so the walk does work and
    allocation proportional to the file size: tensor extents lie inside the file and do not overlap.
    """
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        return _walk(memoryview(mm))


def read_layout(path: Path) -> tuple[str | None, dict, list[tuple[str, list[int], int, int]]]:
    """:func:`check_layout`'s walk, keeping what it reads: ``(problem or None, metadata, tensors)``.

    ``metadata`` maps every key to its value as ``gguf_reader`` gives it (``str``, ``int``, ``float``, ``bool``,
    lists of them; ``None`` for a nested array); ``tensors`` are ``(name, ne, type id, first byte in the file)``
    in info order.  One pass in Python over the bytes (a 49k-token vocabulary in ~0.3 s), where the ``gguf``
    package builds a numpy view per value (~4 s).
    """
    meta: dict = {}
    tensors: list = []
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        why = _walk(memoryview(mm), meta, tensors)
    return why, meta, tensors


def _walk(buf: memoryview, meta: dict | None = None, tensors: list | None = None) -> str | None:
    """The walk; with ``meta`` and ``tensors`` it also decodes every value and keeps each tensor's extent."""
    size = len(buf)
    pos = 0
    keep = meta is not None

    def take(n: int, what: str) -> memoryview:
        nonlocal pos
        if n < 0 or pos + n > size:
            raise _Bad(f"truncated: {what} needs bytes {pos}..{pos + n} but the file has {size} bytes")
        pos += n
        return buf[pos - n:pos]

    def u(fmt: str, what: str) -> int:
        return struct.unpack("<" + fmt, take(struct.calcsize(fmt), what))[0]

    def string(what: str) -> str:
        raw = bytes(take(u("Q", what), what))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad(f"{what} is not valid UTF-8 ({raw[:40]!r})") from None

    def vtype(code: int, what: str) -> GGUFValueType:
        try:
            return GGUFValueType(code)
        except ValueError:
            raise _Bad(f"{what} has unknown value type {code}") from None

    def value(t: GGUFValueType, what: str, depth: int = 0):
        """Step over one value; when keeping, return it as ``gguf_reader._field_value`` would."""
        if t == GGUFValueType.STRING:
            raw = take(u("Q", what), what)
            return bytes(raw).decode("utf-8", errors="replace") if keep else None
        if t == GGUFValueType.ARRAY:
            et, n = vtype(u("I", what), what), u("Q", what)
            if et in _SCALAR_BYTES:
                raw = take(_SCALAR_BYTES[et] * n, f"{what} ({n} elements)")
                return np.frombuffer(raw, _SCALAR_DTYPES[et]).tolist() if keep else None
            if depth > 0 or et == GGUFValueType.ARRAY:
                raise _Bad(f"{what} is a nested array; GGUF metadata of llama models has none")
            # strings: at least their 8-byte length each
            if n * 8 > size - pos:
                raise _Bad(f"truncated: {what} claims {n} strings, the file has {size - pos} bytes left")
            out = [value(et, what, depth + 1) for _ in range(n)]
            return out if keep else None
        raw = take(_SCALAR_BYTES[t], what)
        if not keep:
            return None
        v = np.frombuffer(raw, _SCALAR_DTYPES[t])[0].item()
        return bool(v) if t == GGUFValueType.BOOL else v

    try:
        take(4, "magic")
        version = u("I", "version")
        if version not in (2, 3):
            return f"GGUF version {version} is not supported (2 or 3)"
        n_tensors, n_kv = u("Q", "tensor count"), u("Q", "metadata count")
        # the loops below are bounded by the file: each key takes >= 12 bytes and each tensor info >= 24,
        # or the walk stops at the first one cut short
        alignment = 32
        keys: set[str] = set()
        for i in range(n_kv):
            key = string(f"metadata key #{i}")
            if key in keys:
                return f"metadata key {key!r} appears twice"
            keys.add(key)
            t = vtype(u("I", f"type of metadata key {key!r}"), f"metadata key {key!r}")
            start = pos
            v = value(t, f"metadata key {key!r}")
            if keep:
                meta[key] = v
            if key == "general.alignment":
                if t != GGUFValueType.UINT32:
                    return f"general.alignment has type {t.name}, expected UINT32"
                alignment = struct.unpack("<I", buf[start:start + 4])[0]
                if alignment == 0 or alignment & (alignment - 1):
                    return f"general.alignment={alignment} is not a power of two"
        infos = []
        names: set[str] = set()
        for i in range(n_tensors):
            name = string(f"name of tensor #{i}")
            if name in names:
                return f"tensor {name!r} appears twice"
            names.add(name)
            nd = u("I", f"tensor {name!r} header")
            if not 1 <= nd <= _MAX_DIMS:
                return f"tensor {name!r} has {nd} dimensions (1..{_MAX_DIMS} allowed)"
            ne = [u("Q", f"tensor {name!r} header") for _ in range(nd)]
            ttype, off = u("I", f"tensor {name!r} header"), u("Q", f"tensor {name!r} header")
            infos.append((name, ne, ttype, off))
        data_start = -(-pos // alignment) * alignment
        extents = []
        expected = 0  # GGUF (and ggml's reader) lays tensor data out in info order, each aligned
        for name, ne, ttype, off in infos:
            try:
                qtype = GGMLQuantizationType(ttype)
                block, tsize = GGML_QUANT_SIZES[qtype]
            except (ValueError, KeyError):
                return f"tensor {name!r} has unknown type id {ttype}"
            if any(d == 0 for d in ne):
                return f"tensor {name!r} has a zero dimension {ne}"
            if ne[0] % block:
                return f"tensor {name!r}: {ne[0]} elements per row are not whole {qtype.name} blocks of {block}"
            n_elems = 1
            for d in ne:  # Python ints: no overflow, and bounded by the file size at each step
                n_elems *= d
                if n_elems // block * tsize > size:
                    return f"tensor {name!r} of shape {ne} needs more bytes than the file has ({size})"
            if off % alignment:
                return f"tensor {name!r} data offset {off} is not aligned to {alignment}"
            if off != expected:
                return (f"tensor {name!r} data offset {off}, expected {expected} (tensor data follows the tensor "
                        "infos in order, each aligned)")
            expected = -(-(off + n_elems // block * tsize) // alignment) * alignment
            begin, end = data_start + off, data_start + off + n_elems // block * tsize
            if end > size:
                return f"truncated: tensor {name!r} data ends at byte {end} but the file has {size} bytes"
            extents.append((begin, end, name))
            if keep:
                tensors.append((name, ne, ttype, begin))
        extents.sort()
        for (_b0, e0, n0), (b1, _e1, n1) in zip(extents, extents[1:], strict=False):
            if b1 < e0:
                return f"tensors {n0!r} and {n1!r} overlap (bytes {b1}..{e0})"
    except _Bad as e:
        return str(e)
    finally:
        buf.release()
    return None


class _Bad(Exception):
    """Internal: what the layout walk found wrong."""
