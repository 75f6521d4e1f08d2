"""The KV-cache page (the ATTN tile, ``P`` tokens) the compiler uses when the caller names none.

Every ATTN job streams one KV page of one head: ``2 * P * hd`` cycles of K and V, beside a fixed ~52 cycles a
job and, for each query row, its header and query lines and ~13 more (performance model,
``systolica.sim.perf_costs``): for a decode row of head_dim 64 on kv260 at 16 tokens, 80 fixed cycles beside
128 of K and V, ~40% of attention time.  Measured with the performance model (SmolLM2-135M on the kv260 preset,
assumed 200 MHz, prefill chunk 16, max_seq 528, 2026-12-05):

    page   prefill 128 tokens:                      decode at 128:         decode at 512:
           x compute bound  array util  LOAD share   tokens/s  attention    tokens/s  attention
    16     1.529            50.9 %      1.9 %        72.6      17.7 %       48.9      44.6 %
    64     1.373            56.7 %      2.5 %        75.2      13.4 %       55.5      36.5 %
    256    1.388            56.1 %      5.9 %        71.7      11.3 %       54.9      32.5 %

Past 64 the fixed cost is small and a bigger tile only adds LOAD time and rounding of short contexts up to a
page, so :data:`DEFAULT_PAGE` is 64.  Measured again with attention beside the weight streams (kv260 with
``attn_beside``, the decode ordered by GQA group, 2026-12-05): 128 is better at long contexts and in prefill
(decode at 512 2.576 -> 2.558 M cycles, prefill 128 80.2 -> 79.2 M) but worse at 256 (2.376 -> 2.436 M: a group's
streams need a page each to run beside, and 128 gives half as many), so it stays 64.  It is reduced (halved until it fits) when the scratchpad is too small:
the code generator keeps two or three KV-tile slots there (``kv0``, ``kv1``, ... of
:func:`systolica.compiler.plan.plan_program`: LOADs fill the others while ATTN reads one), each one head's tile
of :func:`systolica.layout.kv_tile` lines, and the rest of the scratchpad holds the activations, so two slots
may take at most 1 / :data:`KV_SPAD_SHARE` of it (a third is added only where three fit that share).  It is never larger than ``max_seq`` rounded up to a power of
two: a longer page only holds padding.  The integer reference must use the page the artifact has
(``QuantRunner(qmodel, page=art.page)``): the tile is where the online softmax rescales.
"""

from __future__ import annotations

from dataclasses import dataclass

from systolica.config import AccelConfig
from systolica.layout import kv_tile, lines_for
from systolica.model import ModelConfig

__all__ = ["DEFAULT_PAGE", "KV_SPAD_SHARE", "PageChoice", "choose_page", "page_and_context", "page_choice"]

#: tokens per KV page when the scratchpad and ``max_seq`` allow it (measured above)
DEFAULT_PAGE = 64
#: the two KV-tile slots take at most 1 / KV_SPAD_SHARE of the scratchpad; the rest is for activations
KV_SPAD_SHARE = 2


@dataclass(frozen=True)
class PageChoice:
    """The KV page of a compile: ``page`` tokens, ``source`` ``"chosen"`` (by :func:`page_choice`) or
    ``"requested"`` (the caller's), and ``why`` in words (the manifest's ``kv_page``)."""

    page: int
    source: str
    why: str

    def to_json(self) -> dict:
        return {"page": self.page, "source": self.source, "why": self.why}


def _tile_lines(cfg: AccelConfig, c: ModelConfig, page: int) -> int:
    return kv_tile(page.bit_length() - 1, lines_for(c.head_dim, cfg.cols)).lines


def page_choice(cfg: AccelConfig, c: ModelConfig, max_seq: int | None = None,
                requested: int | None = None) -> PageChoice:
    """The KV page for ``c`` on ``cfg`` serving ``max_seq`` tokens (default the model's): ``requested`` when given
    (checked by the compiler), else :data:`DEFAULT_PAGE` reduced as the module docstring says."""
    if requested is not None:
        return PageChoice(int(requested), "requested", "given by the caller")
    max_seq = c.max_seq if max_seq is None else int(max_seq)
    enough = 1 << max(0, max_seq - 1).bit_length()  # the smallest power of two >= max_seq
    page = min(DEFAULT_PAGE, enough)
    why = f"default {DEFAULT_PAGE} tokens" if page == DEFAULT_PAGE else \
        f"{page} tokens hold max_seq={max_seq} (default {DEFAULT_PAGE})"
    budget = cfg.spad_lines // KV_SPAD_SHARE
    if 2 * _tile_lines(cfg, c, page) > budget:
        big = page
        while page > 1 and 2 * _tile_lines(cfg, c, page) > budget:
            page //= 2
        why = (f"{page} tokens: two KV-tile slots of {big} tokens ({2 * _tile_lines(cfg, c, big)} lines, head_dim "
               f"{c.head_dim}) exceed 1/{KV_SPAD_SHARE} of the {cfg.spad_lines}-line scratchpad")
    return PageChoice(page, "chosen", why)


def choose_page(cfg: AccelConfig, c: ModelConfig, max_seq: int | None = None) -> int:
    """Tokens per KV page (ATTN tile) for model ``c`` on ``cfg``, serving ``max_seq`` tokens (default the model's).

    :data:`DEFAULT_PAGE` (64: at 16 tokens a job's fixed ~52 cycles are ~40% of attention time, see the module
    docstring for the measurements), halved while two KV-tile slots would take more than 1 /
    :data:`KV_SPAD_SHARE` of the scratchpad, and at most ``max_seq`` rounded up to a power of two.

    Examples
    --------
    >>> from systolica.config import preset
    >>> from systolica.testmodels import random_model
    >>> choose_page(preset("default"), random_model(max_seq=512).config)
    64
    >>> choose_page(preset("default"), random_model(max_seq=512).config, max_seq=20)
    32
    """
    return page_choice(cfg, c, max_seq).page


def page_and_context(cfg: AccelConfig, c: ModelConfig, tokens: int, page: int | None = None) -> tuple[int, int]:
    """``(page, max_seq)`` for serving ``tokens`` tokens (at most the model's ``max_seq``): ``page`` as given or
    :func:`choose_page`'s for them, and ``max_seq`` those tokens rounded up to whole pages (the pages hold them
    anyway), at most the model's.  ``compile_model(page=None, max_seq=max_seq)`` chooses the same page."""
    tokens = min(int(tokens), c.max_seq)
    page = choose_page(cfg, c, tokens) if page is None else int(page)
    return page, min(c.max_seq, -(-tokens // page) * page)
