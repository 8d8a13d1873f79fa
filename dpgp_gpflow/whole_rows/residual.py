"""The residual releases' maths: clipped residual sums in one pass over the rows, their update, the public radius.

After a whole-row release of ``(S, b, q)`` (:mod:`.mechanism`) gives a first estimate ``u_1`` of the weights,
release ``j = 2 .. J`` adds noise to the clipped residual sums (docs/whole_rows.md#residual-releases)

    b_j = sum_i phi(x_i) clip(y_c,i - phi(x_i)^T u_{j-1}, -R_j, R_j)      [M]

around the public previous estimate ``u_{j-1}`` with the public radius ``R_j`` (their sensitivity ``2 R_j``,
:mod:`.residual_bounds`), and updates the estimate with the preconditioner ``P`` (the regularised released ``S``):

    u_j = (lambda I + P)^{-1} (b~_j + P u_{j-1}).

Without noise or clipping, ``b_j = b - S u_{j-1}`` and ``u_j - u* = (lambda I + P)^{-1} (P - S) (u_{j-1} - u*)``
(``u* = (lambda I + S)^{-1} b``): the error of ``P`` slows the iteration instead of biasing its limit.

:class:`ResidualStatistics` is the per-chunk function of the pass (a :class:`~.statistics.RowStatistics`: the same
checks, clipping and slicing, in memory, over :class:`~dpgp_gpflow.streaming.LocalChunks` or as a Dask reduction);
:func:`residual_sums` runs it over a source. The rest is post-processing of released values.

Privacy assumption: ``u_{j-1}`` and ``R_j`` are computed from earlier releases and public values only; the rows
enter only through :func:`residual_sums` (PRIVATE until noised by :mod:`.residual_release`).
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import gpflow
import numpy as np
import scipy.linalg
import tensorflow as tf
from check_shapes import check_shapes

from ..noise_planning.dual import MATRIX_SPEC, REAL_SPEC, VECTOR_SPEC
from ..streaming.chunks import ChunkSource, LocalChunks
from ..validation import parameter_value
from . import features as feature_maps
from .design import inducing_design, validate_box
from .features import MAP_CACHE_SIZE, FeatureMap, RecentlyUsed
from .posterior import WeightPosterior, compiled_on_reuse, floored, mean_noise_variance
from .residual_bounds import MAX_RADIUS_POINTS, residual_radius
from .statistics import GridStatistics, RowStatistics, add_statistics, feature_sums

__all__: list[str] = []  # internal: the package imports these names by name

#: Cells per input column of :func:`radius_points` for a kernel without lengthscales.
DEFAULT_RADIUS_CELLS = 16


@check_shapes("Z: [M, D]", "L: [M, M]", "X: [N, D]", "yc: [N]", "u: [M]", "radius: [1]", "return[0]: [M]")
def chunk_residual_sums(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, k_max: float, X: tf.Tensor,
                        yc: tf.Tensor, u: tf.Tensor, radius: tf.Tensor) -> tuple:
    """One slice's ``(sum_i phi(x_i) clip(y_c,i - phi(x_i)^T u, -R, R),)`` from its clipped inputs ``X`` and
    centred clipped outputs ``yc`` (PRIVATE values), around the public estimate ``u`` with the public radius
    ``radius`` ``[R]``: each row's term has norm at most ``R`` (``||phi|| <= 1``, ``|r| <= R`` exactly)."""
    # looked up in its module when traced (one definition, which the tests can replace by a broken variant)
    phi = feature_maps.whitened_features(kernel, Z, L, X, k_max)  # [N, M], each row of norm <= 1
    return clipped_residual_sum(phi, yc, u, radius)


@check_shapes("phi: [N, M]", "yc: [N]", "u: [M]", "radius: [1]", "return[0]: [M]")
def clipped_residual_sum(phi: tf.Tensor, yc: tf.Tensor, u: tf.Tensor, radius: tf.Tensor) -> tuple:
    """``(sum_i phi_i clip(y_c,i - phi_i^T u, -R, R),)`` of a slice's features ``phi`` (rows of norm <= 1) and centred
    clipped outputs ``yc`` (PRIVATE values): each row's term has norm at most ``R``."""
    residuals = tf.clip_by_value(yc - tf.linalg.matvec(phi, u), -radius[0], radius[0])  # [N], |r| <= R
    return (tf.linalg.matvec(phi, residuals, transpose_a=True),)


def held_stage_sum(u: tf.Tensor, radius: tf.Tensor, held: Sequence[Sequence[Tuple[tf.Tensor, tf.Tensor]]],
                   compiled: bool) -> tf.Tensor:
    """A residual stage's sum [M] over the slices kept by the first stage's pass (:class:`HeldRows`; ``held``: per
    chunk, in order, its slices' ``(phi, yc)``): each slice's :func:`clipped_residual_sum` added slice by slice, then
    chunk by chunk, in order, as :meth:`ResidualStatistics.__call__`'s sums over those chunks are (the same numbers).
    ``compiled``: in one call of a graph traced once per layout of chunks and slices (its slices' sums run side by
    side), else eagerly (the map is not compiled yet). PRIVATE values."""
    layout = tuple(len(slices) for slices in held)
    flat = [t for slices in held for pair in slices for t in pair]
    if not compiled:
        return _stage_sum(layout, u, radius, *flat)
    m = int(u.shape[0])
    concrete = _STAGE_SUMS.get((layout, m))
    if concrete is None:
        specs = [tf.TensorSpec([m], tf.float64), tf.TensorSpec([1], tf.float64),
                 *[tf.TensorSpec([None, m], tf.float64), tf.TensorSpec([None], tf.float64)] * sum(layout)]
        traced = tf.function(lambda *args: _stage_sum(layout, *args), input_signature=specs, autograph=False)
        # called directly: less dispatch
        concrete = _STAGE_SUMS.put((layout, m), traced.get_concrete_function())
    return concrete(u, radius, *flat)


def _stage_sum(layout: Tuple[int, ...], u: tf.Tensor, radius: tf.Tensor, *flat: tf.Tensor) -> tf.Tensor:
    """:func:`held_stage_sum` of the slices ``flat`` (``phi_1, yc_1, phi_2, ...``), ``layout[k]`` of them in chunk
    ``k``."""
    total: Any = None
    pairs = iter(zip(flat[::2], flat[1::2]))
    for count in layout:
        chunk: Any = None
        for _ in range(count):
            phi, yc = next(pairs)
            (part,) = clipped_residual_sum(phi, yc, u, radius)
            chunk = part if chunk is None else chunk + part
        total = chunk if total is None else total + chunk
    return total


#: :func:`held_stage_sum`'s concrete functions by (layout, M), the :data:`~.features.MAP_CACHE_SIZE` most recently used.
_STAGE_SUMS = RecentlyUsed(MAP_CACHE_SIZE)


@check_shapes("Z: [M, D]", "L: [M, M]", "X: [N, D]", "yc: [N]", "return[0]: [M, M]", "return[1]: [M]", "return[2]: []",
              "return[3]: [N, M]")
def chunk_sums_and_features(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, k_max: float, X: tf.Tensor,
                            yc: tf.Tensor) -> tuple:
    """:func:`~.statistics.chunk_sums` of a slice and its features [N, M] (PRIVATE), kept by :class:`HeldRows`."""
    phi = feature_maps.whitened_features(kernel, Z, L, X, k_max)  # [N, M], each row of norm <= 1
    return (*feature_sums(phi, yc), phi)


#: The most feature entries (rows times M, over every candidate of a lengthscale grid) a residual release over a
#: :class:`~dpgp_gpflow.streaming.LocalChunks` source keeps between its passes (:func:`holding`; 2^24 float64:
#: 128 MiB): a larger source, or a Dask one, is read again by every stage.
MAX_HELD_FEATURES = 1 << 24


class HeldRows(RowStatistics):
    """The first stage's per-chunk function (a :class:`~.statistics.RowStatistics`, the same sums) that also keeps
    every slice's features and centred clipped outputs (PRIVATE), in this process, for the residual stages
    (:func:`residual_sums`): each row's features are computed once per release. ``held``: ``(start, stop)`` of each
    chunk read, in order -> its slices' ``(phi, yc, X)``, ``X`` (the clipped inputs) kept only while the features
    were computed eagerly (:meth:`~.features.FeatureMap.compile`, ``compile_after``): once the map is compiled, a
    stage computes them again compiled, as a pass reading the rows would (eager and compiled features may differ
    in the last bit), and keeps those. ``source``: the :class:`~dpgp_gpflow.streaming.LocalChunks` (exactly) whose
    pass this is: the held rows are used only for a source over the same ``X`` and ``Y`` objects
    (:func:`same_rows`; None: for none). Not picklable: what it holds never leaves the process."""

    def __init__(self, rows: RowStatistics, source: Optional[ChunkSource] = None) -> None:
        super().__init__(rows.features, rows.box, rows.y_bounds, clip_inputs=rows.clip_inputs)
        self.held: Dict[Tuple[int, int], List[Tuple[tf.Tensor, tf.Tensor, Optional[tf.Tensor]]]] = {}
        #: the rows these are: the source's ``(X, Y)`` (the objects themselves, not copied), None for no source
        self.rows_of: Optional[Tuple[Any, Any]] = (source.X, source.Y) if type(source) is LocalChunks else None

    def sums(self, X: np.ndarray, yc: np.ndarray, start: int) -> Tuple[Any, ...]:
        return self.summed_and_held(chunk_sums_and_features, X, yc, start)

    def summed_and_held(self, fn: Any, X: np.ndarray, yc: np.ndarray, start: int) -> Tuple[Any, ...]:
        """:meth:`~.statistics.RowStatistics.summed` of ``fn`` (its last tensor the slice's features) over a chunk's
        prepared rows starting at row ``start``, its slices kept in ``held`` (the one place of its layout; PRIVATE)."""
        kept: List[Tuple[tf.Tensor, tf.Tensor, tf.Tensor]] = []
        sums = self.summed(fn, X, yc, kept=kept)
        compiled = self.features.compiled  # the mode summed ran in (prepared compiles before it)
        self.held[(int(start), int(start) + int(X.shape[0]))] = [(phi, y, None if compiled else x)
                                                                 for phi, y, x in kept]
        return sums

    def __reduce__(self) -> Any:
        raise TypeError("HeldRows keeps private features in this process: it is never pickled")


def same_rows(rows_of: Optional[Tuple[Any, Any]], source: ChunkSource) -> bool:
    """Whether ``source`` reads the rows :class:`HeldRows` kept (``rows_of``, its ``(X, Y)``): a
    :class:`~dpgp_gpflow.streaming.LocalChunks` (exactly: a subclass may read its rows its own way) over the same
    ``X`` and ``Y`` objects (its chunking: :meth:`ResidualStatistics.held_sums`). Public: object identities only."""
    return (rows_of is not None and type(source) is LocalChunks and source.X is rows_of[0]
            and source.Y is rows_of[1])


def holding(source: ChunkSource, rows: Any) -> Any:
    """``rows`` (a :class:`~.statistics.RowStatistics` or a :class:`~.statistics.GridStatistics` of them) as
    :class:`HeldRows` when ``source`` is a :class:`~dpgp_gpflow.streaming.LocalChunks` (read in this process) and its
    ``n`` rows' features, ``n M`` entries per candidate, total at most :data:`MAX_HELD_FEATURES`; else ``rows``
    itself (every stage reads the rows again). Public: from the source's type, ``n``, ``M`` and the candidates."""
    grid = rows.rows if isinstance(rows, GridStatistics) else (rows,)
    if not holds(source, grid):
        return rows
    held = tuple(HeldRows(r, source) for r in grid)
    return GridStatistics(held) if isinstance(rows, GridStatistics) else held[0]


def holds(source: ChunkSource, grid: Sequence[RowStatistics]) -> bool:
    """:func:`holding`'s rule: ``source`` is a :class:`~dpgp_gpflow.streaming.LocalChunks` (exactly: a subclass may
    read its rows its own way), every pass of ``grid`` a
    plain :class:`~.statistics.RowStatistics` and their ``n M`` feature entries total at most
    :data:`MAX_HELD_FEATURES`. Public."""
    return (type(source) is LocalChunks and all(type(r) is RowStatistics for r in grid)
            and int(source.n) * sum(r.features.m for r in grid) <= MAX_HELD_FEATURES)


class ResidualStatistics(RowStatistics):
    """The per-chunk function of :func:`residual_sums`: the rows' checks and clipping of ``rows`` (a
    :class:`~.statistics.RowStatistics`: its feature map, box, bounds and input clipping), the public previous
    estimate ``u`` [M] and the public radius ``radius``. Picklable (Dask workers)."""

    def __init__(self, rows: RowStatistics, u: Any, radius: float) -> None:
        super().__init__(rows.features, rows.box, rows.y_bounds, clip_inputs=rows.clip_inputs)
        #: the features the first stage's pass kept (:class:`HeldRows`), or None: the rows are read again
        self.held = rows.held if isinstance(rows, HeldRows) else None
        self.held_of = rows.rows_of if isinstance(rows, HeldRows) else None  #: the held rows' (X, Y)
        self.u = np.array(u, dtype=np.float64, copy=True)
        if self.u.shape != (rows.features.m,) or not np.all(np.isfinite(self.u)):
            raise ValueError(f"u must be a finite [{rows.features.m}] vector, got shape {self.u.shape}")
        self.radius = float(radius)
        if not (math.isfinite(self.radius) and self.radius > 0.0):
            raise ValueError(f"the radius must be finite and > 0, got {radius!r}")

    def __call__(self, X: np.ndarray, Y: np.ndarray, start: int) -> Dict[str, Any]:
        """The clipped residual sum of one chunk [M] (PRIVATE) and its number of rows."""
        X, yc, _, _ = self.prepared(X, Y)
        (b,) = self.summed(chunk_residual_sums, X, yc, tf.constant(self.u, tf.float64),
                             tf.constant([self.radius], tf.float64))
        return {"b": b, "n": int(X.shape[0])}

    def held_sums(self, source: ChunkSource) -> Optional[Dict[str, Any]]:
        """The pass of :func:`residual_sums` over the kept features (:class:`HeldRows`) when they are those of
        ``source``'s rows (:func:`same_rows`) in its chunks (``(start, stop)``, in order), added as :meth:`__call__`'s
        over those chunks would be (slice by slice, then chunk by chunk, in order: the same numbers); None when no
        features were kept for them."""
        if (self.held is None or not same_rows(self.held_of, source)
                or list(self.held) != [(int(a), int(b)) for a, b in source.chunk_bounds()]):
            return None
        compiled = self.features.compiled
        for slices in self.held.values():
            for i, (phi, yc, X) in enumerate(slices):
                if X is not None and compiled:  # eager features, the map compiled since
                    slices[i] = (self.features(X), yc, None)
        held = tuple(tuple((phi, yc) for phi, yc, _ in slices) for slices in self.held.values())
        u, radius = tf.constant(self.u, tf.float64), tf.constant([self.radius], tf.float64)
        b = held_stage_sum(u, radius, held, compiled)
        return {"b": b.numpy(), "n": sum(stop - start for start, stop in self.held)}

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "held": None, "held_of": None}  # a Dask worker's copy reads its rows


def residual_sums(source: ChunkSource, rows: ResidualStatistics) -> np.ndarray:
    """``b_j`` [M] of every row of ``source`` in one pass (``source.map_reduce``, as
    :func:`~.statistics.sufficient_statistics`). PRIVATE result: released only by :mod:`.residual_release`."""
    if not isinstance(source, ChunkSource):
        raise TypeError(f"source must be a dpgp_gpflow.streaming.ChunkSource, got {type(source).__name__}")
    total = rows.held_sums(source) if isinstance(rows, ResidualStatistics) else None
    if total is None:
        total = source.map_reduce(rows, add_statistics)
    if total is None or int(total["n"]) != int(source.n):
        raise ValueError(f"the chunks held {0 if total is None else int(total['n'])} rows, the source says {source.n}")
    return np.asarray(total["b"], dtype=np.float64)


def preconditioned_update(chol: Any, P: Any, b: Any, u: Any) -> np.ndarray:
    """``u_j = (lambda I + P)^{-1} (b~_j + P u_{j-1})`` [M] by Cholesky solves (``chol`` [M, M]: the lower Cholesky
    factor of ``lambda I + P``; ``P`` [M, M]; ``b`` [M] the released residual sum, ``u`` [M] the previous estimate):
    the one rule of the residual releases, their replay and the histogram scheme, in NumPy/SciPy (its callers run
    it stage by stage from Python loops, where a TensorFlow call, or a check_shapes wrapper, costs more than the
    M x M solves). Post-processing."""
    chol, P = np.asarray(chol, dtype=np.float64), np.asarray(P, dtype=np.float64)
    b, u = np.asarray(b, dtype=np.float64), np.asarray(u, dtype=np.float64)
    m = chol.shape[0] if chol.ndim == 2 else -1
    if chol.shape != (m, m) or P.shape != (m, m) or b.shape != (m,) or u.shape != (m,):
        raise ValueError(f"preconditioned_update needs chol and P [M, M], b and u [M]; got {chol.shape}, {P.shape}, "
                         f"{b.shape}, {u.shape}")
    return scipy.linalg.cho_solve((chol, True), b + P @ u)


def radius_points(kernel: gpflow.kernels.Kernel, x_bounds: Any) -> np.ndarray:
    """The public points [N, D] over which the DP-noise variance of an estimate is averaged for the next radius:
    the centres of an even grid of ``G`` cells per input column over the box, ``G = ceil(w / (l / 2))`` for the
    box's widest column ``w`` and the kernel's shortest lengthscale ``l`` (about two cells per lengthscale;
    :data:`DEFAULT_RADIUS_CELLS` for a kernel without lengthscales), or a low-discrepancy design of
    :data:`MAX_RADIUS_POINTS` points when the grid would hold more. Public: from the box and the kernel."""
    box = validate_box(x_bounds)
    cells = grid_cells(kernel, box)
    if cells ** box.shape[0] > MAX_RADIUS_POINTS:
        return inducing_design(box, MAX_RADIUS_POINTS)
    return grid_centres(box, cells)


def grid_cells(kernel: gpflow.kernels.Kernel, box: np.ndarray) -> int:
    """``G``, the cells per input column of :func:`radius_points`' grid over the validated ``box`` [D, 2]:
    ``ceil(w / (l / 2))`` for the box's widest column ``w`` and the kernel's shortest lengthscale ``l``,
    :data:`DEFAULT_RADIUS_CELLS` for a kernel without lengthscales. Public."""
    lengthscales = getattr(kernel, "lengthscales", None)
    if lengthscales is None:
        return DEFAULT_RADIUS_CELLS
    widest = float(np.max(box[:, 1] - box[:, 0]))
    shortest = float(np.min(parameter_value(lengthscales)))
    return max(int(math.ceil(widest / (0.5 * shortest))), 1)


def grid_centres(box: np.ndarray, cells: int) -> np.ndarray:
    """The centres [G^D, D] of the even grid of ``cells`` (G) cells per column over the validated ``box``, the first
    column varying slowest (``np.ravel_multi_index``'s order). Public."""
    axes = [lo + (hi - lo) * (np.arange(cells) + 0.5) / cells for lo, hi in box]
    return np.stack([g.reshape(-1) for g in np.meshgrid(*axes, indexing="ij")], axis=1)


class RadiusPoints(NamedTuple):
    """The public points of :func:`radius_points` with their features (computed once per release)."""

    phi: tf.Tensor  #: [N, M] unit-scale features
    prior: tf.Tensor  #: [N] ``k(x, x) / k_max``


#: :func:`radius_features` of the maps in use (a map is immutable: its points' features are computed once per map,
#: points and mode, eager or compiled, as each would compute them).
_RADIUS_FEATURES: "weakref.WeakKeyDictionary[FeatureMap, Dict[Any, RadiusPoints]]" = weakref.WeakKeyDictionary()


def radius_features(features: FeatureMap, points: np.ndarray) -> RadiusPoints:
    """The features and prior of ``points`` (:func:`radius_points`) under ``features``, cached on the map. Public."""
    points = np.asarray(points, dtype=np.float64)
    key = (points.shape, points.tobytes(), features.compiled)
    cache = _RADIUS_FEATURES.setdefault(features, {})
    if key not in cache:
        X = tf.constant(points)
        cache[key] = RadiusPoints(features(X), features.unit_variance(X))
    return cache[key]


def mean_dp_variance(posterior: WeightPosterior, points: RadiusPoints) -> float:
    """The mean over ``points`` of the first-order DP-noise variance of the predictive mean of ``posterior``
    (:func:`~.posterior.predictive_terms`). Post-processing."""
    return mean_noise_variance(posterior, points.phi)


def next_radius(posterior: WeightPosterior, points: RadiusPoints, width: float) -> float:
    """``R_j`` (:func:`~.residual_bounds.residual_radius`) after the estimate of ``posterior`` (its noise variance
    ``sigma^2``, its DP-noise variance averaged over ``points``) for outputs of width ``width``. Post-processing."""
    return residual_radius(posterior.noise_variance, mean_dp_variance(posterior, points), width)


# This module's post-processing graphs are as :mod:`.posterior`'s: eager on their first call, compiled from the
# second, the same operations either way, so the same numbers.


def _covariance(chol: tf.Tensor, P: tf.Tensor, S: tf.Tensor, first: tf.Tensor, variances: tf.Tensor) -> tf.Tensor:
    """The first-order covariance of the DP noise of the last estimate ``u_J`` [M, M]: ``C_1 = first`` (stage 1's,
    :func:`_first`), then ``C_j = sigma_j^2 A A + B C_{j-1} B^T`` for each stage's noise variance ``sigma_j^2``
    in ``variances``, with ``A = (lambda I + P)^{-1}`` (``chol``: the Cholesky factor of ``lambda I + P``) and
    ``B = A (P - S)``: linearising ``b_j ~ b - S u_{j-1}`` (no clipping), the noise of ``u_{j-1}`` reaches ``u_j``
    through ``B``. ``S``: an estimate of the rows' ``S`` from the release (the PSD projection of the released
    ``S~`` for a residual release, the histogram's ``S^`` for the histogram scheme). Run as :data:`_propagated`'s
    graph (:func:`propagated_covariance`, the histogram scheme's) and inside :func:`_release_covariance`'s (a
    residual release's), each traced once whatever M and the number of stages (their input signatures; the stages
    in a ``tf.while_loop``, the same operations as a Python loop). Post-processing."""
    M = tf.shape(P)[0]
    A = tf.linalg.cholesky_solve(chol, tf.eye(M, dtype=tf.float64))  # [M, M], symmetric
    B = tf.linalg.matmul(A, P - S)
    AA = tf.linalg.matmul(A, A)

    def stage(j: tf.Tensor, C: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        return j + 1, variances[j] * AA + tf.linalg.matmul(B, tf.linalg.matmul(C, B, transpose_b=True))

    _, C = tf.while_loop(lambda j, C: j < tf.shape(variances)[0], stage, (tf.constant(0), first))
    return 0.5 * (C + tf.transpose(C))


def propagated_covariance(chol: Any, P: Any, S: Any, first: Any, variances: Sequence[float]) -> tf.Tensor:
    """:func:`_covariance` [M, M] (one graph, compiled on reuse) from ``C_1 = first``, the Cholesky factor ``chol`` of
    ``lambda I + P``, ``P``, the estimate ``S`` of the rows' ``S`` and the stages' noise variances. Post-processing."""
    chol, P, S, first = (tf.convert_to_tensor(np.asarray(a, dtype=np.float64)) for a in (chol, P, S, first))
    return _propagated(chol, P, S, first, tf.constant([float(v) for v in variances], tf.float64))


#: :func:`_covariance` as one graph (traced once, whatever M and the number of stages).
_propagated = compiled_on_reuse([MATRIX_SPEC, MATRIX_SPEC, MATRIX_SPEC, MATRIX_SPEC, VECTOR_SPEC])(_covariance)


def _first(chol: tf.Tensor, u: tf.Tensor, b_var: tf.Tensor, offdiag_var: tf.Tensor) -> tf.Tensor:
    """The first-order covariance [M, M] of the DP noise of the first stage's ``u_1 = (lambda I + S^)^{-1} b~``:
    ``A (sigma_b^2 I + sigma_o^2 (|u|^2 I + u u^T)) A`` with ``A = (lambda I + S^)^{-1}`` (``chol``: its Cholesky
    factor; the noise ``e_b - E u`` of :mod:`.posterior`, whose covariance is that middle factor). Post-processing."""
    M = tf.shape(u)[0]
    middle = ((b_var + offdiag_var * tf.reduce_sum(tf.square(u))) * tf.eye(M, dtype=tf.float64)
              + offdiag_var * u[:, None] * u[None, :])
    half = tf.linalg.cholesky_solve(chol, middle)  # A middle
    return tf.linalg.cholesky_solve(chol, tf.transpose(half))  # A middle A (symmetric)


def release_noise_covariance(first: WeightPosterior, P: tf.Tensor, S: Any, stds: Any) -> tf.Tensor:
    """The residual release's DP-noise covariance [M, M] of its last estimate (:func:`_covariance`) from the first
    stage's posterior ``first`` (its covariance: :func:`_first`), the preconditioner ``P``, the rows' ``S`` estimated
    by the PSD projection of the released ``S~`` ``S`` (:func:`~.posterior.regularised_statistic` at floor 0) and
    the stages' noise stds, in one compiled call (the same operations; traced once, whatever M and the number of
    stages). Post-processing."""
    variances = tf.constant([float(sigma) ** 2 for sigma in stds], tf.float64)
    return _release_covariance(first.chol, first.mean, tf.constant(first.b_std ** 2, tf.float64),
                               tf.constant(first.offdiag_std ** 2, tf.float64), tf.convert_to_tensor(P, tf.float64),
                               tf.convert_to_tensor(S, tf.float64), variances)


@compiled_on_reuse([MATRIX_SPEC, VECTOR_SPEC, REAL_SPEC, REAL_SPEC, MATRIX_SPEC, MATRIX_SPEC, VECTOR_SPEC])
def _release_covariance(chol: tf.Tensor, u: tf.Tensor, b_var: tf.Tensor, offdiag_var: tf.Tensor, P: tf.Tensor,
                        S: tf.Tensor, variances: tf.Tensor) -> tf.Tensor:
    first = _first(chol, u, b_var, offdiag_var)
    projected = floored.python_function(S, tf.constant(0.0, tf.float64))
    return _covariance(chol, P, projected, first, variances)


def residual_stages(posterior: WeightPosterior, P: Any, stage: Callable[[int, float, np.ndarray], Tuple[Any, float]],
                    count: int, points: RadiusPoints, width: float
                    ) -> Tuple[List[float], List[np.ndarray], WeightPosterior]:
    """The residual stages after the first, the one loop of a release and its replay: from the first stage's
    ``posterior`` (``u_1``) and preconditioner ``P``, for ``j = 0 .. count - 1`` the radius its earlier stages give
    (:func:`next_radius`), then ``stage(j, radius, u_{j-1})`` gives the stage's released sum ``b~_j`` and its noise
    std (a release draws it, :func:`replay` reads it), then ``u_j`` (:func:`preconditioned_update`). Returns
    ``(radii, [u_1, .., u_J], the last posterior)``. Post-processing of what ``stage`` gives."""
    radii: List[float] = []
    estimates = [posterior.mean.numpy()]
    chol, P_ = np.asarray(posterior.chol, dtype=np.float64), np.asarray(P, dtype=np.float64)
    for j in range(count):
        radius = next_radius(posterior, points, width)
        b, sigma = stage(j, radius, estimates[-1])
        u = preconditioned_update(chol, P_, b, estimates[-1])
        posterior = posterior._replace(mean=tf.constant(u), b_std=float(sigma), offdiag_std=0.0)
        radii.append(radius)
        estimates.append(u)
    return radii, estimates, posterior


def replay(posterior: WeightPosterior, P: tf.Tensor, residual_b: Any, stds: Any, points: RadiusPoints,
           width: float) -> Tuple[List[float], List[np.ndarray], WeightPosterior]:
    """The residual stages recomputed from what they released (post-processing): :func:`residual_stages` reading
    each released ``b~_j`` (rows of ``residual_b``) and its noise std ``sigma_j`` (``stds``). Returns ``(radii,
    [u_1, .., u_J], the last posterior)``; a release file's checks and the audit compare the radii with those
    recorded."""
    released = list(zip(residual_b, stds))
    return residual_stages(posterior, P, lambda j, radius, u: released[j], len(released), points, width)
