"""Exit codes of ``systolica``, mapped in one place from the kind of error.

=====  ==========================================================================
code   meaning
=====  ==========================================================================
0      ok
1      the accelerator faulted (golden simulator, RTL or board: fault code and pc),
       or did not finish in time
2      bad input: a file, option, model, artifact or configuration that cannot be
       used, or a tool that is missing or failed (one line; ``--debug`` shows the
       traceback)
3      a check failed: ``sim --rtl`` found RTL and golden simulator differ,
       ``hw build`` found the design does not fit or misses its clock, ``isa-doc
       --check`` found the document stale
=====  ==========================================================================

Commands return :data:`EXIT_OK` or raise; :func:`exit_code` turns what they raise
into a code.  A command that has already printed its own report of a fault or a
failed check may return :data:`EXIT_FAULT` or :data:`EXIT_CHECK_FAILED` itself.
"""

from __future__ import annotations

__all__ = ["EXIT_OK", "EXIT_FAULT", "EXIT_BAD_INPUT", "EXIT_CHECK_FAILED", "EXIT_CODES_HELP", "CheckFailed",
           "exit_code", "is_project_error", "is_fault"]

EXIT_OK = 0
EXIT_FAULT = 1
EXIT_BAD_INPUT = 2
EXIT_CHECK_FAILED = 3

#: the epilog of ``systolica --help`` and of every command's ``--help``
EXIT_CODES_HELP = ("exit codes: 0 ok; 1 accelerator fault; 2 bad input (one-line message, --debug shows the "
                   "traceback); 3 a check failed")


class CheckFailed(Exception):  # noqa: N818 - it names the outcome, as the exit code table does
    """A check the user asked for did not pass (exit code 3); the message says which and by how much."""


def _fault_types() -> tuple[type, ...]:
    """The exceptions that mean the accelerator stopped (imported only when an error is being mapped)."""
    from systolica.driver.device import DeviceFault, DeviceTimeout
    from systolica.sim.faults import SimFault

    return (SimFault, DeviceTimeout, DeviceFault)


def is_fault(e: BaseException) -> bool:
    """Whether ``e`` says the accelerator faulted or hung (exit code 1)."""
    try:
        return isinstance(e, _fault_types())
    except ImportError:  # pragma: no cover - a broken install: not a fault of the accelerator
        return False


def is_project_error(e: BaseException) -> bool:
    """An error systolica raised on purpose (any exception class defined in a systolica module) or a file error:
    printed as one line.  Anything else is a bug and keeps its traceback."""
    return any(c.__module__.split(".")[0] == "systolica" for c in type(e).__mro__) or isinstance(e, OSError)


def exit_code(e: BaseException) -> int | None:
    """The exit code of an exception a command raised; None for a bug (the traceback is shown)."""
    if isinstance(e, CheckFailed):
        return EXIT_CHECK_FAILED
    if is_fault(e):
        return EXIT_FAULT
    if is_project_error(e):
        return EXIT_BAD_INPUT
    return None
