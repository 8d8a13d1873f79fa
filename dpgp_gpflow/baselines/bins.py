"""A grid of axis-aligned bins with public edges: the geometry of the binning baselines.

Privacy assumption: the edges are public, chosen without the private outputs. :func:`make_bins`
never places them from the data; inputs are public, so bin membership and counts are public too.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from numbers import Integral
from typing import Any, Optional, Tuple

import numpy as np
from check_shapes import check_shapes

from ..kernels import grid_edges
from ..validation import as_inputs

__all__ = ["Bins", "make_bins"]

#: Most bins :func:`make_bins` builds from ``counts`` (every release allocates a few arrays of this size).
MAX_BINS = 10**7


@dataclass(frozen=True, eq=False)
class Bins:
    """A D-dimensional grid of axis-aligned bins with public edges.

    ``edges[d]`` is the strictly increasing array of bin edges along axis ``d`` (``shape[d] + 1``
    values). Bin ``j`` is the flat (C-order, first axis slowest) index of its per-axis indices.
    Along each axis a bin is ``[e_k, e_{k+1})``, the last one closed ``[e_{K-1}, e_K]`` (as
    ``numpy.histogramdd``).
    """

    edges: Tuple[np.ndarray, ...]

    @property
    def ndim(self) -> int:
        """D, the input dimension."""
        return len(self.edges)

    @property
    def shape(self) -> Tuple[int, ...]:
        """Number of bins along each axis."""
        return tuple(len(e) - 1 for e in self.edges)

    @property
    def n_bins(self) -> int:
        """B, the total number of bins."""
        return int(np.prod(self.shape))

    @property
    def lower(self) -> np.ndarray:
        """``[B, D]`` lower corners."""
        grids = np.meshgrid(*[e[:-1] for e in self.edges], indexing="ij")
        return np.stack([g.ravel() for g in grids], axis=1)

    @property
    def upper(self) -> np.ndarray:
        """``[B, D]`` upper corners."""
        grids = np.meshgrid(*[e[1:] for e in self.edges], indexing="ij")
        return np.stack([g.ravel() for g in grids], axis=1)

    @property
    def boxes(self) -> np.ndarray:
        """``[B, 2D]`` rows ``[lower_1..D, upper_1..D]`` (the input format of ``IntegralSE``)."""
        return np.concatenate([self.lower, self.upper], axis=1)

    @property
    def centres(self) -> np.ndarray:
        """``[B, D]`` bin centres."""
        return 0.5 * (self.lower + self.upper)

    @property
    def volumes(self) -> np.ndarray:
        """``[B]`` bin volumes (products of the widths)."""
        return np.prod(self.upper - self.lower, axis=1)

    @check_shapes("return: [N]")
    def contains(self, X: Any) -> np.ndarray:
        """``[N]`` booleans: which rows of ``X`` lie in the grid (edges included)."""
        X = as_inputs("X", X, self.ndim)
        inside = np.ones(X.shape[0], dtype=bool)
        for d, e in enumerate(self.edges):
            inside &= (X[:, d] >= e[0]) & (X[:, d] <= e[-1])
        return inside

    @check_shapes("return[0]: [N]", "return[1]: [N]")
    def locate(self, X: Any) -> Tuple[np.ndarray, np.ndarray]:
        """Flat bin index of each row of ``X`` and whether it lies in the grid.

        Points outside the grid get the index of the *nearest* bin (per-axis indices clipped),
        and ``inside`` False. Returns ``(index [N] int64, inside [N] bool)``.
        """
        X = as_inputs("X", X, self.ndim)
        per_axis = []
        for d, e in enumerate(self.edges):
            k = np.searchsorted(e, X[:, d], side="right") - 1
            k = np.where(X[:, d] == e[-1], len(e) - 2, k)  # the last bin is closed on the right
            per_axis.append(np.clip(k, 0, len(e) - 2))
        index = np.ravel_multi_index(tuple(per_axis), self.shape)
        return np.asarray(index, dtype=np.int64), self.contains(X)


def _axis_bounds(bounds: Any, D: int) -> np.ndarray:
    """Public input bounds as ``[D, 2]``: one pair for every axis, or one pair per axis."""
    b = np.asarray(bounds, dtype=np.float64)
    if b.shape == (2,):
        b = np.tile(b, (D, 1))
    if b.shape != (D, 2):
        raise ValueError(
            f"bounds must be a pair (lo, hi) used for every axis or one pair per axis, shape ({D}, 2); "
            f"got shape {b.shape}"
        )
    if not np.all(np.isfinite(b)) or not np.all(b[:, 0] < b[:, 1]):
        raise ValueError(f"bounds must be finite with lo < hi on every axis, got {b.tolist()}")
    return b


def _from_counts(counts: Any, bounds: Any, D: Optional[int]) -> Bins:
    if bounds is None:
        raise ValueError(
            "counts need public input bounds: pass bounds=(lo, hi) (or one pair per axis) chosen "
            "without looking at the data. Edges are never derived from the data here, because the "
            "grid must be a public, stated choice (use edges= for any other public grid)."
        )
    if isinstance(counts, Integral):
        if D is None:
            b = np.asarray(bounds, dtype=np.float64)
            D = 1 if b.shape == (2,) else b.shape[0]
        counts = [counts] * D
    if any(isinstance(c, (bool, np.bool_)) for c in counts):
        raise TypeError(f"counts must be integers, got {counts!r}")
    counts = [int(c) for c in counts]
    if D is None:
        D = len(counts)
    if len(counts) != D:
        raise ValueError(f"counts gives {len(counts)} axes but X has D = {D} columns")
    if any(c < 1 for c in counts):
        raise ValueError(f"counts must be >= 1, got {counts}")
    if math.prod(counts) > MAX_BINS:
        raise ValueError(f"counts {counts} give more than {MAX_BINS} bins")
    b = _axis_bounds(bounds, D)
    with np.errstate(over="ignore", invalid="ignore"):
        axes = tuple(np.linspace(b[d, 0], b[d, 1], counts[d] + 1) for d in range(D))
        ok = [np.all(np.isfinite(e)) and np.all(np.diff(e) > 0.0) and np.all(np.isfinite(e[:-1] + e[1:])) for e in axes]
    for d, e in enumerate(axes):
        if not ok[d]:
            raise ValueError(f"{counts[d]} equal-width bins over the bounds {b[d].tolist()} are not representable "
                             "in float64 (the width or a bin centre overflows, or the edges would repeat)")
    return Bins(axes)


def make_bins(
    X: Any = None,
    *,
    edges: Any = None,
    counts: Any = None,
    bounds: Any = None,
) -> Bins:
    """A grid of bins with public edges: ``edges`` given, or ``counts`` bins per axis over ``bounds``.

    :param X: optional public inputs ``[N, D]``, used only to check the dimension and to warn
        (``UserWarning``, with the count) when some inputs lie outside the grid. Never used to
        place the edges.
    :param edges: one strictly increasing array of edges per axis (a single array for D = 1).
    :param counts: the number of bins per axis (an int for every axis, or one per axis), with
        ``bounds``: equal-width bins spanning each axis' public bounds. ``ValueError`` when the edges
        are not finite and strictly increasing in float64, or for more than :data:`MAX_BINS` bins.
    :param bounds: public input bounds, a pair ``(lo, hi)`` for every axis or ``[D, 2]``.

    The edges must be chosen without the private outputs. Bins from ``counts`` need public
    ``bounds``: this function refuses to take them from the data (``ValueError``), so that the grid
    is always a stated, public choice. (Inputs are public, so e.g. quantiles of ``X`` are a
    legitimate choice: compute them yourself and pass them as ``edges``.)
    """
    D = None if X is None else as_inputs("X", X).shape[1]
    if (edges is None) == (counts is None):
        raise ValueError("give exactly one of edges (per axis) or counts (with public bounds)")
    if edges is not None:
        if bounds is not None:
            raise ValueError("bounds are only used with counts; edges already fix the grid")
        axes = grid_edges(edges)
        if D is not None and len(axes) != D:
            raise ValueError(f"edges give {len(axes)} axes but X has D = {D} columns")
        bins = Bins(axes)
    else:
        bins = _from_counts(counts, bounds, D)
    if X is not None:
        outside = int(np.sum(~bins.contains(X)))
        if outside:
            warnings.warn(f"{outside} of {np.shape(X)[0]} inputs lie outside the grid", UserWarning, stacklevel=2)
    return bins
