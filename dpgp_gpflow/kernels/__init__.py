"""Kernels for the papers' non-DP building blocks: Gibbs (non-stationary) and integral EQ."""

from .gibbs import Gibbs, kde_lengthscale_function
from .integral import IntegralSE, predict_f_at_points

__all__ = [
    "Gibbs",
    "IntegralSE",
    "kde_lengthscale_function",
    "predict_f_at_points",
]
