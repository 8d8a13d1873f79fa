"""The cloaking release's public computations, chunk by chunk: column space, rank rule, noise optimiser.

The in-memory release (:class:`~dpgp_gpflow.mechanisms.NoisePlan`, :func:`~dpgp_gpflow.noise_planning.column_spaces`,
:func:`~dpgp_gpflow.noise_planning.optimise_noise_covariance`) reads the m x n released map ``C = R B``
whole. Here every quantity it needs is a reduction over column chunks ``C[:, chunk]`` (computed from
the chunk's public inputs by :class:`~dpgp_gpflow.streaming.terms.ChunkTerms`):

* the column space: the R factor of a tall-skinny QR of ``C^T`` (stacked chunk R factors), whose
  SVD has the singular values and left vectors of ``C`` (no Gram matrix: no squared condition number);
* the rank rule's per-row l1 bias and largest projected entry: sums and maxima over chunks;
* the noise optimiser: the columns are a provider (:class:`StreamedColumns`) of the one working-set
  loop (:func:`dpgp_gpflow.noise_planning.working_set.solve_noise`, the in-memory optimiser's): each pass
  (leverages ``q_i``, the certificate, the most violated points) is a reduction over chunks, and only
  the working set's columns (r x |work|) are held. Only where the loop starts is the streamed
  release's own (a public subsample's solution on very long inputs; pivots among candidates);
* the sensitivity against the noise actually used, and the whitened query of the exact sampler:
  maxima and sums over chunks.

Privacy assumption: every function here is public (a function of ``C``) except
:class:`StreamedQuery`, which computes the one linear query ``W y`` of the clipped centred outputs
that the release noises; workers return only these public-shape results.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np
import tensorflow as tf

from .. import noise_planning
from .. import linalg
from ..noise_planning import (
    ColumnSpace,
    NoiseCovariance,
    Violators,
    WorkingSet,
    certificate_of,
    column_hashes,
    pivot_columns,
    working_set,
)
from ..noise_planning.working_set import DUPLICATE_RTOL
from ..mechanisms.cloaking import shift_of_norms, trusted_query
from ..measurement import SensitivityPath
from ..relations import largest_person
from .chunks import ChunkSource
from .persons import ChunkPersons, person_columns
from .terms import ChunkTerms, Factors

__all__: list[str] = []  # internal: the package imports these names by name

#: Above ``COARSE_FACTOR * COARSE_ROWS`` rows the working set is first grown on every k-th row
#: (``k = min(COARSE_STEP, n // COARSE_ROWS)``, chosen by position: public; recursively), and the solve
#: over all rows starts from that solution: most working-set rounds (one pass each) run on the subsample.
COARSE_ROWS = 10_000
COARSE_FACTOR = 3
COARSE_STEP = 10

#: Columns by norm among which the working set's r pivoted-QR columns are chosen (at least 8 r), ...
MIN_PIVOT_CANDIDATES = 2000
#: ... quadrupled (one more pass each time) until the choice is provably that of all columns, up to this.
MAX_PIVOT_CANDIDATES = 2**16


class StreamedMap(NamedTuple):
    """The released map ``C = R B`` (m x n) as a chunk source plus the public terms that give its columns."""

    source: ChunkSource
    terms: ChunkTerms
    factors: Factors
    #: the persons' neighbour map chunk by chunk (``groups=``), or None: one row per person
    persons: Optional[ChunkPersons] = None

    @property
    def num_columns(self) -> int:
        """The number of the optimiser's columns: ``n`` rows, or the persons' ``N_c`` corner columns."""
        return self.source.n if self.persons is None else self.persons.count

    @property
    def num_entries(self) -> int:
        """The number of released outputs: ``n P`` (the length of the stacked ``y``)."""
        return self.source.n * int(self.terms.num_outputs)


def _columns(X: np.ndarray, terms: ChunkTerms, factors: Factors, T: Optional[np.ndarray] = None) -> tf.Tensor:
    if T is None:
        return terms.columns(X, factors)  # [m, c]
    return terms.transformed_columns(X, factors, T)  # [r, c]


def _corner_columns(X, start, terms, factors, T, persons) -> Tuple[tf.Tensor, int]:
    """The chunk's optimiser columns ``T C[:, chunk] A_chunk`` (``T C[:, chunk]`` per row) and the global
    index of the first."""
    return person_columns(_columns(X, terms, factors, T), start, persons)


# -- column space -------------------------------------------------------------------------------


def _tsqr_chunk(X, start, terms, factors):
    return np.linalg.qr(_columns(X, terms, factors).numpy().T, mode="r")


def _tsqr_combine(a, b):
    return np.linalg.qr(np.vstack([a, b]), mode="r")


def column_spaces(cmap: StreamedMap, rtols) -> List[ColumnSpace]:
    """The column spaces of ``C`` for each tolerance, as :func:`dpgp_gpflow.noise_planning.column_spaces`
    gives them, but with ``vectors`` left implicit (None): they are ``basis^T C``, recomputed per chunk.

    ``C^T = Q R_C`` by a tall-skinny QR over the chunks, so ``C = R_C^T Q^T`` and the SVD of the m x m
    ``R_C^T`` gives the singular values and left vectors of ``C`` (small: no need for the Gram matrix
    of :func:`~dpgp_gpflow.noise_planning.singular_pairs`). Public.
    """
    R = cmap.source.map_inputs(_tsqr_chunk, _tsqr_combine, cmap.terms, cmap.factors)
    s, u, _ = tf.linalg.svd(tf.constant(R.T), full_matrices=False)
    s_np = s.numpy()
    if s_np.size == 0 or not np.all(np.isfinite(s_np)) or s_np[0] <= 0.0:
        raise ValueError("the cloaking matrix is zero or not finite: nothing to release privately")
    spaces, seen = [], set()
    for rtol in rtols:
        r = int(np.sum(s_np > rtol * s_np[0]))
        if r in seen:
            continue
        seen.add(r)
        residual = float(s_np[r]) if r < s_np.size else 0.0
        spaces.append(ColumnSpace(u[:, :r], None, s[:r], residual, float(rtol)))
    return spaces


def _projection_chunk(X, start, terms, factors, widest, ranks, persons=None):
    C = _columns(X, terms, factors)
    coords = tf.linalg.matmul(widest, C, transpose_a=True)  # [r_max, c]: the spaces are nested
    corners = person_columns(coords, start, persons)[0]  # [r_max, c_A]: coordinates of C A
    out = []
    for r in ranks:
        P = tf.linalg.matmul(widest[:, :r], coords[:r])
        PA = P if persons is None else tf.linalg.matmul(widest[:, :r], corners[:r])  # the floor: max |P A|
        out.append((tf.reduce_sum(tf.abs(C - P), axis=1).numpy(), tf.reduce_max(tf.abs(PA), axis=1).numpy()))
    return out, tf.reduce_max(tf.abs(corners), axis=1).numpy()


def _projection_combine(a, b):
    return [(x[0] + y[0], np.maximum(x[1], y[1])) for x, y in zip(a[0], b[0])], np.maximum(a[1], b[1])


def projection_rows(cmap: StreamedMap, spaces: List[ColumnSpace]) -> Tuple[List[Tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """:func:`dpgp_gpflow.noise_planning.projection_rows` for every space, in one pass over the chunks; and
    ``max_i |u_j^T C_i|`` for every direction ``u_j`` of the widest space (the spaces are nested: the
    first r directions of the widest), from which the optimiser's duplicate keys are scaled. With
    persons (``cmap.persons``) the floor and the coordinates' maxima are over the columns of ``C A``
    (``max |P A|``), the l1 bias over ``C`` itself. Public."""
    widest = max(spaces, key=lambda sp: int(sp.basis.shape[1])).basis
    return cmap.source.map_inputs(_projection_chunk, _projection_combine, cmap.terms, cmap.factors, widest,
                                  [int(sp.basis.shape[1]) for sp in spaces], cmap.persons)


# -- the noise optimiser: the columns as a provider of the one working-set loop ----------------------


def _top(parts: Tuple[np.ndarray, np.ndarray, np.ndarray], k: int):
    """The ``k`` largest values (ties: lower index first) of ``(index, value, columns)``."""
    idx, val, cols = parts
    if idx.size <= k:
        return idx, val, cols
    order = np.lexsort((idx, -val))[:k]
    return idx[order], val[order], cols[:, order]


def _cat(a, b):
    return tuple(np.concatenate([x, y], axis=-1) for x, y in zip(a, b))


def _excluded_mask(start: int, c: int, excluded: np.ndarray) -> np.ndarray:
    """Columns of the chunk that take part (not in the sorted ``excluded`` global indices)."""
    idx = np.arange(start, start + c)
    return ~np.isin(idx, excluded, assume_unique=True) if excluded.size else np.ones(c, dtype=bool)


def _gram_chunk(X, start, terms, factors, T, persons, excluded):
    V, start = _corner_columns(X, start, terms, factors, T, persons)
    keep = _excluded_mask(start, int(V.shape[1]), excluded)
    Vk = tf.boolean_mask(V, keep, axis=1)
    return {"G": tf.linalg.matmul(Vk, Vk, transpose_b=True).numpy(), "rowmax": tf.reduce_max(tf.abs(V), axis=1).numpy()}


def _gram_combine(a, b):
    return {"G": a["G"] + b["G"], "rowmax": np.maximum(a["rowmax"], b["rowmax"])}


def _select_chunk(X, start, terms, factors, T, persons, excluded, G, k_lev, k_norm):
    V, start = _corner_columns(X, start, terms, factors, T, persons)
    c = int(V.shape[1])
    idx = np.arange(start, start + c)
    keep = _excluded_mask(start, c, excluded)
    lev = tf.reduce_sum(linalg.solve(G, V) * V, axis=0).numpy()
    norms = tf.norm(V, axis=0).numpy()
    Vn = V.numpy()
    lev_top = _top((idx[keep], lev[keep], Vn[:, keep]), k_lev)
    norm_top = _top((idx[keep], norms[keep], Vn[:, keep]), k_norm)
    return lev_top, norm_top


def _select_combine(k_lev, k_norm):
    return lambda a, b: (_top(_cat(a[0], b[0]), k_lev), _top(_cat(a[1], b[1]), k_norm))


def _violators_chunk(X, start, terms, factors, T, persons, excluded, eigvecs, inv_scale, keep, k):
    V, start = _corner_columns(X, start, terms, factors, T, persons)
    c = int(V.shape[1])
    idx = np.arange(start, start + c)
    P = tf.linalg.matmul(tf.constant(eigvecs), V, transpose_a=True)
    q = tf.reduce_sum(P * P * tf.constant(inv_scale)[:, None], axis=0).numpy()
    part = _excluded_mask(start, c, excluded)
    qmax = float(np.max(q[part])) if part.any() else -np.inf
    if k == 0:
        return qmax, (idx[:0], q[:0], np.zeros((int(V.shape[0]), 0)))
    outside = part & ~np.isin(idx, keep) & (q > 1.0)
    return qmax, _top((idx[outside], q[outside], V.numpy()[:, outside]), k)


def _violators_combine(k):
    return lambda a, b: (max(a[0], b[0]), _top(_cat(a[1], b[1]), k))


def _gather_chunk(X, start, terms, factors, T, persons, wanted, rowmax=None):
    """The columns ``wanted`` (sorted global indices) in this chunk; with ``rowmax``, also every
    column's duplicate hash (one pass for both)."""
    V, start = _corner_columns(X, start, terms, factors, T, persons)
    c = int(V.shape[1])
    sel = wanted[(wanted >= start) & (wanted < start + c)]
    hashes = (column_hashes(V, tf.constant(rowmax), tf.constant(DUPLICATE_RTOL, tf.float64)).numpy()
              if rowmax is not None else np.zeros(0, np.uint64))
    return sel, tf.gather(V, sel - start, axis=1).numpy(), hashes


def _gather_combine(a, b):
    return np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]], axis=1), np.concatenate([a[2], b[2]])


class StreamedColumns:
    """The vectors ``T C_i`` (r x n, never formed) as a :class:`~dpgp_gpflow.noise_planning.ColumnProvider`:
    every pass is a reduction over the chunks of ``cmap`` (local or Dask), holding one chunk's columns
    at a time. With persons (``cmap.persons``) the vectors are the corner columns ``T C A_j`` (r x N_c),
    each chunk forming those of its own persons; indices are then global corner-column indices. The
    columns ``excluded`` (sorted global indices: duplicates of earlier ones) take no part.
    Called eagerly, so the working-set loop runs as a Python loop over these passes. Public."""

    def __init__(self, cmap: StreamedMap, T: np.ndarray, excluded: np.ndarray, stats: Dict[str, Any]) -> None:
        self.cmap, self.T, self.excluded, self.stats = cmap, T, excluded, stats

    def _map(self, chunk, combine, *args):
        return self.cmap.source.map_inputs(chunk, combine, self.cmap.terms, self.cmap.factors, self.T,
                                           self.cmap.persons, *args)

    def count(self) -> tf.Tensor:
        return tf.constant(self.cmap.num_columns - int(self.excluded.size), tf.int32)

    def gather(self, wanted: np.ndarray, rowmax: Optional[np.ndarray] = None):
        """The columns ``wanted`` (sorted global indices) and, with ``rowmax``, every column's duplicate hash."""
        return self._map(_gather_chunk, _gather_combine, wanted, rowmax)

    def start(self, rank) -> Tuple[tf.Tensor, tf.Tensor]:
        """:meth:`~dpgp_gpflow.noise_planning.ColumnProvider.start`. The r pivoted columns are chosen among the largest columns and
        those of largest leverage, with more candidates (up to ``MAX_PIVOT_CANDIDATES``) until the last
        pivot's residual exceeds every other column's norm, which makes the choice that of all columns
        (reported in ``stats["pivots_exact"]``)."""
        r, n = int(rank), self.cmap.num_columns
        if n - int(self.excluded.size) <= working_set.DENSE_POINTS:
            idx, cols, _ = self.gather(np.setdiff1d(np.arange(n), self.excluded))
            return tf.constant(idx, tf.int32), tf.constant(cols)
        G = self._map(_gram_chunk, _gram_combine, self.excluded)["G"]
        k_lev, k_norm = int(working_set.start_size(r, n)), max(8 * r, MIN_PIVOT_CANDIDATES) + 1
        while True:  # more candidates until the pivots are provably those of all columns (or the cap)
            lev_top, norm_top = self._map(_select_chunk, _select_combine(k_lev, k_norm), self.excluded, G, k_lev,
                                          k_norm)
            cand_idx, pos = np.unique(np.concatenate([norm_top[0][:-1], lev_top[0]]), return_index=True)
            cand_cols = np.concatenate([norm_top[2][:, :-1], lev_top[2]], axis=1)[:, pos]
            pivots, picked = (x.numpy() for x in pivot_columns(cand_cols, r))
            complete = norm_top[0].size < k_norm  # every column is a candidate
            exact = complete or bool(picked[r - 1] > float(norm_top[1][-1]))
            if exact or k_norm > MAX_PIVOT_CANDIDATES:
                break
            k_norm = 4 * (k_norm - 1) + 1
        self.stats["pivots_exact"] = exact
        chosen = np.union1d(lev_top[0], cand_idx[pivots[:r]])
        return tf.constant(chosen, tf.int32), tf.constant(cand_cols[:, np.searchsorted(cand_idx, chosen)])

    def violators(self, eigenvectors, inverse_scales, keep, count) -> Violators:
        k = int(count)
        if k:
            self.stats["rounds"] = self.stats.get("rounds", 0) + 1
        largest, (idx, q, cols) = self._map(_violators_chunk, _violators_combine(k), self.excluded,
                                            np.asarray(eigenvectors), np.asarray(inverse_scales), np.asarray(keep), k)
        return Violators(tf.constant(largest, tf.float64), tf.constant(idx, tf.int32), tf.constant(q, tf.float64),
                         tf.constant(cols.reshape(self.T.shape[0], -1), tf.float64))


def optimise_noise_covariance(cmap: StreamedMap, T: np.ndarray, objective: str, *, tol: float,
                              max_iter: int = 2000, stats: Optional[Dict[str, Any]] = None,
                              rowmax: Optional[np.ndarray] = None) -> NoiseCovariance:
    """:func:`dpgp_gpflow.noise_planning.optimise_noise_covariance` of the vectors ``T C`` (r x n, never formed):
    the same loop and certificate (:func:`dpgp_gpflow.noise_planning.working_set.solve_noise`) over
    :class:`StreamedColumns`. Only *where* the loop starts is the streamed release's own: above
    ``COARSE_FACTOR * COARSE_ROWS`` columns, from the solution on a public subsample (every k-th row,
    recursively; not with persons, whose corner columns a row subsample does not give: a cold start);
    and duplicates are found by one pass of 64-bit hashes
    (:func:`~dpgp_gpflow.noise_planning.column_hashes`).

    ``T`` (r x m) is public: the scaled basis of the chosen column space. ``rowmax``: ``max_i |T C_i|``
    per row if known (e.g. from :func:`projection_rows`; else one more pass), the scale of the
    duplicate keys. ``weights`` of the result holds the working set's weights only, as
    ``(indices, weights)``. ``stats`` (a dict) receives the rounds and whether the pivoted-QR start
    was exact. Public.
    """
    stats = {} if stats is None else stats
    n, r = cmap.num_columns, int(T.shape[0])
    every = StreamedColumns(cmap, T, np.zeros(0, dtype=int), stats)
    if rowmax is None:
        rowmax = every._map(_gram_chunk, _gram_combine, np.zeros(0, int))["rowmax"]
    usable = bool(np.all(np.isfinite(rowmax)) and np.all(rowmax > 0.0))
    start, steps, wanted = None, 0, np.zeros(0, dtype=int)
    if n > COARSE_FACTOR * COARSE_ROWS and cmap.persons is None:  # grow the working set on a public subsample first
        step = min(COARSE_STEP, n // COARSE_ROWS)  # one level per factor COARSE_STEP, down to COARSE_ROWS
        coarse = optimise_noise_covariance(cmap._replace(source=cmap.source.every(step)), T, objective, tol=tol,
                                           max_iter=max_iter, stats=stats.setdefault("coarse", {}))
        steps = coarse.certificate.iterations
        wanted = coarse.weights[0].numpy() * step
    excluded = np.zeros(0, dtype=int)
    if usable or wanted.size:
        # one pass: every column's duplicate hash (identical columns carry identical constraints: solve
        # over one representative of each) and the start's columns
        idx, cols, hashes = every.gather(wanted, rowmax if usable else None)
        excluded = _duplicates(hashes, n)
        if wanted.size:
            kept = ~np.isin(idx, excluded)
            start = WorkingSet(tf.constant(idx[kept], tf.int32), tf.constant(cols[:, kept]),
                               tf.constant(coarse.weights[1].numpy()[np.searchsorted(wanted, idx[kept])]))
    stats["distinct"] = n - int(excluded.size)
    distinct = StreamedColumns(cmap, T, excluded, stats) if excluded.size else every
    warm = start is not None
    if start is None:
        start = working_set.cold_start(distinct, tf.constant(r), objective)
    solution = working_set.solve_noise(distinct, every, start, tf.constant(warm), objective,
                                       tf.constant(float(tol), tf.float64), tf.constant(int(max_iter - steps)),
                                       same=not excluded.size)
    weights = solution.work.weights.numpy()
    certificate = certificate_of(objective, solution.gap, solution.relative_gap, tol, steps + int(solution.iterations),
                                 int(np.sum(weights > 1e-8 * weights.max())))
    return NoiseCovariance(solution.eigenvectors, solution.scales,
                           (tf.cast(solution.work.indices, tf.int64), solution.work.weights), certificate)


def _duplicates(hashes: np.ndarray, n: int) -> np.ndarray:
    """Global indices (sorted) of the columns whose hash an earlier column has: all but the first of
    each group of identical columns."""
    if hashes.size == 0:
        return np.zeros(0, dtype=int)
    _, first = np.unique(hashes, return_index=True)
    return np.setdiff1d(np.arange(n), first)


# -- sensitivity and the whitened query ----------------------------------------------------------


def _sensitivity_chunk(X, start, terms, factors, basis, factor_scaled, scale, factor_u, persons=None):
    V = _columns(X, terms, factors, basis.T)  # [r, c]: basis^T C, per row
    VA = person_columns(V, start, persons)[0]  # [r, c_A]: unscaled sensitivity vectors (basis^T C A)
    norm2 = noise_planning.max_mahalanobis_norm2(tf.constant(factor_scaled), VA * tf.constant(scale)[:, None])
    W = linalg.solve(factor_u, V)  # [r, c]
    WA = tf.norm(person_columns(W, start, persons)[0], axis=0).numpy()  # ||W A_j||
    return float(norm2), float(WA.max()), math.fsum(tf.norm(W, axis=0).numpy())


def _sensitivity_combine(a, b):
    return max(a[0], b[0]), max(a[1], b[1]), a[2] + b[2]


def sensitivities(cmap: StreamedMap, basis: np.ndarray, factor_scaled: np.ndarray, scale: np.ndarray,
                  factor_u: np.ndarray) -> Tuple[float, float, float]:
    """``max_i ||F_s^{-1} v_i||^2`` over the scaled vectors (for :func:`~dpgp_gpflow.noise_planning.mahalanobis_sensitivity`),
    and ``max_i ||w_i||`` and ``sum_i ||w_i||`` of ``W = F_u^{-1} V`` (for the exact sampler). With persons
    (``cmap.persons``) the two maxima are over the corner columns (``V A``, ``W A``), the sum over the
    rows' ``w_i`` (the rounding of ``W y``). Public."""
    return cmap.source.map_inputs(_sensitivity_chunk, _sensitivity_combine, cmap.terms, cmap.factors, basis,
                                  factor_scaled, scale, factor_u, cmap.persons)


def _query_chunk(X, Y, start, terms, factors, basis, factor_u, divisor, persons=None):
    V = _columns(X, terms, factors, basis.T)
    W = linalg.solve(factor_u, V) / divisor  # [r, c]
    norms = tf.norm(W, axis=0).numpy()
    largest = norms if persons is None else tf.norm(person_columns(W, start, persons)[0], axis=0).numpy()
    y = terms.centred_outputs(X, Y)  # PRIVATE, clipped before use
    return float(largest.max()), math.fsum(norms), tf.linalg.matvec(W, tf.constant(y)).numpy()


def _query_combine(a, b):
    return max(a[0], b[0]), a[1] + b[1], a[2] + b[2]


@trusted_query
class StreamedQuery:
    """The whitened query ``z = W y`` of the exact sampler, ``W = F_u^{-1} basis^T C / divisor`` (``divisor =
    s Delta``, :func:`~dpgp_gpflow.mechanisms.cloaking.whitened_sensitivity_of_norms`), recomputed chunk by
    chunk and never formed: the :class:`~dpgp_gpflow.mechanisms.cloaking.WhitenedQuery` that
    :func:`~dpgp_gpflow.mechanisms.publish_cloaking` checks and draws for, as it does every exact cloaking release.

    :meth:`shift` makes the one pass over the chunks (the outputs are read there, clipped first): ``max_i
    ||w_i||`` (with persons, ``cmap.persons``: ``max_j ||W A_j||`` over the corner columns) and ``sum_i
    ||w_i||`` of the rescaled matrix actually used, whose shift it returns
    (:func:`~dpgp_gpflow.mechanisms.cloaking.shift_of_norms`: the bound holds for any summation order,
    chunked or not), and ``z`` with them, which :meth:`values` returns (PRIVATE: r numbers, the only thing
    computed from the outputs; nothing is drawn unless the shift passed its check)."""

    def __init__(self, cmap: StreamedMap, basis: np.ndarray, factor_u: np.ndarray, divisor: float) -> None:
        self.cmap, self.basis, self.factor_u, self.divisor = cmap, basis, factor_u, float(divisor)
        self._z: Optional[np.ndarray] = None

    @property
    def rank(self) -> int:
        return int(self.basis.shape[1])

    @property
    def output_bound(self) -> float:
        """The bound on ``|y_c|`` of the outputs this query reads, clipped and centred by ``cmap.terms`` (public)."""
        return float(self.cmap.terms.output_bound)  # type: ignore[attr-defined]

    def shift(self, data_sensitivity: float, output_bound: float, multiplier: float) -> float:
        """The L2 shift of ``z`` (the one pass over the chunks). ``output_bound`` must be the query's own
        (:attr:`output_bound`): a shift checked with another bound than the outputs' clipping would not bound
        them; ``ValueError`` before any output is read (nothing drawn)."""
        if float(output_bound) != self.output_bound:
            raise ValueError(f"the shift is checked with output_bound {output_bound!r}, but the query's outputs are "
                             f"clipped and centred within {self.output_bound!r}: they must be one value")
        cmap = self.cmap
        largest, total, self._z = cmap.source.map_reduce(_query_chunk, _query_combine, cmap.terms, cmap.factors,
                                                         self.basis, self.factor_u, self.divisor, cmap.persons)
        return float(shift_of_norms(largest, total, cmap.num_entries, self.rank, data_sensitivity, output_bound,
                                    multiplier))

    @property
    def covers(self) -> SensitivityPath:
        """The persons (``cmap.persons``: their largest rows, the outputs of each row) :meth:`shift` is over."""
        persons = self.cmap.persons
        return SensitivityPath() if persons is None else SensitivityPath(largest_person(persons.ids), persons.outputs)

    def values(self) -> np.ndarray:
        if self._z is None:
            raise RuntimeError("the whitened query's shift is checked before its value is read")
        return self._z
