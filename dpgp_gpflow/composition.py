"""Composition of a ledger of privacy events: basic, exact Gaussian-DP, and privacy loss distributions.

Pure functions of :class:`~dpgp_gpflow.accounting.PrivacyEvent` sequences (docs/composition.md#conversion-trap). One neighbouring
relation throughout: two datasets differ in one private output, replaced by another value in the
public bounds ("replace one"). Each event is one of

* ``kind="gaussian"``: a Gaussian mechanism with ``mu = sensitivity / noise std`` (the cloaking
  releases: ``mu = 1 / noise_multiplier``). It is exactly ``mu``-GDP (Dong, Roth & Su 2022); its
  recorded ``(epsilon, delta)`` is one point of its privacy profile.
* ``kind="pure"``: an ``epsilon``-DP mechanism (delta 0), e.g. the exponential mechanism of
  :mod:`dpgp_gpflow.selection`.
* ``kind="approximate"``: any other ``(epsilon, delta)``-DP mechanism.

Three compositions, all valid upper bounds on the epsilon of the whole sequence at a given delta:

* :func:`basic_composition`: ``(sum epsilon_i, sum delta_i)`` of the recorded pairs (always valid,
  loose for Gaussian releases: 10 releases at noise multiplier 5 cost 8.34 at delta 1e-5, where
  the exact answer is 2.59).
* :func:`gdp_composition` / :func:`gdp_epsilon`: Gaussian events compose *exactly*, ``mu`` =
  ``sqrt(sum mu_i^2)``, converted to epsilon by the analytic Gaussian profile. Other events are
  added by basic composition (:func:`composed_epsilon` with ``method="gdp"``).
* :func:`pld_epsilon`: numerically tight composition of any mixture with privacy loss
  distributions (Google's ``dp-accounting``), pessimistic discretisation (an upper bound).

The conversion trap (docs/composition.md#conversion-trap): under ``REPLACE_ONE``, ``dp_accounting``'s ``GaussianDpEvent(sigma)``
means noise std ``sigma`` against a mean shift of **2** (a replace is a remove plus an add of a
unit-norm vector). Our ``mu`` already is the replace-one sensitivity over the noise std, so one
release is ``GaussianDpEvent(2 / mu)`` (``= 2 * noise_multiplier``); passing the noise multiplier
itself would claim half the real privacy loss. :func:`pld_epsilon` builds exactly that PLD, and
the tests reproduce the analytic Gaussian epsilon of a single release through it.

A pure ``epsilon``-DP event enters the PLD as its worst case, binary randomised response with
keep-probability ``e^eps / (1 + e^eps)`` (``RandomizedResponseDpEvent(noise_parameter =
2 / (1 + e^eps), num_buckets = 2)``): every epsilon-DP mechanism is a post-processing of it
(Kairouz, Oh & Viswanath 2015), so this is an upper bound for the exponential mechanism too (the
bounded-range property would be tighter; ``dp-accounting`` 0.6.0 has no event for it). An
``(epsilon, delta)`` event enters as its worst case too (``from_privacy_parameters``: the same
two-point loss plus an atom of mass delta at infinity).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar, cast

import numpy as np

from .calibration import analytic_gaussian_epsilon
from .validation import MIN_DELTA, check_real

__all__ = [
    "PrivacyEvent", "basic_composition", "composed_epsilon", "composition_report", "gdp_composition",
    "pld_epsilon",
]

#: Compositions understood by :func:`composed_epsilon` (and by a ``PrivacyAccountant``'s budget).
COMPOSITIONS = ("basic", "gdp", "pld")


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
#: Default discretisation of the privacy loss (dp-accounting's default). Pessimistic rounding keeps
#: the result an upper bound; smaller is tighter and slower.
PLD_DISCRETIZATION = 1e-4

_KINDS = ("gaussian", "pure", "approximate")


def _events(events: Iterable[PrivacyEvent]) -> List[PrivacyEvent]:
    events = list(events)
    for e in events:
        if not isinstance(e, PrivacyEvent):
            raise TypeError(f"events must be PrivacyEvent objects, got {type(e).__name__}")
        for name in ("epsilon", "delta", "mu"):
            if isinstance(getattr(e, name), (bool, np.bool_)):
                raise TypeError(f"an event's {name} must be a real number, not a bool ({getattr(e, name)!r})")
        if e.kind not in _KINDS:
            raise ValueError(f"unknown event kind {e.kind!r}; expected one of {_KINDS}")
        if e.kind == "gaussian" and (e.mu is None or not e.mu > 0.0 or not math.isfinite(e.mu)):
            raise ValueError(f"a Gaussian event needs a finite mu > 0, got mu={e.mu!r}")
        if e.kind == "pure" and e.delta != 0.0:
            raise ValueError(f"a pure event has delta 0, got delta={e.delta}")
        if not (e.epsilon >= 0.0 and 0.0 <= e.delta <= 1.0):
            raise ValueError(f"invalid event (epsilon={e.epsilon}, delta={e.delta})")
    return events


def _check_delta(delta: float) -> float:
    delta = check_real("delta", delta)
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta}")
    return delta


def basic_composition(events: Iterable[PrivacyEvent]) -> Tuple[float, float]:
    """``(sum epsilon_i, sum delta_i)`` of the recorded pairs: always valid (Dwork et al. 2006)."""
    events = _events(events)
    return math.fsum(e.epsilon for e in events), math.fsum(e.delta for e in events)


def gdp_composition(mus: Iterable[float]) -> float:
    """``sqrt(sum mu_i^2)``: the exact composition of ``mu_i``-GDP mechanisms (Dong, Roth & Su)."""
    mus = [float(m) for m in mus]
    if any(not (m >= 0.0 and math.isfinite(m)) for m in mus):
        raise ValueError(f"every mu must be finite and >= 0, got {mus}")
    return math.sqrt(math.fsum(m * m for m in mus))


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon at which a ``mu``-GDP mechanism is ``(epsilon, delta)``-DP (exact profile).

    ``delta = 0`` gives ``inf`` for ``mu > 0`` (a Gaussian mechanism is never pure DP), and so does a
    subnormal ``delta`` (below ``MIN_DELTA``: a sound bound where the profile cannot be resolved).
    """
    delta = _check_delta(delta)
    mu = float(mu)
    if mu <= 0.0:
        return 0.0
    if delta < MIN_DELTA:  # 0, or subnormal: not resolvable in float64 (validation.MIN_DELTA)
        return math.inf
    return analytic_gaussian_epsilon(mu, delta)


def pure_epsilon_rr_noise_parameter(epsilon: float) -> float:
    """Noise parameter ``p`` of binary randomised response that is exactly ``epsilon``-DP.

    RR keeps the input with probability ``1 - p/2`` and flips it with ``p/2``; the loss is
    ``log((1 - p/2) / (p/2)) = epsilon`` for ``p = 2 / (1 + e^epsilon)``.
    """
    epsilon = float(epsilon)
    return 2.0 / (1.0 + math.exp(epsilon)) if epsilon < 700 else 0.0


#: A composed privacy loss distribution's key: the Gaussian events' composed ``mu`` (None without one), the other
#: events' ``((kind, epsilon, delta), count)`` sorted, and the discretisation. Everything the construction reads.
_PLDKey = Tuple[Optional[float], Tuple[Tuple[Tuple[str, float, float], int], ...], float]


def _pld_key(events: Sequence[PrivacyEvent], discretization: float) -> _PLDKey:
    """The exact, hashable key of :func:`_pld` (the ledger's order and descriptions are not read)."""
    mus = [cast(float, e.mu) for e in events if e.kind == "gaussian"]  # validated: a Gaussian event has mu
    mu = gdp_composition(mus) if mus else None  # exact composition: sqrt(fsum mu^2), order-free
    others = Counter((e.kind, float(e.epsilon), float(e.delta)) for e in events if e.kind != "gaussian")
    return mu, tuple(sorted(others.items())), float(discretization)


def _pld(events: Sequence[PrivacyEvent], discretization: float):
    """The composed privacy loss distribution (replace-one), or None for an empty ledger.

    A deterministic function of :func:`_pld_key`, built once per key (:func:`_composed_pld`): the accountant
    composes its ledger at every budget check, and building one takes up to seconds. The cached object is shared:
    read it, never change it."""
    return _composed_pld(*_pld_key(events, discretization))


@functools.lru_cache(maxsize=8)  # the ledger's last few states; one PLD holds up to ~10 MB (mu = 5 at 1e-4: 1.1e6 floats)
def _composed_pld(mu: Optional[float], others: Tuple[Tuple[Tuple[str, float, float], int], ...],
                  discretization: float):
    """The privacy loss distribution of a Gaussian at ``mu`` (if any) composed with ``others`` (:func:`_pld_key`)."""
    # dp_accounting (with scipy.stats and scipy.signal) is imported here, when a PLD is composed: the ledger
    # and `dpgp budget show` of a basic or GDP budget start without it (about 1 s).
    from dp_accounting import NeighboringRelation
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    from dp_accounting.pld.common import DifferentialPrivacyParameters

    replace_one = NeighboringRelation.REPLACE_ONE
    plds = []
    # Gaussian events compose exactly into one Gaussian (sqrt of the sum of mu^2): one PLD.
    if mu is not None:
        # The trap: REPLACE_ONE Gaussian PLDs assume a shift of 2 * sensitivity. A replace-one
        # shift of 1 against std 1/mu is a shift of 2 against std 2/mu.
        plds.append(pld_lib.from_gaussian_mechanism(
            standard_deviation=2.0 / mu, sensitivity=1.0, value_discretization_interval=discretization,
            neighboring_relation=replace_one))
    # Pure and approximate events: identical ones are self-composed (cheaper, same result).
    for (kind, eps, delta), count in others:
        if kind == "pure" and eps == 0.0:
            continue
        if kind == "pure":
            one = pld_lib.from_randomized_response(
                noise_parameter=pure_epsilon_rr_noise_parameter(eps), num_buckets=2,
                value_discretization_interval=discretization, neighboring_relation=replace_one)
        else:
            one = pld_lib.from_privacy_parameters(
                DifferentialPrivacyParameters(eps, delta), value_discretization_interval=discretization)
        plds.append(one.self_compose(count) if count > 1 else one)
    if not plds:
        return None
    total = plds[0]
    for p in plds[1:]:
        total = total.compose(p)
    return total


def pld_epsilon(events: Iterable[PrivacyEvent], delta: float, *,
                discretization: float = PLD_DISCRETIZATION) -> float:
    """Epsilon of the composed ledger at ``delta``, from privacy loss distributions (tight).

    Uses ``dp_accounting.pld`` (``PLDAccountant``'s own constructions, replace-one): Gaussian events
    as ``GaussianDpEvent(2 / mu)`` (the conversion trap, module docstring), pure events as binary
    randomised response, ``(epsilon, delta)`` events as their worst case. Pessimistic
    discretisation, so the result is an upper bound (within about ``discretization`` per event).
    """
    delta = _check_delta(delta)
    events = _events(events)
    pld = _pld(events, discretization)
    if pld is None:
        return 0.0
    return float(max(pld.get_epsilon_for_delta(delta), 0.0))


def pld_delta(events: Iterable[PrivacyEvent], epsilon: float, *,
              discretization: float = PLD_DISCRETIZATION) -> float:
    """Delta of the composed ledger at ``epsilon`` (privacy loss distributions, an upper bound)."""
    events = _events(events)
    pld = _pld(events, discretization)
    if pld is None:
        return 0.0
    return float(min(max(pld.get_delta_for_epsilon(float(epsilon)), 0.0), 1.0))


def composed_epsilon(events: Iterable[PrivacyEvent], delta: float, method: str = "basic") -> float:
    """Epsilon spent by ``events`` at total ``delta`` under ``method`` in ``COMPOSITIONS``.

    * ``"basic"``: ``sum epsilon_i`` if ``sum delta_i <= delta``, else ``inf``.
    * ``"gdp"``: Gaussian events composed exactly (``sqrt(sum mu^2)``) and converted at the delta
      left after the approximate events' deltas; pure and approximate events added by basic
      composition. ``inf`` if no delta is left for a Gaussian part.
    * ``"pld"``: :func:`pld_epsilon`.

    Each is a valid bound; ``pld <= gdp <= basic`` up to discretisation in practice.
    """
    delta = _check_delta(delta)
    events = _events(events)
    if method == "basic":
        eps, dlt = basic_composition(events)
        return eps if dlt <= delta * (1.0 + 1e-12) else math.inf
    if method == "gdp":
        gauss = [e for e in events if e.kind == "gaussian"]
        rest = [e for e in events if e.kind != "gaussian"]
        eps_rest, delta_rest = basic_composition(rest)
        if not gauss:
            return eps_rest if delta_rest <= delta * (1.0 + 1e-12) else math.inf
        left = delta - delta_rest
        if left <= 0.0:
            return math.inf
        return gdp_epsilon(gdp_composition(cast(float, e.mu) for e in gauss), left) + eps_rest
    if method == "pld":
        return pld_epsilon(events, delta)
    raise ValueError(f"method must be one of {COMPOSITIONS}, got {method!r}")


def composition_report(events: Iterable[PrivacyEvent], delta: float) -> Dict[str, float]:
    """Epsilon at ``delta`` under every composition in ``COMPOSITIONS`` (basic always, beside the tight)."""
    events = _events(events)
    return {method: composed_epsilon(events, delta, method) for method in COMPOSITIONS}


# ---------------------------------------------------------------------------------------------
# Steps: one rule for every release made of several Gaussian draws (the classifiers' Newton steps).

_Request = TypeVar("_Request")  # a mechanisms.ReleaseRequest (a NamedTuple: ._replace), not imported here


def gdp_step_multiplier(multiplier: float, count: int) -> float:
    """``sqrt(count) s``: the noise multiplier of each of ``count`` Gaussian draws, each at the full
    sensitivity, that compose in Gaussian DP exactly to one release at ``s``:
    ``sqrt(count (1 / (sqrt(count) s))^2) = 1 / s`` (:func:`gdp_composition`)."""
    if isinstance(count, bool) or int(count) != count or count < 1:
        raise ValueError(f"count must be an integer >= 1, got {count!r}")
    return math.sqrt(float(count)) * float(multiplier)


def gdp_step_request(request: _Request, step_multiplier: float) -> _Request:
    """The request of every step of a multi-step Gaussian release that composes, in Gaussian DP, to the
    validated ``request`` (``mu = 1 / request.multiplier``): noise multiplier ``step_multiplier`` (the
    release's count of draws a neighbour moves, :func:`gdp_step_multiplier`) and each step's own guarantee at
    ``request.delta`` (``epsilon`` of the analytic profile at ``mu = 1 / step_multiplier``, what a step
    records). ``request`` itself when the step is the whole release (``step_multiplier`` its own). The ledger
    charges the whole release once (``request.event()``): the steps only count their draws
    (:class:`~dpgp_gpflow.measurement.StepDraws`). Only the analytic calibration composes so
    (``NotImplementedError`` otherwise: the classical multiplier is not the exact ``mu`` of (epsilon, delta))."""
    multiplier = float(getattr(request, "multiplier"))
    if float(step_multiplier) == multiplier:
        return request
    calibration = getattr(request, "calibration")
    if calibration != "analytic":
        raise NotImplementedError(
            "a release of several Gaussian steps composes them in Gaussian DP, which needs calibration='analytic' "
            f"(got {calibration!r}: the classical multiplier is not the exact mu of (epsilon, delta))")
    delta = getattr(request, "delta")
    return request._replace(epsilon=analytic_gaussian_epsilon(1.0 / step_multiplier, delta),  # type: ignore[attr-defined]
                            multiplier=step_multiplier)


def gdp_fraction_multipliers(multiplier: float, fractions: Sequence[float]) -> Tuple[float, ...]:
    """``s / sqrt(f_j)`` for each fraction ``f_j`` of ``fractions`` (each finite and > 0, summing to 1): the noise
    multipliers of Gaussian draws, each at its own full sensitivity and each adaptive on the earlier draws' outputs,
    that compose in Gaussian DP exactly to one release at ``s``: ``mu_j = sqrt(f_j) / s`` and
    ``sqrt(sum_j mu_j^2) = sqrt(sum_j f_j) / s = 1 / s`` (:func:`gdp_composition`; Dong, Roth & Su 2022, adaptive
    composition). :func:`gdp_step_multiplier` is the case of ``count`` equal fractions. ``ValueError`` for fractions
    that are not positive or do not sum to 1 (within ``1e-9``)."""
    values = [float(f) for f in fractions]
    if not values or any(isinstance(f, (bool, np.bool_)) for f in fractions) or not all(
            math.isfinite(f) and f > 0.0 for f in values) or abs(math.fsum(values) - 1.0) > 1e-9:
        raise ValueError(f"fractions must be finite, > 0 and sum to 1, got {list(fractions)!r}")
    total = math.fsum(values)
    return tuple(float(multiplier) / math.sqrt(f / total) for f in values)
