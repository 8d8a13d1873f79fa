"""Predictors from a :class:`~.mechanism.BinRelease`: the bin value, a GP on the bin centres and a
GP on the bin integrals (:class:`~dpgp_gpflow.kernels.GridIntegralSE`).

Privacy assumption: they read only the release (already DP) and public choices (grid, bounds,
kernel hyperparameters, a public per-output noise variance), so they are post-processing at no
further privacy cost; hyperparameters may even be trained on the release (never on raw outputs).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import MeanAndVariance, RegressionData, TensorType

from ..kernels import GridIntegralSE, IntegralSE, predict_f_at_points
from ..validation import as_inputs, check_real
from .bins import Bins
from .mechanism import BinRelease

__all__ = [
    "BinNoiseVariance", "IntegralGPR", "fit_gp_on_bins", "fit_integral_gp", "predict_bin_value",
    "predict_integral_gp",
]

#: Relative floor of the per-bin likelihood variance (a fraction of the prior variance of the
#: observation), so that noise-free bins (no DP, no sampling noise) still give a stable Cholesky.
NOISE_FLOOR = 1e-6


def _check_release(release: Any) -> BinRelease:
    if not isinstance(release, BinRelease):
        raise TypeError(f"release must be a BinRelease, got {type(release).__name__}")
    return release


def _check_positive(name: str, value: Any) -> float:
    value = check_real(name, value)
    if value <= 0.0:
        raise ValueError(f"{name} must be finite and > 0, got {value}")
    return value


@check_shapes("return: [M]")
def predict_bin_value(release: BinRelease, Xnew: Any, *, outside: str = "nearest") -> np.ndarray:
    """Simple binning: the released value of the bin containing each row of ``Xnew`` (``[M]``).

    Points outside the grid get the value of the nearest bin (``outside="nearest"``, per-axis
    clipping of the bin index) or the public prior mean ``release.empty_value``
    (``outside="prior"``). Empty bins give ``release.empty_value``.
    """
    release = _check_release(release)
    if outside not in ("nearest", "prior"):
        raise ValueError(f"outside must be 'nearest' or 'prior', got {outside!r}")
    index, inside = release.bins.locate(Xnew)
    value = release.mean[index]
    if outside == "prior":
        value = np.where(inside, value, release.empty_value)
    return value


class BinNoiseVariance(gpflow.functions.Function):
    """Likelihood variance of a GP fitted to released bins: the variance of the bin at each input.

    ``variances[j]`` is the noise variance of observation ``j`` (bin ``j``). Called with points
    (``inputs="points"``, ``[N, D]``) or boxes (``inputs="boxes"``, ``[N, 2D]``, located by their
    centres), it returns ``[N, 1]``: the variance of the bin containing each point (the nearest bin
    outside the grid). Use as ``gpflow.likelihoods.Gaussian(variance=BinNoiseVariance(...))``.
    """

    def __init__(self, bins: Bins, variances: Any, inputs: str = "points") -> None:
        super().__init__()
        if not isinstance(bins, Bins):
            raise TypeError(f"bins must be a Bins, got {type(bins).__name__}")
        if inputs not in ("points", "boxes"):
            raise ValueError(f"inputs must be 'points' or 'boxes', got {inputs!r}")
        variances = np.asarray(variances, dtype=np.float64).reshape(-1)
        if variances.size != bins.n_bins:
            raise ValueError(f"variances must have one value per bin ({bins.n_bins}), got {variances.size}")
        self.inputs = inputs
        self._D = bins.ndim
        self._shape = bins.shape
        self._inner = [tf.constant(e[1:-1][None, :], dtype=tf.float64) for e in bins.edges]
        self._variances = tf.constant(variances, dtype=tf.float64)

    @inherit_check_shapes
    def __call__(self, X: TensorType) -> tf.Tensor:
        X = tf.convert_to_tensor(X, dtype=tf.float64)
        if self.inputs == "boxes":
            X = 0.5 * (X[:, : self._D] + X[:, self._D :])
        flat = tf.zeros(tf.shape(X)[:1], dtype=tf.int64)
        for d in range(self._D):
            if self._shape[d] == 1:
                k = tf.zeros(tf.shape(X)[:1], dtype=tf.int64)
            else:
                # the number of inner edges <= x: the bin index, clipped to the grid by construction
                k = tf.searchsorted(self._inner[d], X[None, :, d], side="right", out_type=tf.int64)[0]
            flat = flat * self._shape[d] + k
        return tf.gather(self._variances, flat)[:, None]


def _bin_variance_of_mean(release: BinRelease, noise_variance: Optional[float]) -> np.ndarray:
    """``[B]`` variance of each released bin mean around f: Laplace ``2 b^2`` plus ``sigma^2 / n``."""
    sampling = 0.0
    if noise_variance is not None:
        sampling = check_real("noise_variance", noise_variance)
        if sampling < 0.0:
            raise ValueError(f"noise_variance must be finite and >= 0, got {sampling}")
    counts = np.maximum(release.counts, 1)
    return release.noise_variance + sampling / counts


def _default_kernel(release: BinRelease) -> gpflow.kernels.Kernel:
    widths = np.array([np.mean(np.diff(e)) for e in release.bins.edges])
    half = 0.5 * (release.y_bounds[1] - release.y_bounds[0])
    return gpflow.kernels.SquaredExponential(lengthscales=2.0 * widths, variance=(half / 2.0) ** 2)


def fit_gp_on_bins(
    release: BinRelease,
    kernel: Optional[gpflow.kernels.Kernel] = None,
    noise_variance: Optional[float] = None,
) -> gpflow.models.GPR:
    """A ``gpflow.models.GPR`` on the centres of the occupied bins, observing their released means.

    Observation ``j`` has its own noise variance (heteroscedastic, a :class:`BinNoiseVariance`
    likelihood): the Laplace noise variance ``2 b_j^2`` plus ``noise_variance / n_j`` (the public
    per-output noise variance, averaged over the bin's ``n_j`` outputs; default 0), floored at
    ``NOISE_FLOOR`` times the kernel's prior variance. Empty bins carry no data and are left out.
    The mean function is the constant ``release.empty_value`` (public, not trainable), so
    ``model.predict_f(Xnew)`` returns predictions on the scale of ``y``.

    ``kernel`` defaults to an EQ kernel with lengthscales twice the mean bin width per axis and
    variance ``((hi - lo) / 4)^2``: public defaults from the grid and bounds only. The variance
    function is fixed; the kernel may be trained on the release (post-processing).
    """
    release = _check_release(release)
    if kernel is None:
        kernel = _default_kernel(release)
    occ = release.occupied
    if not np.any(occ):
        raise ValueError("the release has no occupied bins: nothing to fit")
    variances = _bin_variance_of_mean(release, noise_variance)
    prior_var = float(np.max(kernel.K_diag(release.centres[occ][:1]).numpy()))
    variances = np.maximum(variances, NOISE_FLOOR * prior_var)
    likelihood = gpflow.likelihoods.Gaussian(
        variance=BinNoiseVariance(release.bins, variances, "points"), variance_lower_bound=0.0
    )
    mean = gpflow.functions.Constant(np.array([release.empty_value]))
    gpflow.set_trainable(mean, False)
    data = (release.centres[occ], release.mean[occ].reshape(-1, 1))
    return gpflow.models.GPR(data, kernel, mean_function=mean, likelihood=likelihood)


class IntegralGPR(gpflow.models.GPR):
    """A ``GPR`` on boxes observing integrals of ``f - m0``, with an :class:`IntegralSE` kernel and a
    zero mean function, that keeps the public constant ``m0`` (:attr:`y_prior_mean`) to add back.

    ``predict_f`` gives the posterior of box integrals (of ``f - m0``); :meth:`predict_f_points`
    gives ``f`` itself at points. Made by :func:`fit_integral_gp`.
    """

    def __init__(
        self,
        data: RegressionData,
        kernel: IntegralSE,
        likelihood: gpflow.likelihoods.Gaussian,
        *,
        y_prior_mean: float,
    ) -> None:
        """
        :param data: boxes ``[N, 2D]`` and the integrals of ``f - m0`` over them ``[N, 1]``.
        :param kernel: an :class:`IntegralSE` (e.g. :class:`GridIntegralSE`).
        :param likelihood: Gaussian, its variance possibly a :class:`BinNoiseVariance` over boxes.
        :param y_prior_mean: ``m0``, the public prior mean of ``f`` (the centring constant).
        """
        if not isinstance(kernel, IntegralSE):
            raise TypeError(f"kernel must be an IntegralSE, got {type(kernel).__name__}")
        super().__init__(data, kernel, likelihood=likelihood)
        self.y_prior_mean: float = check_real("y_prior_mean", y_prior_mean)

    @check_shapes(
        "Xnew: [M, D]",
        "return[0]: [M, Q]",
        "return[1]: [Q, M, M] if full_cov",
        "return[1]: [M, Q] if not full_cov",
    )
    def predict_f_points(self, Xnew: TensorType, *, full_cov: bool = False) -> MeanAndVariance:
        """Posterior mean and variance of ``f`` at points: ``m0 + E[f - m0 | bins]``."""
        mean, var = predict_f_at_points(self, Xnew, full_cov=full_cov)
        return mean + tf.cast(self.y_prior_mean, mean.dtype), var


def fit_integral_gp(
    release: BinRelease,
    lengthscales: Any,
    variance: float,
    noise_variance: Optional[float] = None,
) -> IntegralGPR:
    """An :class:`IntegralGPR` (a ``gpflow.models.GPR``) with a :class:`GridIntegralSE` kernel on the
    bins (an ``IntegralSE`` that exploits the grid: same values, much faster for many bins).

    Each occupied bin is an observation of ``int_bin (f - m0)``: its centred released mean times its
    volume, ``(mean_j - m0) * V_j`` with the public prior mean ``m0 = release.empty_value`` (the
    integral kernel needs a zero mean function), kept as ``model.y_prior_mean``. The noise variance
    of observation ``j`` is ``V_j^2 (2 b_j^2 + noise_variance / n_j)`` (a :class:`BinNoiseVariance`
    over boxes), floored at ``NOISE_FLOOR`` times the kernel's prior variance of that integral.
    Predict ``f`` at points with :func:`predict_integral_gp` (numpy) or ``model.predict_f_points``.
    ``lengthscales``/``variance`` are the EQ kernel's, in the units of the inputs and of ``y``;
    choose them without the private outputs (or from the release: post-processing).
    """
    release = _check_release(release)
    variance = _check_positive("variance", variance)
    occ = release.occupied
    if not np.any(occ):
        raise ValueError("the release has no occupied bins: nothing to fit")
    kernel = GridIntegralSE(release.bins, lengthscales=lengthscales, variance=variance)
    boxes = release.boxes[occ]
    volumes = release.volumes
    variances = volumes**2 * _bin_variance_of_mean(release, noise_variance)
    kdiag = np.zeros(release.n_bins)
    kdiag[occ] = kernel.K_diag(boxes).numpy()
    variances = np.maximum(variances, NOISE_FLOOR * kdiag)
    likelihood = gpflow.likelihoods.Gaussian(
        variance=BinNoiseVariance(release.bins, variances, "boxes"), variance_lower_bound=0.0
    )
    m0 = release.empty_value
    Y = ((release.mean[occ] - m0) * volumes[occ]).reshape(-1, 1)
    return IntegralGPR((boxes, Y), kernel, likelihood, y_prior_mean=m0)


@check_shapes(
    "return[0]: [M, 1]",
    "return[1]: [1, M, M] if full_cov",
    "return[1]: [M, 1] if not full_cov",
)
def predict_integral_gp(
    model: gpflow.models.GPR, Xnew: Any, *, full_cov: bool = False, prior_mean: Optional[float] = None
) -> Tuple[np.ndarray, np.ndarray]:
    """Posterior mean and variance of ``f`` at points from :func:`fit_integral_gp` (numpy).

    The mean is ``m0 + E[f - m0 | bins]`` with ``m0 = prior_mean`` if given, else the model's
    ``y_prior_mean`` (an :class:`IntegralGPR`; a plain ``GPR`` on box integrals needs
    ``prior_mean``). Returns ``(mean [M, 1], var [M, 1])`` (``[1, M, M]`` covariance with
    ``full_cov``).
    """
    if prior_mean is None:
        if not isinstance(model, IntegralGPR):
            raise ValueError(
                f"a {type(model).__name__} has no y_prior_mean: pass prior_mean (the public centring "
                "constant), or fit the model with fit_integral_gp"
            )
        prior_mean = model.y_prior_mean
    prior_mean = check_real("prior_mean", prior_mean)
    Xnew = as_inputs("Xnew", Xnew, int(model.data[0].shape[1]) // 2)
    mean, var = predict_f_at_points(model, tf.constant(Xnew), full_cov=full_cov)
    return mean.numpy() + prior_mean, var.numpy()
