"""The release budget a selection's utility assumes when none is given (issue 34 item 3): the budget the
accountant has left once the selection's own epsilon is held, else one ``ReleaseBudgetWarning`` line."""

from __future__ import annotations

import warnings

import gpflow
import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow.accounting import reserve
from dpgp_gpflow.models import DPGPR

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")

rng = np.random.default_rng(3)
X = rng.uniform(0.0, 6.0, (30, 1))
Y = np.sin(X) + 0.2 * rng.standard_normal((30, 1))
GRID = [{".kernel.lengthscales": ell, ".likelihood.variance": s} for ell in (0.3, 3.0) for s in (0.01, 0.3)]


def model():
    return DPGPR((X, Y), gpflow.kernels.SquaredExponential(), y_bounds=(-2.0, 2.0))


def select(m, **kw):
    return dp.selection.select_hyperparameters(m, GRID, epsilon=1.0, folds=3, seed=0, diagnostics=True, **kw)


def test_the_default_is_the_accountants_budget_left_after_the_selection():
    m = model()
    accountant = dp.PrivacyAccountant(epsilon=3.0, delta=1e-3)
    accountant.spend(0.5, 2e-4, description="an earlier release")
    with warnings.catch_warnings():
        warnings.simplefilter("error", dp.ReleaseBudgetWarning)
        selection, diagnostics = select(m, accountant=accountant)
    # by hand: 3 - 0.5 (earlier) - 1 (this selection); 1e-3 - 2e-4
    assert selection.epsilon_release == pytest.approx(1.5) and selection.delta_release == pytest.approx(8e-4)
    explicit, explicit_diagnostics = select(m, accountant=dp.PrivacyAccountant(epsilon=9.0, delta=1e-2),
                                            epsilon_release=1.5, delta_release=8e-4)
    np.testing.assert_allclose(diagnostics.utilities, explicit_diagnostics.utilities, rtol=1e-12)
    # the release's noise is in the utility: E|r + Z| >= |r| (Jensen), so every utility (-loss) is lower
    with pytest.warns(dp.ReleaseBudgetWarning):
        _, noiseless = select(m)
    assert np.all(diagnostics.utilities < noiseless.utilities)


def test_the_enclosing_accountants_and_a_reservation_give_the_default_too():
    outer = dp.PrivacyAccountant(epsilon=5.0, delta=1e-2)
    inner = dp.PrivacyAccountant(epsilon=2.5, delta=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dp.ReleaseBudgetWarning)
        with outer, inner:  # the smaller of the two: 2.5 - 1 and 1e-3
            selection, _ = select(model())
        assert (selection.epsilon_release, selection.delta_release) == pytest.approx((1.5, 1e-3))
        # a caller's reservation (the command line's pattern): its accountants' budget left
        ledger = dp.PrivacyAccountant(epsilon=4.0, delta=1e-3)
        with reserve(ledger, [dp.accounting.PrivacyEvent(1.0, 0.0, "pure", None, "selection")]) as held:
            selection, _ = select(model(), accountant=held)
        assert (selection.epsilon_release, selection.delta_release) == pytest.approx((3.0, 1e-3))
    assert ledger.spent == pytest.approx((1.0, 0.0))


@pytest.mark.parametrize("budget", [None, (1.0, 1e-3), (2.0, 0.0)], ids=["no-accountant", "all-spent", "pure"])
def test_without_a_budget_left_it_warns_once_in_one_line(budget):
    accountant = None if budget is None else dp.PrivacyAccountant(epsilon=budget[0], delta=budget[1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        selection, _ = select(model(), accountant=accountant)
    lines = [w for w in caught if issubclass(w.category, dp.ReleaseBudgetWarning)]
    assert len(lines) == 1 and "\n" not in str(lines[0].message) and lines[0].filename == __file__
    assert "epsilon_release" in str(lines[0].message) and "--release-epsilon" in str(lines[0].message)
    assert selection.epsilon_release is None and selection.delta_release is None
    if accountant is not None:
        assert accountant.spent[0] == pytest.approx(1.0)


def test_the_warning_made_an_error_charges_nothing():
    accountant = dp.PrivacyAccountant(epsilon=1.0, delta=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dp.ReleaseBudgetWarning)
        with pytest.raises(dp.ReleaseBudgetWarning):
            select(model(), accountant=accountant)
    assert accountant.history()[0]["status"] == "cancelled" and accountant.spent == (0.0, 0.0)
