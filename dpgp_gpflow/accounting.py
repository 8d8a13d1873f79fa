"""Privacy budget accounting: a ledger of DP events with a hard ceiling.

One neighbouring relation throughout: two datasets are neighbours when they differ in one private
output ``y_i``, replaced by another value within the public bounds (so ``|y_i - y'_i| <= d``).

Every release checks the accountant *before* drawing noise and spends *after*; an over-budget
release raises :class:`~dpgp_gpflow.BudgetExceededError` and draws nothing. Events are kept as
events (a Gaussian mechanism with its ``mu = sensitivity / noise std``, or a pure-epsilon
mechanism), so tighter composition can be computed from the same ledger. The budget is enforced
with basic composition (sum of epsilons, sum of deltas; always valid) unless the accountant is
created with ``composition="gdp"`` (Gaussian releases compose exactly as sqrt(sum mu^2)-GDP) or
``"pld"`` (privacy-loss distributions, via Google's dp-accounting).
"""

from __future__ import annotations

import contextvars
import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

from .calibration import validate_delta, validate_epsilon
from .exceptions import BudgetExceededError

__all__ = ["PrivacyAccountant", "PrivacyEvent", "current_accountant"]

_DEFAULT: contextvars.ContextVar[Optional["PrivacyAccountant"]] = contextvars.ContextVar(
    "dpgp_gpflow_default_accountant", default=None
)

#: How a budget can be enforced: basic composition always; Gaussian-DP or privacy-loss distributions.
COMPOSITIONS = ("basic", "gdp", "pld")

#: Relative slack when comparing spent budget with the ceiling (floating-point rounding only).
_BUDGET_RTOL = 1e-12


@dataclass(frozen=True)
class PrivacyEvent:
    """One spend: ``(epsilon, delta)`` and, for Gaussian mechanisms, ``mu = sensitivity / noise std``.

    ``kind`` is ``"gaussian"`` (``mu`` set), ``"pure"`` (delta = 0, e.g. the exponential mechanism)
    or ``"approximate"`` (any other (epsilon, delta) mechanism).
    """

    epsilon: float
    delta: float
    kind: str = "approximate"
    mu: Optional[float] = None
    description: str = ""


class PrivacyAccountant:
    """A privacy budget ``(epsilon, delta)`` with a ledger of the releases charged to it.

    Usable as a context manager: inside ``with PrivacyAccountant(epsilon=1, delta=1e-2) as acc:``
    releases made without an explicit ``accountant=`` are charged to ``acc``.
    """

    def __init__(self, *, epsilon: float, delta: float = 0.0, composition: str = "basic") -> None:
        self._epsilon = validate_epsilon(epsilon) if not (epsilon == math.inf) else math.inf
        if delta == 0.0:
            self._delta = 0.0
        else:
            self._delta = validate_delta(delta)
        if composition not in COMPOSITIONS:
            raise ValueError(f"composition must be one of {COMPOSITIONS}, got {composition!r}")
        self._composition = composition
        self._ledger: List[PrivacyEvent] = []
        self._tokens: List[contextvars.Token] = []

    # -- budget ------------------------------------------------------------------------------
    @property
    def epsilon(self) -> float:
        """The total epsilon budget."""
        return self._epsilon

    @property
    def delta(self) -> float:
        """The total delta budget."""
        return self._delta

    @property
    def composition(self) -> str:
        """How the budget is enforced: "basic", "gdp" or "pld" (see :mod:`dpgp_gpflow.composition`)."""
        return self._composition

    def epsilon_spent(self, composition: Optional[str] = None, delta: Optional[float] = None) -> float:
        """Epsilon spent at ``delta`` (default: the budget's) under ``composition`` (default: the budget's)."""
        from .composition import composed_epsilon  # local import: composition imports this module

        return composed_epsilon(self._ledger, self._delta if delta is None else delta,
                                self._composition if composition is None else composition)

    @property
    def ledger(self) -> Tuple[PrivacyEvent, ...]:
        """Every event charged so far, in order."""
        return tuple(self._ledger)

    @property
    def spent(self) -> Tuple[float, float]:
        """``(epsilon, delta)`` spent so far under basic composition."""
        return (
            math.fsum(e.epsilon for e in self._ledger),
            math.fsum(e.delta for e in self._ledger),
        )

    @property
    def remaining(self) -> Tuple[float, float]:
        """``(epsilon, delta)`` left under basic composition."""
        eps, delta = self.spent
        return max(self._epsilon - eps, 0.0), max(self._delta - delta, 0.0)

    def check(self, epsilon: float, delta: float = 0.0, *, kind: str = "approximate", mu: Optional[float] = None) -> None:
        """Raise :class:`BudgetExceededError` if spending ``(epsilon, delta)`` would exceed the budget.

        Under "gdp" or "pld" composition the candidate event (its ``kind`` and ``mu``) is composed
        with the ledger and the composed epsilon at the budget's delta is compared with the budget.
        """
        epsilon = validate_epsilon(epsilon)
        delta = 0.0 if delta == 0.0 else validate_delta(delta)
        if self._composition != "basic":
            from .composition import composed_epsilon

            candidate = PrivacyEvent(epsilon, delta, kind, None if mu is None else float(mu))
            eps_total = composed_epsilon([*self._ledger, candidate], self._delta, self._composition)
            if eps_total > self._epsilon * (1.0 + _BUDGET_RTOL):
                raise BudgetExceededError(
                    f"a release at (epsilon={epsilon}, delta={delta}) would bring the spend to "
                    f"epsilon={eps_total:.6g} at delta={self._delta} under {self._composition} composition, "
                    f"over the budget epsilon={self._epsilon}"
                )
            return
        eps_spent, delta_spent = self.spent
        eps_total = eps_spent + epsilon
        delta_total = delta_spent + delta
        if eps_total > self._epsilon * (1.0 + _BUDGET_RTOL) or delta_total > self._delta * (1.0 + _BUDGET_RTOL):
            raise BudgetExceededError(
                f"a release at (epsilon={epsilon}, delta={delta}) would bring the spend to "
                f"(epsilon={eps_total:.6g}, delta={delta_total:.6g}), over the budget "
                f"(epsilon={self._epsilon}, delta={self._delta}); remaining: {self.remaining}"
            )

    def spend(
        self,
        epsilon: float,
        delta: float = 0.0,
        *,
        kind: str = "approximate",
        mu: Optional[float] = None,
        description: str = "",
    ) -> PrivacyEvent:
        """Check, then record one event; returns it."""
        if kind not in ("gaussian", "pure", "approximate"):
            raise ValueError(f"kind must be 'gaussian', 'pure' or 'approximate', got {kind!r}")
        self.check(epsilon, delta, kind=kind, mu=mu)
        event = PrivacyEvent(float(epsilon), float(delta), kind, None if mu is None else float(mu), description)
        self._ledger.append(event)
        return event

    # -- context manager ------------------------------------------------------------------------
    def __enter__(self) -> "PrivacyAccountant":
        self._tokens.append(_DEFAULT.set(self))
        return self

    def __exit__(self, *exc) -> None:
        _DEFAULT.reset(self._tokens.pop())

    def __repr__(self) -> str:
        eps, delta = self.spent
        return (
            f"PrivacyAccountant(epsilon={self._epsilon}, delta={self._delta}, "
            f"spent=({eps:.6g}, {delta:.6g}), releases={len(self._ledger)})"
        )


def current_accountant() -> Optional[PrivacyAccountant]:
    """The accountant of the innermost active ``with PrivacyAccountant(...)`` block, if any."""
    return _DEFAULT.get()
