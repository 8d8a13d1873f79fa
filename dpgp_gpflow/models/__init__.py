"""DP GPflow models: each exposes ``cloaking_matrix(Xnew)`` and a ``release`` method."""

from .base import LeakGuardMixin, PrivateRegressionMixin
from .dp_laplace import (
    DPLaplaceGPC,
    DPSparseLaplaceGPC,
    PrivateClassifier,
    PrivateLaplaceClassifier,
    PrivateSparseClassifier,
)
from .laplace import LaplaceGPC
from .sgpr import DPGPRFITC, PrivateFunction, PrivatePrediction, kmeans_inducing_inputs
from .gpr import DPGPR, SupportsCloakingMatrix, cloaking_matrix, gpr_cloaking_matrix, gpr_rkhs_sensitivity

__all__ = [
    "DPGPR",
    "DPGPRFITC",
    "DPLaplaceGPC",
    "DPSparseLaplaceGPC",
    "LaplaceGPC",
    "LeakGuardMixin",
    "PrivateClassifier",
    "PrivateFunction",
    "PrivateLaplaceClassifier",
    "PrivatePrediction",
    "PrivateRegressionMixin",
    "PrivateSparseClassifier",
    "SupportsCloakingMatrix",
    "cloaking_matrix",
    "gpr_cloaking_matrix",
    "gpr_rkhs_sensitivity",
    "kmeans_inducing_inputs",
]
