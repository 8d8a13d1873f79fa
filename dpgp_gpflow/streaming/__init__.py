"""Sparse releases over row chunks: the m x n map is never held (``docs/guides/scaling.md``).

:func:`release_function` is ``model.release_function`` for a :class:`~dpgp_gpflow.models.DPGPRFITC`,
:class:`~dpgp_gpflow.models.DPSGPR` or :class:`~dpgp_gpflow.models.DPSparseLaplaceGPC` (its ``release``) computed chunk by chunk (on one machine, or on a Dask cluster with
:class:`~dpgp_gpflow.distributed.DaskChunks`); :func:`predict` predicts at many inputs in chunks;
:func:`minibatch_kmeans_inducing_inputs` chooses inducing inputs by a k-means that streams;
:class:`OneVsRestChunks` streams integer class labels as one class's one-vs-rest problem.
Several streamed releases share a budget as in-memory ones do (one ``with PrivacyAccountant(...)`` block,
``docs/guides/scaling.md``). :func:`~dpgp_gpflow.streaming.release.cloak_function`, :func:`release_function`'s
body (it draws and commits into a reservation its caller holds), is internal: it runs inside
:func:`~dpgp_gpflow.measurement.measure` only (the release's checks, among them the leak guard, and its
reservation; the multiclass streamed release runs it per class).
"""

from .chunks import DEFAULT_CHUNK_SIZE, ChunkSource, LocalChunks
from .one_vs_rest_chunks import OneVsRestChunks
from .release import minibatch_kmeans_inducing_inputs, predict, release_function, rows_source, streamed_map
from .solver import StreamedMap
from .terms import ChunkTerms

__all__ = [
    "DEFAULT_CHUNK_SIZE", "ChunkSource", "LocalChunks", "OneVsRestChunks", "minibatch_kmeans_inducing_inputs",
    "predict", "release_function", "rows_source",
]
