"""Lengthscales chosen privately for a whole-row release: a public grid of candidates, every candidate's
statistics in one Gaussian release, the choice by post-processing.

The kernel and noise variances are post-processing of one release (:mod:`.variances`); the lengthscales are
not: they change the features. Here every candidate lengthscale of a public grid gets its own unit-scale
features and statistics, and the ``B`` packed vectors are released as **one** vector by one Gaussian mechanism
whose sensitivity is ``sqrt(B)`` times one vector's (each block moves by at most its own bound under the same
neighbour): one reservation, one ledger event at the request's (epsilon, delta) and ``mu = 1 / s``, the same
guarantee as GDP composition of ``B`` releases at ``mu / sqrt(B)`` each, and honest under every composition the
accountant may use. The choice is then post-processing of the released statistics: for each candidate the
kernel and noise variances are fitted on its statistics (SGPR's collapsed bound, :func:`~.variances.fit_variances`)
and the candidate with the largest fitted bound is chosen (:func:`choose`). With residual releases
(:mod:`.residual_release`) this grid release is the first stage, at its fraction of the Gaussian-DP budget, and
the later stages release the chosen candidate's residual sums: one reservation, one event for the whole.

:func:`default_lengthscales` is the public default grid, from the box alone: ``DEFAULT_FRACTIONS`` (0.1, 0.2 and
0.4) of the box's width in every input column (of the mean width for a kernel with one lengthscale for all
columns; docs/whole_rows.md#lengthscales).

Privacy assumption: the grid is public (from the box or given a priori, never from the rows); everything after
the release reads only the released statistics and public values.
"""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

import gpflow
import numpy as np

from .design import validate_box

__all__ = ["DEFAULT_FRACTIONS", "default_lengthscales"]

#: The default grid: these fractions of the box's width in each input column (public; chosen so that the
#: shortest candidate is resolved by a handful of inducing inputs per column and the longest is near linear over
#: the box; on the !Kung protocol, benchmarks/whole_rows_lengthscales.py).
DEFAULT_FRACTIONS = (0.1, 0.2, 0.4)
#: At most this many candidates (each one multiplies the noise of every candidate by sqrt(B) / sqrt(B - 1)).
MAX_CANDIDATES = 16


def default_lengthscales(x_bounds: Any, kernel: Any = None) -> List[np.ndarray]:
    """The public default candidates: :data:`DEFAULT_FRACTIONS` of the box's width, per input column ([D] each);
    for a ``kernel`` with one lengthscale for every column, of the columns' mean width (a scalar each)."""
    box = validate_box(x_bounds)
    width = box[:, 1] - box[:, 0]
    values = getattr(kernel, "lengthscales", None)
    if values is not None and np.ndim(values.numpy()) == 0:
        width = np.asarray(np.mean(width))
    return [fraction * width for fraction in DEFAULT_FRACTIONS]


def _lengthscaled(kernel: gpflow.kernels.Kernel) -> bool:
    return isinstance(kernel, gpflow.kernels.Stationary) and hasattr(kernel, "lengthscales")


def validate_lengthscales(kernel: gpflow.kernels.Kernel, candidates: Any, input_dim: int) -> Tuple[np.ndarray, ...]:
    """The candidates as float64 arrays of the kernel's lengthscales' shape (a scalar, or [D] for an ARD kernel; a
    scalar candidate with an ARD kernel is used in every column), finite and > 0, between 2 and
    :data:`MAX_CANDIDATES` of them (one is the kernel's own lengthscale, no grid: a release file holds a grid of
    two or more); ``TypeError`` / ``ValueError`` (one line). The kernel must be one stationary
    kernel with lengthscales (not a Sum or Product). Public."""
    if not _lengthscaled(kernel):
        raise TypeError(f"lengthscales chosen privately need one stationary kernel with lengthscales, got "
                        f"{type(kernel).__name__}: give the lengthscales a priori (lengthscales=None)")
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence) and not isinstance(candidates,
                                                                                                   np.ndarray):
        raise TypeError(f"lengthscales must be a sequence of candidates, got {candidates!r}")
    shape = np.shape(kernel.lengthscales.numpy())
    out = []
    for value in candidates:
        if isinstance(value, bool):
            raise TypeError(f"a candidate lengthscale must be a number or one per input column, got {value!r}")
        array = np.asarray(value, dtype=np.float64)
        if array.ndim == 0 and shape != ():
            array = np.full(shape, float(array))
        elif array.shape != shape:
            if shape == () and array.shape == (int(input_dim),) and np.all(array == array.reshape(-1)[0]):
                array = array.reshape(-1)[0]  # one value per column, all equal: the kernel's one lengthscale
            else:
                raise ValueError(f"a candidate lengthscale must have the kernel's lengthscales' shape {list(shape)}, "
                                 f"got {array.tolist()} (an ARD kernel, lengthscales=[1.0] * D, takes one per column)")
        if not (np.all(np.isfinite(array)) and np.all(array > 0.0)):
            raise ValueError(f"candidate lengthscales must be finite and > 0, got {array.tolist()}")
        out.append(array)
    if not 2 <= len(out) <= MAX_CANDIDATES:
        raise ValueError(f"give between 2 and {MAX_CANDIDATES} candidate lengthscales, got {len(out)} (one: give it as "
                         "the kernel's lengthscales, lengthscales=None)")
    return tuple(out)


def with_lengthscales(kernel: gpflow.kernels.Kernel, value: np.ndarray) -> gpflow.kernels.Kernel:
    """A copy of ``kernel`` with lengthscales ``value`` (public)."""
    copy = gpflow.utilities.deepcopy(kernel)
    copy.lengthscales.assign(value)
    return copy


def choose(bounds: Sequence[float]) -> int:
    """The index of the largest fitted bound (the first among equals; a non-finite bound never wins unless all
    are). Post-processing of released statistics."""
    values = np.asarray(bounds, dtype=np.float64)
    finite = np.where(np.isfinite(values), values, -np.inf)
    return int(np.argmax(finite))
