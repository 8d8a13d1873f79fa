"""The whole-row sufficient statistics: sums over rows, in one pass over row chunks.

For rows ``(x_i, y_i)`` with ``x_i`` clipped to the public box, ``y_i`` clipped to the public bounds
``(lo, hi)`` and centred at their midpoint ``c`` (``y_c = y - c``, ``|y_c| <= d / 2``, ``d = hi - lo``), and
the unit-scale whitened features ``phi`` of :mod:`dpgp_gpflow.whole_rows.features`:

    S = sum_i phi(x_i) phi(x_i)^T   [M, M],   b = sum_i phi(x_i) y_c,i   [M],   q = sum_i y_c,i^2.

Everything a sparse GP (Titsias' SGPR / DTC) needs of the data is in ``(S, b, q, n)``
(docs/whole_rows.md#the-statistics). :func:`sufficient_statistics` computes them from any
:class:`~dpgp_gpflow.streaming.ChunkSource` (:class:`~dpgp_gpflow.streaming.LocalChunks` in this process, a
:class:`~dpgp_gpflow.distributed.DaskChunks` reduction on a cluster): each chunk returns its own sums, the
sums are added (associative), and no more than one chunk's features [c, M] exist at a time on a worker.

Privacy assumption: the box, the bounds, ``Z`` and the kernel are public; the inputs and outputs are private
and enter only here. What leaves is the sums (released only with noise, by
:mod:`dpgp_gpflow.whole_rows.mechanism`) and, for the data owner, how many rows were clipped (a count, as
for the outputs of every release).
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from ..exceptions import ClippingWarning
from ..streaming.chunks import ChunkSource
from ..validation import validate_bounds
from .design import clip_private_inputs, validate_box
from . import features as feature_maps
from .features import FeatureMap

__all__: list[str] = []  # internal: the package imports these names by name


class Statistics(NamedTuple):
    """The sums over rows (PRIVATE until released with noise) and the public row count."""

    S: np.ndarray  #: [M, M] sum of phi phi^T
    b: np.ndarray  #: [M] sum of phi y_c
    q: float  #: sum of y_c^2
    n: int  #: the number of rows (public under replace-one neighbours)
    clipped_inputs: int  #: rows with an input outside the box (a count for the data owner)
    clipped_outputs: int  #: outputs outside the bounds (a count for the data owner)


@check_shapes("Z: [M, D]", "L: [M, M]", "X: [N, D]", "yc: [N]", "return[0]: [M, M]", "return[1]: [M]", "return[2]: []")
def chunk_sums(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, k_max: float, X: tf.Tensor,
               yc: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """One chunk's ``(S, b, q)`` from its clipped inputs ``X`` and centred clipped outputs ``yc`` (PRIVATE values;
    the kernel, ``Z``, ``L`` and ``k_max`` public): one function, so that
    :meth:`~dpgp_gpflow.whole_rows.features.FeatureMap.apply` runs it as one compiled graph per chunk."""
    # looked up in its module when traced (one definition, which the tests can replace by a broken variant)
    phi = feature_maps.whitened_features(kernel, Z, L, X, k_max)  # [c, M], each row of norm <= 1
    return feature_sums(phi, yc)


@check_shapes("phi: [N, M]", "yc: [N]", "return[0]: [M, M]", "return[1]: [M]", "return[2]: []")
def feature_sums(phi: tf.Tensor, yc: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """``(S, b, q)`` of a slice's features ``phi`` [c, M] and centred clipped outputs ``yc`` [c] (PRIVATE values):
    the one place of the sums (:func:`chunk_sums`, and the residual releases' pass that keeps the features)."""
    return (tf.linalg.matmul(phi, phi, transpose_a=True), tf.linalg.matvec(phi, yc, transpose_a=True),
            tf.reduce_sum(tf.square(yc)))


def add_statistics(a: Dict[str, Any], b: Dict[str, Any]) -> Dict[str, Any]:
    """Two chunks' sums added (every entry is a sum)."""
    return {key: a[key] + b[key] for key in a}


#: The most rows of a chunk whose features exist at once: a longer chunk (e.g. a Dask partition of 10^6 rows) is
#: summed slice by slice, so its features [SLICE_ROWS, M] stay small (memory O(SLICE_ROWS M) per worker, and
#: faster: they stay in cache). Chunks up to this length are summed in one piece.
SLICE_ROWS = 32_768


class RowStatistics:
    """The per-chunk function of :func:`sufficient_statistics`: the public feature map, box and bounds, and
    whether inputs outside the box are clipped (``clip_inputs``) or refused. Picklable (Dask workers)."""

    #: sent once to a Dask cluster (:class:`~dpgp_gpflow.distributed.DaskChunks` wraps it in dask.delayed)
    shared_on_dask = True

    def __init__(self, features: FeatureMap, x_bounds: Any, y_bounds: Any, *, clip_inputs: bool = True) -> None:
        if not isinstance(features, FeatureMap):
            raise TypeError(f"features must be a FeatureMap, got {type(features).__name__}")
        self.features = features
        self.box = validate_box(x_bounds, features.input_dim)
        self.y_bounds = validate_bounds(y_bounds)
        if not isinstance(clip_inputs, (bool, np.bool_)):
            raise TypeError(f"clip_inputs must be True or False, got {clip_inputs!r}")
        self.clip_inputs = bool(clip_inputs)
        self._chunks = 0  # chunks summed by this object (in this process)

    #: compile the feature map's chunk sums from this many chunks on (None: never; a map reused across releases is
    #: compiled already, :func:`~dpgp_gpflow.whole_rows.features.feature_map`). Tracing costs about as much as a few
    #: eager chunks: a source of a few chunks stays eager (a release of 6 rows in 2 chunks: 0.88 s compiled after
    #: its first chunk, 0.53 s eager, measured side by side), a long pass compiles early
    compile_after = 4

    @property
    def midpoint(self) -> float:
        """``c``: the outputs are centred at the bounds' midpoint (public)."""
        lo, hi = self.y_bounds
        return 0.5 * (lo + hi)

    def prepared(self, X: np.ndarray, Y: np.ndarray) -> Tuple[np.ndarray, np.ndarray, int, int]:
        """One chunk's rows checked and clipped: ``(X [c, D] clipped to the box, y_c [c] clipped to the bounds and
        centred, rows with an input outside the box, outputs outside the bounds)`` (PRIVATE values; the counts for
        the data owner). The feature map is compiled from the ``compile_after``-th chunk on."""
        X = np.asarray(X, dtype=np.float64)
        Y = np.asarray(Y, dtype=np.float64)
        if Y.ndim == 2 and Y.shape[1] == 1:
            Y = Y[:, 0]
        if X.ndim != 2 or X.shape[1] != self.features.input_dim or Y.ndim != 1 or Y.shape[0] != X.shape[0]:
            raise ValueError(f"a chunk must hold [c, {self.features.input_dim}] inputs and c outputs (one per row), "
                             f"got {list(X.shape)} and {list(Y.shape)}")
        if not (np.all(np.isfinite(X)) and np.all(np.isfinite(Y))):  # no count: a statistic of private values
            raise ValueError("the private rows are not all finite (nan or inf in the inputs or outputs)")
        X, outside_x = clip_private_inputs(X, self.box, self.clip_inputs)
        lo, hi = self.y_bounds
        outside_y = int(np.sum((Y < lo) | (Y > hi)))
        yc = np.clip(Y, lo, hi) - self.midpoint  # [c], |y_c| <= d / 2
        if self.compile_after is not None and self._chunks >= self.compile_after:
            self.features.compile()  # tracing (a fraction of a second) pays for itself over the remaining chunks
        self._chunks += 1
        return X, yc, outside_x, outside_y

    def summed(self, fn: Any, X: np.ndarray, yc: np.ndarray, *public: tf.Tensor,
               kept: Optional[List[Tuple[tf.Tensor, tf.Tensor, tf.Tensor]]] = None) -> Tuple[Any, ...]:
        """The sums ``fn(kernel, Z, L, k_max, X, yc, *public)`` returns (a tuple of tensors; ``fn`` a module-level
        function, :meth:`~.features.FeatureMap.apply`'s cache key) over a chunk's prepared rows, slice by slice of
        :data:`SLICE_ROWS` rows (one slice for a chunk of up to that many), added in NumPy. ``kept``: ``fn``'s last
        tensor is not a sum but the slice's features, appended to ``kept`` with the slice's ``yc`` and ``X``
        (PRIVATE)."""
        total: Tuple[Any, ...] = ()
        for i in range(0, max(X.shape[0], 1), SLICE_ROWS):
            X_slice, yc_slice = tf.constant(X[i:i + SLICE_ROWS]), tf.constant(yc[i:i + SLICE_ROWS])
            part = self.features.apply(fn, X_slice, yc_slice, *public)
            if kept is not None:
                kept.append((part[-1], yc_slice, X_slice))
                part = part[:-1]
            values = tuple(p.numpy() for p in part)
            total = tuple(a + v for a, v in zip(total, values)) if i else values
        return total

    def sums(self, X: np.ndarray, yc: np.ndarray, start: int) -> Tuple[Any, ...]:
        """``(S, b, q)`` of one chunk's prepared rows (:meth:`prepared`) starting at row ``start`` (PRIVATE)."""
        return self.summed(chunk_sums, X, yc)

    def __call__(self, X: np.ndarray, Y: np.ndarray, start: int) -> Dict[str, Any]:
        """The sums of one chunk: ``X`` [c, D] public shape, PRIVATE values; ``Y`` [c] PRIVATE."""
        X, yc, outside_x, outside_y = self.prepared(X, Y)
        S, b, q = self.sums(X, yc, start)
        return {
            "S": S,  # [M, M]
            "b": b,  # [M]
            "q": float(q),
            "n": int(X.shape[0]),
            "clipped_inputs": outside_x,
            "clipped_outputs": outside_y,
        }


class GridStatistics:
    """The per-chunk function of :func:`grid_statistics`: one :class:`RowStatistics` per candidate feature map
    (e.g. one per lengthscale of a public grid), all of the same box, bounds and input clipping, so that one pass
    over the rows gives every candidate's sums. Picklable (Dask workers)."""

    shared_on_dask = True
    #: what its blocks are (the ledger's event text): candidate feature maps here, classes for a classifier's
    blocks_are = "candidate(s)"

    def __init__(self, rows: Any) -> None:
        self.rows = tuple(rows)
        if not self.rows or not all(isinstance(r, RowStatistics) for r in self.rows):
            raise TypeError("GridStatistics takes one or more RowStatistics")
        first = self.rows[0]
        for r in self.rows[1:]:
            if not (np.array_equal(r.box, first.box) and r.y_bounds == first.y_bounds
                    and r.clip_inputs == first.clip_inputs and r.features.input_dim == first.features.input_dim):
                raise ValueError("every candidate of a grid must have the same box, bounds and input clipping")

    def __call__(self, X: np.ndarray, Y: np.ndarray, start: int) -> Dict[str, Any]:
        """Every candidate's sums of one chunk (PRIVATE values, public shapes)."""
        return {"blocks": tuple(r(X, Y, start) for r in self.rows)}


def add_grid(a: Dict[str, Any], b: Dict[str, Any]) -> Dict[str, Any]:
    """Two chunks' sums of every candidate added."""
    return {"blocks": tuple(add_statistics(x, y) for x, y in zip(a["blocks"], b["blocks"]))}


def _finish(total: Dict[str, Any], source: ChunkSource, y_bounds: Tuple[float, float], warn: bool) -> Statistics:
    if total is None or int(total["n"]) != int(source.n):
        raise ValueError(f"the chunks held {0 if total is None else int(total['n'])} rows, the source says {source.n}")
    if warn and (total["clipped_inputs"] or total["clipped_outputs"]):
        warnings.warn(f"{total['clipped_inputs']} of {source.n} private rows had inputs outside the public box and "
                      f"{total['clipped_outputs']} outputs lay outside the public bounds {y_bounds}: clipped",
                      ClippingWarning, stacklevel=4)
    S = np.asarray(total["S"], dtype=np.float64)
    return Statistics(0.5 * (S + S.T), np.asarray(total["b"], dtype=np.float64), float(total["q"]), int(total["n"]),
                      int(total["clipped_inputs"]), int(total["clipped_outputs"]))


def sufficient_statistics(source: ChunkSource, rows: RowStatistics) -> Statistics:
    """``(S, b, q)`` of every row of ``source`` in one pass (``source.map_reduce``: chunk by chunk here, or a
    Dask reduction on the workers that hold the rows), with the clipped counts; a ``ClippingWarning`` with the
    counts (never values) when rows were clipped. PRIVATE result: release it only through
    :func:`~dpgp_gpflow.whole_rows.mechanism.release_statistics`."""
    if not isinstance(source, ChunkSource):
        raise TypeError(f"source must be a dpgp_gpflow.streaming.ChunkSource, got {type(source).__name__}")
    return _finish(source.map_reduce(rows, add_statistics), source, rows.y_bounds, True)


def grid_statistics(source: ChunkSource, grid: GridStatistics) -> Tuple[Statistics, ...]:
    """:func:`sufficient_statistics` of every candidate of ``grid``, in one pass over ``source`` (one clipping
    warning). PRIVATE result."""
    if not isinstance(source, ChunkSource):
        raise TypeError(f"source must be a dpgp_gpflow.streaming.ChunkSource, got {type(source).__name__}")
    total = source.map_reduce(grid, add_grid)
    if total is None:
        raise ValueError(f"the chunks held 0 rows, the source says {source.n}")
    return tuple(_finish(block, source, grid.rows[0].y_bounds, i == 0) for i, block in enumerate(total["blocks"]))
