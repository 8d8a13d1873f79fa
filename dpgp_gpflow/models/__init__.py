"""Private GPflow models: each meets :class:`~dpgp_gpflow.contract.PrivateModel` and releases
through :mod:`dpgp_gpflow.pipeline`."""

from ..contract import PrivateModel
from ..readouts import SGPRReadout
from ..released import PrivateClassifier, PrivateFunction, PrivatePrediction
from .base import FactoredModelMixin, LeakGuardMixin, PrivateModelMixin
from .dp_laplace import DPLaplaceGPC, DPSparseLaplaceGPC, PrivateLaplaceClassifier, PrivateSparseClassifier
from .fitc import DPGPRFITC
from .gpr import DPGPR, cloaking_matrix, gpr_cloaking_matrix, gpr_rkhs_sensitivity
from .laplace import LaplaceGPC
from .multiclass import DPMulticlassLaplaceGPC, DPSparseMulticlassLaplaceGPC, PrivateMulticlassClassifier
from .sgpr import DPSGPR
from .sgpr_base import DPSGPRBase, kmeans_inducing_inputs

__all__ = [
    "DPGPR", "DPGPRFITC", "DPLaplaceGPC", "DPMulticlassLaplaceGPC", "DPSGPR", "DPSGPRBase",
    "DPSparseLaplaceGPC", "DPSparseMulticlassLaplaceGPC", "FactoredModelMixin", "LaplaceGPC",
    "LeakGuardMixin", "PrivateClassifier", "PrivateFunction", "PrivateLaplaceClassifier",
    "PrivateMulticlassClassifier", "PrivateModel", "PrivateModelMixin", "PrivatePrediction",
    "PrivateSparseClassifier", "cloaking_matrix", "gpr_cloaking_matrix", "kmeans_inducing_inputs",
]
