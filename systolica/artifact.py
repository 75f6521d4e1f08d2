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
``n`` do nothing.  The kinds and their values: :mod:`systolica.patch_kinds`.
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
from systolica.patch_kinds import patch_value
from systolica.program import Program

__all__ = ["FORMAT", "FORMAT_VERSION", "Artifact", "ArtifactError", "StepState", "base_state"]

FORMAT = "systolica-artifact"
#: 6: the tail is the page the context's last token is in, 1 to P tokens (a context ending on a page boundary has a
#: whole tail, no longer a whole page and no tail), so a step's new token is never in a whole page, and a decode
#: program LOADs its first whole pages before its KV STOREs (``compiler/codegen.py``); 3 KV-tile slots where the
#: scratchpad has room.  5: the tiles of the pages the context fills are LOADed whole, the page it ends in (the tail) last, in three LOADs
#: of its valid tokens only (``kv_tail*``, ``attn_tail_*``); version 4 LOADed every page it reached whole.
#: 4: ``attn_offset`` is ``t - 1`` (the same causal mask as the query position, and a full page's ATTN word no longer
#: changes from step to step).  3: prefill programs run any number of rows up to theirs (``min_rows``; patch kinds ``n_rows``, ``last_row``,
#: ``row_on``), ATTN of a page no row sees is emptied (``attn_nq``), and a ``prefill_nohead`` program fills the
#: KV cache without the logits.  2: weights in the weight-stream layout (one ``weights`` region, the manifest's
#: ``weights`` table) and every matmul a GEMM_STREAM; version 1 kept a row-major copy per matrix and LOADed its
#: tiles into the scratchpad.
FORMAT_VERSION = 6


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

        The definition is :func:`systolica.patch_kinds.patch_value` (:class:`~systolica.artifact_patch.PatchedImage`
        computes the same over arrays)."""
        return patch_value(self.manifest, kind, args, st, rows)

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
