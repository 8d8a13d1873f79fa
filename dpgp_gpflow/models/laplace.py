"""Laplace-approximation GP binary classification (logistic link), non-DP foundation.

Labels are ``y in {-1, +1}`` with ``p(y | f) = sigmoid(y f)``. The maths follows GPML
(Rasmussen & Williams 2006) Algorithms 3.1 (mode finding, stable form with
``B = I + W^1/2 K W^1/2``) and 3.2 (predictions), with ``W = diag(pi (1 - pi))``,
``pi = sigmoid(f)`` and ``grad log p(y | f) = (y + 1) / 2 - pi``. No explicit inverses: every
solve goes through a Cholesky factor.

The gradient is affine in ``y`` (``grad = y / 2 + (1/2 - pi)``) and ``W`` does not depend on
``y``, so a Newton step from a *public* (or already released) ``f`` is ``C y + b`` with ``C`` and
``b`` functions of public quantities only: :func:`first_newton_step_cloaking` and
:func:`newton_step_cloaking` give that matrix, which the DP classifiers cloak (docs/mechanisms.md#laplace-classification).
:func:`predict_from_latent` and the SoR helpers predict from a (noisy) latent vector without
reading labels; the released classifiers' frozen readouts (:class:`~dpgp_gpflow.readouts.LaplaceReadout`,
:class:`~dpgp_gpflow.readouts.SoRReadout`) and the factors they share with this module
(:func:`~dpgp_gpflow.readouts.b_cholesky`, :func:`~dpgp_gpflow.readouts.weight_precision_cholesky`) are in
:mod:`dpgp_gpflow.readouts`.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import InputData, MeanAndVariance, RegressionData
from gpflow.models import GPModel, InternalDataTrainingLossMixin
from gpflow.models.util import data_input_to_tensor

from ..readouts import b_cholesky, weight_precision_cholesky
from ..released import probit_approximation
from .gpr import gpr_cloaking_matrix

__all__ = ["LaplaceGPC"]

_MAX_HALVINGS = 30
"""Step halvings tried per Newton iteration before the iteration is declared stalled."""


class LaplaceMode(NamedTuple):
    """Result of :func:`laplace_mode` (a plain 4-tuple: ``f, a, lml, n_iter = laplace_mode(...)``)."""

    f: tf.Tensor
    """Posterior mode ``f_hat``, [N, 1]."""
    a: tf.Tensor
    """``K^{-1} f_hat`` (equal to ``grad log p(y | f_hat)`` at convergence), [N, 1]."""
    log_marginal_likelihood: tf.Tensor
    """Laplace approximation ``-a^T f / 2 + sum log p(y | f) - sum log diag L``, scalar."""
    n_iter: tf.Tensor
    """Newton iterations performed (int32 scalar)."""


# ---------------------------------------------------------------------------------------------
# Logistic likelihood pieces (y in {-1, +1}).


def _log_lik(y: tf.Tensor, f: tf.Tensor) -> tf.Tensor:
    """``sum log sigmoid(y f)`` computed as ``-softplus(-y f)`` (no overflow)."""
    return -tf.reduce_sum(tf.math.softplus(-y * f))


def _w_diag(f: tf.Tensor) -> tf.Tensor:
    """``W = -d^2 log p / df^2 = pi (1 - pi)`` as a column [N, 1] (independent of y)."""
    return tf.sigmoid(f) * tf.sigmoid(-f)


def _newton_a(K: tf.Tensor, y: tf.Tensor, f: tf.Tensor) -> tf.Tensor:
    """One Newton step of GPML Alg. 3.1 from ``f``: returns ``a`` with ``f_new = K a``."""
    w = _w_diag(f)  # [N, 1]
    sqrt_w = tf.sqrt(w)
    L = b_cholesky(K, sqrt_w)  # [N, N]
    b = w * f + (y + 1.0) / 2.0 - tf.sigmoid(f)  # [N, 1]
    c = tf.linalg.triangular_solve(L, sqrt_w * tf.matmul(K, b), lower=True)  # [N, 1]
    return b - sqrt_w * tf.linalg.triangular_solve(L, c, lower=True, adjoint=True)  # [N, 1]


def _posterior_covariance(K: tf.Tensor, w: tf.Tensor) -> tf.Tensor:
    """``(K^{-1} + W)^{-1} = K - K W^1/2 B^{-1} W^1/2 K`` (stable form, no inverse of K)."""
    sqrt_w = tf.sqrt(w)  # [N, 1]
    L = b_cholesky(K, sqrt_w)  # [N, N]
    V = tf.linalg.triangular_solve(L, sqrt_w * K, lower=True)  # [N, N]
    return K - tf.matmul(V, V, transpose_a=True)  # [N, N]


# ---------------------------------------------------------------------------------------------
# Mode finding (GPML Alg. 3.1) and predictions (Alg. 3.2).


@tf.function(reduce_retracing=True, autograph=False)  # explicit tf.while_loop: nothing to convert
def _newton_loop(
    K: tf.Tensor, y: tf.Tensor, max_iter: tf.Tensor, tol: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Newton iterations from ``f = 0`` with step halving; returns ``(f, a, n_iter)``."""
    f0 = tf.zeros_like(y)
    psi0 = _log_lik(y, f0)  # the prior term -a^T f / 2 is 0 at a = f = 0

    def psi_of(a: tf.Tensor, f: tf.Tensor) -> tf.Tensor:
        return -0.5 * tf.reduce_sum(a * f) + _log_lik(y, f)

    def cond(i, a, f, psi, done):  # type: ignore[no-untyped-def]
        return tf.logical_and(i < max_iter, tf.logical_not(done))

    def body(i, a, f, psi, done):  # type: ignore[no-untyped-def]
        a_new = _newton_a(K, y, f)
        f_new = tf.matmul(K, a_new)
        psi_new = psi_of(a_new, f_new)

        # Step halving (GPML sec. 3.4.1 / 3.7): move halfway back towards the current point
        # (f = K a is linear, so a and f halve together) while the objective decreased.
        def h_cond(j, a_h, f_h, psi_h):  # type: ignore[no-untyped-def]
            return tf.logical_and(j < _MAX_HALVINGS, tf.logical_not(psi_h >= psi))

        def h_body(j, a_h, f_h, psi_h):  # type: ignore[no-untyped-def]
            a_h = 0.5 * (a + a_h)
            f_h = 0.5 * (f + f_h)
            return j + 1, a_h, f_h, psi_of(a_h, f_h)

        _, a_new, f_new, psi_new = tf.while_loop(
            h_cond, h_body, (tf.constant(0), a_new, f_new, psi_new)
        )
        accept = psi_new >= psi  # False also for NaN
        done = tf.logical_or(tf.logical_not(accept), psi_new - psi < tol)
        a = tf.where(accept, a_new, a)
        f = tf.where(accept, f_new, f)
        psi = tf.where(accept, psi_new, psi)
        return i + 1, a, f, psi, done

    n_iter, a, f, _, _ = tf.while_loop(
        cond, body, (tf.constant(0), tf.zeros_like(y), f0, psi0, tf.constant(False))
    )
    return f, a, n_iter


def _check_loop_args(max_iter: int, tol: float) -> None:
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    if not (isinstance(tol, (int, float, np.floating)) and math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")


@check_shapes(
    "K: [N, N]",
    "y: [N, 1]",
    "return.f: [N, 1]",
    "return.a: [N, 1]",
    "return.log_marginal_likelihood: []",
    "return.n_iter: []",
)
def laplace_mode(K: tf.Tensor, y: tf.Tensor, *, max_iter: int = 100, tol: float = 1e-10) -> LaplaceMode:
    """Posterior mode and Laplace log marginal likelihood, GPML Algorithm 3.1 (logistic link).

    Newton iterations from ``f = 0`` run in a compiled ``tf.while_loop``; an iteration whose
    objective ``Psi(f) = -a^T f / 2 + sum log p(y | f)`` does not increase is halved (up to 30
    times). Iteration stops when ``Psi`` increases by less than ``tol`` or after ``max_iter``
    iterations. The log marginal likelihood ``-a^T f / 2 + sum log p(y | f) - sum log diag L`` uses
    ``L = chol(B)`` with ``W`` at the returned mode.

    Gradients (for hyperparameter training) do not run through the loop: the returned ``f`` and
    ``a`` take their values from the loop and their gradients from one further Newton step from
    the (stopped) mode; the Newton map has zero Jacobian at its fixed point, so this is the exact
    implicit derivative ``d f_hat / d theta`` (GPML eq. 5.23-5.24) once the loop has converged.

    Reads the private labels ``y``: for the non-DP model, or for auditing.
    """
    _check_loop_args(max_iter, tol)
    K = tf.convert_to_tensor(K, dtype=gpflow.config.default_float())
    y = tf.convert_to_tensor(y, dtype=K.dtype)
    f_loop, a_loop, n_iter = _newton_loop(
        tf.stop_gradient(K),
        y,
        tf.constant(max_iter, dtype=tf.int32),
        tf.constant(tol, dtype=K.dtype),
    )
    f_loop = tf.stop_gradient(f_loop)
    a_loop = tf.stop_gradient(a_loop)
    a_step = _newton_a(K, y, f_loop)  # differentiable in K
    f_step = tf.matmul(K, a_step)
    a = a_loop + (a_step - tf.stop_gradient(a_step))
    f = f_loop + (f_step - tf.stop_gradient(f_step))
    L = b_cholesky(K, tf.sqrt(_w_diag(f)))
    lml = (
        -0.5 * tf.reduce_sum(a * f)
        + _log_lik(y, f)
        - tf.reduce_sum(tf.math.log(tf.linalg.diag_part(L)))
    )
    return LaplaceMode(f, a, lml, n_iter)


def _laplace_predict_terms(
    K: tf.Tensor, Kxs: tf.Tensor, y: tf.Tensor, f_hat: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """Alg. 3.2: latent mean ``Kxs^T grad`` [M, 1] and ``v = L^{-1} W^1/2 Kxs`` [N, M]."""
    grad = (y + 1.0) / 2.0 - tf.sigmoid(f_hat)  # [N, 1]
    mean = tf.matmul(Kxs, grad, transpose_a=True)  # [M, 1]
    sqrt_w = tf.sqrt(_w_diag(f_hat))  # [N, 1]
    L = b_cholesky(K, sqrt_w)  # [N, N]
    v = tf.linalg.triangular_solve(L, sqrt_w * Kxs, lower=True)  # [N, M]
    return mean, v


@check_shapes(
    "K: [N, N]",
    "Kxs: [N, M]",
    "kss_diag: [M]",
    "y: [N, 1]",
    "f_hat: [N, 1]",
    "return[0]: [M, 1]",
    "return[1]: [M, 1]",
)
def laplace_predict(
    K: tf.Tensor, Kxs: tf.Tensor, kss_diag: tf.Tensor, y: tf.Tensor, f_hat: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """Latent predictive mean and variance at new inputs, GPML Algorithm 3.2.

    ``Kxs = k(X, X*)``, ``kss_diag = diag k(X*, X*)``. Mean ``k*^T grad log p(y | f_hat)``,
    variance ``k** - v^T v`` with ``v = L^{-1} W^1/2 k*``. The mean reads the private labels
    through the gradient: the DP models use :func:`predict_from_latent` instead.
    """
    mean, v = _laplace_predict_terms(K, Kxs, y, f_hat)
    var = kss_diag[:, None] - tf.reduce_sum(tf.square(v), axis=0)[:, None]  # [M, 1]
    return mean, var


# ---------------------------------------------------------------------------------------------
# Cloaking matrices of Newton steps (docs/mechanisms.md#laplace-classification).


@check_shapes("K: [N, N]", "return: [N, N]")
def first_newton_step_cloaking(K: tf.Tensor) -> tf.Tensor:
    """Cloaking matrix ``C`` of the first Newton step from ``f0 = 0``: ``f1 = C y``.

    At ``f0 = 0``: ``pi = 1/2``, ``W = I/4`` and ``grad log p(y | 0) = y / 2``, so
    ``f1 = (K^{-1} + W)^{-1} (W f0 + y / 2) = C y`` with
    ``C = 1/2 (K^{-1} + W)^{-1} = 1/2 (K - K W^1/2 B^{-1} W^1/2 K)``, ``B = I + K / 4``.
    Depends only on the public inputs (through ``K``), never on the labels; symmetric.
    """
    K = tf.convert_to_tensor(K, dtype=gpflow.config.default_float())
    w = tf.fill([tf.shape(K)[0], 1], tf.constant(0.25, dtype=K.dtype))
    return 0.5 * _posterior_covariance(K, w)


@check_shapes("X: [N, D]", "Xnew: [K, D]", "return: [K, N]")
def first_step_predictive_cloaking(kernel: gpflow.kernels.Kernel, X: tf.Tensor, Xnew: tf.Tensor) -> tf.Tensor:
    """The latent mean at ``Xnew`` after the first Newton step from ``f0 = 0``, as a linear map of the labels.

    ``E[f* | f1] = k_*^T K^{-1} f1`` with ``f1 = 1/2 (K^{-1} + I/4)^{-1} y`` (see
    :func:`first_newton_step_cloaking`) equals ``2 K_*f (K_ff + 4 I)^{-1} y``: the GP-regression
    cloaking matrix with noise variance 4, doubled. Public: inputs and kernel only.
    """
    return 2.0 * gpr_cloaking_matrix(kernel, X, tf.constant(4.0, dtype=X.dtype), Xnew)


@check_shapes("K: [N, N]", "f: [N, 1]", "return[0]: [N, N]", "return[1]: [N, 1]")
def newton_step_cloaking(K: tf.Tensor, f: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Affine form ``f_new = C y + b`` of a Newton step from ``f``.

    ``f_new = (K^{-1} + W)^{-1} (W f + grad log p(y | f))`` and, for the logistic link,
    ``grad = (y + 1)/2 - pi(f) = y / 2 + (1/2 - pi(f))``; hence ``C = 1/2 (K^{-1} + W)^{-1}`` and
    ``b = (K^{-1} + W)^{-1} (W f + 1/2 - pi(f))`` with ``W = diag(pi (1 - pi))`` at ``f``.
    Privacy: ``C`` and ``b`` depend on ``K`` and ``f`` only, so they are public provided ``f``
    is public (``f = 0``, where ``b = 0``) or itself a DP release (each step is a new release).
    """
    K = tf.convert_to_tensor(K, dtype=gpflow.config.default_float())
    f = tf.convert_to_tensor(f, dtype=K.dtype)
    w = _w_diag(f)  # [N, 1]
    sigma = _posterior_covariance(K, w)  # [N, N]
    b = tf.matmul(sigma, w * f + 0.5 - tf.sigmoid(f))  # [N, 1]
    return 0.5 * sigma, b


@check_shapes(
    "K: [N, N]",
    "Kxs: [N, M]",
    "kss_diag: [M]",
    "f_train: [N, 1]",
    "W_diag: [N]",
    "return[0]: [M, 1]",
    "return[1]: [M, 1]",
)
def predict_from_latent(
    K: tf.Tensor,
    Kxs: tf.Tensor,
    kss_diag: tf.Tensor,
    f_train: tf.Tensor,
    W_diag: tf.Tensor,
    *,
    jitter: Optional[float] = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Latent prediction from a training latent vector, without reading labels (docs/mechanisms.md#laplace-classification).

    Mean ``k*^T K^{-1} f_train`` by a Cholesky solve of ``K + jitter I`` (``jitter`` defaults to
    ``gpflow.config.default_jitter()``; pass ``0.0`` for none); variance
    ``k** - k*^T (K + W^{-1})^{-1} k*`` via ``(K + W^{-1})^{-1} = W^1/2 B^{-1} W^1/2``,
    ``B = I + W^1/2 K W^1/2`` (no jitter needed). With ``f_train = f_hat`` and ``W`` at ``f_hat``
    this is Alg. 3.2 (``K^{-1} f_hat = grad log p(y | f_hat)``). Privacy: public given a public or
    released ``f_train`` and a public ``W`` (``W = I/4`` from ``f0 = 0``). The DP noise variance
    propagated to ``f*`` is not included here: the DP model adds it.
    """
    K = tf.convert_to_tensor(K, dtype=gpflow.config.default_float())
    dtype = K.dtype
    Kxs = tf.convert_to_tensor(Kxs, dtype=dtype)
    jitter = gpflow.config.default_jitter() if jitter is None else float(jitter)
    n = tf.shape(K)[0]
    Lk = tf.linalg.cholesky(K + jitter * tf.eye(n, dtype=dtype))  # [N, N]
    alpha = tf.linalg.cholesky_solve(Lk, tf.convert_to_tensor(f_train, dtype=dtype))  # [N, 1]
    mean = tf.matmul(Kxs, alpha, transpose_a=True)  # [M, 1]
    sqrt_w = tf.sqrt(tf.convert_to_tensor(W_diag, dtype=dtype))[:, None]  # [N, 1]
    L = b_cholesky(K, sqrt_w)  # [N, N]
    v = tf.linalg.triangular_solve(L, sqrt_w * Kxs, lower=True)  # [N, M]
    var = tf.convert_to_tensor(kss_diag, dtype=dtype)[:, None] - tf.reduce_sum(tf.square(v), 0)[:, None]
    return mean, var


# ---------------------------------------------------------------------------------------------
# Subset of regressors (SoR) in weight space: f = Phi w, w ~ N(0, I) (docs/mechanisms.md#laplace-classification).


@check_shapes("Kmm: [M, M]", "Knm: [N, M]", "return: [N, M]")
def sor_features(Kmm: tf.Tensor, Knm: tf.Tensor) -> tf.Tensor:
    """SoR features ``Phi = K_NM L_MM^{-T}``, ``L_MM = chol(K_MM + default_jitter I)``.

    Then ``Phi Phi^T = K_NM K_MM^{-1} K_MN`` (the Nystrom approximation of ``K``). Use the same
    function with ``Knm = K_*M`` for the features ``Phi*`` of new inputs. Public inputs only.
    """
    Kmm = tf.convert_to_tensor(Kmm, dtype=gpflow.config.default_float())
    m = tf.shape(Kmm)[0]
    Lmm = tf.linalg.cholesky(Kmm + gpflow.config.default_jitter() * tf.eye(m, dtype=Kmm.dtype))
    Knm = tf.convert_to_tensor(Knm, dtype=Kmm.dtype)
    return tf.transpose(tf.linalg.triangular_solve(Lmm, tf.transpose(Knm), lower=True))  # [N, M]


@check_shapes("Phi: [N, M]", "return: [M, N]")
def sor_first_step_cloaking(Phi: tf.Tensor) -> tf.Tensor:
    """Weight-space cloaking matrix ``C_w = 1/2 (I + Phi^T Phi / 4)^{-1} Phi^T``: ``w1 = C_w y``.

    The first Newton step from ``w0 = 0`` (``W = I/4``, ``grad = y / 2``) of the SoR posterior
    ``p(w | y)``, ``w ~ N(0, I)``, ``f = Phi w``. An m x n matrix of public inputs only: release
    ``w1`` once and predict anywhere with :func:`sor_predict_from_weights`.
    """
    Phi = tf.convert_to_tensor(Phi, dtype=gpflow.config.default_float())
    W_diag = tf.fill([tf.shape(Phi)[0]], tf.constant(0.25, dtype=Phi.dtype))
    La = weight_precision_cholesky(Phi, W_diag)  # [M, M]
    return 0.5 * tf.linalg.cholesky_solve(La, tf.transpose(Phi))  # [M, N]


@check_shapes(
    "Phi: [N, M]",
    "Phi_new: [N_new, M]",
    "w: [M, 1]",
    "W_diag: [N]",
    "return[0]: [N_new, 1]",
    "return[1]: [N_new, 1]",
)
def sor_predict_from_weights(
    Phi: tf.Tensor, Phi_new: tf.Tensor, w: tf.Tensor, W_diag: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """SoR Laplace latent prediction from weights ``w``: mean ``Phi* w``, variance
    ``diag(Phi* Sigma_w Phi*^T)`` with ``Sigma_w = (I + Phi^T W Phi)^{-1}``.

    ``Phi_new = sor_features(Kmm, K_*M)``. With ``W = I/4`` (the first step from ``w0 = 0``) the
    variance is public. As with any SoR model the variance is the Nystrom one, which shrinks
    to 0 away from the inducing inputs (no ``k** - Q**`` term); the DP model adds the propagated
    noise variance ``Phi* Cov(noise_w) Phi*^T`` itself.
    """
    dtype = gpflow.config.default_float()
    Phi = tf.convert_to_tensor(Phi, dtype=dtype)
    Phi_new = tf.convert_to_tensor(Phi_new, dtype=dtype)
    mean = tf.matmul(Phi_new, tf.convert_to_tensor(w, dtype=dtype))  # [N_new, 1]
    La = weight_precision_cholesky(Phi, tf.convert_to_tensor(W_diag, dtype=dtype))  # [M, M]
    v = tf.linalg.triangular_solve(La, tf.transpose(Phi_new), lower=True)  # [M, N_new]
    var = tf.reduce_sum(tf.square(v), axis=0)[:, None]  # [N_new, 1]
    return mean, var


def validate_labels(Y: object) -> np.ndarray:
    """Return ``Y`` as a float array [N, 1]; ``ValueError`` unless every label is -1 or +1 (the
    error carries no statistic of the private labels)."""
    arr = np.asarray(Y)
    if arr.ndim != 2 or arr.shape[1] != 1:
        raise ValueError(f"Y must have shape [N, 1], got {arr.shape}")
    try:
        arr = arr.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"Y must be numeric with values in {{-1, +1}}, got dtype {arr.dtype}") from exc
    if not np.isin(arr, (-1.0, 1.0)).all():
        # No count, no values and no data-dependent hint: each would be a statistic of the private labels.
        raise ValueError("labels must be -1 or +1 (labels in {0, 1}: pass Y = 2 * Y - 1)")
    return arr


# ---------------------------------------------------------------------------------------------
# The model.


class LaplaceGPC(GPModel, InternalDataTrainingLossMixin):
    """GP binary classifier, Laplace approximation, logistic link, labels in {-1, +1} (non-DP).

    ``LaplaceGPC((X, Y), kernel)``. The training objective is the Laplace log marginal
    likelihood (GPML Alg. 3.1); ``predict_f`` is Alg. 3.2 and ``predict_y`` returns the
    probability of class +1 via :func:`probit_approximation` and its Bernoulli variance
    ``p (1 - p)``. The mode is recomputed (Newton from ``f = 0``) on every call.

    Prior mean zero only: a non-``Zero`` mean function raises ``NotImplementedError``.
    ``self.likelihood`` is ``Bernoulli(invlink=sigmoid)`` for GPflow compatibility; the maths
    here does not use it.
    """

    def __init__(
        self,
        data: RegressionData,
        kernel: gpflow.kernels.Kernel,
        mean_function: Optional[gpflow.mean_functions.MeanFunction] = None,
        *,
        max_iter: int = 100,
        tol: float = 1e-10,
    ) -> None:
        if mean_function is not None and not isinstance(mean_function, gpflow.mean_functions.Zero):
            raise NotImplementedError(
                f"LaplaceGPC supports a zero prior mean only, got {type(mean_function).__name__}"
            )
        _check_loop_args(max_iter, tol)
        X, Y = data
        Y = validate_labels(Y)
        if np.shape(X)[0] != Y.shape[0]:
            raise ValueError(
                f"X and Y must have the same number of rows, got {np.shape(X)[0]} and {Y.shape[0]}"
            )
        likelihood = gpflow.likelihoods.Bernoulli(invlink=tf.sigmoid)
        super().__init__(kernel, likelihood, mean_function, num_latent_gps=1)
        self.data = data_input_to_tensor((X, Y))
        self.max_iter = max_iter
        self.tol = tol

    # Plain TF ops and explicit loops only: skipping AutoGraph conversion of this call tree
    # (check_shapes wrappers included) cuts the tracing time of the compiled training loss.
    @tf.autograph.experimental.do_not_convert
    def mode(self) -> LaplaceMode:
        """:func:`laplace_mode` on the training data (reads the labels)."""
        X, Y = self.data
        return laplace_mode(self.kernel(X), Y, max_iter=self.max_iter, tol=self.tol)

    def maximum_log_likelihood_objective(self) -> tf.Tensor:
        """Laplace approximation of ``log p(y | X, theta)``."""
        return self.mode().log_marginal_likelihood

    @inherit_check_shapes
    @tf.autograph.experimental.do_not_convert
    def predict_f(
        self, Xnew: InputData, full_cov: bool = False, full_output_cov: bool = False
    ) -> MeanAndVariance:
        X, Y = self.data
        K = self.kernel(X)  # [N, N]
        f_hat = laplace_mode(K, Y, max_iter=self.max_iter, tol=self.tol).f
        Kxs = self.kernel(X, Xnew)  # [N, M]
        mean, v = _laplace_predict_terms(K, Kxs, Y, f_hat)
        if full_cov:
            var = self.kernel(Xnew) - tf.matmul(v, v, transpose_a=True)  # [M, M]
            return mean, var[None, :, :]  # [1, M, M]
        kss = self.kernel(Xnew, full_cov=False)  # [M]
        return mean, kss[:, None] - tf.reduce_sum(tf.square(v), axis=0)[:, None]

    @inherit_check_shapes
    def predict_y(
        self, Xnew: InputData, full_cov: bool = False, full_output_cov: bool = False
    ) -> MeanAndVariance:
        """Probability of class +1 (probit approximation) and its variance ``p (1 - p)``."""
        if full_cov or full_output_cov:
            raise NotImplementedError(
                "LaplaceGPC.predict_y supports full_cov=False, full_output_cov=False only"
            )
        mean, var = self.predict_f(Xnew)
        p = probit_approximation(mean, var)
        return p, p * (1.0 - p)

    @inherit_check_shapes
    def predict_log_density(
        self, data: RegressionData, full_cov: bool = False, full_output_cov: bool = False
    ) -> tf.Tensor:
        """``log p(y* | x*)`` for labels in {-1, +1}, from :meth:`predict_y`."""
        if full_cov or full_output_cov:
            raise NotImplementedError("LaplaceGPC.predict_log_density supports full_cov=False only")
        X, Y = data
        p, _ = self.predict_y(X)
        Y = tf.convert_to_tensor(Y, dtype=p.dtype)
        return tf.math.log(tf.where(Y > 0, p, 1.0 - p))[:, 0]
