"""The Gaussian mechanism on the whole-row statistics: one exact draw on one vector, one event.

:func:`statistics_measurement` describes the release as a :class:`~dpgp_gpflow.measurement.Measurement`:
its validated request, the relation ``"row (inputs and outputs)"``, the public checks, and the mechanism
(:func:`release_statistics`) that reads the rows once (:func:`~dpgp_gpflow.whole_rows.statistics.sufficient_statistics`),
packs ``(S, b, q)`` into one vector (:func:`~dpgp_gpflow.whole_rows.sensitivity.packed`), whitens it by the
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
from ..measurement import Measurement, SensitivityPath
from ..mechanisms.request import ReleaseRequest
from ..relations import largest_person, whole_rows_relation
from ..streaming.chunks import ChunkSource, person_starts, source_persons
from ..validation import validate_groups
from .bounds import released_sensitivity
from .sensitivity import (
    Scales,
    entry_noise_std,
    packed,
    statistic_dimension,
    statistic_scales,
    unpack,
    validate_shares,
)
from .statistics import GridStatistics, RowStatistics, grid_statistics, sufficient_statistics

__all__: list[str] = []  # internal: the package imports these names by name

#: The neighbouring relation of a whole-row release without persons: one row, inputs and outputs, replaced.
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
    person_rows: int = 1  #: the most rows of one person protected together (public)
    chunking: Tuple[int, int] = (0, 0)  #: the longest chunk's rows and the number of chunks summed (public)


def chunking(source: ChunkSource) -> Tuple[int, int]:
    """``(longest chunk's rows, number of chunks)`` of ``source``: the public chunking the sums' rounding (so the
    sensitivity) depends on, recorded in the release (its file's checks recompute the sensitivity from it)."""
    chunks = source.chunk_bounds()
    return max((stop - start for start, stop in chunks), default=1), len(chunks)


def statistics_sensitivity(source: ChunkSource, m: int, multiplier: float, shares: Any, *, person_rows: int = 1,
                           blocks: int = 1) -> float:
    """The L2 sensitivity of the released vector (``blocks`` packed vectors, one per candidate feature map) for
    ``source``'s rows and chunking (:func:`chunking`) and persons of at most ``person_rows`` rows: ``G sqrt(B J)``
    (:func:`~dpgp_gpflow.whole_rows.sensitivity.person_sensitivity`), plus the sums' rounding, inflated for the
    exact sampler's grid (:func:`~dpgp_gpflow.whole_rows.bounds.released_sensitivity`). Public; refuses
    (``FloatingPointError``) chunks too long for a guaranteed float64 sum."""
    longest, count = chunking(source)
    return released_sensitivity(shares, m=m, multiplier=multiplier, num_rows=int(source.n), chunk_rows=longest,
                                num_chunks=count, person_rows=person_rows, blocks=blocks)


def relation(person_rows: int = 1) -> str:
    """The relation a whole-row release records: :data:`RELATION` for one row, ``"person (groups, up to G rows)
    (inputs and outputs)"`` for persons of at most G rows (:func:`~dpgp_gpflow.relations.whole_rows_relation`)."""
    return whole_rows_relation(person_rows)


def release_statistics(request: ReleaseRequest, reservation: Reservation, source: ChunkSource, rows: Any,
                       *, shares: Any, sensitivity: float, person_rows: int = 1) -> Any:
    """Read the rows once, add exact Gaussian noise of std ``s * sensitivity`` to the released vector (the packed
    statistics of every candidate of ``rows``, concatenated), commit the request's one event into ``reservation``
    and return the noised statistics: one :class:`NoisedStatistics` for a :class:`RowStatistics`, a tuple of them
    (in the candidates' order) for a :class:`GridStatistics`. ``sensitivity``: from :func:`statistics_sensitivity`
    for this source, persons (of at most ``person_rows`` rows) and number of candidates (the caller computes it
    before reserving). ``reservation`` must hold ``request``'s event as its next uncommitted one
    (:meth:`~dpgp_gpflow.accounting.Reservation.expect`: ``ValueError`` before anything is read or drawn), as its
    commit records the next held event. Privacy
    assumption: ``rows`` holds only public pieces; the statistics are PRIVATE until noised here."""
    reservation.expect((request.event(),))  # the event committed is the event drawn
    grid = rows if isinstance(rows, GridStatistics) else GridStatistics([rows])
    m = grid.rows[0].features.m
    lo, hi = grid.rows[0].y_bounds
    scales: Scales = statistic_scales(hi - lo, shares)
    blocks = grid_statistics(source, grid) if isinstance(rows, GridStatistics) else (sufficient_statistics(source, rows),)
    std = request.multiplier * float(sensitivity)
    z = np.concatenate([packed(st.S, st.b, st.q, scales) for st in blocks]) / std  # L2 shift <= 1 / s
    noised, reproducible = sampling.add_whitened_noise(z, request.seed)
    K = statistic_dimension(m)
    reservation.commit(f"whole-row statistics ({z.size} values, M = {m}, {len(blocks)} {grid.blocks_are}, "
                       f"n = {blocks[0].n})")
    out = tuple(NoisedStatistics(unpack(noised[i * K:(i + 1) * K] * std, scales, m), entry_noise_std(std, scales, m),
                                 st.n, float(sensitivity), request.multiplier, validate_shares(shares), reproducible,
                                 int(person_rows), chunking(source))
                for i, st in enumerate(blocks))
    return out if isinstance(rows, GridStatistics) else out[0]


def checked_source(source: Any, input_dim: int, groups: Any, request: ReleaseRequest,
                   path: SensitivityPath) -> ChunkSource:
    """The checks of a whole-row release's source, before anything is reserved: a
    :class:`~dpgp_gpflow.streaming.ChunkSource` of ``input_dim`` input columns and one output, the exact sampler,
    and the source's persons (its own ids, checked against the declared ``groups``) no larger than ``path``'s;
    returns the source recut between persons (each person's rows summed within one chunk). Public: types, shapes
    and the persons' ids; the inputs are private and never compared with anything."""
    if not isinstance(source, ChunkSource):
        raise TypeError(f"source must be a dpgp_gpflow.streaming.ChunkSource, got {type(source).__name__}")
    if int(source.input_dim) != int(input_dim):
        raise ValueError(f"the chunks have {source.input_dim} input columns, the inducing inputs {input_dim}")
    if int(getattr(source, "num_outputs", 1)) != 1:
        raise NotImplementedError(f"the chunks have {source.num_outputs} output columns per row; whole-row "
                                  "releases take one output per row for now")
    ids = source_persons(source, groups, None)
    chunked = source if ids is None else source.between_persons(person_starts(ids, int(source.n)))
    if request.sampler != "exact":
        raise ValueError("whole-row releases draw with the exact sampler only")
    if largest_person(ids) != path.person_rows:  # the sensitivity is computed for the path's persons
        raise ValueError(f"the source's persons have up to {largest_person(ids)} rows, the declared ones "
                         f"{path.person_rows}: nothing was reserved")
    return chunked


def statistics_measurement(request: ReleaseRequest, source: ChunkSource, rows: Any, *, shares: Any,
                           then: Callable[[Any], Any], checks: Sequence[Callable[[], Any]] = (),
                           groups: Any = None) -> Measurement:
    """The whole-row release as a :class:`~dpgp_gpflow.measurement.Measurement`: ``checks`` (the caller's, then
    this release's own: source shape, persons, sharing with Dask, shares, sensitivity), one Gaussian event from
    ``request``, and the mechanism :func:`release_statistics` followed by ``then`` (post-processing of the
    noised statistics into the released object, after the commit). ``rows``: a :class:`RowStatistics`, or a
    :class:`GridStatistics` (several candidate feature maps, one vector, one event). ``groups``: the declared
    public person ids (None: one row per person); the persons are the ids the source carries of its own rows,
    checked against them (:func:`~dpgp_gpflow.streaming.chunks.source_persons`, each person's rows consecutive),
    and the chunks are recut between persons so that each person's rows are summed within one chunk."""
    grid = rows if isinstance(rows, GridStatistics) else GridStatistics([rows])
    features = grid.rows[0].features
    state: Dict[str, Any] = {"person_rows": 1, "source": source}
    # the path is public: whole rows of the declared persons (checked against the source's before reserving)
    declared = validate_groups(groups, int(np.shape(groups)[0])) if groups is not None else None
    path = SensitivityPath(largest_person(declared), inputs=True)

    def own_checks() -> None:
        chunked = checked_source(source, features.input_dim, groups, request, path)
        validate_shares(shares)
        state["person_rows"] = path.person_rows
        state["source"] = chunked
        state["sensitivity"] = statistics_sensitivity(chunked, features.m, request.multiplier, shares,
                                                      person_rows=state["person_rows"], blocks=len(grid.rows))

    def mechanism(reservation: Reservation) -> Any:
        noised = release_statistics(request, reservation, state["source"], rows, shares=shares,
                                    sensitivity=state["sensitivity"], person_rows=state["person_rows"])
        return then(noised)

    # the release's file holds the kernel(s), and Dask workers rebuild them from the same form: measure checks it
    return Measurement(request, path.relation(), mechanism, checks=(*checks, own_checks), path=path,
                       file_pieces=tuple(r.features.kernel for r in grid.rows),
                       description=f"whole-row statistics (M = {features.m}"
                                   + (f", {len(grid.rows)} {grid.blocks_are}" if len(grid.rows) > 1 else "") + ")")
