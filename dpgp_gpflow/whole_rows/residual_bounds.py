"""The public rules of the residual releases, without TensorFlow: the budget's fractions, the radius, the
sensitivities (residual and histogram stages), the public grids' caps.

A residual release (docs/whole_rows.md#residual-releases) is the whole-row statistics release at a fraction
``f_1`` of the Gaussian-DP budget (``mu_1^2 = f_1 mu^2``) followed by releases ``j = 2 .. J`` of the clipped
residual sums

    b_j = sum_i phi(x_i) clip(y_c,i - phi(x_i)^T u_{j-1}, -R_j, R_j)      [M],

each at ``mu_j^2 = f_j mu^2`` (``sum_j f_j = 1``: the adaptive composition is ``mu``-GDP, the user's
(epsilon, delta)). With ``||phi|| <= 1`` a changed row moves ``b_j`` by ``||phi r - phi' r'|| <= |r| + |r'| <=
2 R_j``, and a person of ``g`` rows by at most ``2 g R_j`` (triangle inequality). ``u_{j-1}`` and
``R_j = min(z sqrt(sigma^2 + v_{j-1}), d)`` are post-processing of the earlier releases (public when the stage
draws): ``v_{j-1}`` the mean first-order DP-noise variance of the previous estimate over public points.

Privacy assumption: public quantities only (the fractions, the noise variance, the released noise variances, the
bounds' width, the shapes and the chunking).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional, Sequence, Tuple

from ..calibration import SENSITIVITY_SAFETY
from ..composition import gdp_fraction_multipliers
from ..sampling import UNIT_ROUNDOFF, gaussian_grid_factor
from .bounds import part_bounds, rounding_slack

__all__: list[str] = []  # internal: the package imports these names by name

#: The default fractions of the Gaussian-DP budget (``mu^2``): half to the statistics release, a quarter to each
#: of two residual releases (fixed with the design study ``benchmarks/whole_rows_headroom.py``, before the
#: benchmark ``benchmarks/whole_rows_residual.py`` ran).
DEFAULT_RESIDUAL_FRACTIONS = (0.5, 0.25, 0.25)
#: ``z`` of the radius rule ``R_j = z sqrt(sigma^2 + v_{j-1})`` (the design study's choice among 1.5, 2, 3, 4).
RESIDUAL_Z = 2.0


#: The most public points the mean DP-noise variance is taken over (:func:`~.residual.radius_points`).
MAX_RADIUS_POINTS = 4096
#: The most cells a histogram first stage counts (public): the most points :func:`~.residual.radius_points` keeps
#: on its grid; a finer grid (high input dimension, short lengthscales) is refused before anything is reserved
#: (:func:`~.histogram.histogram_cells`; a release file's check, :mod:`dpgp_gpflow.io.card`).
MAX_HISTOGRAM_CELLS = MAX_RADIUS_POINTS


def validate_residual_fractions(fractions: Any) -> Optional[Tuple[float, ...]]:
    """None (one release, no residual releases), or the fractions of the budget as a tuple: ``"default"``
    (:data:`DEFAULT_RESIDUAL_FRACTIONS`) or two or more finite numbers > 0 summing to 1 (the first for the
    statistics release, one for each residual release). ``ValueError`` in one line otherwise. Public."""
    if fractions is None:
        return None
    if isinstance(fractions, str) and fractions == "default":
        return DEFAULT_RESIDUAL_FRACTIONS
    message = ("residual_fractions must be None, 'default', 'histogram' (a release's histogram scheme) or two or more "
               "fractions of the budget, each > 0, summing to 1 (the first for the statistics release, one for each "
               "residual release), got " + repr(fractions))
    try:
        items = tuple(fractions)
        gdp_fraction_multipliers(1.0, items)  # the composition's one rule: each finite and > 0, summing to 1
    except (TypeError, ValueError):
        raise ValueError(message) from None
    if isinstance(fractions, str) or len(items) < 2:
        raise ValueError(message)
    values = tuple(float(f) for f in items)
    return values


#: How far below the radius its earlier stages give a recorded radius may be, relative (float rounding only).
RADIUS_BELOW_RTOL = 1e-13
#: How far above the radius its earlier stages give a residual release's recorded radius may be, relative
#: (:func:`radii_replayed`: its loader and its audit).
RESIDUAL_RADIUS_RTOL = 1e-9
#: The same for a histogram residual release (its constructor, which a file's loader runs, and its audit).
HISTOGRAM_RADIUS_RTOL = 1e-12


def radii_replayed(recorded: Any, replayed: Any, rtol: float) -> bool:
    """Whether a staged release's recorded radii are those its earlier stages give (``replayed``, recomputed from
    the released values): as many, each within ``rtol`` above and never more than :data:`RADIUS_BELOW_RTOL` below
    (a stage's noise is ``s Delta 2 R`` of its recorded ``R``: a recorded radius below the replayed one would be less
    noise than the stage's clipping needs). The one rule of the residual and histogram loaders and audits
    (``rtol``: :data:`RESIDUAL_RADIUS_RTOL`, :data:`HISTOGRAM_RADIUS_RTOL`). Public."""
    recorded = [float(r) for r in recorded]
    replayed = [float(r) for r in replayed]
    return len(recorded) == len(replayed) and all(
        abs(a - b) <= rtol * abs(b) and a >= b * (1.0 - RADIUS_BELOW_RTOL) for a, b in zip(recorded, replayed))


def residual_radius(noise_variance: float, dp_variance: float, width: float, z: float = RESIDUAL_Z) -> float:
    """``R_j = min(z sqrt(sigma^2 + v_{j-1}), d)``: the public clipping radius of release ``j``'s residuals from the
    noise variance ``sigma^2``, the mean first-order DP-noise variance ``v_{j-1}`` of the previous estimate
    (post-processing) and the bounds' width ``d`` (a residual of an estimate inside the bounds never needs more).
    ``ValueError`` for a non-finite or non-positive result. Public."""
    radius = min(float(z) * math.sqrt(float(noise_variance) + float(dp_variance)), float(width))
    if not (math.isfinite(radius) and radius > 0.0):
        raise ValueError(f"the residual radius must be finite and > 0, got {radius} (noise variance "
                         f"{noise_variance}, DP-noise variance {dp_variance})")
    return radius


def residual_sensitivity(*, m: int, multiplier: float, num_rows: int, chunk_rows: int, num_chunks: int,
                         person_rows: int = 1) -> float:
    """The L2 sensitivity a residual release charges for its released vector ``b_j / (2 R_j)`` [M], between
    neighbours that differ in one person of at most ``person_rows`` (G) rows: ``G (1 + (M + 4) u)`` (each row's
    term ``phi r / (2 R_j)`` has norm at most ``(1 + (M + 4) u) / 2``: the computed features' norm after their
    unit-norm rescaling, :func:`~dpgp_gpflow.whole_rows.bounds.rounding_factor`, and ``|r| <= R_j`` exactly: the
    residual is clipped), plus the absolute :func:`~dpgp_gpflow.whole_rows.bounds.rounding_slack` of the sums
    (each entry a sum of terms of magnitude at most 1/2), times
    :data:`~dpgp_gpflow.calibration.SENSITIVITY_SAFETY`, inflated for the exact sampler's grid at noise
    ``multiplier`` over M entries (:func:`~dpgp_gpflow.sampling.gaussian_grid_factor`). Public; refuses
    (``FloatingPointError``) chunks too long for a guaranteed float64 sum."""
    return released_sensitivity(m=m, entries=m, multiplier=multiplier, num_rows=num_rows, chunk_rows=chunk_rows,
                                num_chunks=num_chunks, person_rows=person_rows)


def released_sensitivity(*, m: int, entries: int, multiplier: float, num_rows: int, chunk_rows: int,
                         num_chunks: int, person_rows: int = 1) -> float:
    """``(G (1 + (M + 4) u) + slack) SENSITIVITY_SAFETY grid_factor``: the one rule of :func:`residual_sensitivity`
    and :func:`histogram_sensitivity`, for a released vector of ``entries`` sums (each of terms of
    magnitude at most 1, rows of features of ``m`` entries) whose L2 shift per row is at most the computed features'
    norm bound ``1 + (M + 4) u``: :func:`~dpgp_gpflow.whole_rows.bounds.rounding_slack` over ``entries`` sums and the
    sampler's grid factor over ``entries``. Public."""
    G, M, E = int(person_rows), int(m), int(entries)
    if G < 1 or M < 1 or E < M:
        raise ValueError(f"person_rows and m must be >= 1 and entries >= m, got {person_rows!r}, {m!r}, {entries!r}")
    slack = rounding_slack(num_rows, chunk_rows, num_chunks, E)
    return (G * (1.0 + (M + 4) * UNIT_ROUNDOFF) + slack) * SENSITIVITY_SAFETY * gaussian_grid_factor(multiplier, E)


def histogram_sensitivity(*, m: int, num_cells: int, multiplier: float, num_rows: int, chunk_rows: int,
                          num_chunks: int, person_rows: int = 1) -> float:
    """The L2 sensitivity the histogram stage charges for its released vector (:mod:`.histogram`) between
    neighbours that differ in one person of at most ``person_rows`` (G) rows: ``G (1 + (M + 4) u)`` (the counts'
    part moves by at most ``G w_n`` exactly, integers; ``b``'s by ``G w_b`` times the computed features' norm
    bound ``1 + (M + 4) u``), plus the absolute :func:`~.bounds.rounding_slack` of the ``C + M`` sums (each entry a
    sum of terms of magnitude at most 1, the counts' scaling included), times
    :data:`~dpgp_gpflow.calibration.SENSITIVITY_SAFETY`, inflated for the exact sampler's grid over ``C + M``
    entries (:func:`~dpgp_gpflow.sampling.gaussian_grid_factor`). Public; ``FloatingPointError`` for chunks too
    long for a guaranteed float64 sum."""
    if int(num_cells) < 1:
        raise ValueError(f"num_cells must be >= 1, got {num_cells!r}")
    return released_sensitivity(m=m, entries=int(num_cells) + int(m), multiplier=multiplier, num_rows=num_rows,
                                chunk_rows=chunk_rows, num_chunks=num_chunks, person_rows=person_rows)


#: The L2 bound on the histogram's counts' shift when one row is replaced: it leaves one cell and enters one (the
#: counts are ``S``'s diagonal for the cells' one-hot features: ``S``'s bound, :func:`~.bounds.part_bounds`).
COUNT_BOUND = part_bounds(1.0)[0]


class HistogramNoise(NamedTuple):
    """The histogram stage's scales and noise stds (:func:`histogram_noise_stds`, public)."""

    shares: Tuple[float, float]  #: ``(w_n^2, w_b^2)``, normalised to sum 1
    counts_scale: float  #: ``a_n = w_n / sqrt(2)``
    b_scale: float  #: ``a_b = w_b / d``
    std: float  #: ``s Delta``, the noise std of every entry of the released (scaled) vector
    counts_std: float  #: ``s Delta / a_n``, each count's noise std
    b_std: float  #: ``s Delta / a_b``, each entry of ``b``'s noise std


def histogram_share_pair(w_n2: float, w_b2: float) -> Tuple[float, float]:
    """The counts' and ``b``'s squared shares normalised to sum 1 (``math.fsum``). Public."""
    total = math.fsum((float(w_n2), float(w_b2)))
    return float(w_n2) / total, float(w_b2) / total


def histogram_noise_stds(multiplier: float, sensitivity: float, shares: Sequence[float],
                         width: float) -> HistogramNoise:
    """The one rule of the histogram stage's noise (:mod:`.histogram`): the squared shares ``(w_n^2, w_b^2)``
    normalised to sum 1 (``math.fsum``), the scales ``a_n = w_n / sqrt(2)`` and ``a_b = w_b / d`` (the parts'
    bounds, :func:`~.bounds.part_bounds` of the bounds' ``width`` ``d``), and the noise stds ``s Delta / a_n`` of the
    counts and ``s Delta / a_b`` of ``b`` at ``multiplier`` ``s`` and ``sensitivity`` ``Delta``. The release and
    a release file's check (:func:`~dpgp_gpflow.io.card.histogram_card`) both call it. Public."""
    w_n2, w_b2 = histogram_share_pair(*shares)
    a_n, a_b = math.sqrt(w_n2) / COUNT_BOUND, math.sqrt(w_b2) / part_bounds(width)[1]  # b's bound: d
    std = float(multiplier) * float(sensitivity)
    return HistogramNoise((w_n2, w_b2), a_n, a_b, std, std / a_n, std / a_b)
