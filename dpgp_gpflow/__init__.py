"""dpgp_gpflow: differentially private Gaussian processes (the cloaking method) for GPflow.

Training inputs are public; training outputs are private and bounded by public ``y_bounds``.
Models in :mod:`dpgp_gpflow.models` publish predictions only through ``release``, which returns a
:class:`PrivateRelease` with an (epsilon, delta)-DP guarantee.
"""

from . import accounting, baselines, calibration, cloaking, composition, datasets, kernels, models, release, selection
from .accounting import PrivacyAccountant
from .exceptions import (
    BudgetExceededError,
    ClippingWarning,
    PrivacyLeakError,
    PrivacyLeakWarning,
    ReproducibleNoiseWarning,
)
from .models import cloaking_matrix
from .release import PrivateRelease

__version__ = "0.1.0"

__all__ = [
    "BudgetExceededError",
    "ClippingWarning",
    "PrivacyAccountant",
    "PrivacyLeakError",
    "PrivacyLeakWarning",
    "PrivateRelease",
    "ReproducibleNoiseWarning",
    "accounting",
    "baselines",
    "calibration",
    "cloaking",
    "cloaking_matrix",
    "composition",
    "datasets",
    "kernels",
    "models",
    "release",
    "selection",
]
