"""Post-processing of the released whole-row statistics: regularisation, the weights' posterior, predictions.

Everything here reads the released (noised) statistics and public values only, so it costs no privacy.

* **Regularisation** (docs/whole_rows.md#regularisation). The released ``S~ = S + E`` carries symmetric
  Gaussian noise ``E`` with off-diagonal std ``sigma_o`` and diagonal std ``sqrt(2) sigma_o`` (the Gaussian
  orthogonal ensemble's shape). With probability at least ``1 - beta``, ``||E||_2 <= tau = 2 sigma_o (sqrt(M) +
  sqrt(log(2 / beta)))`` (:func:`spectral_noise_bound`). :func:`regularised_statistic` projects ``S~`` in the
  Frobenius norm onto ``{S : S >= rho I}`` with ``rho = FLOOR_SCALE * tau`` (eigenvalues below ``rho`` raised to
  it): positive definite, a PSD projection and a ridge tied to the noise's spectral scale in one step; the
  floor depends on public quantities only (the noise std and M).
* **Posterior** (docs/whole_rows.md#posterior). With weights ``w ~ N(0, I)``, ``f(x) = sigma_f phi(x)^T w``
  and noise variance ``sigma^2``, the weights' posterior mean gives the predictive mean ``c + phi(x)^T u``,
  ``u = (lambda I + S^)^{-1} b~``, ``lambda = sigma^2 / sigma_f^2``, and the model's predictive variance
  ``sigma_f^2 (k1(x, x) - |phi(x)|^2 + lambda |L^{-1} phi(x)|^2)`` (SGPR's, ``L L^T = lambda I + S^``).
* **The DP noise in the predictive variance**: to first order (delta method) the noise of ``b~`` (std
  ``sigma_b``) and of ``S~`` move ``u`` by ``(lambda I + S^)^{-1} (e_b - E u)``, so a prediction's mean has the
  extra variance ``(sigma_b^2 + sigma_o^2 |u|^2) |h|^2 + sigma_o^2 (u . h)^2`` with ``h = (lambda I + S^)^{-1}
  phi(x)`` (``Cov(E u) = sigma_o^2 (|u|^2 I + u u^T)`` for the ensemble above).

Privacy assumption: the inputs of these functions are the released statistics, their public noise stds and
public values (kernel, ``Z``, variances given or fitted on the released statistics): post-processing.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from ..noise_planning.dual import MATRIX_SPEC, REAL_SPEC, VECTOR_SPEC
from .signature import InputSignature

__all__: list[str] = []  # internal: the package imports these names by name

#: The eigenvalue floor as a multiple of the spectral bound ``tau`` of the noise (public design constant,
#: chosen on synthetic data and the !Kung protocol: docs/whole_rows.md#regularisation).
FLOOR_SCALE = 0.75
#: ``beta``: the bound ``tau`` holds with probability at least ``1 - beta`` over the noise.
SPECTRAL_FAILURE = 0.01


def spectral_noise_bound(offdiag_std: float, m: int, failure: float = SPECTRAL_FAILURE) -> float:
    """``tau = 2 sigma_o (sqrt(M) + sqrt(log(2 / beta)))``: with probability at least ``1 - beta`` the spectral
    norm of an M x M symmetric Gaussian matrix with off-diagonal std ``sigma_o`` and diagonal std ``sqrt(2)
    sigma_o`` is at most ``tau`` (``E lambda_max <= 2 sigma_o sqrt(M)`` by Sudakov-Fernique, and
    ``lambda_max`` is ``sqrt(2) sigma_o``-Lipschitz in the underlying standard normals: docs/whole_rows.md).
    Public: from the noise std and M only."""
    if not (0.0 < failure < 1.0):
        raise ValueError(f"failure must be in (0, 1), got {failure}")
    return 2.0 * float(offdiag_std) * (math.sqrt(int(m)) + math.sqrt(math.log(2.0 / failure)))


class OnReuse:
    """A post-processing function of tensors run eagerly on its first call in a process and through one
    ``tf.function`` (``autograph=False``, ``input_signature`` if given: traced once) from its second: eagerly, a
    release's post-processing of M x M matrices is tens of small op dispatches, while tracing costs more than one
    eager run (a process making one release does not pay it). The same operations, in the same order, either way:
    the same numbers (checked bit for bit on seeded releases). Tensors go straight to the concrete function (the one
    of the ``input_signature``, else one per shapes, as the dispatch traces): half the call's overhead of a
    ``tf.function``'s dispatch; tensors that do not match the ``input_signature`` are refused on every call, the
    first too, as the ``tf.function`` would refuse them (:class:`~.signature.InputSignature`: their dtypes and
    static shapes, read in Python). ``python_function``: the function itself (to inline it in another graph)."""

    def __init__(self, fn: Callable[..., Any], input_signature: Optional[Sequence[tf.TensorSpec]] = None) -> None:
        self.python_function = fn
        self.__doc__ = fn.__doc__
        self._graph = tf.function(fn, input_signature=input_signature, autograph=False)
        self._signature = None if input_signature is None else InputSignature(input_signature, fn.__name__)
        self._concrete: Any = None
        self._called = False

    def __call__(self, *args: Any) -> Any:
        tensors = all(isinstance(a, tf.Tensor) for a in args)
        if tensors and self._signature is not None:
            self._signature.check(args)  # the concrete function itself checks the dtypes only
        if not self._called:
            self._called = True
            return self.python_function(*args)
        if tensors:
            if self._signature is not None:
                if self._concrete is None:
                    self._concrete = self._graph.get_concrete_function()
                return self._concrete(*args)
            key = tuple((tuple(a.shape), a.dtype) for a in args)  # the trace the dispatch would pick: one per shapes
            if self._concrete is None:
                self._concrete = {}
            concrete = self._concrete.get(key)
            if concrete is None:
                concrete = self._concrete[key] = self._graph.get_concrete_function(*args)
            return concrete(*args)
        return self._graph(*args)


def compiled_on_reuse(input_signature: Optional[Sequence[tf.TensorSpec]] = None) -> Callable[..., OnReuse]:
    """Decorator: :class:`OnReuse` of the function (``input_signature``: its tensors' specs, [None] dimensions)."""
    return lambda fn: OnReuse(fn, input_signature)


@compiled_on_reuse([MATRIX_SPEC, REAL_SPEC])
def floored(S: tf.Tensor, floor: tf.Tensor) -> tf.Tensor:
    """:func:`regularised_statistic`'s graph (its ``python_function`` inlines it in another graph)."""
    eigenvalues, V = tf.linalg.eigh(0.5 * (S + tf.transpose(S)))
    raised = tf.maximum(eigenvalues, floor)
    return tf.linalg.matmul(V * raised[None, :], V, transpose_b=True)


@check_shapes("S: [M, M]", "return: [M, M]")
def regularised_statistic(S: tf.Tensor, floor: float) -> tf.Tensor:
    """The Frobenius-nearest matrix to the symmetric part of ``S`` whose eigenvalues are all ``>= floor``:
    ``V max(Lambda, floor) V^T`` (post-processing)."""
    return floored(tf.convert_to_tensor(S, tf.float64), tf.constant(floor, tf.float64))


class RegularisedStatistic(NamedTuple):
    """The released ``S~`` regularised (:func:`regularised_release`; all public: post-processing)."""

    offdiag_std: float  #: ``sigma_o``: the std of an off-diagonal entry's noise of ``S~``
    spectral_bound: float  #: ``tau`` (:func:`spectral_noise_bound`)
    floor: float  #: ``rho = FLOOR_SCALE * tau``
    S_hat: tf.Tensor  #: [M, M] ``S~`` projected onto ``{S : S >= rho I}`` (:func:`regularised_statistic`)


def regularised_release(S: Any, noise_std: Any, copies: int = 1) -> RegularisedStatistic:
    """The one rule of every release of whole-row statistics: from the released ``S~`` [M, M] and the std of its
    noise ``noise_std`` [M, M] as released (diagonal ``sqrt(2) sigma_o``, off-diagonal ``sigma_o``: ``sigma_o`` is
    read from the diagonal), the floor ``FLOOR_SCALE * tau`` and the regularised ``S^``. ``copies``: ``S~`` is the
    mean of that many released copies with independent noise of std ``noise_std`` (a classifier's blocks), whose
    ``sigma_o`` is ``1 / sqrt(copies)`` of one copy's. Post-processing of released and public values only."""
    S = np.asarray(S, dtype=np.float64)
    offdiag, tau, floor = _floor(S, noise_std, copies)
    return RegularisedStatistic(offdiag, tau, floor, regularised_statistic(tf.constant(S), floor))


def _floor(S: np.ndarray, noise_std: Any, copies: int) -> Tuple[float, float, float]:
    """``(sigma_o, tau, FLOOR_SCALE * tau)`` of :func:`regularised_release`."""
    offdiag = float(np.asarray(noise_std)[0, 0]) / math.sqrt(2.0) / math.sqrt(int(copies))
    tau = spectral_noise_bound(offdiag, S.shape[0], SPECTRAL_FAILURE)
    return offdiag, tau, FLOOR_SCALE * tau


class WeightPosterior(NamedTuple):
    """The weights' posterior from the released statistics (all public: post-processing)."""

    chol: tf.Tensor  #: [M, M] Cholesky of ``lambda I + S^``
    mean: tf.Tensor  #: [M] ``u = (lambda I + S^)^{-1} b~`` (predictive mean ``c + phi(x)^T u``)
    kernel_variance: float  #: sigma_f^2
    noise_variance: float  #: sigma^2
    b_std: float  #: std of the noise of each entry of the released ``b``
    offdiag_std: float  #: std of the noise of each off-diagonal entry of the released ``S``


@compiled_on_reuse([MATRIX_SPEC, VECTOR_SPEC, REAL_SPEC])
def _posterior(S_hat: tf.Tensor, b: tf.Tensor, ratio: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    M = tf.shape(S_hat)[0]
    chol = tf.linalg.cholesky(S_hat + ratio * tf.eye(M, dtype=tf.float64))  # [M, M]
    mean = tf.linalg.cholesky_solve(chol, b[:, None])[:, 0]  # [M]
    return chol, mean


@check_shapes("S_hat: [M, M]", "b: [M]")
def weight_posterior(S_hat: tf.Tensor, b: tf.Tensor, *, kernel_variance: float, noise_variance: float,
                     b_std: float, offdiag_std: float) -> WeightPosterior:
    """:class:`WeightPosterior` of the regularised ``S^`` and the released ``b~`` at kernel variance
    ``sigma_f^2`` and noise variance ``sigma^2`` (the mean depends on their ratio only)."""
    ratio = float(noise_variance) / float(kernel_variance)
    chol, mean = _posterior(tf.convert_to_tensor(S_hat, tf.float64), tf.convert_to_tensor(b, tf.float64),
                            tf.constant(ratio, tf.float64))
    return WeightPosterior(chol, mean, float(kernel_variance), float(noise_variance), float(b_std), float(offdiag_std))


def regularised_posterior(S: Any, noise_std: Any, b: Any, *, kernel_variance: float, noise_variance: float,
                          b_std: float) -> Tuple[RegularisedStatistic, WeightPosterior]:
    """:func:`regularised_release` of the released ``S~`` [M, M] (noise std ``noise_std``) and the
    :func:`weight_posterior` of its ``S^`` with the released ``b~`` [M] (noise std ``b_std``) at the given variances,
    in one call (the same operations as the two). Post-processing."""
    S = np.asarray(S, dtype=np.float64)
    offdiag, tau, floor = _floor(S, noise_std, 1)
    ratio = float(noise_variance) / float(kernel_variance)
    S_hat, chol, mean = _regularised_posterior(tf.constant(S), tf.constant(floor, tf.float64),
                                               tf.convert_to_tensor(b, tf.float64), tf.constant(ratio, tf.float64))
    return (RegularisedStatistic(offdiag, tau, floor, S_hat),
            WeightPosterior(chol, mean, float(kernel_variance), float(noise_variance), float(b_std), offdiag))


@compiled_on_reuse([MATRIX_SPEC, REAL_SPEC, VECTOR_SPEC, REAL_SPEC])
def _regularised_posterior(S: tf.Tensor, floor: tf.Tensor, b: tf.Tensor,
                           ratio: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    S_hat = floored.python_function(S, floor)
    chol, mean = _posterior.python_function(S_hat, b, ratio)
    return S_hat, chol, mean


@check_shapes("phi: [N, M]", "prior: [N]", "return[0]: [N]", "return[1]: [N]", "return[2]: [N]")
def predictive_terms(posterior: WeightPosterior, phi: tf.Tensor, prior: tf.Tensor):
    """``(mean - c, model variance, DP noise variance)`` [N] each at features ``phi`` [N, M] (unit scale) with
    ``prior = k(x, x) / k_max`` [N]: the mean ``phi u``; SGPR's variance of f,
    ``sigma_f^2 (prior - |phi|^2 + lambda |L^{-1} phi|^2)``; and the first-order variance the DP noise of the
    released ``b`` and ``S`` adds to the mean, ``(sigma_b^2 + sigma_o^2 |u|^2) |h|^2 + sigma_o^2 (u . h)^2``,
    ``h = (lambda I + S^)^{-1} phi``."""
    ratio = posterior.noise_variance / posterior.kernel_variance
    return _terms(posterior.chol, posterior.mean, tf.convert_to_tensor(phi, tf.float64),
                  tf.convert_to_tensor(prior, tf.float64),
                  *(tf.constant(v, tf.float64) for v in (posterior.kernel_variance, ratio, posterior.b_std ** 2,
                                                         posterior.offdiag_std ** 2)))


@compiled_on_reuse([MATRIX_SPEC, VECTOR_SPEC, MATRIX_SPEC, VECTOR_SPEC, REAL_SPEC, REAL_SPEC, REAL_SPEC, REAL_SPEC])
def _terms(chol: tf.Tensor, u: tf.Tensor, phi: tf.Tensor, prior: tf.Tensor, kernel_variance: tf.Tensor,
           ratio: tf.Tensor, b_var: tf.Tensor, offdiag_var: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    mean = tf.linalg.matvec(phi, u)  # [N]
    half, noise = _noise_terms(chol, u, phi, b_var, offdiag_var)
    nystrom = tf.maximum(prior - tf.reduce_sum(tf.square(phi), axis=1), 0.0)  # k(x, x) - Q(x, x) >= 0
    model = kernel_variance * (nystrom + ratio * tf.reduce_sum(tf.square(half), axis=0))
    return mean, model, noise


def _noise_terms(chol: tf.Tensor, u: tf.Tensor, phi: tf.Tensor, b_var: tf.Tensor,
                 offdiag_var: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """``(L^{-1} phi^T [M, N], the DP noise's first-order variance [N])`` of :func:`predictive_terms`."""
    half = tf.linalg.triangular_solve(chol, tf.transpose(phi), lower=True)  # [M, N]
    h = tf.linalg.triangular_solve(chol, half, lower=True, adjoint=True)  # [M, N]
    u_sq = tf.reduce_sum(tf.square(u))
    noise = ((b_var + offdiag_var * u_sq) * tf.reduce_sum(tf.square(h), axis=0)
             + offdiag_var * tf.square(tf.linalg.matvec(h, u, transpose_a=True)))
    return half, noise


def mean_noise_variance(posterior: WeightPosterior, phi: tf.Tensor) -> float:
    """The mean over the rows of ``phi`` [N, M] (unit-scale features) of :func:`predictive_terms`' DP-noise variance,
    in one call (the same operations). Post-processing."""
    return float(_mean_noise(posterior.chol, posterior.mean, phi, tf.constant(posterior.b_std ** 2, tf.float64),
                             tf.constant(posterior.offdiag_std ** 2, tf.float64)))


@compiled_on_reuse([MATRIX_SPEC, VECTOR_SPEC, MATRIX_SPEC, REAL_SPEC, REAL_SPEC])
def _mean_noise(chol: tf.Tensor, u: tf.Tensor, phi: tf.Tensor, b_var: tf.Tensor, offdiag_var: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean(_noise_terms(chol, u, phi, b_var, offdiag_var)[1])
