"""Titsias' variational sparse GP regression with DP releases: :class:`DPSGPR` and :class:`SGPRReadout`.

With ``sigma^2`` the noise variance, ``L = chol(K_uu + jitter I)``, ``A = L^{-1} K_uf / sigma`` and
``L_B = chol(I + A A^T)``, the SGPR predictive mean (Titsias 2009; GPflow's ``SGPR.predict_f``) is

    m(x) + a(x) c,     a(x) = (L_B^{-1} L^{-1} k(Z, x))^T  [k, m],     c = B (y - m(X)),
    B = L_B^{-1} L^{-1} K_uf / sigma^2  [m, n],

and its variance ``k(x, x) - |L^{-1} k(Z, x)|^2 + |L_B^{-1} L^{-1} k(Z, x)|^2``. The outputs reach every
prediction through the m values ``c`` (GPflow's own cached ``c``), so one private release of them makes
predictions at *any* inputs private by post-processing, exactly as for
:class:`~dpgp_gpflow.models.DPGPRFITC`.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.covariances import Kuf, Kuu

from .. import linalg
from ..contract import ReleaseTerms
from ..release_file import (
    kernel_from_spec,
    kernel_spec,
    mean_function_from_spec,
    mean_function_spec,
    take_factors,
)
from .base import DaskRowsMixin, FactoredModelMixin, centred_latent_terms, prepare_sparse_data, public_constant_mean

__all__ = [
    "DPSGPR",
    "SGPRReadout",
    "SGPRTerms",
    "sgpr_readout",
    "sgpr_readout_and_variance",
    "sgpr_terms",
    "sgpr_variance",
]


class SGPRTerms(NamedTuple):
    """Public SGPR matrices (they depend on inputs, inducing inputs and hyperparameters only)."""

    L: tf.Tensor  #: [M, M] Cholesky of K_uu (with GPflow's default jitter)
    LB: tf.Tensor  #: [M, M] Cholesky of I + A A^T, A = L^{-1} K_uf / sigma
    B: tf.Tensor  #: [M, N] L_B^{-1} L^{-1} K_uf / sigma^2: the map from the centred outputs to c


@check_shapes("X: [N, D]", "Z: [M, D]", "noise_variance: [broadcast N]")
def sgpr_terms(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, X: tf.Tensor, noise_variance: Any) -> SGPRTerms:
    """The SGPR latent map ``B`` (m x n) and the Cholesky factors that predictions need.

    Computed exactly as GPflow's ``SGPRPosterior._precompute`` does (``c = B (y - m(X))`` is its
    ``c``), so that ``a(x) B (y - m(X)) + m(x)`` equals ``SGPR.predict_f`` mean. ``noise_variance``:
    a scalar or one variance per input. Memory O(n m); no inverse is formed.
    """
    iv = gpflow.inducing_variables.InducingPoints(Z)
    kuf = Kuf(iv, kernel, X)  # [M, N]
    kuu = Kuu(iv, kernel, jitter=gpflow.config.default_jitter())  # [M, M]
    sigma_sq = tf.broadcast_to(tf.convert_to_tensor(noise_variance, dtype=X.dtype), [tf.shape(X)[0]])  # [N]
    sigma = tf.sqrt(sigma_sq)
    L = tf.linalg.cholesky(kuu)
    A = linalg.triangular_solve(L, kuf / sigma, lower=True)  # [M, N]
    M = tf.shape(Z)[0]
    LB = tf.linalg.cholesky(tf.linalg.matmul(A, A, transpose_b=True) + tf.eye(M, dtype=X.dtype))
    B = linalg.triangular_solve(LB, A / sigma, lower=True)  # [M, N]
    return SGPRTerms(L, LB, B)


def _sgpr_solves(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, LB: tf.Tensor, Xnew: tf.Tensor):
    """``L^{-1} k(Z, Xnew)`` and ``L_B^{-1} L^{-1} k(Z, Xnew)`` ([M, K] each). ``k(Z, Xnew)`` directly (what
    ``Kuf`` of ``InducingPoints`` computes), so that this traces in ``tf.function`` (SavedModel export)
    without creating a variable per call."""
    tmp1 = linalg.triangular_solve(L, kernel(Z, Xnew), lower=True)
    return tmp1, linalg.triangular_solve(LB, tmp1, lower=True)


@check_shapes("Xnew: [K, D]", "Z: [M, D]", "L: [M, M]", "LB: [M, M]", "return[0]: [K, M]", "return[1]: [K]")
def sgpr_readout_and_variance(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, LB: tf.Tensor,
                              Xnew: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """:func:`sgpr_readout` and :func:`sgpr_variance` from the same two solves (public)."""
    tmp1, tmp2 = _sgpr_solves(kernel, Z, L, LB, Xnew)
    variance = kernel(Xnew, full_cov=False) + tf.reduce_sum(tf.square(tmp2), 0) - tf.reduce_sum(tf.square(tmp1), 0)
    return tf.transpose(tmp2), variance


@check_shapes("Xnew: [K, D]", "Z: [M, D]", "L: [M, M]", "LB: [M, M]", "return: [K, M]")
def sgpr_readout(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, LB: tf.Tensor, Xnew: tf.Tensor) -> tf.Tensor:
    """``a(Xnew) = (L_B^{-1} L^{-1} k(Z, Xnew))^T``: maps the latent values ``c`` to predictions (public)."""
    return tf.transpose(_sgpr_solves(kernel, Z, L, LB, Xnew)[1])


@check_shapes("Xnew: [K, D]", "Z: [M, D]", "L: [M, M]", "LB: [M, M]", "return: [K]")
def sgpr_variance(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, LB: tf.Tensor, Xnew: tf.Tensor) -> tf.Tensor:
    """SGPR posterior variance of f: ``k(x, x) + |L_B^{-1} L^{-1} k(Z, x)|^2 - |L^{-1} k(Z, x)|^2`` (public)."""
    return sgpr_readout_and_variance(kernel, Z, L, LB, Xnew)[1]


class SGPRReadout:
    """Frozen public pieces of an SGPR model: ``a(x) = (L_B^{-1} L^{-1} k(Z, x))^T``, the prior mean,
    and the SGPR posterior variance.

    Holds frozen copies of the kernel and mean function and constants for ``Z`` and the Cholesky
    factors (all public), so that training the model later changes nothing here.
    """

    def __init__(self, kernel: gpflow.kernels.Kernel, mean_function: gpflow.functions.MeanFunction,
                 Z: tf.Tensor, terms: SGPRTerms) -> None:
        self._kernel = gpflow.utilities.freeze(kernel)
        self._mean_function = gpflow.utilities.freeze(mean_function)
        self._Z = tf.constant(Z)
        self._L = tf.constant(terms.L)
        self._LB = tf.constant(terms.LB)
        self.input_dim = int(self._Z.shape[1])

    def readout(self, Xnew: tf.Tensor) -> tf.Tensor:
        return sgpr_readout(self._kernel, self._Z, self._L, self._LB, Xnew)

    def offset(self, Xnew: tf.Tensor) -> tf.Tensor:
        return self._mean_function(Xnew)[:, 0]

    def variance(self, Xnew: tf.Tensor) -> tf.Tensor:
        return sgpr_variance(self._kernel, self._Z, self._L, self._LB, Xnew)

    def readout_and_variance(self, Xnew: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        """:meth:`readout` and :meth:`variance` from the same two solves."""
        return sgpr_readout_and_variance(self._kernel, self._Z, self._L, self._LB, Xnew)

    def release_state(self) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
        """``(content, arrays)`` of a release file (``docs/release_file.md#readouts``): the kernel and mean
        function as specifications, ``Z``, ``L`` and ``LB`` as arrays. All public; no outputs.

        ``NotImplementedError`` when the kernel or mean function is not one a release file holds.
        """
        content = {"input_dim": self.input_dim, "kernel": kernel_spec(self._kernel),
                   "mean_function": mean_function_spec(self._mean_function)}
        return content, {"Z": self._Z.numpy(), "L": self._L.numpy(), "LB": self._LB.numpy()}

    @classmethod
    def from_release_state(cls, content: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> "SGPRReadout":
        """The readout of :meth:`release_state`'s ``(content, arrays)``, with exactly the saved values."""
        a = take_factors("SGPRReadout", content, arrays, "Z", ("L", "LB"))
        return cls(kernel_from_spec(content.get("kernel")), mean_function_from_spec(content.get("mean_function")),
                   a["Z"], SGPRTerms(a["L"], a["LB"], None))


class DPSGPR(DaskRowsMixin, FactoredModelMixin, gpflow.models.SGPR):
    """GPflow's ``SGPR`` (Titsias' variational sparse GP) with public output bounds and DP releases.

    ``DPSGPR((X, Y), kernel, inducing_variable, noise_variance=..., y_bounds=(lo, hi))``. The
    inducing inputs must be public (e.g. :func:`~dpgp_gpflow.models.kmeans_inducing_inputs` on
    ``X``); they are made non-trainable. ``release(Xnew, ...)`` is as for
    :class:`~dpgp_gpflow.models.DPGPR` with the optimiser working in m dimensions;
    :meth:`release_function` releases the m latent values once so that predictions anywhere are free.

    Privacy assumption: ``X``, ``Z``, kernel hyperparameters and noise variance are public.
    ``hyperparameters_public=True`` declares the values given here chosen without ``Y``; otherwise
    those that are not GPflow's defaults make releases warn (:class:`~dpgp_gpflow.HyperparameterWarning`). The
    training objective (``elbo``, and ``upper_bound``) reads the outputs: running it arms the leak guard.
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

    # -- the leak guard: every objective that reads the outputs marks the model --------------
    @inherit_check_shapes
    def elbo(self) -> tf.Tensor:
        self._mark_private_objective()
        return super().elbo()

    @inherit_check_shapes
    def quad_term(self, common: Any) -> tf.Tensor:
        self._mark_private_objective()
        return super().quad_term(common)

    @inherit_check_shapes
    def upper_bound(self) -> tf.Tensor:
        self._mark_private_objective()
        return super().upper_bound()

    # -- the contract ---------------------------------------------------------------------------
    def _noise_variance(self, X: tf.Tensor) -> tf.Tensor:
        return tf.squeeze(self.likelihood.variance_at(X), axis=-1)  # [N], as GPflow's SGPR reads it

    def _sgpr_terms(self) -> SGPRTerms:
        X, _ = self.data
        return sgpr_terms(self.kernel, self.inducing_variable.Z, X, self._noise_variance(X))

    def latent_terms_and_readout(self) -> Tuple[ReleaseTerms, SGPRReadout]:
        """:meth:`latent_terms` and :meth:`public_readout` from one computation of the SGPR factors."""
        terms = self._sgpr_terms()
        return centred_latent_terms(terms.B), self._readout(terms)

    def latent_terms(self) -> ReleaseTerms:
        """``B`` (m x n): the latent values ``c = B y_c`` (GPflow's SGPR ``c``); offset 0 (public)."""
        return centred_latent_terms(self._sgpr_terms().B)

    def public_readout(self) -> SGPRReadout:
        """A frozen :class:`SGPRReadout` of the current (public) kernel, mean, ``Z`` and factors."""
        return self._readout(self._sgpr_terms())

    def _readout(self, terms: SGPRTerms) -> SGPRReadout:
        return SGPRReadout(self.kernel, self.mean_function, self.inducing_variable.Z, terms)

    def split_terms(self, train: Any, test: Any) -> ReleaseTerms:
        """``(a(X_test), B(X_train))`` with this model's inducing inputs and hyperparameters (centred: offset 0)."""
        Xtr, Xte = self._split_inputs(train, test)
        Z = self.inducing_variable.Z
        terms = sgpr_terms(self.kernel, Z, Xtr, self._noise_variance(Xtr))
        A = sgpr_readout(self.kernel, Z, terms.L, terms.LB, Xte)
        return ReleaseTerms((A, terms.B), tf.zeros([int(A.shape[0])], dtype=A.dtype))
