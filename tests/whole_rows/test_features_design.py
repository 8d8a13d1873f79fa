"""Whole rows private: the features' bound and the public pieces (box, inducing inputs) built from the box alone."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from whole_rows_reference import features as reference_features
from whole_rows_reference import se_kernel

import dpgp_gpflow as dp
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.whole_rows.design import check_public_inducing_inputs, clip_private_inputs, is_data_derived


def test_kernel_bound_is_k_of_x_x_for_stationary_kernels_and_their_sums_and_products():
    se = gpflow.kernels.SquaredExponential(variance=3.0, lengthscales=2.0)
    m32 = gpflow.kernels.Matern32(variance=0.5)
    assert wr.kernel_bound(se) == pytest.approx(3.0)
    assert wr.kernel_bound(se + m32) == pytest.approx(3.5)
    assert wr.kernel_bound(se * m32) == pytest.approx(1.5)
    X = np.random.default_rng(0).uniform(-1e3, 1e3, (50, 1))
    for kernel in (se, se + m32, se * m32):  # k(x, x) is the bound everywhere: a closed form for these kernels
        np.testing.assert_allclose(kernel(X, full_cov=False).numpy(), wr.kernel_bound(kernel), rtol=1e-12)


def _box_points(box, num=41):
    """A dense grid over the box and every corner of it (brute force for the largest k(x, x))."""
    axes = [np.linspace(lo, hi, num) for lo, hi in box]
    grid = np.stack([g.reshape(-1) for g in np.meshgrid(*axes, indexing="ij")], axis=1)
    corners = np.array(np.meshgrid(*[(lo, hi) for lo, hi in box], indexing="ij")).reshape(len(box), -1).T
    return grid, corners


VARYING = {
    "linear": lambda: gpflow.kernels.Linear(variance=0.7),
    "linear-ard-active": lambda: gpflow.kernels.Linear(variance=[0.3, 2.0], active_dims=[0, 2]),
    "polynomial-3": lambda: gpflow.kernels.Polynomial(degree=3.0, variance=0.2, offset=0.5),
    "polynomial-2-sliced": lambda: gpflow.kernels.Polynomial(degree=2.0, variance=[1.5, 0.1], offset=2.0,
                                                             active_dims=slice(1, 3)),
    "linear+se": lambda: gpflow.kernels.Linear(variance=0.4) + gpflow.kernels.SquaredExponential(variance=2.0),
    "polynomial*matern": lambda: gpflow.kernels.Polynomial(degree=1.0, offset=0.1) * gpflow.kernels.Matern32(variance=3.0),
}
#: a box whose columns lie left of 0, across it (the larger end negative) and right of 0
VARYING_BOX = [(-4.0, -1.5), (-3.0, 2.0), (0.5, 2.5)]


@pytest.mark.parametrize("name", sorted(VARYING))
def test_the_bound_of_a_varying_kernel_holds_over_the_box_and_is_attained_at_a_corner(name):
    kernel = VARYING[name]()
    bound = wr.kernel_bound(kernel, VARYING_BOX)
    grid, corners = _box_points(VARYING_BOX)
    on_grid = kernel(grid, full_cov=False).numpy()
    at_corners = kernel(corners, full_cov=False).numpy()
    assert on_grid.max() <= bound * (1 + 1e-12)
    np.testing.assert_allclose(at_corners.max(), bound, rtol=1e-12)  # exact: the largest k(x, x) of the box
    assert wr.FeatureMap(kernel, Z=np.zeros((1, 3)), x_bounds=VARYING_BOX).k_max == pytest.approx(bound, rel=1e-15)


def test_the_linear_bound_is_the_closed_form_per_active_column():
    kernel = gpflow.kernels.Linear(variance=[0.3, 2.0], active_dims=[0, 2])
    expected = 0.3 * 4.0**2 + 2.0 * 2.5**2  # columns 0 and 2: the ends farther from 0
    assert wr.kernel_bound(kernel, VARYING_BOX) == pytest.approx(expected, rel=1e-15)
    poly = gpflow.kernels.Polynomial(degree=2.0, variance=0.5, offset=1.0)
    assert wr.kernel_bound(poly, VARYING_BOX) == pytest.approx((0.5 * (16.0 + 9.0 + 6.25) + 1.0) ** 2, rel=1e-14)


def test_a_periodic_kernel_is_bounded_by_its_base_kernels_variance():
    kernel = gpflow.kernels.Periodic(gpflow.kernels.SquaredExponential(variance=2.5), period=3.0)
    assert wr.kernel_bound(kernel) == pytest.approx(2.5)
    X = np.random.default_rng(0).uniform(-50, 50, (40, 1))
    np.testing.assert_allclose(kernel(X, full_cov=False).numpy(), 2.5, rtol=1e-12)


@pytest.mark.parametrize("kernel, box, named", [
    (gpflow.kernels.ArcCosine(), [(0.0, 1.0)], "ArcCosine"),
    (gpflow.kernels.White(), [(0.0, 1.0)], "White"),
    (gpflow.kernels.ChangePoints([gpflow.kernels.Linear(), gpflow.kernels.SquaredExponential()], [0.5]), [(0.0, 1.0)],
     "ChangePoints"),
    (gpflow.kernels.Linear(), None, "Linear"),  # grows with |x|: needs the box
    (gpflow.kernels.SquaredExponential() + gpflow.kernels.Polynomial(), None, "Polynomial"),
    (gpflow.kernels.Polynomial(degree=2.5), [(0.0, 1.0)], "degree 2.5"),
])
def test_a_kernel_without_a_bound_is_refused_in_one_line_naming_it(kernel, box, named):
    with pytest.raises(NotImplementedError) as info:
        wr.kernel_bound(kernel, box)
    message = str(info.value)
    assert "\n" not in message and named in message


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


def test_rows_split_in_two_blocks_have_the_bits_of_one_block_and_are_rescaled_in_each():
    """From SPLIT_FEATURE_ROWS rows on, a map computes two blocks of rows (side by side when compiled): each row
    the same numbers as in a call of fewer rows (one block), rows of too large a norm rescaled in both blocks."""
    from dpgp_gpflow.whole_rows import features

    rng = np.random.default_rng(5)
    Z = rng.uniform(0, 10, (12, 2))  # M = 12: the solve's bits depend on its columns' alignment
    X = np.vstack([rng.uniform(-5, 15, (features.SPLIT_FEATURE_ROWS + 887, 2)), Z])  # Z at the end: 2nd block
    X[:12] = Z  # and in the first block: rows whose norm k(x, x) / k_max > 1 is rescaled
    fm = wr.FeatureMap(gpflow.kernels.SquaredExponential(variance=3.0, lengthscales=2.0), Z, k_max=2.0)
    split = fm(X).numpy()
    pieces = np.vstack([fm(X[i:i + 1000]).numpy() for i in range(0, X.shape[0], 1000)])
    assert np.array_equal(split, pieces)
    compiled = wr.FeatureMap(fm.kernel, Z, k_max=2.0).compile()  # the graph: its two blocks side by side
    assert np.array_equal(compiled(X).numpy(),
                          np.vstack([compiled(X[i:i + 1000]).numpy() for i in range(0, X.shape[0], 1000)]))
    L = np.linalg.cholesky(1.5 * se_kernel(Z, Z, 2.0) + gpflow.config.default_jitter() * np.eye(12))
    reference = np.linalg.solve(L, 1.5 * se_kernel(Z, X, 2.0)).T  # k / k_max = 1.5 k1
    reference /= np.maximum(np.linalg.norm(reference, axis=1, keepdims=True), 1.0)
    np.testing.assert_allclose(split, reference, rtol=1e-9, atol=1e-12)
    norms = np.linalg.norm(split, axis=1)
    assert np.all(norms <= 1.0 + 1e-12) and norms[:12].min() == norms[-12:].min() == pytest.approx(1.0)


def test_a_feature_map_is_reused_only_for_the_same_kernel_object_values_and_inducing_inputs():
    """Repeated releases of one model reuse its map (compiled on reuse); any change of a value, of the inducing
    inputs or of the kernel object gives a fresh map that equals a NumPy reference at the new values."""
    Z = np.linspace(0.0, 10.0, 5)[:, None]
    X = np.linspace(-3.0, 13.0, 40)[:, None]
    kernel = gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=2.5)
    first = wr.feature_map(kernel, Z)
    assert isinstance(first, wr.FeatureMap) and first.__dict__.get("_compiled") is None  # one use: eager
    again = wr.feature_map(kernel, Z.copy())
    assert again is first and first.__dict__.get("_compiled") is not None  # reused: compiled
    kernel.lengthscales.assign(4.0)
    changed = wr.feature_map(kernel, Z)
    assert changed is not first
    np.testing.assert_allclose(changed(X).numpy(), reference_features(X, Z, 4.0), rtol=1e-9, atol=1e-12)
    kernel.variance.assign(3.0)  # k_max: features of k / k_max, the same at unit scale, but a map of its own
    assert wr.feature_map(kernel, Z) is not changed and wr.feature_map(kernel, Z).k_max == pytest.approx(3.0)
    assert wr.feature_map(kernel, Z + 1.0) is not wr.feature_map(kernel, Z)
    twin = gpflow.kernels.SquaredExponential(variance=3.0, lengthscales=4.0)  # equal values, another object
    assert wr.feature_map(twin, Z) is not wr.feature_map(kernel, Z)
    inner = gpflow.kernels.Matern32(lengthscales=1.0)
    summed = kernel + inner
    before = wr.feature_map(summed, Z)
    inner.lengthscales.assign(2.0)  # a value inside a Sum
    assert wr.feature_map(summed, Z) is not before
    # a kernel inside a Sum replaced by another class sharing the same Parameter objects (the same values)
    mapped = wr.feature_map(summed, Z)
    other = gpflow.kernels.Matern12()
    other.variance, other.lengthscales = inner.variance, inner.lengthscales
    summed.kernels[1] = other
    fresh = wr.feature_map(summed, Z)
    assert fresh is not mapped and isinstance(fresh.kernel.kernels[1], gpflow.kernels.Matern12)
    # the same inside a Periodic kernel: its base kernel replaced, the Parameter objects shared
    periodic = gpflow.kernels.Periodic(gpflow.kernels.SquaredExponential(lengthscales=0.7), period=3.0)
    mapped = wr.feature_map(periodic, Z)
    base = gpflow.kernels.Matern12()
    base.variance, base.lengthscales = periodic.base_kernel.variance, periodic.base_kernel.lengthscales
    periodic.base_kernel = base
    fresh = wr.feature_map(periodic, Z)
    assert fresh is not mapped and isinstance(fresh.kernel.base_kernel, gpflow.kernels.Matern12)


@pytest.mark.slow
def test_compiled_features_equal_the_eager_ones_and_a_numpy_reference():
    rng = np.random.default_rng(3)
    Z = rng.uniform(0, 10, (7, 2))
    X = np.vstack([rng.uniform(-20, 30, (300, 2)), Z])
    kernel = gpflow.kernels.SquaredExponential(variance=5.0, lengthscales=2.0)
    eager = wr.FeatureMap(kernel, Z)(X).numpy()
    compiled = wr.FeatureMap(kernel, Z).compile()
    for rows in (X, X[:3]):  # one trace for every number of rows
        np.testing.assert_allclose(compiled(rows).numpy(), reference_features(rows, Z, 2.0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(compiled(X).numpy(), eager, rtol=1e-12, atol=1e-14)
    assert np.all(np.linalg.norm(compiled(X).numpy(), axis=1) <= 1.0 + 1e-12)


def test_parameter_value_follows_every_assignment_and_equals_the_parameters_own_value():
    """The leak guard's reads (validation.parameter_value) remember a value only while the unconstrained value
    and the transform are the same objects and bytes."""
    from dpgp_gpflow.validation import parameter_value

    kernel = gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=[1.5, 3.0])
    for value in ([1.5, 3.0], [1.5, 3.0], [2.0, 3.0], [2.0, 1e-3]):
        kernel.lengthscales.assign(value)
        got = parameter_value(kernel.lengthscales)
        np.testing.assert_array_equal(got, kernel.lengthscales.numpy())
        np.testing.assert_allclose(got, value, rtol=1e-12)
    got[0] = -1.0  # a copy: the remembered value is not changed by its caller
    assert parameter_value(kernel.lengthscales)[0] == pytest.approx(2.0)
    kernel.variance = gpflow.Parameter(5.0, transform=gpflow.utilities.positive(lower=1.0))  # a new parameter
    assert parameter_value(kernel.variance) == pytest.approx(5.0)
    plain = gpflow.Parameter(np.array([1.0, -2.0]))  # no transform
    plain.assign([3.0, 4.0])
    np.testing.assert_array_equal(parameter_value(plain), [3.0, 4.0])



def test_reading_once_reads_each_parameter_once_and_only_inside_its_block():
    """Inside validation.reading_once (a release) a parameter's first read is its value for the block: a read
    after an assignment there still gives it (one snapshot), a copy each time; a nested block shares the outer
    reads; outside, every read follows the variable again."""
    from dpgp_gpflow.validation import parameter_value, reading_once, variable_value

    kernel = gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=1.5)
    np.testing.assert_array_equal(variable_value(kernel.variance.unconstrained_variable),
                                  kernel.variance.unconstrained_variable.numpy())
    with reading_once():
        first = parameter_value(kernel.variance)
        first[...] = -1.0  # a copy
        kernel.variance.assign(3.0)
        with reading_once():
            assert parameter_value(kernel.variance) == pytest.approx(2.0)
        assert parameter_value(kernel.variance) == pytest.approx(2.0)
        assert parameter_value(kernel.lengthscales) == pytest.approx(1.5)  # read first here, after no assignment
    assert parameter_value(kernel.variance) == pytest.approx(3.0)
    with reading_once():  # a new block reads again
        assert parameter_value(kernel.variance) == pytest.approx(3.0)

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


def test_clipping_private_inputs_equals_np_clip_counts_rows_outside_and_refuses_other_columns():
    box = np.array([[0.0, 1.0], [-2.0, 2.0]])
    X = np.array([[0.5, 0.0], [-1.0, 3.0], [2.0, -2.0], [1.0, 2.0], [0.2, -2.5]])  # rows 1, 2, 4 outside
    clipped, outside = clip_private_inputs(X, box)
    assert np.array_equal(clipped, np.clip(X, box[:, 0], box[:, 1])) and outside == 3
    with pytest.raises(ValueError, match="clipping is off"):
        clip_private_inputs(X, box, clip_inputs=False)
    for bad in (np.zeros((4, 3)), np.zeros((4, 1)), np.zeros(4)):  # never columns the box does not cover
        with pytest.raises(ValueError, match=r"\[N, 2\]"):
            clip_private_inputs(bad, box)


def test_kmeans_centres_are_remembered_as_data_derived_and_refused():
    X = np.random.default_rng(2).normal(size=(40, 2))
    Z = dp.models.kmeans_inducing_inputs(X, 4)
    assert is_data_derived(Z) and is_data_derived(gpflow.inducing_variables.InducingPoints(Z).Z.numpy())
    with pytest.raises(ValueError, match="k-means"):
        check_public_inducing_inputs(Z)
    check_public_inducing_inputs(wr.inducing_grid([(-3, 3), (-3, 3)], 2))  # from the box: accepted


def _column_sums(kernel, Z, L, k_max, X):
    """A chunk function that runs on any rank (no shape check of its own)."""
    return tf.reduce_sum(X, axis=0)


def test_a_compiled_map_refuses_args_outside_its_first_calls_signature():
    """FeatureMap.apply calls its trace's concrete function directly (which checks dtypes only): args of another
    rank or trailing dimension are refused as the tf.function of the signature [None, *trailing] refuses them."""
    kernel = gpflow.kernels.SquaredExponential(variance=5.0, lengthscales=2.0)
    features = wr.FeatureMap(kernel, np.array([[0.0, 1.0], [2.0, 3.0]])).compile()
    X = np.arange(10.0).reshape(5, 2)
    np.testing.assert_array_equal(features.apply(_column_sums, tf.constant(X)).numpy(), X.sum(axis=0))
    np.testing.assert_array_equal(features.apply(_column_sums, tf.constant(X[:2])).numpy(), X[:2].sum(axis=0))
    reference = tf.function(lambda X: tf.reduce_sum(X, axis=0), autograph=False,
                            input_signature=[tf.TensorSpec([None, 2], tf.float64)])
    for bad in (X[:, 0], np.ones((5, 3)), X[None]):
        with pytest.raises(TypeError):
            reference(tf.constant(bad))  # the independent expectation: tf.function refuses it
        with pytest.raises(ValueError, match="_column_sums: tensor 0"):
            features.apply(_column_sums, tf.constant(bad))
    with pytest.raises(TypeError, match="dtype float32"):
        features.apply(_column_sums, tf.constant(X, tf.float32))
    with pytest.raises(TypeError, match="takes 1 tensors"):
        features.apply(_column_sums, tf.constant(X), tf.constant(X))


def test_recently_used_keeps_the_most_recent_entries():
    """features.RecentlyUsed (the feature maps' and the residual stages' compiled sums' cache): a get or a put makes an
    entry the most recent; beyond its size the least recent is forgotten."""
    from dpgp_gpflow.whole_rows.features import RecentlyUsed

    cache = RecentlyUsed(2)
    assert cache.put("a", 1) == 1 and cache.get("missing") is None
    cache.put("b", 2)
    assert cache.get("a") == 1  # now b is the least recent
    cache.put("c", 3)
    assert (cache.get("b"), cache.get("a"), cache.get("c"), len(cache)) == (None, 1, 3, 2)
    cache.put("a", 4)  # a again: c is the least recent
    cache.put("d", 5)
    assert (cache.get("c"), cache.get("a"), cache.get("d"), len(cache)) == (None, 4, 5, 2)
