"""Sparse releases on a Dask cluster (``pip install "dpgp_gpflow[dask]"``): :class:`DaskChunks`.

The rows' chunk source lives in :mod:`dpgp_gpflow.streaming.dask_chunks`; a ``DPSGPR`` or ``DPGPRFITC``
built from ``dask.array`` rows uses it by itself (``docs/guides/scaling.md``).
"""

from __future__ import annotations

from .streaming.dask_chunks import DaskChunks

__all__ = ["DaskChunks"]
