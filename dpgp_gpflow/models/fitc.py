"""Sparse (FITC) GP regression with DP releases: :class:`DPGPRFITC` and :class:`PrivateFunction`.

The FITC predictive mean is ``m(x) + A(x) B (y - m(X))`` with ``A(x) = k(x, Z) L_uu^{-T}`` (k x m) and
``B = (I + V diag(1/nu) V^T)^{-1} V diag(1/nu)`` (m x n), ``V = L_uu^{-1} K_uf``,
``nu = diag(K_ff - Q_ff) + sigma^2`` (docs/mechanisms.md#sparse-regression). The outputs reach every prediction through the
m values ``B (y - m(X))``, so one private release of those values makes predictions at *any*
inputs private by post-processing: "release once, query anywhere".
"""

from __future__ import annotations

from typing import Any

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.covariances import Kuf, Kuu

from .. import linalg
from ..contract import PublicReadout
from ..released import PrivateFunction, PrivatePrediction
from ..readouts import FITCReadout, SparseTerms
from ..streaming.terms import ChunkTerms, Factors
from .sgpr_base import DPSGPRBase

__all__ = ["DPGPRFITC", "PrivateFunction", "PrivatePrediction"]


@check_shapes("X: [N, D]", "Z: [M, D]")
def fitc_terms(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, X: tf.Tensor, noise_variance: Any) -> SparseTerms:
    """The FITC cloaking factor ``B`` (m x n) and the Cholesky factors ``L_uu``, ``L_B`` that predictions need.

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
    return SparseTerms(Luu, LB, B)


class FITCChunkTerms(ChunkTerms):
    """FITC's maths on a chunk of rows (:func:`fitc_terms` by columns): ``V = L_uu^{-1} K_uf``,
    ``nu = diag(K_ff - V^T V) + sigma^2``; sums ``V diag(1/nu) V^T`` (giving ``L_B``) and ``V V^T``
    (the readout's Gram at the training inputs); ``B[:, chunk] = (L_B L_B^T)^{-1} V diag(1/nu)``.
    Public (see :mod:`dpgp_gpflow.streaming.terms`)."""

    def nu(self, X: np.ndarray, V: tf.Tensor) -> Any:
        """FITC's per-point ``diag(K_ff - V^T V) + sigma^2`` [c] (public)."""
        return self._kernel(tf.constant(X), full_cov=False) - tf.reduce_sum(tf.square(V), 0) + self.noise_variance

    def inner(self, X: np.ndarray, V: tf.Tensor) -> tf.Tensor:
        return tf.linalg.matmul(V / self.nu(X, V), V, transpose_b=True)

    @inherit_check_shapes
    def latent_columns(self, X: np.ndarray, factors: Factors) -> tf.Tensor:
        V = self.projected(X, factors.L)
        return linalg.cholesky_solve(factors.LB, V / self.nu(X, V))

    @inherit_check_shapes
    def latent_product(self, X: np.ndarray, factors: Factors, left: tf.Tensor) -> tf.Tensor:
        """``left (L_B L_B^T)^{-1} V diag(1/nu)``: the chunk adds to the r x m x c product the m x m x c
        solve that ``nu`` needs (public)."""
        M = tf.transpose(tf.linalg.cholesky_solve(factors.LB, tf.transpose(left)))
        V = self.projected(X, factors.L)
        return tf.linalg.matmul(M, V) / self.nu(X, V)

    def readout(self, factors: Factors) -> PublicReadout:
        return FITCReadout(self._kernel, self._mean_function, tf.constant(self.Z), SparseTerms(factors.L, factors.LB, None),
                           self.num_outputs)


class DPGPRFITC(DPSGPRBase, gpflow.models.GPRFITC):
    """GPflow's ``GPRFITC`` with public output bounds and DP releases.

    ``DPGPRFITC((X, Y), kernel, inducing_variable, noise_variance=..., y_bounds=(lo, hi))``. The
    inducing inputs must be public (e.g. :func:`~dpgp_gpflow.models.kmeans_inducing_inputs` on ``X``);
    they are made non-trainable. ``release(Xnew, ...)`` is as for :class:`~dpgp_gpflow.models.DPGPR`
    with the optimiser working in m dimensions; :meth:`release_function` releases the inducing values
    once so that predictions anywhere are free (:class:`~dpgp_gpflow.models.sgpr_base.DPSGPRBase`).
    ``Y`` may be [N, P] (P outputs per row, one kernel and noise variance, per-output bounds:
    docs/guides/multi_output.md#sparse-models).

    Privacy assumption: ``X``, ``Z``, kernel hyperparameters and noise variance are public.
    ``hyperparameters_public=True`` declares the values given here chosen without ``Y``; otherwise
    those that are not GPflow's defaults make releases refuse (:class:`~dpgp_gpflow.PrivacyLeakError`).
    The training objective reads the outputs: running it arms the leak guard.
    """

    readout_type = FITCReadout
    chunk_terms_type = FITCChunkTerms

    @inherit_check_shapes
    def fitc_log_marginal_likelihood(self) -> tf.Tensor:
        self._mark_private_objective()
        return super().fitc_log_marginal_likelihood()

    def sparse_terms(self, X: tf.Tensor) -> SparseTerms:
        """:func:`fitc_terms` at ``X``: ``L_uu``, ``L_B`` and ``B``, whose ``u = B y_c`` are the FITC
        inducing values (public)."""
        return fitc_terms(self.kernel, self.inducing_variable.Z, X, self.likelihood.variance)
