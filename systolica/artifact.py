"""The compiled-model artifact: one versioned file the runtime loads, and the per-step patching.

File format (a zip archive, ``.systolica``)::

    manifest.json        format name and version, accelerator config and hash, model metadata,
                         tokenizer, page size, KV layout, DRAM regions, where each matrix lies in the
                         weight-stream region (``weights``), programs and patch tables
    programs/<kind>.bin  systolica.program binaries ("decode"; "prefill", "prefill_nohead"), stamped with
                         the config hash
    image.bin            the initialised DRAM image (weights and tables), byte 0 = window offset 0

Everything after the image (KV cache, logits, program regions) starts as zeros; the runtime
copies the patched program words into their region before each start.

Per-step patching (no recompilation): every program carries a patch table of
``[instruction index, field, kind, args]``.  :meth:`Artifact.patched_program` evaluates each
kind against a :class:`StepState` (first position, token ids of the rows, block table) and
rewrites the field in place.  A program of ``rows`` rows whose manifest entry has ``min_rows``
runs any ``n`` rows from ``min_rows`` to ``rows`` (``n`` = the number of token ids): the rows past
``n`` do nothing.  Kinds (``n``: the step's rows; ``pos``: its first position):

================  =====================  ==================================================
kind              args                   value
================  =====================  ==================================================
embed             [row]                  token_embd + token[row] * row bytes (row >= n: token 0)
pos_embd          []                     pos_embd + pos * row bytes (GPT-2)
rope              []                     rope + pos * row bytes
kv_store          [layer, row, part, b]  page of ``pos+row`` (block table) + part + slot * b (row >= n: KV base)
kv_page           [layer, page, head]    KV tile of that page and head if the context fills the page, else KV base
kv_rows           [page]                 1 if the context fills the page else 0 (its LOAD: whole tile or nothing)
kv_tail           [layer, head, b]       KV tile of the tail (the page the context ends in, if partly filled) + b
                                         bytes; no tail: KV base
kv_tail_lines     [first, per]           first + per * t (t: the tail's tokens; no tail: 0): the lines of a LOAD
                                         of the tail's valid tokens only
attn_t            [row, page]            valid tokens of the page for the row's query if the context fills the
                                         page, else 0 (no-op: the tail's come from attn_tail_t)
attn_offset       [row, page]            t - 1 (query position minus the page's first position, capped at the
                                         last valid token: the same mask, and a full page's word stays put)
attn_nq           [row, page, nq]        nq if row < n and t > 0, else 0 (no-op)
attn_tail_t       [row]                  the row's valid tokens of the tail (no tail: 0, a no-op)
attn_tail_offset  [row]                  t - 1, as attn_offset
attn_tail_nq      [row, nq]              nq if row < n and attn_tail_t > 0, else 0
attn_tail_init    [row]                  1 if the tail is page 0 (its ATTN starts the state) else 0
n_rows            [base, per_row]        base + per_row * n (row counts, GEMM m, addresses after n rows)
last_row          [base, per_row]        base + per_row * (n - 1) (the row the logits are computed from)
row_on            [row, value, per_row]  value if row < per_row * n else 0 (the instructions of one row)
pos_embd_at       [row]                  pos_embd + (the row's position) * row bytes (batched programs)
rope_at           [row]                  rope + (the row's position) * row bytes (batched programs)
kv_page_at        [layer, row, page, h]  kv_page of the row's page and head h by its context (batched)
kv_rows_at        [row, page]            kv_rows by the row's context (batched)
kv_tail_at        [layer, row, h, b]     kv_tail of the row's tail (batched)
kv_tail_lines_at  [row, first, per]      kv_tail_lines of the row's tail (batched)
================  =====================  ==================================================

In a batched program (``decode_batch``, manifest ``"batched": true``) each row is its own sequence:
``StepState.rows`` gives each row's position and block table, and ``kv_store``, ``attn_*`` read the row's.
"The context" is the step's tokens in the KV cache (its first position + ``n``) in a one-sequence program, each
row's (its position + 1) in a batched one.
"""

from __future__ import annotations

import io
import json
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from systolica.artifact_check import check_manifest
from systolica.artifact_patch import PatchedImage
from systolica.config import AccelConfig
from systolica.isa import OP_BY_NAME, OPCODE_BITS
from systolica.program import Program

__all__ = ["FORMAT", "FORMAT_VERSION", "Artifact", "ArtifactError", "StepState", "base_state"]

FORMAT = "systolica-artifact"
#: 5: the tiles of the pages the context fills are LOADed whole, the page it ends in (the tail) last, in three LOADs
#: of its valid tokens only (``kv_tail*``, ``attn_tail_*``); version 4 LOADed every page it reached whole.
#: 4: ``attn_offset`` is ``t - 1`` (the same causal mask as the query position, and a full page's ATTN word no longer
#: changes from step to step).  3: prefill programs run any number of rows up to theirs (``min_rows``; patch kinds ``n_rows``, ``last_row``,
#: ``row_on``), ATTN of a page no row sees is emptied (``attn_nq``), and a ``prefill_nohead`` program fills the
#: KV cache without the logits.  2: weights in the weight-stream layout (one ``weights`` region, the manifest's
#: ``weights`` table) and every matmul a GEMM_STREAM; version 1 kept a row-major copy per matrix and LOADed its
#: tiles into the scratchpad.
FORMAT_VERSION = 5


class ArtifactError(ValueError):
    """An artifact that cannot be used (bad file, other version or config), or a bad step state."""


@dataclass(frozen=True)
class StepState:
    """What changes from one run of a program to the next.

    Attributes
    ----------
    pos : int
        Position of the first row (tokens already in the KV cache).
    tokens : sequence of int
        Token ids of the rows: as many as the program has rows, or from its ``min_rows`` up to that.
    block_table : sequence of int
        Physical KV page of each logical page ``0 .. ceil((pos + rows) / page) - 1``.
    rows : sequence of (int, sequence of int), optional
        A batched program's rows (``decode_batch``): each row is a sequence of its own, at its own position with
        its own block table (``pos`` and ``block_table`` are then unused).  ``None``: the rows are consecutive
        positions of one sequence (prefill, decode).
    """

    pos: int
    tokens: Sequence[int]
    block_table: Sequence[int]
    rows: Sequence[tuple[int, Sequence[int]]] | None = None

    def row_pos(self, row: int) -> int:
        """Position of ``row`` (a batched row past the run's rows: 0)."""
        if self.rows is None:
            return self.pos + row
        return int(self.rows[row][0]) if row < len(self.rows) else 0

    def row_table(self, row: int) -> Sequence[int]:
        if self.rows is None:
            return self.block_table
        return self.rows[row][1] if row < len(self.rows) else ()


def base_state(kind: str, rows: int, page: int) -> StepState:
    """The step whose values a compiled program's words hold: position 0, token 0 in every row (a batched
    program: every row its own sequence at position 0, row ``r`` on physical page ``r``)."""
    if kind == "decode_batch":
        return StepState(0, [0] * rows, [], rows=[(0, [r]) for r in range(rows)])
    return StepState(0, [0] * rows, list(range(-(-rows // page))))


def _read_zip(data: bytes, source: str) -> tuple[object, dict[str, bytes]]:
    """The parsed manifest and the other members of the archive, each checked against its CRC.

    Members are read only when the sizes in the archive's directory fit what the file could hold
    (a stored or deflated member of a 30 kB archive cannot honestly unpack to a terabyte).
    """
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise ArtifactError(f"{source}: not a systolica artifact (not a zip archive)") from None
    with z:
        infos = {i.filename: i for i in z.infolist()}
        if "manifest.json" not in infos:
            raise ArtifactError(f"{source}: no manifest.json inside: not a systolica artifact")
        for i in infos.values():
            # deflate expands at most ~1032x; an artifact's members are never bigger than that
            if i.file_size > max(1032 * i.compress_size, 1 << 16) or i.compress_size > len(data):
                raise ArtifactError(f"{source}: member {i.filename} claims {i.file_size} bytes from "
                                    f"{i.compress_size}: damaged archive; recompile it with `systolica compile`")
        members = {name: z.read(name) for name in infos}
    try:
        man = json.loads(members.pop("manifest.json"))
    except ValueError as e:
        raise ArtifactError(f"{source}: manifest.json is not valid JSON ({e})") from None
    return man, members


def _field_value(word: int, op: str, field: str) -> int | None:
    """Unsigned value of ``field`` in an instruction word of ``op`` (None if the op has no such field)."""
    for f, lo in OP_BY_NAME[op].layout():
        if f.name == field:
            return (int(word) >> lo) & ((1 << f.bits) - 1)
    return None


def _field_bits(op: str, field: str) -> tuple[int, int, bool]:
    for f, lo in OP_BY_NAME[op].layout():
        if f.name == field:
            return lo, f.bits, f.signed
    raise ArtifactError(f"patch names field {field!r}, which {op} does not have")


class Artifact:
    """A compiled model: manifest, programs and DRAM image."""

    def __init__(self, manifest: dict, programs: dict[str, Program], image: np.ndarray):
        self.manifest = manifest
        for info in manifest.get("programs", {}).values():
            # tuples of ints: the cyclic collector stops tracking them (a prefill table has ~30k patches, whose
            # lists it would walk at every full collection of the process)
            info["patches"] = [(p[0], p[1], p[2], tuple(p[3])) for p in info.get("patches", ())]
        self.programs = programs
        self.image = np.asarray(image, dtype=np.uint8)
        self._bits: dict[str, list] = {}
        self._images: dict[str, PatchedImage] = {}

    # ------------------------------------------------------------ facts
    @property
    def config(self) -> AccelConfig:
        return AccelConfig.from_dict(dict(self.manifest["config"]))

    @property
    def page(self) -> int:
        return int(self.manifest["kv"]["page"])

    def rows(self, kind: str) -> int:
        return int(self._prog(kind)["rows"])

    def min_rows(self, kind: str) -> int:
        """The fewest rows a run of program ``kind`` may have (its ``rows`` unless its row count is patched)."""
        p = self._prog(kind)
        return int(p.get("min_rows", p["rows"]))

    def region(self, name: str) -> dict:
        for r in self.manifest["regions"]:
            if r["name"] == name:
                return r
        raise ArtifactError(f"artifact has no DRAM region {name!r}")

    @property
    def dram_bytes(self) -> int:
        """Bytes of the DRAM window the artifact uses (image, KV cache, logits, programs)."""
        return int(self.manifest["dram_top"])

    def _prog(self, kind: str) -> dict:
        try:
            return self.manifest["programs"][kind]
        except KeyError:
            raise ArtifactError(f"artifact has no {kind!r} program; it has {', '.join(self.manifest['programs'])}") from None

    # ------------------------------------------------------------ patching
    def pages_needed(self, pos: int, rows: int) -> int:
        return -(-(pos + rows) // self.page)

    def _value(self, kind: str, args: list, st: StepState, rows: int) -> int:
        """The value of patch ``kind`` for step ``st``; ``rows`` is the step's row count (``len(st.tokens)``).

        The definition (:class:`~systolica.artifact_patch.PatchedImage` computes the same over arrays)."""
        m, kv = self.manifest, self.manifest["kv"]
        P = int(kv["page"])
        if kind == "n_rows":
            return args[0] + args[1] * rows
        if kind == "last_row":
            return args[0] + args[1] * (rows - 1)
        if kind == "row_on":
            return args[1] if args[0] < args[2] * rows else 0
        if kind == "embed":
            tok = int(st.tokens[args[0]]) if args[0] < rows else 0
            return m["rows"]["embd_offset"] + tok * m["rows"]["embd_row"]
        if kind == "pos_embd":
            return m["rows"]["pos_offset"] + st.pos * m["rows"]["pos_row"]
        if kind == "rope":
            return m["rows"]["rope_offset"] + st.pos * m["rows"]["rope_row"]
        if kind in ("pos_embd_at", "rope_at"):
            t = "pos" if kind == "pos_embd_at" else "rope"
            return m["rows"][f"{t}_offset"] + (st.row_pos(args[0]) if args[0] < rows else 0) * m["rows"][f"{t}_row"]
        page_bytes = kv["heads"] * kv["tile_bytes"]

        def page_addr(layer: int, row: int, logical: int) -> int:
            return kv["base"] + (layer * kv["n_pages"] + int(st.row_table(row)[logical])) * page_bytes

        def row_t(row: int, j: int) -> int:  # valid tokens of page j for row's query (a batched row past the run's: 0)
            if st.rows is not None and row >= rows:
                return 0
            return min(max(st.row_pos(row) + 1 - j * P, 0), P)

        if kind == "kv_store":
            layer, row, part, slot = args
            if row >= rows:  # a row past the step's: its STORE is emptied (row_on); any address in the window
                return kv["base"]
            p = st.row_pos(row)
            return page_addr(layer, row, p // P) + part + (p % P) * slot
        def filled(row: int) -> int:  # tokens in the KV cache for row's tiles: the step's (one sequence) or the row's
            if st.rows is None:
                return st.pos + rows
            return st.row_pos(row) + 1 if row < rows else 0

        def tail(row: int) -> int | None:  # the page those tokens end in when it is partly filled
            n = filled(row)
            return n // P if n % P else None

        if kind in ("kv_page", "kv_rows", "kv_page_at", "kv_rows_at"):  # the pages the context fills, whole
            batched = kind.endswith("_at")
            row = args[int(kind.startswith("kv_page"))] if batched else 0
            j = args[-1] if kind.startswith("kv_rows") else args[-2]
            full = filled(row) >= (j + 1) * P
            if kind.startswith("kv_rows"):
                return int(full)
            return page_addr(args[0], row, j) + args[-1] * kv["tile_bytes"] if full else kv["base"]
        if kind in ("kv_tail", "kv_tail_at"):
            row = args[1] if kind == "kv_tail_at" else 0
            j = tail(row)
            return kv["base"] if j is None else page_addr(args[0], row, j) + args[-2] * kv["tile_bytes"] + args[-1]
        if kind in ("kv_tail_lines", "kv_tail_lines_at"):
            row = args[0] if kind == "kv_tail_lines_at" else 0
            return args[-2] + args[-1] * (filled(row) % P) if tail(row) is not None else 0
        if kind not in ("attn_t", "attn_offset", "attn_nq", "attn_tail_t", "attn_tail_offset", "attn_tail_nq",
                        "attn_tail_init"):
            raise ArtifactError(f"unknown patch kind {kind!r}")
        row = args[0]
        if kind.startswith("attn_tail_"):
            j = tail(row)
            t = 0 if j is None else row_t(row, j)
            if kind == "attn_tail_init":
                return int(j == 0)
        else:
            j = args[1]
            t = row_t(row, j) if filled(row) >= (j + 1) * P else 0  # the tail page is folded by the attn_tail ATTN
        if kind in ("attn_t", "attn_tail_t"):
            return t
        if kind in ("attn_nq", "attn_tail_nq"):
            return args[-1] if t and row < rows else 0
        if kind in ("attn_offset", "attn_tail_offset"):
            # the row's t valid tokens all lie at or before its query (t stops there), so the causal mask keeps all
            # of them for any offset >= t - 1: t - 1 is that mask, and the words of full pages do not change from
            # one decode step to the next (the golden simulator's plans then keep their closures)
            return t - 1 if t else 0
        raise ArtifactError(f"unknown patch kind {kind!r}")

    def check_step(self, kind: str, st: StepState) -> None:
        """Raise :class:`ArtifactError` unless ``st`` is a valid step of program ``kind`` (rows, ids, context, pages)."""
        most, least, vocab = self.rows(kind), self.min_rows(kind), int(self.manifest["model"]["vocab_size"])
        rows = len(st.tokens)
        if not least <= rows <= most:
            runs = f"{most} rows" if least == most else f"{least} to {most} rows"
            raise ArtifactError(f"the {kind} program runs {runs}, got {len(st.tokens)} tokens")
        for t in st.tokens:
            if not 0 <= int(t) < vocab:
                raise ArtifactError(f"token id {t} is outside the vocabulary 0..{vocab - 1}")
        batched = bool(self._prog(kind).get("batched"))
        if batched != (st.rows is not None):
            raise ArtifactError(f"the {kind} program runs " + ("one sequence per row: give each row's position and "
                                "block table (StepState.rows)" if batched else
                                "consecutive positions of one sequence: StepState.rows is for batched programs"))
        if batched and len(st.rows) != rows:
            raise ArtifactError(f"{rows} tokens for {len(st.rows)} batched rows")
        spans = [(st.row_pos(r), 1, st.row_table(r), f"row {r}: ") for r in range(rows)] if batched else \
            [(st.pos, rows, st.block_table, "")]
        max_seq, n_pages = int(self.manifest["max_seq"]), int(self.manifest["kv"]["n_pages"])
        for pos, n, table, who in spans:
            if pos < 0 or pos + n > max_seq:
                raise ArtifactError(f"{who}positions {pos}..{pos + n - 1} exceed the compiled context "
                                    f"max_seq={max_seq}")
            need = self.pages_needed(pos, n)
            if len(table) < need:
                raise ArtifactError(f"{who}block table has {len(table)} pages, positions up to {pos + n - 1} "
                                    f"need {need} (page {self.page})")
            for p in table[:need]:
                if not 0 <= int(p) < n_pages:
                    raise ArtifactError(f"{who}block table names physical page {p}; the KV cache has {n_pages}")

    def patched_program(self, kind: str, st: StepState) -> list[int]:
        """The words of program ``kind`` with every per-step field set for ``st``."""
        self.check_step(kind, st)
        rows = len(st.tokens)
        words = list(self.programs[kind].words)
        ops = self._patch_ops(kind, words)
        for idx, lo, bits, signed, pkind, args in ops:
            v = self._value(pkind, args, st, rows)
            lim_lo, lim_hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
            if not lim_lo <= v <= lim_hi:
                raise ArtifactError(f"{kind} instruction {idx}: {pkind} value {v} does not fit {bits} bits")
            mask = ((1 << bits) - 1) << lo
            words[idx] = (words[idx] & ~mask) | ((v & ((1 << bits) - 1)) << lo)
        return words

    def patched_image(self, kind: str, st: StepState) -> np.ndarray:
        """The bytes of :meth:`patched_program` (128-bit little-endian words), made incrementally: the patch values
        are computed for all patches at once and only the words whose values changed since the last call are
        rewritten (a decode step changes a few hundred of thousands).  A new array each call."""
        self.check_step(kind, st)
        img = self._images.get(kind)
        if img is None:
            img = self._images[kind] = PatchedImage(self, kind)
        return img.patched(st)

    def _patch_ops(self, kind: str, words: Sequence[int], source: str = "artifact") -> list:
        """``(index, lo, bits, signed, kind, args)`` of each patch of program ``kind`` (cached)."""
        ops = self._bits.get(kind)
        if ops is None:
            ops = []
            by_code = {spec.code: spec.name for spec in OP_BY_NAME.values()}
            for idx, field, pkind, args in self._prog(kind)["patches"]:
                op = by_code.get(int(words[idx]) & ((1 << OPCODE_BITS) - 1))
                if op is None:
                    raise ArtifactError(f"{source}: {kind} patch names instruction {idx}, which is not a valid "
                                        "instruction: recompile the model with `systolica compile`")
                try:
                    ops.append((idx, *_field_bits(op, field), pkind, args))
                except ArtifactError as e:
                    raise ArtifactError(f"{source}: {kind} instruction {idx}: {e}") from None
            self._bits[kind] = ops
        return ops

    def _check_kv_slots(self, kind: str, words: Sequence[int], cfg: AccelConfig, source: str) -> None:
        """KV stores: a token's slot holds what its STORE writes, and the parts of a page do not overlap."""
        spans: dict[tuple[int, int], set[tuple[int, int]]] = {}
        for idx, _field, pkind, args in self._prog(kind)["patches"]:
            if pkind != "kv_store":
                continue
            layer, _row, part, slot = args
            op = next(s.name for s in OP_BY_NAME.values()
                      if s.code == int(words[idx]) & ((1 << OPCODE_BITS) - 1))
            lines, buf = (_field_value(words[idx], op, f) for f in ("lines", "buf"))
            if lines is None or buf is None:
                raise ArtifactError(f"{source}: {kind} kv_store patch names instruction {idx}, a {op}: not a store")
            payload = lines * cfg.cols * (1 if buf == 0 else 4)
            if slot < payload:
                raise ArtifactError(f"{source}: {kind} instruction {idx} stores {payload} bytes per token into slots "
                                    f"of {slot}: the artifact is damaged or was edited; recompile it")
            spans.setdefault((layer, part), set()).add(slot)
        for layer in {k[0] for k in spans}:
            parts = sorted((part, part + self.page * max(sl)) for (lay, part), sl in spans.items() if lay == layer)
            for (_a0, e0), (a1, _e1) in zip(parts, parts[1:], strict=False):
                if a1 < e0:
                    raise ArtifactError(f"{source}: {kind} KV slots of layer {layer} overlap (byte {a1} < {e0}): the "
                                        "artifact is damaged or was edited; recompile it")

    def read_logits(self, window: np.ndarray, rows: int | None = None) -> np.ndarray:
        """The fx int32 logits of the last run, from the DRAM window: the last row's ``(vocab,)``, or with
        ``rows`` those of a batched run's first ``rows`` rows, ``(rows, vocab)``."""
        lg = self.region("logits")
        vocab = int(self.manifest["model"]["vocab_size"])
        if rows is None:
            return window[lg["offset"]:lg["offset"] + 4 * vocab].view("<i4").copy()
        stride = int(self.manifest["logits"].get("row_bytes", 4 * vocab))
        if not 0 < rows <= int(self.manifest["logits"].get("rows", 1)):
            raise ArtifactError(f"the logits region holds {self.manifest['logits'].get('rows', 1)} rows, not {rows}")
        out = np.empty((rows, vocab), np.int32)
        for r in range(rows):
            o = lg["offset"] + r * stride
            out[r] = window[o:o + 4 * vocab].view("<i4")
        return out

    # ------------------------------------------------------------ files
    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
            z.writestr("manifest.json", json.dumps(self.manifest, indent=1, sort_keys=True))
            for kind, prog in self.programs.items():
                z.writestr(f"programs/{kind}.bin", prog.to_bytes())
            # weights are int8 noise to a compressor: stored, so writing a 100 MB model takes a second
            z.writestr("image.bin", self.image.tobytes(), compress_type=zipfile.ZIP_STORED)
        return buf.getvalue()

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(self.to_bytes())

    @classmethod
    def from_bytes(cls, data: bytes, *, config: AccelConfig | None = None, source: str = "artifact") -> Artifact:
        """Parse an artifact; with ``config``, refuse one compiled for another accelerator.

        Raises
        ------
        ArtifactError
            Not a systolica artifact, another format version, a missing or inconsistent member,
            or (with ``config``) compiled for another configuration; the message says what to do.
        ProgramError
            A program inside is damaged or stamped with another configuration's hash.
        """
        try:
            man, members = _read_zip(data, source)
        except ArtifactError:
            raise
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError,
                RuntimeError, OverflowError) as e:  # whatever zipfile says about a damaged archive
            raise ArtifactError(f"{source}: damaged archive ({type(e).__name__}: {e}): recompile it with "
                                "`systolica compile`") from None
        if not isinstance(man, dict):
            raise ArtifactError(f"{source}: manifest.json is a {type(man).__name__}, not an object: not a "
                                "systolica artifact")
        if man.get("format") != FORMAT:
            raise ArtifactError(f"{source}: manifest format {man.get('format')!r:.60}, expected {FORMAT!r}")
        if man.get("version") != FORMAT_VERSION:
            raise ArtifactError(f"{source}: artifact format version {man.get('version')!r:.20}; this systolica reads "
                                f"version {FORMAT_VERSION}: recompile the model with this systolica")
        try:
            cfg = AccelConfig.from_dict(dict(man["config"]), source=f"{source}: manifest config")
        except (KeyError, TypeError, ValueError) as e:
            raise ArtifactError(f"{source}: manifest config is unusable ({e}): recompile it with "
                                "`systolica compile`") from None
        if man.get("config_hash") != cfg.hash_hex() or man.get("config_hash32") != cfg.hash32():
            raise ArtifactError(f"{source}: manifest config hashes do not match its config: the artifact is "
                                "damaged or was edited; recompile it with `systolica compile`")
        if config is not None and man["config_hash"] != config.hash_hex():
            raise ArtifactError(f"{source}: compiled for config {man['config_hash'][:8]} "
                                f"({cfg.name!r}), this accelerator is {config.hash_hex()[:8]} "
                                f"({config.name!r}): recompile with --config {config.name}")
        check_manifest(man, source=source, error=ArtifactError)
        progs = {}
        for kind, info in man["programs"].items():
            fname = f"programs/{kind}.bin"
            if fname not in members:
                raise ArtifactError(f"{source}: {fname} listed in the manifest is missing")
            progs[kind] = Program.from_bytes(members[fname], config=int(man["config_hash32"]), source=fname)
            if len(progs[kind]) != info["instructions"]:
                raise ArtifactError(f"{source}: {fname} has {len(progs[kind])} instructions, the manifest says "
                                    f"{info['instructions']}")
        if "image.bin" not in members:
            raise ArtifactError(f"{source}: image.bin is missing")
        image = np.frombuffer(members["image.bin"], dtype=np.uint8).copy()
        if image.size != man["image_bytes"]:
            raise ArtifactError(f"{source}: image.bin has {image.size} bytes, the manifest says {man['image_bytes']}")
        art = cls(man, progs, image)
        for kind, prog in progs.items():
            art._patch_ops(kind, prog.words, source)  # every patch names a field its instruction has
            art._check_kv_slots(kind, prog.words, cfg, source)
            # compiled words hold the first step's values (position 0, token 0): patching that step must give
            # them back, else a patch or a table offset was moved (the run would compute garbage)
            base = base_state(kind, art.rows(kind), art.page)
            try:
                same = art.patched_program(kind, base) == list(prog.words)
            except ArtifactError as e:
                raise ArtifactError(f"{source}: {e}") from None
            if not same:
                raise ArtifactError(f"{source}: the {kind} program and its patch table disagree: the artifact is "
                                    "damaged or was edited; recompile it with `systolica compile`")
        return art

    @classmethod
    def load(cls, path: str | Path, *, config: AccelConfig | None = None) -> Artifact:
        """Read an artifact file; see :meth:`from_bytes` for ``config`` and the errors."""
        p = Path(path)
        if not p.is_file():
            raise ArtifactError(f"artifact file {p} does not exist (write one with: systolica compile MODEL -o {p})")
        return cls.from_bytes(p.read_bytes(), config=config, source=str(p))
