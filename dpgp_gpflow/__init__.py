"""dpgp_gpflow: differentially private Gaussian processes (the cloaking method) for GPflow.

Training inputs are public; training outputs are private and bounded by public ``y_bounds``.
Every model meets one contract (:mod:`dpgp_gpflow.contract`) and publishes through one path
(:mod:`dpgp_gpflow.pipeline`): model contract -> release terms -> noise plan -> draw -> spend,
returning a released object (:mod:`dpgp_gpflow.released`) with an (epsilon, delta)-DP guarantee.
"""

from . import (
    accounting,
    baselines,
    calibration,
    cloaking,
    composition,
    contract,
    datasets,
    engine,
    kernels,
    models,
    pipeline,
    privacy_audit,
    release,
    released,
    sampling,
    selection,
    validation,
)
from .accounting import PrivacyAccountant
from .contract import FactoredPrivateModel, PrivateModel, PublicReadout, ReleaseTerms
from .exceptions import (
    BudgetExceededError,
    ClippingWarning,
    HyperparameterWarning,
    PrivacyLeakError,
    PrivacyLeakWarning,
    ReproducibleNoiseWarning,
)
from .models import cloaking_matrix
from .privacy_audit import audit
from .publishing import load
from .released import PrivateClassifier, PrivateFunction, PrivateRelease

__version__ = "0.1.0"

__all__ = [
    "BudgetExceededError",
    "ClippingWarning",
    "FactoredPrivateModel",
    "HyperparameterWarning",
    "PrivacyAccountant",
    "PrivacyLeakError",
    "PrivacyLeakWarning",
    "PrivateClassifier",
    "PrivateFunction",
    "PrivateModel",
    "PrivateRelease",
    "PublicReadout",
    "ReleaseTerms",
    "ReproducibleNoiseWarning",
    "accounting",
    "audit",
    "baselines",
    "calibration",
    "cloaking",
    "cloaking_matrix",
    "composition",
    "contract",
    "datasets",
    "kernels",
    "load",
    "models",
    "pipeline",
    "privacy_audit",
    "release",
    "released",
    "sampling",
    "selection",
    "validation",
]
