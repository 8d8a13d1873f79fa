"""The cloaking release's public computations, chunk by chunk: column space, rank rule, noise optimiser.

The in-memory release (:class:`~dpgp_gpflow.release.NoisePlan`, :func:`~dpgp_gpflow.cloaking.column_spaces`,
:func:`~dpgp_gpflow.cloaking.optimise_noise_covariance`) reads the m x n released map ``C = R B``
whole. Here every quantity it needs is a reduction over column chunks ``C[:, chunk]`` (computed from
the chunk's public inputs by :class:`~dpgp_gpflow.streaming.terms.ChunkTerms`):

* the column space: the R factor of a tall-skinny QR of ``C^T`` (stacked chunk R factors), whose
  SVD has the singular values and left vectors of ``C`` (no Gram matrix: no squared condition number);
* the rank rule's per-row l1 bias and largest projected entry: sums and maxima over chunks;
* the optimiser's working-set loop, step for step as
  :func:`dpgp_gpflow.cloaking.optimise_noise_covariance` runs it: the leverages ``q_i``, the
  duality-gap certificate and the most violated points (among which each round's violators are
  spread, :func:`~dpgp_gpflow.cloaking.spread_violators`) are reduced over chunks; only the working set's
  columns (r x |work|) are held; the restricted solve is the same compiled one
  (:func:`~dpgp_gpflow.cloaking.restricted_dual_solve`), and identical columns are found by the same
  64-bit hash of their rounded coordinates (:func:`~dpgp_gpflow.cloaking.column_hashes`). One
  departure, only about *where* the working set starts: the r pivoted-QR columns are chosen among
  the largest columns and the highest-leverage ones, with more candidates (up to
  ``PIVOT_CANDIDATES_MAX``) until the last pivot's residual exceeds every other column's norm,
  which makes the choice that of all columns (reported in ``stats["pivots_exact"]``). The
  certificate is over all columns either way;
* the sensitivity against the noise actually used, and the whitened query of the exact sampler:
  maxima and sums over chunks.

Privacy assumption: every function here is public (a function of ``C``) except
:func:`whitened_query`, which returns the one linear query ``W y`` of the clipped centred outputs
that the release noises; workers return only these public-shape results.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np
import tensorflow as tf

from .. import cloaking
from .. import linalg
from ..cloaking import (
    DUPLICATE_RTOL,
    PRUNE_LEVERAGE,
    PRUNE_MIN_POINTS,
    PRUNE_TOL,
    VIOLATOR_CANDIDATES,
    ColumnSpace,
    NoiseCovariance,
    OptimiserCertificate,
    best_uniform_weight,
    column_hashes,
    inverse_scale,
    pivot_columns,
    restricted_dual_solve,
    spread_violators,
)
from ..release import WHITENING_SLACK, check_whitened_shift, shift_bound_of_norms
from ..sampling import GRID_EXPONENT, gaussian_grid_factor
from .chunks import ChunkSource
from .terms import ChunkTerms, Factors

__all__ = [
    "COARSE_FACTOR",
    "COARSE_ROWS",
    "COARSE_STEP",
    "PIVOT_CANDIDATES",
    "PIVOT_CANDIDATES_MAX",
    "StreamedMap",
    "column_spaces",
    "optimise_noise_covariance",
    "projection_rows",
    "sensitivities",
    "whitened_query",
]

#: Above ``COARSE_FACTOR * COARSE_ROWS`` rows the working set is first grown on every k-th row
#: (``k = min(COARSE_STEP, n // COARSE_ROWS)``, chosen by position: public; recursively), and the solve
#: over all rows starts from that solution: most working-set rounds (one pass each) run on the subsample.
COARSE_ROWS = 10_000
COARSE_FACTOR = 3
COARSE_STEP = 10

#: Columns by norm among which the working set's r pivoted-QR columns are chosen (at least 8 r), ...
PIVOT_CANDIDATES = 2000
#: ... quadrupled (one more pass each time) until the choice is provably that of all columns, up to this.
PIVOT_CANDIDATES_MAX = 2**16


class StreamedMap(NamedTuple):
    """The released map ``C = R B`` (m x n) as a chunk source plus the public terms that give its columns."""

    source: ChunkSource
    terms: ChunkTerms
    factors: Factors


def _columns(X: np.ndarray, terms: ChunkTerms, factors: Factors, T: Optional[np.ndarray] = None) -> tf.Tensor:
    if T is None:
        return terms.columns(X, factors)  # [m, c]
    return terms.transformed_columns(X, factors, T)  # [r, c]


# -- column space -------------------------------------------------------------------------------


def _tsqr_chunk(X, start, terms, factors):
    return np.linalg.qr(_columns(X, terms, factors).numpy().T, mode="r")


def _tsqr_combine(a, b):
    return np.linalg.qr(np.vstack([a, b]), mode="r")


def column_spaces(cmap: StreamedMap, rtols) -> List[ColumnSpace]:
    """The column spaces of ``C`` for each tolerance, as :func:`dpgp_gpflow.cloaking.column_spaces`
    gives them, but with ``vectors`` left implicit (None): they are ``basis^T C``, recomputed per chunk.

    ``C^T = Q R_C`` by a tall-skinny QR over the chunks, so ``C = R_C^T Q^T`` and the SVD of the m x m
    ``R_C^T`` gives the singular values and left vectors of ``C`` (small: no need for the Gram matrix
    of :func:`~dpgp_gpflow.cloaking.singular_pairs`). Public.
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


def _projection_chunk(X, start, terms, factors, widest, ranks):
    C = _columns(X, terms, factors)
    coords = tf.linalg.matmul(widest, C, transpose_a=True)  # [r_max, c]: the spaces are nested
    out = []
    for r in ranks:
        P = tf.linalg.matmul(widest[:, :r], coords[:r])
        out.append((tf.reduce_sum(tf.abs(C - P), axis=1).numpy(), tf.reduce_max(tf.abs(P), axis=1).numpy()))
    return out, tf.reduce_max(tf.abs(coords), axis=1).numpy()


def _projection_combine(a, b):
    return [(x[0] + y[0], np.maximum(x[1], y[1])) for x, y in zip(a[0], b[0])], np.maximum(a[1], b[1])


def projection_rows(cmap: StreamedMap, spaces: List[ColumnSpace]) -> Tuple[List[Tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """:func:`dpgp_gpflow.cloaking.projection_rows` for every space, in one pass over the chunks; and
    ``max_i |u_j^T C_i|`` for every direction ``u_j`` of the widest space (the spaces are nested: the
    first r directions of the widest), from which the optimiser's duplicate keys are scaled. Public."""
    widest = max(spaces, key=lambda sp: int(sp.basis.shape[1])).basis
    return cmap.source.map_inputs(_projection_chunk, _projection_combine, cmap.terms, cmap.factors, widest,
                                  [int(sp.basis.shape[1]) for sp in spaces])


# -- the noise optimiser ------------------------------------------------------------------------


def _top(parts: Tuple[np.ndarray, np.ndarray, np.ndarray], k: int):
    """The ``k`` largest values (ties: lower index first) of ``(index, value, columns)``."""
    idx, val, cols = parts
    if idx.size <= k:
        return idx, val, cols
    order = np.lexsort((idx, -val))[:k]
    return idx[order], val[order], cols[:, order]


def _cat(a, b):
    return tuple(np.concatenate([x, y], axis=-1) for x, y in zip(a, b))


def _top_combine(k):
    return lambda a, b: _top(_cat(a, b), k)


def _excluded_mask(start: int, c: int, excluded: np.ndarray) -> np.ndarray:
    """Columns of the chunk that take part (not in the sorted ``excluded`` global indices)."""
    idx = np.arange(start, start + c)
    return ~np.isin(idx, excluded, assume_unique=True) if excluded.size else np.ones(c, dtype=bool)


def _gram_chunk(X, start, terms, factors, T, excluded):
    V = _columns(X, terms, factors, T)
    keep = _excluded_mask(start, int(V.shape[1]), excluded)
    Vk = tf.boolean_mask(V, keep, axis=1)
    return {"G": tf.linalg.matmul(Vk, Vk, transpose_b=True).numpy(), "rowmax": tf.reduce_max(tf.abs(V), axis=1).numpy()}


def _gram_combine(a, b):
    return {"G": a["G"] + b["G"], "rowmax": np.maximum(a["rowmax"], b["rowmax"])}


def _select_chunk(X, start, terms, factors, T, excluded, G, k_lev, k_norm):
    V = _columns(X, terms, factors, T)
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


def _dual(cols: np.ndarray, weights: np.ndarray, objective: str):
    """Eigen-decomposition of ``S = cols diag(weights) cols^T`` (the in-memory ``_dual_terms``)."""
    vectors = tf.constant(cols)
    S = tf.linalg.matmul(vectors * tf.constant(weights)[None, :], vectors, transpose_b=True)
    S = 0.5 * (S + tf.transpose(S))
    w, V = tf.linalg.eigh(S)
    w = tf.maximum(w, tf.reduce_max(w) * 1e-300 + 1e-300)
    return w.numpy(), V.numpy(), inverse_scale(w, objective).numpy()


def _leverages(V: tf.Tensor, eigvecs: np.ndarray, inv_scale: np.ndarray) -> np.ndarray:
    P = tf.linalg.matmul(tf.constant(eigvecs), V, transpose_a=True)
    return tf.reduce_sum(P * P * tf.constant(inv_scale)[:, None], axis=0).numpy()


def _gap(w: np.ndarray, qmax: float, total: float, objective: str) -> Tuple[float, float]:
    """Duality gap and relative gap (the in-memory ``cloaking._gap``)."""
    r = float(w.size)
    if objective == "entropy":
        eps = qmax * total / r - 1.0
        gap = r * math.log1p(max(eps, -0.5))
        return gap, gap / r
    trace = float(np.sum(np.sqrt(w)))
    eps = qmax * total / trace - 1.0
    return eps * trace * trace / total, eps


def _certificate_chunk(X, start, terms, factors, T, excluded, eigvecs, inv_scale, keep, k):
    V = _columns(X, terms, factors, T)
    c = int(V.shape[1])
    idx = np.arange(start, start + c)
    q = _leverages(V, eigvecs, inv_scale)
    part = _excluded_mask(start, c, excluded)
    qmax = float(np.max(q[part])) if part.any() else -np.inf
    if k == 0:
        return qmax, (idx[:0], q[:0], np.zeros((int(V.shape[0]), 0)))
    outside = part & ~np.isin(idx, keep) & (q > 1.0)
    return qmax, _top((idx[outside], q[outside], V.numpy()[:, outside]), k)


def _certificate_combine(k):
    return lambda a, b: (max(a[0], b[0]), _top(_cat(a[1], b[1]), k))


def _gather_chunk(X, start, terms, factors, T, wanted, rowmax=None):
    """The columns ``wanted`` (sorted global indices) in this chunk; with ``rowmax``, also every
    column's duplicate hash (one pass for both)."""
    V = _columns(X, terms, factors, T)
    c = int(V.shape[1])
    sel = wanted[(wanted >= start) & (wanted < start + c)]
    hashes = (column_hashes(V, tf.constant(rowmax), tf.constant(DUPLICATE_RTOL, tf.float64)).numpy()
              if rowmax is not None else np.zeros(0, np.uint64))
    return sel, tf.gather(V, sel - start, axis=1).numpy(), hashes


def _gather_combine(a, b):
    return np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]], axis=1), np.concatenate([a[2], b[2]])


class _Work:
    """The working set: sorted global indices, their columns (r x |work|) and weights."""

    def __init__(self, idx: np.ndarray, cols: np.ndarray, weights: np.ndarray) -> None:
        order = np.argsort(idx, kind="stable")
        self.idx, self.cols, self.weights = idx[order], cols[:, order], weights[order]

    def subset(self, mask: np.ndarray) -> "_Work":
        return _Work(self.idx[mask], self.cols[:, mask], self.weights[mask])


def _solve_on_working_sets(cmap: StreamedMap, T: np.ndarray, objective: str, tol: float, max_iter: int,
                           excluded: np.ndarray, stats: Dict[str, Any], start: Optional[_Work] = None):
    """The in-memory working-set loop (``cloaking._solve_on_working_sets``) over the chunks; returns the
    final working set (its weights are the solution; every other point has weight 0), the steps, and
    the certificate pass of those weights (``(w, eigvecs, inv_scale, qmax)`` over every column not
    ``excluded``) if the loop ended on one, else None.
    ``start``: the working set of a warm start (e.g. a subsample's solution), solved to ``tol``
    from the first round."""
    r = int(T.shape[0])
    n = cmap.source.n
    n_part = n - int(excluded.size)
    if start is not None:
        work = start
    elif n_part <= cloaking.DENSE_POINTS:
        wanted = np.setdiff1d(np.arange(n), excluded)
        idx, cols, _ = cmap.source.map_inputs(_gather_chunk, _gather_combine, cmap.terms, cmap.factors, T, wanted)
        work = _Work(idx, cols, np.zeros(idx.size))
    else:
        G = cmap.source.map_inputs(_gram_chunk, _gram_combine, cmap.terms, cmap.factors, T, excluded)["G"]
        k_lev, k_norm = max(4 * r, 500), max(8 * r, PIVOT_CANDIDATES) + 1
        while True:  # more candidates until the pivots are provably those of all columns (or the cap)
            lev_top, norm_top = cmap.source.map_inputs(_select_chunk, _select_combine(k_lev, k_norm), cmap.terms,
                                                       cmap.factors, T, excluded, G, k_lev, k_norm)
            cand_idx, pos = np.unique(np.concatenate([norm_top[0][:-1], lev_top[0]]), return_index=True)
            cand_cols = np.concatenate([norm_top[2][:, :-1], lev_top[2]], axis=1)[:, pos]
            pivots, picked = (x.numpy() for x in pivot_columns(cand_cols, r))
            complete = norm_top[0].size < k_norm  # every column is a candidate
            exact = complete or bool(picked[r - 1] > float(norm_top[1][-1]))
            if exact or k_norm > PIVOT_CANDIDATES_MAX:
                break
            k_norm = 4 * (k_norm - 1) + 1
        stats["pivots_exact"] = exact
        chosen = np.union1d(lev_top[0], cand_idx[pivots[:r]])
        where = np.searchsorted(cand_idx, chosen)
        work = _Work(chosen, cand_cols[:, where], np.zeros(chosen.size))
    if start is None:
        work.weights[:] = best_uniform_weight(tf.constant(work.cols), objective)
    loose = start is None and work.idx.size > max(3 * r, PRUNE_MIN_POINTS)
    stage_tol = max(tol, PRUNE_TOL) if loose else tol
    total_iters, certified, fresh = 0, None, True
    for _ in range(50):
        w_sub = np.maximum(work.weights, 1e-12 * r / work.idx.size)
        remaining = max(max_iter - total_iters, 1)
        w_sub, its, met = restricted_dual_solve(tf.constant(work.cols), tf.constant(w_sub), objective, stage_tol,
                                                remaining, primal_dual=fresh)
        total_iters += int(its)
        work.weights = w_sub.numpy()
        if work.idx.size == n_part and stage_tol <= tol and bool(met):
            break  # the restricted certificate is the full one here
        w, eigvecs, inv_scale = _dual(work.cols, work.weights, objective)
        q_work = _leverages(tf.constant(work.cols), eigvecs, inv_scale)
        wmax = work.weights.max()
        if stage_tol > tol:
            heavy = work.idx[np.argsort(-work.weights)[: 2 * r]]
            keep = np.union1d(work.idx[(work.weights > 1e-3 * wmax) | (q_work > PRUNE_LEVERAGE)], heavy)
        else:
            keep = work.idx[work.weights > 1e-10 * wmax]
        k = VIOLATOR_CANDIDATES * r
        qmax, viol = cmap.source.map_inputs(_certificate_chunk, _certificate_combine(k), cmap.terms, cmap.factors,
                                            T, excluded, eigvecs, inv_scale, keep, k)
        picked = spread_violators((eigvecs.T @ viol[2]) * np.sqrt(inv_scale)[:, None], r).numpy()
        viol = (viol[0][picked], viol[1][picked], viol[2][:, picked])
        stats["rounds"] = stats.get("rounds", 0) + 1
        _, rel = _gap(w, qmax, float(np.sum(work.weights)), objective)
        if rel <= tol or total_iters >= max_iter:
            certified = (w, eigvecs, inv_scale, qmax)
            break
        stage_tol = tol
        fresh = viol[0].size == 0  # primal-dual unless violators were just added at a guessed weight
        if fresh and keep.size == work.idx.size:
            continue
        kept = work.subset(np.isin(work.idx, keep))
        work = _Work(np.concatenate([kept.idx, viol[0]]), np.concatenate([kept.cols, viol[2]], axis=1),
                     np.concatenate([kept.weights, np.full(viol[0].size, 1e-3 * wmax)]))
    return work, total_iters, certified


def _certify(cmap: StreamedMap, T: np.ndarray, work: _Work, objective: str):
    """The certificate pass over every column: ``(w, eigvecs, inv_scale, qmax)`` of the working set's weights."""
    w, eigvecs, inv_scale = _dual(work.cols, work.weights, objective)
    qmax, _ = cmap.source.map_inputs(_certificate_chunk, _certificate_combine(0), cmap.terms, cmap.factors, T,
                                     np.zeros(0, int), eigvecs, inv_scale, np.zeros(0, int), 0)
    return w, eigvecs, inv_scale, qmax


def optimise_noise_covariance(cmap: StreamedMap, T: np.ndarray, objective: str, *, tol: float,
                              max_iter: int = 2000, stats: Optional[Dict[str, Any]] = None,
                              rowmax: Optional[np.ndarray] = None) -> NoiseCovariance:
    """:func:`dpgp_gpflow.cloaking.optimise_noise_covariance` of the vectors ``T C`` (r x n, never formed).

    ``T`` (r x m) is public: the scaled basis of the chosen column space. ``rowmax``: ``max_i |T C_i|``
    per row if known (e.g. from :func:`projection_rows`; else one more pass), the scale of the
    duplicate keys. ``weights`` of the result holds the working set's weights only, as
    ``(indices, weights)``. ``stats`` (a dict) receives the rounds and whether the pivoted-QR start
    was exact. Public.
    """
    stats = {} if stats is None else stats
    n = cmap.source.n
    if rowmax is None:
        rowmax = cmap.source.map_inputs(_gram_chunk, _gram_combine, cmap.terms, cmap.factors, T, np.zeros(0, int))["rowmax"]
    usable = bool(np.all(np.isfinite(rowmax)) and np.all(rowmax > 0.0))
    start, total_iters, wanted = None, 0, np.zeros(0, dtype=int)
    if n > COARSE_FACTOR * COARSE_ROWS:  # grow the working set on a public subsample first
        step = min(COARSE_STEP, n // COARSE_ROWS)  # one level per factor COARSE_STEP, down to COARSE_ROWS
        coarse = optimise_noise_covariance(cmap._replace(source=cmap.source.every(step)), T, objective, tol=tol,
                                           max_iter=max_iter, stats=stats.setdefault("coarse", {}))
        total_iters = coarse.certificate.iterations
        wanted = coarse.weights[0].numpy() * step
    excluded = np.zeros(0, dtype=int)
    if usable or wanted.size:
        # one pass: every column's duplicate hash (identical columns carry identical constraints: solve
        # over one representative of each) and the start's columns
        idx, cols, hashes = cmap.source.map_inputs(_gather_chunk, _gather_combine, cmap.terms, cmap.factors, T,
                                                   wanted, rowmax if usable else None)
        excluded = _duplicates(hashes, n)
        if wanted.size:
            kept = ~np.isin(idx, excluded)
            start = _Work(idx[kept], cols[:, kept], coarse.weights[1].numpy()[np.searchsorted(wanted, idx[kept])])
    stats["distinct"] = n - int(excluded.size)
    work, more, certified = _solve_on_working_sets(cmap, T, objective, tol, max_iter - total_iters, excluded, stats,
                                                   start)
    total_iters += more
    if certified is None or excluded.size:  # the loop's last pass did not cover every column
        certified = _certify(cmap, T, work, objective)
    w, eigvecs, inv_scale, qmax = certified
    gap, rel = _gap(w, qmax, float(np.sum(work.weights)), objective)
    if rel > tol and excluded.size and total_iters < max_iter:  # the merge was too coarse: all columns
        work, more, _ = _solve_on_working_sets(cmap, T, objective, tol, max_iter - total_iters, np.zeros(0, int), stats)
        total_iters += more
        w, eigvecs, inv_scale, qmax = _certify(cmap, T, work, objective)
        gap, rel = _gap(w, qmax, float(np.sum(work.weights)), objective)
    scales = np.sqrt(w * qmax) if objective == "entropy" else np.sqrt(np.sqrt(w) * qmax)
    certificate = OptimiserCertificate(objective=objective, gap=float(gap), relative_gap=float(rel), tol=float(tol),
                                       iterations=total_iters, converged=bool(rel <= tol),
                                       support=int(np.sum(work.weights > 1e-8 * work.weights.max())))
    weights = (tf.constant(work.idx), tf.constant(work.weights))
    return NoiseCovariance(tf.constant(eigvecs), tf.constant(scales), weights, certificate)


def _duplicates(hashes: np.ndarray, n: int) -> np.ndarray:
    """Global indices (sorted) of the columns whose hash an earlier column has: all but the first of
    each group of identical columns."""
    if hashes.size == 0:
        return np.zeros(0, dtype=int)
    _, first = np.unique(hashes, return_index=True)
    return np.setdiff1d(np.arange(n), first)


# -- sensitivity and the whitened query ----------------------------------------------------------


def _sensitivity_chunk(X, start, terms, factors, basis, factor_scaled, scale, factor_u):
    V = _columns(X, terms, factors, basis.T)  # [r, c]: unscaled sensitivity vectors
    norm2 = cloaking.max_mahalanobis_norm2(tf.constant(factor_scaled), V * tf.constant(scale)[:, None])
    W = tf.norm(linalg.solve(factor_u, V), axis=0).numpy()
    return float(norm2), float(W.max()), math.fsum(W)


def _sensitivity_combine(a, b):
    return max(a[0], b[0]), max(a[1], b[1]), a[2] + b[2]


def sensitivities(cmap: StreamedMap, basis: np.ndarray, factor_scaled: np.ndarray, scale: np.ndarray,
                  factor_u: np.ndarray) -> Tuple[float, float, float]:
    """``max_i ||F_s^{-1} v_i||^2`` over the scaled vectors (for :func:`~dpgp_gpflow.cloaking.mahalanobis_sensitivity`),
    and ``max_i ||w_i||`` and ``sum_i ||w_i||`` of ``W = F_u^{-1} V`` (for the exact sampler). Public."""
    return cmap.source.map_inputs(_sensitivity_chunk, _sensitivity_combine, cmap.terms, cmap.factors, basis,
                                  factor_scaled, scale, factor_u)


def _query_chunk(X, Y, start, terms, factors, basis, factor_u, divisor):
    V = _columns(X, terms, factors, basis.T)
    W = linalg.solve(factor_u, V) / divisor  # [r, c]
    norms = tf.norm(W, axis=0).numpy()
    y = terms.centred_outputs(X, Y)  # PRIVATE, clipped before use
    return float(norms.max()), math.fsum(norms), tf.linalg.matvec(W, tf.constant(y)).numpy()


def _query_combine(a, b):
    return max(a[0], b[0]), a[1] + b[1], a[2] + b[2]


def whitened_query(cmap: StreamedMap, basis: np.ndarray, factor_u: np.ndarray, noise_sensitivity: float,
                   whitened_norms: Tuple[float, float], multiplier: float, data_sensitivity: float,
                   output_bound: float) -> Tuple[float, np.ndarray]:
    """The exact sampler's sensitivity ``Delta`` and whitened query ``z = W y`` (``release._whitened_query``).

    ``whitened_norms``: ``max_i ||w_i||`` and ``sum_i ||w_i||`` from :func:`sensitivities`. PRIVATE result ``z`` (r numbers): the only thing computed from the outputs; everything else is
    public. The shift bound ``d max_i ||w_i|| + 2 gamma_n b sum_i ||w_i||`` holds for any summation
    order, chunked or not; it is recomputed from the rescaled matrix actually used and the release is
    refused if it exceeds ``1 / (s K)``.
    """
    n, r = cmap.source.n, int(basis.shape[1])
    d, b = float(data_sensitivity), float(output_bound)

    def shift_bound(largest: float, total: float) -> float:
        return float(shift_bound_of_norms(largest, total, n, d, b))

    largest, total = whitened_norms
    sensitivity = max(float(noise_sensitivity), shift_bound(largest, total)) * gaussian_grid_factor(multiplier, r) \
        * WHITENING_SLACK
    largest, total, z = cmap.source.map_reduce(_query_chunk, _query_combine, cmap.terms, cmap.factors, basis,
                                               factor_u, multiplier * sensitivity)
    check_whitened_shift(shift_bound(largest, total) + math.sqrt(r) * 2.0**GRID_EXPONENT, multiplier)
    return sensitivity, z
