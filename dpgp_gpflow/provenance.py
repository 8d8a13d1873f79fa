"""Inducing inputs computed from data, remembered by value, so that a model whose inputs are private refuses
them (docs/whole_rows.md).

Every helper of this package that computes inducing inputs from inputs (k-means:
:func:`~dpgp_gpflow.models.kmeans_inducing_inputs`, :func:`~dpgp_gpflow.streaming.minibatch_kmeans_inducing_inputs`)
calls :func:`mark_data_derived` on its result; a model with private inputs (``DPSGPR(..., private_inputs=True)``,
the DP-SGD baseline) calls :func:`check_public_inducing_inputs` before it reserves anything: every prediction
would publish such centres of the private inputs. A leaf (NumPy alone), so that the helpers and the models
import it without a cycle.

Privacy assumption: only a digest of the (public or to-be-refused) inducing inputs is kept, never data.
"""

from __future__ import annotations

import hashlib
from typing import Any, Set

import numpy as np

__all__: list[str] = []  # internal: the package imports these names by name

_DATA_DERIVED: Set[str] = set()


def _digest(Z: Any) -> str:
    values = np.ascontiguousarray(np.asarray(Z, dtype=np.float64))
    return hashlib.sha256(repr(values.shape).encode() + values.tobytes()).hexdigest()


def mark_data_derived(Z: Any) -> None:
    """Remember ``Z`` (by the SHA-256 of its float64 values) as computed from inputs, for
    :func:`check_public_inducing_inputs`. Called by every helper that computes inducing inputs from data."""
    _DATA_DERIVED.add(_digest(Z))


def is_data_derived(Z: Any) -> bool:
    """True when ``Z`` has exactly the values of inducing inputs a data helper computed in this process."""
    return _digest(Z) in _DATA_DERIVED


def check_public_inducing_inputs(Z: Any) -> None:
    """``ValueError`` (one line) when ``Z`` was computed from the (now private) inputs by a helper of this
    package (k-means): with private inputs, inducing inputs must come from the public box alone."""
    if is_data_derived(Z):
        raise ValueError(
            "these inducing inputs were computed from the inputs (k-means), which are private here: every "
            "prediction would publish them; build them from the public box instead "
            "(dpgp_gpflow.whole_rows.inducing_grid(x_bounds, num) or inducing_design(x_bounds, num))")
