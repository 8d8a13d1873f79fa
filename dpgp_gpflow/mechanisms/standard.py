"""The standard mechanism (Hall et al. 2013; docs/mechanisms.md#standard-mechanism): noise from the GP
prior at the test inputs, scaled by the exact RKHS sensitivity.

:func:`standard` releases for a validated request (:mod:`.request`) into the caller's reservation;
:func:`standard_release` is the public wrapper that validates and runs it through
:func:`~dpgp_gpflow.measurement.measure`. Exact noise as in
:mod:`.cloaking`: the whitened query ``L^{-1} mean / (s Delta)`` gets exact grid noise and is
re-coloured with ``L``.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple, Union

import numpy as np
import tensorflow as tf

from .. import sampling
from ..accounting import PrivacyAccountant, Reservation
from ..noise_planning import row_norms
from ..measurement import Measurement, SensitivityPath, measure
from ..released import PrivateRelease
from ..sampling import gaussian_grid_factor
from ..validation import require_finite
from .request import ReleaseRequest, release_request
from .rounding import condition_number, safe_sensitivity

__all__ = ["standard_release"]


def standard_release(
    mean: tf.Tensor,
    variance: tf.Tensor,
    prior_cov: tf.Tensor,
    *,
    sensitivity: float,
    data_sensitivity: float,
    epsilon: float,
    delta: float,
    calibration: str = "analytic",
    seed: Optional[int] = None,
    accountant: Union[PrivacyAccountant, Reservation, None] = None,
    y_bounds: Optional[Tuple[float, float]] = None,
    sampler: str = "exact",
) -> PrivateRelease:
    """Release ``mean + s * sensitivity * G`` with ``G ~ N(0, prior_cov)`` (Hall et al. 2013).

    Privacy assumptions: ``mean`` moves between neighbours by a vector whose Mahalanobis norm
    against ``prior_cov`` is at most ``sensitivity`` (the exact RKHS sensitivity of docs/mechanisms.md#standard-mechanism);
    ``prior_cov`` and ``variance`` are public. Jitter is added to ``prior_cov`` (more noise: safe).

    ``sampler="exact"`` (default): the whitened query ``L^{-1} mean / (s Delta)`` (a triangular solve;
    its rounding is covered by the same condition-number factor as before) gets exact grid noise and is
    re-coloured with ``L``; ``"float"``: the floating-point sampler (warns). See :func:`cloaking_release`.
    """
    request = release_request(epsilon, delta, calibration=calibration, objective=None, sampler=sampler, seed=seed)
    prior_cov = tf.convert_to_tensor(prior_cov, dtype=tf.float64)
    require_finite("standard release", prior_covariance=prior_cov)

    def draw(reservation: Reservation) -> PrivateRelease:  # standard commits the one event after its draw
        return standard(request, reservation, mean, variance, prior_cov, sensitivity=sensitivity,
                        data_sensitivity=data_sensitivity, y_bounds=y_bounds)

    path = SensitivityPath()  # one output of one row (the RKHS sensitivity of one output's change)
    return measure(Measurement(request, path.relation(), draw, path=path), accountant)


def standard(request: ReleaseRequest, reservation: Reservation, mean: Any, variance: Any, prior_cov: Any, *,
             sensitivity: float, data_sensitivity: float,
             y_bounds: Optional[Tuple[float, float]] = None) -> PrivateRelease:
    """The standard mechanism of :func:`standard_release` for a validated ``request`` (and a finite
    ``prior_cov``, checked by the caller), committing its one event into the caller's ``reservation``
    after the draw: it neither validates the privacy parameters nor reserves. ``reservation`` must hold
    ``request``'s event as its next uncommitted one (:meth:`~dpgp_gpflow.accounting.Reservation.expect`:
    ``ValueError`` before anything is drawn), as its commit records the next held event. Privacy assumptions:
    those of :func:`standard_release`."""
    reservation.expect((request.event(),))  # the event committed is the event drawn
    multiplier, seed = request.multiplier, request.seed
    prior_cov = tf.convert_to_tensor(prior_cov, dtype=tf.float64)
    k = int(prior_cov.shape[0])
    description = f"standard (Hall et al.) release of {k} values"
    jitter = 1e-10 * float(tf.reduce_max(tf.linalg.diag_part(prior_cov))) + 1e-300
    chol = tf.linalg.cholesky(prior_cov + jitter * tf.eye(k, dtype=tf.float64))  # [k, k]
    sensitivity = float(safe_sensitivity(float(sensitivity), 1.0, condition_number(chol)))
    if not (math.isfinite(sensitivity) and bool(tf.reduce_all(tf.math.is_finite(chol)))):
        # public (prior covariance and sensitivity only): refused before anything is drawn
        raise FloatingPointError("the standard mechanism's noise scale is not finite (a singular or overflowing "
                                 "prior covariance); nothing was released or charged")
    mean = tf.reshape(tf.cast(mean, tf.float64), [-1])
    if request.sampler == "float":
        sampling.warn_float_sampler(description)
        noise_factor = chol * (multiplier * sensitivity)
        xi, reproducible = sampling.float_standard_normal(k, seed)
        released = mean + tf.linalg.matvec(noise_factor, tf.constant(xi))
    else:  # exact: whiten with L, add grid noise exactly, re-colour with L (post-processing)
        sensitivity = sensitivity * gaussian_grid_factor(multiplier, k)
        noise_factor = chol * (multiplier * sensitivity)
        z = tf.linalg.triangular_solve(chol, mean[:, None], lower=True)[:, 0] / (multiplier * sensitivity)
        z, reproducible = sampling.add_whitened_noise(z.numpy(), seed)
        released = tf.linalg.matvec(noise_factor, tf.constant(z))
    reservation.commit(description)
    return PrivateRelease(
        mean=released.numpy(),
        variance=np.maximum(np.reshape(np.asarray(variance, dtype=np.float64), [-1]), 0.0),  # rounding: never < 0
        noise_std=row_norms(noise_factor).numpy(),
        noise_factor=noise_factor.numpy(),
        epsilon=request.epsilon,
        delta=request.delta,
        data_sensitivity=float(data_sensitivity),
        sensitivity=sensitivity,
        noise_multiplier=float(multiplier),
        calibration=request.calibration,
        objective=None,
        certificate=None,
        mechanism="standard",
        rank=k,
        rtol=None,
        bias_bound=0.0,
        reproducible=reproducible,
        y_bounds=y_bounds,
    )
