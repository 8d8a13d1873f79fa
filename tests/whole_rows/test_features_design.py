"""Whole rows private: the features' bound and the public pieces (box, inducing inputs) built from the box alone."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest
from whole_rows_reference import features as reference_features

import dpgp_gpflow as dp
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.whole_rows.design import check_public_inducing_inputs, is_data_derived


def test_kernel_bound_is_k_of_x_x_for_stationary_kernels_and_their_sums_and_products():
    se = gpflow.kernels.SquaredExponential(variance=3.0, lengthscales=2.0)
    m32 = gpflow.kernels.Matern32(variance=0.5)
    assert wr.kernel_bound(se) == pytest.approx(3.0)
    assert wr.kernel_bound(se + m32) == pytest.approx(3.5)
    assert wr.kernel_bound(se * m32) == pytest.approx(1.5)
    X = np.random.default_rng(0).uniform(-1e3, 1e3, (50, 1))
    for kernel in (se, se + m32, se * m32):  # k(x, x) is the bound everywhere: a closed form for these kernels
        np.testing.assert_allclose(kernel(X, full_cov=False).numpy(), wr.kernel_bound(kernel), rtol=1e-12)


@pytest.mark.parametrize("kernel", [gpflow.kernels.Linear(), gpflow.kernels.Polynomial(),
                                    gpflow.kernels.SquaredExponential() + gpflow.kernels.Linear()])
def test_a_kernel_without_a_bound_is_refused_in_one_line_naming_it(kernel):
    with pytest.raises(NotImplementedError) as info:
        wr.kernel_bound(kernel)
    message = str(info.value)
    assert "\n" not in message and ("Linear" in message or "Polynomial" in message)


def test_features_equal_a_numpy_reference_and_their_norm_is_at_most_one_anywhere():
    rng = np.random.default_rng(1)
    Z = rng.uniform(0, 10, (6, 2))
    X = np.vstack([rng.uniform(-50, 60, (200, 2)), Z])  # far from Z, and on it (the largest norms)
    kernel = gpflow.kernels.SquaredExponential(variance=7.0, lengthscales=2.5)
    fm = wr.FeatureMap(kernel, Z)
    phi = fm(X).numpy()
    np.testing.assert_allclose(phi, reference_features(X, Z, 2.5), rtol=1e-9, atol=1e-12)
    assert np.all(np.linalg.norm(phi, axis=1) <= 1.0 + 1e-12)
    assert np.linalg.norm(phi, axis=1).max() > 0.999  # attained near the inducing inputs


def test_rows_of_too_large_a_norm_are_put_back_on_the_unit_sphere():
    """A bound smaller than k(x, x) (k_max given too small) only rescales the features: never above norm 1."""
    Z = np.array([[0.0], [1.0]])
    fm = wr.FeatureMap(gpflow.kernels.SquaredExponential(variance=4.0), Z, k_max=0.5)
    norms = np.linalg.norm(fm(np.linspace(-1, 2, 31)[:, None]).numpy(), axis=1)
    assert np.all(norms <= 1.0 + 1e-12) and norms.max() == pytest.approx(1.0)


def test_grid_and_design_come_from_the_box_alone():
    grid = wr.inducing_grid([(0.0, 90.0)], 8)
    np.testing.assert_array_equal(grid[:, 0], np.linspace(0, 90, 8))
    grid2 = wr.inducing_grid([(0, 1), (10, 20)], [2, 3])
    expected = np.array([[a, b] for a in (0.0, 1.0) for b in (10.0, 15.0, 20.0)])
    np.testing.assert_array_equal(grid2, expected)
    for kind in ("halton", "sobol"):
        design = wr.inducing_design([(0, 1), (10, 20)], 13, kind=kind)
        assert design.shape == (13, 2)
        assert np.all((design >= [0, 10]) & (design <= [1, 20]))
        np.testing.assert_array_equal(design, wr.inducing_design([(0, 1), (10, 20)], 13, kind=kind))  # public seed
        assert len(np.unique(design, axis=0)) == 13


@pytest.mark.parametrize("bad, error", [(None, TypeError), ([(1.0, 0.0)], ValueError), ([(0.0, np.inf)], ValueError),
                                        ([(0, 1, 2)], ValueError), ([(0, True)], TypeError), ("box", ValueError)])
def test_a_bad_box_is_refused(bad, error):
    with pytest.raises(error):
        wr.validate_box(bad)


def test_a_box_of_another_width_is_refused():
    with pytest.raises(ValueError, match="2 column"):
        wr.validate_box([(0, 1)], 2)


def test_kmeans_centres_are_remembered_as_data_derived_and_refused():
    X = np.random.default_rng(2).normal(size=(40, 2))
    Z = dp.models.kmeans_inducing_inputs(X, 4)
    assert is_data_derived(Z) and is_data_derived(gpflow.inducing_variables.InducingPoints(Z).Z.numpy())
    with pytest.raises(ValueError, match="k-means"):
        check_public_inducing_inputs(Z)
    check_public_inducing_inputs(wr.inducing_grid([(-3, 3), (-3, 3)], 2))  # from the box: accepted
