"""A release's request: its privacy parameters validated once, frozen, and its budget event.

The pipeline (:mod:`dpgp_gpflow.pipeline`) or a public wrapper builds one :class:`ReleaseRequest`
(:func:`release_request`: the only place a release validates epsilon, delta, calibration, objective,
``rtol``, ``tol``, sampler and seed, and computes its noise multiplier) and takes one reservation
(:func:`~dpgp_gpflow.accounting.reserve`) before anything is computed; the mechanisms
(:mod:`.cloaking`, :mod:`.standard`) receive both, neither validate nor reserve, and commit the one
event after the draw. :func:`validate_public_bounds` checks the declared public bounds a mechanism
charges for. Privacy assumption: none of these read the private outputs.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional, Tuple

from ..accounting import PrivacyEvent
from ..calibration import gaussian_multiplier
from ..noise_planning.optimiser import DEFAULT_TOL
from ..noise_planning.rank import candidate_rtols
from ..sampling import MAX_GRID_LOSS, grid_loss, validate_sampler
from ..validation import (
    MAX_MAGNITUDE,
    check_magnitude,
    check_real,
    validate_bounds,
    validate_calibration,
    validate_data_sensitivity,
    validate_delta,
    validate_epsilon,
    validate_seed,
)

__all__ = ["ReleaseRequest", "release_request"]


class ReleaseRequest(NamedTuple):
    """One Gaussian release's privacy parameters, validated once (:func:`release_request`) and frozen.

    The pipeline builds it and takes the one reservation; the mechanisms (:func:`cloak`, :func:`standard`)
    receive both and neither validate nor reserve."""

    epsilon: float
    delta: float
    calibration: str
    objective: Optional[str]  #: the cloaking objective; None for the standard mechanism
    multiplier: float  #: the calibration's unit-sensitivity noise multiplier ``s``
    sampler: str
    seed: Optional[int]

    def event(self, description: str = "") -> PrivacyEvent:
        """The ledger entry of this release (:func:`gaussian_event`)."""
        return gaussian_event(self.epsilon, self.delta, self.multiplier, description)


def release_request(epsilon: Any, delta: Any, *, calibration: Any = "analytic", objective: Optional[str] = "mse",
                    sampler: Any = "exact", seed: Any = None, rtol: Optional[float] = None,
                    tol: Any = DEFAULT_TOL) -> ReleaseRequest:
    """Validate a Gaussian release's parameters (in this order: objective and the cloaking ``rtol`` unless
    the objective is None (:func:`~dpgp_gpflow.noise_planning.rank.candidate_rtols`), sampler, seed, epsilon,
    delta, calibration, the optimiser's ``tol`` (:func:`validate_tol`)) and compute its noise multiplier:
    the only place a release does either, before anything is reserved."""
    if objective is not None:
        candidate_rtols(objective, rtol)  # the objective, then rtol (None: the automatic candidates)
    validate_sampler(sampler)
    seed = validate_seed(seed)
    epsilon, delta = validate_epsilon(epsilon), validate_delta(delta)
    calibration = validate_calibration(calibration)
    validate_tol(tol)
    multiplier = gaussian_multiplier(epsilon, delta, calibration)
    check_multiplier(multiplier, epsilon, delta, calibration, sampler)
    return ReleaseRequest(epsilon, delta, calibration, objective, multiplier, sampler, seed)


def check_multiplier(multiplier: float, epsilon: float, delta: float, calibration: str, sampler: str) -> None:
    """``ValueError`` (before anything is reserved) when the noise multiplier ``s`` of (epsilon, delta) is
    beyond what a release can compute with: outside ``[1 / MAX_MAGNITUDE, MAX_MAGNITUDE]`` (the noise scale
    or the whitening ``1 / (s Delta)`` would over- or underflow float64), or, for the exact sampler, too large
    for its grid even in one dimension (:func:`~dpgp_gpflow.sampling.grid_loss` above ``MAX_GRID_LOSS``: the
    grid's rounding would use more than the budget). Public: the privacy parameters only."""
    what = f"epsilon={epsilon:g} and delta={delta:g} need the noise multiplier s = {multiplier:.3g} ({calibration})"
    if not (math.isfinite(multiplier) and 1.0 / MAX_MAGNITUDE <= multiplier <= MAX_MAGNITUDE):
        raise ValueError(f"{what}, outside [{1.0 / MAX_MAGNITUDE:g}, {MAX_MAGNITUDE:g}]: the noise scale would "
                         "over- or underflow float64; choose a less extreme epsilon or delta (nothing was reserved)")
    if sampler == "exact" and not grid_loss(multiplier, 1.0) <= MAX_GRID_LOSS:
        largest = MAX_GRID_LOSS / grid_loss(1.0, 1.0)
        raise ValueError(f"{what}, beyond the largest the exact sampler's grid resolves ({largest:.3g} for a release "
                         "of rank 1, less for more directions): the noise scale is too large for float64's "
                         "precision; give a larger epsilon or delta (nothing was reserved)")


def validate_tol(tol: Any) -> float:
    """The cloaking optimiser's tolerance (its certificate's duality gap): a finite number > 0
    (``TypeError`` / ``ValueError`` otherwise). Public: it shapes no privacy guarantee, only the noise's
    optimality."""
    tol = check_real("tol", tol)
    if not tol > 0.0:
        raise ValueError(f"tol must be finite and > 0 (the optimiser's duality-gap tolerance), got {tol}")
    return tol


def gaussian_event(epsilon: float, delta: float, multiplier: float, description: str = "") -> PrivacyEvent:
    """The ledger entry of one Gaussian release at noise multiplier ``multiplier`` (``mu = 1 / s``)."""
    return PrivacyEvent(float(epsilon), float(delta), "gaussian", 1.0 / float(multiplier), description)


def validate_public_bounds(data_sensitivity: Any, output_bound: Any,
                           y_bounds: Optional[Tuple[float, float]] = None) -> Tuple[float, float]:
    """The declared data sensitivity ``d`` (finite, at least ``MIN_DATA_SENSITIVITY``, at most the width of
    ``y_bounds`` when given: :func:`~dpgp_gpflow.validation.validate_data_sensitivity`; the bounds themselves as
    :func:`~dpgp_gpflow.validation.validate_bounds` checks a model's) and the bound ``b`` on ``|y_c|`` (finite,
    >= 0, within ``MAX_MAGNITUDE``: the release's arithmetic cannot overflow)."""
    bounds = (-math.inf, math.inf) if y_bounds is None else validate_bounds(y_bounds)
    d = validate_data_sensitivity(data_sensitivity, bounds)
    b = check_real("output_bound", output_bound)
    if not b >= 0.0:
        raise ValueError(f"output_bound must be finite and >= 0, got {b}")
    check_magnitude("output_bound", b)
    return d, b
