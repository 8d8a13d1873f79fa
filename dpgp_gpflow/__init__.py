"""dpgp_gpflow: differentially private Gaussian processes (the cloaking method) for GPflow.

Training inputs are public; training outputs are private and bounded by public ``y_bounds``.
Every model meets one contract (:mod:`dpgp_gpflow.contract`) and publishes through one path
(:mod:`dpgp_gpflow.pipeline`): model contract -> release terms -> noise plan -> draw -> spend,
returning a released object (:mod:`dpgp_gpflow.released`) with an (epsilon, delta)-DP guarantee.

Submodules and the names below are imported on first use (PEP 562), so that ``import dpgp_gpflow``
and the ``dpgp`` command line's ``--help`` start without TensorFlow; ``dp.models.DPGPR``,
``dp.PrivacyAccountant`` and ``from dpgp_gpflow import X`` work as with eager imports.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, List

__version__ = "0.1.0"

#: The names re-exported here, and the submodule each one comes from.
_EXPORTS: Dict[str, str] = {
    "PrivacyAccountant": "accounting",
    "FactoredPrivateModel": "contract",
    "PrivateModel": "contract",
    "PublicReadout": "contract",
    "ReleaseTerms": "contract",
    "BudgetExceededError": "exceptions",
    "ClippingWarning": "exceptions",
    "HyperparameterWarning": "exceptions",
    "LedgerError": "exceptions",
    "PrivacyLeakError": "exceptions",
    "PrivacyLeakWarning": "exceptions",
    "ReleaseBudgetWarning": "exceptions",
    "ReproducibleNoiseWarning": "exceptions",
    "VarianceFitWarning": "exceptions",
    "cloaking_matrix": "models",
    "allow_undeclared_hyperparameters": "leak_guard",
    "audit": "privacy_audit",
    "load": "io.loading",
    "PrivateClassifier": "released",
    "PrivateFunction": "released",
    "PrivateRelease": "released",
}

#: The public surface (docs/DESIGN_MAP.md, "Public API"); every submodule stays importable by name.
__all__ = [
    "BudgetExceededError",
    "ClippingWarning",
    "FactoredPrivateModel",
    "HyperparameterWarning",
    "LedgerError",
    "PrivacyAccountant",
    "PrivacyLeakError",
    "PrivacyLeakWarning",
    "PrivateClassifier",
    "PrivateFunction",
    "PrivateModel",
    "PrivateRelease",
    "PublicReadout",
    "ReleaseBudgetWarning",
    "ReleaseTerms",
    "ReproducibleNoiseWarning",
    "VarianceFitWarning",
    "accounting",
    "allow_undeclared_hyperparameters",
    "audit",
    "baselines",
    "cloaking_matrix",
    "composition",
    "contract",
    "datasets",
    "engine",
    "io",
    "kernels",
    "load",
    "models",
    "privacy_audit",
    "released",
    "selection",
]


def _submodules() -> FrozenSet[str]:
    """The package's public submodules and subpackages (``__main__`` and private ones excluded)."""
    return frozenset(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def __getattr__(name: str) -> Any:
    """Import a submodule or a re-exported name on first use (PEP 562)."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    if name in _submodules():
        return importlib.import_module(f".{name}", __name__)  # the import binds it in this module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__) | _submodules())


if TYPE_CHECKING:  # the same names, eagerly, for type checkers and IDEs
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
        io,
        mechanisms,
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
        LedgerError,
        PrivacyLeakError,
        PrivacyLeakWarning,
        ReleaseBudgetWarning,
        ReproducibleNoiseWarning,
        VarianceFitWarning,
    )
    from .leak_guard import allow_undeclared_hyperparameters
    from .models import cloaking_matrix
    from .privacy_audit import audit
    from .io.loading import load
    from .released import PrivateClassifier, PrivateFunction, PrivateRelease
