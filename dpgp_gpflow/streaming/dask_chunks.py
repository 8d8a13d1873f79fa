"""Streamed sparse releases on a Dask cluster: :class:`DaskChunks` (needs ``pip install "dpgp_gpflow[dask]"``;
also importable as ``dpgp_gpflow.distributed.DaskChunks``).

The rows of ``X`` and ``Y`` stay where their ``dask.array`` chunks live; every per-chunk function of
:mod:`dpgp_gpflow.streaming` runs on the workers (``dask.delayed`` on each block, reduced pairwise in
a tree), and only the reductions travel: m x m sums, per-row maxima, a working set's columns
(r x |work|) and the r-vector ``W y``. With a ``dask.distributed.Client`` active the work runs on
its cluster (a ``LocalCluster`` or a scheduler address); without one, on Dask's local scheduler.

Privacy assumption: as for :mod:`dpgp_gpflow.streaming`: workers return only the public-shape
results that the single-machine path computes too (the outputs are clipped on the worker before
anything is computed from them); the noise is drawn once, on the client, by
:func:`dpgp_gpflow.streaming.release_function`. The chunking and the cluster are public.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from ..validation import as_dask_rows, is_dask_array, validate_groups
from .chunks import ChunkSource, chunk_outputs, person_bounds, tree_combine

try:  # Dask is an optional extra: without it this module imports, and DaskChunks says how to install it
    import dask
    import dask.array as da
except ImportError:  # pragma: no cover - the test run installs the extra
    dask = da = None  # type: ignore[assignment]  # DaskChunks checks for None and says what to install

__all__ = ["DaskChunks"]


def _on_block(fn: Callable[..., Any], X: np.ndarray, Y: np.ndarray, start: int, *args: Any) -> Any:
    return fn(np.asarray(X, dtype=np.float64), chunk_outputs(Y), start, *args)


class DaskChunks(ChunkSource):
    """The rows of a ``dask.array`` ``X`` (n x D) and ``Y`` (n or n x 1; n x P for P outputs per row),
    chunked along rows.

    ``X`` is rechunked to whole rows (one chunk across its columns) and ``Y`` to ``X``'s row chunks.
    ``client``: a ``dask.distributed.Client`` to run on (default: the active one, if any).
    ``groups``: the public person ids of these rows ([n] integers, an in-memory or a Dask array, read once
    here; None: no persons), which a release with persons needs
    (:func:`~dpgp_gpflow.streaming.chunks.source_persons`).
    """

    def __init__(self, X: Any, Y: Any, client: Optional[Any] = None, *, groups: Any = None) -> None:
        if da is None:
            raise ImportError('DaskChunks needs Dask: pip install "dpgp_gpflow[dask]"')
        X, Y = as_dask_rows(da.asarray(X), da.asarray(Y), several=True)
        self.X = X.rechunk({1: -1})
        self.Y = Y.rechunk((self.X.chunks[0], -1))  # [n, P]: a chunk's rows hold all their outputs
        self.n, self.input_dim = int(X.shape[0]), int(X.shape[1])
        self.num_outputs = int(self.Y.shape[1])
        self.groups = validate_groups(groups.compute() if is_dask_array(groups) else groups, self.n)  # public
        self.client = client
        self.starts = np.concatenate([[0], np.cumsum(self.X.chunks[0])[:-1]]).astype(int)

    def every(self, step: int) -> "DaskChunks":
        return DaskChunks(self.X[::step], self.Y[::step], client=self.client,
                          groups=None if self.groups is None else self.groups[::step])

    def chunk_bounds(self) -> List[Tuple[int, int]]:
        return [(int(s), int(s + c)) for s, c in zip(self.starts, self.X.chunks[0])]

    def between_persons(self, starts: np.ndarray) -> "DaskChunks":
        """The rows rechunked so that every chunk ends where a person starts, each about as long as the
        longest current chunk (public: from the groups and the chunking only)."""
        bounds = person_bounds(starts, max(self.X.chunks[0]) if self.n else 1)
        if bounds == self.chunk_bounds():
            return self
        sizes = tuple(b - a for a, b in bounds)
        return DaskChunks(self.X.rechunk({0: sizes}), self.Y.rechunk({0: sizes}), client=self.client,
                          groups=self.groups)

    def map_reduce(self, fn: Callable[..., Any], combine: Callable[[Any, Any], Any], *args: Any) -> Any:
        xs, ys = self.X.to_delayed().ravel(), self.Y.to_delayed().ravel()
        shared = [dask.delayed(a) if isinstance(a, (np.ndarray, dict, list)) or getattr(a, "shared_on_dask", False)
                  else a for a in args]
        parts = [dask.delayed(_on_block)(fn, x, y, int(s), *shared) for x, y, s in zip(xs, ys, self.starts)]
        total = tree_combine(parts, dask.delayed(combine))
        if self.client is not None:
            return self.client.compute(total).result()
        return total.compute()
