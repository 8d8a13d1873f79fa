"""DP Laplace GP binary classification by cloaking Newton steps (JMLR section 4; DESIGN 5.4).

Labels ``y in {-1, +1}`` are private; inputs, kernel hyperparameters and inducing inputs are public.
Neighbouring datasets differ in one label, so one label moves by at most ``d = 2``.

* :class:`DPLaplaceGPC` (full GP): a Newton step of the Laplace mode search from a *public* latent
  vector ``f`` is affine in the labels, ``f_new = C y + b`` with ``C = 1/2 (K^{-1} + W)^{-1}`` and
  ``b`` functions of ``K`` and ``f`` only (:func:`~dpgp_gpflow.models.laplace.newton_step_cloaking`).
  Step 1 starts at ``f0 = 0`` (``W = I/4``, ``b = 0``); step ``t + 1`` starts from the *released*
  ``f~_t``. Each step is one cloaking release of the n training latents (d = 2).
* :class:`DPSparseLaplaceGPC` (subset of regressors, weight space ``f = Phi w``): the first Newton
  step ``w1 = C_w y`` (m x n) is released once; predictions anywhere are post-processing.

Both return a :class:`PrivateClassifier`: predictions at any inputs from the released vector and
public quantities only (they never read the labels), latent variance plus the DP noise variance
propagated to the prediction (the papers left it out). Predictions cost no privacy budget.

Composition over Newton steps (``steps = T``): each step is released at ``(epsilon / T, delta / T)``,
so the T releases are ``(epsilon, delta)``-DP together by basic composition. The accountant is
checked for all T steps before the first one (a budget too small for all T steps draws nothing) and
charged once per step. Basic composition is loose for Gaussian mechanisms: each step is charged as a
Gaussian event with its ``mu``, so an accountant created with ``composition="gdp"`` or ``"pld"``
composes the steps exactly (``sqrt(T) mu``), and the pre-check uses that composition too.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence, Tuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import inherit_check_shapes
from gpflow.base import InputData, MeanAndVariance

from ..accounting import PrivacyAccountant, current_accountant
from ..calibration import CALIBRATIONS, gaussian_multiplier, validate_delta, validate_epsilon
from ..cloaking import DEFAULT_TOL, OBJECTIVES
from ..release import PrivateRelease, cloaking_release
from ..validation import as_inputs
from .laplace import (
    LaplaceGPC,
    LaplaceMode,
    first_newton_step_cloaking,
    laplace_mode,
    newton_step_cloaking,
    predict_from_latent,
    probit_approximation,
    sor_features,
    sor_first_step_cloaking,
    sor_predict_from_weights,
)
from .base import LeakGuardMixin, reference_coordinates
from .sgpr import kmeans_inducing_inputs

__all__ = [
    "DPLaplaceGPC",
    "DPSparseLaplaceGPC",
    "PrivateClassifier",
    "PrivateLaplaceClassifier",
    "PrivateSparseClassifier",
    "LABEL_SENSITIVITY",
]

#: How far one private label can move: from -1 to +1.
LABEL_SENSITIVITY = 2.0
#: Public bound on ``|y_i|`` (labels are centred at the public constant 0).
_LABEL_BOUND = 1.0


# ---------------------------------------------------------------------------------------------
# The released classifiers (post-processing only).


class PrivateClassifier:
    """A DP-released GP classifier: predictions at any inputs, at no further privacy cost.

    Holds the releases (``releases``: one :class:`~dpgp_gpflow.PrivateRelease` per released vector)
    and public model pieces only (a copy of the kernel taken at release time, public inputs, the
    released vector and its DP noise factor, the public ``W``). It never holds the labels.

    ``predict_f(Xnew)`` returns the latent mean and the latent variance *including* the DP noise
    variance propagated to ``f*`` (:meth:`dp_noise_variance`); ``predict_y(Xnew)`` the probability
    of class +1 by the probit approximation on that mean and variance, and ``p (1 - p)``.
    """

    def __init__(self, releases: Sequence[PrivateRelease], input_dim: int) -> None:
        self._releases = tuple(releases)
        self._input_dim = int(input_dim)

    # -- privacy bookkeeping -----------------------------------------------------------------
    @property
    def releases(self) -> Tuple[PrivateRelease, ...]:
        """Every release this classifier is built from, in order."""
        return self._releases

    @property
    def epsilon(self) -> float:
        """Total epsilon of the releases under basic composition."""
        return math.fsum(r.epsilon for r in self._releases)

    @property
    def delta(self) -> float:
        """Total delta of the releases under basic composition."""
        return math.fsum(r.delta for r in self._releases)

    @property
    def reproducible(self) -> bool:
        """True if any release drew its noise from an explicit seed (not private against its holder)."""
        return any(r.reproducible for r in self._releases)

    # -- predictions ---------------------------------------------------------------------------
    def _inputs(self, Xnew: Any) -> tf.Tensor:
        return tf.constant(as_inputs("Xnew", Xnew, self._input_dim))

    def _latent_terms(self, Xnew: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """``(mean, public latent variance, DP noise variance)``, each [M, 1]."""
        raise NotImplementedError

    def dp_noise_variance(self, Xnew: Any) -> tf.Tensor:
        """Variance [M, 1] of the DP noise propagated to the latent mean at ``Xnew`` (public)."""
        return self._latent_terms(self._inputs(Xnew))[2]

    def predict_f(self, Xnew: Any) -> MeanAndVariance:
        """Latent mean [M, 1] and variance [M, 1]: the public posterior variance plus the DP noise variance."""
        mean, var, noise_var = self._latent_terms(self._inputs(Xnew))
        return mean, var + noise_var

    def predict_y(self, Xnew: Any) -> MeanAndVariance:
        """Probability of class +1 [M, 1] (probit approximation) and its Bernoulli variance ``p (1 - p)``."""
        mean, var = self.predict_f(Xnew)
        p = probit_approximation(mean, var)
        return p, p * (1.0 - p)

    def predict_class(self, Xnew: Any) -> np.ndarray:
        """Predicted labels in {-1, +1} [M, 1]: the sign of the latent mean (p >= 1/2 gives +1)."""
        mean, _ = self.predict_f(Xnew)
        return np.where(mean.numpy() >= 0.0, 1.0, -1.0)


class PrivateLaplaceClassifier(PrivateClassifier):
    """Full-GP released classifier: ``E[f*] = k*^T K^{-1} f~``, ``V[f*] = k** - k*^T (K + W^{-1})^{-1} k*``.

    The DP noise on ``f~`` (covariance ``F F^T``) reaches ``E[f*]`` as ``k*^T K^{-1} F``; its row
    norms squared are added to the variance. ``K^{-1}`` is a Cholesky solve of ``K + jitter I`` with
    the jitter fixed at release time (the same solve for the mean and the noise).
    """

    def __init__(
        self,
        releases: Sequence[PrivateRelease],
        kernel: gpflow.kernels.Kernel,
        X: tf.Tensor,
        W_diag: tf.Tensor,
        jitter: float,
    ) -> None:
        super().__init__(releases, int(X.shape[1]))
        last = self._releases[-1]
        self._kernel = kernel
        self._X = X
        self._W = tf.reshape(tf.convert_to_tensor(W_diag, dtype=tf.float64), [-1])  # [N]
        self._jitter = float(jitter)
        self._latent = tf.constant(last.mean[:, None])  # [N, 1] released f~
        n = int(X.shape[0])
        Lk = tf.linalg.cholesky(kernel(X) + self._jitter * tf.eye(n, dtype=tf.float64))
        self._noise_weights = tf.linalg.cholesky_solve(Lk, tf.constant(last.noise_factor))  # [N, r]: K^{-1} F

    @property
    def latent(self) -> np.ndarray:
        """The released training latents ``f~`` (the last Newton step), [N]."""
        return self._latent.numpy()[:, 0]

    @property
    def W_diag(self) -> np.ndarray:
        """The public ``W`` used for the variance (at the last step's linearisation point), [N]."""
        return self._W.numpy()

    def _latent_terms(self, Xnew: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        K = self._kernel(self._X)
        Kxs = self._kernel(self._X, Xnew)  # [N, M]
        kss = self._kernel(Xnew, full_cov=False)  # [M]
        mean, var = predict_from_latent(K, Kxs, kss, self._latent, self._W, jitter=self._jitter)
        noise = tf.linalg.matmul(Kxs, self._noise_weights, transpose_a=True)  # [M, r]
        return mean, var, tf.reduce_sum(tf.square(noise), axis=1, keepdims=True)


class PrivateSparseClassifier(PrivateClassifier):
    """SoR released classifier: ``E[f*] = Phi* w~``, ``V[f*] = Phi* (I + Phi^T W Phi)^{-1} Phi*^T``.

    ``Phi* = k(X*, Z) L_ZZ^{-T}``; the DP noise on ``w~`` (covariance ``F_w F_w^T``) adds the row norms
    squared of ``Phi* F_w``. The SoR variance shrinks to 0 far from the inducing inputs (a property
    of SoR, not of the privacy mechanism).
    """

    def __init__(
        self,
        releases: Sequence[PrivateRelease],
        kernel: gpflow.kernels.Kernel,
        Z: tf.Tensor,
        X: tf.Tensor,
        weights: tf.Tensor,
        weight_noise_factor: tf.Tensor,
    ) -> None:
        super().__init__(releases, int(Z.shape[1]))
        self._kernel = kernel
        self._Z = Z
        self._X = X
        self._weights = tf.reshape(tf.convert_to_tensor(weights, dtype=tf.float64), [-1, 1])  # [M, 1]
        self._weight_noise = tf.convert_to_tensor(weight_noise_factor, dtype=tf.float64)  # [M, r]
        self._W = tf.fill([int(X.shape[0])], tf.constant(0.25, dtype=tf.float64))  # first step from w0 = 0

    @property
    def weights(self) -> np.ndarray:
        """The released SoR weights ``w~`` (in the ``Phi`` basis), [M]."""
        return self._weights.numpy()[:, 0]

    @property
    def weight_noise_factor(self) -> np.ndarray:
        """Factor ``F_w`` of the DP noise covariance of ``w~``, [M, r]."""
        return self._weight_noise.numpy()

    @property
    def inducing_inputs(self) -> np.ndarray:
        return self._Z.numpy()

    def _features(self, Xnew: tf.Tensor) -> tf.Tensor:
        return sor_features(self._kernel(self._Z), self._kernel(Xnew, self._Z))

    def _latent_terms(self, Xnew: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        Phi = self._features(self._X)  # [N, M]
        Phi_new = self._features(Xnew)  # [K, M]
        mean, var = sor_predict_from_weights(Phi, Phi_new, self._weights, self._W)
        noise = tf.linalg.matmul(Phi_new, self._weight_noise)  # [K, r]
        return mean, var, tf.reduce_sum(tf.square(noise), axis=1, keepdims=True)


# ---------------------------------------------------------------------------------------------
# Shared checks.


def _check_steps(steps: Any) -> int:
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    return int(steps)


def _prepare_budget(
    epsilon: Any, delta: Any, steps: int, objective: str, calibration: str, accountant: Optional[PrivacyAccountant]
) -> Tuple[float, float, Optional[PrivacyAccountant]]:
    """Validate everything and check the WHOLE budget before any noise is drawn.

    Returns the per-step ``(epsilon / steps, delta / steps)`` and the accountant to charge.
    """
    epsilon = validate_epsilon(epsilon)
    delta = validate_delta(delta)
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if calibration not in CALIBRATIONS:
        raise ValueError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
    eps_step, delta_step = epsilon / steps, delta / steps
    multiplier = gaussian_multiplier(eps_step, delta_step, calibration)  # raises now (e.g. classical, eps > 1)
    if accountant is None:
        accountant = current_accountant()
    if accountant is not None:
        if not isinstance(accountant, PrivacyAccountant):
            raise TypeError(f"accountant must be a PrivacyAccountant, got {type(accountant).__name__}")
        # All steps at once: basic composition sees (epsilon, delta); Gaussian-DP / PLD accountants see
        # the exact composition of the ``steps`` Gaussian releases, one Gaussian with mu = sqrt(T) / s.
        accountant.check(epsilon, delta, kind="gaussian", mu=math.sqrt(steps) / multiplier)
    return eps_step, delta_step, accountant


def _step_seed(seed: Optional[int], step: int) -> Optional[int]:
    """Seed of step ``step`` (0-based): ``seed`` itself for the first, fresh derived seeds after."""
    if seed is None or step == 0:
        return seed
    return int(np.random.SeedSequence([int(seed), int(step)]).generate_state(1, dtype=np.uint32)[0])


def _labels_vector(Y: tf.Tensor) -> tf.Tensor:
    return tf.reshape(Y, [-1])  # [N]: centred at the public constant 0, |y_i| <= 1


# ---------------------------------------------------------------------------------------------
# Full GP.


class DPLaplaceGPC(LeakGuardMixin, LaplaceGPC):
    """:class:`~dpgp_gpflow.models.LaplaceGPC` with DP releases of cloaked Newton steps.

    ``DPLaplaceGPC((X, Y), kernel)``: labels in {-1, +1} (labels in {0, 1} are rejected with a hint),
    zero prior mean. ``predict_f`` / ``predict_y`` are the non-private Laplace predictions (they read
    the labels): publish only what :meth:`release` returns.

    Privacy assumption: ``X`` and the kernel hyperparameters are public. Evaluating the training
    objective (the Laplace marginal likelihood) marks the model; :meth:`release` then refuses unless
    ``hyperparameters_public=True``.
    """

    def __init__(self, data: Any, kernel: gpflow.kernels.Kernel, *, max_iter: int = 100, tol: float = 1e-10) -> None:
        X, Y = _unpack(data)
        super().__init__((X, Y), kernel, max_iter=max_iter, tol=tol)

    def maximum_log_likelihood_objective(self) -> tf.Tensor:
        self._mark_private_objective()
        return super().maximum_log_likelihood_objective()

    def cloaking_matrix(self) -> tf.Tensor:
        """``C = 1/2 (K^{-1} + I/4)^{-1}`` (n x n) of the first Newton step ``f1 = C y``; public."""
        X, _ = self.data
        return first_newton_step_cloaking(self.kernel(X))

    def release(
        self,
        *,
        epsilon: float,
        delta: float,
        steps: int = 1,
        objective: str = "mse",
        calibration: str = "analytic",
        seed: Optional[int] = None,
        accountant: Optional[PrivacyAccountant] = None,
        hyperparameters_public: bool = False,
        rtol: Optional[float] = None,
        tol: float = DEFAULT_TOL,
    ) -> PrivateLaplaceClassifier:
        """Release ``steps`` cloaked Newton steps from ``f0 = 0``; (epsilon, delta)-DP in total.

        Step 1 releases ``f1 = C y`` with ``C = 1/2 (K^{-1} + I/4)^{-1}``; step ``t + 1`` releases
        ``f_{t+1} = C_t y + b_t`` linearised at the released ``f~_t`` (public), with ``b_t`` as the
        public offset. Each step is a cloaking release of the n training latents with d = 2 at
        ``(epsilon / steps, delta / steps)`` (basic composition); the whole budget is checked before
        the first step and each step is charged to ``accountant`` (or the innermost
        ``with PrivacyAccountant(...)``). An explicit ``seed`` makes every step reproducible (step
        ``t > 0`` uses a seed derived from ``(seed, t)``) and NOT private against its holder.

        Returns a :class:`PrivateLaplaceClassifier` predicting from the last released latents with
        ``W`` at the last step's linearisation point (``I/4`` for one step).
        """
        self._check_hyperparameters_public(hyperparameters_public)
        steps = _check_steps(steps)
        eps_step, delta_step, accountant = _prepare_budget(epsilon, delta, steps, objective, calibration, accountant)
        X, Y = self.data
        y = _labels_vector(Y)
        K = self.kernel(X)  # [N, N] public
        n = int(X.shape[0])
        jitter = gpflow.config.default_jitter()
        releases: List[PrivateRelease] = []
        f = tf.zeros([n, 1], dtype=tf.float64)
        W = tf.fill([n], tf.constant(0.25, dtype=tf.float64))
        for t in range(steps):
            if t == 0:
                C = first_newton_step_cloaking(K)
                b = tf.zeros([n, 1], dtype=tf.float64)
            else:
                W = tf.reshape(tf.sigmoid(f) * tf.sigmoid(-f), [-1])  # at the released f~_t: public
                C, b = newton_step_cloaking(K, f)
            rel = cloaking_release(
                C,
                y,
                tf.reshape(b, [-1]),
                2.0 * tf.linalg.diag_part(C),  # public Laplace variance diag((K^{-1} + W)^{-1})
                data_sensitivity=LABEL_SENSITIVITY,
                output_bound=_LABEL_BOUND,
                epsilon=eps_step,
                delta=delta_step,
                objective=objective,
                calibration=calibration,
                seed=_step_seed(seed, t),
                accountant=accountant,
                rtol=rtol,
                tol=tol,
            )
            releases.append(rel)
            f = tf.constant(rel.mean[:, None])  # the released latents: public from here on
        return PrivateLaplaceClassifier(releases, gpflow.utilities.deepcopy(self.kernel), X, W, jitter)


def _unpack(data: Any) -> Tuple[np.ndarray, Any]:
    try:
        X, Y = data
    except (TypeError, ValueError) as exc:
        raise TypeError("data must be a pair (X, Y)") from exc
    return as_inputs("X", X), Y


# ---------------------------------------------------------------------------------------------
# Sparse (SoR) GP.


def _inducing_inputs(inducing_variable: Any, X: np.ndarray) -> np.ndarray:
    if isinstance(inducing_variable, gpflow.inducing_variables.InducingPoints):
        Z = inducing_variable.Z.numpy()
    elif isinstance(inducing_variable, (int, np.integer)) and not isinstance(inducing_variable, bool):
        Z = kmeans_inducing_inputs(X, int(inducing_variable))
    else:
        Z = inducing_variable
    return as_inputs("inducing_variable", Z, X.shape[1])


class DPSparseLaplaceGPC(LeakGuardMixin, LaplaceGPC):
    """Subset-of-regressors Laplace GP classifier with a one-shot DP release of its m weights.

    ``DPSparseLaplaceGPC((X, Y), kernel, inducing_variable)``: ``inducing_variable`` is an
    ``InducingPoints``, an array [M, D] or an integer m (then
    :func:`~dpgp_gpflow.models.kmeans_inducing_inputs` on ``X``, seed 0). The inducing inputs must be
    public (a function of ``X`` only); they are made non-trainable.

    The model is SoR in weight space: ``f = Phi w``, ``w ~ N(0, I)``, ``Phi = K_NM L_MM^{-T}``.
    ``predict_f`` / ``predict_y`` are the non-private SoR Laplace predictions (Newton to the mode with
    the Nystrom prior ``Phi Phi^T``; they read the labels); the training objective is the SoR Laplace
    marginal likelihood and marks the model (leak guard).

    Privacy assumption: ``X``, ``Z`` and the kernel hyperparameters are public.
    """

    def __init__(
        self,
        data: Any,
        kernel: gpflow.kernels.Kernel,
        inducing_variable: Any,
        *,
        max_iter: int = 100,
        tol: float = 1e-10,
    ) -> None:
        X, Y = _unpack(data)
        Z = _inducing_inputs(inducing_variable, X)
        super().__init__((X, Y), kernel, max_iter=max_iter, tol=tol)
        self.inducing_variable = gpflow.inducing_variables.InducingPoints(Z)
        gpflow.set_trainable(self.inducing_variable, False)  # public; never fitted on the labels

    def maximum_log_likelihood_objective(self) -> tf.Tensor:
        self._mark_private_objective()
        return super().maximum_log_likelihood_objective()

    def features(self, Xnew: Any) -> tf.Tensor:
        """SoR features ``Phi = k(Xnew, Z) L_ZZ^{-T}`` [K, M] (public)."""
        Z = self.inducing_variable.Z
        Xnew = tf.convert_to_tensor(Xnew, dtype=Z.dtype)
        return sor_features(self.kernel(Z), self.kernel(Xnew, Z))

    @tf.autograph.experimental.do_not_convert
    def mode(self) -> LaplaceMode:
        """:func:`laplace_mode` with the SoR prior covariance ``Phi Phi^T`` (reads the labels)."""
        X, Y = self.data
        Phi = self.features(X)
        return laplace_mode(tf.matmul(Phi, Phi, transpose_b=True), Y, max_iter=self.max_iter, tol=self.tol)

    @inherit_check_shapes
    def predict_f(self, Xnew: InputData, full_cov: bool = False, full_output_cov: bool = False) -> MeanAndVariance:
        """Non-private SoR Laplace prediction: mean ``Phi* Phi^T a``, variance ``Phi* (I + Phi^T W Phi)^{-1} Phi*^T``."""
        if full_cov or full_output_cov:
            raise NotImplementedError("DPSparseLaplaceGPC.predict_f supports full_cov=False only")
        X, _ = self.data
        mode = self.mode()
        Phi = self.features(X)
        w_hat = tf.matmul(Phi, mode.a, transpose_a=True)  # [M, 1]: f_hat = Phi Phi^T a = Phi w_hat
        W = tf.reshape(tf.sigmoid(mode.f) * tf.sigmoid(-mode.f), [-1])
        return sor_predict_from_weights(Phi, self.features(Xnew), w_hat, W)

    def cloaking_matrix(self) -> tf.Tensor:
        """``C_w = 1/2 (I + Phi^T Phi / 4)^{-1} Phi^T`` (m x n): the first step ``w1 = C_w y``; public."""
        X, _ = self.data
        return sor_first_step_cloaking(self.features(X))

    def release(
        self,
        *,
        epsilon: float,
        delta: float,
        objective: str = "mse",
        calibration: str = "analytic",
        seed: Optional[int] = None,
        accountant: Optional[PrivacyAccountant] = None,
        hyperparameters_public: bool = False,
        reference_inputs: Any = None,
        rtol: Optional[float] = None,
        tol: float = DEFAULT_TOL,
        steps: int = 1,
    ) -> PrivateSparseClassifier:
        """Release the first Newton step of the m SoR weights once, (epsilon, delta)-DP (d = 2).

        ``reference_inputs=None`` releases the weights ``w1 = C_w y`` themselves (``objective="mse"``
        then minimises the expected squared error of the weights). With public ``reference_inputs``
        (e.g. the training inputs ``X``), the release is of ``R w1`` with ``R^T R = Phi_ref^T Phi_ref``
        (plus a tiny ridge: :func:`~dpgp_gpflow.models.base.reference_coordinates`), so ``"mse"``
        minimises the expected squared error of the latents at the reference inputs; the map back to
        ``w~`` is public post-processing. ``"entropy"`` is the same either way (it is
        invariant to invertible maps). Only one step is supported (``steps=1``).
        """
        self._check_hyperparameters_public(hyperparameters_public)
        if _check_steps(steps) != 1:
            raise NotImplementedError("DPSparseLaplaceGPC releases the first Newton step only (steps=1)")
        eps_step, delta_step, accountant = _prepare_budget(epsilon, delta, 1, objective, calibration, accountant)
        X, Y = self.data
        Phi = self.features(X)  # [N, M]
        m = int(Phi.shape[1])
        C_w = sor_first_step_cloaking(Phi)  # [M, N]
        La = tf.linalg.cholesky(tf.eye(m, dtype=tf.float64) + 0.25 * tf.matmul(Phi, Phi, transpose_a=True))
        Sigma_w = tf.linalg.cholesky_solve(La, tf.eye(m, dtype=tf.float64))  # public weight covariance
        if reference_inputs is None:
            R = None
            C, variance = C_w, tf.linalg.diag_part(Sigma_w)
        else:
            Xref = as_inputs("reference_inputs", reference_inputs, int(X.shape[1]))
            R = reference_coordinates(self.features(Xref))  # [M, M] upper triangular
            C = tf.matmul(R, C_w)
            variance = tf.reduce_sum(tf.matmul(R, Sigma_w) * R, axis=1)  # diag(R Sigma_w R^T)
        rel = cloaking_release(
            C,
            _labels_vector(Y),
            tf.zeros([m], dtype=tf.float64),
            variance,
            data_sensitivity=LABEL_SENSITIVITY,
            output_bound=_LABEL_BOUND,
            epsilon=eps_step,
            delta=delta_step,
            objective=objective,
            calibration=calibration,
            seed=seed,
            accountant=accountant,
            rtol=rtol,
            tol=tol,
        )
        weights = tf.constant(rel.mean[:, None])
        noise = tf.constant(rel.noise_factor)
        if R is not None:  # back to the weights: w~ = R^{-1} v~ (public post-processing)
            weights = tf.linalg.triangular_solve(R, weights, lower=False)
            noise = tf.linalg.triangular_solve(R, noise, lower=False)
        return PrivateSparseClassifier(
            [rel], gpflow.utilities.deepcopy(self.kernel), tf.constant(self.inducing_variable.Z.numpy()), X, weights,
            noise,
        )
