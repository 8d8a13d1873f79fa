"""Integer class labels streamed as one class's one-vs-rest problem: :class:`OneVsRestChunks`.

The chunk source of the streamed release of several classes
(:meth:`~dpgp_gpflow.models.DPSparseMulticlassLaplaceGPC.release_streamed`): the rows of a source of
``(X, labels)`` with integer labels ``0 .. K-1``, every chunk's labels seen as class ``label``'s binary
labels (``+1`` for the class, ``-1`` for the rest, the binary classifiers' convention) and checked on the
way; :func:`check_labels` reads every label once, before anything is reserved (also for the whole-row
classifiers).

Privacy assumption: a public per-chunk relabelling of the private labels, inside the streamed release's own
passes (:mod:`dpgp_gpflow.streaming`); the checks' errors carry no statistic of the labels.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, List, Tuple

import numpy as np

from .chunks import ChunkSource

__all__ = ["OneVsRestChunks"]


def _check_chunk_labels(labels: np.ndarray, num_classes: int) -> None:
    """``ValueError`` unless every label of a chunk is an integer in ``0 .. num_classes - 1`` (no statistic of
    the private labels in the message)."""
    if not np.all(np.isfinite(labels) & (labels == np.round(labels)) & (labels >= 0) & (labels < num_classes)):
        raise ValueError(f"labels must be integers 0..{num_classes - 1} (num_classes={num_classes}): a label outside "
                         "that range was read from the rows")


def _one_vs_rest_chunk(X: np.ndarray, Y: np.ndarray, start: int, fn: Callable[..., Any], label: int,
                       num_classes: int, *args: Any) -> Any:
    """``fn`` on a chunk with its integer labels as class ``label``'s binary labels (+1 for ``label``, -1 else),
    the labels checked first (:func:`_check_chunk_labels`)."""
    _check_chunk_labels(Y, num_classes)
    return fn(X, np.where(Y == label, 1.0, -1.0), start, *args)


def _labels_checked(X: np.ndarray, Y: np.ndarray, start: int, check: Callable[..., Any], *args: Any) -> bool:
    check(Y, *args)
    return True


def check_labels(source: ChunkSource, check: Callable[..., Any], *args: Any) -> None:
    """Read every label of ``source`` once, before anything is reserved: ``check(labels, *args)`` on each chunk's
    labels (module-level: Dask workers run it) raises ``ValueError`` with no statistic of the labels. The
    classifiers' one label pass: integers ``0 .. K-1`` (:func:`check_class_labels`), or the whole-row
    classifiers' binary or integer labels (:func:`~dpgp_gpflow.whole_rows.classification.label_signs`)."""
    source.map_reduce(_labels_checked, operator.and_, check, *args)


def check_class_labels(source: ChunkSource, num_classes: int) -> None:
    """:func:`check_labels`: ``ValueError`` unless every label is an integer in ``0 .. num_classes - 1``."""
    check_labels(source, _check_chunk_labels, num_classes)


class OneVsRestChunks(ChunkSource):
    """A chunk source of integer labels ``0 .. K-1`` (``source``, e.g. ``LocalChunks(X, labels)`` or
    ``DaskChunks(X, labels)``) seen as class ``label``'s one-vs-rest problem: every function mapped over
    its chunks gets the labels as ``+1`` (the class) / ``-1`` (the rest), each chunk's labels checked on the
    way (``ValueError``); functions of the inputs alone run on ``source`` as they are. The same rows, chunks
    and person ids (``groups``) as ``source``. Privacy: a public per-chunk relabelling of the private labels,
    inside the streamed release's own passes (:mod:`dpgp_gpflow.streaming`)."""

    def __init__(self, source: ChunkSource, label: int, num_classes: int) -> None:
        self.source, self.label, self.num_classes = source, int(label), int(num_classes)
        self.n, self.input_dim, self.num_outputs = source.n, source.input_dim, source.num_outputs
        self.groups = getattr(source, "groups", None)

    def map_reduce(self, fn: Callable[..., Any], combine: Callable[[Any, Any], Any], *args: Any) -> Any:
        return self.source.map_reduce(_one_vs_rest_chunk, combine, fn, self.label, self.num_classes, *args)

    def map_inputs(self, fn: Callable[..., Any], combine: Callable[[Any, Any], Any], *args: Any) -> Any:
        return self.source.map_inputs(fn, combine, *args)

    def every(self, step: int) -> "OneVsRestChunks":
        return OneVsRestChunks(self.source.every(step), self.label, self.num_classes)

    def chunk_bounds(self) -> List[Tuple[int, int]]:
        return self.source.chunk_bounds()

    def between_persons(self, starts: np.ndarray) -> "OneVsRestChunks":
        return OneVsRestChunks(self.source.between_persons(starts), self.label, self.num_classes)
