"""Gibbs kernel and the KDE lengthscale function against NumPy / scipy references."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from numpy.testing import assert_allclose
from scipy import stats

from dpgp_gpflow.kernels import Gibbs, kde_lengthscale_function


def gibbs_reference(X, X2, ell_fn, variance):
    """JMLR eq. 8 with explicit loops (NumPy); ell_fn maps one point [D] to lengthscales [D]."""
    K = np.empty((len(X), len(X2)))
    for i, x in enumerate(X):
        for j, y in enumerate(X2):
            li, lj = ell_fn(x), ell_fn(y)
            s = li**2 + lj**2
            K[i, j] = (
                variance * np.prod(np.sqrt(2 * li * lj / s)) * np.exp(-np.sum((x - y) ** 2 / s))
            )
    return K


def ell_np(x):
    """A smooth per-dimension lengthscale function for one point (NumPy)."""
    return np.array([0.3 + 0.5 * x[0] ** 2, 1.0 + 0.2 * np.sin(3 * x[1])])


def ell_tf(X):
    return tf.stack([0.3 + 0.5 * X[:, 0] ** 2, 1.0 + 0.2 * tf.sin(3 * X[:, 1])], axis=1)


def test_constant_lengthscale_equals_squared_exponential():
    rng = np.random.default_rng(0)
    X, X2 = rng.normal(size=(15, 3)), rng.normal(size=(7, 3))
    ls = np.array([0.5, 1.3, 2.0])
    se = gpflow.kernels.SquaredExponential(variance=1.7, lengthscales=ls)
    per_dim = Gibbs(lambda Z: tf.ones_like(Z) * ls, variance=1.7)
    assert_allclose(per_dim(X, X2).numpy(), se(X, X2).numpy(), rtol=1e-12)
    assert_allclose(per_dim(X).numpy(), se(X).numpy(), rtol=1e-12)
    assert_allclose(per_dim.K_diag(X).numpy(), se.K_diag(X).numpy(), rtol=1e-12)
    se_iso = gpflow.kernels.SquaredExponential(variance=0.4, lengthscales=0.8)
    shared = Gibbs(lambda Z: 0.8 * tf.ones_like(Z[:, :1]), variance=0.4)
    assert_allclose(shared(X, X2).numpy(), se_iso(X, X2).numpy(), rtol=1e-12)


def test_matches_numpy_reference_with_varying_lengthscales():
    rng = np.random.default_rng(1)
    X, X2 = rng.normal(size=(12, 2)), rng.normal(size=(9, 2))
    k = Gibbs(ell_tf, variance=2.5)
    assert_allclose(k(X, X2).numpy(), gibbs_reference(X, X2, ell_np, 2.5), rtol=1e-12)
    K = k(X).numpy()
    assert_allclose(K, gibbs_reference(X, X, ell_np, 2.5), rtol=1e-12)
    assert_allclose(k.K_diag(X).numpy(), np.diag(K), rtol=1e-12)
    # A [N, 1] lengthscale is shared by every dimension.
    shared = Gibbs(lambda Z: 0.4 + tf.abs(Z[:, :1]))
    ref = gibbs_reference(X, X2, lambda x: np.full(2, 0.4 + abs(x[0])), 1.0)
    assert_allclose(shared(X, X2).numpy(), ref, rtol=1e-12)


def test_symmetric_and_psd_with_kde_lengthscales():
    rng = np.random.default_rng(2)
    X_public = np.concatenate(
        [rng.normal(0.0, 0.5, size=(40, 1)), rng.uniform(3.0, 8.0, size=(5, 1))]
    )
    k = Gibbs(kde_lengthscale_function(X_public, n_target=5.0, m=4.0), variance=1.3)
    Xtest = np.linspace(-3.0, 10.0, 60)[:, None]
    K = k(np.concatenate([X_public, Xtest])).numpy()
    assert_allclose(K, K.T, rtol=0.0, atol=1e-15)
    eig = np.linalg.eigvalsh(K)
    assert eig.min() >= -1e-10 * eig.max()
    # The kernel really is non-stationary: equal distances, different covariances.
    pair = k(np.array([[0.0], [0.5], [6.0], [6.5]])).numpy()
    assert abs(pair[0, 1] - pair[2, 3]) > 1e-2


def test_kde_lengthscale_1d_matches_scipy_gaussian_kde():
    rng = np.random.default_rng(3)
    X_public = rng.gamma(2.0, 10.0, size=(60, 1))
    n_target, m = 8.0, 30.0
    r = kde_lengthscale_function(X_public, n_target=n_target, m=m)
    Xq = np.linspace(-10.0, 120.0, 50)[:, None]
    kde = stats.gaussian_kde(X_public[:, 0])  # Scott's rule, normalised density
    rho = len(X_public) * kde(Xq[:, 0])  # counts scale
    assert_allclose(r(Xq).numpy()[:, 0], 1.0 / (1.0 / m + rho / n_target), rtol=1e-10)
    # An explicit bandwidth h (scipy's factor is relative to the sample std).
    h = 3.0
    r_h = kde_lengthscale_function(X_public, n_target=n_target, m=m, bandwidth=h)
    kde_h = stats.gaussian_kde(X_public[:, 0], bw_method=h / X_public[:, 0].std(ddof=1))
    ref = 1.0 / (1.0 / m + len(X_public) * kde_h(Xq[:, 0]) / n_target)
    assert_allclose(r_h(Xq).numpy()[:, 0], ref, rtol=1e-10)
    assert np.all(r_h(Xq).numpy() <= m)
    assert r_h(np.array([[1e4]])).numpy()[0, 0] == pytest.approx(m, rel=1e-12)


def test_kde_lengthscale_2d_matches_scipy_mvn():
    rng = np.random.default_rng(4)
    X_public = rng.normal(size=(30, 2)) * np.array([1.0, 3.0])
    h = np.array([0.4, 1.1])
    r = kde_lengthscale_function(X_public, n_target=4.0, m=10.0, bandwidth=h)
    Xq = rng.normal(size=(20, 2)) * 2.0
    rho = sum(stats.multivariate_normal(mean=x, cov=np.diag(h**2)).pdf(Xq) for x in X_public)
    assert_allclose(r(Xq).numpy()[:, 0], 1.0 / (1.0 / 10.0 + rho / 4.0), rtol=1e-10)
    # Default Scott bandwidth: std_d * n^(-1/(D+4)), independent per dimension.
    h_scott = X_public.std(axis=0, ddof=1) * len(X_public) ** (-1.0 / 6.0)
    r_s = kde_lengthscale_function(X_public, n_target=4.0, m=10.0)
    rho_s = sum(
        stats.multivariate_normal(mean=x, cov=np.diag(h_scott**2)).pdf(Xq) for x in X_public
    )
    assert_allclose(r_s(Xq).numpy()[:, 0], 1.0 / (1.0 / 10.0 + rho_s / 4.0), rtol=1e-10)


def test_neighbourhood_minimum_1d_matches_grid_reference():
    rng = np.random.default_rng(5)
    X_public = np.concatenate([rng.normal(20.0, 5.0, size=(50,)), [60.0, 75.0]])[:, None]
    n_target, m, radius, G = 10.0, 40.0, 8.0, 41
    kde = stats.gaussian_kde(X_public[:, 0])
    Xq = np.linspace(0.0, 90.0, 37)
    ref_rho = np.array(
        [len(X_public) * kde(np.linspace(x - radius, x + radius, G)).min() for x in Xq]
    )
    ref = 1.0 / (1.0 / m + ref_rho / n_target)
    r_nb = kde_lengthscale_function(
        X_public, n_target=n_target, m=m, neighbourhood=radius, neighbourhood_grid=G
    )
    got = r_nb(Xq[:, None]).numpy()[:, 0]
    assert_allclose(got, ref, rtol=1e-10)
    plain = kde_lengthscale_function(X_public, n_target=n_target, m=m)(Xq[:, None]).numpy()[:, 0]
    assert np.all(got >= plain * (1 - 1e-12))
    assert np.any(got > 1.5 * plain)  # the edge of the dense region gets longer lengthscales


def test_neighbourhood_minimum_2d_ball_matches_reference():
    rng = np.random.default_rng(6)
    X_public = rng.normal(size=(25, 2))
    radius, G, h = 0.7, 9, np.array([0.5, 0.6])
    r_nb = kde_lengthscale_function(
        X_public, n_target=3.0, m=5.0, bandwidth=h, neighbourhood=radius, neighbourhood_grid=G
    )
    Xq = rng.normal(size=(6, 2))
    u = np.linspace(-radius, radius, G)
    offs = np.array([[a, b] for a in u for b in u if a * a + b * b <= radius**2 * (1 + 1e-12)])
    rho = np.empty(len(Xq))
    for i, x in enumerate(Xq):
        Z = x + offs
        dens = sum(stats.multivariate_normal(mean=p, cov=np.diag(h**2)).pdf(Z) for p in X_public)
        rho[i] = dens.min()
    assert_allclose(r_nb(Xq).numpy()[:, 0], 1.0 / (1.0 / 5.0 + rho / 3.0), rtol=1e-10)


def test_gibbs_in_gpr_gives_finite_posterior_and_gradients():
    rng = np.random.default_rng(7)
    X = np.sort(rng.uniform(0.0, 10.0, size=(30, 1)), axis=0)
    Y = np.sin(X) + 0.1 * rng.standard_normal(X.shape)
    k = Gibbs(kde_lengthscale_function(X, n_target=5.0, m=5.0), variance=1.0)
    model = gpflow.models.GPR((X, Y), kernel=k, noise_variance=0.01)
    with tf.GradientTape() as tape:
        loss = model.training_loss()
    grads = tape.gradient(loss, model.trainable_variables)  # kernel and noise variances
    assert len(grads) == 2 and all(np.isfinite(g.numpy()) for g in grads)
    assert np.isfinite(loss.numpy())
    compiled = tf.function(model.training_loss, autograph=False)
    assert compiled().numpy() == pytest.approx(loss.numpy(), rel=1e-12)
    mean, var = model.predict_f(np.linspace(-2.0, 12.0, 30)[:, None])
    assert np.all(np.isfinite(mean.numpy())) and np.all(var.numpy() > 0.0)
    assert np.max(np.abs(model.predict_f(X)[0].numpy() - np.sin(X))) < 0.3


def test_invalid_arguments_raise():
    X = np.linspace(0.0, 1.0, 10)[:, None]
    with pytest.raises(TypeError, match="callable"):
        Gibbs(1.0)
    with pytest.raises(ValueError, match="n_target"):
        kde_lengthscale_function(X, n_target=0.0, m=1.0)
    with pytest.raises(TypeError, match="m must be a real number"):
        kde_lengthscale_function(X, n_target=1.0, m="1")
    with pytest.raises(ValueError, match="bandwidth"):
        kde_lengthscale_function(X, n_target=1.0, m=1.0, bandwidth=[0.1, 0.2])
    with pytest.raises(ValueError, match="neighbourhood"):
        kde_lengthscale_function(X, n_target=1.0, m=1.0, neighbourhood=-1.0)
    with pytest.raises(ValueError, match="neighbourhood_grid"):
        kde_lengthscale_function(
            np.zeros((3, 6)), n_target=1.0, m=1.0, bandwidth=1.0, neighbourhood=1.0
        )
    with pytest.raises(ValueError, match="finite"):
        kde_lengthscale_function(np.array([[0.0], [np.nan]]), n_target=1.0, m=1.0)
    with pytest.raises(ValueError, match="constant column"):
        kde_lengthscale_function(np.ones((5, 1)), n_target=1.0, m=1.0)
    r = kde_lengthscale_function(X, n_target=1.0, m=1.0)
    with pytest.raises(ValueError, match="columns"):
        r(np.zeros((3, 2)))
    bad = Gibbs(lambda Z: tf.ones((tf.shape(Z)[0], 3), dtype=Z.dtype))
    with pytest.raises(ValueError, match=r"\[N, D\] or \[N, 1\]"):
        bad(np.zeros((4, 2)))
