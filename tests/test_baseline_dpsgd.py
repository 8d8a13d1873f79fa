"""The DP-SGD sparse variational GP baseline (dpgp_gpflow.baselines.dpsgd_svgp; issue 36 item 7).

Independent references: the Gaussian mechanism's closed-form privacy profile (full batch), the hockey-stick
divergence of the subsampled pair integrated numerically (one step), per-row gradient tapes in a loop and
NumPy closed forms of the whitened SVGP's data-term gradient."""

from __future__ import annotations

import math
import warnings

import gpflow
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from scipy import integrate, stats

import dpgp_gpflow as dp
from dpgp_gpflow.baselines import (
    DPSGDSVGP,
    DPSGDSVGPRelease,
    clip_per_example,
    dpsgd_epsilon,
    dpsgd_noise_multiplier,
    per_example_gradients,
)
from dpgp_gpflow.exceptions import ClippingWarning, ReproducibleNoiseWarning


# ------------------------------------------------------------------------------------------------
# accounting


def _gaussian_delta(epsilon: float, mu: float) -> float:
    """delta(epsilon) of the Gaussian mechanism with shift / std = mu (Balle & Wang 2018), written here."""
    return stats.norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon) * stats.norm.cdf(-epsilon / mu - mu / 2)


def test_full_batch_noise_multiplier_matches_the_gaussian_closed_form():
    # q = 1: T Gaussian steps, a replaced row moves the clipped sum by 2C, noise std sigma C:
    # mu = 2 sqrt(T) / sigma GDP. The multiplier found must satisfy (1, 1e-3) and be near the smallest.
    steps, epsilon, delta = 16, 1.0, 1e-3
    sigma = dpsgd_noise_multiplier(epsilon, delta, sampling_rate=1.0, steps=steps)
    assert _gaussian_delta(epsilon, 2 * math.sqrt(steps) / sigma) <= delta
    assert _gaussian_delta(epsilon, 2 * math.sqrt(steps) / (sigma * (1 - 3e-3))) > delta
    # add/remove sensitivity (C, not 2C) would have needed only half the noise: it is not what was charged
    assert _gaussian_delta(epsilon, math.sqrt(steps) / (sigma / 2 * 1.01)) <= delta


def _hockey_stick(epsilon: float, q: float, sigma: float, a: float, b: float) -> float:
    """delta(epsilon) between (1-q) N(0, s^2) + q N(a, s^2) and (1-q) N(0, s^2) + q N(b, s^2), numerically."""
    x = np.linspace(min(a, b) - 14 * sigma, max(a, b) + 14 * sigma, 100_001)
    p = (1 - q) * stats.norm.pdf(x, 0, sigma) + q * stats.norm.pdf(x, a, sigma)
    r = (1 - q) * stats.norm.pdf(x, 0, sigma) + q * stats.norm.pdf(x, b, sigma)
    return float(integrate.trapezoid(np.maximum(p - math.exp(epsilon) * r, 0.0), x))


def test_one_subsampled_step_is_accounted_as_the_replace_one_pair():
    # One Poisson step with rows clipped to norm 1 and noise std sigma: a replaced row is g -> g' with
    # |g|, |g'| <= 1. Among such pairs (1-D grid) the worst is g = -1, g' = +1, and the accountant's epsilon
    # is that pair's (an upper bound, tight to the discretisation).
    q, sigma, delta = 0.3, 1.2, 1e-3
    eps = dpsgd_epsilon(sigma, q, 1, delta)
    worst = _hockey_stick(eps, q, sigma, -1.0, 1.0)
    assert worst <= delta * (1 + 1e-6)
    assert _hockey_stick(eps - 0.01, q, sigma, -1.0, 1.0) > delta
    for a in np.linspace(-1, 1, 5):
        for b in np.linspace(-1, 1, 5):
            assert _hockey_stick(eps, q, sigma, a, b) <= worst + 1e-9
    # the add/remove pair (one row present or absent) is strictly weaker: replace-one is what is charged
    assert _hockey_stick(eps, q, sigma, 0.0, 1.0) < 0.5 * worst


def test_the_multiplier_is_the_smallest_that_reaches_epsilon():
    sigma = dpsgd_noise_multiplier(1.0, 1e-3, sampling_rate=0.25, steps=8)
    assert dpsgd_epsilon(sigma, 0.25, 8, 1e-3) <= 1.0 < dpsgd_epsilon(sigma * (1 - 3e-3), 0.25, 8, 1e-3)


# ------------------------------------------------------------------------------------------------
# per-example gradients and clipping


def _tiny_svgp(rng):
    Z = np.array([[0.0], [2.5], [5.0]])
    kernel = gpflow.kernels.SquaredExponential(variance=1.7, lengthscales=1.3)
    model = gpflow.models.SVGP(kernel, gpflow.likelihoods.Gaussian(variance=0.3), Z,
                               mean_function=gpflow.mean_functions.Constant(0.4), whiten=True, num_data=50)
    model.q_mu.assign(rng.normal(size=(3, 1)))
    model.q_sqrt.assign(np.tril(rng.normal(size=(3, 3)) * 0.3 + np.eye(3))[None])
    return model, Z


def test_per_example_gradients_equal_a_loop_and_the_closed_form():
    rng = np.random.default_rng(3)
    model, Z = _tiny_svgp(rng)
    X, Y = rng.uniform(-1, 6, (6, 1)), rng.normal(size=(6, 1))
    G = per_example_gradients(model, X, Y).numpy()
    assert G.shape == (6, 3 + 6)
    variables = (model.q_mu.unconstrained_variable, model.q_sqrt.unconstrained_variable)
    for i in range(6):  # one tape per row: the data term of row i alone
        with tf.GradientTape() as tape:
            mean, var = model.predict_f(X[i:i + 1])
            loss = -tf.reduce_sum(model.likelihood.variational_expectations(X[i:i + 1], mean, var, Y[i:i + 1]))
        loop = np.concatenate([g.numpy().ravel() for g in tape.gradient(loss, variables)])
        np.testing.assert_allclose(G[i], loop, rtol=1e-10, atol=1e-12)

    # NumPy, whitened SVGP: a = L^-1 k_Z(x), mean = c + a^T m, var = k - a^T a + |S^T a|^2,
    # loss = ((y - mean)^2 + var) / (2 s2) + const: d/dm = -(y - mean) a / s2, d/dS = tril(a a^T S) / s2
    v, ell, s2, c = 1.7, 1.3, 0.3, 0.4
    K = v * np.exp(-0.5 * (Z - Z.T) ** 2 / ell**2) + gpflow.config.default_jitter() * np.eye(3)
    L = np.linalg.cholesky(K)
    m, S = model.q_mu.numpy(), model.q_sqrt.numpy()[0]
    for i in range(6):
        a = np.linalg.solve(L, v * np.exp(-0.5 * (Z - X[i]) ** 2 / ell**2))  # [3, 1]
        resid = Y[i, 0] - (c + float(a.T @ m))
        np.testing.assert_allclose(G[i, :3], -resid * a[:, 0] / s2, rtol=1e-9)
        dS = tfp.math.fill_triangular(G[i, 3:]).numpy()  # the unconstrained vector back to its matrix
        np.testing.assert_allclose(dS, np.tril(a @ a.T @ S) / s2, rtol=1e-9, atol=1e-12)


def test_clipping_bounds_every_row_and_keeps_small_rows():
    rng = np.random.default_rng(0)
    G = rng.normal(size=(6, 5))
    G *= (np.array([0.1, 0.99, 1.0, 3.0, 1e6, 0.0]) / np.maximum(np.linalg.norm(G, axis=1), 1e-300))[:, None]
    G[5] = 0.0
    clipped = clip_per_example(G, 1.0).numpy()
    norms = np.linalg.norm(clipped, axis=1)
    assert np.all(norms <= 1.0 + 1e-12)
    np.testing.assert_array_equal(clipped[[0, 1, 2, 5]], G[[0, 1, 2, 5]])
    np.testing.assert_allclose(norms[[3, 4]], 1.0, rtol=1e-12)
    np.testing.assert_allclose(clipped[3] / norms[3], G[3] / np.linalg.norm(G[3]), rtol=1e-12)


# ------------------------------------------------------------------------------------------------
# the release


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 10, (40, 1))
    X[0, 0] = 12.0  # outside the box: clipped
    Y = np.sin(X) + 0.1 * rng.normal(size=X.shape)
    return X, Y


@pytest.fixture(scope="module")
def model(rows):
    return DPSGDSVGP(rows, gpflow.kernels.SquaredExponential(lengthscales=2.0),
                     inducing_variable=np.linspace(0, 10, 4)[:, None], noise_variance=0.1, x_bounds=[(0.0, 10.0)],
                     y_bounds=(-2.0, 2.0))


def test_a_release_is_one_ledger_event_and_predicts_anywhere(model, draws):
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with pytest.warns(ClippingWarning, match="1 of 40 private rows had inputs outside the public box"), \
            pytest.warns(ReproducibleNoiseWarning):
        released = model.release_function(epsilon=1.0, delta=1e-3, clip_norm=1.0, sampling_rate=0.5, steps=4,
                                          seed=7, accountant=acc)
    assert isinstance(released, DPSGDSVGPRelease)
    (event,) = acc.history()
    assert (event["status"], event["kind"], event["epsilon"], event["delta"]) == ("committed", "approximate", 1.0,
                                                                                  1e-3)
    assert draws == [4 * model.num_parameters]  # one draw: every step's noise
    assert released.noise_multiplier == dpsgd_noise_multiplier(1.0, 1e-3, sampling_rate=0.5, steps=4)
    assert released.relation.startswith("row (inputs and outputs)") and released.reproducible
    mean, var = released.predict_f(np.linspace(-5, 20, 7)[:, None])
    assert mean.shape == var.shape == (7, 1) and np.all(np.isfinite(mean)) and np.all(var > 0)


def test_over_budget_is_refused_before_anything_is_drawn(model, draws):
    acc = dp.PrivacyAccountant(epsilon=0.5, delta=1e-2)
    with pytest.raises(dp.BudgetExceededError):
        model.release_function(epsilon=1.0, delta=1e-3, clip_norm=1.0, sampling_rate=0.5, steps=2, seed=1,
                               accountant=acc)
    assert draws == [] and acc.history() == [] and acc.held == (0.0, 0.0)


@pytest.mark.parametrize("change, error", [
    (dict(epsilon=0.0), ValueError), (dict(epsilon=-1.0), ValueError), (dict(epsilon=float("nan")), ValueError),
    (dict(epsilon="1"), TypeError), (dict(delta=0.0), ValueError), (dict(sampling_rate=0.0), ValueError),
    (dict(sampling_rate=1.5), ValueError), (dict(steps=0), ValueError), (dict(steps=2.5), ValueError),
    (dict(clip_norm=0.0), ValueError), (dict(learning_rate=-1.0), ValueError),
])
def test_bad_parameters_are_refused_before_reserving(model, draws, change, error):
    acc = dp.PrivacyAccountant(epsilon=5.0, delta=1e-2)
    args = dict(epsilon=1.0, delta=1e-3, clip_norm=1.0, sampling_rate=0.5, steps=2, seed=1, accountant=acc)
    with pytest.raises(error):
        model.release_function(**{**args, **change})
    assert draws == [] and acc.history() == [] and acc.held == (0.0, 0.0)


@pytest.mark.parametrize("change, error, match", [
    (dict(x_bounds=None), TypeError, "x_bounds=\\[\\(lo_1, hi_1\\), ...\\], a public box .* is required"),
    (dict(y_bounds=None), TypeError, "y_bounds=\\(lo, hi\\), public bounds on the outputs, is required"),
    (dict(x_bounds=[(0.0, 1.0), (0.0, 1.0)]), ValueError, "2 \\(lo, hi\\) pair\\(s\\), the inputs have 1 column"),
    (dict(x_bounds=[(1.0, 0.0)]), ValueError, "lo < hi"),
])
def test_missing_or_bad_bounds_are_refused(rows, change, error, match):
    args = dict(inducing_variable=np.zeros((2, 1)), noise_variance=0.1, x_bounds=[(0.0, 10.0)], y_bounds=(-2.0, 2.0))
    with pytest.raises(error, match=match):
        DPSGDSVGP(rows, gpflow.kernels.SquaredExponential(), **{**args, **change})


@pytest.mark.parametrize("x_bounds", [None, [(1.0, 0.0)], [(0.0, 1.0), (0.0, 1.0)], [(0.0, np.inf)], [(0, True)]])
def test_a_bad_box_is_refused_as_the_whole_row_release_refuses_it(rows, x_bounds):
    """The two models with private inputs share one rule for the box: same error type, same message."""
    Z = np.linspace(0, 10, 4)[:, None]
    with pytest.raises(Exception) as baseline:
        DPSGDSVGP(rows, gpflow.kernels.SquaredExponential(), inducing_variable=Z, noise_variance=0.1,
                  x_bounds=x_bounds, y_bounds=(-2.0, 2.0))
    with pytest.raises(Exception) as whole_rows:
        dp.models.DPSGPR(rows, gpflow.kernels.SquaredExponential(), Z, noise_variance=0.1, y_bounds=(-2.0, 2.0),
                         x_bounds=x_bounds, private_inputs=True)
    assert type(baseline.value) is type(whole_rows.value) and type(baseline.value) in (TypeError, ValueError)
    assert str(baseline.value) == str(whole_rows.value) and "x_bounds" in str(baseline.value)


def test_inducing_inputs_by_kmeans_on_the_private_inputs_are_refused(rows):
    Z = dp.models.kmeans_inducing_inputs(rows[0], 3)
    with pytest.raises(ValueError, match="computed from the inputs \\(k-means\\)"):
        DPSGDSVGP(rows, gpflow.kernels.SquaredExponential(), inducing_variable=Z, noise_variance=0.1,
                  x_bounds=[(0.0, 10.0)], y_bounds=(-2.0, 2.0))
    DPSGDSVGP(rows, gpflow.kernels.SquaredExponential(), inducing_variable=Z + 0.5, noise_variance=0.1,
              x_bounds=[(0.0, 10.0)], y_bounds=(-2.0, 2.0))  # other values: not marked


@pytest.mark.slow
def test_a_private_release_uses_the_exact_sampler(model):
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReproducibleNoiseWarning)
        warnings.simplefilter("ignore", ClippingWarning)
        released = model.release_function(epsilon=1.0, delta=1e-3, clip_norm=1.0, sampling_rate=0.5, steps=2,
                                          accountant=acc)
    assert not released.reproducible and len(acc.history()) == 1
