"""DP GPflow models: each exposes ``cloaking_matrix(Xnew)`` and a ``release`` method."""

from .base import PrivateRegressionMixin
from .gpr import DPGPR, SupportsCloakingMatrix, cloaking_matrix, gpr_cloaking_matrix, gpr_rkhs_sensitivity

__all__ = [
    "DPGPR",
    "PrivateRegressionMixin",
    "SupportsCloakingMatrix",
    "cloaking_matrix",
    "gpr_cloaking_matrix",
    "gpr_rkhs_sensitivity",
]
