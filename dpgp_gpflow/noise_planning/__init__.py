"""The noise planner: choosing the DP noise of a linear release ``v = C y`` (the cloaking method).

Pure TensorFlow functions of tensors, float64 throughout; the model classes build the cloaking
matrix ``C`` and :mod:`dpgp_gpflow.mechanisms` draws the noise. The maths is in
docs/mechanisms.md#cloaking and #noise-optimiser; one module per step, in the order a release runs them:

* :mod:`.space`: ``C ~ U_r beta`` (``U_r`` k x r orthonormal, ``beta = U_r^T C`` the exact
  sensitivity vectors of the projected release), and the bias of projecting;
* :mod:`.rank`: how many directions to keep (the rank rule);
* :mod:`.optimiser`: the noise covariance ``M`` minimising ``log det M`` ("entropy", the papers) or
  ``tr M`` ("mse") s.t. ``beta_i^T M^{-1} beta_i <= 1``, certified by its duality gap; built from
  :mod:`.dual` (the Lagrange dual and its log-barrier Newton solve) and :mod:`.working_set` (the one
  working-set loop, over a dense tensor or streamed chunks);
* :mod:`.sensitivity`: the Mahalanobis sensitivity against the noise actually used.

Privacy assumption: everything here depends on ``C`` only, a function of public inputs and public
hyperparameters; the private outputs never enter. Privacy never depends on convergence: the
sensitivity is recomputed from the covariance actually returned.
"""

from ..validation import OBJECTIVES, Objective
from . import dual, optimiser, rank, sensitivity, working_set
from . import space
from .space import ColumnSpace, column_space, column_spaces, projection_rows, \
    projection_terms, singular_pairs
from .dual import best_uniform_weight, compile_per_objective, restricted_dual_solve
from .optimiser import (
    DEFAULT_TOL,
    OPTIMISERS,
    NoiseCovariance,
    OptimiserCertificate,
    OptimiserTerms,
    certificate_of,
    optimise_noise_covariance,
    optimise_tensors,
)
from .rank import AUTO_RTOLS, MIN_MSE_RTOL, candidate_rtols, first_harmless
from .sensitivity import (
    mahalanobis_sensitivity,
    mahalanobis_terms,
    max_mahalanobis_norm2,
    noise_std_lower_bound,
    row_norms,
)
from .working_set import ColumnProvider, DenseColumns, Violators, WorkingSet, column_hashes, pivot_columns, \
    spread_violators

__all__ = ["noise_std_lower_bound"]
