"""Persons (``groups=``) in a streamed release: the neighbour map ``A`` chunk by chunk, :class:`ChunkPersons`.

Every person's rows are consecutive and every chunk ends where a person starts
(:func:`~dpgp_gpflow.streaming.chunks.person_starts`, :meth:`~dpgp_gpflow.streaming.chunks.ChunkSource.between_persons`),
so a chunk holds whole persons and forms their extreme changes itself: its block of ``A`` is
:func:`~dpgp_gpflow.neighbours.group_neighbours` of its rows' groups (the one corner rule: every corner
up to ``MAX_CORNER_ROWS`` rows, else the ``|G| e_i`` bound), and ``A`` is block diagonal over the
chunks. Its columns are numbered chunk after chunk (the *global corner-column indices*); the columns
of ``M A`` for a chunk's ``M = T C[:, chunk]`` are the optimiser's columns there.

Several outputs per row (``Y`` [N, P]): a chunk's columns are its rows' entries stacked output by output,
a person holds every output of each of their rows (every row its own person without ``groups``), and the
chunk's block of ``A`` is :func:`~dpgp_gpflow.neighbours.output_neighbours` of its rows (entry (i, p)
scaled by ``d_p / max_q d_q``), the in-memory rule of :func:`~dpgp_gpflow.neighbours.model_neighbours`.

Privacy assumption: ``groups`` is public (which rows belong to one person), fixed without the outputs;
so is the chunking cut from it.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from ..neighbours import Neighbours, group_neighbours, neighbour_columns, output_neighbours

__all__: list[str] = []  # internal: the package imports these names by name


class ChunkPersons:
    """The persons' neighbour map over the chunks ``bounds`` (each ending where a person starts) of
    ``ids`` ([n] public person identifiers, each person's rows consecutive). ``sensitivities``: for P > 1
    outputs per row, the P public ``d_p`` (None: one output). Public."""

    #: passed once to the Dask graph (``dask.delayed``), not copied into every task
    shared_on_dask = True

    def __init__(self, ids: np.ndarray, bounds: List[Tuple[int, int]], sensitivities: Any = None) -> None:
        self.sensitivities = None if sensitivities is None else np.asarray(sensitivities, dtype=np.float64).reshape(-1)
        #: P: the entries of each row (its outputs)
        self.outputs = 1 if self.sensitivities is None else int(self.sensitivities.size)
        self.ids = np.asarray(ids, dtype=np.int64)
        self.starts = np.array([a for a, _ in bounds], dtype=np.int64)
        counts = [self.count_in(a, b) for a, b in bounds]  # a loop over chunks
        self.offsets = np.r_[0, np.cumsum(counts)].astype(np.int64)  # [chunks + 1]
        #: N_c, the number of extreme changes (corner columns) over all rows
        self.count = int(self.offsets[-1])

    def block(self, start: int, stop: int) -> Optional[Neighbours]:
        """The chunk's block of ``A`` (rows ``[start, stop)``, their entries stacked output by output; None:
        one row per person there and one output, ``A = I``)."""
        if self.sensitivities is None:
            return group_neighbours(self.ids[start:stop], stop - start)
        return output_neighbours(self.ids[start:stop], stop - start, self.sensitivities)

    def count_in(self, start: int, stop: int) -> int:
        """The number of corner columns of rows ``[start, stop)`` (whole persons)."""
        block = self.block(start, stop)
        return (stop - start) * self.outputs if block is None else block.count

    def offset(self, start: int) -> int:
        """The global index of the first corner column of the chunk starting at row ``start``."""
        i = int(np.searchsorted(self.starts, start))
        if i >= self.starts.size or self.starts[i] != start:
            raise ValueError(f"no chunk starts at row {start}: the chunks are not those the persons were cut into")
        return int(self.offsets[i])

    def columns(self, M: Any, start: int) -> Tuple[tf.Tensor, int]:
        """``M A_chunk`` ([r, c_A]: the chunk's corner columns of ``M`` [r, c P], the columns of the chunk's
        c rows' entries) and the global index of its first column."""
        c = int(M.shape[1]) // self.outputs
        return neighbour_columns(M, self.block(start, start + c)), self.offset(start)


def person_columns(M: Any, start: int, persons: Optional[ChunkPersons]) -> Tuple[tf.Tensor, int]:
    """The optimiser's columns of a chunk: ``M`` itself and ``start`` for one row per person
    (``persons=None``), else :meth:`ChunkPersons.columns`. Public."""
    if persons is None:
        return tf.convert_to_tensor(M, tf.float64), int(start)
    return persons.columns(M, start)
