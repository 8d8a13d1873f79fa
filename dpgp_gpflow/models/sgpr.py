"""Titsias' variational sparse GP regression with DP releases: :class:`DPSGPR` (its readout,
:class:`~dpgp_gpflow.readouts.SGPRReadout`, is in :mod:`dpgp_gpflow.readouts`).

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

from typing import Any, Optional

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.covariances import Kuf, Kuu

from .. import linalg, whole_rows
from ..exceptions import PrivacyLeakError
from ..readouts import SGPRReadout, SparseTerms
from ..streaming.terms import ChunkTerms, Factors
from ..whole_rows.inputs import PrivateInputsMixin, private_input_data, refuse_private_input_options
from .sgpr_base import DPSGPRBase

__all__ = ["DPSGPR"]


@check_shapes("X: [N, D]", "Z: [M, D]", "noise_variance: [broadcast N]")
def sgpr_terms(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, X: tf.Tensor, noise_variance: Any) -> SparseTerms:
    """The SGPR latent map ``B`` (m x n) and the Cholesky factors ``L``, ``L_B`` that predictions need.

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
    return SparseTerms(L, LB, B)


class SGPRChunkTerms(ChunkTerms):
    """SGPR's maths on a chunk of rows (:func:`sgpr_terms` by columns, one noise variance ``sigma^2``):
    ``W = L^{-1} K_uf``, ``A = W / sigma``; sums ``A A^T`` (giving ``L_B``) and ``W W^T`` (the readout's
    Gram at the training inputs is ``L_B^{-1} W W^T L_B^{-T}``); ``B[:, chunk] = L_B^{-1} W / sigma^2``.
    Public (see :mod:`dpgp_gpflow.streaming.terms`)."""

    def inner(self, X: np.ndarray, V: tf.Tensor) -> tf.Tensor:
        A = V / np.sqrt(self.noise_variance)
        return tf.linalg.matmul(A, A, transpose_b=True)

    def readout_gram(self, LB: tf.Tensor, G: tf.Tensor) -> tf.Tensor:
        """The readout at the training inputs is ``(L_B^{-1} W)^T``: its Gram is ``L_B^{-1} (W W^T) L_B^{-T}``."""
        half = tf.linalg.triangular_solve(LB, G, lower=True)
        return tf.transpose(tf.linalg.triangular_solve(LB, tf.transpose(half), lower=True))

    @inherit_check_shapes
    def latent_columns(self, X: np.ndarray, factors: Factors) -> tf.Tensor:
        V = self.projected(X, factors.L)
        sigma = np.sqrt(self.noise_variance)
        return linalg.triangular_solve(factors.LB, (V / sigma) / sigma, lower=True)

    @inherit_check_shapes
    def latent_product(self, X: np.ndarray, factors: Factors, left: tf.Tensor) -> tf.Tensor:
        """``left L_B^{-1} L^{-1} K_uf / sigma^2``: the two triangular solves on ``left`` (public)."""
        M = tf.linalg.triangular_solve(factors.LB, tf.transpose(left), lower=True, adjoint=True)  # [M, r]
        M = tf.linalg.triangular_solve(factors.L, M, lower=True, adjoint=True)
        return tf.linalg.matmul(M, self.kuf(X), transpose_a=True) / self.noise_variance

    def readout(self, factors: Factors) -> SGPRReadout:
        return SGPRReadout(self._kernel, self._mean_function, tf.constant(self.Z), SparseTerms(factors.L, factors.LB, None),
                           self.num_outputs)


class DPSGPR(DPSGPRBase, PrivateInputsMixin, gpflow.models.SGPR):
    """GPflow's ``SGPR`` (Titsias' variational sparse GP) with public output bounds and DP releases.

    ``DPSGPR((X, Y), kernel, inducing_variable, noise_variance=..., y_bounds=(lo, hi))``. The
    inducing inputs must be public (e.g. :func:`~dpgp_gpflow.models.kmeans_inducing_inputs` on
    ``X``); they are made non-trainable. ``release(Xnew, ...)`` is as for
    :class:`~dpgp_gpflow.models.DPGPR` with the optimiser working in m dimensions;
    :meth:`release_function` releases the m latent values once so that predictions anywhere are free
    (:class:`~dpgp_gpflow.models.sgpr_base.DPSGPRBase`). ``Y`` may be [N, P] (P outputs per row, one
    kernel and noise variance, per-output bounds: docs/guides/multi_output.md#sparse-models).

    Privacy assumption: ``X``, ``Z``, kernel hyperparameters and noise variance are public.
    ``hyperparameters_public=True`` declares the values given here chosen without ``Y``; otherwise
    those that are not GPflow's defaults make releases refuse (:class:`~dpgp_gpflow.PrivacyLeakError`). The
    training objective (``elbo``, and ``upper_bound``) reads the outputs: running it arms the leak guard.

    ``private_inputs=True`` (docs/guides/whole_rows.md): the inputs are private too. ``x_bounds=[(lo_1, hi_1),
    ...]``, a public box holding the inputs, is then required (inputs outside are clipped to it with a count
    warning, or refused with ``clip_inputs=False``); ``Z`` must be public, from the box alone
    (:func:`~dpgp_gpflow.whole_rows.inducing_grid`; k-means on the private inputs is refused); the kernel needs
    a public bound on ``k(x, x)`` (stationary kernels); the prior mean is ``y_bounds``' midpoint (a
    ``mean_function`` is refused). :meth:`release_function` then releases the whole-row
    statistics once (:func:`~dpgp_gpflow.whole_rows.release_model`) and returns a
    :class:`~dpgp_gpflow.whole_rows.WholeRowsRelease`; every release that treats the inputs as public
    (``release``, the streamed and compiled releases, selection) refuses. With ``groups=`` (public person ids)
    it protects a person's whole rows (inputs and outputs); lengthscales left at GPflow's default are chosen
    privately from a public grid inside the same release (docs/whole_rows.md#lengthscales).
    """

    readout_type = SGPRReadout
    chunk_terms_type = SGPRChunkTerms

    def __init__(self, data: Any, kernel: gpflow.kernels.Kernel, inducing_variable: Any,
                 noise_variance: Optional[float] = None, y_bounds: Any = None, *, x_bounds: Any = None,
                 private_inputs: bool = False, clip_inputs: bool = True, **options: Any) -> None:
        if not isinstance(private_inputs, bool):
            raise TypeError(f"private_inputs must be True or False, got {private_inputs!r}")
        box = None
        if private_inputs:
            if options.get("mean_function") is not None:  # whole_rows centres Y at the bounds' midpoint, always
                raise ValueError("private_inputs=True takes no mean_function: the whole-row release's prior mean is "
                                 "y_bounds' midpoint (subtract a public mean from Y first, and shift the bounds)")
            data, box = private_input_data(data, kernel, inducing_variable, x_bounds, clip_inputs)
        else:
            refuse_private_input_options(x_bounds, clip_inputs)
        super().__init__(data, kernel, inducing_variable, noise_variance, y_bounds, **options)
        if private_inputs and self.num_outputs != 1:
            raise NotImplementedError("private_inputs=True takes one output per row for now (Y [N, 1])")
        self._hold_private_inputs(box, clip_inputs)
        object.__setattr__(self, "_dp_noise_variance_given", noise_variance is not None)

    # -- whole rows private (private_inputs=True; private_inputs, x_bounds, clip_inputs: PrivateInputsMixin) ---
    @property
    def noise_variance_given(self) -> bool:
        """True when ``noise_variance`` was given at construction (a whole-row release then uses the model's
        variances; otherwise it fits them on the released statistics)."""
        return bool(self.__dict__.get("_dp_noise_variance_given", False))

    def release_function(self, **options: Any) -> Any:
        """As :meth:`~dpgp_gpflow.models.base.FactoredModelMixin.release_function`; with ``private_inputs=True``
        the whole-row release (:func:`~dpgp_gpflow.whole_rows.release_model`: ``epsilon``, ``delta``, ``seed``,
        ``accountant``, ``hyperparameters_public``, ``source``, ``chunk_size``, ``shares``, ``variances``,
        ``lengthscales``, ``residual_fractions``: releases of clipped residual sums after the statistics,
        docs/whole_rows.md#residual-releases)."""
        if self.private_inputs:
            return whole_rows.release_model(self, **options)
        return super().release_function(**options)

    def _public_inputs_only(self) -> None:
        """``PrivacyLeakError`` for a model of private inputs: every release path that treats the inputs as
        public reads its terms or outputs through the methods below, before anything is reserved."""
        if self.private_inputs:
            raise PrivacyLeakError(
                "this DPSGPR was built with private_inputs=True: a release that treats the inputs as public would "
                "leak them; release the whole rows with model.release_function(epsilon=..., delta=...) and predict "
                "from what it returns")

    def release_terms(self, Xnew: tf.Tensor) -> Any:
        self._public_inputs_only()
        return super().release_terms(Xnew)

    def latent_terms(self) -> Any:
        self._public_inputs_only()
        return super().latent_terms()

    def latent_terms_and_readout(self) -> Any:
        self._public_inputs_only()
        return super().latent_terms_and_readout()

    def split_terms(self, train: Any, test: Any) -> Any:
        self._public_inputs_only()
        return super().split_terms(train, test)

    def chunk_terms(self) -> ChunkTerms:
        self._public_inputs_only()
        return super().chunk_terms()

    def centred_outputs(self) -> tf.Tensor:
        self._public_inputs_only()
        return super().centred_outputs()

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

    def sparse_terms(self, X: tf.Tensor) -> SparseTerms:
        """:func:`sgpr_terms` at ``X``: ``L``, ``L_B`` and ``B``, whose ``c = B y_c`` are GPflow's SGPR
        ``c`` (public)."""
        noise_variance = tf.squeeze(self.likelihood.variance_at(X), axis=-1)  # [N], as GPflow's SGPR reads it
        return sgpr_terms(self.kernel, self.inducing_variable.Z, X, noise_variance)
