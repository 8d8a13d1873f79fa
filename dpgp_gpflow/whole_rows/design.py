"""Where a whole-row release's public pieces come from: the input box and inducing inputs built from it alone.

When the inputs are private, nothing may be computed from them before the release: not the inducing inputs
(k-means on private ``X`` would publish cluster centres of the private inputs through every prediction), not
the box. The box ``x_bounds`` ([D, 2], one ``(lo, hi)`` per input column) is declared by the data owner from
public knowledge, as the outputs' bounds are; :func:`inducing_grid` and :func:`inducing_design` build
inducing inputs from a box alone.

Inducing inputs computed from data are remembered by value (:mod:`dpgp_gpflow.provenance`, whose
:func:`mark_data_derived`, :func:`is_data_derived` and :func:`check_public_inducing_inputs` are re-exported
here), so that a model with private inputs refuses them however they were wrapped (array,
``InducingPoints``). :func:`clip_private_inputs` is the one rule for private inputs outside the box (clipped
and counted, or refused), :func:`warn_clipped_inputs` the one warning, for every model with private inputs.

Privacy assumption: the box and the inducing inputs built here are public; only :func:`clip_private_inputs`
reads private inputs, to clip them and count the rows clipped (a count for the data owner, never released).
"""

from __future__ import annotations

import math
import warnings
from numbers import Real
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np
from scipy.stats import qmc

from ..exceptions import ClippingWarning
# re-exported for the callers that import them from here (defined once, in provenance)
from ..provenance import check_public_inducing_inputs, is_data_derived, mark_data_derived  # noqa: F401

__all__ = ["inducing_design", "inducing_grid"]

#: The low-discrepancy designs :func:`inducing_design` offers (scipy.stats.qmc).
DESIGNS = ("halton", "sobol")

def validate_box(x_bounds: Any, input_dim: Optional[int] = None) -> np.ndarray:
    """The public input box as a float64 array [D, 2] (row j: ``(lo_j, hi_j)``, finite, ``lo_j < hi_j``).

    ``x_bounds``: one pair per input column ([D, 2]); for one input column a single pair ``(lo, hi)`` too.
    ``input_dim``: the number of input columns it must have. ``TypeError`` / ``ValueError`` (one line)."""
    if x_bounds is None:
        raise TypeError("x_bounds=[(lo_1, hi_1), ...], a public box holding every input (one pair per input "
                        "column, declared without looking at the private inputs), is required when the inputs are "
                        "private")
    try:
        raw = np.asarray(x_bounds, dtype=object)
    except ValueError:
        raw = np.empty(0, dtype=object)
    if raw.shape == (2,):
        raw = raw.reshape(1, 2)  # (lo, hi) for one input column
    if raw.ndim != 2 or raw.shape[1] != 2 or raw.shape[0] < 1:
        raise ValueError(f"x_bounds must hold one (lo, hi) pair per input column ([D, 2]), got {x_bounds!r}")
    for v in raw.reshape(-1):
        if isinstance(v, bool) or not isinstance(v, (Real, np.floating, np.integer)):
            raise TypeError(f"x_bounds must hold real numbers, got {x_bounds!r}")
    box = raw.astype(np.float64)
    if not np.all(np.isfinite(box)):
        raise ValueError(f"x_bounds must be finite, got {box.tolist()}")
    if not np.all(box[:, 0] < box[:, 1]):
        raise ValueError(f"x_bounds must have lo < hi in every input column, got {box.tolist()}")
    if not np.all(np.isfinite(box[:, 1] - box[:, 0])):
        raise ValueError(f"x_bounds {box.tolist()} overflow float64: hi - lo must be finite")
    if input_dim is not None and box.shape[0] != int(input_dim):
        raise ValueError(f"x_bounds has {box.shape[0]} (lo, hi) pair(s), the inputs have {int(input_dim)} column(s)")
    return box


def clip_private_inputs(X: np.ndarray, box: np.ndarray, clip_inputs: bool = True) -> Tuple[np.ndarray, int]:
    """``(X clipped to the box, number of rows with an input outside it)`` for private inputs [N, D] and a
    validated box [D, 2]; with ``clip_inputs=False`` a row outside is refused (``ValueError``, one line, no
    count). The one rule for private inputs, in every model that holds them (the whole-row release at
    construction and chunk by chunk, the DP-SGD baseline)."""
    X = np.asarray(X, dtype=np.float64)  # as np.clip's result against the float64 box
    if X.ndim != 2 or X.shape[1] != box.shape[0]:
        raise ValueError(f"the private inputs must be [N, {box.shape[0]}] (one column per row of the box), got "
                         f"shape {list(X.shape)}")
    clipped, rows_outside = np.empty_like(X), np.zeros(X.shape[0], dtype=bool)
    for d, (lo, hi) in enumerate(box):  # column by column: NumPy's loops over rows (a row's D values: slow)
        column = X[:, d]
        rows_outside |= (column < lo) | (column > hi)
        np.minimum(np.maximum(column, lo), hi, out=clipped[:, d])  # np.clip's values
    outside = int(np.count_nonzero(rows_outside))
    if outside and not clip_inputs:
        raise ValueError("some private inputs lie outside the public box x_bounds and clipping is off "
                         "(clip_inputs=False): nothing was released")
    return clipped, outside


def warn_clipped_inputs(outside: int, num_rows: int, box: np.ndarray, stacklevel: int) -> None:
    """The one ``ClippingWarning`` for private rows clipped to the box: the count, never values (public box)."""
    if outside:
        warnings.warn(f"{outside} of {num_rows} private rows had inputs outside the public box {box.tolist()} "
                      "and were clipped to it", ClippingWarning, stacklevel=stacklevel + 1)


def inducing_grid(x_bounds: Any, num: Union[int, Sequence[int]]) -> np.ndarray:
    """An even grid over the box: ``num`` points per input column (one number for all, or one per column),
    ends included (``numpy.linspace`` on each ``(lo, hi)``), [prod(num), D], the first column varying slowest.
    Public: from the box alone."""
    box = validate_box(x_bounds)
    D = box.shape[0]
    counts = [num] * D if isinstance(num, (int, np.integer)) else list(num)
    if len(counts) != D or not all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c >= 1
                                   for c in counts):
        raise ValueError(f"num must be a positive integer or one per input column ({D}), got {num!r}")
    axes = [np.linspace(lo, hi, int(c)) if c > 1 else np.array([(lo + hi) / 2.0]) for (lo, hi), c in zip(box, counts)]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([g.reshape(-1) for g in mesh], axis=1)


def inducing_design(x_bounds: Any, num: int, *, kind: str = "halton", seed: int = 0) -> np.ndarray:
    """``num`` points of a scrambled low-discrepancy design (``kind``: "halton" or "sobol", scipy.stats.qmc) over
    the box, [num, D], from a fixed public ``seed``. Public: from the box and the seed alone (never the data)."""
    box = validate_box(x_bounds)
    if kind not in DESIGNS:
        raise ValueError(f"kind must be one of {DESIGNS}, got {kind!r}")
    if not (isinstance(num, (int, np.integer)) and not isinstance(num, bool) and num >= 1):
        raise ValueError(f"num must be a positive integer, got {num!r}")
    if not (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool)):
        raise TypeError(f"seed must be an integer (public), got {seed!r}")
    D = box.shape[0]
    if kind == "sobol":
        sampler = qmc.Sobol(d=D, scramble=True, seed=int(seed))
        unit = sampler.random_base2(int(math.ceil(math.log2(num))))[: int(num)] if num > 1 else sampler.random(1)
    else:
        unit = qmc.Halton(d=D, scramble=True, seed=int(seed)).random(int(num))
    return np.asarray(qmc.scale(unit, box[:, 0], box[:, 1]), dtype=np.float64)
