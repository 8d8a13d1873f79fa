"""mypy on the package (configuration: ``[tool.mypy]`` in pyproject.toml) finds no error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_on_the_package():
    pytest.importorskip("mypy", reason="mypy is in the dev extra: pip install -e '.[dev,dask]'")
    proc = subprocess.run([sys.executable, "-m", "mypy", "dpgp_gpflow"], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
