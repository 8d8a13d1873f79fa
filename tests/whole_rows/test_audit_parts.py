"""``dp.audit``'s noise test of a whole-row release part by part (docs/whole_rows.md#the-audit; red-team R, session
19): one chi-square test over every part together passed a release whose ``b`` (or last residual stage) was published
exactly, its missing noise moved into another part. Each part (``S``, ``b``, ``q`` of every candidate or class block,
every later stage, the histogram's counts) is now tested on its own at ``NOISE_FALSE_ALARM / parts``.

The forgeries are made by the package's own release code with a dishonest sampler (``sampling.add_whitened_noise``
monkeypatched): the noise of chosen entries of the whitened vector removed (published exactly), another part's
scaled; everything after the draw (posterior, radii, estimates) is then what an honest forger replaying the release
would publish. References: the statistic in NumPy from the released and the exactly recomputed statistics, the
interval from ``scipy.stats.chi2``."""

from __future__ import annotations

import math
import warnings

import gpflow
import numpy as np
import pytest
from scipy import stats

import dpgp_gpflow as dp
from dpgp_gpflow import sampling
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.models import DPSGPR, DPSparseMulticlassLaplaceGPC
from dpgp_gpflow.privacy_audit import NOISE_FALSE_ALARM

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ReproducibleNoiseWarning")

BOX = [(0.0, 10.0)]
M = 5
Z = wr.inducing_grid(BOX, M)
_rng = np.random.default_rng(0)
X = _rng.uniform(0.0, 10.0, (60, 1))
Y = np.clip(0.5 + 0.4 * np.sin(X) + 0.05 * _rng.normal(size=X.shape), 0.0, 1.0)
K = M * (M + 1) // 2 + M + 1  # one block's packed entries: S's upper triangle, b, q
S_PART, B_PART, Q_PART = slice(0, M * (M + 1) // 2), slice(M * (M + 1) // 2, K - 1), slice(K - 1, K)


def _model(**options):
    return DPSGPR((X, Y), gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=2.0), Z, noise_variance=0.05,
                  y_bounds=(0.0, 1.0), x_bounds=BOX, private_inputs=True, hyperparameters_public=True, **options)


def _forging(monkeypatch, forge):
    """The sampler made dishonest: ``forge(call, z, noise)`` returns the noise to publish for its ``call``-th draw
    (``z`` the whitened query, ``noise`` the honest draw's noise)."""
    honest, calls = sampling.add_whitened_noise, []

    def dishonest(z, seed=None):
        noised, reproducible = honest(z, seed)
        z = np.asarray(z, dtype=np.float64)
        calls.append(z.size)
        return z + forge(len(calls) - 1, z, noised - z), reproducible

    monkeypatch.setattr(sampling, "add_whitened_noise", dishonest)
    return calls


def _exact(noise, *parts):
    noise = noise.copy()
    for part in parts:
        noise[part] = 0.0
    return noise


def _failed(report, part):
    assert not report.passed
    failed = [t.part for t in report.releases[0].noise_parts if t.failed]
    assert failed == [part], report.noise_test
    assert report.releases[0].noise.part == part and report.releases[0].noise.outcome == "too little noise"
    assert f"part {part}: too little noise" in report.noise_test


def test_each_part_is_tested_at_its_share_of_the_false_alarm_rate():
    """An honest release: three parts, each's statistic the NumPy sum of its squared whitened residuals against the
    model's exact sums, its interval scipy's chi-square quantiles at 1e-6 / 3 (widened by at most 1e-6)."""
    model = _model()
    release = model.release_function(epsilon=1.0, delta=1e-3, seed=1)
    report = dp.audit(release, model)
    assert report.passed and report.noise_test == "passed"
    tests = report.releases[0].noise_parts
    assert [t.part for t in tests] == ["S", "b", "q"]
    exact = wr.sufficient_statistics(dp.streaming.LocalChunks(X, Y), wr.RowStatistics(release.features, BOX, (0.0, 1.0)))
    st, std = release.statistics, release.statistics_noise_std
    upper = np.triu_indices(M)
    residuals = {"S": ((st["S"] - exact.S) / std["S"])[upper], "b": (st["b"] - exact.b) / std["b"],
                 "q": np.atleast_1d((st["q"] - exact.q) / std["q"])}
    for t in tests:
        w = residuals[t.part]
        assert t.dof == w.size and t.statistic == pytest.approx(float(w @ w), rel=1e-9, abs=1e-12)
        assert t.false_alarm == NOISE_FALSE_ALARM / 3
        lo, hi = stats.chi2.ppf(t.false_alarm / 2, w.size), stats.chi2.isf(t.false_alarm / 2, w.size)
        assert lo * (1 - 1e-6) - 1e-9 <= t.lower <= lo and hi <= t.upper <= hi * (1 + 1e-6)


def test_b_published_exactly_its_noise_moved_into_S_fails_naming_b(monkeypatch):
    """R's forgery a2: ``b`` without noise, ``S``'s noise scaled so that the squared norm of every part together is
    its mean (the one test over everything passed it)."""

    def forge(call, z, noise):
        c = math.sqrt((K - noise[Q_PART] @ noise[Q_PART]) / (noise[S_PART] @ noise[S_PART]))
        noise = _exact(noise, B_PART)
        noise[S_PART] *= c
        return noise

    model = _model()
    calls = _forging(monkeypatch, forge)
    forged = model.release_function(epsilon=1.0, delta=1e-3, seed=1)
    assert calls == [K]
    exact = wr.sufficient_statistics(dp.streaming.LocalChunks(X, Y), wr.RowStatistics(forged.features, BOX, (0.0, 1.0)))
    np.testing.assert_allclose(forged.statistics["b"], exact.b, rtol=1e-12)  # the private query, published
    _failed(dp.audit(forged, model), "b")


def test_q_published_exactly_fails_and_alone():
    """q, one entry: published exactly its statistic is 0, below the interval's lower end (~4e-14 at 1e-6 / 3)."""
    model = _model()
    release = model.release_function(epsilon=1.0, delta=1e-3, seed=2)
    exact = wr.sufficient_statistics(dp.streaming.LocalChunks(X, Y), wr.RowStatistics(release.features, BOX, (0.0, 1.0)))
    forged = release.__class__.__new__(release.__class__)
    forged.__dict__.update(release.__dict__)
    forged._statistics = {**release.statistics, "q": np.asarray(exact.q)}  # q is read by nothing predict_f reads
    _failed(dp.audit(forged, model), "q")


def test_a_lengthscale_candidates_b_published_exactly_fails_naming_it(monkeypatch):
    model = _model()
    honest = model.release_function(epsilon=1.0, delta=1e-3, seed=3, lengthscales=[1.0, 2.0, 4.0])
    report = dp.audit(honest, model)
    assert report.passed
    other = (honest.selection["chosen"] + 1) % 3
    _forging(monkeypatch, lambda call, z, noise: _exact(noise, slice(other * K + B_PART.start, other * K + B_PART.stop)))
    forged = model.release_function(epsilon=1.0, delta=1e-3, seed=3, lengthscales=[1.0, 2.0, 4.0])
    _failed(dp.audit(forged, model), f"candidate {other}: b")
    assert len(report.releases[0].noise_parts) == 9  # S, b, q of each candidate


def test_a_class_blocks_b_published_exactly_fails_naming_it(monkeypatch):
    labels = np.array([0, 1, 2] * 20)[:, None]
    model = DPSparseMulticlassLaplaceGPC((X, labels), gpflow.kernels.SquaredExponential(lengthscales=2.0), Z,
                                         num_classes=3, private_inputs=True, x_bounds=BOX, hyperparameters_public=True)
    honest = model.release(epsilon=1.0, delta=1e-3, seed=4)
    report = dp.audit(honest, model)
    assert report.passed
    _forging(monkeypatch, lambda call, z, noise: _exact(noise, slice(K + B_PART.start, K + B_PART.stop)))
    _failed(dp.audit(model.release(epsilon=1.0, delta=1e-3, seed=4), model), "class 1: b")
    assert len(report.releases[0].noise_parts) == 9  # S, b, q of each class


@pytest.mark.parametrize("scheme, stages, first", [((0.5, 0.25, 0.25), 3, 3), ("histogram", 5, 2)])
def test_the_last_residual_stage_published_exactly_fails_naming_it(monkeypatch, scheme, stages, first):
    """R's forgery a2b: the last stage's residual sum without noise (the later estimates replayed from it, as the
    release code does); stage 1 has ``first`` parts (S, b, q; the histogram's counts and b). Honest releases of both
    schemes pass (test_residual.py, test_histogram_release.py)."""
    model = _model()
    calls = _forging(monkeypatch, lambda call, z, noise: noise * (call < stages - 1))
    forged = model.release_function(epsilon=1.0, delta=1e-3, seed=5, residual_fractions=scheme)
    assert len(calls) == stages == forged.radii.size + 1
    report = dp.audit(forged, model)
    _failed(report, f"stage {stages}: residual b")
    assert len(report.releases[0].noise_parts) == first + stages - 1
