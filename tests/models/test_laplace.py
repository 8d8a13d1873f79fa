"""LaplaceGPC and the Laplace building blocks against an independent NumPy GPML Alg. 3.1/3.2."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from scipy import integrate, special
from scipy.linalg import cho_solve, solve_triangular

from dpgp_gpflow.models.laplace import (
    LaplaceGPC,
    first_newton_step_cloaking,
    laplace_mode,
    laplace_predict,
    newton_step_cloaking,
    predict_from_latent,
    probit_approximation,
    sor_features,
    sor_first_step_cloaking,
    sor_predict_from_weights,
)

RTOL = 1e-6

# ---------------------------------------------------------------------------------------------
# Independent NumPy reference (GPML Algorithms 3.1 and 3.2, logistic likelihood, y in {-1, +1}).


def eq_kernel(A: np.ndarray, B: np.ndarray, variance: float, lengthscale: float) -> np.ndarray:
    d2 = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    return variance * np.exp(-0.5 * d2 / lengthscale**2)


def ref_newton_step(K: np.ndarray, y: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One step of Alg. 3.1 from f (1-D arrays); returns (f_new, a)."""
    n = len(y)
    pi = special.expit(f)
    W = pi * (1.0 - pi)
    sW = np.sqrt(W)
    L = np.linalg.cholesky(np.eye(n) + sW[:, None] * K * sW[None, :])
    b = W * f + (y + 1.0) / 2.0 - pi
    a = b - sW * cho_solve((L, True), sW * (K @ b))
    return K @ a, a


def ref_log_lik(y: np.ndarray, f: np.ndarray) -> float:
    return float(-np.logaddexp(0.0, -y * f).sum())


def ref_mode(K: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Alg. 3.1 to convergence (plain Newton); log q(y|X) with W at the returned mode."""
    f = np.zeros(len(y))
    psi_old = -np.inf
    for _ in range(200):
        f, a = ref_newton_step(K, y, f)
        psi = -0.5 * a @ f + ref_log_lik(y, f)
        if abs(psi - psi_old) < 1e-13:
            break
        psi_old = psi
    else:  # pragma: no cover - the reference must converge on the test problems
        raise RuntimeError("reference Newton did not converge")
    W = special.expit(f) * special.expit(-f)
    sW = np.sqrt(W)
    L = np.linalg.cholesky(np.eye(len(y)) + sW[:, None] * K * sW[None, :])
    lml = -0.5 * a @ f + ref_log_lik(y, f) - np.log(np.diag(L)).sum()
    return f, a, float(lml)


def ref_predict(K, y, f_hat, Ks, kss) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Alg. 3.2: latent mean, variance and the probit-approximated probability of +1."""
    pi = special.expit(f_hat)
    sW = np.sqrt(pi * (1.0 - pi))
    L = np.linalg.cholesky(np.eye(len(y)) + sW[:, None] * K * sW[None, :])
    mean = Ks.T @ ((y + 1.0) / 2.0 - pi)
    v = solve_triangular(L, sW[:, None] * Ks, lower=True)
    var = kss - (v**2).sum(0)
    prob = special.expit(mean / np.sqrt(1.0 + np.pi * var / 8.0))
    return mean, var, prob


# ---------------------------------------------------------------------------------------------
# Data.

VARIANCE, LENGTHSCALE = 3.0, 1.3


def make_problem(dim: int, seed: int):
    """Random inputs, noisy labels in {-1, +1}, test inputs; all float64 NumPy."""
    rng = np.random.default_rng(seed)
    if dim == 1:
        X = rng.uniform(0.0, 10.0, size=(25, 1))
        latent = np.sin(X[:, 0])
        Xs = np.linspace(-1.0, 11.0, 17)[:, None]
    else:
        X = rng.uniform(0.0, 5.0, size=(30, 2))
        latent = X[:, 0] - X[:, 1]
        Xs = rng.uniform(-1.0, 6.0, size=(13, 2))
    y = np.where(latent + 0.5 * rng.standard_normal(len(X)) > 0.0, 1.0, -1.0)
    return X, y, Xs


def kernel() -> gpflow.kernels.SquaredExponential:
    return gpflow.kernels.SquaredExponential(variance=VARIANCE, lengthscales=LENGTHSCALE)


PROBLEMS = [pytest.param(1, 0, id="1d"), pytest.param(2, 1, id="2d")]


# ---------------------------------------------------------------------------------------------
# Mode, marginal likelihood and predictions.


@pytest.mark.parametrize("dim, seed", PROBLEMS)
def test_mode_and_log_marginal_likelihood_match_reference(dim: int, seed: int) -> None:
    X, y, _ = make_problem(dim, seed)
    K = eq_kernel(X, X, VARIANCE, LENGTHSCALE)
    f_ref, a_ref, lml_ref = ref_mode(K, y)

    f, a, lml, n_iter = laplace_mode(tf.constant(K), tf.constant(y[:, None]))
    np.testing.assert_allclose(f.numpy()[:, 0], f_ref, rtol=RTOL, atol=1e-9)
    np.testing.assert_allclose(a.numpy()[:, 0], a_ref, rtol=RTOL, atol=1e-9)
    np.testing.assert_allclose(lml.numpy(), lml_ref, rtol=RTOL)
    assert 2 <= int(n_iter) < 100
    # Stationarity of the mode: a = K^{-1} f equals grad log p(y | f).
    np.testing.assert_allclose(a.numpy()[:, 0], (y + 1) / 2 - special.expit(f.numpy()[:, 0]), atol=1e-8)

    model = LaplaceGPC((X, y[:, None]), kernel())
    np.testing.assert_allclose(model.maximum_log_likelihood_objective().numpy(), lml_ref, rtol=RTOL)
    np.testing.assert_allclose(model.training_loss().numpy(), -lml_ref, rtol=RTOL)


@pytest.mark.parametrize("dim, seed", PROBLEMS)
def test_predictions_match_reference(dim: int, seed: int) -> None:
    X, y, Xs = make_problem(dim, seed)
    K = eq_kernel(X, X, VARIANCE, LENGTHSCALE)
    Ks = eq_kernel(X, Xs, VARIANCE, LENGTHSCALE)
    kss = np.full(len(Xs), VARIANCE)
    f_ref, _, _ = ref_mode(K, y)
    mean_ref, var_ref, prob_ref = ref_predict(K, y, f_ref, Ks, kss)

    model = LaplaceGPC((X, y[:, None]), kernel())
    mean, var = model.predict_f(Xs)
    np.testing.assert_allclose(mean.numpy()[:, 0], mean_ref, rtol=RTOL, atol=1e-10)
    np.testing.assert_allclose(var.numpy()[:, 0], var_ref, rtol=RTOL)
    prob, prob_var = model.predict_y(Xs)
    np.testing.assert_allclose(prob.numpy()[:, 0], prob_ref, rtol=RTOL)
    np.testing.assert_allclose(prob_var.numpy()[:, 0], prob_ref * (1 - prob_ref), rtol=RTOL)

    _, cov = model.predict_f(Xs, full_cov=True)
    assert cov.shape == (1, len(Xs), len(Xs))
    np.testing.assert_allclose(np.diag(cov.numpy()[0]), var_ref, rtol=RTOL)

    # The pure function gives the same as the model.
    mean_fn, var_fn = laplace_predict(K, Ks, kss, y[:, None], f_ref[:, None])
    np.testing.assert_allclose(mean_fn.numpy()[:, 0], mean_ref, rtol=RTOL, atol=1e-10)
    np.testing.assert_allclose(var_fn.numpy()[:, 0], var_ref, rtol=RTOL)

    # predict_log_density uses the same probabilities.
    ys = np.where(np.arange(len(Xs)) % 2 == 0, 1.0, -1.0)[:, None]
    logdens = model.predict_log_density((Xs, ys)).numpy()
    np.testing.assert_allclose(logdens, np.log(np.where(ys[:, 0] > 0, prob_ref, 1 - prob_ref)), rtol=RTOL)


def test_probit_approximation_close_to_logistic_gaussian_integral() -> None:
    means = np.array([-3.0, -1.0, 0.0, 0.4, 2.0, 5.0])
    variances = np.array([0.01, 0.5, 2.0, 4.0, 9.0, 1.0])
    approx = probit_approximation(tf.constant(means[:, None]), tf.constant(variances[:, None]))
    approx = approx.numpy()[:, 0]
    for m, v, p in zip(means, variances, approx):
        exact, _ = integrate.quad(
            lambda t: special.expit(t) * np.exp(-0.5 * (t - m) ** 2 / v) / np.sqrt(2 * np.pi * v),
            m - 12 * np.sqrt(v),
            m + 12 * np.sqrt(v),
        )
        assert abs(p - exact) < 0.02, (m, v, p, exact)


def test_step_halving_rescues_a_diverging_newton_iteration() -> None:
    """A huge kernel variance on near-separable data: plain Newton (the reference step) first
    increases Psi, then decreases it and diverges; with step halving the loop must still reach
    a stationary point whose Psi is at least the best plain-Newton value."""
    X = np.array(
        [1.589, 0.882, 1.424, 1.559, 0.577, 0.887, 2.573, 0.519, 1.023, 0.076, 1.422, 0.986]
    )[:, None]
    y = np.array([1.0, -1.0, 1.0, -1.0, -1.0, 1.0, 1.0, 1.0, -1.0, 1.0, 1.0, 1.0])
    K = eq_kernel(X, X, 1e7, 0.24) + 10.0 * np.eye(len(y))
    f = np.zeros(len(y))
    history = [ref_log_lik(y, f)]
    for _ in range(10):
        f, a = ref_newton_step(K, y, f)
        history.append(-0.5 * a @ f + ref_log_lik(y, f))
    first_drop = int(np.argmax(np.diff(history) < 0))
    assert history[first_drop + 1] < history[first_drop] - 1.0  # the scenario: plain Newton fails
    best_plain = max(history[: first_drop + 1])

    f, a, lml, n_iter = laplace_mode(tf.constant(K), tf.constant(y[:, None]))
    f, a = f.numpy()[:, 0], a.numpy()[:, 0]
    assert int(n_iter) < 100
    np.testing.assert_allclose(a, (y + 1) / 2 - special.expit(f), atol=1e-8)
    assert -0.5 * a @ f + ref_log_lik(y, f) >= best_plain
    assert np.isfinite(lml.numpy())


# ---------------------------------------------------------------------------------------------
# Cloaking matrices of Newton steps.


@pytest.mark.parametrize("dim, seed", PROBLEMS)
def test_first_newton_step_is_C_y(dim: int, seed: int) -> None:
    X, y, _ = make_problem(dim, seed)
    K = eq_kernel(X, X, VARIANCE, LENGTHSCALE)
    C = first_newton_step_cloaking(tf.constant(K)).numpy()

    # Against the Newton loop itself, stopped after one iteration.
    f1, _, _, n_iter = laplace_mode(tf.constant(K), tf.constant(y[:, None]), max_iter=1)
    assert int(n_iter) == 1
    np.testing.assert_allclose(f1.numpy()[:, 0], C @ y, rtol=1e-10, atol=1e-12)
    # Against the reference step and the closed form 1/2 (K^{-1} + I/4)^{-1} = 1/2 K (I + K/4)^{-1}.
    np.testing.assert_allclose(C @ y, ref_newton_step(K, y, np.zeros(len(y)))[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(C, 0.5 * np.linalg.solve(np.eye(len(y)) + K / 4, K), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(C, C.T, rtol=0, atol=1e-12)


def test_newton_step_cloaking_is_affine_in_y() -> None:
    X, y, _ = make_problem(1, 3)
    K = eq_kernel(X, X, VARIANCE, LENGTHSCALE)
    rng = np.random.default_rng(4)
    f = 2.0 * rng.standard_normal(len(y))  # a public ("released") latent vector
    C, b = (t.numpy() for t in newton_step_cloaking(tf.constant(K), tf.constant(f[:, None])))
    y_other = -y
    y_other[::3] *= -1.0
    for labels in (y, y_other):
        step_ref = ref_newton_step(K, labels, f)[0]
        np.testing.assert_allclose(C @ labels + b[:, 0], step_ref, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(C, C.T, rtol=0, atol=1e-12)

    C0, b0 = newton_step_cloaking(tf.constant(K), tf.zeros((len(y), 1), dtype=tf.float64))
    C_first = first_newton_step_cloaking(tf.constant(K)).numpy()
    np.testing.assert_allclose(C0.numpy(), C_first, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(b0.numpy(), 0.0)


@pytest.mark.parametrize("dim, seed", PROBLEMS)
def test_predict_from_latent(dim: int, seed: int) -> None:
    X, y, Xs = make_problem(dim, seed)
    K = eq_kernel(X, X, VARIANCE, LENGTHSCALE)
    Ks = eq_kernel(X, Xs, VARIANCE, LENGTHSCALE)
    kss = np.full(len(Xs), VARIANCE)

    # At the mode with W(f_hat) and no jitter, k*^T K^{-1} f_hat is Alg. 3.2's gradient form.
    # That holds for any positive definite K; the 1-D K is numerically singular (close inputs),
    # so this part uses K + 1e-6 I (an EQ + white-noise kernel) on both sides.
    K_pd = K + 1e-6 * np.eye(len(y))
    f_ref, _, _ = ref_mode(K_pd, y)
    mean_ref, var_ref, _ = ref_predict(K_pd, y, f_ref, Ks, kss)
    W_hat = special.expit(f_ref) * special.expit(-f_ref)
    mean, var = predict_from_latent(K_pd, Ks, kss, f_ref[:, None], W_hat, jitter=0.0)
    np.testing.assert_allclose(mean.numpy()[:, 0], mean_ref, rtol=RTOL, atol=1e-9)
    np.testing.assert_allclose(var.numpy()[:, 0], var_ref, rtol=RTOL)

    # First-step form used by the DP model: f1 = C y and W = I/4 (no labels in the variance).
    f1 = first_newton_step_cloaking(tf.constant(K)).numpy() @ y
    mean1, var1 = predict_from_latent(K, Ks, kss, f1[:, None], np.full(len(y), 0.25))
    jit = gpflow.config.default_jitter()
    mean1_ref = Ks.T @ np.linalg.solve(K + jit * np.eye(len(y)), f1)
    np.testing.assert_allclose(mean1.numpy()[:, 0], mean1_ref, rtol=1e-6, atol=1e-9)
    var1_ref = kss - np.einsum("nm,nm->m", Ks, np.linalg.solve(K + 4.0 * np.eye(len(y)), Ks))
    np.testing.assert_allclose(var1.numpy()[:, 0], var1_ref, rtol=1e-9)


# ---------------------------------------------------------------------------------------------
# Subset of regressors.


def test_sor_features_give_nystrom_approximation() -> None:
    X, _, Xs = make_problem(2, 5)
    Z = X[::3]
    Kmm = eq_kernel(Z, Z, VARIANCE, LENGTHSCALE)
    Knm = eq_kernel(X, Z, VARIANCE, LENGTHSCALE)
    Phi = sor_features(Kmm, Knm).numpy()
    jit = gpflow.config.default_jitter()
    Q = Knm @ np.linalg.solve(Kmm + jit * np.eye(len(Z)), Knm.T)
    np.testing.assert_allclose(Phi @ Phi.T, Q, rtol=1e-7, atol=1e-9)

    C_w = sor_first_step_cloaking(tf.constant(Phi)).numpy()
    assert C_w.shape == (len(Z), len(X))
    M = np.eye(len(Z)) + Phi.T @ Phi / 4.0
    np.testing.assert_allclose(M @ C_w, 0.5 * Phi.T, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dim, seed", PROBLEMS)
def test_sor_with_Z_equal_X_matches_full_first_step(dim: int, seed: int) -> None:
    """With Z = X, Phi Phi^T = K (K + jI)^{-1} K =: K' differs from K by j K (K + jI)^{-1}, whose
    eigenvalues are j lambda / (lambda + j) <= j (j = default_jitter). Both N x N first-step
    matrices are 2 (I - (I + K/4)^{-1}) (push-through identity for the SoR one, with K'), and
    (I + K'/4)^{-1} - (I + K/4)^{-1} = (I + K'/4)^{-1} (K - K')/4 (I + K/4)^{-1} has spectral norm
    <= j/4, so ||Phi C_w - C||_2 <= j/2 = 5e-7. We allow 1e-8 more for rounding."""
    X, y, Xs = make_problem(dim, seed)
    K = eq_kernel(X, X, VARIANCE, LENGTHSCALE)
    C = first_newton_step_cloaking(tf.constant(K)).numpy()
    Phi = sor_features(K, K).numpy()
    C_w = sor_first_step_cloaking(tf.constant(Phi)).numpy()
    jit = gpflow.config.default_jitter()
    gap = np.linalg.norm(Phi @ C_w - C, ord=2)
    assert gap <= jit / 2 + 1e-8, gap

    # Predictions from the released weights, W = I/4: at the training inputs the SoR variance
    # equals the full one up to the same O(j) perturbation; at new inputs the SoR mean equals
    # k*^T (K + jI)^{-1} f1 up to a relative O(j) term (the jI shifts K + K^2/4 by j K/4).
    w1 = C_w @ y
    W = np.full(len(y), 0.25)
    mean_tr, var_tr = sor_predict_from_weights(Phi, Phi, w1[:, None], W)
    _, var_full = predict_from_latent(K, K, np.diag(K), (C @ y)[:, None], W)
    np.testing.assert_allclose(mean_tr.numpy()[:, 0], C @ y, rtol=0, atol=jit * np.sqrt(len(y)))
    np.testing.assert_allclose(var_tr.numpy()[:, 0], var_full.numpy()[:, 0], rtol=0, atol=jit)

    Ks = eq_kernel(X, Xs, VARIANCE, LENGTHSCALE)
    Phi_s = sor_features(K, Ks.T).numpy()
    mean_s, _ = sor_predict_from_weights(Phi, Phi_s, w1[:, None], W)
    mean_full, _ = predict_from_latent(K, Ks, np.full(len(Xs), VARIANCE), (C @ y)[:, None], W)
    np.testing.assert_allclose(mean_s.numpy()[:, 0], mean_full.numpy()[:, 0], rtol=0, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Validation, gradients and training.


@pytest.mark.parametrize(
    "labels, message",
    [
        (np.array([[0.0], [1.0], [1.0]]), r"2 \* Y - 1"),
        (np.array([[1.0], [-1.0], [2.0]]), r"must be -1 or \+1"),
        (np.array([[1.0], [-1.0], [0.5]]), r"must be -1 or \+1"),
        (np.array([1.0, -1.0, 1.0]), r"shape \[N, 1\]"),
    ],
)
def test_labels_outside_pm1_raise(labels: np.ndarray, message: str) -> None:
    X = np.linspace(0, 1, 3)[:, None]
    with pytest.raises(ValueError, match=message) as info:
        LaplaceGPC((X, labels), kernel())
    # the error carries no statistic of the private labels: the same text for any bad labels
    assert "2.0" not in str(info.value) and "0.5" not in str(info.value) and "value(s)" not in str(info.value)


def test_nonzero_mean_function_and_bad_arguments_raise() -> None:
    X = np.linspace(0, 1, 3)[:, None]
    Y = np.array([[1.0], [-1.0], [1.0]])
    with pytest.raises(NotImplementedError, match="zero prior mean"):
        LaplaceGPC((X, Y), kernel(), mean_function=gpflow.mean_functions.Constant(1.0))
    LaplaceGPC((X, Y), kernel(), mean_function=gpflow.mean_functions.Zero())  # accepted
    with pytest.raises(ValueError, match="max_iter"):
        LaplaceGPC((X, Y), kernel(), max_iter=0)
    with pytest.raises(ValueError, match="same number of rows"):
        LaplaceGPC((X[:2], Y), kernel())


def test_gradient_of_log_marginal_likelihood_matches_finite_differences() -> None:
    """The implicit dependence of f_hat on the hyperparameters must be in the gradient."""
    X, y, _ = make_problem(1, 6)
    ls = tf.Variable(LENGTHSCALE, dtype=tf.float64)
    Xt = tf.constant(X)
    with tf.GradientTape() as tape:
        d2 = tf.reduce_sum((Xt[:, None, :] - Xt[None, :, :]) ** 2, -1)
        K = VARIANCE * tf.exp(-0.5 * d2 / ls**2)
        lml = laplace_mode(K, tf.constant(y[:, None])).log_marginal_likelihood
    grad = tape.gradient(lml, ls).numpy()
    h = 1e-5
    fd = (ref_mode(eq_kernel(X, X, VARIANCE, LENGTHSCALE + h), y)[2]
          - ref_mode(eq_kernel(X, X, VARIANCE, LENGTHSCALE - h), y)[2]) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-5)


def test_scipy_training_improves_objective() -> None:
    X, y, Xs = make_problem(1, 7)
    model = LaplaceGPC((X, y[:, None]), gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=0.2))
    before = model.training_loss().numpy()
    result = gpflow.optimizers.Scipy().minimize(
        model.training_loss, model.trainable_variables, options=dict(maxiter=50)
    )
    after = model.training_loss().numpy()
    assert np.isfinite(after)
    assert after < before - 1.0, (before, after, result.message)
    # The trained model still agrees with the reference at its new hyperparameters.
    variance = float(model.kernel.variance.numpy())
    lengthscale = float(model.kernel.lengthscales.numpy())
    np.testing.assert_allclose(-after, ref_mode(eq_kernel(X, X, variance, lengthscale), y)[2], rtol=RTOL)
