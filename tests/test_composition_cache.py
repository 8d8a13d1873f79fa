"""The composed privacy loss distribution is built once per ledger (composition._composed_pld, an LRU cache on an exact
key): a cached answer equals the uncached construction, bit for bit, for every ledger; it agrees with dp_accounting's
own PLDAccountant fed the events one by one (reference.reference_pld_epsilon, built without the package) within the
discretisation; ledgers differing in anything the composition reads never share an entry (a stale or too coarse key
would hand one ledger's epsilon to another), and Gaussian releases composing to the same mu do."""

from __future__ import annotations

import itertools

import pytest
from reference import gdp_epsilon_closed_form, reference_pld_epsilon

from dpgp_gpflow import composition
from dpgp_gpflow.composition import PrivacyEvent, pld_delta, pld_epsilon

DELTAS = (1e-3, 1e-6)
#: A coarser discretisation than the default 1e-4 (ten times quicker to build; part of the key like any other).
STEP = 1e-3


def _ledgers():
    g = lambda mu, d="": PrivacyEvent(1.0, 1e-6, "gaussian", mu, d)  # noqa: E731 (epsilon, delta: recorded only)
    pure, approx = PrivacyEvent(0.3, 0.0, "pure"), PrivacyEvent(0.2, 1e-7, "approximate")
    return {
        "one gaussian": [g(0.5)],
        "another mu": [g(0.6)],
        "two gaussians": [g(0.5), g(0.6)],
        "gaussian and pure": [g(0.5), pure],
        "gaussian and two pure": [g(0.5), pure, pure],
        "gaussian and approximate": [g(0.5), approx],
        "pure and approximate": [pure, approx],
        "other pure epsilon": [g(0.5), PrivacyEvent(0.4, 0.0, "pure")],  # differs from "gaussian and pure" only there
        "other approximate delta": [g(0.5), PrivacyEvent(0.2, 5e-7, "approximate")],  # vs "gaussian and approximate"
        "other approximate epsilon": [g(0.5), PrivacyEvent(0.25, 1e-7, "approximate")],
        "three and four eighths": [g(0.375), g(0.5)],  # composes to mu = 0.625 exactly (a 3-4-5 triangle)
        "three and five eighths": [g(0.375), g(0.625)],  # does not (mu = 0.729)
    }


def _uncached(events, deltas, step):
    """The same construction without the cache (lru_cache's __wrapped__): what a cached answer equals bit for bit."""
    pld = composition._composed_pld.__wrapped__(*composition._pld_key(events, step))
    return [float(max(pld.get_epsilon_for_delta(d), 0.0)) for d in deltas]


def _near_reference(got, events, deltas, step):
    """Both are upper bounds within (number of discretised PLDs composed) x step of the exact epsilon: at most
    len(events) each (the reference composes every event one by one)."""
    for g, r in zip(got, reference_pld_epsilon(events, deltas, step)):
        assert r - len(events) * step - 1e-9 <= g <= r + len(events) * step + 1e-9


def test_a_cached_composition_equals_an_uncached_one_and_ledgers_never_share_an_entry():
    ledgers = _ledgers()
    composition._composed_pld.cache_clear()
    first = {}
    for built, (name, events) in enumerate(ledgers.items(), start=1):
        first[name] = [pld_epsilon(events, d, discretization=STEP) for d in DELTAS]
        assert composition._composed_pld.cache_info().misses == built  # one construction, read at both deltas
        assert first[name] == _uncached(events, DELTAS, STEP), name  # the cache changes nothing
        _near_reference(first[name], events, DELTAS, STEP)  # and the construction is right (independent of it)
        # asked again, in another order and with other descriptions: from the cache, the same floats
        again = [PrivacyEvent(e.epsilon, e.delta, e.kind, e.mu, "renamed") for e in reversed(events)]
        assert [pld_epsilon(again, d, discretization=STEP) for d in DELTAS] == first[name], name
        assert composition._composed_pld.cache_info().misses == built
    # every pair of ledgers differs (a key missing the mu, a kind, an epsilon, a delta or a count would merge two)
    for a, b in itertools.combinations(ledgers, 2):
        assert first[a] != first[b], (a, b)
    # Gaussians composing to the same mu are one ledger to the PLD (exact GDP composition): one entry, the same floats
    built = composition._composed_pld.cache_info().misses
    five = [PrivacyEvent(1.0, 1e-6, "gaussian", 0.625)]
    assert [pld_epsilon(five, d, discretization=STEP) for d in DELTAS] == first["three and four eighths"]
    assert composition._composed_pld.cache_info().misses == built
    # the discretisation is part of the key; pld_delta reads the same entry
    one = ledgers["one gaussian"]
    coarse = pld_epsilon(one, DELTAS[0], discretization=10 * STEP)
    assert coarse == _uncached(one, DELTAS[:1], 10 * STEP)[0] != first["one gaussian"][0]
    _near_reference([coarse], one, DELTAS[:1], 10 * STEP)
    built = composition._composed_pld.cache_info().misses
    assert pld_delta(one, coarse, discretization=10 * STEP) == pytest.approx(DELTAS[0], rel=1e-2)
    assert composition._composed_pld.cache_info().misses == built
    # bounded: the oldest entries go (12 ledgers and a coarse one asked, 8 kept)
    assert composition._composed_pld.cache_info().currsize == composition._composed_pld.cache_info().maxsize == 8


@pytest.mark.parametrize("mu, step", [(0.3, composition.PLD_DISCRETIZATION), (1.0, STEP), (2.5, STEP)])
def test_one_gaussian_is_its_gdp_profile_within_the_discretisation(mu, step):
    # three releases compose to one Gaussian at sqrt(sum mu_i^2) = mu (Dong, Roth & Su): its epsilon at delta from the
    # closed-form profile (SciPy); the pessimistic PLD is above it by at most a few discretisation steps
    events = [PrivacyEvent(1.0, 1e-6, "gaussian", mu / 3 ** 0.5) for _ in range(3)]
    for delta in DELTAS:
        exact = gdp_epsilon_closed_form(mu, delta)
        assert exact - 1e-9 <= pld_epsilon(events, delta, discretization=step) <= exact + 5 * step
