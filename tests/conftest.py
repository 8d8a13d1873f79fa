"""Shared fixtures: float64, shape checking on, the papers' data folder, and a noise-draw counter."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from pathlib import Path

import gpflow
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


@pytest.fixture
def draws(monkeypatch):
    """Counts every draw of DP noise: the calls of :mod:`dpgp_gpflow.sampling`'s samplers (Gaussian,
    Laplace, Gumbel), the one module that draws noise. Holds the size of each draw."""
    calls = []
    for name in ("standard_normal", "laplace", "gumbel"):
        original = getattr(sampling, name)

        def counting(size, seed=None, _original=original):
            calls.append(size)
            return _original(size, seed)

        monkeypatch.setattr(sampling, name, counting)
    return calls
