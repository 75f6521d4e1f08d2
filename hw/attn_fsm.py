"""A one-hot state machine for the attention unit (hw/attention_unit.py): one flip-flop a state.

Amaranth's ``m.FSM`` keeps a binary state register, so every ``with m.State(..)`` decodes it (two LUT levels
and the register's whole fan-out ahead of the handshake: 4.7 ns of routing from one state bit measured on
ECP5).  Here each state is a flag of its own; a state's logic sees its flag directly.
"""

from __future__ import annotations

from contextlib import contextmanager

from amaranth import Module, Signal

__all__ = ["OneHotFSM"]


class OneHotFSM:
    """States ``names`` (the first is the reset state), one flag each (``fsm[name]``).

    ``with fsm.state(name):`` opens the state's logic (the flags are exclusive, so the states' blocks are
    plain ``If`` s with no priority between them); inside it ``fsm.goto(other)`` moves on at the clock edge.
    A state's block calls ``goto`` at most once on any path through it (use ``If`` / ``Else`` between targets).
    ``fsm.group(name, members)`` is one more flag, set while the machine is in one of ``members`` (loaded with
    the transitions, so that what it drives sees a flip-flop, not an OR of state flags).  Declare groups
    before the states' blocks.
    """

    def __init__(self, m: Module, names, name: str):
        self.m, self.name = m, name
        self.flag = {n: Signal(name=f"{name}_{n.lower()}", init=int(k == 0)) for k, n in enumerate(names)}
        self._first = names[0]
        self._cur = None
        self._groups = []

    def __getitem__(self, name: str) -> Signal:
        return self.flag[name]

    def group(self, name: str, members) -> Signal:
        members = frozenset(members)
        assert self._cur is None and not members - set(self.flag), members
        g = Signal(name=f"{self.name}_{name}", init=int(self._first in members))
        self._groups.append((g, members))
        return g

    @contextmanager
    def state(self, name: str):
        assert self._cur is None, "states do not nest"
        with self.m.If(self.flag[name]):
            self._cur = name
            try:
                yield
            finally:
                self._cur = None

    @property
    def current(self) -> Signal:
        """The flag of the state whose block is open (for logic gathered there and built after the states)."""
        assert self._cur is not None, "not inside a state's block"
        return self.flag[self._cur]

    def goto(self, name: str):
        cur = self._cur
        assert cur is not None and name != cur, (cur, name)
        self.m.d.sync += [self.flag[cur].eq(0), self.flag[name].eq(1)]
        self.m.d.sync += [g.eq(int(name in mem)) for g, mem in self._groups if (name in mem) != (cur in mem)]
