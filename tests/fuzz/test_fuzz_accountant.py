"""Fuzz dpgp_gpflow.PrivacyAccountant: its constructor, sequences of check / spend under every
composition, epsilon_spent, and releases charged to nested ``with`` blocks.

Every call either raises a documented error with the ledger unchanged, or succeeds with the ledger
grown by exactly the event and the spend still within the budget under the accountant's own
composition; check() agrees with spend() and never changes the ledger; a release inside nested
blocks is charged to every enclosing accountant, or refused with no noise drawn and nothing charged.
"""

from __future__ import annotations

import inspect
import math
import sys
from pathlib import Path

import gpflow
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import dpgp_gpflow as dp
from dpgp_gpflow import BudgetExceededError, PrivacyAccountant
from dpgp_gpflow.baselines import make_bins, release_bin_means

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzzkit import (  # noqa: E402
    DOCUMENTED,
    LO_HI,
    PRIVATE_INSIDE,
    WRONG_TYPES,
    assert_gaussian_release,
    corrupted,
    deltas,
    epsilons,
    fuzz_settings,
    private_tokens,
    run_call,
)

pytestmark = pytest.mark.filterwarnings("ignore")

RTOL = 1e-12  # the accountant's own slack for rounding
COMPOSITIONS = ("basic", "gdp", "pld")


def budget_epsilons(valid):
    return epsilons(lo=0.1, hi=10.0, extremes=(math.inf, 1e-300, 1e300), valid=valid)


def budget_deltas(valid):
    good = st.one_of(st.just(0.0), st.just(0), deltas(valid=True))
    if valid:
        return good
    return st.one_of(good, st.sampled_from([-1e-3, 1.0, 2.0, math.nan, math.inf, 5e-324, np.False_]
                                           + list(WRONG_TYPES)))


@given(data=st.data())
@fuzz_settings(60)
def test_accountant_constructor_fuzz(draws, data):
    bad = corrupted(data, ["epsilon", "delta", "composition", "dataset"])
    epsilon = data.draw(budget_epsilons("epsilon" not in bad), label="epsilon")
    delta = data.draw(budget_deltas("delta" not in bad), label="delta")
    compositions = list(COMPOSITIONS) + (["GDP", None, 1, "rdp"] if "composition" in bad else [])
    composition = data.draw(st.sampled_from(compositions), label="composition")
    kwargs = dict(epsilon=epsilon, delta=delta, composition=composition)
    if "dataset" in inspect.signature(PrivacyAccountant).parameters and data.draw(st.booleans(), label="dataset"):
        kwargs["dataset"] = data.draw(st.sampled_from(["kung", None] + ([3, b"x"] if "dataset" in bad else [])))
    out = run_call(lambda: PrivacyAccountant(**kwargs), draws, (), (), DOCUMENTED)
    assert draws == []
    if out.refused:
        return
    acc = out.result
    assert acc.epsilon == float(epsilon) and acc.epsilon > 0.0
    assert acc.delta == float(delta) and 0.0 <= acc.delta < 1.0
    assert acc.composition == composition
    assert acc.ledger == () and acc.spent == (0.0, 0.0)
    assert acc.remaining == (acc.epsilon, acc.delta)
    assert acc.epsilon_spent() == 0.0
    repr(acc)


@st.composite
def events(draw, composition, valid):
    kind = draw(st.sampled_from(["gaussian", "pure", "approximate"] + ([] if valid else ["laplace", None, 3])))
    epsilon = draw(epsilons(lo=0.01, hi=2.0, extremes=(1e-300,), valid=valid))
    delta = 0.0 if kind == "pure" else draw(st.one_of(st.floats(1e-9, 0.2), st.just(0.0)))
    if not valid and draw(st.booleans()):
        delta = draw(budget_deltas(False))
    mu = None
    if kind == "gaussian" or (not valid and draw(st.booleans())):
        # privacy-loss distributions ("pld") cost seconds from mu ~ 2 (5 min at mu = 100): there mu
        # stays below 1; "basic" and "gdp" also get mu at the far end of float64
        extreme = [] if composition == "pld" else [1e6, 1e12, 1e154, 1e200, 1.7e308, 1e-300]
        mu = draw(st.one_of(st.floats(1e-3, 1.0), st.sampled_from(extreme)) if extreme else st.floats(1e-3, 1.0))
        if not valid and draw(st.booleans()):
            mu = draw(st.sampled_from([None, 0.0, -1.0, math.inf, math.nan, "x", True, np.True_, False]))
    return dict(epsilon=epsilon, delta=delta, kind=kind, mu=mu)


def within_budget(acc):
    eps, dlt = acc.spent
    if acc.composition == "basic":
        return eps <= acc.epsilon * (1 + RTOL) and dlt <= acc.delta * (1 + RTOL)
    return acc.epsilon_spent() <= acc.epsilon * (1 + RTOL)


@given(data=st.data())
@fuzz_settings(50)
def test_check_and_spend_sequences_fuzz(draws, data):
    composition = data.draw(st.sampled_from(COMPOSITIONS), label="composition")
    epsilon = data.draw(st.sampled_from([0.5, 2.0, 10.0, math.inf]), label="budget epsilon")
    delta = data.draw(st.sampled_from([0.0, 1e-6, 1e-2, 0.5]), label="budget delta")
    acc = PrivacyAccountant(epsilon=epsilon, delta=delta, composition=composition)
    steps = data.draw(st.integers(1, 4 if composition == "pld" else 6), label="steps")
    for _ in range(steps):
        valid = not data.draw(st.integers(0, 3).map(lambda i: i == 0), label="corrupted event")
        ev = data.draw(events(composition, valid), label="event")
        before = acc.ledger
        checked = run_call(lambda: acc.check(**ev), draws, [acc], (), DOCUMENTED)
        assert acc.ledger == before  # check() never records
        spent = run_call(lambda: acc.spend(**ev), draws, [acc], (), DOCUMENTED)
        assert draws == []
        # check and spend agree (one thread: nothing changed in between)
        assert checked.refused == spent.refused, (checked.error, spent.error)
        if checked.refused:
            assert type(checked.error) is type(spent.error)
        if spent.refused:
            assert acc.ledger == before
            continue
        assert acc.ledger[:-1] == before and len(acc.ledger) == len(before) + 1
        event = acc.ledger[-1]
        assert event.kind == ev["kind"] and event.epsilon == float(ev["epsilon"])
        assert event.delta == float(ev["delta"])
        assert within_budget(acc), (acc, acc.ledger)
        r_eps, r_delta = acc.remaining
        assert r_eps >= 0.0 and r_delta >= 0.0
    mus = [e.mu for e in acc.ledger if e.kind == "gaussian"]
    cheap_pld = all(1e-3 <= m <= 1.0 for m in mus)  # privacy-loss distributions are slow beyond
    comps = [c for c in COMPOSITIONS if c != "pld" or cheap_pld]
    for comp in comps if composition != "pld" and len(acc.ledger) <= 3 else (composition,):
        for d in (None, 0.5, 1e-3):
            out = run_call(lambda: acc.epsilon_spent(comp, d), draws, [acc], (), DOCUMENTED)
            if not out.refused:
                assert out.result >= 0.0
    bad_delta = data.draw(st.sampled_from([-0.1, 1.0, math.nan, "x"]), label="bad epsilon_spent delta")
    assert run_call(lambda: acc.epsilon_spent("basic", bad_delta), draws, [acc], (), DOCUMENTED).refused


# ---------------------------------------------------------------------------------------------
# Releases charged to nested accountants

X = np.linspace(0.0, 1.0, 6)[:, None]
Y = np.array([[v] for v in PRIVATE_INSIDE + PRIVATE_INSIDE[:1]])
BINS = make_bins(counts=3, bounds=(0.0, 1.0))
TOKENS = private_tokens(PRIVATE_INSIDE)


@pytest.fixture(scope="module")
def gpr():
    return {"m": dp.models.DPGPR((X, Y), gpflow.kernels.SquaredExponential(), y_bounds=LO_HI, noise_variance=0.1)}


@given(data=st.data())
@fuzz_settings(40)
def test_nested_accountants_fuzz(draws, gpr, data):
    model = gpr["m"]
    depth = data.draw(st.integers(1, 3), label="depth")
    accs = [PrivacyAccountant(epsilon=data.draw(st.sampled_from([0.3, 1.0, 5.0, math.inf]), label="epsilon"),
                              delta=data.draw(st.sampled_from([0.0, 1e-3, 0.5]), label="delta"),
                              composition=data.draw(st.sampled_from(["basic", "gdp"]), label="composition"))
            for _ in range(depth)]
    pre = data.draw(st.lists(st.floats(0.05, 0.5), max_size=2), label="already spent")
    for acc in accs:
        for e in pre:
            run_call(lambda: acc.spend(e, 0.0, kind="pure"), draws, [acc], (), DOCUMENTED)
    before = [acc.ledger for acc in accs]
    kind = data.draw(st.sampled_from(["bins", "gaussian"]), label="release")
    bad = corrupted(data, ["epsilon", "delta"], 1)
    epsilon = data.draw(epsilons(lo=0.1, hi=2.0, valid="epsilon" not in bad), label="release epsilon")
    delta = data.draw(deltas(valid="delta" not in bad), label="release delta")

    def call():
        def inner(i):
            if i == depth:
                if kind == "bins":
                    return release_bin_means(X, Y, BINS, y_bounds=LO_HI, epsilon=epsilon)
                return model.release(X[:3], epsilon=epsilon, delta=delta)
            with accs[i]:
                return inner(i + 1)
        return inner(0)

    out = run_call(call, draws, accs, TOKENS, DOCUMENTED)
    if out.refused:
        if isinstance(out.error, BudgetExceededError):  # then some accountant really lacks the budget
            ev = dict(epsilon=float(epsilon), delta=0.0, kind="pure") if kind == "bins" else None
            if ev is not None:
                assert any(run_call(lambda a=a: a.check(**ev), draws, [a], (), DOCUMENTED).refused for a in accs)
        return
    rel = out.result
    assert len(draws) == 1
    for acc, old in zip(accs, before):  # every enclosing accountant charged exactly once, the same event
        assert acc.ledger[:-1] == old and len(acc.ledger) == len(old) + 1
        assert acc.ledger[-1] == accs[0].ledger[-1]
        assert acc.ledger[-1].epsilon == float(epsilon)
        assert within_budget(acc)
    if kind == "gaussian":
        assert_gaussian_release(rel, dp.cloaking_matrix(model, X[:3]).numpy(), epsilon=float(epsilon),
                                delta=float(delta))
