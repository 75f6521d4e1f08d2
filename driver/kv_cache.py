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
    def __init__(self, n_pages: int, page: int):
        self.n_pages, self.page = n_pages, page
        self._free = list(range(n_pages - 1, -1, -1))  # pop() hands out page 0 first

    @property
    def free(self) -> int:
        return len(self._free)

    def take(self) -> int:
        if not self._free:
            raise KVCacheFull(f"all {self.n_pages} KV pages ({self.page} tokens each) are in use: finish a "
                              "sequence, shorten the prompt, or compile with a larger max_seq")
        return self._free.pop()

    def give_back(self, pages: list[int]) -> None:
        self._free.extend(reversed(pages))


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
