"""Where the rows of a sparse model's data live, and how per-chunk work is mapped over them.

A *chunk source* holds the public inputs ``X`` (n x D) and the private outputs ``Y`` (n x 1, or n x P) split
into row chunks, and runs a function on every chunk, reducing the results with an associative
``combine``. :class:`LocalChunks` runs the chunks one after the other in this process (numpy arrays,
or anything sliceable by rows, e.g. a ``numpy.memmap``); :mod:`dpgp_gpflow.distributed` provides the
Dask source, which runs the same functions on the workers that hold the chunks. A source may carry the
public person ids of its own rows (``groups=``): a streamed release with persons takes them from there,
checked against the model's (:func:`source_persons`), never from the source's row order.

Privacy assumption: the functions mapped over chunks are those of :mod:`dpgp_gpflow.streaming.terms`
and :mod:`dpgp_gpflow.streaming.solver`; they return public-shape summaries (m x m sums, per-point
maxima, a working set's columns) and, from the outputs, only the one linear query that the release
whitens and noises (:class:`dpgp_gpflow.streaming.solver.StreamedQuery`). Loops here are over chunks,
never over data points.
"""

from __future__ import annotations

import math

from typing import Any, Callable, Iterator, List, Optional, Tuple, cast

import numpy as np

from ..validation import require_real_dtype, validate_groups

__all__ = ["DEFAULT_CHUNK_SIZE", "ChunkSource", "LocalChunks"]

#: Rows per chunk when none is given: an m x chunk block of B for m = 200 is 32 MB.
DEFAULT_CHUNK_SIZE = 20_000


class ChunkSource:
    """Rows ``[start, stop)`` of ``(X, Y)`` as chunks, and a map-reduce over them (the interface)."""

    n: int
    input_dim: int
    #: the outputs' columns per row (:func:`output_columns`: 1 for [n], P for [n, P]); public
    num_outputs: int
    #: the public person ids of the source's own rows ([n] int64, :func:`~dpgp_gpflow.validation.validate_groups`),
    #: or None: the source says nothing of persons (a release with persons then refuses, :func:`source_persons`)
    groups: Optional[np.ndarray] = None

    def map_reduce(self, fn: Callable[..., Any], combine: Callable[[Any, Any], Any], *args: Any) -> Any:
        """``combine`` over chunks of ``fn(X_chunk, Y_chunk, start, *args)`` (``Y_chunk`` PRIVATE: [c] for one
        output, [c, P] for P outputs per row, :func:`chunk_outputs`)."""
        raise NotImplementedError

    def map_inputs(self, fn: Callable[..., Any], combine: Callable[[Any, Any], Any], *args: Any) -> Any:
        """As :meth:`map_reduce` for functions of the public inputs only: ``fn(X_chunk, start, *args)``."""
        return self.map_reduce(lambda X, Y, start, *a: fn(X, start, *a), combine, *args)

    def every(self, step: int) -> "ChunkSource":
        """The same kind of source over rows ``0, step, 2 step, ...`` (row ``j`` there is row ``j step``
        here): a public subsample, chosen by position only."""
        raise NotImplementedError

    def chunk_bounds(self) -> List[Tuple[int, int]]:
        """``(start, stop)`` of every chunk, in order (public)."""
        raise NotImplementedError

    def between_persons(self, starts: np.ndarray) -> "ChunkSource":
        """The same rows in chunks that end only where a person starts (``starts``: the first row of
        every person, then ``n``, from :func:`person_starts`), about as long as this source's (public)."""
        raise NotImplementedError


class LocalChunks(ChunkSource):
    """The rows of ``X`` (n x D) and ``Y`` (n x 1 or n; n x P for P outputs per row) in chunks of
    ``chunk_size``, processed here in turn.

    ``X`` and ``Y`` are not copied: any row-sliceable array works (a memory map streams from disk).
    ``groups``: the public person ids of these rows ([n] integers, in memory; None: no persons), which a
    release with persons needs (:func:`source_persons`).
    """

    def __init__(self, X: Any, Y: Any, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 bounds: Optional[List[Tuple[int, int]]] = None, *, groups: Any = None) -> None:
        if not (isinstance(chunk_size, (int, np.integer)) and chunk_size >= 1):
            raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
        if len(np.shape(X)) != 2 or np.shape(Y)[0] != np.shape(X)[0]:
            raise ValueError(f"X must be n x D and Y must have n rows, got {np.shape(X)} and {np.shape(Y)}")
        for name, arr in (("X", X), ("Y", Y)):  # dtypes only: the values are checked chunk by chunk where used
            require_real_dtype(name, arr.dtype if hasattr(arr, "dtype") else np.asarray(arr).dtype)  # a list: in memory
        self.X, self.Y = X, Y
        self.n, self.input_dim = int(np.shape(X)[0]), int(np.shape(X)[1])
        self.num_outputs = output_columns(np.shape(Y))
        self.groups = validate_groups(groups, self.n)
        self.chunk_size = int(chunk_size)
        #: explicit ``(start, stop)`` chunks covering the rows in order (:meth:`between_persons`), or None
        self._bounds = None if bounds is None else [(int(a), int(b)) for a, b in bounds]
        if self._bounds is not None and ([a for a, _ in self._bounds] + [self.n] != [0] + [b for _, b in self._bounds]
                                         or any(b <= a for a, b in self._bounds)):
            raise ValueError("bounds must be consecutive non-empty (start, stop) chunks covering the rows in order")

    def every(self, step: int) -> "LocalChunks":
        if self._bounds is not None:
            raise NotImplementedError("a subsample of chunks cut between persons is not defined")
        return type(self)(self.X[::step], self.Y[::step], self.chunk_size,
                          groups=None if self.groups is None else self.groups[::step])

    def bounds(self) -> Iterator[Tuple[int, int]]:
        """``(start, stop)`` of every chunk, in order."""
        if self._bounds is not None:
            yield from self._bounds
            return
        for start in range(0, self.n, self.chunk_size):
            yield start, min(start + self.chunk_size, self.n)

    def chunk_bounds(self) -> List[Tuple[int, int]]:
        return list(self.bounds())

    def between_persons(self, starts: np.ndarray) -> "LocalChunks":
        return type(self)(self.X, self.Y, self.chunk_size, person_bounds(starts, self.chunk_size), groups=self.groups)

    def map_reduce(self, fn: Callable[..., Any], combine: Callable[[Any, Any], Any], *args: Any) -> Any:
        result = None
        for start, stop in self.bounds():
            X = np.asarray(self.X[start:stop], dtype=np.float64)
            part = fn(X, chunk_outputs(self.Y[start:stop]), start, *args)
            result = part if result is None else combine(result, part)
        return result


def chunk_outputs(Y: Any) -> np.ndarray:
    """A chunk's outputs as float64: [c] for one output per row (a column or a vector), [c, P] for P > 1."""
    Y = np.asarray(Y, dtype=np.float64)
    return Y.reshape(-1) if Y.ndim < 2 or Y.shape[1] == 1 else Y


def output_columns(shape: Tuple[int, ...]) -> int:
    """The number of output columns of outputs of ``shape`` (public: a shape): 1 for [n], P for [n, P];
    ``ValueError`` for any other number of dimensions. The one rule for a source's and a chunk's outputs."""
    if len(shape) == 1:
        return 1
    if len(shape) == 2:
        return int(shape[1])
    raise ValueError(f"the outputs must have shape [n] or [n, P] (P outputs per row), got shape {list(shape)}")


def check_source_shape(source: ChunkSource, input_dim: int, num_outputs: int, outputs: str = "output") -> None:
    """``ValueError`` (one line) unless ``source`` has the model's ``input_dim`` input columns and
    ``num_outputs`` columns of ``outputs`` per row: the one check of a source against a model, before anything
    is reserved (public: shapes)."""
    if int(source.input_dim) != int(input_dim):
        raise ValueError(f"the chunks have {source.input_dim} input columns, the model {int(input_dim)}")
    if int(source.num_outputs) != int(num_outputs):
        raise ValueError(f"the chunks have {source.num_outputs} {outputs} column(s) per row, the model takes "
                         f"{int(num_outputs)}")


def tree_combine(parts: List[Any], combine: Callable[[Any, Any], Any]) -> Any:
    """Pairwise (tree) reduction of ``parts`` by ``combine``, in order."""
    while len(parts) > 1:
        parts = [combine(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    return parts[0]


def person_starts(groups: Any, num_data: int) -> np.ndarray:
    """The first row of every person, then ``num_data`` ([persons + 1], int64), for public ``groups``
    (:func:`~dpgp_gpflow.validation.validate_groups`) whose persons each hold consecutive rows: a
    streamed release forms a person's corner columns within one chunk. ``ValueError`` (one line)
    naming a person whose rows are not consecutive. Public: groups are public."""
    ids = validate_groups(groups, num_data)
    n = int(num_data)
    if ids is None:
        return np.arange(n + 1, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if n else np.zeros(0, np.int64)
    run_ids = ids[starts]
    order = np.argsort(run_ids, kind="stable")
    repeated = order[1:][run_ids[order][1:] == run_ids[order][:-1]]
    if repeated.size:
        row = int(starts[repeated.min()])
        raise ValueError(f"a streamed release needs each person's rows consecutive, but person {ids[row]} "
                         f"appears again at row {row}: sort the rows by groups first")
    return np.r_[starts, n].astype(np.int64)


def _first_other_row(X: Any, start: int, inputs: np.ndarray) -> float:
    """The first row of a chunk whose public inputs differ from ``inputs[start:start + c]`` (``inf``: none)."""
    X = np.asarray(X, dtype=np.float64).reshape(len(X), -1)
    other = np.flatnonzero(np.any(X != inputs[start:start + len(X)], axis=1))
    return float(start + other[0]) if other.size else math.inf


def source_persons(source: ChunkSource, groups: Any, inputs: Any = None) -> Optional[np.ndarray]:
    """The persons of a streamed release of a model with public ``groups`` (its declared person ids, or None)
    over ``source``: the ids the source carries of its own rows ([n] int64, each person's rows consecutive in
    the source's row order), or None for one row per person. The one rule: the persons are never inferred from
    the source's row order. ``ValueError`` (one line), before anything is reserved, when the model has groups
    and the source carries none (pass ``groups=`` to the source), when the source carries ids and the model
    none, when the source's ids are not the model's row for row, or when a person's rows are not consecutive
    (:func:`person_starts`). ``inputs``: the model's public inputs when it holds them in memory ([n, D]); the
    source's inputs must then be the model's row for row too (one pass over the source's public inputs), so a
    source of the model's rows in another order carrying the model's ids is refused. Public: ids and inputs
    are public."""
    carried = getattr(source, "groups", None)
    if groups is None and carried is None:
        return None
    if carried is None:
        raise ValueError("the model has groups (persons) but the chunk source carries no person ids of its rows: "
                         "pass groups= to the source with the ids of its own rows, e.g. LocalChunks(X, Y, groups=ids)"
                         " or DaskChunks(X, Y, groups=ids)")
    if groups is None:
        raise ValueError("the chunk source carries person ids (groups=) but the model has none: build the model "
                         "with the same groups= to protect persons, or drop groups= from the source")
    declared = cast(np.ndarray, validate_groups(groups, int(np.shape(groups)[0])))  # not None: given
    carried = cast(np.ndarray, validate_groups(carried, int(source.n)))
    if declared.size != carried.size:
        raise ValueError(f"the chunk source has {carried.size} rows but the model's groups {declared.size}: "
                         "the source must hold the model's rows")
    differ = np.flatnonzero(declared != carried)
    if differ.size:
        row = int(differ[0])
        raise ValueError(f"the chunk source's person ids differ from the model's groups at row {row} (source "
                         f"{carried[row]}, model {declared[row]}): the source must hold the model's rows in the "
                         "model's order, each with its own id")
    person_starts(carried, int(source.n))
    if inputs is not None:
        inputs = np.asarray(inputs, dtype=np.float64).reshape(int(source.n), -1)
        row = source.map_inputs(_first_other_row, min, inputs)
        if math.isfinite(row):
            raise ValueError(f"the chunk source's inputs differ from the model's at row {int(row)}: with persons the "
                             "source must hold the model's rows in the model's order (its ids name its own rows)")
    return carried


def person_bounds(starts: np.ndarray, chunk_size: int) -> List[Tuple[int, int]]:
    """``(start, stop)`` chunks of about ``chunk_size`` rows that end only where a person starts
    (``starts`` from :func:`person_starts`): each chunk ends at the last person start within
    ``chunk_size`` rows, or after its first person if that one is longer. Loops over chunks. Public."""
    starts = np.asarray(starts, dtype=np.int64)
    n = int(starts[-1])
    bounds, start = [], 0
    while start < n:
        i = int(np.searchsorted(starts, start + int(chunk_size), side="right")) - 1  # last start <= start + size
        stop = int(starts[i]) if starts[i] > start else int(starts[np.searchsorted(starts, start, side="right")])
        bounds.append((start, stop))
        start = stop
    return bounds
