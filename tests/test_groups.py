"""Person-level privacy (``groups=``, docs/guides/groups.md): a release protects every change of all the
outputs of one person, each within ``[-d, d]``.

Each privacy check is a brute force from the definition, in NumPy: every corner of every person's box
(both signs) and random points inside it, the release's shift ``P C_G delta`` computed from an
independent NumPy cloaking matrix and the span of the published noise factor, and its Mahalanobis norm
against ``F F^T`` (:func:`auditing.audit_exact`). The broken variant (the per-row release of grouped
data) must fail the same audit.
"""

from __future__ import annotations

import itertools
import sys
import warnings
from functools import partial
from pathlib import Path

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from reference import gpr_reference, k_se, range_projector

sys.path.insert(0, str(Path(__file__).resolve().parent / "audits"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "models"))
import auditing  # noqa: E402
import sparse_cases  # noqa: E402

import dpgp_gpflow as dp  # noqa: E402
from dpgp_gpflow import engine  # noqa: E402
from dpgp_gpflow.accounting import PrivacyAccountant  # noqa: E402
from dpgp_gpflow.noise_planning import column_space, projection_rows  # noqa: E402
from dpgp_gpflow.mechanisms import cloaking_release, release_request  # noqa: E402
from dpgp_gpflow.mechanisms.cloaking import publish_cloaking  # noqa: E402
from dpgp_gpflow.models import DPGPR, DPGPRFITC, DPSGPR  # noqa: E402
from dpgp_gpflow.measurement import Measurement, SensitivityPath, measure  # noqa: E402
from dpgp_gpflow.neighbours import MAX_CORNER_ROWS, Neighbours, group_neighbours, neighbour_columns  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ReproducibleNoiseWarning")

LO, HI = 0.0, 10.0
D = HI - LO
VAR, LENGTHSCALE, NOISE = 4.0, 1.5, 0.5
EPS, DELTA = 1.0, 0.01


def persons_data(sizes, seed=0, spread=0.3):
    """Persons with the given numbers of rows: each at a random centre on [0, 10], its visits within
    ``spread`` of it (nearby inputs: their columns of C are nearly parallel). Returns X, Y, groups, Xs."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(len(sizes)), sizes)
    centres = rng.uniform(0.0, 10.0, len(sizes))
    X = (centres[groups] + spread * rng.uniform(-1.0, 1.0, groups.size))[:, None]
    Y = np.clip(5.0 + 3.0 * np.sin(X) + rng.standard_normal(X.shape), LO, HI)
    perm = rng.permutation(groups.size)  # a person's rows need not be adjacent
    Xs = np.linspace(-0.5, 10.5, 15)[:, None]
    return X[perm], Y[perm], groups[perm] * 7 + 3, Xs  # arbitrary integer identifiers


def gpr(X, Y, **kw):
    kern = gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=LENGTHSCALE)
    return DPGPR((X, Y), kern, y_bounds=(LO, HI), noise_variance=NOISE, hyperparameters_public=True, **kw)


def C_gpr(X, Xs):
    """The GPR cloaking matrix from its definition (NumPy LU solve)."""
    return gpr_reference(partial(k_se, variance=VAR, lengthscale=LENGTHSCALE), X, np.zeros(len(X)), Xs, NOISE)[2]


def grouped_audit(release, C, groups, interior=20):
    """A. exact audit of ``release`` over every person's box: the shifts ``P_F C_G delta`` (the mean is
    projected onto the span of the noise factor F), against the release's own claim."""
    shifts, _ = auditing.person_shifts(C, groups, D, interior=interior)
    P = range_projector(release.noise_factor)
    return auditing.audit_exact(release, shifts @ P.T)


SIZES = [1, 2, 3, 4, 1, 2, 3, 4, 2, 1, 3]  # 26 rows


@pytest.fixture(scope="module")
def problem():
    X, Y, groups, Xs = persons_data(SIZES)
    return X, Y, groups, Xs, C_gpr(X, Xs)


# ---------------------------------------------------------------------------------------------
# The neighbour map against its definition


def test_neighbour_map_lists_every_corner_once_up_to_sign_and_the_bound_above_the_limit():
    groups = np.array([5, 9, 9, 2, 2, 2, 7, 7, 7, 7] + [1] * (MAX_CORNER_ROWS + 2))
    nb = group_neighbours(groups, groups.size)
    A = nb.matrix().toarray()  # [n, N_c]: small problem, dense for the check only
    for person in np.unique(groups):
        rows = np.flatnonzero(groups == person)
        mine = A[:, np.any(A[rows] != 0, axis=0)]
        assert np.all(mine[np.setdiff1d(np.arange(groups.size), rows)] == 0)  # a column touches one person
        g = rows.size
        if g <= MAX_CORNER_ROWS:
            corners = {s for s in itertools.product((-1.0, 1.0), repeat=g) if s[0] == 1.0}
            got = [tuple(col) for col in mine[rows].T]
            assert len(got) == len(corners) == 2 ** (g - 1) and set(got) == corners
        else:  # the bound: |G| e_i for each of its rows
            np.testing.assert_array_equal(np.sort(mine[rows].T, axis=0), np.sort(g * np.eye(g), axis=0))
    M = np.random.default_rng(1).standard_normal((3, groups.size))
    np.testing.assert_allclose(neighbour_columns(M, nb).numpy(), M @ A, rtol=1e-14, atol=1e-14)


def test_one_row_per_person_is_the_per_row_relation():
    assert group_neighbours(None, 5) is None
    assert group_neighbours(np.array([4, 1, 0, 3, 2]), 5) is None  # every person one row: A = I


def test_the_bound_above_the_size_limit_holds_for_any_linear_map():
    """``max_corner ||M C_G s|| <= |G| max_i ||M c_i||``, the bound the release uses for large persons,
    by brute force over every corner of random persons of 5 to 9 rows."""
    rng = np.random.default_rng(2)
    for g in range(MAX_CORNER_ROWS + 1, 10):
        for _ in range(20):
            MC = rng.standard_normal((4, g)) + rng.uniform(0, 3) * rng.standard_normal((4, 1))  # often near-parallel
            corners = np.array(list(itertools.product((-1.0, 1.0), repeat=g)))
            worst = np.linalg.norm(corners @ MC.T, axis=1).max()
            assert worst <= g * np.linalg.norm(MC, axis=0).max() * (1 + 1e-12)


def test_the_rank_rules_noise_floor_is_over_every_persons_corners(problem):
    X, _, groups, Xs, C = problem
    space = column_space(tf.constant(C), 1e-3)
    nb = group_neighbours(groups, groups.size)
    l1, largest = projection_rows(tf.constant(C), space, nb)
    l1_row, largest_row = projection_rows(tf.constant(C), space)
    P = space.basis.numpy() @ space.vectors.numpy()  # [k, n] the projection of C
    expected = np.max([np.abs(P[:, groups == g]).sum(axis=1) for g in np.unique(groups)], axis=0)  # corners <= 4 rows
    np.testing.assert_allclose(largest, expected, rtol=1e-12)
    np.testing.assert_allclose(largest_row, np.abs(P).max(axis=1), rtol=1e-12)
    np.testing.assert_array_equal(l1, l1_row)  # the bias is of C itself
    np.testing.assert_allclose(l1, np.abs(C - P).sum(axis=1), rtol=1e-8, atol=1e-14)


# ---------------------------------------------------------------------------------------------
# (a) groups=None is exactly today's release


def test_groups_none_and_one_row_per_person_are_identical_to_the_per_row_release(problem):
    X, Y, _, Xs, _ = problem
    n = len(X)
    base = gpr(X, Y).release(Xs, epsilon=EPS, delta=DELTA, seed=11).unclipped()  # the raw DP means, as the mechanism's
    singletons = gpr(X, Y, groups=np.arange(n)[::-1]).release(Xs, epsilon=EPS, delta=DELTA, seed=11).unclipped()
    np.testing.assert_array_equal(base.mean, singletons.mean)
    np.testing.assert_array_equal(base.noise_factor, singletons.noise_factor)
    # the mechanism called without any neighbour map (its pre-groups signature)
    model = gpr(X, Y)
    terms = model.release_terms(tf.constant(Xs))
    direct = cloaking_release(terms.map, model.centred_outputs(), terms.offset, terms.variance, data_sensitivity=D,
                              output_bound=model.output_bound, epsilon=EPS, delta=DELTA, seed=11, y_bounds=(LO, HI))
    np.testing.assert_array_equal(base.mean, direct.mean)
    np.testing.assert_array_equal(base.noise_factor, direct.noise_factor)
    # the grouped code path handed the identity map gives the same release up to rounding
    from dpgp_gpflow.neighbours import _recording  # a map records its persons only through this module

    identity = _recording(Neighbours(np.arange(n), np.arange(n), np.ones(n), n, n), SensitivityPath())  # a row
    via_map = cloaking_release(terms.map, model.centred_outputs(), terms.offset, terms.variance, data_sensitivity=D,
                               output_bound=model.output_bound, epsilon=EPS, delta=DELTA, seed=11, y_bounds=(LO, HI),
                               neighbours=identity)
    np.testing.assert_allclose(via_map.noise_factor, base.noise_factor, rtol=1e-7, atol=1e-9 * np.abs(base.noise_factor).max())
    np.testing.assert_allclose(via_map.mean, base.mean, rtol=1e-7)


# ---------------------------------------------------------------------------------------------
# (b) brute force over every person's box; (c) the per-row release fails it


@pytest.mark.parametrize("objective", ["mse", "entropy"])
def test_grouped_release_protects_every_corner_and_interior_point_of_every_person(problem, objective):
    X, Y, groups, Xs, C = problem
    rel = gpr(X, Y, groups=groups).release(Xs, epsilon=EPS, delta=DELTA, objective=objective)
    audit = grouped_audit(rel, C, groups)
    assert audit.passed, audit.failures
    assert audit.mu_ratio > 0.98  # tight: the worst corner is what the noise was fitted to


def test_the_measured_shift_of_a_persons_change_is_the_projected_shift_audited(problem):
    """Black box: two seeded releases whose data differ in all the outputs of one person (a corner of
    the box) differ by exactly ``P_F C_G delta``, the shift the audit above bounds."""
    X, Y, groups, Xs, C = problem
    base_Y = Y.copy()
    for person in np.unique(groups)[:4]:
        rows = np.flatnonzero(groups == person)
        s = np.where(np.arange(rows.size) % 2 == 0, 1.0, -1.0)
        base_Y[rows, 0] = np.where(s > 0, LO, HI)
        neighbour_Y = base_Y.copy()
        neighbour_Y[rows, 0] = np.where(s > 0, HI, LO)  # delta = d s
        r0 = gpr(X, base_Y, groups=groups).release(Xs, epsilon=EPS, delta=DELTA, seed=5).unclipped()  # raw DP means
        r1 = gpr(X, neighbour_Y, groups=groups).release(Xs, epsilon=EPS, delta=DELTA, seed=5).unclipped()
        np.testing.assert_array_equal(r0.noise_factor, r1.noise_factor)  # public: the same for both
        P = range_projector(r0.noise_factor)
        expected = P @ C[:, rows] @ (D * s)
        np.testing.assert_allclose((r1.mean - r0.mean)[:, 0], expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())
        audit = auditing.audit_exact(r0, (r1.mean - r0.mean).T)  # [1, k]
        assert audit.passed, audit.failures


def test_the_per_row_release_of_grouped_data_fails_the_grouped_audit(problem):
    X, Y, groups, Xs, C = problem
    rel = gpr(X, Y).release(Xs, epsilon=EPS, delta=DELTA)  # ignores the persons
    per_row = auditing.audit_exact(rel, (D * C.T) @ range_projector(rel.noise_factor).T)
    assert per_row.passed, per_row.failures  # it is a valid per-row release ...
    audit = grouped_audit(rel, C, groups)
    assert not audit.passed and audit.mu_ratio > 1.5  # ... that does not protect persons
    assert audit.delta_at_mu > 10 * DELTA


def _published(accountant, request, path, **kwargs):
    """publish_cloaking(**kwargs) as a release runs it: inside measure, its relation that of ``path``."""
    return measure(Measurement(request, path.relation(), lambda reservation: publish_cloaking(
        reservation=reservation, **kwargs), path=path), accountant)


def test_the_whitened_shift_is_rechecked_with_the_groups_before_anything_is_drawn(problem):
    """A whitening matrix made for rows, published for persons, is refused; nothing is charged."""
    X, Y, groups, Xs, C = problem
    model = gpr(X, Y)
    request = release_request(EPS, DELTA, objective="mse")
    plan = engine.noise_plan(tf.constant(C), noise_multiplier=request.multiplier, data_sensitivity=D,
                             output_bound=model.output_bound)
    nb = group_neighbours(groups, len(X))
    accountant = PrivacyAccountant(epsilon=10.0, delta=0.5)
    record = dict(epsilon=EPS, delta=DELTA, data_sensitivity=D, calibration="analytic", objective="mse",
                  certificate=None, rank=int(plan.rank), rtol=float(plan.rtol), bias_bound=0.0, y_bounds=(LO, HI))
    with pytest.raises(FloatingPointError, match="whitened query"):
        _published(accountant, request, nb.path, noise_factor=plan.noise_factor, whitening=plan.whitening,
                   y_centred=model.centred_outputs(), offset=np.zeros(len(Xs)), variance=np.zeros(len(Xs)),
                   sensitivity=float(plan.sensitivity), multiplier=request.multiplier,
                   output_bound=model.output_bound, seed=None, neighbours=nb, **record)
    assert accountant.spent == (0.0, 0.0)
    _published(accountant, request, SensitivityPath(), noise_factor=plan.noise_factor,  # the same plan for rows passes
               whitening=plan.whitening, y_centred=model.centred_outputs(), offset=np.zeros(len(Xs)),
               variance=np.zeros(len(Xs)), sensitivity=float(plan.sensitivity), multiplier=request.multiplier,
               output_bound=model.output_bound, seed=None, **record)
    assert accountant.spent[0] == pytest.approx(EPS)


def test_a_query_object_from_outside_is_refused_before_anything_is_drawn(problem):
    """publish_cloaking recomputes the shift of the W it whitens with; a query object of another class (its
    shift a number handed in) is refused, whatever it claims; nothing is charged."""
    X, Y, groups, Xs, C = problem
    model = gpr(X, Y)
    request = release_request(EPS, DELTA, objective="mse")
    plan = engine.noise_plan(tf.constant(C), noise_multiplier=request.multiplier, data_sensitivity=D,
                             output_bound=model.output_bound)
    rank = int(plan.rank)

    class Forged:  # a raw statistic of y with a claimed shift of 0
        def shift(self, *args):
            return 0.0

        def values(self):
            return np.full(rank, float(np.sum(Y)))

    Forged.rank = rank
    accountant = PrivacyAccountant(epsilon=10.0, delta=0.5)
    record = dict(epsilon=EPS, delta=DELTA, data_sensitivity=D, calibration="analytic", objective="mse",
                  certificate=None, rank=rank, rtol=float(plan.rtol), bias_bound=0.0, y_bounds=(LO, HI))
    with pytest.raises(TypeError, match="whitened queries"):
        _published(accountant, request, SensitivityPath(), noise_factor=plan.noise_factor, whitening=Forged(),
                   y_centred=None, offset=np.zeros(len(Xs)), variance=np.zeros(len(Xs)),
                   sensitivity=float(plan.sensitivity), multiplier=request.multiplier,
                   output_bound=model.output_bound, seed=None, **record)
    assert accountant.spent == (0.0, 0.0)


# ---------------------------------------------------------------------------------------------
# (d) persons above the corner limit: the bound


def test_a_person_of_seven_and_of_eight_rows_is_protected_by_the_bound():
    sizes = [7, 8, 1, 2, 3, 1, 4, 2]
    X, Y, groups, Xs = persons_data(sizes, seed=3)
    C = C_gpr(X, Xs)
    rel = gpr(X, Y, groups=groups).release(Xs, epsilon=EPS, delta=DELTA)
    audit = grouped_audit(rel, C, groups, interior=50)  # 2^8 + 2^7 corners for the large persons
    assert audit.passed, audit.failures
    # and the per-row release is caught there
    per_row = gpr(X, Y).release(Xs, epsilon=EPS, delta=DELTA)
    assert not grouped_audit(per_row, C, groups, interior=0).passed


# ---------------------------------------------------------------------------------------------
# Sparse models


@pytest.mark.parametrize("variant", sparse_cases.VARIANTS, ids=lambda v: v.name)
def test_sparse_releases_protect_every_person(variant):
    X, Y, groups, Xs = persons_data(SIZES, seed=4)
    Z = X[::4].copy()
    ref = variant.reference(partial(k_se, variance=VAR, lengthscale=LENGTHSCALE), X, Z, NOISE, kdiag=VAR)
    kern = gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=LENGTHSCALE)
    model = variant.cls((X, Y), kern, Z, noise_variance=NOISE, y_bounds=(LO, HI), hyperparameters_public=True,
                        groups=groups)
    rel = model.release(Xs, epsilon=EPS, delta=DELTA)
    audit = grouped_audit(rel, sparse_cases.cloaking(ref, Xs), groups)
    assert audit.passed, audit.failures
    pf = model.release_function(epsilon=EPS, delta=DELTA)
    R = sparse_cases.checked_R(pf, ref, X)
    audit = grouped_audit(pf.release, R @ ref.B, groups)
    assert audit.passed, audit.failures
    assert dp.audit(pf, model).passed
    per_row = variant.cls((X, Y), kern, Z, noise_variance=NOISE, y_bounds=(LO, HI),
                          hyperparameters_public=True).release_function(epsilon=EPS, delta=DELTA)
    assert not grouped_audit(per_row.release, per_row.coordinates.numpy() @ ref.B, groups, interior=0).passed
    assert not dp.audit(per_row, model).passed  # the model's groups: the per-row release is caught


# ---------------------------------------------------------------------------------------------
# (f) dp.audit reads the model's groups


def test_dp_audit_passes_a_grouped_release_and_catches_a_per_row_one(problem):
    X, Y, groups, Xs, _ = problem
    grouped = gpr(X, Y, groups=groups)
    rel = grouped.release(Xs, epsilon=EPS, delta=DELTA)
    report = dp.audit(rel, grouped, Xs)
    assert report.passed and report.epsilon <= EPS * (1 + 1e-6)
    per_row = gpr(X, Y).release(Xs, epsilon=EPS, delta=DELTA)
    assert dp.audit(per_row, gpr(X, Y), Xs).passed
    report = dp.audit(per_row, grouped, Xs)
    assert not report.passed and report.epsilon > 1.5 * EPS


# ---------------------------------------------------------------------------------------------
# (e) bad groups, and what does not support groups yet


@pytest.mark.parametrize("groups, message", [
    (np.arange(5), r"shape \[26\]"),
    (np.zeros((26, 2), dtype=int), r"shape \[26\]"),
    (np.r_[np.arange(25), 0.5], "row 25 is 0.5"),
    (np.r_[np.arange(25.0), np.nan], "row 25 is nan"),
    (np.r_[np.arange(25.0), np.inf], "row 25 is inf"),
    (np.array(["a"] * 26), "integer array"),
    (np.ones(26, dtype=bool), "integer array"),
])
def test_bad_groups_are_refused_with_one_clear_error(problem, groups, message):
    X, Y, *_ = problem
    with pytest.raises(ValueError, match=f"groups must be .*{message}|{message}"):
        gpr(X, Y, groups=groups)
    with pytest.raises(ValueError, match="groups"):
        DPSGPR((X, Y), gpflow.kernels.SquaredExponential(), X[:4], noise_variance=NOISE, y_bounds=(LO, HI),
               groups=groups)


def test_integer_valued_floats_and_a_column_are_accepted(problem):
    X, Y, groups, Xs, _ = problem
    np.testing.assert_array_equal(gpr(X, Y, groups=groups.astype(float)[:, None]).groups, groups)


def test_what_does_not_support_groups_refuses_them(problem):
    X, Y, groups, Xs, C = problem
    model = gpr(X, Y, groups=groups)
    accountant = PrivacyAccountant(epsilon=10.0, delta=0.5)
    with pytest.raises(NotImplementedError, match="standard mechanism"):
        model.release(Xs, epsilon=EPS, delta=DELTA, mechanism="standard", accountant=accountant)
    assert accountant.spent == (0.0, 0.0)
    # selection and cross-validation accept groups (tests/test_selection_groups.py)
    # the compiled engine accepts groups (tests/test_engine.py)
    sparse = DPGPRFITC((X, Y), gpflow.kernels.SquaredExponential(), X[:4], noise_variance=NOISE, y_bounds=(LO, HI),
                       groups=groups, hyperparameters_public=True)
    from dpgp_gpflow.streaming import release_function as streamed_release_function

    # the streamed release supports persons whose rows are consecutive (tests/streaming/test_streaming_groups.py);
    # these persons are not, and are refused before anything is spent
    with pytest.raises(ValueError, match="consecutive"):
        streamed_release_function(sparse, epsilon=EPS, delta=DELTA, accountant=accountant)
    assert accountant.spent == (0.0, 0.0)


def test_groups_with_dask_rows_are_an_in_memory_array(problem):
    """Dask rows take groups as public in-memory ids beside them (tests/streaming/test_streaming_outputs.py
    releases them); groups given as a Dask array are refused."""
    da = pytest.importorskip("dask.array")
    X, Y, groups, *_ = problem
    dask_rows = (da.from_array(X), da.from_array(Y))
    model = DPSGPR(dask_rows, gpflow.kernels.SquaredExponential(), X[:4], noise_variance=NOISE, y_bounds=(LO, HI),
                   groups=groups)
    np.testing.assert_array_equal(model.groups, groups)
    with pytest.raises(TypeError, match="in-memory array"):
        DPSGPR(dask_rows, gpflow.kernels.SquaredExponential(), X[:4], noise_variance=NOISE, y_bounds=(LO, HI),
               groups=da.from_array(groups))


def test_groups_are_public_and_fixed(problem):
    X, Y, groups, *_ = problem
    model = gpr(X, Y, groups=groups)
    model.groups[0] = -1  # a copy
    np.testing.assert_array_equal(model.groups, groups)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gpr(X, Y).groups is None
