"""Output bounds too narrow for float64 (red-team R, session 19, a5): a width below ~5e-155 passed the public checks,
then q's bound ``d^2 / 4`` underflowed inside the release: a refusal after the reservation, or (seeded) q released
as NaN and charged. The whole-row setup now applies the package's one rule for a data sensitivity
(``validation.MIN_DATA_SENSITIVITY`` = 1e-100, docs/privacy_model.md invariant 7) before anything is reserved, and
the noise step refuses a query that is not finite (seeded too), so nothing is charged for a NaN."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow import sampling
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.streaming import LocalChunks
from dpgp_gpflow.validation import MIN_DATA_SENSITIVITY
from dpgp_gpflow.whole_rows import mechanism as mechanism_module

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ReproducibleNoiseWarning")

BOX = np.array([[0.0, 1.0]])
Z = wr.inducing_grid(BOX, 4)
X = np.linspace(0.0, 1.0, 10)[:, None]
SCHEMES = [dict(noise_variance=0.1), dict(variances="fit"), dict(noise_variance=0.1, residual_fractions="default"),
           dict(noise_variance=0.1, residual_fractions="histogram")]


def _release(width, accountant, seed=1, **options):
    return wr.release_rows(LocalChunks(X, np.full((10, 1), width), 5), gpflow.kernels.SquaredExponential(lengthscales=0.3),
                           Z, x_bounds=BOX, y_bounds=(0.0, width), epsilon=1.0, delta=1e-5, seed=seed,
                           accountant=accountant, **options)


@pytest.mark.parametrize("options", SCHEMES, ids=["given", "fit", "residual", "histogram"])
@pytest.mark.parametrize("width", [1e-101, 1e-155, 1e-170])
def test_bounds_narrower_than_the_smallest_data_sensitivity_are_refused_before_anything_is_reserved(
        draws, monkeypatch, width, options):
    from dpgp_gpflow import measurement

    monkeypatch.setattr(measurement, "reserve", lambda *a, **k: pytest.fail("reserved"))
    accountant = dp.PrivacyAccountant(epsilon=10.0, delta=1e-3)
    with pytest.raises(ValueError, match="at least 1e-100"):
        _release(width, accountant, **options)
    assert accountant.spent == (0.0, 0.0) and draws == []


def test_the_smallest_width_releases_finite_statistics():
    """At the rule's edge, ``d = 1e-100``: ``d^2 / 4`` = 2.5e-201 is a normal float64 and every released value and
    prediction is finite (the seeded release: the path that published NaN)."""
    assert MIN_DATA_SENSITIVITY == 1e-100
    released = _release(MIN_DATA_SENSITIVITY, dp.PrivacyAccountant(epsilon=10.0, delta=1e-3), noise_variance=0.1)
    assert all(np.all(np.isfinite(v)) for v in released.statistics.values())
    assert np.all(np.isfinite(released.predict_f(X)[0]))


@pytest.mark.parametrize("seed", [1, None])
def test_a_query_that_is_not_finite_is_refused_and_charges_nothing(monkeypatch, seed):
    """Any other overflow (q made infinite here) is refused by the noise step, seeded or exact, before the commit:
    nothing is charged (seeded, it published q = NaN and charged before)."""
    honest = mechanism_module.sufficient_statistics

    def overflowed(source, rows):
        exact = honest(source, rows)
        return exact._replace(q=np.inf)

    monkeypatch.setattr(mechanism_module, "sufficient_statistics", overflowed)
    accountant = dp.PrivacyAccountant(epsilon=10.0, delta=1e-3)
    with pytest.raises(ValueError, match="finite"):  # exact: grid_sum refused it before too; seeded: it did not
        _release(1.0, accountant, seed=seed, noise_variance=0.1)
    assert accountant.spent == (0.0, 0.0) and [e["status"] for e in accountant.history()] == ["cancelled"]
    monkeypatch.setattr(sampling, "standard_normal", lambda *args: pytest.fail("drew noise for a non-finite query"))
    with pytest.raises(ValueError, match="not finite.*nothing drawn"):  # the noise step itself, at this case's seed
        sampling.add_whitened_noise(np.array([0.0, np.nan]), seed=seed)
