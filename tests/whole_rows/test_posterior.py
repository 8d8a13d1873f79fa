"""Whole rows private: post-processing of the released statistics against NumPy references written here, the
derivations behind it (spectral bound, delta-method variance) by Monte Carlo, and the variance fit against
GPflow's own SGPR bound."""

from __future__ import annotations

import math
import warnings

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from whole_rows_reference import features as reference_features

import dpgp_gpflow as dp
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.streaming import LocalChunks
from dpgp_gpflow.whole_rows.posterior import OnReuse, predictive_terms, spectral_noise_bound, weight_posterior
from dpgp_gpflow.whole_rows.variances import fit_variances, sgpr_bound

BOX = [(0.0, 10.0)]
BOUNDS = (-3.0, 3.0)
LENGTHSCALE = 2.0


def _data(n, seed=0, noise=0.3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, (n, 1))
    return X, np.sin(X) * 2.0 + noise * rng.normal(size=(n, 1))


def _released(n=400, seed=5, **options):
    X, Y = _data(n)
    Z = wr.inducing_grid(BOX, 6)
    kernel = gpflow.kernels.SquaredExponential(variance=3.0, lengthscales=LENGTHSCALE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        return Z, wr.release_rows(LocalChunks(X, Y), kernel, Z, x_bounds=BOX, y_bounds=BOUNDS, epsilon=1.0,
                                  delta=1e-3, seed=seed, **options)


@pytest.mark.parametrize("clip", [True, False])
def test_predictions_equal_a_numpy_reference_from_the_released_statistics(clip):
    Z, released = _released(noise_variance=0.2)
    if not clip:
        released = released.unclipped()
    stats, std = released.statistics, released.statistics_noise_std
    m = Z.shape[0]
    # the released S is symmetric, its noise GOE-shaped (diagonal std sqrt(2) times the off-diagonal's)
    np.testing.assert_array_equal(stats["S"], stats["S"].T)
    sigma_o = std["S"][0, 1]
    np.testing.assert_allclose(np.diag(std["S"]), math.sqrt(2) * sigma_o, rtol=1e-12)
    tau = 2 * sigma_o * (math.sqrt(m) + math.sqrt(math.log(2 / 0.01)))
    w, V = np.linalg.eigh(stats["S"])
    S_hat = V @ np.diag(np.maximum(w, 0.75 * tau)) @ V.T
    kf, nv = 3.0, 0.2
    lam = nv / kf
    inverse = np.linalg.inv(lam * np.eye(m) + S_hat)
    u = inverse @ stats["b"]
    Xt = np.linspace(-5, 15, 41)[:, None]  # beyond the box too: predictions anywhere
    phi = reference_features(Xt, Z, LENGTHSCALE)
    mean = 0.0 + phi @ u  # the bounds' midpoint is 0
    if clip:
        mean = np.clip(mean, *BOUNDS)
    model = kf * (1 - np.sum(phi**2, 1) + lam * np.einsum("im,mn,in->i", phi, inverse, phi))
    h = phi @ inverse
    sb = std["b"][0]
    noise = (sb**2 + sigma_o**2 * u @ u) * np.sum(h**2, 1) + sigma_o**2 * (h @ u) ** 2
    got_mean, got_var = released.predict_f(Xt)
    assert isinstance(got_mean, np.ndarray) and got_mean.shape == got_var.shape == (41, 1)
    np.testing.assert_allclose(got_mean[:, 0], mean, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(got_var[:, 0], model + noise, rtol=1e-8)
    pred = released.predict(Xt)
    assert pred.mean.shape == pred.variance.shape == pred.noise_std.shape == (41, 1)  # [k, 1], as GPflow's
    np.testing.assert_allclose(pred.noise_std[:, 0], np.sqrt(noise), rtol=1e-8)
    np.testing.assert_allclose(pred.variance[:, 0], model, rtol=1e-8)
    np.testing.assert_allclose(released.predict_y(Xt)[1][:, 0], model + noise + nv, rtol=1e-8)


def test_spectral_bound_holds_with_the_stated_probability_and_is_not_loose():
    rng = np.random.default_rng(0)
    m, sigma_o, draws = 8, 1.3, 4000
    G = rng.normal(size=(draws, m, m))
    E = sigma_o * (G + np.transpose(G, (0, 2, 1))) / math.sqrt(2)  # off-diagonal std sigma_o, diagonal sqrt(2) x
    norms = np.abs(np.linalg.eigvalsh(E)).max(axis=1)
    tau = spectral_noise_bound(sigma_o, m, 0.01)
    assert np.mean(norms > tau) <= 0.01
    assert np.mean(norms) >= 0.5 * tau


def test_the_first_order_noise_variance_matches_monte_carlo_for_small_noise():
    """The derivation of the DP noise's variance (delta method): redraw the noise of b and S many times around
    fixed statistics and compare the spread of the predicted means with predictive_terms."""
    rng = np.random.default_rng(1)
    X, Y = _data(2000, seed=2)
    Z = wr.inducing_grid(BOX, 5)
    P = reference_features(X, Z, LENGTHSCALE)
    yc = np.clip(Y[:, 0], *BOUNDS)
    S, b = P.T @ P, P.T @ yc
    sb, so, kf, nv = 2.0, 0.5, 3.0, 0.2
    post = weight_posterior(tf.constant(S), tf.constant(b), kernel_variance=kf, noise_variance=nv, b_std=sb,
                            offdiag_std=so)
    Xt = np.array([[1.0], [4.5], [9.0]])
    phi = reference_features(Xt, Z, LENGTHSCALE)
    _, _, predicted = predictive_terms(post, tf.constant(phi), tf.ones(3, tf.float64))
    m, lam, draws = 5, nv / kf, 20000
    G = rng.normal(size=(draws, m, m))
    E = so * (G + np.transpose(G, (0, 2, 1))) / math.sqrt(2)
    u = np.linalg.solve(lam * np.eye(m) + S + E, (b + sb * rng.normal(size=(draws, m)))[..., None])[..., 0]
    empirical = np.var(u @ phi.T, axis=0)
    np.testing.assert_allclose(predicted.numpy(), empirical, rtol=0.06)


@pytest.mark.parametrize("kernel_variance, noise_variance", [(1.0, 0.1), (4.0, 0.05)])
def test_the_bound_on_exact_statistics_is_gpflows_sgpr_elbo(kernel_variance, noise_variance):
    X, Y = _data(150, seed=3)
    Z = wr.inducing_grid(BOX, 5)
    jitter = 1e-6
    P = reference_features(X, Z, LENGTHSCALE, jitter=jitter)
    yc = np.clip(Y, *BOUNDS)  # midpoint 0
    S, b, q = P.T @ P, P.T @ yc[:, 0], float(np.sum(yc**2))
    ours = sgpr_bound(tf.constant(S), tf.constant(b), tf.constant(q, tf.float64), tf.constant(np.trace(S)), 150, 0.0,
                      tf.constant(kernel_variance, tf.float64), tf.constant(noise_variance, tf.float64), q_std=0.0,
                      offdiag_std=0.0)  # exact statistics
    kernel = gpflow.kernels.SquaredExponential(variance=kernel_variance, lengthscales=LENGTHSCALE)
    previous = gpflow.config.default_jitter()
    gpflow.config.set_default_jitter(jitter * kernel_variance)  # GPflow's jitter is absolute: the same Nystrom map
    try:
        elbo = gpflow.models.SGPR((X, yc), kernel, Z, noise_variance=noise_variance).elbo()
    finally:
        gpflow.config.set_default_jitter(previous)
    assert float(ours) == pytest.approx(float(elbo), rel=1e-10)


def test_fitted_variances_maximise_gpflows_bound_on_exact_statistics():
    """On noise-free statistics the fit maximises GPflow's SGPR ELBO over the two variances (lengthscale fixed):
    no value on a grid around it does better, and the best grid point is next to it."""
    X, Y = _data(300, seed=4)
    Z = wr.inducing_grid(BOX, 6)
    P = reference_features(X, Z, LENGTHSCALE)
    yc = np.clip(Y, *BOUNDS)
    S, b, q = P.T @ P, P.T @ yc[:, 0], float(np.sum(yc**2))
    kf, nv = fit_variances(tf.constant(S), tf.constant(b), q, float(np.trace(S)), 300, 0.0, 6.0, q_std=0.0,
                           offdiag_std=0.0)
    model = gpflow.models.SGPR((X, yc), gpflow.kernels.SquaredExponential(lengthscales=LENGTHSCALE), Z)

    def elbo(kernel_variance, noise_variance):
        model.kernel.variance.assign(kernel_variance)
        model.likelihood.variance.assign(noise_variance)
        return float(model.elbo())

    best = elbo(kf, nv)
    grid = [(a, c) for a in kf * np.exp(np.linspace(-0.5, 0.5, 9)) for c in nv * np.exp(np.linspace(-0.5, 0.5, 9))]
    values = [elbo(a, c) for a, c in grid]
    assert best >= max(values) - 1e-6 * abs(best)
    a, c = grid[int(np.argmax(values))]
    assert abs(math.log(a / kf)) <= 0.13 and abs(math.log(c / nv)) <= 0.13


def test_variances_are_post_processing():
    Z, released = _released(noise_variance=0.2)
    fitted = released.fitted()
    assert fitted.variances == "fit" and released.variances == "given"
    np.testing.assert_array_equal(fitted.statistics["b"], released.statistics["b"])
    other = released.with_variances(kernel_variance=6.0, noise_variance=0.4)  # the same ratio: the same mean
    Xt = np.linspace(0, 10, 7)[:, None]
    np.testing.assert_allclose(other.predict_f(Xt)[0], released.predict_f(Xt)[0], rtol=1e-10)
    assert (other.kernel_variance, other.noise_variance) == (6.0, 0.4)
    with pytest.raises(ValueError):
        released.with_variances(noise_variance=-1.0)
    _, fit_at_release = _released(variances="fit")
    assert (fit_at_release.kernel_variance, fit_at_release.noise_variance) == pytest.approx(
        (fitted.kernel_variance, fitted.noise_variance))


def test_without_noise_the_posterior_is_gpflows_sgpr():
    """From exact statistics (no noise, no floor) the mean and variance are GPflow's SGPR.predict_f."""
    X, Y = _data(200, seed=6)
    Z = wr.inducing_grid(BOX, 6)
    kernel = gpflow.kernels.SquaredExponential(variance=3.0, lengthscales=LENGTHSCALE)
    features = wr.FeatureMap(kernel, Z, jitter=1e-6 / 3.0)  # GPflow's absolute jitter at unit scale
    P = reference_features(X, Z, LENGTHSCALE, jitter=1e-6 / 3.0)
    yc = np.clip(Y, *BOUNDS)
    post = weight_posterior(tf.constant(P.T @ P), tf.constant(P.T @ yc[:, 0]), kernel_variance=3.0,
                            noise_variance=0.2, b_std=0.0, offdiag_std=0.0)
    Xt = np.linspace(-2, 12, 15)[:, None]
    mean, model, noise = predictive_terms(post, features(Xt), features.unit_variance(Xt))
    gp_mean, gp_var = gpflow.models.SGPR((X, yc), kernel, Z, noise_variance=0.2).predict_f(Xt)
    np.testing.assert_allclose(mean.numpy(), gp_mean.numpy()[:, 0], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(model.numpy(), gp_var.numpy()[:, 0], rtol=1e-6, atol=1e-9)
    assert np.all(noise.numpy() == 0.0)


def _shifted(S, b):
    """Broadcasts silently: a rank-1 ``S`` or a [M, 1] ``b`` would run without a shape check."""
    return 2.0 * S + tf.reduce_sum(b)


def test_compiled_post_processing_refuses_tensors_its_signature_does_not_declare_on_every_call():
    """OnReuse calls the concrete function directly (which checks dtypes only): tensors of another rank are refused
    as the tf.function of the same signature refuses them, eagerly on the first call and compiled after."""
    specs = [tf.TensorSpec([None, None], tf.float64), tf.TensorSpec([None], tf.float64)]
    reuse = OnReuse(_shifted, specs)
    S, b = np.arange(6.0).reshape(2, 3), np.array([0.5, -2.0])
    bad = [(tf.constant([1.0, 2.0], tf.float64), tf.constant(b)),  # rank 1 for [None, None]
           (tf.constant(S), tf.constant(b[:, None])),  # rank 2 for [None]
           (tf.constant(S[None]), tf.constant(b))]
    reference = tf.function(_shifted, input_signature=specs, autograph=False)
    for call in range(3):  # eager, then compiled (traced), then compiled (the trace reused)
        for args in bad:
            with pytest.raises(TypeError):
                reference(*args)  # the independent expectation: tf.function refuses it
            with pytest.raises(ValueError, match="_shifted: tensor"):
                reuse(*args)
        with pytest.raises(TypeError, match="dtype float32"):
            reuse(tf.constant(S, tf.float32), tf.constant(b))
        np.testing.assert_array_equal(reuse(tf.constant(S), tf.constant(b)).numpy(), 2.0 * S + b.sum())
