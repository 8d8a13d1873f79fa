"""The whole-row release: rows whose inputs and outputs are both private, released once as noised statistics.

:func:`release_rows` releases the statistics of any chunk source's rows for a kernel and public inducing
inputs; :func:`release_model` is ``DPSGPR(..., private_inputs=True).release_function`` (the model's kernel,
inducing inputs, box, bounds, leak guard and rows). Both validate every public piece (the box, the bounds,
the kernel's bound on ``k(x, x)``, that ``Z`` was not computed from the inputs, the shares, the chunking),
then run one :class:`~dpgp_gpflow.measurement.Measurement` through :func:`~dpgp_gpflow.measurement.measure`:
checks, one reservation, one exact Gaussian draw on the statistics, one ledger event, then the
post-processing into a :class:`~dpgp_gpflow.whole_rows.released.WholeRowsRelease`.

Privacy assumption: neighbouring datasets differ in one whole row, its inputs anywhere in the public box and
its output in the public bounds (the relation ``"row (inputs and outputs)"``), or with public ``groups`` in all
the rows of one person (``"person (groups, up to G rows) (inputs and outputs)"``); the number of rows ``n`` and
the persons' ids are public; the kernel's shape (its parameters other than the overall variance), ``Z``, the
box and the bounds are public; the kernel variance and noise variance are public values or fitted on the
release; the lengthscales are public values or chosen from a public grid on the release.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import gpflow
import numpy as np

from ..contract import check_release_hyperparameters
from ..measurement import measure
from ..mechanisms.request import release_request
from ..streaming.chunks import DEFAULT_CHUNK_SIZE, ChunkSource, LocalChunks
from ..streaming.release import rows_source
from ..validation import (
    parameter_value,
    reading_once,
    require_float64,
    validate_bounds,
    validate_data_sensitivity,
    validate_noise_variance,
    validate_seed,
)
from .design import check_public_inducing_inputs, validate_box
from .features import FeatureMap, constant_diagonal, feature_map, kernel_bound
from .mechanism import NoisedStatistics, statistics_measurement
from .lengthscales import choose, default_lengthscales, validate_lengthscales, with_lengthscales
from .released import VARIANCES, WholeRowsRelease, checked_variances
from .histogram_release import HistogramResidualRelease, release_histogram_residuals
from .histogram_scheme import HISTOGRAM, HISTOGRAM_FRACTIONS
from .residual_bounds import validate_residual_fractions
from .residual_release import ResidualRelease, release_residuals
from .sensitivity import DEFAULT_SHARES, validate_shares
from .statistics import GridStatistics, RowStatistics

__all__ = ["release_model", "release_rows"]


def _resolve_variances(variances: Optional[str], kernel_variance: Any, noise_variance: Any) -> str:
    if variances is None:
        variances = "given" if noise_variance is not None else "fit"
    if variances not in VARIANCES:
        raise ValueError(f"variances must be one of {VARIANCES} (or None: 'given' when a noise variance is given), "
                         f"got {variances!r}")
    if variances == "given" and noise_variance is None:
        raise ValueError("variances='given' needs noise_variance= (or variances='fit': fitted on the released "
                         "statistics)")
    if variances == "fit" and (kernel_variance is not None or noise_variance is not None):
        raise ValueError("variances='fit' fits the kernel and noise variances on the released statistics: give "
                         "neither, or variances='given' to use the values given")
    return variances


def _lengthscale_candidates(lengthscales: Any, kernel: Any, box: np.ndarray) -> Optional[Tuple[np.ndarray, ...]]:
    """None (the kernel's own lengthscales) or the validated public candidates: ``"default"`` for
    :func:`~dpgp_gpflow.whole_rows.lengthscales.default_lengthscales` of the box, or a sequence."""
    if lengthscales is None or (isinstance(lengthscales, str) and lengthscales == "kernel"):
        return None
    if isinstance(lengthscales, str):
        if lengthscales != "default":
            raise ValueError(f"lengthscales must be None / 'kernel' (the kernel's own), 'default' (the default grid "
                             f"of the box) or a sequence of candidates, got {lengthscales!r}")
        lengthscales = default_lengthscales(box, kernel)
    return validate_lengthscales(kernel, lengthscales, box.shape[0])


def _request(epsilon: Any, delta: Any, calibration: Any, seed: Any) -> Any:
    """``release_request(epsilon, delta, calibration=calibration, objective=None, seed=seed)``, its unseeded part
    (validation and the noise multiplier, a bisection: public values only) computed once per (epsilon, delta,
    calibration) and their types in a process; the seed validated first, as release_request does."""
    seed = validate_seed(seed)
    try:
        types: Any = (type(epsilon), type(delta), type(calibration))  # True is not 1 here
        unseeded = _unseeded_request(types, epsilon, delta, calibration)
    except TypeError:  # unhashable: validated (and refused) without the cache
        return release_request(epsilon, delta, calibration=calibration, objective=None, seed=seed)
    return unseeded._replace(seed=seed)


@functools.lru_cache(maxsize=64)
def _unseeded_request(types: Any, epsilon: Any, delta: Any, calibration: Any) -> Any:
    return release_request(epsilon, delta, calibration=calibration, objective=None, seed=None)


def public_setup(source: Any, kernel: Any, inducing_inputs: Any, x_bounds: Any, epsilon: float, delta: float,
                 calibration: str, seed: Optional[int], groups: Any) -> Tuple[Any, Any, np.ndarray, np.ndarray]:
    """``(request, groups, Z, box)``: the public checks every whole-row release makes before it reads a row, in
    one line each: the privacy parameters (:func:`~dpgp_gpflow.mechanisms.request.release_request`), a chunk
    source, the box, a kernel with a public bound on ``k(x, x)``, inducing inputs not computed from data;
    ``groups="source"`` resolved to the ids the source carries (None: one row per person)."""
    require_float64()
    request = _request(epsilon, delta, calibration, seed)
    if not isinstance(source, ChunkSource):
        raise TypeError(f"source must be a dpgp_gpflow.streaming.ChunkSource, got {type(source).__name__}")
    if isinstance(groups, str) and groups == "source":
        groups = getattr(source, "groups", None)
    Z = np.asarray(inducing_inputs, dtype=np.float64)
    box = validate_box(x_bounds, Z.shape[1] if Z.ndim == 2 else None)
    kernel_bound(kernel, box)  # refuses a kernel without a public bound on k(x, x) over the box, in one line
    check_public_inducing_inputs(Z)
    return request, groups, Z, box


def release_rows(source: ChunkSource, kernel: Any, inducing_inputs: Any, *, x_bounds: Any, y_bounds: Any,
                 epsilon: float, delta: float, calibration: str = "analytic", seed: Optional[int] = None,
                 accountant: Any = None, shares: Any = DEFAULT_SHARES, clip_inputs: bool = True,
                 kernel_variance: Optional[float] = None, noise_variance: Optional[float] = None,
                 variances: Optional[str] = None, clip_to_bounds: bool = True, lengthscales: Any = None,
                 checks: Sequence[Callable[[], Any]] = (), groups: Any = "source",
                 residual_fractions: Any = None
                 ) -> Union[WholeRowsRelease, ResidualRelease, HistogramResidualRelease]:
    """Release the whole-row statistics of ``source``'s rows (a :class:`~dpgp_gpflow.streaming.ChunkSource`:
    :class:`~dpgp_gpflow.streaming.LocalChunks` or :class:`~dpgp_gpflow.distributed.DaskChunks`) with an
    (epsilon, delta)-DP guarantee for whole-row neighbours, and return the sparse GP they define.

    ``kernel``: a GPflow kernel with a public bound on ``k(x, x)`` (:func:`~dpgp_gpflow.whole_rows.kernel_bound`);
    the release is at unit scale, so its variance matters only as the default ``kernel_variance``.
    ``inducing_inputs`` [M, D]: public (e.g. :func:`~dpgp_gpflow.whole_rows.inducing_grid` of the box).
    ``x_bounds`` [D, 2] and ``y_bounds`` ``(lo, hi)``: public; inputs outside the box are clipped to it
    (``clip_inputs=False``: refused, nothing charged), outputs to the bounds. ``shares``: the public split of
    the sensitivity between ``S``, ``b`` and ``q`` (:data:`~dpgp_gpflow.whole_rows.sensitivity.DEFAULT_SHARES`).
    ``variances``: ``"given"`` (``kernel_variance``, default the kernel's bound, and ``noise_variance``) or
    ``"fit"`` (both fitted on the released statistics); None: ``"given"`` when ``noise_variance`` is given.
    ``lengthscales``: None (the kernel's own), ``"default"`` (the public grid of the box,
    :func:`~dpgp_gpflow.whole_rows.lengthscales.default_lengthscales`) or a sequence of public candidates: every
    candidate's statistics are released together (one vector, one event, the noise of each ``sqrt(B)`` times one
    release's) and the candidate with the largest SGPR bound on its released statistics is returned
    (post-processing; every candidate in ``candidates``, the choice in ``selection``).
    ``groups``: the public person ids (``"source"``: those the source carries of its own rows, if any; None:
    one row per person); a person's rows are summed together and the sensitivity is that of the largest
    person's contribution (docs/whole_rows.md#persons); each person's rows must be consecutive in the source.
    ``checks``: the caller's public checks (e.g. the leak guard), run before anything is reserved.
    ``accountant``, ``seed`` and ``calibration`` as for every release.
    ``residual_fractions``: None (one release), ``"default"`` or the public fractions of the Gaussian-DP budget of
    the statistics release and of each release of clipped residual sums after it, summing to 1: a
    :class:`~dpgp_gpflow.whole_rows.residual_release.ResidualRelease` (docs/whole_rows.md#residual-releases); with
    ``lengthscales`` the first stage releases every candidate's statistics and the residual releases are the chosen
    candidate's, all under the one event.
    ``"histogram"``: the histogram scheme (:mod:`~dpgp_gpflow.whole_rows.histogram_scheme`: noised cell counts and
    ``b`` first, four residual releases; one given lengthscale and given variances), a
    :class:`~dpgp_gpflow.whole_rows.histogram_release.HistogramResidualRelease`.
    """
    histogram = isinstance(residual_fractions, str) and residual_fractions == HISTOGRAM
    fractions = HISTOGRAM_FRACTIONS if histogram else validate_residual_fractions(residual_fractions)
    request, groups, Z, box = public_setup(source, kernel, inducing_inputs, x_bounds, epsilon, delta, calibration,
                                           seed, groups)
    bounds = validate_bounds(y_bounds)
    validate_data_sensitivity(None, bounds)  # d = hi - lo >= 1e-100 (so q's bound d^2 / 4 is a normal float64)
    validate_shares(shares)
    variances = _resolve_variances(variances, kernel_variance, noise_variance)
    if noise_variance is not None:
        validate_noise_variance(noise_variance)
    candidates = _lengthscale_candidates(lengthscales, kernel, box)
    if variances == "fit" and not constant_diagonal(kernel):  # (a lengthscale grid needs a stationary kernel)
        raise NotImplementedError(
            "fitting the variances on the released statistics assumes k(x, x) is the same everywhere, and a "
            f"{type(kernel).__name__} kernel's varies with x: give noise_variance= (variances='given')")
    kernels = [kernel] if candidates is None else [with_lengthscales(kernel, v) for v in candidates]
    maps = [feature_map(k, Z, box) for k in kernels]
    if variances == "given" and kernel_variance is None:
        kernel_variance = maps[0].k_max
    # the variances given (finite, > 0), checked here for every scheme, before anything is reserved; None when fitted
    given = checked_variances(kernel_variance, noise_variance) if variances == "given" else None
    grid = [RowStatistics(features, box, bounds, clip_inputs=clip_inputs) for features in maps]

    def one(noised: NoisedStatistics, features: FeatureMap, stage: Any = request) -> WholeRowsRelease:
        return WholeRowsRelease(noised, features, x_bounds=box, y_bounds=bounds, epsilon=stage.epsilon,
                                delta=stage.delta, calibration=stage.calibration, kernel_variance=kernel_variance,
                                noise_variance=noise_variance, variances=variances, clip_to_bounds=clip_to_bounds)

    def released(noised: Any, stage: Any = request) -> WholeRowsRelease:  # post-processing, after the commit
        if candidates is None:
            return one(noised, maps[0], stage)
        releases = [one(n, f, stage) for n, f in zip(noised, maps)]
        fitted = [r.bound() for r in releases]
        chosen = choose(fitted)
        return releases[chosen].with_selection(tuple(releases), candidates, fitted, chosen)

    # the box, bounds, Z and the kernel's bound were checked above (public_setup); a grid's candidates here
    public = () if candidates is None else (lambda: [kernel_bound(k, box) for k in kernels],)
    rows = grid[0] if candidates is None else GridStatistics(grid)
    if histogram:  # the histogram first stage, then residual releases (docs/whole_rows.md#residual-releases)
        if candidates is not None or given is None:
            raise NotImplementedError("residual_fractions='histogram' needs one given lengthscale and given variances "
                                      "(noise_variance=): no lengthscale grid, no fitted variances yet")
        return release_histogram_residuals(request, source, grid[0], shares=shares, fractions=fractions,
                                           kernel_variance=given[0], noise_variance=given[1],
                                           clip_to_bounds=clip_to_bounds,
                                           checks=(*public, *checks), groups=groups, accountant=accountant)
    if fractions is not None:  # the statistics (every candidate's) at f_1 of the budget, then the residual releases
        return release_residuals(request, source, rows, shares=shares, fractions=fractions, head=released,
                                 checks=(*public, *checks), groups=groups, accountant=accountant)
    measurement = statistics_measurement(request, source, rows, shares=shares, then=released,
                                         checks=(*public, *checks), groups=groups)
    return measure(measurement, accountant)


#: ``release_function`` options of the public-input releases that a whole-row release has no use for.
_NOT_WHOLE_ROWS = ("objective", "reference_inputs", "rtol", "tol", "mechanism")


def unset_lengthscales(kernel: Any) -> bool:
    """True when ``kernel`` is one stationary kernel with lengthscales whose every lengthscale is GPflow's default
    (1.0), read as none given: ``DPSGPR``'s model release then chooses them privately from the default grid, a
    classifier's refuses; ``lengthscales="kernel"`` keeps the kernel's own (a deliberate 1.0) in both."""
    values = getattr(kernel, "lengthscales", None)
    return (isinstance(kernel, gpflow.kernels.Stationary) and values is not None
            and bool(np.all(parameter_value(values) == 1.0)))


def model_rows(model: Any, source: Optional[ChunkSource], chunk_size: int) -> Tuple[ChunkSource, Any]:
    """``(source, declared person ids)`` of a model's release: its rows (:func:`~dpgp_gpflow.streaming.release.rows_source`)
    with its ``groups``; in memory with groups, the rows ordered by person (a public permutation, stable: the
    statistics are sums, so the order does not change them) so that each person's rows are consecutive."""
    groups = getattr(model, "groups", None)
    if source is None and groups is not None and getattr(model, "dask_rows", None) is None:
        order = np.argsort(groups, kind="stable")
        X, Y = model.data
        return LocalChunks(np.asarray(X)[order], np.asarray(Y)[order], chunk_size, groups=groups[order]), groups[order]
    return rows_source(model, source, chunk_size), groups


@reading_once()  # each parameter read once per release (its checks, the leak guard's included)
def release_model(model: Any, *, epsilon: float, delta: float, calibration: str = "analytic",
                  seed: Optional[int] = None, accountant: Any = None, hyperparameters_public: bool = False,
                  source: Optional[ChunkSource] = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
                  shares: Any = DEFAULT_SHARES, variances: Optional[str] = None, clip_to_bounds: bool = True,
                  lengthscales: Any = None, residual_fractions: Any = None,
                  **options: Any) -> Union[WholeRowsRelease, ResidualRelease, HistogramResidualRelease]:
    """``model.release_function(...)`` of a model built with ``private_inputs=True`` (``DPSGPR``): its rows
    (``source``, else its Dask rows or its data in chunks of ``chunk_size``) released by :func:`release_rows`
    with its kernel, inducing inputs, box, bounds, input clipping and persons (``groups``: the source must carry
    the same ids of its own rows), its leak guard checked before anything is reserved (``hyperparameters_public``
    as for every release). ``variances`` None: the model's own (``"given"``: its kernel variance and noise
    variance) when it was built with ``noise_variance=``, else ``"fit"`` on the released statistics.
    ``lengthscales`` None: chosen privately from the default grid (``"default"``) when the kernel's lengthscales
    were left at GPflow's default 1.0 (none given), else the kernel's own (``"kernel"``); or a sequence of public
    candidates (:func:`release_rows`). ``residual_fractions``: residual releases after the statistics
    (:func:`release_rows`; with a grid, of the chosen lengthscale), or ``"histogram"`` (the histogram scheme: give
    the kernel's lengthscale and ``noise_variance=``)."""
    unused = sorted(set(options) & set(_NOT_WHOLE_ROWS))
    if unused:
        raise TypeError(f"{unused} do not apply to a whole-row release (private inputs): it releases the "
                        "statistics once, with no noise optimiser or reference inputs")
    if options:
        raise TypeError(f"unexpected keyword argument(s) {sorted(options)}")
    if int(getattr(model, "num_outputs", 1)) != 1:
        raise NotImplementedError("whole-row releases take one output per row for now (Y [N, 1])")
    if variances is None:
        variances = "given" if getattr(model, "noise_variance_given", False) else "fit"
    if lengthscales is None:
        lengthscales = "default" if unset_lengthscales(model.kernel) else "kernel"
    given = variances == "given"
    kernel_variance = kernel_bound(model.kernel, model.x_bounds) if given else None
    noise_variance = float(parameter_value(model.likelihood.variance)) if given else None
    rows, groups = model_rows(model, source, chunk_size)
    return release_rows(rows, model.kernel, parameter_value(model.inducing_variable.Z), x_bounds=model.x_bounds,
                        y_bounds=model.y_bounds, epsilon=epsilon, delta=delta, calibration=calibration, seed=seed,
                        accountant=accountant, shares=shares, clip_inputs=model.clip_inputs,
                        kernel_variance=kernel_variance, noise_variance=noise_variance, variances=variances,
                        clip_to_bounds=clip_to_bounds, lengthscales=lengthscales, groups=groups,
                        residual_fractions=residual_fractions, checks=(lambda: check_release_hyperparameters(model, hyperparameters_public),))
