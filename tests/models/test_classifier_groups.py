"""Persons (``groups=``) on the Laplace classifiers: every release protects all the labels of one person.

Binary (DPLaplaceGPC, DPSparseLaplaceGPC): a person's labels all flip, each by up to d = 2, so every
Newton step (each a cloaking release of ``C_t y + b_t``) and the sparse release must bound the whitened
shift ``||F^+ C_G delta||`` over the person's whole box. Each check here is a brute force in NumPy: the
cloaking matrices from their definitions (``1/2 (K^{-1} + W)^{-1}`` at the released latents, the SoR
weight map), every corner ``2 s`` (both signs) and random interior points of every person's box, against
the published noise factor (``auditing.person_shifts`` / ``auditing.audit_exact``). The broken variant
(the per-row release of the same data) must fail the same audit and ``dp.audit``.

``groups=None`` is bit for bit the release before groups existed: float.hex values recorded at
59c4e24 (before this change) with the same seeds, and beside them every released step recomputed in NumPy
(``P_F (C_t y + b_t) + F xi`` with the Newton map at the previous step's released latents and ``xi`` the
step's seeded draw), so the pins certify a correct release, not only an unchanged one.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import gpflow
import numpy as np
import pytest
from conftest import classifier_kernel as kernel
from reference import CLASSIFIER_LS, CLASSIFIER_VAR, K_np, mahalanobis_shifts, newton_map_np, range_projector

import dpgp_gpflow as dp
from dpgp_gpflow import PrivacyAccountant, ReproducibleNoiseWarning
from dpgp_gpflow.models import (
    DPLaplaceGPC,
    DPMulticlassLaplaceGPC,
    DPSparseLaplaceGPC,
    DPSparseMulticlassLaplaceGPC,
)
from dpgp_gpflow.streaming import release_function as streamed_release_function

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audits"))
import auditing  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ReproducibleNoiseWarning")

EPS, DELTA = 1.0, 0.01
VAR, LS = CLASSIFIER_VAR, CLASSIFIER_LS
D = 2.0  # a label flips from -1 to +1
JITTER = 1e-6


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
    return [newton_map_np(K, f) for f in [np.zeros(len(X))] + [r.mean[:, 0] for r in releases[:-1]]]


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
    return [float(v).hex() for v in np.ravel(rel.mean)[:4]] + [float(rel.noise_factor[0, 0]).hex()]


def _step_seed(seed: int, t: int) -> int:
    """Step ``t``'s seed (docs: ``seed`` itself for the first, a SeedSequence of ``(seed, t)`` after)."""
    return seed if t == 0 else int(np.random.SeedSequence([seed, t]).generate_state(1, dtype=np.uint32)[0])


def _class_seed(seed: int, num_classes: int, label: int) -> int:
    return int(np.random.SeedSequence([seed, num_classes, label]).generate_state(1, dtype=np.uint32)[0])


def _seeded_noise(rel, seed: int) -> np.ndarray:
    """``F xi``: the published noise factor times the seed's standard normal draw (numpy's PCG64)."""
    return rel.noise_factor @ np.random.default_rng(seed).standard_normal(rel.rank)


def _assert_newton_steps(X, y, releases, seed):
    """Every released Newton step against NumPy: ``P_F (C_t y + b_t) + F xi_t``, ``C_t, b_t`` the Newton map
    (JMLR eq. 11) at the previous step's released latents (0 for the first), ``xi_t`` the step's seeded draw;
    and the step's whitened shift of a label flip (d = 2) within its claim ``1 / noise_multiplier``."""
    K, f = K_np(X), np.zeros(len(X))
    for t, rel in enumerate(releases):
        pi = 1.0 / (1.0 + np.exp(-f))
        W = pi * (1.0 - pi)
        C = newton_map_np(K, f)
        b = 2.0 * C @ (W * f + 0.5 - pi)
        P = range_projector(rel.noise_factor)
        want = P @ (C @ y + b) + _seeded_noise(rel, _step_seed(seed, t))
        np.testing.assert_allclose(np.ravel(rel.mean), want, rtol=1e-9, atol=1e-9 * np.abs(want).max())
        assert D * mahalanobis_shifts(rel.noise_factor, P @ C).max() <= (1 + 1e-6) / rel.noise_multiplier
        f = np.ravel(rel.mean)


def _assert_sparse_release(X, Z, y, rel, seed):
    """The SoR release against NumPy: ``P_F C_w y + F xi`` (one step from w = 0, no offset)."""
    Cw = sor_map_np(X, Z)
    P = range_projector(rel.noise_factor)
    want = P @ Cw @ y + _seeded_noise(rel, seed)
    np.testing.assert_allclose(np.ravel(rel.mean), want, rtol=1e-9, atol=1e-9 * np.abs(want).max())
    assert D * mahalanobis_shifts(rel.noise_factor, P @ Cw).max() <= (1 + 1e-6) / rel.noise_multiplier


@pytest.mark.parametrize("groups", ["none", "singletons"])
def test_without_persons_the_release_is_bit_identical_to_before(groups):
    X, y = _record_problem()
    kw = {} if groups == "none" else {"groups": np.arange(len(X))[::-1]}  # every person one row: A = I
    full = DPLaplaceGPC((X, y), kernel(), hyperparameters_public=True, **kw)
    # the record was made when each of the two steps ran at (EPS / 2, DELTA / 2): the same steps, by the same
    # loop, at those requests (the release now composes its steps in Gaussian DP, at sqrt(2) s(EPS, DELTA))
    from dpgp_gpflow.mechanisms import release_request
    from dpgp_gpflow.measurement import Measurement, measure
    from dpgp_gpflow.neighbours import relation, sensitivity_path

    step, first = release_request(EPS / 2, DELTA / 2, seed=5), full.first_step()
    rel = measure(Measurement(step, relation(full), lambda r: full.release_steps(step, r, 2, first),
                              events=(step.event(),) * 2, path=sensitivity_path(full)))
    assert [_hex(r) for r in rel.releases] == [list(s) for s in _BEFORE_FULL]
    assert all(r.neighbours == "row" for r in rel.releases)
    _assert_newton_steps(X, y[:, 0], rel.releases, seed=5)  # and correct, against NumPy
    now = full.release(epsilon=EPS, delta=DELTA, steps=2, seed=5)  # the release itself: as without groups, correct
    plain = DPLaplaceGPC((X, y), kernel(), hyperparameters_public=True).release(epsilon=EPS, delta=DELTA, steps=2,
                                                                                 seed=5)
    assert [_hex(r) for r in now.releases] == [_hex(r) for r in plain.releases]
    assert all(r.neighbours == "row" for r in now.releases)
    _assert_newton_steps(X, y[:, 0], now.releases, seed=5)
    sparse = DPSparseLaplaceGPC((X, y), kernel(), X[::3], hyperparameters_public=True, **kw)
    sparse_release = sparse.release(epsilon=EPS, delta=DELTA, seed=5).release
    assert _hex(sparse_release) == _BEFORE_SPARSE
    _assert_sparse_release(X, X[::3], y[:, 0], sparse_release, seed=5)


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
        np.testing.assert_allclose((r1.mean - r0.mean)[:, 0], expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())
        audit = auditing.audit_exact(r0, (r1.mean - r0.mean).T)  # [1, k]
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


def test_streamed_classifiers_need_consecutive_persons_and_dask_classifiers_take_in_memory_groups(problem, draws):
    """The streamed release of a grouped classifier (tests/streaming/test_streaming_groups.py) needs each
    person's rows consecutive: these are shuffled, refused before anything is spent. Built from Dask rows, the
    classifiers take groups as an in-memory array beside them; a Dask array of ids is refused."""
    X, y, groups = problem
    model = DPSparseLaplaceGPC((X, y), kernel(), X[::3], hyperparameters_public=True, groups=groups)
    accountant = PrivacyAccountant(epsilon=10.0, delta=0.5)
    with pytest.raises(ValueError, match="consecutive"):
        streamed_release_function(model, epsilon=EPS, delta=DELTA, accountant=accountant)
    assert accountant.spent == (0.0, 0.0) and accountant.held == (0.0, 0.0) and draws == []
    da = pytest.importorskip("dask.array")
    Xd, yd = da.from_array(X), da.from_array(y)
    np.testing.assert_array_equal(DPSparseLaplaceGPC((Xd, yd), kernel(), X[::3], groups=groups).groups, groups)
    with pytest.raises(TypeError, match="in-memory array"):
        DPSparseLaplaceGPC((Xd, yd), kernel(), X[::3], groups=da.from_array(groups))
    with pytest.raises(ValueError, match="groups"):
        DPSparseLaplaceGPC((Xd, yd), kernel(), X[::3], groups=groups[:-1])
    with pytest.raises(ValueError, match="consecutive"):  # the shuffled persons, streamed from the Dask rows
        streamed_release_function(DPSparseLaplaceGPC((Xd, yd), kernel(), X[::3], hyperparameters_public=True,
                                                     groups=groups), epsilon=EPS, delta=DELTA, accountant=accountant)
    assert accountant.spent == (0.0, 0.0) and accountant.held == (0.0, 0.0) and draws == []


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


# ---------------------------------------------------------------------------------------------
# Several classes: a person's rows each move to any class


def reassignment_changes(g: int, K: int) -> np.ndarray:
    """Every change of the K one-vs-rest label vectors on a person's g rows: for every old labels ``a`` and
    new labels ``b`` in ``{0..K-1}^g`` (each row its own move, or none), ``delta[c] = 2 (1[b = c] - 1[a = c])``.
    Returns [K^(2g), K, g]."""
    pairs = np.array(np.meshgrid(*[np.arange(K)] * (2 * g), indexing="ij")).reshape(2 * g, -1).T  # [K^2g, 2g]
    a, b = pairs[:, :g], pairs[:, g:]
    classes = np.arange(K)[None, :, None]
    return 2.0 * ((b[:, None, :] == classes).astype(float) - (a[:, None, :] == classes).astype(float))


def largest_person_move(released, maps, groups) -> float:
    """Brute force over every person and every reassignment of their labels (old and new classes of each
    row): the norm of the stacked whitened shifts ``F^+ P C_G delta_c`` of every class's every step."""
    K = released.num_classes
    worst = 0.0
    for person in np.unique(groups):
        rows = np.flatnonzero(groups == person)
        changes = reassignment_changes(rows.size, K)  # [R, K, g]
        total = np.zeros(changes.shape[0])
        for c, (classifier, class_maps) in enumerate(zip(released.classifiers, maps)):
            for rel, C in zip(classifier.releases, class_maps):
                shifts = changes[:, c, :] @ C[:, rows].T  # [R, k]: the shift of the projected release's input
                total += np.sum(auditing.whiten(rel.noise_factor, shifts) ** 2, axis=1)
        worst = max(worst, float(np.sqrt(total.max())))
    return worst


def s_reference(epsilon: float, delta: float) -> float:
    """The smallest s with delta(eps; mu = 1/s) <= delta, solved from the Balle-Wang profile."""
    from scipy import optimize

    return optimize.brentq(lambda s: auditing.gaussian_delta(epsilon, 1.0 / s) - delta, 0.05, 100.0, xtol=1e-14)


MULTI_SIZES = [1, 2, 3, 2, 1, 2, 3]  # 14 rows, persons of up to 3 rows: m = min(3, 6) = 3


@pytest.fixture(scope="module")
def multi_problem():
    X, _, groups = persons_problem(MULTI_SIZES, seed=5)
    labels = np.clip(np.floor(X[:, 0] / 2.0), 0, 2).astype(int)
    return X, labels, groups


@pytest.mark.parametrize("steps", [1, 2])
def test_multiclass_every_reassignment_of_a_persons_labels_is_within_one_over_s(multi_problem, steps):
    X, labels, groups = multi_problem
    model = DPMulticlassLaplaceGPC((X, labels), kernel(), num_classes=3, hyperparameters_public=True, groups=groups)
    assert model.classes_moved == 3 and all(np.array_equal(p.groups, groups) for p in model.problems)
    released = model.release(epsilon=EPS, delta=DELTA, steps=steps)
    s = s_reference(EPS, DELTA)
    assert released.classes_moved == 3 and released.person_rows == 3
    assert released.neighbours == "person (groups, up to 3 rows), labels moved between classes"
    for rel in released.releases:  # each step at sqrt(m T) s, each protecting the person's box of its problem
        assert rel.noise_multiplier == pytest.approx(np.sqrt(3 * steps) * s, rel=1e-9)
        assert rel.neighbours == "person (groups, up to 3 rows)"
    maps = [full_maps(X, c.releases) for c in released.classifiers]
    worst = largest_person_move(released, maps, groups)
    assert worst <= (1.0 + 1e-9) / s
    # all of a person's rows leaving one class for another move two problems by their whole box: sqrt(2/m) / s
    assert worst >= 0.99 * np.sqrt(2.0 / 3.0) / s
    # the per-row multi-class release of the same data does not protect these persons
    per_row = DPMulticlassLaplaceGPC((X, labels), kernel(), num_classes=3, hyperparameters_public=True).release(
        epsilon=EPS, delta=DELTA, steps=steps)
    assert per_row.classes_moved == 2
    broken = largest_person_move(per_row, [full_maps(X, c.releases) for c in per_row.classifiers], groups)
    assert broken > 1.5 / s


def test_sparse_multiclass_every_reassignment_is_within_one_over_s(multi_problem):
    X, labels, groups = multi_problem
    Z = X[::2].copy()
    model = DPSparseMulticlassLaplaceGPC((X, labels), kernel(), Z, num_classes=3, hyperparameters_public=True,
                                         groups=groups)
    released = model.release(epsilon=EPS, delta=DELTA)
    s = s_reference(EPS, DELTA)
    assert all(r.noise_multiplier == pytest.approx(np.sqrt(3.0) * s, rel=1e-9) for r in released.releases)
    Cw = sor_map_np(X, Z)
    worst = largest_person_move(released, [[Cw]] * 3, groups)
    assert 0.5 / s <= worst <= (1.0 + 1e-9) / s
    for c in range(3):  # every class's release protects the person's box of its own problem
        assert dp.audit(released.classifiers[c], model.problems[c]).passed


def test_multiclass_without_persons_is_bit_identical_to_before():
    """The multi-class release with groups=None or one row per person: float.hex recorded at 59c4e24, and each
    class's steps recomputed in NumPy (class c's seed a SeedSequence of ``(seed, K, c)``)."""
    X, _ = _record_problem()
    labels = np.clip(np.floor(X[:, 0] / 2.0), 0, 2).astype(int)
    before_full = [  # class 0 steps 1-2, class 1 steps 1-2, class 2 steps 1-2: mean[:3], noise_factor[0, 0]
        ['-0x1.ced2013d69e96p-1', '-0x1.37d8227179f57p+0', '-0x1.4e159ec8647b7p-1', '-0x1.e95f732affec0p-1'],
        ['0x1.004277fb300f5p-3', '-0x1.0ed6a4abef8e2p+0', '-0x1.6a0ef98050d05p+2', '0x1.fc66c8b530a3ap-1'],
        ['0x1.ba20e4c7be4d0p+0', '-0x1.9aad5d29202a5p+1', '0x1.7f1e155cbc5e8p+0', '-0x1.e95f732affec0p-1'],
        ['0x1.cf47caf48cab7p+1', '-0x1.21dddb0d94834p-2', '-0x1.2fb11ee5159b6p+0', '0x1.f63ffc7cd1bdcp-1'],
        ['-0x1.3a7ab8833d987p-2', '-0x1.817af4caf03e4p-1', '0x1.086ba90821d0ap-3', '-0x1.e95f732affec0p-1'],
        ['0x1.17d7148453d28p+0', '-0x1.de3a820aa17c5p+1', '-0x1.b7154d1b954dep+2', '0x1.08add57b3da0ap+0']]
    before_sparse = [
        ['0x1.c47beb4859af6p+0', '0x1.3c4b9fcc907f6p+1', '0x1.99dc42d77aa8cp+1', '-0x1.a1fe07863a7a5p-2'],
        ['0x1.5626440e36ed6p+0', '-0x1.dd6e5f458b473p+1', '-0x1.c70c2fe7ab2a2p+1', '-0x1.a1fe07863a7a5p-2'],
        ['-0x1.93462e20d2fd3p+0', '-0x1.750c39ce4d1bcp-3', '-0x1.60fb7bffc71aep+1', '-0x1.a1fe07863a7a5p-2']]

    def hexes(released):
        return [[float(v).hex() for v in np.ravel(r.mean)[:3]] + [float(r.noise_factor[0, 0]).hex()]
                for r in released.releases]

    Y = np.where(labels[:, None] == np.arange(3)[None, :], 1.0, -1.0)  # one-vs-rest
    for kw in ({}, {"groups": np.arange(len(X))}):
        full = DPMulticlassLaplaceGPC((X, labels), kernel(), num_classes=3, hyperparameters_public=True, **kw)
        released = full.release(epsilon=EPS, delta=DELTA, steps=2, seed=5)
        assert hexes(released) == before_full
        for c, classifier in enumerate(released.classifiers):  # and correct: class c's steps in NumPy
            _assert_newton_steps(X, Y[:, c], classifier.releases, seed=_class_seed(5, 3, c))
        sparse = DPSparseMulticlassLaplaceGPC((X, labels), kernel(), X[::3], num_classes=3,
                                              hyperparameters_public=True, **kw)
        released = sparse.release(epsilon=EPS, delta=DELTA, seed=5)
        assert hexes(released) == before_sparse and released.neighbours == "row, labels moved between classes"
        for c, rel in enumerate(released.releases):
            _assert_sparse_release(X, X[::3], Y[:, c], rel, seed=_class_seed(5, 3, c))


def test_multiclass_bad_groups_are_refused(multi_problem):
    X, labels, groups = multi_problem
    with pytest.raises(ValueError, match="groups"):
        DPMulticlassLaplaceGPC((X, labels), kernel(), num_classes=3, groups=groups[1:])
    with pytest.raises(ValueError, match="groups must be integers"):
        DPSparseMulticlassLaplaceGPC((X, labels), kernel(), 4, num_classes=3, groups=np.r_[groups[1:], np.nan])


# The factor: min(K, 2g), and why sqrt(2T) is not enough for persons (docs/mechanisms.md#several-classes)


def moved_ratio(maps) -> float:
    """Brute force over every reassignment of a g-row person's labels among K classes: the largest
    ``sum_c ||M_c delta_c||^2`` (one step: the squared composed shift) over the largest squared box bound
    ``max_c max_{delta in [-2, 2]^g} ||M_c delta||^2`` (the bound each class's step is calibrated to)."""
    K, g = len(maps), maps[0].shape[1]
    corners = 2.0 * np.array(np.meshgrid(*[[-1.0, 1.0]] * g, indexing="ij")).reshape(g, -1).T
    box = max(float(np.max(np.sum((corners @ M.T) ** 2, axis=1))) for M in maps)
    changes = reassignment_changes(g, K)
    total = sum(np.sum((changes[:, c, :] @ maps[c].T) ** 2, axis=1) for c in range(K))
    return float(total.max()) / box


def test_the_classes_a_person_moves_bound_the_composition_and_can_be_reached():
    """The proof's two claims, by brute force: with any maps per class (each class's step calibrated to its
    own box), a person of g rows moves the composition by at most ``min(K, 2g)`` times one step's squared
    bound; and maps exist that reach it (each class seeing one row only)."""
    rng = np.random.default_rng(0)
    for _ in range(60):
        K, g = int(rng.integers(2, 5)), int(rng.integers(1, 4))
        maps = [rng.standard_normal((3, g)) * rng.uniform(0.2, 2.0, g) for _ in range(K)]
        assert moved_ratio(maps) <= min(K, 2 * g) * (1 + 1e-12)
    w = np.array([[1.0], [0.0]])
    reach = [np.hstack([w, 0 * w]), np.hstack([w, 0 * w]), np.hstack([0 * w, w]), np.hstack([0 * w, w])]  # K=4, g=2
    assert moved_ratio(reach) == pytest.approx(4.0, rel=1e-12)  # = min(4, 2 * 2): rows 0 -> 1 and 2 -> 3


def test_sqrt_2T_is_not_enough_for_persons_even_with_one_map_for_every_class():
    """Three rows whose whitened columns are at 120 degrees, the same map for every class (the first Newton
    step): moving the labels round the cycle 0 -> 1 -> 2 -> 0 gives a squared composed shift of 9/8 times
    the 2 boxes that sqrt(2T) pays for."""
    angles = np.deg2rad([90.0, 210.0, 330.0])
    M = np.vstack([np.cos(angles), np.sin(angles)])  # [2, 3] unit columns at 120 degrees
    assert moved_ratio([M, M, M]) == pytest.approx(2.0 * 9.0 / 8.0, rel=1e-12)


# dp.audit of the whole multi-class release, for persons


def test_dp_audit_of_a_grouped_multiclass_release_and_its_broken_variants(multi_problem, monkeypatch):
    """The whole's audit reads the model's groups (m = min(3, 2 * 3) = 3): the grouped release passes; the
    per-row release (each step protecting one row, sqrt(2T)) fails it, and so does a grouped release whose
    steps protect every person's box but are calibrated for 2 classes moved (sqrt(2T) s: ~ sqrt(3/2) / s)."""
    import math

    import dpgp_gpflow.models.multiclass as multiclass_module

    X, labels, groups = multi_problem

    def model(**kw):
        return DPMulticlassLaplaceGPC((X, labels), kernel(), num_classes=3, hyperparameters_public=True, **kw)

    grouped = model(groups=groups)
    released = grouped.release(epsilon=EPS, delta=DELTA, steps=2)
    report = dp.audit(released, grouped)
    assert report.passed and report.epsilon <= EPS * (1 + 1e-6)
    per_row = model().release(epsilon=EPS, delta=DELTA, steps=2)
    assert dp.audit(per_row, model()).passed
    caught = dp.audit(per_row, grouped)
    assert not caught.passed and caught.epsilon > 2.0 * EPS
    monkeypatch.setattr(multiclass_module, "multiclass_step_multiplier",
                        lambda s, steps, moved=2: math.sqrt(2.0 * steps) * s)  # the broken variant
    two_moved = grouped.release(epsilon=EPS, delta=DELTA, steps=2)
    assert all(rel.neighbours == "person (groups, up to 3 rows)" for rel in two_moved.releases)
    report = dp.audit(two_moved, grouped)
    assert not report.passed and report.epsilon > 1.1 * EPS
