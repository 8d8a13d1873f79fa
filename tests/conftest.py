"""Shared fixtures: float64, shape checking on, the papers' data folder, and a noise-draw counter."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from pathlib import Path

import gpflow
import numpy as np
import pytest
from check_shapes import set_enable_check_shapes

from dpgp_gpflow import sampling

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path | None:
    """``$DPGP_SHARED_DATA`` or ``../shared/data`` beside the repository, if it exists."""
    env = os.environ.get("DPGP_SHARED_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(REPO_ROOT.parent / "shared" / "data")
    for c in candidates:
        if c.is_dir():
            return c
    return None


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The papers' data sets; tests that need them skip (with the reason) in a user's clone."""
    d = shared_data_dir()
    if d is None:
        pytest.skip("the papers' data folder ../shared/data is absent (set DPGP_SHARED_DATA to run this test)")
    return d


set_enable_check_shapes(True)
gpflow.config.set_default_float("float64")


#: Every sampler of :mod:`dpgp_gpflow.sampling` that draws DP noise, and how to read the number of
#: coordinates of a draw from its arguments.
_SAMPLERS = {
    "standard_normal": lambda args, kwargs: args[0] if args else kwargs["size"],
    "laplace": lambda args, kwargs: args[0] if args else kwargs["size"],
    "gumbel": lambda args, kwargs: args[0] if args else kwargs["size"],
    "float_standard_normal": lambda args, kwargs: args[0] if args else kwargs["size"],
    "float_laplace": lambda args, kwargs: args[0] if args else kwargs["size"],
    "gumbel_argmax": lambda args, kwargs: int(np.size(args[0] if args else kwargs["log_weights"])),
    "permute_and_flip": lambda args, kwargs: int(np.size(args[0] if args else kwargs["log_weights"])),
    "add_laplace": lambda args, kwargs: int(np.size(args[0] if args else kwargs["values"])),
}


@pytest.fixture
def draws(monkeypatch):
    """Counts every draw of DP noise: the calls of :mod:`dpgp_gpflow.sampling`'s samplers, the one
    module that draws noise. Holds the size of each draw. A sampler is counted when it returns (one
    that refuses its arguments drew nothing), and once even when it calls another sampler (a seeded
    ``gumbel_argmax`` calls ``gumbel``)."""
    calls = []
    for name, size_of in _SAMPLERS.items():
        original = getattr(sampling, name)

        def counting(*args, _original=original, _size_of=size_of, **kwargs):
            i = len(calls)
            result = _original(*args, **kwargs)
            if len(calls) == i:
                calls.append(_size_of(args, kwargs))
            return result

        monkeypatch.setattr(sampling, name, counting)
    return calls


#: The package's warnings that pyproject.toml's filterwarnings silences in the suite; the command line's
#: tests read them from stderr (the command line shows them under the filters in force), so there they are
#: shown as a user sees them.
_OWN_WARNINGS = ("ReproducibleNoiseWarning", "ClippingWarning", "ReleaseBudgetWarning", "HyperparameterWarning")
_COMMAND_LINE_TESTS = ("test_cli.", "test_cli_", "test_demo.", "test_entry_point.")


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.name.startswith(_COMMAND_LINE_TESTS):
            for name in _OWN_WARNINGS:
                item.add_marker(pytest.mark.filterwarnings(f"default::dpgp_gpflow.exceptions.{name}"))
