"""Sparse releases over row chunks: the m x n map is never held (``docs/guides/scaling.md``).

:func:`release_function` is ``model.release_function`` for a :class:`~dpgp_gpflow.models.DPGPRFITC`,
:class:`~dpgp_gpflow.models.DPSGPR` or :class:`~dpgp_gpflow.models.DPSparseLaplaceGPC` (its ``release``) computed chunk by chunk (on one machine, or on a Dask cluster with
:class:`~dpgp_gpflow.distributed.DaskChunks`); :func:`predict` predicts at many inputs in chunks;
:func:`minibatch_kmeans_inducing_inputs` chooses inducing inputs by a k-means that streams;
:class:`OneVsRestChunks` streams integer class labels as one class's one-vs-rest problem.
:func:`cloak_function` is :func:`release_function`'s body after validation and reservation: the streamed
release under a caller's validated request and held reservation (as :func:`dpgp_gpflow.pipeline.cloak_outputs`
is in memory), for callers composing several releases under one budget.
"""

from .chunks import DEFAULT_CHUNK_SIZE, ChunkSource, LocalChunks
from .one_vs_rest_chunks import OneVsRestChunks
from .release import (cloak_function, minibatch_kmeans_inducing_inputs, predict, release_function, rows_source,
                      streamed_map)
from .solver import StreamedMap
from .terms import ChunkTerms

__all__ = [
    "DEFAULT_CHUNK_SIZE", "ChunkSource", "LocalChunks", "OneVsRestChunks", "cloak_function",
    "minibatch_kmeans_inducing_inputs", "predict", "release_function", "rows_source",
]
