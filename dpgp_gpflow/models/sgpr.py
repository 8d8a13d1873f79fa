"""Sparse (FITC) GP regression with DP releases: :class:`DPGPRFITC` and :class:`PrivateFunction`.

The FITC predictive mean is ``m(x) + A(x) B (y - m(X))`` with ``A(x) = k(x, Z) L_uu^{-T}`` (k x m) and
``B = (I + V diag(1/nu) V^T)^{-1} V diag(1/nu)`` (m x n), ``V = L_uu^{-1} K_uf``,
``nu = diag(K_ff - Q_ff) + sigma^2`` (DESIGN 5.3). The outputs reach every prediction through the
m values ``B (y - m(X))``, so one private release of those values makes predictions at *any*
inputs private by post-processing: "release once, query anywhere".
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.covariances import Kuf, Kuu

from ..accounting import PrivacyAccountant
from ..cloaking import DEFAULT_TOL
from ..release import PrivateRelease
from ..validation import as_inputs
from .base import PrivateRegressionMixin, prepare_private_data, public_constant_mean, reference_coordinates

__all__ = [
    "DPGPRFITC",
    "FITCTerms",
    "PrivateFunction",
    "PrivatePrediction",
    "fitc_terms",
    "kmeans_inducing_inputs",
]


def kmeans_inducing_inputs(X: Any, num_inducing: int, *, seed: int = 0) -> np.ndarray:
    """Inducing inputs by k-means (scikit-learn, seeded) on the public inputs only.

    Privacy assumption: ``X`` is public; the outputs are never used (using them would leak).
    """
    from sklearn.cluster import KMeans

    X = as_inputs("X", X)
    if not (isinstance(num_inducing, (int, np.integer)) and 1 <= num_inducing <= X.shape[0]):
        raise ValueError(f"num_inducing must be an integer in [1, {X.shape[0]}], got {num_inducing!r}")
    km = KMeans(n_clusters=int(num_inducing), random_state=seed, n_init=10).fit(X)
    return np.asarray(km.cluster_centers_, dtype=np.float64)


class FITCTerms(NamedTuple):
    """Public FITC matrices (they depend on inputs and hyperparameters only)."""

    Luu: tf.Tensor  #: [M, M] Cholesky of K_uu (with jitter)
    LB: tf.Tensor  #: [M, M] Cholesky of I + V diag(1/nu) V^T
    B: tf.Tensor  #: [M, N] the cloaking matrix of the inducing values


@check_shapes("X: [N, D]", "Z: [M, D]")
def fitc_terms(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, X: tf.Tensor, noise_variance: Any) -> FITCTerms:
    """The FITC cloaking factor ``B`` (m x n) and the Cholesky factors that predictions need.

    Computed exactly as GPflow's ``GPRFITC.common_terms`` does, so that
    ``A(x) B (y - m) + m(x)`` equals ``GPRFITC.predict_f`` mean. Memory O(n m).
    """
    iv = gpflow.inducing_variables.InducingPoints(Z)
    kuf = Kuf(iv, kernel, X)  # [M, N]
    kuu = Kuu(iv, kernel, jitter=gpflow.config.default_jitter())  # [M, M]
    Luu = tf.linalg.cholesky(kuu)
    V = tf.linalg.triangular_solve(Luu, kuf)  # [M, N]
    nu = kernel(X, full_cov=False) - tf.reduce_sum(tf.square(V), 0) + noise_variance  # [N]
    M = tf.shape(Z)[0]
    LB = tf.linalg.cholesky(tf.eye(M, dtype=X.dtype) + tf.linalg.matmul(V / nu, V, transpose_b=True))
    B = tf.linalg.cholesky_solve(LB, V / nu)  # [M, N]
    return FITCTerms(Luu, LB, B)


@check_shapes("Xnew: [K, D]", "Z: [M, D]", "Luu: [M, M]", "return: [K, M]")
def fitc_readout(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, Luu: tf.Tensor, Xnew: tf.Tensor) -> tf.Tensor:
    """``A(Xnew) = k(Xnew, Z) L_uu^{-T}``: maps the inducing values to predictions (public)."""
    kus = Kuf(gpflow.inducing_variables.InducingPoints(Z), kernel, Xnew)  # [M, K]
    return tf.transpose(tf.linalg.triangular_solve(Luu, kus))


class PrivatePrediction(NamedTuple):
    """DP predictions from a :class:`PrivateFunction` (all safe to publish), each of shape [k]."""

    mean: np.ndarray
    variance: np.ndarray
    noise_std: np.ndarray


class PrivateFunction:
    """A released sparse GP: predictions at any inputs, with no further privacy cost.

    Holds the DP release of the inducing values (``release``) and public model pieces only
    (kernel, inducing inputs, mean function, Cholesky factors that do not depend on ``y``).
    """

    def __init__(self, release: PrivateRelease, kernel, Z, mean_function, terms: FITCTerms, R: tf.Tensor) -> None:
        self.release = release
        self._kernel = kernel
        self._Z = Z
        self._mean_function = mean_function
        self._Luu = terms.Luu
        self._LB = terms.LB
        self._R = R  # [M, M] upper triangular: released coordinates are R times the inducing values

    @property
    def epsilon(self) -> float:
        return self.release.epsilon

    @property
    def delta(self) -> float:
        return self.release.delta

    def predict(self, Xnew: Any) -> PrivatePrediction:
        """DP mean, public posterior variance and DP noise std at ``Xnew`` (post-processing only)."""
        Xnew = tf.constant(as_inputs("Xnew", Xnew, int(self._Z.shape[1])))
        readout = fitc_readout(self._kernel, self._Z, self._Luu, Xnew)  # [K, M]
        # A = readout R^{-1}, by a triangular solve: A^T = R^{-T} readout^T.
        A = tf.transpose(tf.linalg.triangular_solve(self._R, tf.transpose(readout), lower=False, adjoint=True))
        mean = self._mean_function(Xnew)[:, 0] + tf.linalg.matvec(A, tf.constant(self.release.mean))
        noise = tf.linalg.matmul(A, tf.constant(self.release.noise_factor))  # [K, r]
        w = tf.transpose(readout)  # [M, K]
        iA = tf.linalg.triangular_solve(self._LB, w)
        var = self._kernel(Xnew, full_cov=False) - tf.reduce_sum(w**2, 0) + tf.reduce_sum(iA**2, 0)
        return PrivatePrediction(
            mean=mean.numpy(),
            variance=var.numpy(),
            noise_std=tf.sqrt(tf.reduce_sum(noise**2, axis=1)).numpy(),
        )


class DPGPRFITC(PrivateRegressionMixin, gpflow.models.GPRFITC):
    """GPflow's ``GPRFITC`` with public output bounds and DP releases.

    ``DPGPRFITC((X, Y), kernel, inducing_variable, noise_variance=..., y_bounds=(lo, hi))``. The
    inducing inputs must be public (e.g. :func:`kmeans_inducing_inputs` on ``X``); they are made
    non-trainable. ``release(Xnew, ...)`` is as for :class:`~dpgp_gpflow.models.DPGPR` with the
    optimiser working in m dimensions; :meth:`release_function` releases the inducing values once
    so that predictions anywhere are free.

    Privacy assumption: ``X``, ``Z``, kernel hyperparameters and noise variance are public.
    """

    def __init__(
        self,
        data: Any,
        kernel: gpflow.kernels.Kernel,
        inducing_variable: Any,
        noise_variance: Optional[float] = None,
        y_bounds: Any = None,
        *,
        mean_function: Optional[gpflow.functions.MeanFunction] = None,
        data_sensitivity: Optional[float] = None,
    ) -> None:
        if y_bounds is None:
            raise TypeError("y_bounds=(lo, hi), public bounds on the outputs, is required")
        X, Y, bounds, d = prepare_private_data(data, y_bounds, data_sensitivity)
        if isinstance(inducing_variable, gpflow.inducing_variables.InducingPoints):
            Z = inducing_variable.Z.numpy()
        else:
            Z = inducing_variable
        Z = as_inputs("inducing_variable", Z, X.shape[1])
        if mean_function is None:
            mean_function = public_constant_mean(bounds)
        super().__init__((X, Y), kernel, Z, mean_function=mean_function, noise_variance=noise_variance)
        gpflow.set_trainable(self.inducing_variable, False)  # public; never fitted on the outputs
        self.y_bounds = bounds
        self.data_sensitivity = d

    @inherit_check_shapes
    def fitc_log_marginal_likelihood(self) -> tf.Tensor:
        self._mark_private_objective()
        return super().fitc_log_marginal_likelihood()

    def _fitc_terms(self) -> FITCTerms:
        X, _ = self.data
        return fitc_terms(self.kernel, self.inducing_variable.Z, X, self.likelihood.variance)

    def _release_matrix(self, Xnew: tf.Tensor):
        terms = self._fitc_terms()
        return fitc_readout(self.kernel, self.inducing_variable.Z, terms.Luu, Xnew), terms.B

    @check_shapes("Xnew: [K, D]", "return: [K, N]")
    def cloaking_matrix(self, Xnew: Any) -> tf.Tensor:
        """``C = A(Xnew) B`` (k x n): ``predict_f(Xnew) mean = C (Y - m(X)) + m(Xnew)``. Public."""
        X, _ = self.data
        A, B = self._release_matrix(tf.convert_to_tensor(Xnew, dtype=X.dtype))
        return tf.linalg.matmul(A, B)

    def release_function(
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
    ) -> PrivateFunction:
        """Release the m inducing values once; the returned function predicts anywhere for free.

        With ``objective="mse"`` the noise minimises the expected squared error at
        ``reference_inputs`` (public; default: the training inputs). With ``"entropy"`` the noise is
        the same (invariant) whatever the reference, and equals that of ``release(Xnew)`` at any
        ``Xnew`` whose readout has full column rank (k >= m).
        """
        self._check_hyperparameters_public(hyperparameters_public)
        X, _ = self.data
        Xref = X if reference_inputs is None else tf.constant(as_inputs("reference_inputs", reference_inputs, int(X.shape[1])))
        terms = self._fitc_terms()
        A_ref = fitc_readout(self.kernel, self.inducing_variable.Z, terms.Luu, Xref)  # [R, M]
        R = reference_coordinates(A_ref)  # release R v: "mse" is then the error at the reference inputs
        m = int(terms.B.shape[0])
        release = self._cloaking_release(
            tf.linalg.matmul(R, terms.B),
            tf.zeros([m], dtype=tf.float64),
            tf.zeros([m], dtype=tf.float64),
            epsilon=epsilon,
            delta=delta,
            objective=objective,
            calibration=calibration,
            seed=seed,
            accountant=accountant,
            rtol=rtol,
            tol=tol,
        )
        return PrivateFunction(release, self.kernel, self.inducing_variable.Z, self.mean_function, terms, R)
