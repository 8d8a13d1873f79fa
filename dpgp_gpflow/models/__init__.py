"""Private GPflow models: each meets :class:`~dpgp_gpflow.contract.PrivateModel` and releases
through :mod:`dpgp_gpflow.pipeline`."""

from ..contract import PrivateModel
from ..released import PrivateClassifier, PrivateFunction, PrivatePrediction
from .base import FactoredModelMixin, LeakGuardMixin, PrivateModelMixin, PrivateRegressionMixin
from .dp_laplace import DPLaplaceGPC, DPSparseLaplaceGPC, PrivateLaplaceClassifier, PrivateSparseClassifier
from .gpr import DPGPR, cloaking_matrix, gpr_cloaking_matrix, gpr_rkhs_sensitivity
from .laplace import LaplaceGPC
from .sgpr import DPGPRFITC, kmeans_inducing_inputs
from .titsias import DPSGPR, SGPRReadout

#: Deprecated name of :class:`~dpgp_gpflow.contract.PrivateModel` (the old protocol asked for a
#: ``cloaking_matrix(Xnew)`` method only, which the classifiers passed without meeting it).
SupportsCloakingMatrix = PrivateModel

__all__ = [
    "DPGPR",
    "DPGPRFITC",
    "DPLaplaceGPC",
    "DPSGPR",
    "DPSparseLaplaceGPC",
    "FactoredModelMixin",
    "LaplaceGPC",
    "LeakGuardMixin",
    "PrivateClassifier",
    "PrivateFunction",
    "PrivateLaplaceClassifier",
    "PrivateModel",
    "PrivateModelMixin",
    "PrivatePrediction",
    "PrivateRegressionMixin",
    "PrivateSparseClassifier",
    "SGPRReadout",
    "SupportsCloakingMatrix",
    "cloaking_matrix",
    "gpr_cloaking_matrix",
    "gpr_rkhs_sensitivity",
    "kmeans_inducing_inputs",
]
