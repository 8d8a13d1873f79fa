"""Shared fixtures: float64, shape checking on, the papers' data folder, and a noise-draw counter."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
#: Under xdist (pyproject.toml: ``-n 2`` on a 2-core machine) each worker computes on one thread: two workers of
#: two BLAS and two TensorFlow threads each fought over the two cores (measured side by side, tests/models and
#: test_pipeline not slow on 2 workers: 141-144 s with the default threads, 125-128 s with one). Set before numpy
#: and TensorFlow start their thread pools; a single-process run (-n 0) keeps the defaults.
XDIST_WORKER = "PYTEST_XDIST_WORKER" in os.environ
if XDIST_WORKER:
    for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, "1")
from pathlib import Path

import tensorflow as tf

if XDIST_WORKER:
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

import gpflow  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from check_shapes import set_enable_check_shapes  # noqa: E402

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


def classifier_kernel() -> gpflow.kernels.SquaredExponential:
    """A fresh copy of the classifier tests' kernel (tests/models), the one reference.K_np computes in NumPy."""
    from reference import CLASSIFIER_LS, CLASSIFIER_VAR

    return gpflow.kernels.SquaredExponential(variance=CLASSIFIER_VAR, lengthscales=CLASSIFIER_LS)


#: Every sampler of :mod:`dpgp_gpflow.sampling` that draws DP noise, and how to read the number of
#: coordinates of a draw from its arguments.
_SAMPLERS = {
    "standard_normal": lambda args, kwargs: args[0] if args else kwargs["size"],
    "laplace": lambda args, kwargs: args[0] if args else kwargs["size"],
    "gumbel": lambda args, kwargs: args[0] if args else kwargs["size"],
    "float_standard_normal": lambda args, kwargs: args[0] if args else kwargs["size"],
    "float_laplace": lambda args, kwargs: args[0] if args else kwargs["size"],
    "gumbel_argmax": lambda args, kwargs: int(np.size(args[0] if args else kwargs["log_weights"])),
    "permute_and_flip_index": lambda args, kwargs: int(np.size(args[0] if args else kwargs["log_weights"])),
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



@pytest.fixture
def small_default_grid(monkeypatch):
    """The public default grid (:func:`dpgp_gpflow.selection.default_grid`) thinned to 4 of its candidates, spread
    over it, wherever the package reads it (the selection and the command line look it up when they run): for
    tests whose point is not the grid, since a private selection fits every candidate on every fold. Returns the
    thinned function (a test's Python-API reference calls it too)."""
    import dpgp_gpflow.selection as selection_package
    from dpgp_gpflow.selection import grid, select

    def thinned(model):
        full = grid.default_grid(model)
        return full[:: max(1, len(full) // 4)][:4]

    monkeypatch.setattr(select, "default_grid", thinned)
    monkeypatch.setattr(selection_package, "default_grid", thinned)
    return thinned

#: The package's warnings that pyproject.toml's filterwarnings silences in the suite; the command line's
#: tests read them from stderr (the command line shows them under the filters in force), so there they are
#: shown as a user sees them.
_OWN_WARNINGS = ("ReproducibleNoiseWarning", "ClippingWarning", "ReleaseBudgetWarning", "HyperparameterWarning")
_COMMAND_LINE_TESTS = ("test_cli.", "test_cli_", "test_demo.", "test_entry_point.")


#: The test files that take longest on one worker, longest first: their share of the suite's worker time in
#: ``pytest --durations=0`` (2026-11-28, d1a4d76 on a quiet 2-core machine: 1,209 worker-seconds,
#: 634 s of wall time; test_lengthscales and test_cli_multi_output re-placed after a47bcf6 and bf9dc37 cut them to
#: about a fifth). pyproject.toml runs ``--dist loadfile --no-loadscope-reorder``: xdist hands out whole files in
#: the order collected, the next file to whichever worker is nearly done. Collected first, the long files are spread
#: before the short ones fill the gaps, so the two workers finish together (longest-first list scheduling); xdist's
#: own order (most tests first) can leave a long file of few tests to one worker at the end while the other idles.
#: Files of few but long tests belong here too: ranked by count they are handed out last, and the worker that takes
#: one then runs alone (test_typing's mypy, 14 s in a clean clone, was the last file of every run before 2026-11-28).
#: Re-rank from a new --durations=0 run when files change.
LONG_FILES = (
    "test_notebooks.py",  # one child process for every notebook (~45 s quiet): first, so it never runs last
    "test_selection.py",  # 5.8%
    "test_docs.py",  # 5.6%
    "streaming/test_distributed.py",  # 4.8%
    "test_cli.py",  # 7.2% (before bf9dc37, about 6% after; about 4% after a84be90, 3fd78b9, e80783c)
    "test_engine.py",  # 3.5%
    "models/test_sgpr_base.py",  # 3.5%
    "test_cli_process.py",  # ~3% (estimated): one fresh process for the demo and dpgp
    "test_noise_planning.py",  # 3.1%
    "streaming/test_streaming_groups.py",  # 3.0%
    "fuzz/test_fuzz_models.py",  # 3.0%
    "test_selection_multi_output.py",  # 2.7%
    "streaming/test_streaming_outputs.py",  # 2.6%
    "fuzz/test_fuzz_selection.py",  # 2.5%
    "test_ledger.py",  # 2.2%
    "streaming/test_streaming.py",  # 2.2%
    "audits/test_audits.py",  # 2.1%
    "audits/test_hockey_stick_persons.py",  # 2.0%
    "models/test_base.py",  # 1.7%
    "test_selection_groups.py",  # 1.6%
    "whole_rows/test_lengthscales.py",  # 6.0% before a47bcf6, about 1.2% after
    # estimated (not from a --durations=0 run): a -n 0 run of the 20 files of fewest tests, loaded machine, and the
    # 2026-11-28 09:25 clean-clone run's 40 slowest tests
    "kernels/test_grid_integral.py",  # 7 tests, 23% of those 20 files' time (two tests of 6.0 and 5.2 s in CI)
    "test_cli_startup.py",  # 2 tests, one a fresh process (16.2 s in CI)
    "test_typing.py",  # 1 test: mypy with no cache in a clean clone (13.9 s in CI)
    "models/test_multiclass_streamed.py",  # 1.3%
    "whole_rows/test_classification.py",  # 1.2%
    "test_default_grid.py",  # estimated: 7 tests, one a selection over the whole default grid (7.4 s in CI)
    "test_cli_multi_output.py",  # 2.8% before bf9dc37, about 1% after
)


def _scheduling_rank(items) -> dict:
    """{file: rank}: LONG_FILES in their order, then the other files by number of tests, most first (xdist's
    default order), ties in collection order."""
    counts: dict = {}
    for item in items:
        counts[item.path] = counts.get(item.path, 0) + 1
    tests = Path(__file__).resolve().parent
    long = {tests / name: i for i, name in enumerate(LONG_FILES)}
    others = sorted((p for p in counts if p not in long), key=lambda p: -counts[p])  # stable
    return {**long, **{p: len(long) + i for i, p in enumerate(others)}}


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.name.startswith(_COMMAND_LINE_TESTS):
            for name in _OWN_WARNINGS:
                item.add_marker(pytest.mark.filterwarnings(f"default::dpgp_gpflow.exceptions.{name}"))
    rank = _scheduling_rank(items)
    items.sort(key=lambda item: rank[item.path])  # stable: each file's tests keep their order and stay together
