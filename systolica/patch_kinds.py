"""The per-step patch kinds of a compiled program: what each rewrites, for one step.

Every program of an artifact carries a patch table of ``[instruction index, field, kind, args]``
(:mod:`systolica.artifact`); :func:`patch_value` is the definition of each kind for one patch
(:class:`~systolica.artifact_patch.PatchedImage` computes the same over arrays).  Kinds (``n``: the step's
rows; ``pos``: its first position):

================  =====================  ==================================================
kind              args                   value
================  =====================  ==================================================
embed             [row]                  token_embd + token[row] * row bytes (row >= n: token 0)
pos_embd          []                     pos_embd + pos * row bytes (GPT-2)
rope              []                     rope + pos * row bytes
kv_store          [layer, row, part, b]  page of ``pos+row`` (block table) + part + slot * b (row >= n: KV base)
kv_page           [layer, page, head]    KV tile of that page and head if it is before the tail (whole), else KV
                                         base
kv_rows           [page]                 1 if the page is before the tail else 0 (its LOAD: whole tile or nothing)
kv_tail           [layer, head, b]       KV tile of the tail (the page the context's last token is in: 1 to P
                                         tokens, so a step's new token is never in a whole page) + b bytes; an
                                         empty context: KV base
kv_tail_lines     [first, per]           first + per * t (t: the tail's tokens; empty context: 0): the lines of a
                                         LOAD of the tail's valid tokens only
attn_t            [row, page]            valid tokens of the page for the row's query if the page is before the
                                         tail, else 0 (no-op: the tail's come from attn_tail_t)
attn_offset       [row, page]            t - 1 (query position minus the page's first position, capped at the
                                         last valid token: the same mask, and a full page's word stays put)
attn_nq           [row, page, nq]        nq if row < n and t > 0, else 0 (no-op)
attn_tail_t       [row]                  the row's valid tokens of the tail (none: 0, a no-op)
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

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from systolica.artifact import StepState

__all__ = ["patch_value"]


def _unknown(kind: str):
    from systolica.artifact import ArtifactError  # (artifact imports this module)

    return ArtifactError(f"unknown patch kind {kind!r}")


def patch_value(manifest: dict, kind: str, args: list, st: StepState, rows: int) -> int:
    """The value of patch ``kind`` with ``args`` for step ``st`` of a program whose manifest is ``manifest``;
    ``rows`` is the step's row count (``len(st.tokens)``).  An unknown kind raises ``ArtifactError``."""
    m, kv = manifest, manifest["kv"]
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

    def tail(row: int) -> int | None:  # the page the last of those tokens is in (1 to P of them), the pages before
        n = filled(row)                    # it come whole; None: no tokens
        return (n - 1) // P if n > 0 else None

    if kind in ("kv_page", "kv_rows", "kv_page_at", "kv_rows_at"):  # the pages the context fills, whole
        batched = kind.endswith("_at")
        row = args[int(kind.startswith("kv_page"))] if batched else 0
        j = args[-1] if kind.startswith("kv_rows") else args[-2]
        full = filled(row) > (j + 1) * P
        if kind.startswith("kv_rows"):
            return int(full)
        return page_addr(args[0], row, j) + args[-1] * kv["tile_bytes"] if full else kv["base"]
    if kind in ("kv_tail", "kv_tail_at"):
        row = args[1] if kind == "kv_tail_at" else 0
        j = tail(row)
        return kv["base"] if j is None else page_addr(args[0], row, j) + args[-2] * kv["tile_bytes"] + args[-1]
    if kind in ("kv_tail_lines", "kv_tail_lines_at"):
        row = args[0] if kind == "kv_tail_lines_at" else 0
        j = tail(row)
        return 0 if j is None else args[-2] + args[-1] * (filled(row) - j * P)
    if kind not in ("attn_t", "attn_offset", "attn_nq", "attn_tail_t", "attn_tail_offset", "attn_tail_nq",
                    "attn_tail_init"):
        raise _unknown(kind)
    row = args[0]
    if kind.startswith("attn_tail_"):
        j = tail(row)
        t = 0 if j is None else row_t(row, j)
        if kind == "attn_tail_init":
            return int(j == 0)
    else:
        j = args[1]
        t = row_t(row, j) if filled(row) > (j + 1) * P else 0  # the tail page is folded by the attn_tail ATTN
    if kind in ("attn_t", "attn_tail_t"):
        return t
    if kind in ("attn_nq", "attn_tail_nq"):
        return args[-1] if t and row < rows else 0
    if kind in ("attn_offset", "attn_tail_offset"):
        # the row's t valid tokens all lie at or before its query (t stops there), so the causal mask keeps all
        # of them for any offset >= t - 1: t - 1 is that mask, and the words of full pages do not change from
        # one decode step to the next (the golden simulator's plans then keep their closures)
        return t - 1 if t else 0
    raise _unknown(kind)
