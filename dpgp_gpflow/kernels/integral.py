"""The squared-exponential kernel integrated over axis-aligned boxes (AISTATS supplementary).

A box is a row ``[lower_1, ..., lower_D, upper_1, ..., upper_D]`` (2D columns). With the EQ
kernel ``k(x, x') = variance * exp(-sum_d (x_d - x'_d)^2 / (2 l_d^2))`` (GPflow's convention) and
``F(B) = int_B f(x) dx``:

- ``K(B, B') = int_B int_B' k(x, x') dx' dx = variance * prod_d I_d`` (:meth:`IntegralSE.K`),
- ``K_box_point(B, x) = int_B k(u, x) du = variance * prod_d J_d`` (cross-covariance of F and f),

each factor in closed form via erf/erfc. Observations are bin *integrals* (bin mean times bin
volume). Zero-width boxes (``lower == upper`` in some dimension) have zero volume, so their rows
are exactly zero; tiny boxes behave like point evaluations of the EQ kernel scaled by the volumes
(evaluated with a Taylor expansion where a half-width is below 1e-2 lengthscales, which avoids the
cancellation of the erf differences). ``lower > upper`` gives the oriented (negative) integral;
kernel matrices are positive semi-definite only for ``lower <= upper``.
"""

from __future__ import annotations

from typing import Optional, Tuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import MeanAndVariance, Parameter, TensorType
from gpflow.utilities import positive
from gpflow.utilities.model_utils import add_likelihood_noise_cov

__all__ = ["IntegralSE", "predict_f_at_points"]

#: Half-widths below this many lengthscales use the Taylor expansion (error ~ 1e-12 relative).
_TAYLOR_THRESHOLD = 1e-2
_SQRT_HALF_PI = float(np.sqrt(np.pi / 2.0))
_SQRT2 = float(np.sqrt(2.0))


def _eq(y: tf.Tensor, ell: tf.Tensor) -> tf.Tensor:
    """``phi(y) = exp(-y^2 / (2 l^2))``."""
    return tf.exp(-0.5 * tf.square(y / ell))


@check_shapes(
    "z: [broadcast shape...]",
    "h: [broadcast shape...]",
    "ell: [broadcast shape...]",
    "return: [shape...]",
)
def interval_point(z: tf.Tensor, h: tf.Tensor, ell: tf.Tensor) -> tf.Tensor:
    """``int_{-h}^{h} phi(z + s) ds`` elementwise, broadcasting (``h < 0``: oriented, negative).

    The 1-D factor of :meth:`IntegralSE.K_box_point`: an interval of centre ``m`` and half-width
    ``h`` against a point ``x`` has ``z = m - x``.
    """
    a = tf.abs(h)
    az = tf.abs(z)  # the integral is even in z
    lo = (az - a) / (_SQRT2 * ell)
    hi = (az + a) / (_SQRT2 * ell)
    # erf(hi) - erf(lo), without cancellation when both are close to 1.
    erf_diff = tf.where(
        lo >= 0.0, tf.math.erfc(lo) - tf.math.erfc(hi), tf.math.erf(hi) + tf.math.erf(-lo)
    )
    exact = _SQRT_HALF_PI * ell * erf_diff
    v2 = tf.square(z / ell)
    a2 = tf.square(a / ell)
    taylor = (
        2.0
        * a
        * _eq(z, ell)
        * (1.0 + (v2 - 1.0) * a2 / 6.0 + (v2 * v2 - 6.0 * v2 + 3.0) * a2 * a2 / 120.0)
    )
    small = a < _TAYLOR_THRESHOLD * ell
    return tf.sign(h) * tf.where(small, taylor, exact)


@check_shapes(
    "z: [broadcast shape...]",
    "h1: [broadcast shape...]",
    "h2: [broadcast shape...]",
    "ell: [broadcast shape...]",
    "return: [shape...]",
)
def interval_interval(z: tf.Tensor, h1: tf.Tensor, h2: tf.Tensor, ell: tf.Tensor) -> tf.Tensor:
    """``int_{-h1}^{h1} int_{-h2}^{h2} phi(z + s - t) dt ds`` elementwise, broadcasting (oriented).

    The 1-D factor of :meth:`IntegralSE.K`: intervals of centres ``m1, m2`` and half-widths
    ``h1, h2`` have ``z = m1 - m2``.
    """
    a1, a2 = tf.abs(h1), tf.abs(h2)
    az = tf.abs(z)
    c = _SQRT_HALF_PI * ell

    # Exact: second difference of g(y) = y Phi1(y) + l^2 phi(y), g'' = phi, split as
    # g(y) = c |y| + r(y) so the linear growth of g cancels exactly (no far-field cancellation).
    def r(y: tf.Tensor) -> tf.Tensor:
        ay = tf.abs(y)
        return tf.square(ell) * _eq(y, ell) - c * ay * tf.math.erfc(ay / (_SQRT2 * ell))

    p = a1 + a2
    q = tf.abs(a1 - a2)
    exact = (
        2.0 * c * (tf.maximum(az, p) - tf.maximum(az, q))
        + (r(az + p) + r(az - p))
        - (r(az + q) + r(az - q))
    )

    phi = _eq(z, ell)
    v2 = tf.square(z / ell)
    s1, s2 = tf.square(a1 / ell), tf.square(a2 / ell)
    both_small = (
        4.0
        * a1
        * a2
        * phi
        * (
            1.0
            + (v2 - 1.0) * (s1 + s2) / 6.0
            + (v2 * v2 - 6.0 * v2 + 3.0)
            * (s1 * s1 / 5.0 + 2.0 * s1 * s2 / 3.0 + s2 * s2 / 5.0)
            / 24.0
        )
    )

    def one_small(a_big: tf.Tensor, a_small: tf.Tensor) -> tf.Tensor:
        # int_{-a_small}^{a_small} F(z - t) dt with F(y) = int_{-a_big}^{a_big} phi(y + s) ds.
        zp, zm = (z + a_big) / ell, (z - a_big) / ell
        d2 = -(zp * _eq(z + a_big, ell) - zm * _eq(z - a_big, ell)) / ell  # F''
        d4 = (
            -(  # F'''' = phi'''(z + a) - phi'''(z - a)
                (zp**3 - 3.0 * zp) * _eq(z + a_big, ell) - (zm**3 - 3.0 * zm) * _eq(z - a_big, ell)
            )
            / ell**3
        )
        sq = tf.square(a_small)
        return (
            2.0 * a_small * (interval_point(z, a_big, ell) + d2 * sq / 6.0 + d4 * sq * sq / 120.0)
        )

    small1 = a1 < _TAYLOR_THRESHOLD * ell
    small2 = a2 < _TAYLOR_THRESHOLD * ell
    value = tf.where(
        small1 & small2,
        both_small,
        tf.where(small2, one_small(a1, a2), tf.where(small1, one_small(a2, a1), exact)),
    )
    return tf.sign(h1) * tf.sign(h2) * value


class IntegralSE(gpflow.kernels.Kernel):
    """Covariance of integrals of an EQ-kernel GP over axis-aligned boxes.

    Inputs are boxes, rows ``[lower_1..lower_D, upper_1..upper_D]`` (2D columns, rank 2, no
    ``active_dims``). ``K``/``K_diag`` give ``cov(F(B), F(B'))`` with ``F(B) = int_B f``, where
    ``f ~ GP(0, variance * exp(-|x - x'|^2 / (2 l^2)))`` (ARD ``lengthscales``, GPflow
    convention); :meth:`K_box_point` gives ``cov(F(B), f(x))`` and :meth:`K_point` the EQ kernel
    of ``f`` itself. Use it as the kernel of ``gpflow.models.GPR`` on (boxes, bin integrals) and
    predict ``f`` at points with :func:`predict_f_at_points`.
    """

    @check_shapes(
        "lengthscales: [broadcast n_dims]",
        "variance: []",
    )
    def __init__(
        self, lengthscales: TensorType = 1.0, variance: TensorType = 1.0, name: Optional[str] = None
    ) -> None:
        """
        :param lengthscales: EQ lengthscale(s), scalar or one per input dimension D.
        :param variance: EQ kernel variance (the variance of f at a point).
        :param name: optional module name.
        """
        super().__init__(name=name)
        self.lengthscales = Parameter(lengthscales, transform=positive())
        self.variance = Parameter(variance, transform=positive())

    def _check_dims(self, n_dims: Optional[int], what: str) -> None:
        n_ls = self.lengthscales.shape[0] if self.lengthscales.shape.rank == 1 else None
        if n_ls is not None and n_dims is not None and n_ls != n_dims:
            raise ValueError(f"{what} has {n_dims} dimensions but lengthscales has {n_ls}")

    @check_shapes(
        "boxes: [N, D2]",
        "return[0]: [N, D]",
        "return[1]: [N, D]",
    )
    def centres_and_half_widths(self, boxes: TensorType) -> Tuple[tf.Tensor, tf.Tensor]:
        """Box centres and (signed) half-widths ``(upper - lower) / 2``."""
        boxes = tf.convert_to_tensor(boxes, dtype=gpflow.config.default_float())
        if boxes.shape.rank is not None and boxes.shape.rank != 2:
            raise ValueError(f"boxes must have rank 2 [N, 2D], got shape {boxes.shape}")
        n_cols = boxes.shape[-1]
        if n_cols is None:
            raise ValueError("boxes must have a known number of columns 2D")
        if n_cols % 2 != 0:
            raise ValueError(f"boxes must have 2D columns [lower..., upper...], got {n_cols}")
        D = n_cols // 2
        self._check_dims(D, "boxes")
        lower, upper = boxes[:, :D], boxes[:, D:]
        return 0.5 * (lower + upper), 0.5 * (upper - lower)

    @inherit_check_shapes
    def K(self, X: TensorType, X2: Optional[TensorType] = None) -> tf.Tensor:
        m1, h1 = self.centres_and_half_widths(X)  # [N, D]
        m2, h2 = (m1, h1) if X2 is None else self.centres_and_half_widths(X2)  # [M, D]
        z = m1[:, None, :] - m2[None, :, :]  # [N, M, D]
        factors = interval_interval(z, h1[:, None, :], h2[None, :, :], self.lengthscales)
        return self.variance * tf.reduce_prod(factors, axis=-1)  # [N, M]

    @inherit_check_shapes
    def K_diag(self, X: TensorType) -> tf.Tensor:
        _, h = self.centres_and_half_widths(X)  # [N, D]
        factors = interval_interval(tf.zeros_like(h), h, h, self.lengthscales)
        return self.variance * tf.reduce_prod(factors, axis=-1)  # [N]

    @check_shapes(
        "boxes: [N, D2]",
        "points: [P, D]",
        "return: [N, P]",
    )
    def K_box_point(self, boxes: TensorType, points: TensorType) -> tf.Tensor:
        """``cov(F(box), f(point)) = int_box k(u, point) du``."""
        m, h = self.centres_and_half_widths(boxes)  # [N, D]
        points = tf.convert_to_tensor(points, dtype=m.dtype)
        if (
            points.shape[-1] is not None
            and m.shape[-1] is not None
            and points.shape[-1] != m.shape[-1]
        ):
            raise ValueError(
                f"points have {points.shape[-1]} columns but boxes have D = {m.shape[-1]}"
            )
        z = m[:, None, :] - points[None, :, :]  # [N, P, D]
        factors = interval_point(z, h[:, None, :], self.lengthscales)
        return self.variance * tf.reduce_prod(factors, axis=-1)

    @check_shapes(
        "points: [P, D]",
        "points2: [P2, D]",
        "return: [P, P2] if points2 is not None",
        "return: [P, P] if points2 is None",
    )
    def K_point(self, points: TensorType, points2: Optional[TensorType] = None) -> tf.Tensor:
        """The EQ kernel of the integrand f at ordinary points."""
        points = tf.convert_to_tensor(points, dtype=gpflow.config.default_float())
        self._check_dims(points.shape[-1], "points")
        points2 = points if points2 is None else tf.convert_to_tensor(points2, dtype=points.dtype)
        diff = (points[:, None, :] - points2[None, :, :]) / self.lengthscales  # [P, P2, D]
        return self.variance * tf.exp(-0.5 * tf.reduce_sum(tf.square(diff), axis=-1))


@check_shapes(
    "Xpoints: [P, D]",
    "return[0]: [P, Q]",
    "return[1]: [Q, P, P] if full_cov",
    "return[1]: [P, Q] if not full_cov",
)
def predict_f_at_points(
    model: gpflow.models.GPR, Xpoints: TensorType, *, full_cov: bool = False
) -> MeanAndVariance:
    """Posterior mean and variance of the integrand f at points, from a GPR trained on boxes.

    ``model`` is a ``gpflow.models.GPR`` with an :class:`IntegralSE` kernel, boxes as inputs,
    bin integrals as outputs and a zero mean function. Same algebra as ``GPR.predict_f``
    (``gpflow.conditionals.base_conditional``) with ``K_box_point`` as the cross-covariance and
    the EQ kernel at the points as the prior. The noise is ``model.likelihood.variance_at(X)``,
    so per-bin noise (e.g. Laplace noise on bin means, scaled by the volumes) may be given as a
    ``gpflow.likelihoods.Gaussian`` with a variance function.
    """
    if not isinstance(model, gpflow.models.GPR):
        raise TypeError(f"model must be a gpflow.models.GPR, got {type(model).__name__}")
    kernel = model.kernel
    if not isinstance(kernel, IntegralSE):
        raise TypeError(f"model.kernel must be an IntegralSE, got {type(kernel).__name__}")
    if not isinstance(model.mean_function, gpflow.mean_functions.Zero):
        raise ValueError(
            "predict_f_at_points needs a Zero mean function (a mean of the bin integrals does "
            f"not define the mean of f at points), got {type(model.mean_function).__name__}"
        )
    X, Y = model.data  # boxes [N, 2D], integrals [N, Q]
    Xpoints = tf.convert_to_tensor(Xpoints, dtype=gpflow.config.default_float())
    kmm = kernel.K(X)  # [N, N]
    kmm_plus_s = add_likelihood_noise_cov(kmm, model.likelihood, X)
    kmn = kernel.K_box_point(X, Xpoints)  # [N, P]
    if full_cov:
        knn = kernel.K_point(Xpoints)  # [P, P]
    else:
        knn = kernel.variance * tf.ones(tf.shape(Xpoints)[:1], dtype=Xpoints.dtype)  # [P]
    return gpflow.conditionals.base_conditional(
        kmn, kmm_plus_s, knn, Y, full_cov=full_cov, white=False
    )
