"""Differentially private hyperparameter selection: a cross-validated utility and a selection mechanism.

JMLR 2021, section 5 (Algorithm 1), with the sensitivity corrected and a utility that selects
(docs/selection.md). For every configuration ``theta`` of a public grid (the caller's, or
:func:`default_grid`, built from public information only) and every fold ``f`` of a public
cross-validation split, the fold's predictions at its test inputs are linear in the private
training outputs, ``pred_f = offset_f + C_f y[train_f]`` (``C_f`` and ``offset_f`` public), and

    u(theta) = - sum_f sum_{k in test_f} E[ loss(pred_k - y_k + Z_k) ],   Z_k ~ N(0, s_k^2),

``s_k`` the std of the DP noise a cloaking release of ``pred_f`` would add (a function of the
public ``C_f`` only; no noise is drawn). ``loss`` is ``|.|`` (``utility="absolute"``, the default)
or the JMLR paper's ``clip(., -4d, 4d)^2`` (``"squared"``).

**Sensitivity** (docs/selection.md#sensitivity). When ``y_j`` moves by at most ``d``, the residuals
move by ``d |C_f[k, j]|`` where ``j`` trains and by ``d`` where it is tested, so ``u(theta)`` moves
by at most ``Delta(theta) = d L max_j influence_j`` with ``influence_j = sum_f ([j in train_f]
||C_f[:, j]||_1 + [j in test_f])`` (:func:`point_influence`) and ``L`` the loss's Lipschitz
constant (1, or ``8d``; including the expected noise changes nothing). JMLR equation (13) is not a
valid bound (:func:`published_sensitivity`, for comparison only).

**Mechanisms** (:mod:`~dpgp_gpflow.selection.mechanism`): the generalised exponential mechanism
(default; each configuration keeps its own ``Delta(theta)``), the exponential mechanism and
permute-and-flip (``Delta_u = max Delta(theta)``); all epsilon-DP, drawn exactly from the
operating system's CSPRNG (docs/exact_sampling.md) unless an explicit ``seed`` is given, which
warns (:class:`~dpgp_gpflow.ReproducibleNoiseWarning`).

**What may be published.** Only the choice (``Selection.chosen`` / ``index``) is epsilon-DP; the
grid, the splits, the thresholds and all sensitivities are public, and a :class:`Selection` holds
nothing else. The utilities and probabilities are computed from the private outputs: they come
back only on request (``diagnostics=True``) as a separate :class:`SelectionDiagnostics`, for the
data owner, never to be published.
"""

from .columns import OutputColumns
from .cross_validation import CrossValidation, cross_validate, cv_folds, release_noise_std
from .grid import default_grid
from .mechanism import (
    DEFAULT_BETA,
    MECHANISMS,
    exponential_mechanism,
    generalised_exponential_mechanism,
    generalised_scores,
    gumbel_max,
    log_weights,
    permute_and_flip,
    permute_and_flip_probabilities,
    selection_probabilities,
)
from .select import Selection, SelectionDiagnostics, select_hyperparameters
from .utility import (
    CLIP_FACTOR,
    UTILITIES,
    Fold,
    cv_column_utility,
    cv_predictions,
    cv_sensitivity,
    cv_utility,
    expected_absolute,
    expected_clipped_square,
    expected_loss,
    output_weight,
    person_influence,
    point_influence,
    point_sensitivities,
    published_sensitivity,
)

__all__ = [
    "CrossValidation", "MECHANISMS", "Selection", "SelectionDiagnostics", "UTILITIES", "cross_validate",
    "cv_folds", "default_grid", "select_hyperparameters",
]
