"""Kernels for the papers' non-DP building blocks: Gibbs (non-stationary) and integral EQ."""

from .gibbs import Gibbs, kde_lengthscale_function
from .grid_integral import GridIntegralSE, grid_edges
from .integral import IntegralSE, interval_interval, interval_point, predict_f_at_points

__all__ = ["Gibbs", "GridIntegralSE", "IntegralSE", "kde_lengthscale_function", "predict_f_at_points"]
