"""The histogram first stage of a residual release: noised cell counts of the rows and ``b``, in one exact draw.

The public grid is :func:`~.residual.radius_points`' (``G`` cells per input column over the box, about two per
lengthscale, :func:`~.residual.grid_cells`; ``C = G^D`` cells): each row, its input clipped to the box, falls in
exactly one cell. The stage releases, in one vector, the integer counts ``n_c`` of the rows in each cell and
``b = sum_i phi(x_i) y_c,i`` (:mod:`.statistics`), scaled to their public shares (docs/whole_rows.md#residual-releases)

    [a_n n_1 .. a_n n_C, a_b b],   a_n = w_n / sqrt(2),   a_b = w_b / d,   w_n^2 + w_b^2 = 1

(``w_n^2 : w_b^2`` the package's shares of ``S`` and ``b``, :func:`histogram_shares`). A replaced row leaves one
cell and enters one (the counts move by at most ``sqrt(2)`` in L2) and moves ``b`` by at most ``d``; a person of
``g`` rows moves them by at most ``sqrt(2) g`` and ``g d`` (triangle inequality): the vector moves by at most
``g``, plus the sums' rounding, inflated for the exact sampler's grid (:func:`histogram_sensitivity`).

:class:`CellCounts` is the per-chunk function of the one pass (a :class:`~.statistics.RowStatistics`: the same
checks, clipping and slicing, in memory, over :class:`~dpgp_gpflow.streaming.LocalChunks` or as a Dask
reduction); :func:`histogram_measurement` describes the release as a
:class:`~dpgp_gpflow.measurement.Measurement` (checks, one Gaussian event, the mechanism
:func:`release_histogram`).

Privacy assumption: the box, the bounds, ``Z``, the kernel and so the grid are public; the sensitivity is
recomputed here from public values (shares, shapes, chunking, persons) before anything is reserved; the counts
and ``b`` are PRIVATE until noised by :func:`release_histogram`.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, NamedTuple, Sequence, Tuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from .. import sampling
from ..accounting import Reservation
from ..exceptions import ClippingWarning
from ..measurement import Measurement, SensitivityPath
from ..mechanisms.request import ReleaseRequest
from ..relations import largest_person
from ..streaming.chunks import ChunkSource
from ..validation import validate_groups
from . import features as feature_maps
from .bounds import validate_shares
from .mechanism import checked_source, chunking
from . import residual
from .residual import HeldRows, grid_cells, grid_centres
from .residual_bounds import MAX_HISTOGRAM_CELLS, histogram_noise_stds, histogram_sensitivity, histogram_share_pair
from .statistics import RowStatistics, add_statistics

__all__: list[str] = []  # internal: the package imports these names by name


def histogram_cells(kernel: gpflow.kernels.Kernel, box: np.ndarray) -> int:
    """``G``, the public grid's cells per input column (:func:`~.residual.grid_cells`) over the validated ``box``;
    ``ValueError`` (one line) when its ``G^D`` cells are more than :data:`MAX_HISTOGRAM_CELLS`. Public."""
    cells = grid_cells(kernel, box)
    D = int(box.shape[0])
    if cells ** D > MAX_HISTOGRAM_CELLS:
        raise ValueError(f"a histogram first stage would count {cells}^{D} cells (half a lengthscale per cell over "
                         f"the box), more than {MAX_HISTOGRAM_CELLS}: use residual_fractions='default' (the whole-row "
                         "statistics first) or a kernel with a longer lengthscale")
    return cells


def histogram_shares(shares: Any) -> Tuple[float, float]:
    """``(w_n^2, w_b^2)``: the squared shares of the counts and of ``b``, the package's shares of ``S`` and ``b``
    (``shares``: ``(S, b, q)``, :func:`~.bounds.validate_shares`) normalised to sum 1 (no ``q`` is released). Public."""
    w_S2, w_b2, _ = validate_shares(shares)
    return histogram_share_pair(w_S2, w_b2)


def cell_index(X: np.ndarray, box: np.ndarray, cells: int) -> np.ndarray:
    """The flat cell index [N] of each input row of ``X`` [N, D] (clipped to the box) on the grid of ``cells`` cells
    per column (:func:`~.residual.grid_centres`' order; a row on an inner edge falls in the upper cell, the box's
    upper bound in the last cell). PRIVATE values in, PRIVATE values out."""
    flat = np.zeros(X.shape[0], dtype=np.int64)
    for d, (lo, hi) in enumerate(box):  # column by column (NumPy's fast loops), the first column slowest
        per_axis = np.clip(np.floor((X[:, d] - lo) / (hi - lo) * cells), 0, cells - 1).astype(np.int64)  # [N]
        flat *= cells
        flat += per_axis
    return flat


@check_shapes("Z: [M, D]", "L: [M, M]", "X: [N, D]", "yc: [N]", "return[0]: [M]")
def chunk_b(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, k_max: float, X: tf.Tensor,
            yc: tf.Tensor) -> Tuple[tf.Tensor]:
    """One slice's ``(b,) = (sum_i phi(x_i) y_c,i,)`` from its clipped inputs and centred clipped outputs (PRIVATE)."""
    # looked up in its module when traced (one definition, which the tests can replace by a broken variant)
    phi = feature_maps.whitened_features(kernel, Z, L, X, k_max)  # [N, M], each row of norm <= 1
    return (tf.linalg.matvec(phi, yc, transpose_a=True),)


class CellCounts(RowStatistics):
    """The per-chunk function of the histogram's pass: the rows' checks and clipping of ``rows`` (a
    :class:`~.statistics.RowStatistics`), the counts of the rows in each of the ``cells^D`` cells (int64, exact)
    and ``b``. Picklable (Dask workers)."""

    def __init__(self, rows: RowStatistics, cells: int) -> None:
        super().__init__(rows.features, rows.box, rows.y_bounds, clip_inputs=rows.clip_inputs)
        self.cells = int(cells)
        self.num_cells = self.cells ** self.box.shape[0]

    def __call__(self, X: np.ndarray, Y: np.ndarray, start: int) -> Dict[str, Any]:
        """One chunk's counts [C] (int64) and ``b`` [M] (PRIVATE), its rows and clipped counts."""
        X, yc, outside_x, outside_y = self.prepared(X, Y)
        counts = np.bincount(cell_index(X, self.box, self.cells), minlength=self.num_cells).astype(np.int64)
        (b,) = self.summed(chunk_b, X, yc)
        return {"counts": counts, "b": b, "n": int(X.shape[0]), "clipped_inputs": outside_x,
                "clipped_outputs": outside_y}


@check_shapes("Z: [M, D]", "L: [M, M]", "X: [N, D]", "yc: [N]", "return[0]: [M]", "return[1]: [N, M]")
def chunk_b_and_features(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, k_max: float, X: tf.Tensor,
                         yc: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """:func:`chunk_b` of a slice and its features [N, M] (PRIVATE), kept by :class:`HeldCellCounts`."""
    phi = feature_maps.whitened_features(kernel, Z, L, X, k_max)  # [N, M], each row of norm <= 1
    return tf.linalg.matvec(phi, yc, transpose_a=True), phi


class HeldCellCounts(HeldRows):
    """:class:`CellCounts` that also keeps every slice's features and centred clipped outputs (PRIVATE), in this
    process, for the residual stages (as :class:`~.residual.HeldRows` does for the statistics' pass: the same
    ``held`` layout, read by :meth:`~.residual.ResidualStatistics.held_sums`). Not picklable."""

    def __init__(self, rows: RowStatistics, cells: int, source: ChunkSource) -> None:
        super().__init__(rows, source)  # the rows kept are used only for this source's (residual.same_rows)
        self.cells = int(cells)
        self.num_cells = self.cells ** self.box.shape[0]

    def __call__(self, X: np.ndarray, Y: np.ndarray, start: int) -> Dict[str, Any]:
        """One chunk's counts [C] (int64) and ``b`` [M] (PRIVATE), its rows and clipped counts; keeps its features."""
        X, yc, outside_x, outside_y = self.prepared(X, Y)
        counts = np.bincount(cell_index(X, self.box, self.cells), minlength=self.num_cells).astype(np.int64)
        (b,) = self.summed_and_held(chunk_b_and_features, X, yc, start)
        return {"counts": counts, "b": b, "n": int(X.shape[0]), "clipped_inputs": outside_x,
                "clipped_outputs": outside_y}


def counting(source: ChunkSource, rows: RowStatistics, cells: int) -> Any:
    """The histogram pass's per-chunk function: :class:`HeldCellCounts` when ``source`` is a
    :class:`~dpgp_gpflow.streaming.LocalChunks` whose ``n M`` feature entries are at most
    :data:`~.residual.MAX_HELD_FEATURES` and ``rows`` a plain :class:`~.statistics.RowStatistics`
    (:func:`~.residual.holds`, :func:`~.residual.holding`'s rule; the residual stages then read the kept features),
    else :class:`CellCounts` (every stage reads the rows again). Public: from the source's type, ``n`` and ``M``."""
    if residual.holds(source, (rows,)):
        return HeldCellCounts(rows, cells, source)
    return CellCounts(rows, cells)


def histogram_sums(source: ChunkSource, rows: Any) -> Tuple[np.ndarray, np.ndarray]:
    """``(counts [C] int64, b [M])`` of every row of ``source`` in one pass (``source.map_reduce`` of ``rows``, a
    :class:`CellCounts` or :class:`HeldCellCounts`), with a
    ``ClippingWarning`` (counts, never values) when rows were clipped. PRIVATE result."""
    if not isinstance(source, ChunkSource):
        raise TypeError(f"source must be a dpgp_gpflow.streaming.ChunkSource, got {type(source).__name__}")
    total = source.map_reduce(rows, add_statistics)
    if total is None or int(total["n"]) != int(source.n):
        raise ValueError(f"the chunks held {0 if total is None else int(total['n'])} rows, the source says {source.n}")
    if total["clipped_inputs"] or total["clipped_outputs"]:
        warnings.warn(f"{total['clipped_inputs']} of {source.n} private rows had inputs outside the public box and "
                      f"{total['clipped_outputs']} outputs lay outside the public bounds {rows.y_bounds}: clipped",
                      ClippingWarning, stacklevel=3)
    return np.asarray(total["counts"], dtype=np.int64), np.asarray(total["b"], dtype=np.float64)


class NoisedHistogram(NamedTuple):
    """What the histogram stage released (all public)."""

    counts: np.ndarray  #: [C] the noised counts (real numbers, may be negative), in the grid's order
    b: np.ndarray  #: [M] the noised ``b`` (unit kernel scale, outputs centred at the bounds' midpoint)
    counts_std: float  #: the std of each count's noise
    b_std: float  #: the std of each entry of ``b``'s noise
    cells: int  #: G, cells per input column (public, from the kernel and the box)
    num_data: int  #: n (public under replace-one)
    sensitivity: float  #: the charged L2 sensitivity of the released vector (rounding and grid included)
    multiplier: float  #: s
    shares: Tuple[float, float]  #: ``(w_n^2, w_b^2)``
    reproducible: bool  #: the noise came from an explicit seed (not private)
    person_rows: int = 1  #: the most rows of one person protected together (public)
    chunking: Tuple[int, int] = (0, 0)  #: the longest chunk's rows and the number of chunks summed (public)


def release_histogram(request: ReleaseRequest, reservation: Reservation, source: ChunkSource, rows: Any, *,
                      shares: Any, sensitivity: float, person_rows: int = 1) -> NoisedHistogram:
    """Read the rows once, add exact Gaussian noise of std ``s * sensitivity`` to the released vector (module
    docstring), commit the request's one event into ``reservation`` and return the noised counts and ``b``.
    ``sensitivity``: :func:`histogram_sensitivity` for this source (computed by the caller before reserving).
    Privacy assumption: ``rows`` holds only public pieces; the counts and ``b`` are PRIVATE until noised here."""
    lo, hi = rows.y_bounds
    w_S2, w_b2, _ = validate_shares(shares)
    noise = histogram_noise_stds(request.multiplier, sensitivity, (w_S2, w_b2), hi - lo)  # the card's rule too
    a_n, a_b, std = noise.counts_scale, noise.b_scale, noise.std
    counts, b = histogram_sums(source, rows)
    z = np.concatenate([counts.astype(np.float64) * a_n, b * a_b]) / std  # L2 shift <= 1 / s
    noised, reproducible = sampling.add_whitened_noise(z, request.seed)
    C = rows.num_cells
    reservation.commit(f"whole-row histogram ({C} cell counts and b, M = {rows.features.m}, n = {int(source.n)})")
    return NoisedHistogram(noised[:C] * noise.counts_std, noised[C:] * noise.b_std, noise.counts_std, noise.b_std,
                           rows.cells, int(source.n), float(sensitivity), request.multiplier, noise.shares,
                           reproducible, int(person_rows), chunking(source))


def histogram_measurement(request: ReleaseRequest, source: ChunkSource, rows: RowStatistics, *, shares: Any,
                          then: Callable[[NoisedHistogram], Any], checks: Sequence[Callable[[], Any]] = (),
                          groups: Any = None) -> Measurement:
    """The histogram stage as a :class:`~dpgp_gpflow.measurement.Measurement`, as
    :func:`~.mechanism.statistics_measurement` describes the statistics release: ``checks`` (the caller's, then
    this stage's own: the grid's size, source shape, persons, sampler, shares, sensitivity), one Gaussian event
    from ``request``, and the mechanism :func:`release_histogram` followed by ``then`` (post-processing, after the
    commit). ``rows``: the public pieces of the pass (a :class:`~.statistics.RowStatistics`; a :class:`CellCounts`
    or :class:`HeldCellCounts` is the pass itself, e.g. :func:`counting`'s, whose kept features a caller reads
    after); ``groups`` the
    declared public person ids (None: one row per person)."""
    if not isinstance(rows, RowStatistics):
        raise TypeError(f"rows must be a RowStatistics, got {type(rows).__name__}")
    features = rows.features
    state: Dict[str, Any] = {}
    declared = validate_groups(groups, int(np.shape(groups)[0])) if groups is not None else None
    path = SensitivityPath(largest_person(declared), inputs=True)

    def own_checks() -> None:
        cells = histogram_cells(features.kernel, rows.box)  # refuses too many cells
        chunked = checked_source(source, features.input_dim, groups, request, path)
        histogram_shares(shares)
        longest, count = chunking(chunked)
        if isinstance(rows, (CellCounts, HeldCellCounts)) and rows.cells != cells:
            raise ValueError(f"the pass counts {rows.cells} cells per column, the grid has {cells}")
        prepared = rows if isinstance(rows, (CellCounts, HeldCellCounts)) else counting(chunked, rows, cells)
        state.update(rows=prepared, source=chunked, sensitivity=histogram_sensitivity(
            m=features.m, num_cells=cells ** rows.box.shape[0], multiplier=request.multiplier, num_rows=int(chunked.n),
            chunk_rows=longest, num_chunks=count, person_rows=path.person_rows))

    def mechanism(reservation: Reservation) -> Any:
        noised = release_histogram(request, reservation, state["source"], state["rows"], shares=shares,
                                   sensitivity=state["sensitivity"], person_rows=path.person_rows)
        return then(noised)

    return Measurement(request, path.relation(), mechanism, checks=(*checks, own_checks), path=path,
                       file_pieces=(features.kernel,), description=f"whole-row histogram (M = {features.m})")


def histogram_centres(kernel: gpflow.kernels.Kernel, box: np.ndarray) -> np.ndarray:
    """The public cell centres [C, D] of the histogram's grid (:func:`histogram_cells`; the points of
    :func:`~.residual.radius_points`), in the order of the released counts. Public."""
    return grid_centres(box, histogram_cells(kernel, box))
