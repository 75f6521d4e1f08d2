"""Per-step patching of a program's byte image, incremental: :meth:`systolica.artifact.Artifact.patched_image`.

:func:`systolica.patch_kinds.patch_value` defines each patch kind for one patch;
:class:`PatchedImage` computes the values of all a program's patches at once, as arrays, and rewrites only the
instruction words whose values changed since its last step (a decode step changes a few hundred of thousands).
``tests/driver/test_runtime_prefill.py`` and ``tests/driver/test_runtime_batch.py`` check it against the
patched words for random sequences of steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from systolica.program import words_to_bytes

if TYPE_CHECKING:  # pragma: no cover
    from systolica.artifact import Artifact, StepState

__all__ = ["PatchedImage"]


class PatchedImage:
    """One program's byte image and the patch values it holds, with the patch table as arrays by kind."""

    _INT = {"embed": 1, "kv_store": 4, "kv_page": 3, "kv_rows": 1, "attn_t": 2, "attn_offset": 2, "attn_nq": 3,
            "n_rows": 2, "last_row": 2, "row_on": 3, "pos_embd": 0, "rope": 0, "pos_embd_at": 1, "rope_at": 1,
            "kv_page_at": 4, "kv_rows_at": 2, "kv_tail": 3, "kv_tail_at": 4, "kv_tail_lines": 2,
            "kv_tail_lines_at": 3, "attn_tail_t": 1, "attn_tail_offset": 1, "attn_tail_nq": 2,
            "attn_tail_init": 1}  # kind -> args it takes

    def __init__(self, art: Artifact, kind: str):
        from systolica.artifact import ArtifactError

        self.art, self.kind = art, kind
        ops = art._patch_ops(kind, art.programs[kind].words)
        self.ops = ops
        self.groups: list[tuple[str, np.ndarray, np.ndarray]] = []  # (kind, patch numbers, args (n, nargs))
        by: dict[str, list[int]] = {}
        for i, op in enumerate(ops):
            by.setdefault(op[4], []).append(i)
        for pk, idx in by.items():
            n = self._INT.get(pk)
            if n is None:
                raise ArtifactError(f"unknown patch kind {pk!r}")
            args = np.array([list(ops[i][5])[:n] for i in idx], np.int64).reshape(len(idx), n)
            self.groups.append((pk, np.array(idx, np.int64), args))
        bits = np.array([op[2] for op in ops], np.int64)
        signed = np.array([op[3] for op in ops], bool)
        self.lo_lim = np.where(signed, -(1 << (bits - 1)), 0)
        self.hi_lim = np.where(signed, (1 << (bits - 1)) - 1, (1 << bits) - 1)
        by_word: dict[int, list[int]] = {}
        for i, op in enumerate(ops):
            by_word.setdefault(op[0], []).append(i)
        self.by_word = {w: tuple(v) for w, v in by_word.items()}  # word index -> its patch numbers
        self.image = np.frombuffer(words_to_bytes(art.programs[kind].words), np.uint8).copy()
        self.values: np.ndarray | None = None  # what the image holds (None: the compiled words)

    def _values(self, st: StepState) -> np.ndarray:
        """Every patch's value for ``st``: :meth:`Artifact._value` over arrays."""
        m, kv = self.art.manifest, self.art.manifest["kv"]
        P, rows, pos = int(kv["page"]), len(st.tokens), int(st.pos)
        page_bytes, tile_bytes = int(kv["heads"]) * int(kv["tile_bytes"]), int(kv["tile_bytes"])
        base, n_pages = int(kv["base"]), int(kv["n_pages"])
        R = max(self.art.rows(self.kind), rows)
        rp = np.array([st.row_pos(r) for r in range(R)], np.int64)  # each row's position
        active = np.arange(R) < rows
        if st.rows is None:
            tables = np.asarray(list(st.block_table) or [0], np.int64)[None, :]
            trow = np.zeros(R, np.int64)  # every row reads the one table
        else:
            width = max([len(st.row_table(r)) for r in range(rows)] + [1])
            tables = np.zeros((R, width), np.int64)
            for r in range(rows):
                t = list(st.row_table(r))
                tables[r, :len(t)] = t
            trow = np.arange(R, dtype=np.int64)
        toks = np.asarray(list(st.tokens) or [0], np.int64)
        out = np.empty(len(self.ops), np.int64)

        def page_addr(layer, row, logical):
            r = trow[np.clip(row, 0, R - 1)]
            return base + (layer * n_pages + tables[r, np.clip(logical, 0, tables.shape[1] - 1)]) * page_bytes

        def row_t(row, j):  # valid tokens of page j for row's query (a batched row past the run's: none)
            t = np.clip(rp[row] + 1 - j * P, 0, P)
            return t if st.rows is None else np.where(active[row], t, 0)

        # tokens in the KV cache for each row's tiles: the step's (one sequence) or the row's own (batched), and
        # the page the last of them is in (the tail, 1 to P tokens; -1: no tokens); the pages before it come whole
        filled = np.full(R, pos + rows, np.int64) if st.rows is None else np.where(active, rp + 1, 0)
        tail = np.where(filled > 0, (filled - 1) // P, -1)

        for pk, idx, a in self.groups:
            if pk == "n_rows":
                v = a[:, 0] + a[:, 1] * rows
            elif pk == "last_row":
                v = a[:, 0] + a[:, 1] * (rows - 1)
            elif pk == "row_on":
                v = np.where(a[:, 0] < a[:, 2] * rows, a[:, 1], 0)
            elif pk == "embed":
                tok = np.where(a[:, 0] < rows, toks[np.clip(a[:, 0], 0, toks.size - 1)], 0)
                v = m["rows"]["embd_offset"] + tok * m["rows"]["embd_row"]
            elif pk in ("pos_embd", "rope"):
                t = "pos" if pk == "pos_embd" else "rope"
                v = np.full(idx.size, m["rows"][f"{t}_offset"] + pos * m["rows"][f"{t}_row"], np.int64)
            elif pk in ("pos_embd_at", "rope_at"):
                t = "pos" if pk == "pos_embd_at" else "rope"
                v = m["rows"][f"{t}_offset"] + np.where(active[a[:, 0]], rp[a[:, 0]], 0) * m["rows"][f"{t}_row"]
            elif pk == "kv_store":
                layer, row, part, slot = a.T
                p = rp[row]
                v = np.where(row >= rows, base, page_addr(layer, row, p // P) + part + (p % P) * slot)
            elif pk in ("kv_page", "kv_rows", "kv_page_at", "kv_rows_at"):  # the pages the context fills, whole
                is_page = pk.startswith("kv_page")
                row = a[:, int(is_page)] if pk.endswith("_at") else np.zeros(idx.size, np.int64)
                j = a[:, -2] if is_page else a[:, -1]
                full = filled[row] > (j + 1) * P
                v = (np.where(full, page_addr(a[:, 0], row, j) + a[:, -1] * tile_bytes, base) if is_page
                     else full.astype(np.int64))
            elif pk in ("kv_tail", "kv_tail_at"):
                row = a[:, 1] if pk == "kv_tail_at" else np.zeros(idx.size, np.int64)
                j = tail[row]
                v = np.where(j >= 0, page_addr(a[:, 0], row, j) + a[:, -2] * tile_bytes + a[:, -1], base)
            elif pk in ("kv_tail_lines", "kv_tail_lines_at"):
                row = a[:, 0] if pk == "kv_tail_lines_at" else np.zeros(idx.size, np.int64)
                v = np.where(tail[row] >= 0, a[:, -2] + a[:, -1] * (filled[row] - tail[row] * P), 0)
            else:  # attn_*: the pages the context fills, or the tail (attn_tail_*)
                row = a[:, 0]
                if pk.startswith("attn_tail_"):
                    j = tail[row]
                    t = np.where(j >= 0, row_t(row, np.maximum(j, 0)), 0)
                else:
                    j = a[:, 1]
                    t = np.where(filled[row] > (j + 1) * P, row_t(row, j), 0)
                if pk == "attn_tail_init":
                    v = (j == 0).astype(np.int64)
                elif pk in ("attn_t", "attn_tail_t"):
                    v = t
                elif pk in ("attn_nq", "attn_tail_nq"):
                    v = np.where((t > 0) & (row < rows), a[:, -1], 0)
                else:  # attn_offset, attn_tail_offset
                    v = np.where(t > 0, t - 1, 0)
            out[idx] = v
        return out

    def patched(self, st: StepState) -> np.ndarray:
        """The program's bytes for ``st`` (a new array); :class:`ArtifactError` for a value its field cannot hold."""
        from systolica.artifact import ArtifactError

        vals = self._values(st)
        bad = np.flatnonzero((vals < self.lo_lim) | (vals > self.hi_lim))
        if bad.size:
            idx, _lo, bits, _s, pkind, _a = self.ops[int(bad[0])]
            raise ArtifactError(f"{self.kind} instruction {idx}: {pkind} value {int(vals[bad[0]])} does not fit "
                                f"{bits} bits")
        changed = np.arange(vals.size) if self.values is None else np.flatnonzero(vals != self.values)
        img, ops = self.image, self.ops
        for w in {ops[i][0] for i in changed.tolist()}:
            word = int.from_bytes(img[16 * w:16 * w + 16].tobytes(), "little")
            for i in self.by_word[w]:
                _idx, lo, bits, _s, _k, _a = ops[i]
                mask = ((1 << bits) - 1) << lo
                word = (word & ~mask) | ((int(vals[i]) & ((1 << bits) - 1)) << lo)
            img[16 * w:16 * w + 16] = np.frombuffer(word.to_bytes(16, "little"), np.uint8)
        self.values = vals
        return img.copy()
