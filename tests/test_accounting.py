"""PrivacyAccountant: the ledger, the hard ceiling, the context manager, and releases charging it."""

from __future__ import annotations

import math

import gpflow
import numpy as np
import pytest

from dpgp_gpflow import BudgetExceededError, PrivacyAccountant
from dpgp_gpflow.accounting import PrivacyEvent, current_accountant
from dpgp_gpflow.models import DPGPR

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")

XNEW = np.linspace(0.0, 3.0, 4)[:, None]


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 3.0, (8, 1))
    Y = np.clip(np.sin(X) + 0.1 * rng.standard_normal((8, 1)), -1.0, 1.0)
    return DPGPR((X, Y), gpflow.kernels.SquaredExponential(lengthscales=1.0), y_bounds=(-1.0, 1.0), noise_variance=0.1,
                 hyperparameters_public=True)  # chosen a priori


def test_check_spend_spent_remaining():
    acc = PrivacyAccountant(epsilon=2.0, delta=0.02)
    assert (acc.epsilon, acc.delta) == (2.0, 0.02)
    assert acc.spent == (0.0, 0.0) and acc.remaining == (2.0, 0.02) and acc.ledger == ()
    acc.check(2.0, 0.02)  # the whole budget is allowed
    event = acc.spend(0.5, 0.005, kind="gaussian", mu=0.5, description="first")
    assert (event.epsilon, event.delta, event.kind, event.mu, event.description) == (0.5, 0.005, "gaussian", 0.5, "first")
    acc.spend(1.0, 0.01)
    assert acc.spent == pytest.approx((1.5, 0.015))
    assert acc.remaining == pytest.approx((0.5, 0.005))
    assert len(acc.ledger) == 2
    with pytest.raises(BudgetExceededError, match="epsilon"):
        acc.check(0.6, 0.001)  # epsilon over
    with pytest.raises(BudgetExceededError):
        acc.check(0.1, 0.006)  # delta over
    with pytest.raises(BudgetExceededError):
        acc.spend(0.6, 0.0)
    assert len(acc.ledger) == 2 and acc.spent == pytest.approx((1.5, 0.015))  # a refused spend records nothing
    acc.spend(0.5, 0.005)
    assert acc.remaining == pytest.approx((0.0, 0.0), abs=1e-15)
    with pytest.raises(BudgetExceededError):
        acc.check(1e-6, 0.0)


def test_rounding_does_not_refuse_the_last_exact_share():
    acc = PrivacyAccountant(epsilon=1.0, delta=1e-2)
    for _ in range(10):
        acc.spend(0.1, 1e-3)
    assert acc.spent == pytest.approx((1.0, 1e-2), rel=1e-15)
    with pytest.raises(BudgetExceededError):
        acc.spend(0.1, 1e-3)


def test_pure_budget_refuses_any_delta():
    acc = PrivacyAccountant(epsilon=1.0)
    assert acc.delta == 0.0
    acc.spend(0.5, kind="pure")
    with pytest.raises(BudgetExceededError):
        acc.check(0.1, 1e-9)


@pytest.mark.parametrize("kwargs, error", [
    (dict(epsilon=0.0, delta=0.01), ValueError),
    (dict(epsilon=-1.0, delta=0.01), ValueError),
    (dict(epsilon=float("nan"), delta=0.01), ValueError),
    (dict(epsilon=1.0, delta=1.0), ValueError),
    (dict(epsilon=1.0, delta=-0.1), ValueError),
    (dict(epsilon="1", delta=0.01), TypeError),
])
def test_invalid_budget(kwargs, error):
    with pytest.raises(error):
        PrivacyAccountant(**kwargs)


def test_invalid_spend():
    acc = PrivacyAccountant(epsilon=1.0, delta=0.01)
    with pytest.raises(ValueError):
        acc.spend(-0.1, 0.0)
    with pytest.raises(ValueError):
        acc.spend(0.1, 2.0)
    with pytest.raises(ValueError, match="kind"):
        acc.spend(0.1, 0.0, kind="renyi")
    assert acc.ledger == ()


def test_release_inside_context_is_charged(model, draws):
    with PrivacyAccountant(epsilon=1.5, delta=0.015) as acc:
        assert current_accountant() is acc
        rel = model.release(XNEW, epsilon=1.0, delta=0.01, seed=0)
    assert current_accountant() is None
    assert acc.spent == (1.0, 0.01)
    (event,) = acc.ledger
    assert event.kind == "gaussian" and event.mu == pytest.approx(1.0 / rel.noise_multiplier)
    assert len(draws) == 1


def test_explicit_accountant_wins_over_the_context(model):
    explicit = PrivacyAccountant(epsilon=1.0, delta=0.01)
    with PrivacyAccountant(epsilon=1.0, delta=0.01) as ctx:
        model.release(XNEW, epsilon=0.5, delta=0.005, seed=0, accountant=explicit)
    assert explicit.spent == (0.5, 0.005) and ctx.spent == (0.0, 0.0)


def test_no_accountant_spends_nothing(model, draws):
    """With no accountant passed and no context active, the release still happens (one noise draw, a
    finite mean) and no accountant is charged: not one that was entered and left before, nor one that
    exists but was never handed in. The context's stack is empty again after each."""
    left = PrivacyAccountant(epsilon=1.0, delta=0.01)
    with left:
        assert current_accountant() is left
    assert current_accountant() is None
    bystander = PrivacyAccountant(epsilon=1.0, delta=0.01)
    rel = model.release(XNEW, epsilon=0.5, delta=0.005, seed=0)
    assert len(draws) == 1  # the release was produced (noise drawn), not skipped
    assert np.asarray(rel.mean).size == XNEW.shape[0] and np.all(np.isfinite(np.asarray(rel.mean)))
    assert current_accountant() is None
    for acc in (left, bystander):
        assert acc.spent == (0.0, 0.0) and acc.ledger == () and acc.history() == []
    # the same accountant entered around the same call is charged: the check above can see a charge
    with left:
        model.release(XNEW, epsilon=0.5, delta=0.005, seed=0)
    assert left.spent == (0.5, 0.005) and len(left.ledger) == 1


@pytest.mark.parametrize("mechanism", ["cloaking", "standard"])
def test_over_budget_release_raises_and_draws_nothing(model, draws, mechanism):
    acc = PrivacyAccountant(epsilon=1.0, delta=0.01)
    model.release(XNEW, epsilon=0.7, delta=0.005, seed=0, accountant=acc, mechanism=mechanism)
    assert len(draws) == 1
    with pytest.raises(BudgetExceededError):
        model.release(XNEW, epsilon=0.7, delta=0.005, seed=0, accountant=acc, mechanism=mechanism)
    assert len(draws) == 1  # no noise was drawn for the refused release
    assert acc.spent == (0.7, 0.005) and len(acc.ledger) == 1
    with acc, pytest.raises(BudgetExceededError):  # and through the context as well
        model.release(XNEW, epsilon=0.2, delta=0.006, seed=0, mechanism=mechanism)
    assert len(draws) == 1 and len(acc.ledger) == 1
    # what is left can still be spent
    model.release(XNEW, epsilon=0.3, delta=0.005, seed=0, accountant=acc, mechanism=mechanism)
    assert acc.remaining == pytest.approx((0.0, 0.0), abs=1e-12) and len(draws) == 2


def test_nested_contexts_restore(model):
    outer = PrivacyAccountant(epsilon=1.0, delta=0.01)
    inner = PrivacyAccountant(epsilon=1.0, delta=0.01)
    assert current_accountant() is None
    with outer:
        model.release(XNEW, epsilon=0.1, delta=0.001, seed=0)
        with inner:
            assert current_accountant() is inner
            model.release(XNEW, epsilon=0.2, delta=0.002, seed=0)
            with outer:  # re-entering the same accountant: charged once
                assert current_accountant() is outer
                model.release(XNEW, epsilon=0.05, delta=0.0005, seed=0)
            assert current_accountant() is inner
        assert current_accountant() is outer
        model.release(XNEW, epsilon=0.3, delta=0.003, seed=0)
    assert current_accountant() is None
    # every enclosing accountant is charged (the inner block's releases count for the outer too)
    assert outer.spent == pytest.approx((0.65, 0.0065)) and inner.spent == pytest.approx((0.25, 0.0025))


def test_context_restored_after_an_exception():
    acc = PrivacyAccountant(epsilon=1.0, delta=0.01)
    with pytest.raises(RuntimeError):
        with acc:
            raise RuntimeError("boom")
    assert current_accountant() is None


def test_accountant_must_be_an_accountant(model, draws):
    with pytest.raises(TypeError, match="PrivacyAccountant"):
        model.release(XNEW, epsilon=1.0, delta=0.01, accountant=(1.0, 0.01))
    assert draws == []


# -- tight composition enforced by the accountant ------------------------------------------------


def _gaussian_spends(accountant, count, multiplier):
    """Spend ``count`` Gaussian releases at noise multiplier ``multiplier`` (epsilon 1, delta 1e-6 each)."""
    accepted = 0
    for _ in range(count):
        try:
            accountant.spend(1.0, 1e-6, kind="gaussian", mu=1.0 / multiplier)
        except BudgetExceededError:
            break
        accepted += 1
    return accepted


def test_gdp_and_pld_budgets_admit_more_gaussian_releases_than_basic():
    # 10 releases at s = 5 compose to about eps 2.59 at delta 1e-5 (DESIGN 7); basic needs eps 10.
    from scipy.stats import norm

    mu = np.sqrt(10) / 5.0  # exact GDP composition, computed here independently
    delta_at = lambda eps: norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * norm.cdf(-eps / mu - mu / 2)
    assert delta_at(2.6) < 1e-5 < delta_at(2.55)
    for composition in ("gdp", "pld"):
        acc = PrivacyAccountant(epsilon=2.6, delta=1e-5, composition=composition)
        assert _gaussian_spends(acc, 10, 5.0) == 10, composition
        assert acc.epsilon_spent() <= 2.6
    basic = PrivacyAccountant(epsilon=2.6, delta=1e-5)
    assert _gaussian_spends(basic, 10, 5.0) == 2


def test_unknown_composition_is_refused():
    with pytest.raises(ValueError, match="composition"):
        PrivacyAccountant(epsilon=1.0, delta=1e-5, composition="advanced")


# ---------------------------------------------------------------------------------------------
# Concurrency: budget is held before the draw, so racing releases can never overspend


def test_racing_threads_never_overspend_and_refused_ones_draw_nothing(model, draws):
    import threading

    acc = PrivacyAccountant(epsilon=1.0, delta=0.01)  # admits exactly one release at (1, 0.01)
    barrier = threading.Barrier(8)
    outcomes = []

    def worker():
        barrier.wait()
        try:
            model.release(XNEW, epsilon=1.0, delta=0.01, accountant=acc)
            outcomes.append("released")
        except BudgetExceededError:
            outcomes.append("refused")

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["refused"] * 7 + ["released"]
    assert len(draws) == 1 and len(acc.ledger) == 1


def test_a_release_in_a_thread_pool_inside_a_with_block_is_refused_not_uncharged(model, draws):
    from concurrent.futures import ThreadPoolExecutor

    with PrivacyAccountant(epsilon=5.0, delta=0.05) as acc:
        with ThreadPoolExecutor(2) as pool:
            future = pool.submit(model.release, XNEW, epsilon=1.0, delta=0.01)
            with pytest.raises(RuntimeError, match="pass accountant= explicitly"):
                future.result()
            # with the accountant passed explicitly the release is charged
            pool.submit(model.release, XNEW, epsilon=1.0, delta=0.01, accountant=acc).result()
    assert len(draws) == 1 and acc.spent == pytest.approx((1.0, 0.01))


def test_held_budget_is_given_back_when_a_release_fails(model, monkeypatch):
    from dpgp_gpflow import sampling

    acc = PrivacyAccountant(epsilon=1.0, delta=0.01)

    def broken(size, seed=None):
        raise OSError("no entropy")

    with monkeypatch.context() as m:
        m.setattr(sampling, "standard_normal", broken)
        with pytest.raises(OSError):
            model.release(XNEW, epsilon=1.0, delta=0.01, accountant=acc)
    assert acc.ledger == ()
    model.release(XNEW, epsilon=1.0, delta=0.01, accountant=acc)  # the whole budget is available again
    assert acc.spent == pytest.approx((1.0, 0.01))


# ---------------------------------------------------------------------------------------------
# Found by the fuzz suite (tests/fuzz)


@pytest.mark.parametrize("delta", [False, np.False_, True, np.True_])
def test_bool_budget_delta_is_refused(delta):
    """FUZZ-BUG-9: delta=False was taken as 0.0 (``delta == 0.0`` was tested before validation)."""
    with pytest.raises(TypeError, match="delta"):
        PrivacyAccountant(epsilon=1.0, delta=delta)


@pytest.mark.parametrize("kwargs", [dict(delta=False), dict(delta=np.False_), dict(kind="gaussian", delta=1e-3, mu=True),
                                    dict(kind="gaussian", delta=1e-3, mu=np.True_)])
def test_bool_event_delta_or_mu_is_refused(kwargs):
    acc = PrivacyAccountant(epsilon=10.0, delta=0.5)
    for call in (acc.check, acc.spend):
        with pytest.raises(TypeError):
            call(0.5, **kwargs)
    assert acc.ledger == () and acc.history() == []
    with pytest.raises(TypeError, match="delta"):
        acc.epsilon_spent("basic", False)


def test_bool_fields_of_a_privacy_event_are_refused():
    from dpgp_gpflow.composition import composed_epsilon

    for event in (PrivacyEvent(1.0, 1e-3, "gaussian", True), PrivacyEvent(1.0, False, "pure"),
                  PrivacyEvent(True, 0.0, "pure")):
        with pytest.raises(TypeError, match="bool"):
            composed_epsilon([event], 0.5, "gdp")


@pytest.mark.parametrize("mu", [1e7, 1e10, 1e100, 1e200])
def test_gdp_check_of_a_huge_gaussian_event(mu):
    """FUZZ-BUG-3: the "gdp" check raised OverflowError (or never returned) for mu above ~1e6."""
    acc = PrivacyAccountant(epsilon=1e308, delta=0.5, composition="gdp")
    need = 0.5 * mu * mu  # delta < 1 needs epsilon of order mu^2 / 2
    if math.isfinite(need):
        acc.check(1.0, 1e-3, kind="gaussian", mu=mu)
        assert acc.epsilon_spent() == 0.0
        small = PrivacyAccountant(epsilon=need / 2, delta=0.5, composition="gdp")
        with pytest.raises(BudgetExceededError):
            small.spend(1.0, 1e-3, kind="gaussian", mu=mu)
        assert small.ledger == ()
    else:  # mu^2 / 2 overflows: no finite budget covers it
        with pytest.raises(BudgetExceededError):
            acc.spend(1.0, 1e-3, kind="gaussian", mu=mu)


def test_gdp_epsilon_at_a_subnormal_delta_is_infinite():
    from dpgp_gpflow.composition import gdp_epsilon

    assert gdp_epsilon(1.0, 1e-320) == math.inf  # sound: the profile cannot be resolved there
    assert gdp_epsilon(1.0, 2.3e-308) == pytest.approx(37.92, rel=1e-3)


# -- a caller's reservation handed to a release (accountant=, streaming.release.cloak_function) ----------------


def _recorded(acc):
    return [(e.epsilon, e.delta, e.kind) for e in acc.ledger]


@pytest.fixture(scope="module")
def fitc(model):
    """``model``'s rows in a sparse model the streamed release (streaming.release.cloak_function) takes."""
    from dpgp_gpflow.models import DPGPRFITC

    X, Y = (np.asarray(a) for a in model.data)
    return DPGPRFITC((X, Y), gpflow.kernels.SquaredExponential(lengthscales=1.0), X[:3], y_bounds=(-1.0, 1.0),
                     noise_variance=0.1, hyperparameters_public=True)


def test_a_reservation_holding_another_event_is_refused_before_the_draw(model, fitc, draws):
    """A reservation of a small event handed to a bigger release used to record the small event for it (a commit
    records the next held event, not the release's): refused, nothing drawn or charged; the release it holds
    then charges once."""
    from dpgp_gpflow.accounting import reserve
    from dpgp_gpflow.mechanisms import release_request
    from dpgp_gpflow.streaming.release import cloak_function

    small, big = release_request(0.1, 1e-6, objective=None), release_request(2.0, 1e-3, seed=0)
    acc = PrivacyAccountant(epsilon=10.0, delta=1e-2)
    with reserve(acc, [small.event(), big.event()]) as reservation:
        with pytest.raises(ValueError, match="holds"):
            model.release(XNEW, epsilon=2.0, delta=1e-3, seed=0, accountant=reservation)
        with pytest.raises(ValueError, match="holds"):
            model.release(XNEW, epsilon=2.0, delta=1e-3, seed=0, accountant=reservation, mechanism="standard")
        with pytest.raises(ValueError, match="holds"):
            cloak_function(fitc, big, reservation)
        assert draws == [] and acc.ledger == () and reservation.uncommitted == 2
        model.release(XNEW, epsilon=0.1, delta=1e-6, seed=0, accountant=reservation)  # the events it holds, in order
        model.release(XNEW, epsilon=2.0, delta=1e-3, seed=0, accountant=reservation)
    assert len(draws) == 2 and _recorded(acc) == [(0.1, 1e-6, "gaussian"), (2.0, 1e-3, "gaussian")]
    assert [e.mu for e in acc.ledger] == [small.event().mu, big.event().mu] and acc.held == (0.0, 0.0)


def test_a_reservation_built_by_hand_is_refused_not_committed_into_nothing(model, fitc, draws):
    """Reservation((), [event]) holds nothing in any accountant: handed to a release inside a ``with`` block it
    used to bypass the enclosing accountant (and a StepDraws, to draw, then fail to commit). Refused (TypeError),
    nothing drawn or charged."""
    from dpgp_gpflow.accounting import Reservation
    from dpgp_gpflow.measurement import StepDraws
    from dpgp_gpflow.mechanisms import release_request
    from dpgp_gpflow.streaming.release import cloak_function

    request = release_request(2.0, 1e-3, seed=0)
    with PrivacyAccountant(epsilon=10.0, delta=1e-2) as outer:
        with pytest.raises(TypeError, match="issued"):
            model.release(XNEW, epsilon=2.0, delta=1e-3, seed=0, accountant=Reservation((), [request.event()]))
        with pytest.raises(TypeError, match="issued"):
            cloak_function(fitc, request, Reservation((), [request.event()]))
        with pytest.raises(TypeError, match="issued"):  # the steps' draws of a multi-step release, built by hand
            model.release(XNEW, epsilon=2.0, delta=1e-3, seed=0, accountant=StepDraws(request.event()))
    assert draws == [] and outer.ledger == () and outer.held == (0.0, 0.0)


def test_a_reservation_charging_no_accountant_is_refused_inside_a_with_block(model, draws):
    """reserve(None, ...) made outside any ``with`` block holds in no accountant: handed as ``accountant=`` to a
    release inside ``with PrivacyAccountant(...)`` it used to charge nothing (the block's accountant skipped).
    Refused, nothing drawn or charged; outside every block it is accepted, as a release with no accountant is."""
    from dpgp_gpflow.accounting import reserve
    from dpgp_gpflow.mechanisms import release_request

    request = release_request(2.0, 1e-3, seed=0)
    with reserve(None, [request.event()]) as loose:
        assert loose.accountants == ()
        with PrivacyAccountant(epsilon=10.0, delta=1e-2) as outer:
            with pytest.raises(ValueError, match="charges no accountant"):
                model.release(XNEW, epsilon=2.0, delta=1e-3, seed=0, accountant=loose)
        assert draws == [] and outer.ledger == () and outer.held == (0.0, 0.0) and loose.uncommitted == 1
        model.release(XNEW, epsilon=2.0, delta=1e-3, seed=0, accountant=loose)  # no block open: none to charge
    assert len(draws) == 1 and outer.ledger == ()


def test_a_reservation_charging_no_accountant_is_borrowed_while_another_thread_has_a_with_block():
    """The empty reservation's refusal reads this context's blocks only: a ``with PrivacyAccountant(...)`` another
    thread opened after the release began is not this release's. Before, reserve's borrow asked
    resolve_accountant(None), which raises when a block is open in any thread (RuntimeError: a wrong refusal of
    the release's own nested borrow, as a nested measure makes); now borrowed. A block of this context still
    refuses it (the test above)."""
    import threading

    from dpgp_gpflow.accounting import reserve
    from dpgp_gpflow.mechanisms import release_request

    events = (release_request(1.0, 1e-3, objective=None).event(),)
    opened, done = threading.Event(), threading.Event()

    def other() -> None:
        with PrivacyAccountant(epsilon=5.0, delta=1e-2):
            opened.set()
            done.wait(10.0)

    with reserve(None, events) as outer:  # no block open anywhere: a release with no accountant
        thread = threading.Thread(target=other)
        thread.start()
        try:
            assert opened.wait(10.0)
            borrowed = reserve(outer, events)  # the same release's borrow, while the other thread's block is open
            assert borrowed.accountants == () and borrowed.uncommitted == 1
            with PrivacyAccountant(epsilon=5.0, delta=1e-2), pytest.raises(ValueError, match="charges no accountant"):
                reserve(outer, events)  # a block of this context: refused as before
        finally:
            done.set()
            thread.join()
