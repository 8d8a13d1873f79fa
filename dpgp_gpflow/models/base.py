"""What every DP regression model shares: public output bounds, the leak guard, ``release``.

A DP model subclasses a GPflow model and this mixin. It clips its private outputs to the public
bounds at construction, centres them with a *public* prior mean (never a statistic of ``y``), and
exposes ``cloaking_matrix(Xnew)``; ``release`` is the only method that publishes anything derived
from the outputs.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import gpflow
import numpy as np
import tensorflow as tf

from ..accounting import PrivacyAccountant
from ..cloaking import DEFAULT_TOL
from ..exceptions import PrivacyLeakError
from ..release import PrivateRelease, cloaking_release
from ..validation import as_inputs, as_outputs, clip_outputs, validate_bounds, validate_data_sensitivity

__all__ = [
    "LeakGuardMixin",
    "PrivateRegressionMixin",
    "prepare_private_data",
    "public_constant_mean",
    "reference_coordinates",
]


def prepare_private_data(data: Any, y_bounds: Any, data_sensitivity: Optional[float]):
    """Validate ``(X, Y)``, clip ``Y`` to the public bounds; returns ``(X, Y, bounds, d)``."""
    try:
        X, Y = data
    except (TypeError, ValueError) as exc:
        raise TypeError("data must be a pair (X, Y)") from exc
    X = as_inputs("X", X)
    Y = as_outputs("Y", Y, X.shape[0])
    bounds = validate_bounds(y_bounds)
    d = validate_data_sensitivity(data_sensitivity, bounds)
    return X, clip_outputs(Y, bounds), bounds, d


def public_constant_mean(bounds: Tuple[float, float]) -> gpflow.functions.Constant:
    """The default public prior mean: the midpoint of the bounds, not trainable."""
    mean = gpflow.functions.Constant(np.array([0.5 * (bounds[0] + bounds[1])]))
    gpflow.set_trainable(mean, False)
    return mean


def reference_coordinates(readout: tf.Tensor) -> tf.Tensor:
    """Upper-triangular ``R`` (m x m) with ``R^T R = A^T A + ridge I`` for a public readout ``A`` (k x m).

    Sparse models release ``v = R u`` instead of their m inducing values or weights ``u``: then the
    "mse" objective measures the squared error of the predictions ``A u`` at the reference inputs.
    The ridge (``1e-8 tr(A^T A) / m``) keeps ``R`` invertible when the reference inputs barely see
    some directions; mapping back by ``R^{-1}`` is public post-processing.
    """
    m = int(readout.shape[1])
    G = tf.linalg.matmul(readout, readout, transpose_a=True)  # [m, m]
    ridge = 1e-8 * tf.linalg.trace(G) / m
    return tf.transpose(tf.linalg.cholesky(G + ridge * tf.eye(m, dtype=G.dtype)))


class LeakGuardMixin:
    """Refuses releases after the training objective (which reads the private outputs) ran.

    Models call ``_mark_private_objective()`` from their objective; ``release`` calls
    ``_check_hyperparameters_public``.
    """

    _private_objective_evaluated: bool = False

    def _mark_private_objective(self) -> None:
        # Runs in Python, so it fires when a tf.function traces the objective as well as eagerly.
        object.__setattr__(self, "_private_objective_evaluated", True)

    @property
    def private_objective_evaluated(self) -> bool:
        """True once the training objective (which reads the private outputs) was evaluated."""
        return bool(self._private_objective_evaluated)

    def _check_hyperparameters_public(self, hyperparameters_public: bool) -> None:
        if self._private_objective_evaluated and not hyperparameters_public:
            raise PrivacyLeakError(
                "the model's training objective (the marginal likelihood of the private outputs) was "
                "evaluated, e.g. by training the hyperparameters with gpflow.optimizers.Scipy; "
                "hyperparameters fitted on private outputs leak them, and this release would not be DP. "
                "Set the hyperparameters a priori (or select them privately with "
                "dpgp_gpflow.selection), or pass hyperparameters_public=True if they were in fact "
                "chosen without the private outputs."
            )


class PrivateRegressionMixin(LeakGuardMixin):
    """Public bounds, the privacy-leak guard and ``release`` for a GPflow regression model.

    Subclasses set ``y_bounds``, ``data_sensitivity`` and implement ``cloaking_matrix`` (or
    ``_release_matrix`` returning ``C`` or its factors ``(A, B)``).
    """

    y_bounds: Tuple[float, float]
    data_sensitivity: float

    # -- what the release needs ----------------------------------------------------------------
    def _centred_outputs(self) -> tf.Tensor:
        X, Y = self.data
        return Y - self.mean_function(X)  # [N, 1]: centred with the public prior mean

    def _output_bound(self) -> float:
        """Public bound on ``|y_i - m(x_i)|``."""
        X, _ = self.data
        m = self.mean_function(X).numpy()
        lo, hi = self.y_bounds
        return float(np.max(np.maximum(hi - m, m - lo)))

    def _cloaking_release(self, C, offset, variance, **kwargs) -> PrivateRelease:
        """``offset + C (y - m)`` with cloaking noise: this model's clipped, centred private outputs,
        their public bounds and data sensitivity; ``kwargs`` as for :func:`cloaking_release`."""
        return cloaking_release(C, self._centred_outputs(), offset, variance, data_sensitivity=self.data_sensitivity,
                                output_bound=self._output_bound(), **kwargs)

    def _release_matrix(self, Xnew: tf.Tensor):
        return self.cloaking_matrix(Xnew)

    def _release_terms(self, Xnew: tf.Tensor):
        """The release matrix (or its factors) and the public posterior variance at ``Xnew``."""
        _, variance = self.predict_f(Xnew)  # public: the posterior variance does not depend on y
        return self._release_matrix(Xnew), variance

    def _validated_inputs(self, Xnew: Any) -> tf.Tensor:
        X, _ = self.data
        return tf.constant(as_inputs("Xnew", Xnew, int(X.shape[1])))

    def release(
        self,
        Xnew: Any,
        *,
        epsilon: float,
        delta: float,
        objective: str = "mse",
        calibration: str = "analytic",
        seed: Optional[int] = None,
        accountant: Optional[PrivacyAccountant] = None,
        mechanism: str = "cloaking",
        hyperparameters_public: bool = False,
        rtol: Optional[float] = None,
        tol: float = DEFAULT_TOL,
    ) -> PrivateRelease:
        """Release the predictive mean at ``Xnew`` with an (epsilon, delta)-DP guarantee.

        Privacy assumptions: inputs ``X`` and ``Xnew``, the kernel, the likelihood variance and the
        prior mean are public (chosen without the outputs); each private output lies in
        ``y_bounds``, and neighbouring datasets differ in one output. ``mechanism="cloaking"``
        (default) optimises the noise covariance for ``objective`` ("mse": least expected squared
        error; "entropy": the papers' log det); ``mechanism="standard"`` is Hall et al.'s GP-prior
        noise. The budget is checked before and charged after (``accountant`` or the innermost
        ``with PrivacyAccountant(...)``).
        """
        Xnew = self._validated_inputs(Xnew)
        self._check_hyperparameters_public(hyperparameters_public)
        mean_new = self.mean_function(Xnew)
        if mechanism == "cloaking":
            C, variance = self._release_terms(Xnew)
            return self._cloaking_release(
                C,
                mean_new,
                variance,
                epsilon=epsilon,
                delta=delta,
                objective=objective,
                calibration=calibration,
                seed=seed,
                accountant=accountant,
                rtol=rtol,
                tol=tol,
            )
        if mechanism == "standard":
            return self._standard_release(
                Xnew, epsilon=epsilon, delta=delta, calibration=calibration, seed=seed, accountant=accountant,
            )
        raise ValueError(f"mechanism must be 'cloaking' or 'standard', got {mechanism!r}")

    def _standard_release(self, Xnew, **kwargs) -> PrivateRelease:
        raise NotImplementedError(f"{type(self).__name__} has no standard (Hall et al.) mechanism")
