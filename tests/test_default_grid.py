"""The public default grid (``dpgp_gpflow.selection.default_grid``, issue 26 item 3).

References: the rule written out by hand on inputs whose ranges and spacings are known exactly;
the privacy property (the grid never reads the outputs) checked by changing only the outputs.
"""

from __future__ import annotations

import gpflow
import numpy as np
import pytest

from dpgp_gpflow import PrivacyAccountant, ReproducibleNoiseWarning
from dpgp_gpflow.models import DPGPR, DPGPRFITC, DPLaplaceGPC
from dpgp_gpflow.selection import default_grid, select_hyperparameters
from dpgp_gpflow.selection.cross_validation import validate_grid
from dpgp_gpflow.selection.grid import CLASSIFIER_VARIANCES, LENGTHSCALE_FACTORS, NOISE_RATIOS

LS, KV, NV = ".kernel.lengthscales", ".kernel.variance", ".likelihood.variance"


def _as_tuples(grid):
    return [{k: tuple(np.atleast_1d(v).tolist()) for k, v in c.items()} for c in grid]


def test_grid_is_the_same_for_two_datasets_that_differ_only_in_their_outputs():
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 50.0, (40, 2))
    Y1 = rng.uniform(0.0, 10.0, (40, 1))
    Y2 = 10.0 - Y1  # every output changed
    for build in (lambda Y: DPGPR((X, Y), gpflow.kernels.Matern32(lengthscales=[1.0, 1.0]), y_bounds=(0, 10)),
                  lambda Y: DPGPRFITC((X, Y), gpflow.kernels.SquaredExponential(), X[:5], y_bounds=(0, 10))):
        g1, g2 = default_grid(build(Y1)), default_grid(build(Y2))
        assert _as_tuples(g1) == _as_tuples(g2)
    labels = np.where(X[:, :1] > 25.0, 1.0, -1.0)
    c1 = default_grid(DPLaplaceGPC((X, labels), gpflow.kernels.SquaredExponential()))
    c2 = default_grid(DPLaplaceGPC((X, -labels), gpflow.kernels.SquaredExponential()))
    assert _as_tuples(c1) == _as_tuples(c2)


def test_regression_rule_written_out_by_hand():
    X = np.linspace(10.0, 90.0, 81)[:, None]  # range 80, spacing 1: no floor binds
    model = DPGPR((X, np.full((81, 1), 5.0)), gpflow.kernels.SquaredExponential(), y_bounds=(0.0, 40.0))
    grid = default_grid(model)
    v = (20.0 / 2) ** 2  # output_bound 20 (bounds' midpoint is the prior mean)
    expected = [(80.0 * f, v, r * v) for f in (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1, 2) for r in (1 / 16, 1 / 4, 1, 4, 16)]
    got = [(c[LS], c[KV], c[NV]) for c in grid]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert 20 <= len(grid) <= 60
    validate_grid(model, grid)  # every value inside its parameter's constraint


def test_ard_lengthscales_follow_each_column_and_the_spacing_floor():
    rng = np.random.default_rng(1)
    X = np.column_stack([rng.uniform(0.0, 1000.0, 50), rng.integers(0, 2, 50).astype(float)])
    X[:2, 0] = [0.0, 1000.0]
    X[:2, 1] = [0.0, 1.0]  # column 0: range 1000; column 1: binary (range 1, spacing 1)
    model = DPGPR((X, np.zeros((50, 1))), gpflow.kernels.SquaredExponential(lengthscales=[1.0, 1.0]),
                  y_bounds=(-1.0, 1.0))
    grid = default_grid(model)
    lengthscales = np.unique(np.array([c[LS] for c in grid]), axis=0)
    np.testing.assert_allclose(lengthscales[:, 0], 1000.0 * np.array(LENGTHSCALE_FACTORS))
    np.testing.assert_allclose(lengthscales[:, 1], np.maximum(np.array(LENGTHSCALE_FACTORS), 2.0))  # 2 spacings
    validate_grid(model, grid)
    # one lengthscale for two columns: the root mean square of the columns' values
    iso = default_grid(DPGPR((X, np.zeros((50, 1))), gpflow.kernels.SquaredExponential(), y_bounds=(-1.0, 1.0)))
    ls = sorted({c[LS] for c in iso})
    ref = [float(np.sqrt((np.square(1000.0 * f) + np.square(max(f, 2.0))) / 2)) for f in LENGTHSCALE_FACTORS]
    np.testing.assert_allclose(ls, ref, rtol=1e-12)


def test_classifier_grid_varies_the_kernel_variance():
    X = np.linspace(0.0, 6.0, 24)[:, None]
    y = np.where(np.sin(2.0 * X) > 0.0, 1.0, -1.0)
    model = DPLaplaceGPC((X, y), gpflow.kernels.Matern52())
    grid = default_grid(model)
    assert all(set(c) == {LS, KV} for c in grid)
    assert sorted({c[KV] for c in grid}) == sorted(CLASSIFIER_VARIANCES)
    assert len(grid) == len(LENGTHSCALE_FACTORS) * len(CLASSIFIER_VARIANCES)
    validate_grid(model, grid)


def test_tiny_bounds_keep_the_noise_variance_above_its_lower_bound():
    X = np.linspace(0.0, 1.0, 20)[:, None]
    model = DPGPR((X, np.zeros((20, 1))), gpflow.kernels.SquaredExponential(), y_bounds=(0.0, 1e-4))
    grid = default_grid(model)
    validate_grid(model, grid)
    ratios = sorted({round(c[NV] / c[KV], 12) for c in grid})
    np.testing.assert_allclose(ratios, sorted(NOISE_RATIOS))


def test_models_without_a_default_grid_are_refused():
    X = np.linspace(0.0, 1.0, 10)[:, None]
    with pytest.raises(TypeError, match="stationary kernel"):
        default_grid(DPGPR((X, np.zeros((10, 1))), gpflow.kernels.Linear(), y_bounds=(0.0, 1.0)))
    with pytest.raises(ValueError, match="constant"):
        default_grid(DPGPR((np.ones((10, 1)), np.zeros((10, 1))), gpflow.kernels.SquaredExponential(),
                           y_bounds=(0.0, 1.0)))


def test_select_hyperparameters_without_a_grid_uses_the_default_one():
    rng = np.random.default_rng(2)
    X = np.sort(rng.uniform(0.0, 6.0, (30, 1)), axis=0)
    Y = np.clip(np.sin(X) + 0.1 * rng.standard_normal((30, 1)), -1.5, 1.5)
    model = DPGPR((X, Y), gpflow.kernels.SquaredExponential(), y_bounds=(-1.5, 1.5))
    acc = PrivacyAccountant(epsilon=1.0, delta=1e-3)
    with pytest.warns(ReproducibleNoiseWarning):
        sel = select_hyperparameters(model, epsilon=0.5, folds=3, seed=0, accountant=acc)
    assert sel.grid_source == "default" and _as_tuples(sel.grid) == _as_tuples(default_grid(model))
    assert sel.chosen in list(sel.grid) and acc.spent[0] == pytest.approx(0.5)
    with pytest.warns(ReproducibleNoiseWarning):
        given = select_hyperparameters(model, [{LS: 1.0}, {LS: 2.0}], epsilon=0.5, folds=3, seed=0, accountant=acc)
    assert given.grid_source == "given"
