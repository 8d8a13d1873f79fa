"""The whole-row release: rows whose inputs and outputs are both private, released once as noised statistics.

:func:`release_rows` releases the statistics of any chunk source's rows for a kernel and public inducing
inputs; :func:`release_model` is ``DPSGPR(..., private_inputs=True).release_function`` (the model's kernel,
inducing inputs, box, bounds, leak guard and rows). Both validate every public piece (the box, the bounds,
the kernel's bound on ``k(x, x)``, that ``Z`` was not computed from the inputs, the shares, the chunking),
then run one :class:`~dpgp_gpflow.measurement.Measurement` through :func:`~dpgp_gpflow.measurement.measure`:
checks, one reservation, one exact Gaussian draw on the statistics, one ledger event, then the
post-processing into a :class:`~dpgp_gpflow.whole_rows.released.WholeRowsRelease`.

Privacy assumption: neighbouring datasets differ in one whole row, its inputs anywhere in the public box and
its output in the public bounds (the relation ``"row (inputs and outputs)"``); the number of rows ``n`` is
public (replace-one); the kernel's shape (its parameters other than the overall variance), ``Z``, the box and
the bounds are public; the kernel variance and noise variance are public values or fitted on the release.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..contract import check_release_hyperparameters
from ..measurement import measure
from ..mechanisms.request import release_request
from ..streaming.chunks import DEFAULT_CHUNK_SIZE, ChunkSource
from ..streaming.release import rows_source
from ..validation import require_float64, validate_bounds, validate_noise_variance
from .design import check_public_inducing_inputs, validate_box
from .features import FeatureMap, kernel_bound
from .mechanism import NoisedStatistics, statistics_measurement
from .released import VARIANCES, WholeRowsRelease
from .sensitivity import DEFAULT_SHARES, validate_shares
from .statistics import RowStatistics

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


def release_rows(source: ChunkSource, kernel: Any, inducing_inputs: Any, *, x_bounds: Any, y_bounds: Any,
                 epsilon: float, delta: float, calibration: str = "analytic", seed: Optional[int] = None,
                 accountant: Any = None, shares: Any = DEFAULT_SHARES, clip_inputs: bool = True,
                 kernel_variance: Optional[float] = None, noise_variance: Optional[float] = None,
                 variances: Optional[str] = None, clip_to_bounds: bool = True,
                 checks: Sequence[Callable[[], Any]] = ()) -> WholeRowsRelease:
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
    ``checks``: the caller's public checks (e.g. the leak guard), run before anything is reserved.
    ``accountant``, ``seed`` and ``calibration`` as for every release.
    """
    require_float64()
    request = release_request(epsilon, delta, calibration=calibration, objective=None, seed=seed)
    if not isinstance(source, ChunkSource):
        raise TypeError(f"source must be a dpgp_gpflow.streaming.ChunkSource, got {type(source).__name__}")
    Z = np.asarray(inducing_inputs, dtype=np.float64)
    box = validate_box(x_bounds, Z.shape[1] if Z.ndim == 2 else None)
    bounds = validate_bounds(y_bounds)
    kernel_bound(kernel)  # refuses a kernel without a public bound on k(x, x), in one line
    check_public_inducing_inputs(Z)
    validate_shares(shares)
    variances = _resolve_variances(variances, kernel_variance, noise_variance)
    if noise_variance is not None:
        validate_noise_variance(noise_variance)
    features = FeatureMap(kernel, Z)
    if variances == "given" and kernel_variance is None:
        kernel_variance = features.k_max
    rows = RowStatistics(features, box, bounds, clip_inputs=clip_inputs)

    def released(noised: NoisedStatistics) -> WholeRowsRelease:  # post-processing, after the commit
        return WholeRowsRelease(noised, features, x_bounds=box, y_bounds=bounds, epsilon=request.epsilon,
                                delta=request.delta, calibration=request.calibration, kernel_variance=kernel_variance,
                                noise_variance=noise_variance, variances=variances, clip_to_bounds=clip_to_bounds)

    public = (lambda: validate_box(box, features.input_dim), lambda: validate_bounds(bounds),
              lambda: kernel_bound(kernel), lambda: check_public_inducing_inputs(Z))
    measurement = statistics_measurement(request, source, rows, shares=shares, then=released,
                                         checks=(*public, *checks))
    return measure(measurement, accountant)


#: ``release_function`` options of the public-input releases that a whole-row release has no use for.
_NOT_WHOLE_ROWS = ("objective", "reference_inputs", "rtol", "tol", "mechanism")


def release_model(model: Any, *, epsilon: float, delta: float, calibration: str = "analytic",
                  seed: Optional[int] = None, accountant: Any = None, hyperparameters_public: bool = False,
                  source: Optional[ChunkSource] = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
                  shares: Any = DEFAULT_SHARES, variances: Optional[str] = None, clip_to_bounds: bool = True,
                  **options: Any) -> WholeRowsRelease:
    """``model.release_function(...)`` of a model built with ``private_inputs=True`` (``DPSGPR``): its rows
    (``source``, else its Dask rows or its data in chunks of ``chunk_size``) released by :func:`release_rows`
    with its kernel, inducing inputs, box, bounds and input clipping, its leak guard checked before anything is
    reserved (``hyperparameters_public`` as for every release). ``variances`` None: the model's own
    (``"given"``: its kernel variance and noise variance) when it was built with ``noise_variance=``, else
    ``"fit"`` on the released statistics."""
    unused = sorted(set(options) & set(_NOT_WHOLE_ROWS))
    if unused:
        raise TypeError(f"{unused} do not apply to a whole-row release (private inputs): it releases the "
                        "statistics once, with no noise optimiser or reference inputs")
    if options:
        raise TypeError(f"unexpected keyword argument(s) {sorted(options)}")
    if int(getattr(model, "num_outputs", 1)) != 1:
        raise NotImplementedError("whole-row releases take one output per row for now (Y [N, 1])")
    if getattr(model, "groups", None) is not None:
        raise NotImplementedError("whole-row releases protect one row; persons (groups=) are not supported yet")
    if variances is None:
        variances = "given" if getattr(model, "noise_variance_given", False) else "fit"
    given = variances == "given"
    kernel_variance = kernel_bound(model.kernel) if given else None
    noise_variance = float(np.asarray(model.likelihood.variance.numpy())) if given else None
    rows = rows_source(model, source, chunk_size)
    return release_rows(rows, model.kernel, model.inducing_variable.Z.numpy(), x_bounds=model.x_bounds,
                        y_bounds=model.y_bounds, epsilon=epsilon, delta=delta, calibration=calibration, seed=seed,
                        accountant=accountant, shares=shares, clip_inputs=model.clip_inputs,
                        kernel_variance=kernel_variance, noise_variance=noise_variance, variances=variances,
                        clip_to_bounds=clip_to_bounds,
                        checks=(lambda: check_release_hyperparameters(model, hyperparameters_public),))
