"""Running totals of a ledger's events: what a budget check composes, kept exact as events come and go.

Every budget check composes everything committed or held with the candidate events. Recomposing the
whole list at every check makes a ledger's life quadratic in its length. :class:`EventTally` keeps what
basic and Gaussian-DP composition read of the list, as exact sums (Shewchuk's non-overlapping partials,
the algorithm behind :func:`math.fsum`): ``sum epsilon`` and ``sum delta`` of every event, ``sum mu^2``
of the Gaussian events and ``sum epsilon``, ``sum delta`` of the others. Adding an event (a hold, a
record) and removing one (a cancelled hold) are exact, and :meth:`EventTally.basic` and
:meth:`EventTally.epsilon` give bit for bit what :func:`~dpgp_gpflow.composition.basic_composition` and
:func:`~dpgp_gpflow.composition.composed_epsilon` give for the whole list, in time independent of its
length. Composition by privacy loss distributions is not incremental (the composed distribution is
recomputed from every event, and its cost grows with the number of non-Gaussian events): for ``"pld"``
the tally hands the multiset of events it keeps to :func:`~dpgp_gpflow.composition.composed_epsilon`.

Privacy assumption: none of its own. It holds the ledger's public record of spends; every event enters
through :func:`~dpgp_gpflow.composition.basic_composition`'s validation, as it would in a recomposition.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .composition import COMPOSITIONS, PrivacyEvent, basic_composition, composed_epsilon, gdp_epsilon

__all__: list[str] = []  # internal: the package imports these names by name

#: The key an event is counted under: what composition reads of it (its description is not read).
_Key = Tuple[str, float, float, Optional[float]]


class ExactSum:
    """The exact sum of floats added and subtracted: :meth:`value` is ``math.fsum`` of every value added
    minus every value removed, correctly rounded, whatever the order (Shewchuk's partials; non-finite
    values are kept apart, as ``math.fsum`` treats them)."""

    __slots__ = ("_partials", "_special", "overflowed")

    def __init__(self) -> None:
        self._partials: List[float] = []
        self._special: Counter = Counter()  # inf, -inf and nan values, counted
        #: an intermediate sum overflowed (sticky): the owner recomposes from its events instead
        self.overflowed = False

    def copy(self) -> "ExactSum":
        out = ExactSum()
        out._partials, out._special = list(self._partials), Counter(self._special)
        out.overflowed = self.overflowed
        return out

    def add(self, x: float, sign: int = 1) -> None:
        """Add ``x`` (``sign=-1``: remove an ``x`` added before)."""
        x = float(x)
        if not math.isfinite(x):
            key = "nan" if math.isnan(x) else x
            self._special[key] += sign
            if not self._special[key]:
                del self._special[key]
            return
        x = sign * x
        partials, i = self._partials, 0
        for y in partials:  # Shewchuk: keep the exact sum as non-overlapping partials
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            if math.isinf(hi):  # as math.fsum would refuse: the owner recomposes from its events
                self.overflowed = True
                return
            lo = y - (hi - x)
            if lo:
                partials[i] = lo
                i += 1
            x = hi
        partials[i:] = [x]

    def value(self, *more: float) -> float:
        """The correctly rounded sum, with ``more`` values added (not kept)."""
        return math.fsum([*self._partials, *more, *(float(k) for k in self._special.elements())])


class EventTally:
    """A multiset of :class:`~dpgp_gpflow.composition.PrivacyEvent` (everything a ledger has committed or
    holds) and the exact sums composition reads of it (module docstring)."""

    def __init__(self, events: Iterable[PrivacyEvent] = ()) -> None:
        self._counts: Counter = Counter()  # key -> how many
        self._sums: Dict[str, ExactSum] = {name: ExactSum() for name in ("eps", "delta", "eps_rest", "delta_rest",
                                                                          "mu2")}
        self._gaussian = 0
        for e in events:
            self.add(e)

    def __len__(self) -> int:
        return sum(self._counts.values())

    def copy(self) -> "EventTally":
        out = EventTally()
        out._counts = Counter(self._counts)
        out._sums = {k: s.copy() for k, s in self._sums.items()}
        out._gaussian = self._gaussian
        return out

    @staticmethod
    def _key(event: PrivacyEvent) -> _Key:
        return (event.kind, event.epsilon, event.delta, event.mu)

    def _update(self, event: PrivacyEvent, sign: int) -> None:
        s = self._sums
        s["eps"].add(event.epsilon, sign)
        s["delta"].add(event.delta, sign)
        if event.kind == "gaussian":
            mu = float(event.mu)  # type: ignore[arg-type]  # validated: a Gaussian event has mu
            s["mu2"].add(mu * mu, sign)  # as composition.gdp_composition squares it
            self._gaussian += sign
        else:
            s["eps_rest"].add(event.epsilon, sign)
            s["delta_rest"].add(event.delta, sign)

    def add(self, event: PrivacyEvent) -> None:
        """Count ``event`` (``TypeError`` / ``ValueError`` for one composition would refuse)."""
        basic_composition([event])  # composition's own validation of an event
        self._counts[self._key(event)] += 1
        self._update(event, 1)

    def remove(self, event: PrivacyEvent) -> None:
        """Stop counting one ``event`` counted before (``KeyError`` if none is)."""
        key = self._key(event)
        if not self._counts[key]:
            del self._counts[key]
            raise KeyError(f"{event} is not in the tally")
        self._counts[key] -= 1
        if not self._counts[key]:
            del self._counts[key]
        self._update(event, -1)

    def events(self) -> List[PrivacyEvent]:
        """The multiset as a list of events (without descriptions), in no particular order."""
        return [PrivacyEvent(eps, delta, kind, mu) for (kind, eps, delta, mu) in self._counts.elements()]

    def basic(self, extra: Sequence[PrivacyEvent] = ()) -> Tuple[float, float]:
        """``(sum epsilon, sum delta)`` of the tally and ``extra``: :func:`~dpgp_gpflow.composition.basic_composition`
        of the whole list, bit for bit."""
        extra = list(extra)
        if self._sums["eps"].overflowed or self._sums["delta"].overflowed:
            return basic_composition([*self.events(), *extra])
        basic_composition(extra)  # validated as a recomposition would
        return (self._sums["eps"].value(*(e.epsilon for e in extra)),
                self._sums["delta"].value(*(e.delta for e in extra)))

    def epsilon(self, delta: float, method: str, extra: Sequence[PrivacyEvent] = ()) -> float:
        """:func:`~dpgp_gpflow.composition.composed_epsilon` of the tally's events and ``extra`` at ``delta``
        under ``method``: the same number, computed from the sums for "basic" and "gdp" (independent of the
        ledger's length) and from every event for "pld" (not incremental)."""
        extra = list(extra)
        if method == "pld" or method not in COMPOSITIONS or any(t.overflowed for t in self._sums.values()):
            return composed_epsilon([*self.events(), *extra], delta, method)
        composed_epsilon([], delta, method)  # composition's own check of delta
        if method == "basic":
            eps, dlt = self.basic(extra)
            return eps if dlt <= delta * (1.0 + 1e-12) else math.inf
        basic_composition(extra)  # validated as a recomposition would
        rest = [e for e in extra if e.kind != "gaussian"]
        gauss = [float(e.mu) for e in extra if e.kind == "gaussian"]  # type: ignore[arg-type]
        eps_rest = self._sums["eps_rest"].value(*(e.epsilon for e in rest))
        delta_rest = self._sums["delta_rest"].value(*(e.delta for e in rest))
        if not (self._gaussian or gauss):
            return eps_rest if delta_rest <= delta * (1.0 + 1e-12) else math.inf
        left = delta - delta_rest
        if left <= 0.0:
            return math.inf
        return gdp_epsilon(math.sqrt(self._sums["mu2"].value(*(m * m for m in gauss))), left) + eps_rest
