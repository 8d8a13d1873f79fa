"""The baselines the AISTATS 2018 paper compares cloaking against (section 4; docs/baselines.md#laplace-bin-means).

Bin the public inputs on a grid with public edges, release every bin mean of the private outputs
with the Laplace mechanism, then predict from the released bins (post-processing, no further
privacy cost):

* :mod:`.bins` -- :class:`Bins`, :func:`make_bins`: the grid; edges are never taken from the data.
* :mod:`.mechanism` -- :func:`release_bin_means`: an epsilon-DP (delta = 0) :class:`BinRelease`,
  assuming public inputs and edges and private outputs clipped to public bounds (parallel
  composition over the disjoint bins); :func:`bin_means_nonprivate` for "no DP" comparisons.
* :mod:`.predictors` -- :func:`predict_bin_value` (simple binning), :func:`fit_gp_on_bins` (a GP on
  the bin centres) and :func:`fit_integral_gp` / :func:`predict_integral_gp` (a GP on the bin
  integrals with :class:`~dpgp_gpflow.kernels.GridIntegralSE`).
* :mod:`.dpsgd_svgp` -- :class:`DPSGDSVGP`: the peer of the whole-row release (issue 36), GPflow's SVGP on
  public inducing inputs whose variational parameters are trained by DP-SGD (per-row clipped gradients,
  Gaussian noise, Poisson minibatches), whole rows private under replace-one, accounted with
  ``dp_accounting``'s privacy loss distributions (:func:`dpsgd_noise_multiplier`).
"""

from ..kernels import GridIntegralSE
from .bins import Bins, make_bins
from .dpsgd_svgp import (
    DPSGDSVGP,
    DPSGDSVGPRelease,
    clip_per_example,
    dpsgd_epsilon,
    dpsgd_noise_multiplier,
    per_example_gradients,
)
from .mechanism import BinRelease, bin_means_nonprivate, release_bin_means
from .predictors import (
    NOISE_FLOOR,
    BinNoiseVariance,
    IntegralGPR,
    fit_gp_on_bins,
    fit_integral_gp,
    predict_bin_value,
    predict_integral_gp,
)

__all__ = [
    "BinNoiseVariance", "BinRelease", "Bins", "DPSGDSVGP", "DPSGDSVGPRelease", "GridIntegralSE",
    "IntegralGPR", "bin_means_nonprivate", "dpsgd_epsilon", "fit_gp_on_bins", "fit_integral_gp", "make_bins",
    "predict_bin_value", "predict_integral_gp", "release_bin_means",
]
