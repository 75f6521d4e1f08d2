"""Progress of the long steps (model fetch, compile passes, Verilog generation, synthesis): one spinner line per
step with its elapsed time, on stderr, and only on a terminal without ``--json`` (pipes and logs stay clean)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator

__all__ = ["steps", "progress_enabled"]


def progress_enabled(args: argparse.Namespace | None = None) -> bool:
    """Progress is shown when stderr is a terminal and no ``--json`` was asked for."""
    if args is not None and getattr(args, "json", None) is not None:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stderr
        return False


@contextlib.contextmanager
def steps(enabled: bool, first: str | None = None, *, transient: bool = False) -> Iterator[Callable[..., None]]:
    """A ``say(step)`` callable: each call finishes the step before and starts a spinner for the new one;
    ``say(text, replace=True)`` rewrites the current step's line instead (a long step's own progress).

    With ``enabled`` False, ``say`` does nothing.  ``transient``: the lines go away when the block ends.
    """
    if not enabled:
        yield lambda step, replace=False: None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=transient) as prog:
        current: list = []

        def say(step: str, replace: bool = False) -> None:
            if replace and current:
                prog.update(current[-1], description=step)
                return
            if current:
                prog.update(current[-1], total=1, completed=1)
            current.append(prog.add_task(step, total=None))

        if first:
            say(first)
        yield say
        if current:
            prog.update(current[-1], total=1, completed=1)
