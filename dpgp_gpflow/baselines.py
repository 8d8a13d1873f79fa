"""The baselines the AISTATS 2018 paper compares cloaking against (section 4; DESIGN 5.6).

Bin the public inputs on a grid with **public** edges, release every bin mean of the private
outputs with the Laplace mechanism, then predict from the released bins (post-processing, no
further privacy cost):

1. :func:`make_bins` -- a D-dimensional grid (:class:`Bins`) from given edges, or from per-axis
   bin counts over public input bounds. Edges never come from the data implicitly.
2. :func:`release_bin_means` -- an epsilon-DP (delta = 0) :class:`BinRelease` of the bin means.
3. Predictors: :func:`predict_bin_value` (the value of the bin containing x: "simple binning"),
   :func:`fit_gp_on_bins` (a GP with an EQ kernel on the bin centres) and
   :func:`fit_integral_gp` / :func:`predict_integral_gp` (a GP whose observations are the
   integrals of f over the bins, :class:`~dpgp_gpflow.kernels.IntegralSE`; fitted with
   :class:`GridIntegralSE`, the same kernel evaluated through per-axis tables of the grid).

Fitting to a release is post-processing: hyperparameters of these GPs may even be trained on the
released values (never on the raw outputs).

Privacy model (DESIGN 1). Inputs ``X`` are public, so the bin *counts* are public too (they
depend on ``X`` and the public edges only); outputs ``y`` are private, clipped to public bounds
``[lo, hi]``. Neighbouring datasets differ in one output, replaced by another value in the
bounds, so one output moves by at most ``d = hi - lo`` (or a smaller public ``data_sensitivity``).
Replacing ``y_i`` moves only the mean of the bin holding ``x_i``, by at most ``d / n_j`` for a bin
of ``n_j`` points; Laplace noise of scale ``b_j = (d / n_j) / epsilon`` makes that bin's release
epsilon-DP, and since the bins are disjoint (each output lies in exactly one bin) the whole
vector of bin means is epsilon-DP with delta = 0 (parallel composition). Empty bins publish a
public value (default: the midpoint of the bounds) with no noise: they hold no private output.

Randomness (DESIGN 8b), as :func:`dpgp_gpflow.release.standard_normal`: by default the Laplace
draws come from the operating system's CSPRNG (``secrets.SystemRandom``), each the difference of
two standard exponentials ``-log(1 - U)``. Floating-point Laplace samplers are attackable in
principle (Mironov 2012: the set of reachable doubles leaks the unnoised value); this is the
textbook sampler, not a snapping mechanism. An explicit ``seed`` (numpy's PCG64) is for
experiments only: it warns with :class:`~dpgp_gpflow.ReproducibleNoiseWarning` and marks the
release ``reproducible=True``.
"""

from __future__ import annotations

import math
import secrets
import warnings
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, Optional, Tuple

import gpflow
import numpy as np
import tensorflow as tf
from gpflow.base import TensorType

from .accounting import PrivacyAccountant, current_accountant
from .calibration import validate_epsilon
from .exceptions import ReproducibleNoiseWarning
from .kernels import IntegralSE, predict_f_at_points
from .kernels.integral import _interval_interval, _interval_point
from .validation import as_inputs, as_outputs, clip_outputs, validate_bounds, validate_data_sensitivity

__all__ = [
    "BinNoiseVariance",
    "BinRelease",
    "Bins",
    "GridIntegralSE",
    "bin_means_nonprivate",
    "fit_gp_on_bins",
    "fit_integral_gp",
    "laplace_noise",
    "make_bins",
    "predict_bin_value",
    "predict_integral_gp",
    "release_bin_means",
]

#: Relative floor of the per-bin likelihood variance (a fraction of the prior variance of the
#: observation), so that noise-free bins (no DP, no sampling noise) still give a stable Cholesky.
NOISE_FLOOR = 1e-6

_OUTSIDE = ("raise", "nearest", "drop")


# ---------------------------------------------------------------------------------------------
# the grid


@dataclass(frozen=True, eq=False)
class Bins:
    """A D-dimensional grid of axis-aligned bins with public edges.

    ``edges[d]`` is the strictly increasing array of bin edges along axis ``d`` (``shape[d] + 1``
    values). Bin ``j`` is the flat (C-order, first axis slowest) index of its per-axis indices.
    Along each axis a bin is ``[e_k, e_{k+1})``, the last one closed ``[e_{K-1}, e_K]`` (as
    ``numpy.histogramdd``).
    """

    edges: Tuple[np.ndarray, ...]

    @property
    def ndim(self) -> int:
        """D, the input dimension."""
        return len(self.edges)

    @property
    def shape(self) -> Tuple[int, ...]:
        """Number of bins along each axis."""
        return tuple(len(e) - 1 for e in self.edges)

    @property
    def n_bins(self) -> int:
        """B, the total number of bins."""
        return int(np.prod(self.shape))

    @property
    def lower(self) -> np.ndarray:
        """``[B, D]`` lower corners."""
        grids = np.meshgrid(*[e[:-1] for e in self.edges], indexing="ij")
        return np.stack([g.ravel() for g in grids], axis=1)

    @property
    def upper(self) -> np.ndarray:
        """``[B, D]`` upper corners."""
        grids = np.meshgrid(*[e[1:] for e in self.edges], indexing="ij")
        return np.stack([g.ravel() for g in grids], axis=1)

    @property
    def boxes(self) -> np.ndarray:
        """``[B, 2D]`` rows ``[lower_1..D, upper_1..D]`` (the input format of ``IntegralSE``)."""
        return np.concatenate([self.lower, self.upper], axis=1)

    @property
    def centres(self) -> np.ndarray:
        """``[B, D]`` bin centres."""
        return 0.5 * (self.lower + self.upper)

    @property
    def volumes(self) -> np.ndarray:
        """``[B]`` bin volumes (products of the widths)."""
        return np.prod(self.upper - self.lower, axis=1)

    def contains(self, X: Any) -> np.ndarray:
        """``[N]`` booleans: which rows of ``X`` lie in the grid (edges included)."""
        X = self._points(X)
        inside = np.ones(X.shape[0], dtype=bool)
        for d, e in enumerate(self.edges):
            inside &= (X[:, d] >= e[0]) & (X[:, d] <= e[-1])
        return inside

    def locate(self, X: Any) -> Tuple[np.ndarray, np.ndarray]:
        """Flat bin index of each row of ``X`` and whether it lies in the grid.

        Points outside the grid get the index of the *nearest* bin (per-axis indices clipped),
        and ``inside`` False. Returns ``(index [N] int64, inside [N] bool)``.
        """
        X = self._points(X)
        per_axis = []
        for d, e in enumerate(self.edges):
            k = np.searchsorted(e, X[:, d], side="right") - 1
            k = np.where(X[:, d] == e[-1], len(e) - 2, k)  # the last bin is closed on the right
            per_axis.append(np.clip(k, 0, len(e) - 2))
        index = np.ravel_multi_index(tuple(per_axis), self.shape) if per_axis else np.zeros(0, int)
        return np.asarray(index, dtype=np.int64), self.contains(X)

    def _points(self, X: Any) -> np.ndarray:
        return as_inputs("X", X, self.ndim)


def _as_edges(edges: Any, D: Optional[int]) -> Tuple[np.ndarray, ...]:
    if isinstance(edges, np.ndarray) and edges.ndim == 1:
        edges = [edges]
    elif isinstance(edges, (list, tuple)) and edges and isinstance(edges[0], Real):
        edges = [edges]  # one axis given as a flat list of numbers
    out = []
    for d, e in enumerate(edges):
        e = np.asarray(e, dtype=np.float64)
        if e.ndim != 1 or e.size < 2:
            raise ValueError(f"edges[{d}] must be a 1-D array of at least 2 values, got shape {e.shape}")
        if not np.all(np.isfinite(e)):
            raise ValueError(f"edges[{d}] must be finite")
        if not np.all(np.diff(e) > 0):
            raise ValueError(f"edges[{d}] must be strictly increasing")
        out.append(e)
    if D is not None and len(out) != D:
        raise ValueError(f"edges give {len(out)} axes but X has D = {D} columns")
    if not out:
        raise ValueError("edges must give at least one axis")
    return tuple(out)


def _as_axis_bounds(bounds: Any, D: int) -> np.ndarray:
    b = np.asarray(bounds, dtype=np.float64)
    if b.shape == (2,):
        b = np.tile(b, (D, 1))
    if b.shape != (D, 2):
        raise ValueError(
            f"bounds must be a pair (lo, hi) used for every axis or one pair per axis, shape ({D}, 2); "
            f"got shape {b.shape}"
        )
    if not np.all(np.isfinite(b)) or not np.all(b[:, 0] < b[:, 1]):
        raise ValueError(f"bounds must be finite with lo < hi on every axis, got {b.tolist()}")
    return b


def make_bins(
    X: Any = None,
    *,
    edges: Any = None,
    counts: Any = None,
    bounds: Any = None,
) -> Bins:
    """A grid of bins with public edges: ``edges`` given, or ``counts`` bins per axis over ``bounds``.

    :param X: optional public inputs ``[N, D]``, used only to check the dimension and to warn
        (``UserWarning``, with the count) when some inputs lie outside the grid. Never used to
        place the edges.
    :param edges: one strictly increasing array of edges per axis (a single array for D = 1).
    :param counts: the number of bins per axis (an int for every axis, or one per axis), with
        ``bounds``: equal-width bins spanning each axis' public bounds.
    :param bounds: public input bounds, a pair ``(lo, hi)`` for every axis or ``[D, 2]``.

    The edges must be chosen without the private outputs. Bins from ``counts`` need public
    ``bounds``: this function refuses to take them from the data (``ValueError``), so that the grid
    is always a stated, public choice. (Inputs are public, so e.g. quantiles of ``X`` are a
    legitimate choice: compute them yourself and pass them as ``edges``.)
    """
    D = None if X is None else as_inputs("X", X).shape[1]
    if (edges is None) == (counts is None):
        raise ValueError("give exactly one of edges (per axis) or counts (with public bounds)")
    if edges is not None:
        if bounds is not None:
            raise ValueError("bounds are only used with counts; edges already fix the grid")
        bins = Bins(_as_edges(edges, D))
    else:
        if bounds is None:
            raise ValueError(
                "counts need public input bounds: pass bounds=(lo, hi) (or one pair per axis) chosen "
                "without looking at the data. Edges are never derived from the data here, because the "
                "grid must be a public, stated choice (use edges= for any other public grid)."
            )
        if isinstance(counts, Integral):
            if D is None:
                b = np.asarray(bounds, dtype=np.float64)
                D = 1 if b.shape == (2,) else b.shape[0]
            counts = [counts] * D
        counts = [int(c) for c in counts]
        if D is None:
            D = len(counts)
        if len(counts) != D:
            raise ValueError(f"counts gives {len(counts)} axes but X has D = {D} columns")
        if any(c < 1 for c in counts):
            raise ValueError(f"counts must be >= 1, got {counts}")
        b = _as_axis_bounds(bounds, D)
        bins = Bins(tuple(np.linspace(b[d, 0], b[d, 1], counts[d] + 1) for d in range(D)))
    if X is not None:
        outside = int(np.sum(~bins.contains(X)))
        if outside:
            warnings.warn(f"{outside} of {np.shape(X)[0]} inputs lie outside the grid", UserWarning, stacklevel=2)
    return bins


# ---------------------------------------------------------------------------------------------
# the Laplace mechanism


def laplace_noise(size: int, seed: Optional[int] = None) -> Tuple[np.ndarray, bool]:
    """``size`` independent standard Laplace draws (scale 1) and whether they are reproducible.

    ``seed=None``: OS entropy via ``secrets.SystemRandom``, each draw ``E1 - E2`` with
    ``E = -log(1 - U)`` standard exponentials (``U`` uniform on [0, 1), 53 bits). Otherwise numpy's
    PCG64 with a :class:`~dpgp_gpflow.ReproducibleNoiseWarning`. A fresh generator every call.
    """
    size = int(size)
    if seed is None:
        rng = secrets.SystemRandom()
        z = np.fromiter(
            (math.log1p(-rng.random()) - math.log1p(-rng.random()) for _ in range(size)),
            dtype=np.float64,
            count=size,
        )
        return z, False
    warnings.warn(
        f"DP noise drawn from an explicit seed ({seed!r}): the release is reproducible and NOT private "
        "against anyone who knows the seed; use seed=None for a private release",
        ReproducibleNoiseWarning,
        stacklevel=3,
    )
    return np.random.default_rng(seed).laplace(0.0, 1.0, size), True


@dataclass(frozen=True, eq=False)
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


def _prepare_bins(X, Y, bins, y_bounds, data_sensitivity, empty_value, outside):
    """Validate everything; returns ``(index [N'], Y [N', 1] unclipped, bounds, d, empty_value)``."""
    if not isinstance(bins, Bins):
        raise TypeError(f"bins must be a Bins (see make_bins), got {type(bins).__name__}")
    X = as_inputs("X", X, bins.ndim)
    Y = np.asarray(Y.numpy() if hasattr(Y, "numpy") else Y)
    if Y.ndim == 1:
        Y = Y.reshape(-1, 1)
    Y = as_outputs("Y", Y, X.shape[0])
    bounds = validate_bounds(y_bounds)
    d = validate_data_sensitivity(data_sensitivity, bounds)
    if empty_value is None:
        empty_value = 0.5 * (bounds[0] + bounds[1])
    if isinstance(empty_value, bool) or not isinstance(empty_value, (Real, np.floating, np.integer)):
        raise TypeError(f"empty_value must be a real number (public), got {empty_value!r}")
    empty_value = float(empty_value)
    if not math.isfinite(empty_value):
        raise ValueError(f"empty_value must be finite, got {empty_value}")
    if outside not in _OUTSIDE:
        raise ValueError(f"outside must be one of {_OUTSIDE}, got {outside!r}")
    index, inside = bins.locate(X)
    if not np.all(inside):
        n_out = int(np.sum(~inside))
        if outside == "raise":
            raise ValueError(
                f"{n_out} of {X.shape[0]} training inputs lie outside the grid; widen the public grid, "
                "or pass outside='nearest' (count them in the nearest bin) or outside='drop' (ignore them)"
            )
        if outside == "drop":
            index = index[inside]
            Y = Y[inside]
    return index, Y, bounds, d, empty_value


def _bin_means(index: np.ndarray, y: np.ndarray, n_bins: int, empty_value: float):
    """Counts and means per bin of the (clipped) outputs ``y``; empty bins hold ``empty_value``."""
    counts = np.bincount(index, minlength=n_bins).astype(np.int64)
    sums = np.bincount(index, weights=y, minlength=n_bins)
    occupied = counts > 0
    means = np.full(n_bins, empty_value)
    means[occupied] = sums[occupied] / counts[occupied]
    return counts, means


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
    bins are disjoint, so by parallel composition the release costs ``(epsilon, 0)`` once. The
    budget is checked before any noise is drawn and charged after (``accountant`` or the innermost
    ``with PrivacyAccountant(...)``), as a pure-epsilon event.

    :param outside: training inputs outside the grid: ``"raise"`` (default), ``"nearest"`` (count
        them in the nearest bin) or ``"drop"`` (ignore them). The inputs are public, so either
        choice is public.
    """
    epsilon = validate_epsilon(epsilon)
    index, Y, bounds, d, empty_value = _prepare_bins(X, Y, bins, y_bounds, data_sensitivity, empty_value, outside)
    y = clip_outputs(Y, bounds)[:, 0]  # ClippingWarning (a count, never values) points at the caller
    counts, means = _bin_means(index, y, bins.n_bins, empty_value)
    if accountant is None:
        accountant = current_accountant()
    if accountant is not None:
        if not isinstance(accountant, PrivacyAccountant):
            raise TypeError(f"accountant must be a PrivacyAccountant, got {type(accountant).__name__}")
        accountant.check(epsilon, 0.0)
    occupied = counts > 0
    scale = np.zeros(bins.n_bins)
    scale[occupied] = (d / counts[occupied]) / epsilon
    z, reproducible = laplace_noise(int(np.sum(occupied)), seed)
    released = means.copy()
    released[occupied] = means[occupied] + scale[occupied] * np.asarray(z, dtype=np.float64)
    if accountant is not None:
        accountant.spend(epsilon, 0.0, kind="pure",
                         description=f"Laplace bin means ({int(np.sum(occupied))} occupied of {bins.n_bins} bins)")
    return BinRelease(
        bins=bins,
        boxes=bins.boxes,
        centres=bins.centres,
        counts=counts,
        mean=released,
        noise_scale=scale,
        epsilon=epsilon,
        delta=0.0,
        data_sensitivity=d,
        y_bounds=bounds,
        empty_value=empty_value,
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
    index, Y, bounds, d, empty_value = _prepare_bins(X, Y, bins, y_bounds, None, empty_value, outside)
    y = clip_outputs(Y, bounds)[:, 0]
    counts, means = _bin_means(index, y, bins.n_bins, empty_value)
    return BinRelease(
        bins=bins,
        boxes=bins.boxes,
        centres=bins.centres,
        counts=counts,
        mean=means,
        noise_scale=np.zeros(bins.n_bins),
        epsilon=math.inf,
        delta=0.0,
        data_sensitivity=d,
        y_bounds=bounds,
        empty_value=empty_value,
        reproducible=False,
    )


# ---------------------------------------------------------------------------------------------
# predictors (post-processing of a BinRelease: no privacy cost)


def _check_release(release: Any) -> BinRelease:
    if not isinstance(release, BinRelease):
        raise TypeError(f"release must be a BinRelease, got {type(release).__name__}")
    return release


def predict_bin_value(release: BinRelease, Xnew: Any, *, outside: str = "nearest") -> np.ndarray:
    """Simple binning: the released value of the bin containing each row of ``Xnew`` (``[M]``).

    Points outside the grid get the value of the nearest bin (``outside="nearest"``, per-axis
    clipping of the bin index) or the public prior mean ``release.empty_value``
    (``outside="prior"``). Empty bins give ``release.empty_value``.
    """
    release = _check_release(release)
    if outside not in ("nearest", "prior"):
        raise ValueError(f"outside must be 'nearest' or 'prior', got {outside!r}")
    index, inside = release.bins.locate(Xnew)
    value = release.mean[index]
    if outside == "prior":
        value = np.where(inside, value, release.empty_value)
    return value


class BinNoiseVariance(gpflow.functions.Function):
    """Likelihood variance of a GP fitted to released bins: the variance of the bin at each input.

    ``variances[j]`` is the noise variance of observation ``j`` (bin ``j``). Called with points
    (``inputs="points"``, ``[N, D]``) or boxes (``inputs="boxes"``, ``[N, 2D]``, located by their
    centres), it returns ``[N, 1]``: the variance of the bin containing each point (the nearest bin
    outside the grid). Use as ``gpflow.likelihoods.Gaussian(variance=BinNoiseVariance(...))``.
    """

    def __init__(self, bins: Bins, variances: Any, inputs: str = "points") -> None:
        super().__init__()
        if inputs not in ("points", "boxes"):
            raise ValueError(f"inputs must be 'points' or 'boxes', got {inputs!r}")
        variances = np.asarray(variances, dtype=np.float64).reshape(-1)
        if variances.size != bins.n_bins:
            raise ValueError(f"variances must have one value per bin ({bins.n_bins}), got {variances.size}")
        self.inputs = inputs
        self._D = bins.ndim
        self._shape = bins.shape
        self._inner = [tf.constant(e[1:-1][None, :], dtype=tf.float64) for e in bins.edges]
        self._variances = tf.constant(variances, dtype=tf.float64)

    def __call__(self, X: TensorType) -> tf.Tensor:  # type: ignore[override]
        X = tf.convert_to_tensor(X, dtype=tf.float64)
        if self.inputs == "boxes":
            X = 0.5 * (X[:, : self._D] + X[:, self._D :])
        flat = tf.zeros(tf.shape(X)[:1], dtype=tf.int64)
        for d in range(self._D):
            if self._shape[d] == 1:
                k = tf.zeros(tf.shape(X)[:1], dtype=tf.int64)
            else:
                # the number of inner edges <= x: the bin index, clipped to the grid by construction
                k = tf.searchsorted(self._inner[d], X[None, :, d], side="right", out_type=tf.int64)[0]
            flat = flat * self._shape[d] + k
        return tf.gather(self._variances, flat)[:, None]


@tf.function(reduce_retracing=True)
def _table_box_box(m: tf.Tensor, h: tf.Tensor, ell: tf.Tensor) -> tf.Tensor:
    """1-D integral kernel between all intervals of one axis (``[n, n]``), compiled once."""
    return _interval_interval(m[:, None] - m[None, :], h[:, None], h[None, :], ell)


@tf.function(reduce_retracing=True)
def _table_diag(h: tf.Tensor, ell: tf.Tensor) -> tf.Tensor:
    return _interval_interval(tf.zeros_like(h), h, h, ell)


@tf.function(reduce_retracing=True)
def _table_box_point(m: tf.Tensor, h: tf.Tensor, x: tf.Tensor, ell: tf.Tensor) -> tf.Tensor:
    """1-D integrals of the EQ kernel over each interval of one axis at points ``x`` (``[n, P]``)."""
    return _interval_point(m[:, None] - x[None, :], h[:, None], ell)


class GridIntegralSE(IntegralSE):
    """:class:`~dpgp_gpflow.kernels.IntegralSE`, fast for boxes that are bins of one grid.

    The integral EQ kernel is a product over the axes, and along axis ``d`` the boxes of a grid
    take only ``shape[d]`` distinct intervals, so ``K(B_i, B_j) = variance * prod_d T_d[k_i, k_j]``
    with ``T_d`` the ``shape[d] x shape[d]`` table of 1-D interval-interval integrals (computed by
    the same closed form as ``IntegralSE``). A kernel matrix then costs ``D`` gathers per entry
    instead of ``D`` erf evaluations with their Taylor branches (for 2,336 4-D bins: about 1 s
    instead of 80 s here). ``K_box_point`` works the same way (``shape[d] x P`` tables). Boxes that
    are not bins of ``bins`` (any row) fall back to ``IntegralSE``; results agree to rounding.
    """

    def __init__(self, bins: Bins, lengthscales: TensorType = 1.0, variance: TensorType = 1.0,
                 name: Optional[str] = None) -> None:
        super().__init__(lengthscales=lengthscales, variance=variance, name=name)
        if not isinstance(bins, Bins):
            raise TypeError(f"bins must be a Bins, got {type(bins).__name__}")
        self._check_dims(bins.ndim, "bins")
        self._grid_edges = [tf.constant(e, dtype=tf.float64) for e in bins.edges]
        self._grid_D = bins.ndim

    def _ell(self, d: int) -> tf.Tensor:
        return self.lengthscales if self.lengthscales.shape.rank == 0 else self.lengthscales[d]

    def _grid_index(self, boxes: tf.Tensor) -> Tuple[list, tf.Tensor]:
        """Per-axis bin index of each box and whether every box is exactly a bin of the grid."""
        D = self._grid_D
        index, ok = [], tf.constant(True)
        for d, e in enumerate(self._grid_edges):
            lower, upper = boxes[:, d], boxes[:, D + d]
            k = tf.searchsorted(e, lower, side="left", out_type=tf.int32)
            k = tf.clip_by_value(k, 0, int(e.shape[0]) - 2)
            ok = ok & tf.reduce_all(tf.gather(e, k) == lower) & tf.reduce_all(tf.gather(e, k + 1) == upper)
            index.append(k)
        return index, ok

    def _axis_intervals(self, d: int) -> Tuple[tf.Tensor, tf.Tensor]:
        e = self._grid_edges[d]
        return 0.5 * (e[:-1] + e[1:]), 0.5 * (e[1:] - e[:-1])

    def _grid_shape_ok(self, boxes: tf.Tensor) -> bool:
        return boxes.shape.rank == 2 and boxes.shape[-1] == 2 * self._grid_D

    def K(self, X: TensorType, X2: Optional[TensorType] = None) -> tf.Tensor:
        X = tf.convert_to_tensor(X, dtype=tf.float64)
        X2t = X if X2 is None else tf.convert_to_tensor(X2, dtype=tf.float64)
        if not (self._grid_shape_ok(X) and self._grid_shape_ok(X2t)):
            return super().K(X, X2)
        i1, ok1 = self._grid_index(X)
        i2, ok2 = self._grid_index(X2t)

        def fast() -> tf.Tensor:
            out = None
            for d in range(self._grid_D):
                m, h = self._axis_intervals(d)
                table = _table_box_box(m, h, tf.convert_to_tensor(self._ell(d)))
                f = tf.gather(tf.gather(table, i1[d], axis=0), i2[d], axis=1)
                out = f if out is None else out * f
            return self.variance * out

        return tf.cond(ok1 & ok2, fast, lambda: IntegralSE.K(self, X, X2))

    def K_diag(self, X: TensorType) -> tf.Tensor:
        X = tf.convert_to_tensor(X, dtype=tf.float64)
        if not self._grid_shape_ok(X):
            return super().K_diag(X)
        idx, ok = self._grid_index(X)

        def fast() -> tf.Tensor:
            out = None
            for d in range(self._grid_D):
                _, h = self._axis_intervals(d)
                diag = _table_diag(h, tf.convert_to_tensor(self._ell(d)))
                f = tf.gather(diag, idx[d])
                out = f if out is None else out * f
            return self.variance * out

        return tf.cond(ok, fast, lambda: IntegralSE.K_diag(self, X))

    def K_box_point(self, boxes: TensorType, points: TensorType) -> tf.Tensor:
        boxes = tf.convert_to_tensor(boxes, dtype=tf.float64)
        points = tf.convert_to_tensor(points, dtype=tf.float64)
        if not self._grid_shape_ok(boxes) or points.shape[-1] != self._grid_D:
            return super().K_box_point(boxes, points)
        idx, ok = self._grid_index(boxes)

        def fast() -> tf.Tensor:
            out = None
            for d in range(self._grid_D):
                m, h = self._axis_intervals(d)
                table = _table_box_point(m, h, points[:, d], tf.convert_to_tensor(self._ell(d)))
                f = tf.gather(table, idx[d], axis=0)
                out = f if out is None else out * f
            return self.variance * out

        return tf.cond(ok, fast, lambda: IntegralSE.K_box_point(self, boxes, points))


def _public_real(name: str, value: Any, *, positive: bool = False, allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0.0 or (value == 0.0 and not allow_zero):
        raise ValueError(f"{name} must be finite and {'> 0' if not allow_zero else '>= 0'}, got {value}")
    return value


def _bin_variance_of_mean(release: BinRelease, noise_variance: Optional[float]) -> np.ndarray:
    """``[B]`` variance of each released bin mean around f: Laplace ``2 b^2`` plus ``sigma^2 / n``."""
    sampling = 0.0 if noise_variance is None else _public_real("noise_variance", noise_variance)
    counts = np.maximum(release.counts, 1)
    return release.noise_variance + sampling / counts


def _default_kernel(release: BinRelease) -> gpflow.kernels.Kernel:
    widths = np.array([np.mean(np.diff(e)) for e in release.bins.edges])
    half = 0.5 * (release.y_bounds[1] - release.y_bounds[0])
    return gpflow.kernels.SquaredExponential(lengthscales=2.0 * widths, variance=(half / 2.0) ** 2)


def fit_gp_on_bins(
    release: BinRelease,
    kernel: Optional[gpflow.kernels.Kernel] = None,
    noise_variance: Optional[float] = None,
) -> gpflow.models.GPR:
    """A ``gpflow.models.GPR`` on the centres of the occupied bins, observing their released means.

    Observation ``j`` has its own noise variance (heteroscedastic, a :class:`BinNoiseVariance`
    likelihood): the Laplace noise variance ``2 b_j^2`` plus ``noise_variance / n_j`` (the public
    per-output noise variance, averaged over the bin's ``n_j`` outputs; default 0), floored at
    ``NOISE_FLOOR`` times the kernel's prior variance. Empty bins carry no data and are left out.
    The mean function is the constant ``release.empty_value`` (public, not trainable), so
    ``model.predict_f(Xnew)`` returns predictions on the scale of ``y``.

    ``kernel`` defaults to an EQ kernel with lengthscales twice the mean bin width per axis and
    variance ``((hi - lo) / 4)^2``: public defaults from the grid and bounds only. Fitting is
    post-processing of the release (no privacy cost), so the hyperparameters may even be
    trained on the release; the variance function itself is fixed.
    """
    release = _check_release(release)
    if kernel is None:
        kernel = _default_kernel(release)
    occ = release.occupied
    if not np.any(occ):
        raise ValueError("the release has no occupied bins: nothing to fit")
    variances = _bin_variance_of_mean(release, noise_variance)
    prior_var = float(np.max(kernel.K_diag(release.centres[occ][:1]).numpy()))
    variances = np.maximum(variances, NOISE_FLOOR * prior_var)
    likelihood = gpflow.likelihoods.Gaussian(
        variance=BinNoiseVariance(release.bins, variances, "points"), variance_lower_bound=0.0
    )
    mean = gpflow.functions.Constant(np.array([release.empty_value]))
    gpflow.set_trainable(mean, False)
    data = (release.centres[occ], release.mean[occ].reshape(-1, 1))
    return gpflow.models.GPR(data, kernel, mean_function=mean, likelihood=likelihood)


def fit_integral_gp(
    release: BinRelease,
    lengthscales: Any,
    variance: float,
    noise_variance: Optional[float] = None,
) -> gpflow.models.GPR:
    """A ``gpflow.models.GPR`` with an :class:`~dpgp_gpflow.kernels.IntegralSE` kernel on the bins.

    The kernel is a :class:`GridIntegralSE` (an ``IntegralSE`` that exploits the grid: same values,
    much faster for many bins).

    Each occupied bin is an observation of ``int_bin (f - m0)``: its centred released mean times its
    volume, ``(mean_j - m0) * V_j`` with the public prior mean ``m0 = release.empty_value`` (the
    integral kernel needs a zero mean function). The noise variance of observation ``j`` is
    ``V_j^2 (2 b_j^2 + noise_variance / n_j)`` (a :class:`BinNoiseVariance` over boxes), floored at
    ``NOISE_FLOOR`` times the kernel's prior variance of that integral. Predict ``f`` at points with
    :func:`predict_integral_gp`, which adds ``m0`` back (``predict_f_at_points`` alone gives
    ``f - m0``). ``lengthscales``/``variance`` are the EQ kernel's, in the units of the inputs and
    of ``y``; choose them without the private outputs (or from the release: post-processing).
    """
    release = _check_release(release)
    variance = _public_real("variance", variance, allow_zero=False)
    occ = release.occupied
    if not np.any(occ):
        raise ValueError("the release has no occupied bins: nothing to fit")
    kernel = GridIntegralSE(release.bins, lengthscales=lengthscales, variance=variance)
    boxes = release.boxes[occ]
    volumes = release.volumes
    variances = volumes**2 * _bin_variance_of_mean(release, noise_variance)
    kdiag = np.zeros(release.n_bins)
    kdiag[occ] = kernel.K_diag(boxes).numpy()
    variances = np.maximum(variances, NOISE_FLOOR * kdiag)
    likelihood = gpflow.likelihoods.Gaussian(
        variance=BinNoiseVariance(release.bins, variances, "boxes"), variance_lower_bound=0.0
    )
    m0 = release.empty_value
    Y = ((release.mean[occ] - m0) * volumes[occ]).reshape(-1, 1)
    model = gpflow.models.GPR((boxes, Y), kernel, likelihood=likelihood)
    model.y_prior_mean = float(m0)
    return model


def predict_integral_gp(
    model: gpflow.models.GPR, Xnew: Any, *, full_cov: bool = False, prior_mean: Optional[float] = None
) -> Tuple[np.ndarray, np.ndarray]:
    """Posterior mean and variance of ``f`` at points from :func:`fit_integral_gp` (numpy).

    The mean is ``m0 + E[f - m0 | bins]`` with ``m0`` the model's ``y_prior_mean`` (set by
    :func:`fit_integral_gp`) or ``prior_mean``. Returns ``(mean [M, 1], var [M, 1])``
    (``[1, M, M]`` covariance with ``full_cov``).
    """
    if prior_mean is None:
        prior_mean = getattr(model, "y_prior_mean", None)
        if prior_mean is None:
            raise ValueError("the model has no y_prior_mean: pass prior_mean (the public centring constant)")
    Xnew = as_inputs("Xnew", Xnew, int(model.data[0].shape[1]) // 2)
    mean, var = predict_f_at_points(model, tf.constant(Xnew), full_cov=full_cov)
    return mean.numpy() + float(prior_mean), var.numpy()
