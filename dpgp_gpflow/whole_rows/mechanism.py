"""The Gaussian mechanism on the whole-row statistics: one exact draw on one vector, one event.

:func:`statistics_measurement` describes the release as a :class:`~dpgp_gpflow.measurement.Measurement`:
its validated request, the relation ``"row (inputs and outputs)"``, the public checks, and the mechanism
(:func:`release_statistics`) that reads the rows once (:func:`~dpgp_gpflow.whole_rows.statistics.sufficient_statistics`),
packs ``(S, b, q)`` into one vector (:func:`~dpgp_gpflow.whole_rows.sensitivity.pack`), whitens it by the
noise std ``s * Delta`` (``s`` the request's multiplier, ``Delta`` its sensitivity ``sqrt(J) <= 1``
(:func:`~dpgp_gpflow.whole_rows.sensitivity.joint_bound`) inflated for rounding and for the exact sampler's
grid), adds exact grid noise
(:func:`~dpgp_gpflow.sampling.add_whitened_noise`), commits the one event and re-scales (post-processing).
:func:`~dpgp_gpflow.measurement.measure` runs it: checks, one reservation, mechanism.

Privacy assumption: the sensitivity is recomputed here from the public bounds, shares, shapes and chunking
(never taken from outside); the statistics are read only inside the reservation.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, NamedTuple, Sequence, Tuple

import numpy as np

from .. import sampling
from ..accounting import Reservation
from ..measurement import Measurement
from ..mechanisms.request import ReleaseRequest
from ..sampling import gaussian_grid_factor
from ..streaming.chunks import ChunkSource, LocalChunks
from .sensitivity import (
    Scales,
    entry_noise_std,
    joint_bound,
    pack,
    rounding_factor,
    statistic_dimension,
    statistic_scales,
    unpack,
    validate_shares,
)
from .statistics import RowStatistics, sufficient_statistics

__all__ = ["RELATION", "NoisedStatistics", "release_statistics", "statistics_measurement", "statistics_sensitivity"]

#: The neighbouring relation of every whole-row release: one row, inputs and outputs, replaced.
RELATION = "row (inputs and outputs)"


class NoisedStatistics(NamedTuple):
    """What the mechanism released (all public)."""

    statistics: Dict[str, np.ndarray]  #: ``S`` [M, M] (symmetric), ``b`` [M], ``q`` [] as released (unit scale)
    noise_std: Dict[str, np.ndarray]  #: the std of each entry's noise, same keys and shapes
    num_data: int  #: n (public under replace-one)
    sensitivity: float  #: the L2 sensitivity of the packed vector (``sqrt(J)``), rounding and grid included
    multiplier: float  #: s
    shares: Tuple[float, float, float]  #: the squared shares of S, b, q
    reproducible: bool  #: the noise came from an explicit seed (not private)


def statistics_sensitivity(source: ChunkSource, m: int, multiplier: float, shares: Any) -> float:
    """The L2 sensitivity of the packed vector for ``source``'s rows and chunking: ``sqrt(J)`` of the shares
    (:func:`~dpgp_gpflow.whole_rows.sensitivity.joint_bound`), inflated for the sums' rounding
    (:func:`~dpgp_gpflow.whole_rows.sensitivity.rounding_factor`) and for the exact sampler's grid
    (:func:`~dpgp_gpflow.sampling.gaussian_grid_factor`). Public; refuses (``FloatingPointError``) chunks too
    long for a guaranteed float64 sum."""
    chunks = source.chunk_bounds()
    longest = max((stop - start for start, stop in chunks), default=1)
    dimension = statistic_dimension(m)
    return (math.sqrt(joint_bound(shares)) * rounding_factor(int(source.n), longest, len(chunks), m)
            * gaussian_grid_factor(multiplier, dimension))


def release_statistics(request: ReleaseRequest, reservation: Reservation, source: ChunkSource, rows: RowStatistics,
                       *, shares: Any, sensitivity: float) -> NoisedStatistics:
    """Read the rows once, add exact Gaussian noise of std ``s * sensitivity`` to the packed vector, commit the
    request's event into ``reservation`` and return the noised statistics. ``sensitivity``: from
    :func:`statistics_sensitivity` for this source (the caller computes it before reserving). Privacy
    assumption: ``rows`` holds only public pieces; the statistics are PRIVATE until noised here."""
    m = rows.features.m
    lo, hi = rows.y_bounds
    scales: Scales = statistic_scales(hi - lo, shares)
    stats = sufficient_statistics(source, rows)  # PRIVATE
    std = request.multiplier * float(sensitivity)
    z = pack(stats.S, stats.b, stats.q, scales).numpy() / std  # the whitened query: L2 shift <= 1 / (s K)
    noised, reproducible = sampling.add_whitened_noise(z, request.seed)
    reservation.commit(f"whole-row statistics ({statistic_dimension(m)} values, M = {m}, n = {stats.n})")
    return NoisedStatistics(unpack(noised * std, scales, m), entry_noise_std(std, scales, m), stats.n,
                            float(sensitivity), request.multiplier, validate_shares(shares), reproducible)


def statistics_measurement(request: ReleaseRequest, source: ChunkSource, rows: RowStatistics, *, shares: Any,
                           then: Callable[[NoisedStatistics], Any],
                           checks: Sequence[Callable[[], Any]] = ()) -> Measurement:
    """The whole-row release as a :class:`~dpgp_gpflow.measurement.Measurement`: ``checks`` (the caller's, then
    this release's own: source shape, sharing with Dask, shares, sensitivity), one Gaussian event from
    ``request``, and the mechanism :func:`release_statistics` followed by ``then`` (post-processing of the
    noised statistics into the released object, after the commit)."""
    state: Dict[str, float] = {}

    def own_checks() -> None:
        if not isinstance(source, ChunkSource):
            raise TypeError(f"source must be a dpgp_gpflow.streaming.ChunkSource, got {type(source).__name__}")
        if int(source.input_dim) != rows.features.input_dim:
            raise ValueError(f"the chunks have {source.input_dim} input columns, the inducing inputs "
                             f"{rows.features.input_dim}")
        if int(getattr(source, "num_outputs", 1)) != 1:
            raise NotImplementedError(f"the chunks have {source.num_outputs} output columns per row; whole-row "
                                      "releases take one output per row for now")
        if getattr(source, "groups", None) is not None:
            raise NotImplementedError("whole-row releases protect one row; persons (groups=) are not supported yet")
        if request.sampler != "exact":
            raise ValueError("whole-row releases draw with the exact sampler only")
        if not isinstance(source, LocalChunks):  # sent to workers: the kernel must travel as its specification
            rows.features.check_portable()
        validate_shares(shares)
        state["sensitivity"] = statistics_sensitivity(source, rows.features.m, request.multiplier, shares)

    def mechanism(reservation: Reservation) -> Any:
        noised = release_statistics(request, reservation, source, rows, shares=shares,
                                    sensitivity=state["sensitivity"])
        return then(noised)

    return Measurement(request, RELATION, mechanism, checks=(*checks, own_checks),
                       description=f"whole-row statistics (M = {rows.features.m})")
