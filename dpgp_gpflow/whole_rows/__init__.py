"""Whole rows private: releases that protect each row's inputs and outputs together (docs/guides/whole_rows.md).

With public inducing inputs ``Z`` (built from a public box, never from the private inputs), a sparse GP
depends on the data only through sums over rows of whitened Nystrom features: ``S = sum phi phi^T``,
``b = sum phi y_c``, ``q = sum y_c^2``. These are released once with Gaussian noise calibrated to a whole row
(its input anywhere in the box, its output anywhere in the bounds); everything after (regularisation, the
posterior, predictions anywhere, the kernel and noise variances) is post-processing (docs/whole_rows.md).

One concept per module:

* :mod:`.features`: the whitened features and the public bound on ``k(x, x)`` that bounds them;
* :mod:`.design`: the public box, inducing inputs from it (grid, low-discrepancy design), the refusal of
  inducing inputs computed from the data;
* :mod:`.inputs`: the one rule a model with ``private_inputs=True`` applies when it is built (box, kernel
  bound, public inducing inputs, clipping) and what it holds (:class:`~.inputs.PrivateInputsMixin`);
* :mod:`.statistics`: the sums, in one pass over row chunks (in memory or a Dask reduction);
* :mod:`.bounds`: the public sensitivity formula (no TensorFlow);
* :mod:`.sensitivity`: the replace-one bounds, the split of a unit sensitivity, the released vector;
* :mod:`.mechanism`: the Gaussian mechanism on that vector, as a :class:`~dpgp_gpflow.measurement.Measurement`;
* :mod:`.posterior`: regularisation of the released ``S``, the weights' posterior, predictions with the DP
  noise propagated;
* :mod:`.variances`: kernel and noise variances fitted on the released statistics (SGPR's bound);
* :mod:`.lengthscales`: the public grid of candidate lengthscales released together and the choice among them;
* :mod:`.released`: :class:`WholeRowsRelease`, what a release returns;
* :mod:`.release`: :func:`release_rows` and :func:`release_model` (``DPSGPR(..., private_inputs=True)``);
* :mod:`.residual_bounds`, :mod:`.residual`, :mod:`.residual_release`: the statistics followed by releases of clipped
  residual sums under one guarantee (``residual_fractions=``; :class:`~.residual_release.ResidualRelease`).
"""

import importlib
from typing import TYPE_CHECKING, Any, Dict

#: Each public name -> its submodule, imported on first use (PEP 562, as :mod:`dpgp_gpflow` does) so that
#: :mod:`.bounds` (the public sensitivity formula) loads without TensorFlow for a release file's checks.
_NAMES: Dict[str, str] = {
    "inducing_design": "design", "inducing_grid": "design", "validate_box": "design",
    "FeatureMap": "features", "feature_map": "features", "kernel_bound": "features", "whitened_features": "features",
    "DEFAULT_FRACTIONS": "lengthscales", "default_lengthscales": "lengthscales",
    "RELATION": "mechanism", "release_model": "release", "release_rows": "release",
    "WholeRowsRelease": "released", "DEFAULT_SHARES": "bounds", "ResidualRelease": "residual_release",
    "DEFAULT_RESIDUAL_FRACTIONS": "residual_bounds",
    "RowStatistics": "statistics", "Statistics": "statistics", "sufficient_statistics": "statistics",
}

if TYPE_CHECKING:  # pragma: no cover
    from .bounds import DEFAULT_SHARES
    from .design import inducing_design, inducing_grid, validate_box
    from .features import FeatureMap, feature_map, kernel_bound, whitened_features
    from .lengthscales import DEFAULT_FRACTIONS, default_lengthscales
    from .mechanism import RELATION
    from .release import release_model, release_rows
    from .released import WholeRowsRelease
    from .residual_bounds import DEFAULT_RESIDUAL_FRACTIONS
    from .residual_release import ResidualRelease
    from .statistics import RowStatistics, Statistics, sufficient_statistics

__all__ = [
    "DEFAULT_FRACTIONS", "DEFAULT_SHARES", "default_lengthscales", "WholeRowsRelease", "inducing_design",
    "inducing_grid", "release_model", "release_rows",
]


def __getattr__(name: str) -> Any:
    """A public name of :data:`_NAMES`, from its submodule on first use."""
    if name in _NAMES:
        return getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
