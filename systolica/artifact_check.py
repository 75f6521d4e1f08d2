"""The manifest schema of a compiled artifact, checked before anything uses it.

:func:`check_manifest` walks ``manifest.json`` once: every field the runtime reads
has its type and range checked, the DRAM regions lie inside the window and do not
overlap, the offsets of the tables agree with their regions, and every patch names
an instruction, a field and arguments that exist.  A manifest that passes cannot
make the runtime divide by zero, index out of range or allocate more than the
accelerator's DRAM window; one that fails raises :class:`ArtifactError` naming the
field and its value.

Written by hand rather than with a validation library: the cross-field rules
(regions against the window, patch arguments against the KV layout) are most of it,
and the runtime also runs on PYNQ board images where every extra package counts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["check_manifest", "PATCH_ARGS"]

#: patch kind -> names of its arguments (see systolica.artifact)
PATCH_ARGS: dict[str, tuple[str, ...]] = {
    "embed": ("row",), "pos_embd": (), "rope": (), "kv_store": ("layer", "row", "part", "slot_bytes"),
    "kv_page": ("layer", "page", "head"), "kv_rows": ("page",), "attn_t": ("row", "page"),
    "attn_offset": ("row", "page"), "attn_nq": ("row", "page", "nq"),
    "kv_tail": ("layer", "head", "tile_byte"), "kv_tail_lines": ("first", "per_token"),
    "attn_tail_t": ("row",), "attn_tail_offset": ("row",), "attn_tail_nq": ("row", "nq"), "attn_tail_init": ("row",),
    "n_rows": ("base", "per_row"), "last_row": ("base", "per_row"), "row_on": ("result_row", "value", "per_row"),
    "pos_embd_at": ("row",), "rope_at": ("row",), "kv_page_at": ("layer", "row", "page", "head"),
    "kv_rows_at": ("row", "page"), "kv_tail_at": ("layer", "row", "head", "tile_byte"),
    "kv_tail_lines_at": ("row", "first", "per_token"),
}
_KINDS = ("prefill", "prefill_nohead", "decode", "decode_batch")
_FIELD = 1 << 16  # the row-count and line-address fields the row patches set are 16 bits


class _Ctx:
    def __init__(self, source: str, error: type[Exception]):
        self.source, self.error = source, error

    def fail(self, where: str, msg: str):
        raise self.error(f"{self.source}: manifest {where} {msg}: the artifact is damaged or was edited; "
                         "recompile it with `systolica compile`")

    def obj(self, d: Any, where: str) -> Mapping:
        if not isinstance(d, Mapping):
            self.fail(where, f"is {type(d).__name__}, expected an object")
        return d

    def get(self, d: Mapping, key: str, where: str) -> Any:
        if key not in d:
            self.fail(f"{where}.{key}" if where else key, "is missing")
        return d[key]

    def int(self, d: Mapping, key: str, where: str, lo: int = 0, hi: int | None = None) -> int:
        v = self.get(d, key, where)
        name = f"{where}.{key}" if where else key
        if not isinstance(v, int) or isinstance(v, bool):
            self.fail(name, f"is {type(v).__name__} {v!r:.40}, expected an integer")
        if v < lo or (hi is not None and v > hi):
            self.fail(name, f"= {v} is out of range [{lo}, {hi if hi is not None else '...'}]")
        return v


def check_manifest(man: Any, *, source: str = "artifact", error: type[Exception] = ValueError) -> None:
    """Raise ``error`` unless ``man`` is a usable artifact manifest (see the module docstring).

    ``man["config"]`` must already have been turned into an :class:`AccelConfig` by the caller;
    here ``dram_window`` is taken from it.
    """
    c = _Ctx(source, error)
    c.obj(man, "")
    cfg = c.obj(c.get(man, "config", ""), "config")
    window = c.int(cfg, "dram_bytes", "config", 1)
    top = c.int(man, "dram_top", "", 1, window)
    image = c.int(man, "image_bytes", "", 0, top)
    del image
    max_seq = c.int(man, "max_seq", "", 1, 1 << 24)
    model = c.obj(c.get(man, "model", ""), "model")
    vocab = c.int(model, "vocab_size", "model", 1, 1 << 24)
    tok = man.get("tokenizer")
    if tok is not None and not isinstance(tok, Mapping):
        c.fail("tokenizer", f"is {type(tok).__name__}, expected an object or null")

    regions: dict[str, tuple[int, int]] = {}
    rlist = c.get(man, "regions", "")
    if not isinstance(rlist, list):
        c.fail("regions", f"is {type(rlist).__name__}, expected a list")
    for i, r in enumerate(rlist):
        r = c.obj(r, f"regions[{i}]")
        name = c.get(r, "name", f"regions[{i}]")
        if not isinstance(name, str) or name in regions:
            c.fail(f"regions[{i}].name", f"{name!r} is not a string or appears twice")
        off = c.int(r, "offset", f"regions[{i}]", 0, top)
        size = c.int(r, "size", f"regions[{i}]", 0, top - off)
        regions[name] = (off, size)
    spans = sorted(v for v in regions.values() if v[1])
    for (o0, s0), (o1, _s1) in zip(spans, spans[1:], strict=False):
        if o1 < o0 + s0:
            c.fail("regions", f"overlap at bytes {o1}..{o0 + s0}")

    def region(name: str, need: int | None = None) -> tuple[int, int]:
        if name not in regions:
            c.fail("regions", f"have no {name!r} region")
        off, size = regions[name]
        if need is not None and size < need:
            c.fail(f"region {name!r}", f"has {size} bytes, needs {need}")
        return regions[name]

    kv = c.obj(c.get(man, "kv", ""), "kv")
    page = c.int(kv, "page", "kv", 1, 1 << 16)
    if page & (page - 1):
        c.fail("kv.page", f"= {page} is not a power of two")
    if "page_log2" in kv and kv["page_log2"] != page.bit_length() - 1:
        c.fail("kv.page_log2", f"= {kv['page_log2']!r:.20} does not match page={page}")
    n_pages = c.int(kv, "n_pages", "kv", 1, 1 << 24)
    if n_pages * page < max_seq:
        c.fail("kv.n_pages", f"= {n_pages} pages of {page} do not hold max_seq={max_seq} tokens")
    heads = c.int(kv, "heads", "kv", 1, 1 << 12)
    tile = c.int(kv, "tile_bytes", "kv", 1, top)
    layers = c.int(kv, "layers", "kv", 1, 1 << 12)
    base = c.int(kv, "base", "kv", 0, top)
    kv_off, _ = region("kv", layers * n_pages * heads * tile)
    if kv_off != base:
        c.fail("kv.base", f"= {base} is not the offset of the 'kv' region ({kv_off})")

    rows_t = c.obj(c.get(man, "rows", ""), "rows")
    for table, count, rname in (("embd", vocab, "token_embd"), ("pos", max_seq, "pos_embd"),
                                ("rope", max_seq, "rope")):
        if f"{table}_offset" not in rows_t:
            if table == "embd":
                c.fail("rows.embd_offset", "is missing")
            continue
        row = c.int(rows_t, f"{table}_row", "rows", 1, top)
        off = c.int(rows_t, f"{table}_offset", "rows", 0, top)
        r_off, r_size = region(rname, count * row)
        if r_size >= (count + 1) * row:  # tables are sized to their rows: a smaller row or count was edited
            c.fail(f"rows.{table}_row", f"= {row} x {count} rows leaves {rname!r} ({r_size} bytes) a row too big")
        if off != r_off:
            c.fail(f"rows.{table}_offset", f"= {off} is not the offset of the {rname!r} region ({r_off})")
    lg = c.obj(c.get(man, "logits", ""), "logits")
    lg_off = c.int(lg, "offset", "logits", 0, top)
    if "vocab" in lg and lg["vocab"] != vocab:
        c.fail("logits.vocab", f"= {lg['vocab']!r:.20} differs from model.vocab_size={vocab}")
    lg_rows = c.int(lg, "rows", "logits", 1, 64) if "rows" in lg else 1
    lg_row = c.int(lg, "row_bytes", "logits", 4 * vocab, top) if "row_bytes" in lg else 4 * vocab
    if region("logits", (lg_rows - 1) * lg_row + 4 * vocab)[0] != lg_off:
        c.fail("logits.offset", f"= {lg_off} is not the offset of the 'logits' region")

    progs = c.obj(c.get(man, "programs", ""), "programs")
    if "decode" not in progs:
        c.fail("programs", f"have no 'decode' program (found {', '.join(map(str, progs)) or 'none'})")
    for kind, p in progs.items():
        where = f"programs.{kind}"
        if kind not in _KINDS:
            c.fail("programs", f"name an unknown program {kind!r} (known: {', '.join(_KINDS)})")
        p = c.obj(p, where)
        rows = c.int(p, "rows", where, 1, max_seq)
        if "min_rows" in p:
            c.int(p, "min_rows", where, 1, rows)
        if p.get("batched", False) is not (kind == "decode_batch"):
            c.fail(f"{where}.batched", f"= {p.get('batched')!r:.20}: only the decode_batch program is batched")
        if kind == "decode_batch" and rows > lg_rows:
            c.fail(f"{where}.rows", f"= {rows}: the logits region holds {lg_rows} rows")
        n = c.int(p, "instructions", where, 1, top // 16)
        rname = c.get(p, "region", where)
        if rname != f"program:{kind}":
            c.fail(f"{where}.region", f"= {rname!r}, expected 'program:{kind}'")
        region(rname, 16 * n)
        patches = c.get(p, "patches", where)
        if not isinstance(patches, list):
            c.fail(f"{where}.patches", "is not a list")
        limits = {"row": rows, "layer": layers, "page": n_pages, "head": heads, "part": heads * tile,
                  "slot_bytes": tile + 1, "nq": 64, "base": _FIELD, "per_row": _FIELD, "value": _FIELD,
                  "result_row": _FIELD, "tile_byte": tile, "first": page + 1, "per_token": _FIELD}
        targets: set[tuple[int, str]] = set()
        for j, patch in enumerate(patches):
            pw = f"{where}.patches[{j}]"
            if not (isinstance(patch, list) and len(patch) == 4 and isinstance(patch[1], str)
                    and isinstance(patch[3], list)):
                c.fail(pw, f"= {patch!r:.60} is not [instruction, field, kind, [args]]")
            idx, _field, pkind, args = patch
            if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < n:
                c.fail(pw, f"names instruction {idx!r}; the program has {n}")
            if not isinstance(pkind, str) or pkind not in PATCH_ARGS:
                c.fail(pw, f"has unknown kind {pkind!r:.40}")
            if (idx, patch[1]) in targets:  # two patches of one field: one of them was moved or copied
                c.fail(pw, f"patches field {patch[1]!r} of instruction {idx} a second time")
            targets.add((idx, patch[1]))
            names = PATCH_ARGS[pkind]
            if len(args) != len(names):
                c.fail(pw, f"{pkind} takes {len(names)} arguments ({', '.join(names)}), got {args!r:.60}")
            for a, nm in zip(args, names, strict=True):
                if not isinstance(a, int) or isinstance(a, bool) or not 0 <= a < max(limits[nm], 1):
                    c.fail(pw, f"{pkind} argument {nm}={a!r} is out of range [0, {limits[nm]})")
            if pkind == "kv_store" and (args[3] < 1 or args[2] + page * args[3] > heads * tile):
                c.fail(pw, f"stores token slots of {args[3]} bytes from byte {args[2]}: {page} of them do not "
                           f"fit a KV page of {heads * tile} bytes")
            if pkind in ("kv_tail_lines", "kv_tail_lines_at") and args[-2] + args[-1] * page >= _FIELD:
                c.fail(pw, f"{pkind} of {args[-2]} + {args[-1]} lines a token: a tail of {page} tokens does not "
                           "fit the 16-bit lines field")
            if pkind == "row_on" and args[0] >= args[2] * rows:
                c.fail(pw, f"row_on names result row {args[0]}, past the {args[2]} x {rows} rows of the program")
            if pkind in ("rope", "pos_embd") and f"{'rope' if pkind == 'rope' else 'pos'}_offset" not in rows_t:
                c.fail(pw, f"is a {pkind} patch but the manifest has no {pkind} table")
    _finite(c, man.get("model"), "model")


def _finite(c: _Ctx, d: Any, where: str) -> None:
    """No NaN or infinity among the numbers the metrics and reports read."""
    if isinstance(d, float) and not math.isfinite(d):
        c.fail(where, f"= {d} is not finite")
    if isinstance(d, Mapping):
        for k, v in d.items():
            _finite(c, v, f"{where}.{k}")
