"""The Laplace mechanism on bin means: an epsilon-DP (delta = 0) release of every bin's mean output.

Privacy assumption (docs/privacy_model.md#public-and-private): inputs ``X`` and the bin edges are public, so the bin counts are
public; outputs ``y`` are private, clipped to public bounds ``[lo, hi]``. Neighbouring datasets
differ in one output, replaced by another value in the bounds, so it moves by at most
``d = hi - lo`` (or a smaller public ``data_sensitivity``). That moves only the mean of the bin
holding it, by at most ``d / n_j``; Laplace noise of scale ``(d / n_j) / epsilon`` makes that bin
epsilon-DP, and as the bins are disjoint the whole vector is epsilon-DP (parallel composition).
Empty bins publish a public value with no noise: they hold no private output.

The noise is added by :func:`dpgp_gpflow.sampling.add_laplace` (the package's one sampling module):
by default OpenDP's exact discrete Laplace on the whitened means rounded to its grid
(``docs/exact_sampling.md#laplace-bin-means``); the bin means themselves are float64. The budget is
reserved before any private output is touched and charged after the draw: the release runs through
:func:`~dpgp_gpflow.measurement.measure`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real
from typing import Any, NamedTuple, Optional, Tuple

import numpy as np

from .. import sampling
from ..accounting import PrivacyAccountant, PrivacyEvent, Reservation
from ..measurement import Measurement, SensitivityPath, measure
from ..validation import (
    as_outputs,
    clip_outputs,
    validate_bounds,
    validate_data_sensitivity,
    validate_epsilon,
    validate_seed,
)
from .bins import Bins

__all__ = ["BinRelease", "bin_means_nonprivate", "release_bin_means"]

#: What a bin release's sensitivity covers (module docstring): one output of one row, replaced within the bounds.
PATH = SensitivityPath()
#: The neighbouring relation it protects, in the package's format (``"row"``).
RELATION = PATH.relation()

_OUTSIDE = ("raise", "nearest", "drop")


@dataclass(frozen=True, eq=False, repr=False)
class BinRelease:
    """Released bin means; every field is safe to publish.

    ``counts`` are public (they depend only on the public inputs and edges). ``mean[j]`` is the
    released value of bin ``j``: the clipped bin mean plus Laplace noise of scale
    ``noise_scale[j] = (d / counts[j]) / epsilon``; empty bins hold ``empty_value`` exactly
    (scale 0). For a release made by :func:`bin_means_nonprivate`, ``epsilon`` is ``inf`` and the
    means are NOT private.
    """

    bins: Bins
    boxes: np.ndarray  #: [B, 2D] rows [lower..., upper...]
    centres: np.ndarray  #: [B, D]
    counts: np.ndarray  #: [B] int: public (inputs are public)
    mean: np.ndarray  #: [B] released (noisy) bin means
    noise_scale: np.ndarray  #: [B] Laplace scale b per bin (0 for empty bins)
    epsilon: float
    delta: float  #: always 0: the Laplace mechanism is pure DP
    data_sensitivity: float  #: d: how far one private output may move
    y_bounds: Tuple[float, float]
    empty_value: float  #: public value of the empty bins (the prior mean of the predictors)
    reproducible: bool = False  #: True when the noise came from an explicit seed (not private)

    @property
    def mechanism(self) -> str:
        """``"laplace"``, or ``"none"`` for the exact means of :func:`bin_means_nonprivate`."""
        return "laplace" if math.isfinite(self.epsilon) else "none"

    @property
    def n_bins(self) -> int:
        return int(self.counts.size)

    @property
    def occupied(self) -> np.ndarray:
        """``[B]`` booleans: bins holding at least one training input."""
        return self.counts > 0

    @property
    def volumes(self) -> np.ndarray:
        return self.bins.volumes

    @property
    def noise_variance(self) -> np.ndarray:
        """``[B]`` variance of the Laplace noise, ``2 b^2``."""
        return 2.0 * self.noise_scale**2

    def __repr__(self) -> str:
        extra = ", reproducible=True" if self.reproducible else ""
        return (
            f"BinRelease(mechanism={self.mechanism!r}, epsilon={self.epsilon}, delta={self.delta}, "
            f"n_bins={self.n_bins}, y_bounds={tuple(self.y_bounds)}{extra})"
        )


class _Prepared(NamedTuple):
    """Validated arguments of a bin release (``Y`` not yet clipped)."""

    bin_index: np.ndarray  #: [N'] flat bin index of each kept input (public)
    Y: np.ndarray  #: [N', 1] the kept private outputs, unclipped
    counts: np.ndarray  #: [B] public counts
    bounds: Tuple[float, float]
    d: float
    empty_value: float


def _prepare(X: Any, Y: Any, bins: Any, y_bounds: Any, data_sensitivity: Any, empty_value: Any,
             outside: str) -> _Prepared:
    """Validate everything; locate the (public) inputs. Computes nothing from the outputs."""
    if not isinstance(bins, Bins):
        raise TypeError(f"bins must be a Bins (see make_bins), got {type(bins).__name__}")
    if outside not in _OUTSIDE:
        raise ValueError(f"outside must be one of {_OUTSIDE}, got {outside!r}")
    index, inside = bins.locate(X)
    Y = np.asarray(Y.numpy() if hasattr(Y, "numpy") else Y)
    Y = as_outputs("Y", Y.reshape(-1, 1) if Y.ndim == 1 else Y, index.shape[0])
    bounds = validate_bounds(y_bounds)
    d = validate_data_sensitivity(data_sensitivity, bounds)
    if empty_value is None:
        empty_value = 0.5 * (bounds[0] + bounds[1])
    if isinstance(empty_value, bool) or not isinstance(empty_value, (Real, np.floating, np.integer)):
        raise TypeError(f"empty_value must be a real number (public), got {empty_value!r}")
    empty_value = float(empty_value)
    if not math.isfinite(empty_value):
        raise ValueError(f"empty_value must be finite, got {empty_value}")
    if not np.all(inside):
        n_out = int(np.sum(~inside))
        if outside == "raise":
            raise ValueError(
                f"{n_out} of {index.shape[0]} training inputs lie outside the grid; widen the public grid, "
                "or pass outside='nearest' (count them in the nearest bin) or outside='drop' (ignore them)"
            )
        if outside == "drop":
            index, Y = index[inside], Y[inside]
    counts = np.bincount(index, minlength=bins.n_bins).astype(np.int64)
    return _Prepared(index, Y, counts, bounds, d, empty_value)


def _bin_means(p: _Prepared, y: np.ndarray) -> np.ndarray:
    """``[B]`` means per bin of the clipped outputs ``y`` ``[N']``; empty bins hold ``empty_value``."""
    sums = np.bincount(p.bin_index, weights=y, minlength=p.counts.size)
    occupied = p.counts > 0
    means = np.full(p.counts.size, p.empty_value)
    means[occupied] = sums[occupied] / p.counts[occupied]
    return means


def release_bin_means(
    X: Any,
    Y: Any,
    bins: Bins,
    *,
    y_bounds: Any,
    epsilon: float,
    seed: Optional[int] = None,
    accountant: Optional[PrivacyAccountant] = None,
    empty_value: Optional[float] = None,
    data_sensitivity: Optional[float] = None,
    outside: str = "raise",
) -> BinRelease:
    """Release the mean of the private outputs in every bin, epsilon-DP (delta = 0).

    ``Y`` (``[N, 1]`` or ``[N]``) is clipped to the public ``y_bounds`` (a
    :class:`~dpgp_gpflow.ClippingWarning` gives the count). Bin ``j`` with ``n_j > 0`` points
    releases ``mean_j + Laplace((d / n_j) / epsilon)``; empty bins release ``empty_value`` (public,
    default the midpoint of the bounds) with no noise.

    Privacy: neighbours differ in one output (replaced within the bounds, ``|y_i - y'_i| <= d``,
    ``d = data_sensitivity`` or ``hi - lo``); ``X``, ``bins`` and ``empty_value`` are public. The
    bins are disjoint, so by parallel composition the release costs ``(epsilon, 0)`` once, a
    pure-epsilon event reserved before the outputs are touched and charged after the draw
    (``accountant`` or the innermost ``with PrivacyAccountant(...)``).

    :param seed: ``None`` (private: OS entropy). An explicit seed is for experiments only: it warns
        (:class:`~dpgp_gpflow.ReproducibleNoiseWarning`) and marks the release ``reproducible``.
    :param outside: training inputs outside the grid: ``"raise"`` (default), ``"nearest"`` (count
        them in the nearest bin) or ``"drop"`` (ignore them). The inputs are public, so either
        choice is public.
    """
    epsilon = validate_epsilon(epsilon)
    seed = validate_seed(seed)
    p = _prepare(X, Y, bins, y_bounds, data_sensitivity, empty_value, outside)
    occupied = p.counts > 0
    n_occupied = int(np.sum(occupied))
    description = f"Laplace bin means ({n_occupied} occupied of {bins.n_bins} bins)"

    def mechanism(reservation: Reservation) -> Tuple[np.ndarray, np.ndarray, bool]:
        # the outputs are touched only now; ClippingWarning (a count, never values) points at the caller
        means = _bin_means(p, clip_outputs(p.Y, p.bounds)[:, 0])
        scale = np.zeros(bins.n_bins)
        scale[occupied] = (p.d / p.counts[occupied]) / epsilon
        released = means.copy()
        released[occupied], reproducible = sampling.add_laplace(means[occupied], scale[occupied], epsilon, seed)
        reservation.commit(description)
        return released, scale, reproducible

    event = PrivacyEvent(epsilon, 0.0, "pure", None, description)
    released, scale, reproducible = measure(Measurement(None, RELATION, mechanism, events=(event,), path=PATH,
                                                        description=description), accountant)
    return BinRelease(
        bins=bins,
        boxes=bins.boxes,
        centres=bins.centres,
        counts=p.counts,
        mean=released,
        noise_scale=scale,
        epsilon=epsilon,
        delta=0.0,
        data_sensitivity=p.d,
        y_bounds=p.bounds,
        empty_value=p.empty_value,
        reproducible=reproducible,
    )


def bin_means_nonprivate(
    X: Any,
    Y: Any,
    bins: Bins,
    *,
    y_bounds: Any,
    empty_value: Optional[float] = None,
    outside: str = "raise",
) -> BinRelease:
    """The exact (clipped) bin means with no noise: NOT private, for "no DP" comparisons only.

    Same layout as :func:`release_bin_means`, with ``epsilon = inf`` and zero noise scales. Nothing
    is charged to any accountant; never publish its output.
    """
    p = _prepare(X, Y, bins, y_bounds, None, empty_value, outside)
    return BinRelease(
        bins=bins,
        boxes=bins.boxes,
        centres=bins.centres,
        counts=p.counts,
        mean=_bin_means(p, clip_outputs(p.Y, p.bounds)[:, 0]),
        noise_scale=np.zeros(bins.n_bins),
        epsilon=math.inf,
        delta=0.0,
        data_sensitivity=p.d,
        y_bounds=p.bounds,
        empty_value=p.empty_value,
        reproducible=False,
    )
