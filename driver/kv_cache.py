"""Paged KV-cache bookkeeping on the host (vLLM's PagedAttention block tables).

The KV cache itself lives in device DRAM as fixed-size pages laid out by the
compiler; the host only decides which physical page holds which logical page of
which sequence.  Pages come from one free list, so sequences of different
lengths share the cache without fragmentation, and a finished sequence returns
its pages at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["PagePool", "SequenceState", "KVCacheFull"]


class KVCacheFull(RuntimeError):
    """No free KV page is left for a sequence that needs one."""


class PagePool:
    """Physical KV pages, reference-counted: sequences that share a prompt prefix hold its full pages together
    (:meth:`SequenceState.fork`), and a page is free again when its last holder gives it back."""

    def __init__(self, n_pages: int, page: int):
        self.n_pages, self.page = n_pages, page
        self._free = list(range(n_pages - 1, -1, -1))  # pop() hands out page 0 first
        self._refs = [0] * n_pages

    @property
    def free(self) -> int:
        return len(self._free)

    def take(self) -> int:
        if not self._free:
            raise KVCacheFull(f"all {self.n_pages} KV pages ({self.page} tokens each) are in use: finish a "
                              "sequence, shorten the prompt, or compile with a larger max_seq")
        p = self._free.pop()
        self._refs[p] = 1
        return p

    def share(self, page: int) -> int:
        """One more holder of ``page`` (which must be in use); returns it."""
        if self._refs[page] < 1:
            raise ValueError(f"KV page {page} is not in use: it cannot be shared")
        self._refs[page] += 1
        return page

    def refs(self, page: int) -> int:
        return self._refs[page]

    def give_back(self, pages: list[int]) -> None:
        freed = []
        for p in pages:
            if self._refs[p] < 1:
                raise ValueError(f"KV page {p} given back more often than taken")
            self._refs[p] -= 1
            if not self._refs[p]:
                freed.append(p)
        self._free.extend(reversed(freed))


@dataclass
class SequenceState:
    """One sequence: tokens already in the KV cache and its block table."""

    pool: PagePool
    pos: int = 0
    block_table: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    def reserve(self, rows: int) -> None:
        """Make sure pages exist for positions up to ``pos + rows - 1``."""
        need = -(-(self.pos + rows) // self.pool.page)
        while len(self.block_table) < need:
            self.block_table.append(self.pool.take())

    def release(self) -> None:
        self.pool.give_back(self.block_table)
        self.block_table = []

    def fork(self, n: int) -> tuple[SequenceState, tuple[int, int] | None]:
        """A new sequence holding this one's first ``n`` tokens (``n <= pos``): their full pages shared, read-only
        from now on since both sequences only write past ``n``; the page holding tokens ``n - n % page ..`` (if
        ``n`` is not on a page boundary) taken anew.  Returns the new sequence and ``(from, to)``: the physical page
        whose contents the caller copies into the new one (copy-on-write at the first divergent page), or None."""
        if not 0 <= n <= self.pos:
            raise ValueError(f"a fork of {n} tokens from a sequence of {self.pos}")
        P = self.pool.page
        full = n // P
        new = SequenceState(self.pool, pos=n, tokens=list(self.tokens[:n]))
        new.block_table = [self.pool.share(p) for p in self.block_table[:full]]
        copy = None
        if n % P:
            try:
                new.block_table.append(self.pool.take())
            except KVCacheFull:
                new.release()
                raise
            copy = (self.block_table[full], new.block_table[-1])
        return new, copy
