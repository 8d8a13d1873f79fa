"""Differentially private hyperparameter selection: the exponential mechanism over a CV utility.

JMLR 2021, section 5 (Algorithm 1), with the sensitivity corrected (docs/selection.md#sensitivity). For every
configuration ``theta`` of a public grid and every fold ``f`` of a public cross-validation split,
the fold's predictions at its test inputs are linear in the private training outputs,

    pred_f = offset_f + C_f y[train_f]            (C_f: k_f x m_f, public; offset_f public),

and the utility is minus the cross-validated sum of clipped squared residuals, with the DP noise of
the eventual release included by its closed-form expectation:

    u(theta) = - sum_f sum_{k in test_f} E[ clip(pred_k - y_k + Z_k, -4d, 4d)^2 ],   Z_k ~ N(0, s_k^2),

``s_k`` being the std of the DP noise a cloaking release of ``pred_f`` at ``(epsilon_release,
delta_release)`` would add at test point k (a function of the public ``C_f`` only; no noise is drawn).
One configuration is drawn with probability proportional to ``exp(epsilon u / (2 Delta_u))``
(Gumbel-max), or by permute-and-flip with the same log-weights; either is epsilon-DP when
``Delta_u`` bounds the change of every utility between neighbouring datasets.

**The sensitivity.** Neighbours differ in one output: ``|y_j - y'_j| <= d``. Write
``h(a) = clip(a, -c, c)^2`` with ``c = 4d``; ``h`` is ``2c = 8d``-Lipschitz (its derivative is
``2a`` on ``(-c, c)`` and 0 outside), and so is ``a -> E h(a + Z)`` for any noise ``Z`` (an
average of 8d-Lipschitz functions), so including the expected noise changes nothing below.

* In a fold where ``j`` trains, changing ``y_j`` by ``gamma`` moves each prediction by
  ``gamma C_f[k, j]``, so each test residual by at most ``d |C_f[k, j]|`` and the fold's sum by at
  most ``8 d^2 ||C_f[:, j]||_1``.
* In a fold where ``j`` is tested, its own residual moves by at most ``d``: at most ``8 d^2``.
  (If a user-given split puts ``j`` in a fold's training and test sets at once, the residual moves
  by ``|C_f[j, j] - 1| d <= (|C_f[j, j]| + 1) d``, which the two terms above already cover.)

Summing over folds (the same ``y_j`` changes in every fold) and taking the worst point,

    Delta(theta) = 8 d^2 max_j sum_f ( [j in train_f] ||C_f[:, j]||_1 + [j in test_f] ),

and ``Delta_u = max_theta Delta(theta)`` over the configurations kept after the optional public
threshold (a configuration's ``Delta(theta)`` depends on public inputs only, so dropping those
above a threshold fixed in advance is free). For ordinary kappa-fold CV every point is tested
once, giving docs/selection.md#sensitivity's ``8 d^2 (sum over folds where j trains of ||c_j||_1) + 8 d^2``.

**The published bound is not valid.** JMLR equation (13) bounds the change of a fold's SSE by
``d^2 max_j ||c_j||_2^2``: the change of a squared distance ``||a + v||^2 - ||a||^2`` is
``2 a.v + ||v||^2``, and the ``2 a.v`` term is missing. :func:`published_sensitivity` computes it,
for comparison only; the tests exhibit neighbours whose utilities differ by more.

**What may be published.** Only the choice (``Selection.chosen`` / ``index``) is epsilon-DP; the
grid, the splits, the thresholds and all sensitivities are public, and a :class:`Selection` holds
nothing else. The utilities and probabilities are computed from the private outputs: they come
back only on request (``diagnostics=True``) as a separate :class:`SelectionDiagnostics`, for the
data owner, never to be published.

**Mechanisms.** ``mechanism="exponential"`` (default) or ``"permute_and_flip"`` (McKenna & Sheldon
2020), both epsilon-DP with the log-weights ``epsilon u / (2 Delta_u)``.

Randomness: exact draws from the operating system's CSPRNG (OpenDP's report-noisy-max for the
exponential mechanism; a uniform order and exact Bernoulli(exp(-gamma)) coins for permute-and-flip;
docs/exact_sampling.md) unless an explicit ``seed`` is given, which warns
(:class:`~dpgp_gpflow.ReproducibleNoiseWarning`). The log-weights themselves are float64
computations, not exact.
"""

from .cross_validation import CrossValidation, cross_validate, cv_folds, release_noise_std
from .grid import default_grid
from .mechanism import (
    MECHANISMS,
    exponential_mechanism,
    gumbel_max,
    permute_and_flip,
    permute_and_flip_probabilities,
    selection_probabilities,
)
from .select import Selection, SelectionDiagnostics, select_hyperparameters
from .utility import (
    CLIP_FACTOR,
    Fold,
    cv_predictions,
    cv_sensitivity,
    cv_utility,
    expected_clipped_square,
    point_sensitivities,
    published_sensitivity,
)

__all__ = [
    "CLIP_FACTOR",
    "CrossValidation",
    "Fold",
    "MECHANISMS",
    "Selection",
    "SelectionDiagnostics",
    "cross_validate",
    "cv_folds",
    "cv_predictions",
    "cv_sensitivity",
    "cv_utility",
    "default_grid",
    "expected_clipped_square",
    "exponential_mechanism",
    "gumbel_max",
    "permute_and_flip",
    "permute_and_flip_probabilities",
    "point_sensitivities",
    "published_sensitivity",
    "release_noise_std",
    "select_hyperparameters",
    "selection_probabilities",
]
