"""Test-side host loop: runs a compiled artifact on the golden simulator, as the runtime will.

Prefill runs a prompt in the runtime's runs (:func:`systolica.driver.runtime.prefill_runs`: head-less
chunks, then one ``prefill`` run ending with the prompt; every op is row-wise, so they give the same
integers as decode steps).  The block table is a permutation of the
physical pages so that paging is exercised, not just the identity.
"""

from __future__ import annotations

import numpy as np

from systolica import numerics as nx
from systolica.artifact import Artifact, StepState
from systolica.driver.runtime import prefill_runs
from systolica.program import Program
from systolica.sim.golden import GoldenSim


class GoldenRunner:
    def __init__(self, art: Artifact, seed: int = 0):
        self.art = art
        self.cfg = art.config
        size = -(-art.dram_bytes // 4096) * 4096
        self.sim = GoldenSim(self.cfg, dram=size)
        self.sim.window[:art.image.size] = art.image
        n_pages = int(art.manifest["kv"]["n_pages"])
        self.block_table = list(np.random.default_rng(seed).permutation(n_pages))
        self.pos = 0
        self.retired = {}  # program kind -> instructions retired by the last run of it

    def _run(self, kind: str, tokens) -> np.ndarray:
        words = self.art.patched_program(kind, StepState(self.pos, list(tokens), self.block_table))
        res = self.sim.run(Program(words, self.cfg))
        self.retired[kind] = res.counters.instructions
        self.pos += len(tokens)
        return self.art.read_logits(self.sim.window)

    def prefill(self, tokens) -> np.ndarray:
        """Feed ``tokens``; returns the fx logits after the last one."""
        toks = [int(t) for t in tokens]
        out = None
        for run in prefill_runs(self.art, len(toks)):
            out = self._run(run.kind, toks[run.start:run.start + run.rows])
        return out

    def decode(self, token: int) -> np.ndarray:
        return self._run("decode", [int(token)])


def assert_lockstep(gold, ref, prompt, first: int, steps: int = 16) -> None:
    """Prefill ``prompt`` on both, then decode ``steps`` greedy tokens starting from ``first``:
    every fx logit row of ``gold`` must equal ``ref``'s (a :class:`QuantRunner`) bit for bit."""
    np.testing.assert_array_equal(gold.prefill(prompt), ref.prefill(prompt)[-1], err_msg="prefill")
    tok = first
    for step in range(steps):
        want = ref.decode(tok)
        np.testing.assert_array_equal(gold.decode(tok), want, err_msg=f"decode step {step} (token {tok})")
        tok = int(nx.argmax(want[None, :])[0])
