"""The test setup itself: `--fail-on-skip`, which CI's pynq environment runs with, turns any skip into a failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_fail_on_skip_fails_a_run_where_pynq_is_missing(tmp_path):
    hidden = tmp_path / "pynq"
    hidden.mkdir()
    (hidden / "__init__.py").write_text('raise ImportError("pynq hidden by this test")\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/driver/test_pynq_device.py"]
    plain = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "pynq hidden by this test" in plain.stdout and "see README, Tests (.venv-pynq)" in plain.stdout
    strict = subprocess.run(cmd + ["--fail-on-skip"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert "--fail-on-skip: 4 skipped" in strict.stdout and "passed" in strict.stdout
