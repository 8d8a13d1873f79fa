"""DP GPflow models: each exposes ``cloaking_matrix(Xnew)`` and a ``release`` method."""

from .base import PrivateRegressionMixin
from .sgpr import DPGPRFITC, PrivateFunction, PrivatePrediction, kmeans_inducing_inputs
from .gpr import DPGPR, SupportsCloakingMatrix, cloaking_matrix, gpr_cloaking_matrix, gpr_rkhs_sensitivity

__all__ = [
    "DPGPR",
    "DPGPRFITC",
    "PrivateFunction",
    "PrivatePrediction",
    "PrivateRegressionMixin",
    "SupportsCloakingMatrix",
    "cloaking_matrix",
    "gpr_cloaking_matrix",
    "gpr_rkhs_sensitivity",
    "kmeans_inducing_inputs",
]
