"""A default grid of hyperparameters built from public information only (docs/guides/selection.md#the-default-grid).

:func:`default_grid` proposes the configurations that :func:`~dpgp_gpflow.selection.select_hyperparameters`
chooses from when it is given no grid. It reads only what is public in this package: the inputs
``X`` (their range and typical spacing per column, and ``n``), the public bounds
(``model.output_bound``), the kernel's type (a stationary kernel with lengthscales; ARD or not) and
the likelihood's type (Gaussian regression or Bernoulli classification). It never reads the
outputs, so the grid is a public input of the selection and costs no privacy budget.

The rule (constants below):

* lengthscales: for each input column with range ``R_d`` and typical spacing ``s_d`` (the median
  gap between its sorted distinct values), ``l_d = max(f R_d, SPACING_FLOOR s_d)`` for each factor
  ``f`` of :data:`LENGTHSCALE_FACTORS` (1/16 .. 2 of the range, doubling). One ARD vector per factor
  (never a product over the columns); a kernel with one lengthscale takes the root mean square of
  the columns' values.
* Gaussian regression (GPR, FITC, SGPR): the release and the selection depend on the kernel variance
  ``v`` and the noise variance ``s2`` only through ``s2 / v``, so ``v`` is fixed at a public scale,
  ``(output_bound / 2)^2`` (the prior's two standard deviations span the bounds), and the noise
  variance takes ``r v`` for each ratio ``r`` of :data:`NOISE_RATIOS`.
* Bernoulli classification (Laplace): there is no noise variance and the kernel variance matters;
  it takes the values of :data:`CLASSIFIER_VARIANCES`.

Six lengthscales times five ratios (or four variances): 30 (24) configurations, fewer when
floors make lengthscales coincide.
"""

from __future__ import annotations

from typing import Any, Dict, List

import gpflow
import numpy as np

from ..validation import as_float64
from .columns import fold_model

__all__ = ["default_grid"]

#: Lengthscales as fractions of each input column's range.
LENGTHSCALE_FACTORS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0, 2.0)
#: No lengthscale below this many typical spacings of the column (coarse or discrete inputs).
SPACING_FLOOR = 2.0
#: Ratios ``noise variance / kernel variance`` for Gaussian regression.
NOISE_RATIOS = (1 / 16, 1 / 4, 1.0, 4.0, 16.0)
#: Kernel variances for Laplace classification (the latent scale; labels are +-1).
CLASSIFIER_VARIANCES = (0.25, 1.0, 4.0, 16.0)


def _column_scales(X: np.ndarray) -> tuple:
    """``(range [D], typical spacing [D])``: max - min, and the median gap between sorted distinct
    values (0 for a constant column). Public: inputs only."""
    ranges = np.ptp(X, axis=0)
    spacing = np.zeros(X.shape[1])
    for d in range(X.shape[1]):
        gaps = np.diff(np.unique(X[:, d]))
        spacing[d] = float(np.median(gaps)) if gaps.size else 0.0
    return ranges, spacing


def _active_columns(kernel: gpflow.kernels.Kernel, X: np.ndarray) -> np.ndarray:
    dims = kernel.active_dims
    return X[:, dims] if isinstance(dims, slice) else X[:, np.asarray(dims, dtype=np.int64).reshape(-1)]


def _lengthscales(kernel: gpflow.kernels.Stationary, X: np.ndarray) -> List[Any]:
    """One lengthscale value (scalar or ARD vector) per factor, distinct, increasing."""
    ranges, spacing = _column_scales(_active_columns(kernel, X))
    if not np.any(ranges > 0):
        raise ValueError("default_grid: every input column the kernel uses is constant; give a grid")
    # A constant column carries no information on its lengthscale: give it the others' scale.
    fill = float(np.sqrt(np.mean(ranges[ranges > 0] ** 2)))
    ranges = np.where(ranges > 0, ranges, fill)
    ard = kernel.lengthscales.shape.ndims > 0
    values, seen = [], set()
    for f in LENGTHSCALE_FACTORS:
        per_column = np.maximum(f * ranges, SPACING_FLOOR * spacing)
        value = per_column if ard else float(np.sqrt(np.mean(per_column**2)))
        key = tuple(np.round(np.atleast_1d(value), 12))
        if key not in seen:
            seen.add(key)
            values.append(np.array(value, dtype=np.float64) if ard else value)
    if ard and tuple(kernel.lengthscales.shape) != np.shape(values[0]):
        raise ValueError(f"default_grid: the kernel has {tuple(kernel.lengthscales.shape)} lengthscales for "
                         f"{np.size(values[0])} active input columns")
    return values


def default_grid(model) -> List[Dict[str, Any]]:
    """A grid of public configurations for ``model`` (dicts of GPflow parameter paths to values).

    Built from public information only (module docstring): the inputs ``model.data[0]``, the public
    ``model.output_bound``, the kernel's and the likelihood's types. The outputs are never read, so
    the grid is public and free. Regression: ``.kernel.lengthscales`` x ``.likelihood.variance`` with
    ``.kernel.variance`` fixed at ``(output_bound / 2)^2``; classification (a Bernoulli likelihood):
    ``.kernel.lengthscales`` x ``.kernel.variance``.

    Several outputs (``Y`` [N, P]) share the kernel and likelihood: the same rule, ``output_bound`` the
    largest over the outputs (only ``s2 / v`` shapes the maps). A multi-class model: its binary problems'
    grid (the kernel they share).

    ``TypeError`` for a kernel without lengthscales (not a single ``gpflow.kernels.Stationary``), a
    likelihood other than Gaussian or Bernoulli, or inputs that are not in memory; then give a grid.
    """
    model = fold_model(model)  # a multi-class model's first problem: the same X and kernel as every class
    kernel = getattr(model, "kernel", None)
    if not isinstance(kernel, gpflow.kernels.Stationary):
        raise TypeError(f"default_grid needs a stationary kernel with lengthscales (SquaredExponential, Matern, ...), "
                        f"got {type(kernel).__name__}; give a grid")
    try:
        X = as_float64("the model's inputs", model.data[0])
    except (AttributeError, TypeError) as exc:
        raise TypeError(f"default_grid reads the public inputs model.data[0], which {type(model).__name__} does not "
                        f"hold in memory ({exc}); give a grid") from exc
    if X.ndim != 2 or X.shape[0] < 2:
        raise ValueError(f"default_grid needs inputs [n >= 2, D], got shape {X.shape}")
    lengthscales = _lengthscales(kernel, X)
    likelihood = getattr(model, "likelihood", None)
    if isinstance(likelihood, gpflow.likelihoods.Gaussian):
        if likelihood.variance is None or not isinstance(kernel.variance, gpflow.Parameter):
            raise TypeError("default_grid needs a Gaussian likelihood with a variance parameter; give a grid")
        variance = (float(model.output_bound) / 2.0) ** 2
        # The noise variance must stay above the likelihood's lower bound: only s2 / v matters, so
        # raise v (a public scale) for tiny bounds rather than change the ratios.
        floor = 10.0 * float(likelihood.variance_lower_bound) / min(NOISE_RATIOS)
        variance = max(variance, floor)
        return [{".kernel.lengthscales": ls, ".kernel.variance": variance, ".likelihood.variance": r * variance}
                for ls in lengthscales for r in NOISE_RATIOS]
    if isinstance(likelihood, gpflow.likelihoods.Bernoulli):
        return [{".kernel.lengthscales": ls, ".kernel.variance": v} for ls in lengthscales for v in CLASSIFIER_VARIANCES]
    raise TypeError(f"default_grid knows Gaussian regression and Bernoulli classification, got a "
                    f"{type(likelihood).__name__} likelihood; give a grid")

