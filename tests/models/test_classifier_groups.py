"""Persons (``groups=``) on the Laplace classifiers: every release protects all the labels of one person.

Binary (DPLaplaceGPC, DPSparseLaplaceGPC): a person's labels all flip, each by up to d = 2, so every
Newton step (each a cloaking release of ``C_t y + b_t``) and the sparse release must bound the whitened
shift ``||F^+ C_G delta||`` over the person's whole box. Each check here is a brute force in NumPy: the
cloaking matrices from their definitions (``1/2 (K^{-1} + W)^{-1}`` at the released latents, the SoR
weight map), every corner ``2 s`` (both signs) and random interior points of every person's box, against
the published noise factor (``auditing.person_shifts`` / ``auditing.audit_exact``). The broken variant
(the per-row release of the same data) must fail the same audit and ``dp.audit``.

``groups=None`` is bit for bit the release before groups existed: float.hex values recorded at
59c4e24 (before this change) with the same seeds.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import gpflow
import numpy as np
import pytest
from reference import k_se, range_projector
from scipy import special

import dpgp_gpflow as dp
from dpgp_gpflow import PrivacyAccountant, ReproducibleNoiseWarning
from dpgp_gpflow.models import DPLaplaceGPC, DPSparseLaplaceGPC
from dpgp_gpflow.streaming import release_function as streamed_release_function

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audits"))
import auditing  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ReproducibleNoiseWarning")

EPS, DELTA = 1.0, 0.01
VAR, LS = 1.2, 1.0
D = 2.0  # a label flips from -1 to +1
JITTER = 1e-6


def kernel():
    return gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=LS)


def K_np(A, B=None):
    return k_se(A, A if B is None else B, variance=VAR, lengthscale=LS)


def newton_map_np(K: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``C = 1/2 (K^{-1} + W)^{-1}``, ``W = pi (1 - pi)`` at the public ``f`` (``f = 0``: step 1)."""
    pi = special.expit(f)
    return 0.5 * np.linalg.inv(np.linalg.inv(K) + np.diag(pi * (1.0 - pi)))


def sor_map_np(X: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """``C_w = 1/2 (I + Phi^T Phi / 4)^{-1} Phi^T``, ``Phi = K_XZ L_ZZ^{-T}`` (GPflow's jitter on K_ZZ)."""
    Lzz = np.linalg.cholesky(K_np(Z) + JITTER * np.eye(len(Z)))
    Phi = np.linalg.solve(Lzz, K_np(Z, X)).T
    return 0.5 * np.linalg.solve(np.eye(len(Z)) + Phi.T @ Phi / 4.0, Phi.T)


def persons_problem(sizes, seed=0, spread=0.25):
    """Persons with the given numbers of rows, their visits near one centre (nearly parallel columns of
    C: the worst case for persons), labels from a smooth rule with noise; rows shuffled (a person's rows
    need not be adjacent) and arbitrary integer identifiers."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(len(sizes)), sizes)
    centres = rng.uniform(0.0, 6.0, (len(sizes), 2))
    X = centres[groups] + spread * rng.uniform(-1.0, 1.0, (groups.size, 2))
    y = np.where(np.sin(X[:, 0]) + 0.5 * X[:, 1] - 1.5 + 0.4 * rng.standard_normal(groups.size) > 0, 1.0, -1.0)
    perm = rng.permutation(groups.size)
    return X[perm], y[perm][:, None], groups[perm] * 5 + 2


SIZES = [1, 2, 3, 4, 1, 2, 3, 4, 2]  # 22 rows


@pytest.fixture(scope="module")
def problem():
    return persons_problem(SIZES)


def person_audit(release, C, groups, interior=10):
    """The exact audit over every corner and interior points of every person's box: the release publishes
    ``P_F C y + b + noise``, so a person's change shifts it by ``P_F C_G delta``."""
    shifts, _ = auditing.person_shifts(C, groups, D, interior=interior)
    return auditing.audit_exact(release, shifts @ range_projector(release.noise_factor).T)


def full_maps(X, releases):
    """The NumPy map of every released Newton step: step 1 at f = 0, step t + 1 at step t's latents."""
    K = K_np(X)
    return [newton_map_np(K, f) for f in [np.zeros(len(X))] + [r.mean for r in releases[:-1]]]


# ---------------------------------------------------------------------------------------------
# groups=None: bit for bit the release before groups (recorded at 59c4e24)


def _record_problem():
    rng = np.random.default_rng(7)
    X = rng.uniform(0.0, 6.0, (14, 2))
    y = np.where(np.sin(X[:, 0]) + 0.5 * X[:, 1] - 1.5 > 0, 1.0, -1.0)[:, None]
    return X, y


#: mean[:4] and noise_factor[0, 0] of each step, seed 5, (1, 0.01): two full steps, then the sparse release
_BEFORE_FULL = (
    ['0x1.2af69ee930d2ap+2', '0x1.7456568f17218p+0', '0x1.75192a764255cp+2', '0x1.92550851f0dffp+1',
     '-0x1.d5ff6f99ff09bp-1'],
    ['-0x1.88d50b9866f54p+0', '-0x1.744d0472456c4p+1', '-0x1.97ce69f8c928fp+2', '0x1.0b8d34ac501e0p-1',
     '-0x1.21ed304251912p+0'],
)
_BEFORE_SPARSE = ['0x1.dbf1346b844f7p-1', '-0x1.173e77342c950p+0', '0x1.c47155f6efb28p+0', '-0x1.46f1ba417942ep-1',
                  '-0x1.2790b063022a7p-2']


def _hex(rel):
    return [float(v).hex() for v in rel.mean[:4]] + [float(rel.noise_factor[0, 0]).hex()]


@pytest.mark.parametrize("groups", ["none", "singletons"])
def test_without_persons_the_release_is_bit_identical_to_before(groups):
    X, y = _record_problem()
    kw = {} if groups == "none" else {"groups": np.arange(len(X))[::-1]}  # every person one row: A = I
    full = DPLaplaceGPC((X, y), kernel(), hyperparameters_public=True, **kw)
    rel = full.release(epsilon=EPS, delta=DELTA, steps=2, seed=5)
    assert [_hex(r) for r in rel.releases] == [list(s) for s in _BEFORE_FULL]
    assert all(r.neighbours == "row" for r in rel.releases)
    sparse = DPSparseLaplaceGPC((X, y), kernel(), X[::3], hyperparameters_public=True, **kw)
    assert _hex(sparse.release(epsilon=EPS, delta=DELTA, seed=5).release) == _BEFORE_SPARSE


# ---------------------------------------------------------------------------------------------
# Brute force over every person's box; the per-row release fails it


@pytest.mark.parametrize("steps", [1, 2])
def test_every_newton_step_protects_every_corner_of_every_person(problem, steps):
    X, y, groups = problem
    model = DPLaplaceGPC((X, y), kernel(), hyperparameters_public=True, groups=groups)
    released = model.release(epsilon=EPS, delta=DELTA, steps=steps)
    assert all(r.neighbours == "person (groups, up to 4 rows)" for r in released.releases)
    for rel, C in zip(released.releases, full_maps(X, released.releases)):
        audit = person_audit(rel, C, groups)
        assert audit.passed, audit.failures
        assert audit.mu_ratio > 0.98  # tight: the worst corner is what the noise was fitted to
    assert dp.audit(released, model).passed


def test_the_per_row_release_fails_the_person_level_audit(problem):
    X, y, groups = problem
    grouped = DPLaplaceGPC((X, y), kernel(), hyperparameters_public=True, groups=groups)
    per_row = DPLaplaceGPC((X, y), kernel(), hyperparameters_public=True)
    released = per_row.release(epsilon=EPS, delta=DELTA, steps=2)
    assert dp.audit(released, per_row).passed  # a valid per-row release ...
    maps = full_maps(X, released.releases)
    row_audit = auditing.audit_exact(released.releases[0], (D * maps[0].T) @ range_projector(
        released.releases[0].noise_factor).T)
    assert row_audit.passed, row_audit.failures
    for rel, C in zip(released.releases, maps):  # ... that protects no person of several rows
        audit = person_audit(rel, C, groups, interior=0)
        assert not audit.passed and audit.mu_ratio > 1.5
    report = dp.audit(released, grouped)  # the model's groups: caught
    assert not report.passed and report.epsilon > 1.5 * EPS


def test_the_measured_shift_of_a_persons_flip_is_the_shift_audited(problem):
    """Black box, first step: two seeded releases whose labels differ in all of one person's rows differ by
    exactly ``P_F C_G (y' - y)``, and that shift is within the release's claim."""
    X, y, groups = problem
    C = newton_map_np(K_np(X), np.zeros(len(X)))
    for person in np.unique(groups)[[3, 7, 8]]:  # persons of 4, 4 and 2 rows
        rows = np.flatnonzero(groups == person)
        y1 = y.copy()
        y1[rows] = -y1[rows]  # every label of the person flips: a corner of the box
        r0 = DPLaplaceGPC((X, y), kernel(), hyperparameters_public=True, groups=groups).release(
            epsilon=EPS, delta=DELTA, seed=3).releases[0]
        r1 = DPLaplaceGPC((X, y1), kernel(), hyperparameters_public=True, groups=groups).release(
            epsilon=EPS, delta=DELTA, seed=3).releases[0]
        np.testing.assert_array_equal(r0.noise_factor, r1.noise_factor)  # public: the same on both
        expected = range_projector(r0.noise_factor) @ C[:, rows] @ (y1 - y)[rows, 0]
        np.testing.assert_allclose(r1.mean - r0.mean, expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())
        audit = auditing.audit_exact(r0, (r1.mean - r0.mean)[None, :])
        assert audit.passed, audit.failures


def test_a_person_above_the_corner_limit_is_protected_by_the_bound():
    X, y, groups = persons_problem([6, 1, 2, 3, 1, 2], seed=3)
    model = DPLaplaceGPC((X, y), kernel(), hyperparameters_public=True, groups=groups)
    rel = model.release(epsilon=EPS, delta=DELTA).releases[0]
    C = newton_map_np(K_np(X), np.zeros(len(X)))
    audit = person_audit(rel, C, groups, interior=20)  # all 2^6 corners of the large person
    assert audit.passed, audit.failures
    assert rel.neighbours == "person (groups, up to 6 rows)"


def test_the_sparse_release_protects_every_person(problem):
    X, y, groups = problem
    Z = X[::3].copy()
    model = DPSparseLaplaceGPC((X, y), kernel(), Z, hyperparameters_public=True, groups=groups)
    released = model.release(epsilon=EPS, delta=DELTA)
    Cw = sor_map_np(X, Z)
    audit = person_audit(released.release, Cw, groups)
    assert audit.passed, audit.failures
    assert audit.mu_ratio > 0.98
    assert dp.audit(released, model).passed
    with_reference = model.release(epsilon=EPS, delta=DELTA, reference_inputs=X)  # R w1: the map R C_w
    audit = person_audit(with_reference.release, with_reference.coordinates.numpy() @ Cw, groups)
    assert audit.passed, audit.failures
    per_row = DPSparseLaplaceGPC((X, y), kernel(), Z, hyperparameters_public=True).release(epsilon=EPS, delta=DELTA)
    assert not person_audit(per_row.release, Cw, groups, interior=0).passed
    assert not dp.audit(per_row, model).passed


# ---------------------------------------------------------------------------------------------
# What is refused, before anything is reserved


def test_bad_groups_are_refused_when_the_model_is_built(problem):
    X, y, groups = problem
    for cls, extra in ((DPLaplaceGPC, ()), (DPSparseLaplaceGPC, (X[::3],))):
        with pytest.raises(ValueError, match="groups"):
            cls((X, y), kernel(), *extra, groups=groups[:-1])
        with pytest.raises(ValueError, match="groups must be integers"):
            cls((X, y), kernel(), *extra, groups=np.r_[groups[:-1], 0.5])
        np.testing.assert_array_equal(cls((X, y), kernel(), *extra, groups=groups.astype(float)).groups, groups)


def test_streamed_and_dask_classifiers_refuse_groups(problem, draws):
    X, y, groups = problem
    model = DPSparseLaplaceGPC((X, y), kernel(), X[::3], hyperparameters_public=True, groups=groups)
    accountant = PrivacyAccountant(epsilon=10.0, delta=0.5)
    with pytest.raises(NotImplementedError, match="groups"):
        streamed_release_function(model, epsilon=EPS, delta=DELTA, accountant=accountant)
    assert accountant.spent == (0.0, 0.0) and accountant.held == (0.0, 0.0) and draws == []
    da = pytest.importorskip("dask.array")
    with pytest.raises(NotImplementedError, match="Dask rows"):
        DPSparseLaplaceGPC((da.from_array(X), da.from_array(y)), kernel(), X[::3], groups=groups)


def test_groups_are_public_fixed_and_copied(problem):
    X, y, groups = problem
    model = DPLaplaceGPC((X, y), kernel(), groups=groups)
    model.groups[0] = -1
    np.testing.assert_array_equal(model.groups, groups)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)
        assert DPLaplaceGPC((X, y), kernel()).groups is None


def test_selection_of_a_grouped_classifier_is_for_persons(problem):
    """Selection reads the model's groups: its sensitivity covers a person's rows (the triangle inequality
    over them, docs/selection.md#groups), so it exceeds the per-row one here, and the relation is recorded."""
    X, y, groups = problem
    grid = [{".kernel.lengthscales": 1.0}, {".kernel.lengthscales": 2.0}]
    grouped = dp.selection.select_hyperparameters(
        DPLaplaceGPC((X, y), kernel(), hyperparameters_public=True, groups=groups), grid, epsilon=1.0, seed=0)
    per_row = dp.selection.select_hyperparameters(
        DPLaplaceGPC((X, y), kernel(), hyperparameters_public=True), grid, epsilon=1.0, seed=0)
    assert grouped.neighbours == "person (groups, up to 4 rows)" and per_row.neighbours == "row"
    assert grouped.sensitivity > 1.5 * per_row.sensitivity
