"""Whole rows private with persons (``groups=``): a person's rows (inputs and outputs) replaced together.

Brute force: every person is replaced by persons of the same size whose rows all sit at one extreme point (a
corner of the box or the point of the box with the largest feature norm) with the output at the bound opposite
to the person's first output; each neighbour is released with the same seed, so the released statistics differ
by the shift of the query alone. Measured in units of the noise actually added, the shift must be within the
charge ``mu = 1 / s``; a broken variant that charges a person as one row fails. The shift is also checked
against a NumPy reference of the statistics and the closed-form bound ``G sqrt(J)`` written here."""

from __future__ import annotations

import math
import warnings

import gpflow
import numpy as np
import pytest
from whole_rows_reference import features as reference_features
from whole_rows_reference import shift_in_noise_units as _shift
from whole_rows_reference import statistics as reference_statistics

import dpgp_gpflow as dp
from dpgp_gpflow import neighbours, relations
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.models import DPSGPR, one_vs_rest
from dpgp_gpflow.streaming import LocalChunks
from dpgp_gpflow.whole_rows import bounds as bounds_module  # the sensitivity formula the release calls
from dpgp_gpflow.whole_rows import mechanism as mechanism_module

BOX = [(0.0, 10.0)]
BOUNDS = (0.0, 1.0)
LENGTHSCALE = 6.0
# three persons: rows 0-2 (one person, all at one point, output high), rows 3-4, row 5
X = np.array([[5.0], [5.0], [5.0], [6.5], [1.0], [4.0]])
Y = np.array([[1.0], [1.0], [1.0], [0.9], [0.2], [0.0]])
GROUPS = np.array([7, 7, 7, 3, 3, 9])
Z = wr.inducing_grid(BOX, 3)
EPSILON, DELTA = 1.0, 1e-3
SHARES = (0.30, 0.68, 0.02)


def _release(X, Y, groups=GROUPS, seed=11, accountant=None):
    kernel = gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=LENGTHSCALE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        return wr.release_rows(LocalChunks(X, Y, 4, groups=groups), kernel, Z, x_bounds=BOX, y_bounds=BOUNDS,
                               epsilon=EPSILON, delta=DELTA, seed=seed, noise_variance=0.1, accountant=accountant)


def _packed(S, b, q):
    """The released vector's scaling, written out: shares over the part bounds (sqrt(2), d, d^2 / 4)."""
    d = BOUNDS[1] - BOUNDS[0]
    wS, wb, wq = (math.sqrt(w / sum(SHARES)) for w in SHARES)
    rows, cols = np.triu_indices(S.shape[0])
    weights = np.where(rows == cols, 1.0, math.sqrt(2.0))
    return np.concatenate([S[rows, cols] * weights * wS / math.sqrt(2.0), b * wb / d, [q * wq / (d * d / 4)]])


def _joint_bound():
    """J of docs/whole_rows.md#sensitivity, written out for the default shares."""
    wS2, wb2, wq2 = (w / sum(SHARES) for w in SHARES)
    g = wS2 + wb2**2 / (16 * wS2) if wb2 <= 4 * wS2 else wb2 / 2
    return max(wS2 + wb2 / 4, g + wb2 / 2) + wq2




def _neighbours():
    grid = np.linspace(0.0, 10.0, 2001)[:, None]
    widest = grid[np.argmax(np.linalg.norm(reference_features(grid, Z, LENGTHSCALE), axis=1))]
    lo, hi = BOUNDS
    for person in np.unique(GROUPS):
        rows = np.flatnonzero(GROUPS == person)
        for x in (np.array([0.0]), np.array([10.0]), widest):
            X2, Y2 = X.copy(), Y.copy()
            X2[rows] = x
            Y2[rows] = lo if Y[rows[0], 0] >= (lo + hi) / 2 else hi
            yield len(rows), X2, Y2


def _worst():
    base = _release(X, Y)
    shifts = [(g, _shift(base, _release(X2, Y2)), X2, Y2) for g, X2, Y2 in _neighbours()]
    return base, max(shifts, key=lambda t: t[1])


def test_every_extreme_person_moves_the_release_within_its_charge():
    acc = dp.PrivacyAccountant(epsilon=5.0, delta=0.1)
    base = _release(X, Y, accountant=acc)
    (event,) = acc.history()
    mu = event["mu"]
    assert mu == pytest.approx(1.0 / base.noise_multiplier)
    _, (g, worst, X2, Y2) = _worst()
    assert g == 3 and worst <= mu
    assert worst >= 0.8 * mu  # the three identical rows moved together come close to the charge
    # the same shift from a NumPy reference of the statistics, within G sqrt(J) (G = 3) in units of the noise
    shift = np.linalg.norm(_packed(*reference_statistics(X, Y, Z, LENGTHSCALE, BOX, BOUNDS))
                           - _packed(*reference_statistics(X2, Y2, Z, LENGTHSCALE, BOX, BOUNDS)))
    sensitivity = base.sensitivity
    assert worst * base.noise_multiplier * sensitivity == pytest.approx(shift, rel=1e-6)
    assert shift <= 3 * math.sqrt(_joint_bound()) <= sensitivity
    assert sensitivity == pytest.approx(3 * math.sqrt(_joint_bound()), rel=1e-6)
    assert base.privacy_card()["neighbours"] == "person (groups, up to 3 rows) (inputs and outputs)"


def test_charging_a_person_as_one_row_fails_the_same_check(monkeypatch):
    """The broken variant: the per-row sensitivity used for persons."""
    real = bounds_module.release_sensitivity

    def per_row(shares, **kwargs):
        return real(shares, **{**kwargs, "person_rows": 1})

    monkeypatch.setattr(bounds_module, "release_sensitivity", per_row)
    base, (_, worst, _, _) = _worst()
    assert worst > 2.0 / base.noise_multiplier


def _model(X, Y, groups, **options):
    kernel = gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=LENGTHSCALE)
    return DPSGPR((X, Y), kernel, Z, noise_variance=0.1, y_bounds=BOUNDS, x_bounds=BOX, private_inputs=True,
                  groups=groups, hyperparameters_public=True, **options)


def test_the_model_with_groups_releases_its_persons_rows_in_person_order():
    order = np.array([0, 3, 1, 5, 2, 4])  # persons interleaved in the model's rows
    model = _model(X[order], Y[order], GROUPS[order])
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        released = model.release_function(epsilon=EPSILON, delta=DELTA, seed=11, accountant=acc)
    sort = np.argsort(GROUPS[order], kind="stable")
    direct = _release(X[order][sort], Y[order][sort], GROUPS[order][sort])
    for key in ("S", "b", "q"):  # sums: the order of the rows does not matter beyond rounding
        np.testing.assert_allclose(released.statistics[key], direct.statistics[key], rtol=1e-12, atol=1e-12)
    assert len(acc.history()) == 1 and released.person_rows == 3
    one_row = _release(X, Y, groups=None)
    ratio = released.statistics_noise_std["b"] / one_row.statistics_noise_std["b"]
    np.testing.assert_allclose(ratio, 3.0, rtol=1e-9)  # G = 3 times the per-row noise


def test_a_streamed_source_must_carry_the_models_persons_in_consecutive_rows():
    model = _model(X, Y, GROUPS)
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with pytest.raises(ValueError, match="carries no person ids"):
        model.release_function(epsilon=EPSILON, delta=DELTA, source=LocalChunks(X, Y, 2), accountant=acc)
    order = np.array([0, 3, 1, 2, 4, 5])
    with pytest.raises(ValueError, match="differ from the model's groups"):
        model.release_function(epsilon=EPSILON, delta=DELTA, accountant=acc,
                               source=LocalChunks(X[order], Y[order], 2, groups=GROUPS[order]))
    interleaved = np.array([7, 3, 7, 7, 3, 9])
    with pytest.raises(ValueError, match="consecutive"):
        wr.release_rows(LocalChunks(X, Y, 2, groups=interleaved), gpflow.kernels.SquaredExponential(), Z, x_bounds=BOX,
                        y_bounds=BOUNDS, epsilon=EPSILON, delta=DELTA, noise_variance=0.1, accountant=acc)
    assert acc.history() == [] and acc.held == (0.0, 0.0)
    released = model.release_function(epsilon=EPSILON, delta=DELTA, accountant=acc,
                                      source=LocalChunks(X, Y, 2, groups=GROUPS))
    assert released.person_rows == 3 and len(acc.history()) == 1


def test_dask_rows_with_persons_and_a_grid_equal_the_in_memory_release():
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(3)
    Xs = rng.uniform(0, 10, (120, 1))
    Ys = np.clip(0.5 + 0.4 * np.sin(Xs), *BOUNDS)
    ids = np.repeat(np.arange(40), 3)  # consecutive persons of 3 rows
    options = {"epsilon": EPSILON, "delta": DELTA, "seed": 5, "lengthscales": [2.0, 6.0]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        local = _model(Xs, Ys, ids).release_function(**options)
        on_dask = _model(da.from_array(Xs, chunks=(50, 1)), da.from_array(Ys, chunks=(50, 1)), ids).release_function(
            **options)
    assert on_dask.person_rows == local.person_rows == 3 and len(on_dask.candidates) == 2
    for a, b in zip(on_dask.candidates, local.candidates):
        for key in ("S", "b", "q"):
            np.testing.assert_allclose(a.statistics[key], b.statistics[key], rtol=1e-9, atol=1e-9)
    assert on_dask.selection["chosen"] == local.selection["chosen"]


def test_one_count_of_a_persons_rows():
    """The whole-row release, the relation and the one-vs-rest models read one function for the most rows of
    one person (dpgp_gpflow.relations.largest_person); checked against a count written here."""
    assert mechanism_module.largest_person is relations.largest_person
    assert one_vs_rest.largest_person is relations.largest_person
    assert neighbours.largest_person is relations.largest_person
    ids = np.array([3, 1, 3, 2, 3, 1, 7])
    counts = {}
    for i in ids.tolist():
        counts[i] = counts.get(i, 0) + 1
    assert relations.largest_person(ids) == max(counts.values()) == 3
    assert relations.largest_person(None) == relations.largest_person(np.zeros(0, dtype=np.int64)) == 1
