"""Sparse (FITC) GP regression with DP releases: :class:`DPGPRFITC` and :class:`PrivateFunction`.

The FITC predictive mean is ``m(x) + A(x) B (y - m(X))`` with ``A(x) = k(x, Z) L_uu^{-T}`` (k x m) and
``B = (I + V diag(1/nu) V^T)^{-1} V diag(1/nu)`` (m x n), ``V = L_uu^{-1} K_uf``,
``nu = diag(K_ff - Q_ff) + sigma^2`` (docs/mechanisms.md#sparse-regression). The outputs reach every prediction through the
m values ``B (y - m(X))``, so one private release of those values makes predictions at *any*
inputs private by post-processing: "release once, query anywhere".
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.covariances import Kuf, Kuu
from sklearn.cluster import KMeans

from .. import linalg
from ..contract import ReleaseTerms
from ..release_file import (
    kernel_from_spec,
    kernel_spec,
    mean_function_from_spec,
    mean_function_spec,
    take_factors,
)
from ..released import PrivateFunction, PrivatePrediction
from ..validation import as_inputs
from .base import DaskRowsMixin, FactoredModelMixin, centred_latent_terms, prepare_sparse_data, public_constant_mean

__all__ = [
    "DPGPRFITC",
    "FITCReadout",
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
    V = linalg.triangular_solve(Luu, kuf)  # [M, N]
    nu = kernel(X, full_cov=False) - tf.reduce_sum(tf.square(V), 0) + noise_variance  # [N]
    M = tf.shape(Z)[0]
    LB = tf.linalg.cholesky(tf.eye(M, dtype=X.dtype) + tf.linalg.matmul(V / nu, V, transpose_b=True))
    B = linalg.cholesky_solve(LB, V / nu)  # [M, N]
    return FITCTerms(Luu, LB, B)


@check_shapes("Xnew: [K, D]", "Z: [M, D]", "Luu: [M, M]", "return: [K, M]")
def fitc_readout(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, Luu: tf.Tensor, Xnew: tf.Tensor) -> tf.Tensor:
    """``A(Xnew) = k(Xnew, Z) L_uu^{-T}``: maps the inducing values to predictions (public).

    ``k(Z, Xnew)`` directly (what ``Kuf`` of ``InducingPoints`` computes) rather than through a fresh
    ``InducingPoints``, whose variable would make this untraceable by ``tf.function`` (SavedModel export).
    """
    kus = kernel(Z, Xnew)  # [M, K]
    return tf.transpose(linalg.triangular_solve(Luu, kus))


class FITCReadout:
    """Frozen public pieces of a FITC model: ``A(x) = k(x, Z) L_uu^{-T}``, the prior mean, and the
    FITC posterior variance ``k(x, x) - |w|^2 + |L_B^{-1} w|^2`` with ``w = L_uu^{-1} k(Z, x)``.

    Holds frozen copies of the kernel and mean function and constants for ``Z`` and the Cholesky
    factors (all public), so that training the model later changes nothing here.
    """

    def __init__(self, kernel: gpflow.kernels.Kernel, mean_function: gpflow.functions.MeanFunction,
                 Z: tf.Tensor, terms: FITCTerms) -> None:
        self._kernel = gpflow.utilities.freeze(kernel)
        self._mean_function = gpflow.utilities.freeze(mean_function)
        self._Z = tf.constant(Z)
        self._Luu = tf.constant(terms.Luu)
        self._LB = tf.constant(terms.LB)
        self.input_dim = int(self._Z.shape[1])

    def readout(self, Xnew: tf.Tensor) -> tf.Tensor:
        return fitc_readout(self._kernel, self._Z, self._Luu, Xnew)

    def offset(self, Xnew: tf.Tensor) -> tf.Tensor:
        return self._mean_function(Xnew)[:, 0]

    def variance(self, Xnew: tf.Tensor) -> tf.Tensor:
        return self.readout_and_variance(Xnew)[1]

    def readout_and_variance(self, Xnew: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        """:meth:`readout` and :meth:`variance` from one solve with ``L_uu``."""
        A = self.readout(Xnew)  # [K, M]
        iA = linalg.triangular_solve(self._LB, tf.transpose(A))
        return A, self._kernel(Xnew, full_cov=False) - tf.reduce_sum(tf.square(A), 1) + tf.reduce_sum(tf.square(iA), 0)

    def release_state(self) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
        """``(content, arrays)`` of a release file (``docs/release_file.md#readouts``): the kernel and mean
        function as specifications, ``Z``, ``Luu`` and ``LB`` as arrays. All public; no outputs.

        ``NotImplementedError`` when the kernel or mean function is not one a release file holds.
        """
        content = {"input_dim": self.input_dim, "kernel": kernel_spec(self._kernel),
                   "mean_function": mean_function_spec(self._mean_function)}
        return content, {"Z": self._Z.numpy(), "Luu": self._Luu.numpy(), "LB": self._LB.numpy()}

    @classmethod
    def from_release_state(cls, content: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> "FITCReadout":
        """The readout of :meth:`release_state`'s ``(content, arrays)``, with exactly the saved values."""
        a = take_factors("FITCReadout", content, arrays, "Z", ("Luu", "LB"))
        terms = FITCTerms(a["Luu"], a["LB"], None)
        return cls(kernel_from_spec(content.get("kernel")), mean_function_from_spec(content.get("mean_function")),
                   a["Z"], terms)


class DPGPRFITC(DaskRowsMixin, FactoredModelMixin, gpflow.models.GPRFITC):
    """GPflow's ``GPRFITC`` with public output bounds and DP releases.

    ``DPGPRFITC((X, Y), kernel, inducing_variable, noise_variance=..., y_bounds=(lo, hi))``. The
    inducing inputs must be public (e.g. :func:`kmeans_inducing_inputs` on ``X``); they are made
    non-trainable. ``release(Xnew, ...)`` is as for :class:`~dpgp_gpflow.models.DPGPR` with the
    optimiser working in m dimensions; :meth:`release_function` releases the inducing values once
    so that predictions anywhere are free.

    Privacy assumption: ``X``, ``Z``, kernel hyperparameters and noise variance are public.
    ``hyperparameters_public=True`` declares the values given here chosen without ``Y``; otherwise
    those that are not GPflow's defaults make releases warn (:class:`~dpgp_gpflow.HyperparameterWarning`).
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
        hyperparameters_public: bool = False,
    ) -> None:
        if y_bounds is None:
            raise TypeError("y_bounds=(lo, hi), public bounds on the outputs, is required")
        data, Z, bounds, d, dask_rows = prepare_sparse_data(data, inducing_variable, y_bounds, data_sensitivity,
                                                            noise_variance)
        model_made = [".inducing_variable"]  # public by assumption (from X only): not warned about
        if mean_function is None:
            mean_function = public_constant_mean(bounds)
            model_made.append(".mean_function")
        super().__init__(data, kernel, Z, mean_function=mean_function, noise_variance=noise_variance)
        self._hold_dask_rows(dask_rows)
        gpflow.set_trainable(self.inducing_variable, False)  # public; never fitted on the outputs
        self.y_bounds = bounds
        self.data_sensitivity = d
        self._guard_construction(hyperparameters_public, model_made)  # the leak guard: values as given

    @inherit_check_shapes
    def fitc_log_marginal_likelihood(self) -> tf.Tensor:
        self._mark_private_objective()
        return super().fitc_log_marginal_likelihood()

    def _fitc_terms(self) -> FITCTerms:
        X, _ = self.data
        return fitc_terms(self.kernel, self.inducing_variable.Z, X, self.likelihood.variance)

    def latent_terms_and_readout(self) -> Tuple[ReleaseTerms, FITCReadout]:
        """:meth:`latent_terms` and :meth:`public_readout` from one computation of the FITC factors."""
        terms = self._fitc_terms()
        return centred_latent_terms(terms.B), self._readout(terms)

    def latent_terms(self) -> ReleaseTerms:
        """``B`` (m x n): the FITC inducing values ``u = B y_c``; offset 0 (public)."""
        return centred_latent_terms(self._fitc_terms().B)

    def public_readout(self) -> FITCReadout:
        """A frozen :class:`FITCReadout` of the current (public) kernel, mean, ``Z`` and factors."""
        return self._readout(self._fitc_terms())

    def _readout(self, terms: FITCTerms) -> FITCReadout:
        return FITCReadout(self.kernel, self.mean_function, self.inducing_variable.Z, terms)

    def split_terms(self, train: Any, test: Any) -> ReleaseTerms:
        """``(A(X_test), B(X_train))`` with this model's inducing inputs (centred: offset 0)."""
        Xtr, Xte = self._split_inputs(train, test)
        Z = self.inducing_variable.Z
        terms = fitc_terms(self.kernel, Z, Xtr, self.likelihood.variance)
        A = fitc_readout(self.kernel, Z, terms.Luu, Xte)
        return ReleaseTerms((A, terms.B), tf.zeros([int(A.shape[0])], dtype=A.dtype))
