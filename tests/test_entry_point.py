"""The console scripts start fast and quietly: ``dpgp --help`` parses without importing TensorFlow,
GPflow or pandas; the entry points in pyproject.toml exist (tests/test_cli_process.py: the demo prints no TensorFlow
start-up log)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: A user's environment: TensorFlow's log level unset (the suite's conftest sets one).
ENV = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
HEAVY = ("tensorflow", "gpflow", "tensorflow_probability", "pandas", "dp_accounting")

_HELP = """
import contextlib, io, json, sys
import dpgp_gpflow.cli
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            dpgp_gpflow.cli.main(argv)
        except SystemExit:
            pass
print(json.dumps(sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)))
"""


def test_help_and_usage_errors_import_no_tensorflow():
    argvs = [["--help"], ["release", "--help"], ["select", "--help"], ["budget", "init", "--help"],
             ["demo", "--help"], ["release", "data.csv"], ["no-such-command"]]
    proc = subprocess.run([sys.executable, "-c", _HELP, json.dumps(argvs), json.dumps(HEAVY)], env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
    assert proc.stderr == ""


def test_importing_the_package_imports_no_tensorflow():
    code = f"import sys, dpgp_gpflow; print([m for m in {HEAVY!r} if m in sys.modules])"
    proc = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_console_scripts_exist():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == {"dpgp", "dpgp-demo"}
    for target in scripts.values():
        module, function = target.split(":")
        assert module.startswith("dpgp_gpflow."), target  # inside the package
        assert callable(getattr(importlib.import_module(module), function))


def test_parser_choices_agree_with_the_library():
    import gpflow

    from dpgp_gpflow import cli, composition, selection

    assert cli.SELECTION_MECHANISMS == tuple(selection.MECHANISMS)
    assert cli.COMPOSITIONS == tuple(composition.COMPOSITIONS)
    for name, cls in cli.KERNELS.items():
        assert issubclass(getattr(gpflow.kernels, cls), gpflow.kernels.Kernel), name
