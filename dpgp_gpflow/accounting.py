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
import threading
from typing import Any, List, Optional, Sequence, Tuple

from .composition import COMPOSITIONS, PrivacyEvent, composed_epsilon
from .exceptions import BudgetExceededError
from .validation import validate_delta, validate_epsilon

__all__ = ["PrivacyAccountant", "PrivacyEvent", "current_accountant", "reserve", "resolve_accountant"]

_DEFAULT: contextvars.ContextVar[Optional["PrivacyAccountant"]] = contextvars.ContextVar(
    "dpgp_gpflow_default_accountant", default=None
)

#: Relative slack when comparing spent budget with the ceiling (floating-point rounding only).
_BUDGET_RTOL = 1e-12


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
        self._lock = threading.RLock()  # check-and-record is atomic across threads

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
        """Raise :class:`BudgetExceededError` if spending ``(epsilon, delta)`` would exceed the budget
        (one event; :meth:`check_events` for several)."""
        self.check_events([_event(epsilon, delta, kind, mu)])

    def check_events(self, events: Sequence[PrivacyEvent]) -> None:
        """Raise :class:`BudgetExceededError` if recording all ``events`` would exceed the budget.

        The candidates are composed with the ledger under the budget's composition: basic sums the
        pairs; "gdp" and "pld" compose exactly and compare the epsilon at the budget's delta.
        """
        events = list(events)
        with self._lock:
            if self._composition != "basic":
                eps_total = composed_epsilon([*self._ledger, *events], self._delta, self._composition)
                if eps_total > self._epsilon * (1.0 + _BUDGET_RTOL):
                    raise BudgetExceededError(
                        f"{_describe(events)} would bring the spend to epsilon={eps_total:.6g} at "
                        f"delta={self._delta} under {self._composition} composition, over the budget "
                        f"epsilon={self._epsilon}"
                    )
                return
            eps_spent, delta_spent = self.spent
            eps_total = eps_spent + math.fsum(e.epsilon for e in events)
            delta_total = delta_spent + math.fsum(e.delta for e in events)
            if eps_total > self._epsilon * (1.0 + _BUDGET_RTOL) or delta_total > self._delta * (1.0 + _BUDGET_RTOL):
                raise BudgetExceededError(
                    f"{_describe(events)} would bring the spend to (epsilon={eps_total:.6g}, "
                    f"delta={delta_total:.6g}), over the budget (epsilon={self._epsilon}, delta={self._delta}); "
                    f"remaining: {self.remaining}"
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
        event = _event(epsilon, delta, kind, mu, description)
        with self._lock:
            self.check_events([event])
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


def resolve_accountant(accountant: Any = None) -> Optional[PrivacyAccountant]:
    """``accountant`` itself, else the innermost ``with PrivacyAccountant(...)``, else None."""
    if accountant is None:
        accountant = current_accountant()
    if accountant is not None and not isinstance(accountant, PrivacyAccountant):
        raise TypeError(f"accountant must be a PrivacyAccountant, got {type(accountant).__name__}")
    return accountant


def reserve(accountant: Any, events: Sequence[PrivacyEvent]) -> Optional[PrivacyAccountant]:
    """Check -> compute -> spend, first step: resolve the accountant and check that ``events``
    (everything the caller is about to release, composed together) fit its budget.

    Every mechanism calls this before it computes anything from the private outputs, and charges
    each event with :meth:`PrivacyAccountant.spend` after its draw and before it returns. Returns the
    accountant to charge (None when there is none). Raises :class:`BudgetExceededError` otherwise.
    """
    accountant = resolve_accountant(accountant)
    if accountant is not None:
        accountant.check_events(events)
    return accountant


def _event(epsilon: float, delta: float, kind: str, mu: Optional[float] = None, description: str = "") -> PrivacyEvent:
    if kind not in ("gaussian", "pure", "approximate"):
        raise ValueError(f"kind must be 'gaussian', 'pure' or 'approximate', got {kind!r}")
    epsilon = validate_epsilon(epsilon)
    delta = 0.0 if delta == 0.0 else validate_delta(delta)
    return PrivacyEvent(epsilon, delta, kind, None if mu is None else float(mu), description)


def _describe(events: Sequence[PrivacyEvent]) -> str:
    if len(events) == 1:
        return f"a release at (epsilon={events[0].epsilon}, delta={events[0].delta})"
    return f"{len(events)} releases at (epsilon, delta) = {[(e.epsilon, e.delta) for e in events]}"
