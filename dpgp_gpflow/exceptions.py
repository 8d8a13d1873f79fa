"""Errors and warnings raised by ``dpgp_gpflow``.

Warnings that signal a possible privacy leak are not deduplicated by Python's default warning
filter: every occurrence is shown (a user's own ``warnings`` filters still take precedence).
"""

from __future__ import annotations

import warnings

__all__ = [
    "BudgetExceededError",
    "ClippingWarning",
    "HyperparameterWarning",
    "LedgerError",
    "PrivacyLeakError",
    "PrivacyLeakWarning",
    "ReleaseBudgetWarning",
    "ReproducibleNoiseWarning",
    "VarianceFitWarning",
]


class BudgetExceededError(RuntimeError):
    """A release would spend more privacy budget than the accountant has left.

    Raised before any noise is drawn, so nothing was released and nothing was spent.
    """


class LedgerError(ValueError):
    """A privacy ledger file was refused: empty, not a ledger, of another format, or its rows fail
    their hash chain (changed, deleted, reordered or truncated since they were written). Nothing
    was spent. A new ledger is only ever created at a path that does not exist.
    """


class PrivacyLeakError(RuntimeError):
    """A release was refused because it could not be guaranteed private.

    Typically: the hyperparameters were fitted on the private outputs (the model's marginal
    likelihood was evaluated), changed since they were recorded public, or were given at construction
    (not GPflow's defaults) and never declared public, and the user did not declare them public.
    """


class PrivacyLeakWarning(UserWarning):
    """Something the user did may leak private information (for example an explicit seed)."""


class ReproducibleNoiseWarning(PrivacyLeakWarning):
    """The DP noise came from an explicit seed: the release is reproducible, so it is not
    private against anyone who knows (or can guess) the seed."""


class HyperparameterWarning(UserWarning):
    """Opt-in (inside ``with dpgp_gpflow.allow_undeclared_hyperparameters():``; by default the release
    raises :class:`PrivacyLeakError` instead): a release used hyperparameters that were given when the
    model was built, are not GPflow's defaults and were never declared public: nothing can tell whether
    they were fitted on the private outputs elsewhere (e.g. a kernel trained in a plain
    ``gpflow.models.GPR`` and reused). If they were, the release is not DP. Declare them
    (``hyperparameters_public=True``) or select them privately
    (:func:`dpgp_gpflow.selection.select_hyperparameters`); ``docs/guides/from_gpflow.md``.

    Not a :class:`PrivacyLeakWarning`: it is a reminder of an assumption the caller chose to vouch for,
    shown once per call site by Python's default filter.
    """


class ReleaseBudgetWarning(UserWarning):
    """A hyperparameter selection could not tell the budget of the release that follows (no
    ``epsilon_release`` / ``delta_release`` and no accountant with budget left), so its utility ignores
    that release's noise and tends to favour configurations that need much of it. Not a privacy issue."""


class ClippingWarning(UserWarning):
    """Private outputs were clipped to their public bounds (the count, never the values)."""


class VarianceFitWarning(UserWarning):
    """The kernel or noise variance fitted on released statistics (post-processing) ended on the edge of its
    searched range: the released statistics' noise hides it, and the predictive variance is then unreliable.
    Give the noise variance from public knowledge. Not a privacy issue."""


# Appended, so that a user's own filters (inserted in front) still take precedence.
warnings.filterwarnings("always", category=PrivacyLeakWarning, append=True)
warnings.filterwarnings("always", category=ClippingWarning, append=True)
