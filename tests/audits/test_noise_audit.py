"""dp.audit's noise test (issue 34 item 6): the published mean's whitened residual against the noiseless value
the audit recomputes from the model's clipped, centred outputs must look like a draw of the claimed Gaussian
(its squared norm within the two-sided chi-square interval of the noise's rank at false-alarm rate 1e-6,
docs/privacy_model.md#audits).

References are independent NumPy / SciPy: the cloaking matrix from the kernel formula, the projection onto the
noise factor's span by scipy.linalg.orth, the residual by least squares, the interval from scipy.stats.chi2."""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import gpflow
import numpy as np
import pytest
import scipy.linalg
import tensorflow as tf
from scipy import special, stats

import dpgp_gpflow as dp
from dpgp_gpflow.contract import dense_map
from dpgp_gpflow.io.format import encode_array
from dpgp_gpflow.mechanisms.cloaking import NoisePlan, cloaking_release
from dpgp_gpflow.models import DPGPR, DPGPRFITC, DPLaplaceGPC, DPMulticlassLaplaceGPC
from dpgp_gpflow.models.laplace import newton_step_cloaking
from dpgp_gpflow.privacy_audit import NOISE_FALSE_ALARM, audit_release

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from forgery import forged  # noqa: E402
from reference import k_se  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ReproducibleNoiseWarning"),
              pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ClippingWarning")]

LO, HI, MID = 0.0, 100.0, 50.0
VAR, ELL, NOISE = 4.0, 1.0, 0.5
OPTIONS = dict(epsilon=1.0, delta=1e-3)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    X = rng.uniform(0.0, 10.0, (30, 1))
    Y = MID + 20.0 * np.sin(X) + 3.0 * rng.standard_normal((30, 1))
    Xnew = np.linspace(0.0, 10.0, 20)[:, None]
    return X, Y, Xnew


def model(X, Y, **kw):
    kernel = gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=ELL)
    return DPGPR((X, Y), kernel, y_bounds=(LO, HI), noise_variance=NOISE, hyperparameters_public=True, **kw)


def numpy_map(X, Xnew):
    return np.linalg.solve(k_se(X, X, VAR, ELL) + NOISE * np.eye(len(X)), k_se(X, Xnew, VAR, ELL)).T  # [k, n]


def reference_statistic(mean, F, C, y_c, offset):
    """NumPy: ||F^+ (mean - offset - P C y_c)||^2, P the projector onto span(F); ``mean`` [k] or [k, 1]."""
    mean = np.reshape(mean, -1)
    Q = scipy.linalg.orth(F)
    w = np.linalg.lstsq(F, mean - offset - Q @ (Q.T @ (C @ y_c)), rcond=None)[0]
    return float(w @ w)


def chi2_interval(dof, alpha=NOISE_FALSE_ALARM):
    return stats.chi2.ppf(alpha / 2, dof), stats.chi2.isf(alpha / 2, dof)


# ---------------------------------------------------------------------------------------------
# Honest releases pass; their statistic is the chi-square the test assumes


@pytest.mark.parametrize("seeded", [True, False])
def test_honest_releases_pass_across_50_draws_and_their_statistic_is_chi_square(data, seeded):
    """50 releases of one noise plan (one optimiser solve, 50 draws): seeded draws (deterministic) and the
    exact sampler's grid draws (OS entropy: each fails with probability <= 1e-6 by construction)."""
    X, Y, Xnew = data
    C = numpy_map(X, Xnew)
    y_c = np.clip(Y[:, 0], LO, HI) - MID
    offset = np.full(len(Xnew), MID)
    settings = dict(data_sensitivity=HI - LO, output_bound=HI - MID, objective="mse")
    plan = NoisePlan(tf.constant(C), **settings)
    stats_, dofs = [], set()
    for seed in range(50):
        rel = cloaking_release(plan, tf.constant(y_c), tf.constant(offset), tf.zeros(len(Xnew), tf.float64),
                               seed=seed if seeded else None, y_bounds=(LO, HI), **settings, **OPTIONS)
        audited = audit_release(rel, C, data_sensitivity=HI - LO, offset=offset, y_centred=y_c)
        assert audited.passed and audited.noise.outcome == "passed", audited.noise
        assert audited.noise.statistic == pytest.approx(reference_statistic(rel.mean, rel.noise_factor, C, y_c, offset),
                                                        rel=1e-6)
        stats_.append(audited.noise.statistic)
        dofs.add(audited.noise.dof)
    (dof,) = dofs
    assert dof == plan.choose(1.0)[0].rank >= 10 and audited.noise.false_alarm == NOISE_FALSE_ALARM
    lo, hi = chi2_interval(dof)
    assert audited.noise.lower == pytest.approx(lo, rel=1e-5) and audited.noise.upper == pytest.approx(hi, rel=1e-5)
    assert audited.noise.lower <= lo and audited.noise.upper >= hi  # widened, never narrowed
    if seeded:  # deterministic: the 50 statistics are a chi-square sample of the noise's rank
        assert stats.kstest(stats_, stats.chi2(dof).cdf).pvalue > 1e-3
        assert abs(np.mean(stats_) - dof) < 4 * math.sqrt(2 * dof / 50)


def test_dp_audit_of_a_model_release_runs_the_test_against_numpy(data):
    X, Y, Xnew = data
    m = model(X, Y)
    rel = m.release(Xnew, seed=4, **OPTIONS)  # clipped by default: the audit reads its raw mean
    report = dp.audit(rel, m, Xnew)
    assert report.passed and report.noise_test == "passed"
    raw = rel.unclipped()
    expected = reference_statistic(raw.mean, raw.noise_factor, numpy_map(X, Xnew), np.clip(Y[:, 0], LO, HI) - MID,
                                   np.full(len(Xnew), MID))
    assert report.releases[0].noise.statistic == pytest.approx(expected, rel=1e-6)


# ---------------------------------------------------------------------------------------------
# What the test catches


def _noiseless(m, rel, Xnew):
    """NumPy: the projected noiseless value offset + P C y_c of ``rel``, and the unprojected offset + C y_c,
    each [k, 1] (the release's shape)."""
    X, Y = (np.asarray(a) for a in m.data)
    C, y_c = numpy_map(X, Xnew), np.clip(Y[:, 0], LO, HI) - MID
    Q = scipy.linalg.orth(rel.noise_factor)
    return (MID + Q @ (Q.T @ (C @ y_c)))[:, None], (MID + C @ y_c)[:, None]


def test_no_noise_a_fraction_of_the_noise_and_the_non_private_mean_fail(data):
    X, Y, Xnew = data
    m = model(X, Y)
    rel = m.release(Xnew, seed=4, **OPTIONS).unclipped()
    assert rel.rank >= 10 and np.linalg.matrix_rank(rel.noise_factor) == rel.rank
    projected, plain = _noiseless(m, rel, Xnew)
    noise = rel.mean - projected
    cases = {"no noise": projected, "a tenth of the noise": projected + 0.1 * noise, "offset + C y": plain}
    for name, mean in cases.items():
        report = dp.audit(dataclasses.replace(rel, mean=mean), m, Xnew)
        assert not report.passed, name
        assert report.releases[0].noise.outcome == "too little noise" and report.noise_test.startswith("failed"), name
        assert report.releases[0].epsilon == pytest.approx(1.0, rel=1e-5)  # the description alone is fine
    # a factor that claims ten times the noise drawn: the same as drawing a tenth of it
    claimed = dataclasses.replace(rel, noise_factor=10.0 * rel.noise_factor, noise_std=10.0 * rel.noise_std)
    assert dp.audit(claimed, m, Xnew).releases[0].noise.outcome == "too little noise"
    # three times the noise, or a release of other outputs: too much (decided: not vouched for)
    assert dp.audit(dataclasses.replace(rel, mean=projected + 3.0 * noise), m, Xnew).releases[0].noise.outcome == \
        "too much noise"
    small = model(X, Y, data_sensitivity=1.0)  # less noise: the release of outputs 2 units higher stands out
    assert dp.audit(small.release(Xnew, seed=4, **OPTIONS), small, Xnew).passed
    other = model(X, Y + 2.0, data_sensitivity=1.0).release(Xnew, seed=4, **OPTIONS).unclipped()
    report = dp.audit(other, small, Xnew)
    assert not report.passed and report.releases[0].noise.outcome == "too much noise"
    assert dp.audit(rel, m, Xnew).passed  # the honest one


def test_a_forged_release_file_fails_after_dp_load(data, tmp_path):
    """A consistent forgery (hash recomputed, tests/forgery.py) whose mean is offset + C y, or the projected
    noiseless value: dp.load accepts it (nothing in the file can tell), the audit with the data fails it."""
    X, Y, Xnew = data
    m = model(X, Y)
    rel = m.release(Xnew, seed=4, **OPTIONS).unclipped()
    path = rel.save(tmp_path / "release.json", inputs=Xnew)
    assert dp.audit(dp.load(path), m, Xnew).passed
    projected, plain = _noiseless(m, rel, Xnew)
    for mean in (plain, projected):
        def edit(raw, mean=mean):
            raw["arrays"]["releases/0/mean"] = encode_array(mean[:, 0])  # one output: stored [k]

        loaded = dp.load(forged(path, tmp_path, edit))
        np.testing.assert_array_equal(loaded.mean, mean)
        report = dp.audit(loaded, m, Xnew)
        assert not report.passed and report.releases[0].noise.outcome == "too little noise"


# ---------------------------------------------------------------------------------------------
# Every kind of release: each release whose input the audit can recompute is tested


def _zero_noise(rel, C, offset, y_c):
    """``rel`` with its mean at the projected noiseless value ``offset + P C y_c`` ([k, 1], NumPy)."""
    Q = scipy.linalg.orth(rel.noise_factor)
    return dataclasses.replace(rel, mean=(np.reshape(offset, -1) + Q @ (Q.T @ (C @ np.reshape(y_c, -1))))[:, None])


def test_a_function_release_in_reference_coordinates(data):
    X, Y, Xnew = data
    m = DPGPRFITC((X, Y), gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=ELL), X[::3].copy(),
                  noise_variance=NOISE, y_bounds=(LO, HI), hyperparameters_public=True)
    fn = m.release_function(reference_inputs=Xnew, seed=2, **OPTIONS)
    report = dp.audit(fn, m)
    assert report.passed and report.noise_test == "passed"
    rel = fn.releases[0]
    C = fn.coordinates.numpy() @ dense_map(m.latent_terms().map).numpy()  # R B: the release's map
    forged_fn = type(fn)(_zero_noise(rel, C, np.zeros(rel.mean.shape), m.centred_outputs().numpy()), fn.readout,
                         fn.coordinates)
    assert dp.audit(forged_fn, m).releases[0].noise.outcome == "too little noise"


def test_a_two_step_classifier_tests_each_step(data):
    """Step 2's noiseless value is recomputed at the released step 1 (public): a step 2 published without noise
    fails, and the false-alarm rate is shared by the two steps."""
    X = data[0]
    labels = np.where(np.sin(X) > 0, 1.0, -1.0)
    clf = DPLaplaceGPC((X, labels), gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=ELL),
                       hyperparameters_public=True)
    released = clf.release(steps=2, seed=3, **OPTIONS)
    report = dp.audit(released, clf)
    assert report.passed and report.noise_test == "passed"
    assert [r.noise.false_alarm for r in report.releases] == [NOISE_FALSE_ALARM / 2] * 2
    # step 1 against NumPy: C = 1/2 (K^{-1} + I/4)^{-1} = 1/2 (I + K/4)^{-1} K, offset 0, the labels themselves
    K = k_se(X, X, VAR, ELL)
    C1 = 0.5 * np.linalg.solve(np.eye(len(X)) + 0.25 * K, K)
    first = released.releases[0]
    assert report.releases[0].noise.statistic == pytest.approx(
        reference_statistic(first.mean, first.noise_factor, C1, labels[:, 0], np.zeros(len(X))), rel=1e-5)
    # step 2 published at its noiseless value C_2 y + b_2 (linearised at the released step 1)
    C2, b2 = (v.numpy() for v in newton_step_cloaking(clf.kernel(tf.constant(X)), tf.constant(first.mean)))
    second = _zero_noise(released.releases[1], C2, b2[:, 0], labels[:, 0])
    bad = dp.audit(type(released)([first, second], released.readout), clf)
    assert not bad.passed and bad.releases[1].noise.outcome == "too little noise"
    assert bad.releases[0].noise.outcome == "passed"


def test_several_outputs_persons_and_the_standard_mechanism(data):
    X, Y, Xnew = data
    two = model(X, np.hstack([Y, 100.0 - Y]))
    rel = two.release(Xnew, seed=5, **OPTIONS)
    assert dp.audit(rel, two, Xnew).noise_test == "passed"
    raw = rel.unclipped()
    # stacked output by output: C kron I_2, y = (y_1, y_2)
    Q = scipy.linalg.orth(raw.noise_factor)
    y1 = np.clip(Y[:, 0], LO, HI)
    y_c = np.concatenate([y1, 100.0 - y1]) - MID
    noiseless = MID + Q @ (Q.T @ (np.kron(np.eye(2), numpy_map(X, Xnew)) @ y_c))
    zero = dataclasses.replace(raw, mean=noiseless.reshape(2, -1).T)
    assert dp.audit(zero, two, Xnew).releases[0].noise.outcome == "too little noise"
    grouped = model(X, Y, groups=np.arange(30) // 3)
    assert dp.audit(grouped.release(Xnew, seed=6, **OPTIONS), grouped, Xnew).noise_test == "passed"
    m = model(X, Y)
    standard = m.release(Xnew, mechanism="standard", seed=7, **OPTIONS)
    report = dp.audit(standard, m, Xnew)
    assert report.passed and report.noise_test == "passed" and report.releases[0].noise.dof == len(Xnew)


def test_a_multiclass_release_tests_every_class(data):
    X = data[0]
    labels = (np.digitize(X[:, 0], [3.3, 6.6])).astype(float)[:, None]
    mc = DPMulticlassLaplaceGPC((X, labels), gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=ELL),
                                num_classes=3, hyperparameters_public=True)
    released = mc.release(seed=8, **OPTIONS)
    report = dp.audit(released, mc)
    assert report.passed and report.noise_test == "passed" and len(report.releases) == 3
    assert all(r.noise.ran and r.noise.false_alarm == NOISE_FALSE_ALARM / 3 for r in report.releases)


# ---------------------------------------------------------------------------------------------
# Where the audit cannot recompute the noiseless value, it says so


def test_the_test_is_reported_not_run_when_the_outputs_cannot_be_read(data, monkeypatch):
    X, Y, Xnew = data
    m = model(X, Y)
    rel = m.release(Xnew, seed=4, **OPTIONS)

    def unreadable():
        raise RuntimeError("the outputs are on another machine")

    monkeypatch.setattr(m, "centred_outputs", unreadable)
    report = dp.audit(rel, m, Xnew)
    assert report.passed  # the privacy of the description is still recomputed
    assert report.noise_test.startswith("not run: the model's outputs could not be read") and \
        "another machine" in report.noise_test
    assert not report.releases[0].noise.ran and math.isnan(report.releases[0].noise.statistic)


def test_a_file_saved_clipped_is_tested_on_its_inner_values_or_reported_not_run(data, tmp_path):
    """A file saved clipped keeps no raw mean: the noise is recovered from the values strictly inside the bounds
    when their rows of F have its full rank; with most values clipped it cannot be, and the test says so."""
    X, Y, Xnew = data
    small = model(X, Y, data_sensitivity=1.0)  # little noise: nothing clipped
    rel = small.release(Xnew, seed=4, **OPTIONS)
    assert rel.clip_to_bounds and not np.any((rel.mean == LO) | (rel.mean == HI))
    loaded = dp.load(rel.save(tmp_path / "clipped.json", inputs=Xnew))
    assert loaded.clip_to_bounds and dp.audit(loaded, small, Xnew).noise_test == "passed"
    partial = model(X, Y, data_sensitivity=30.0)  # one value of 20 clipped, 19 > r left
    rel = partial.release(Xnew, seed=0, **OPTIONS)
    inside = (rel.mean > LO) & (rel.mean < HI)
    assert rel.rank < inside.sum() < len(Xnew)
    loaded = dp.load(rel.save(tmp_path / "partial.json", inputs=Xnew))
    report = dp.audit(loaded, partial, Xnew)
    assert report.noise_test == "passed"  # the noise recovered from the inner values is the noise drawn
    assert report.releases[0].noise.statistic == pytest.approx(
        dp.audit(rel, partial, Xnew).releases[0].noise.statistic, rel=1e-6)
    m = model(X, Y)  # d = 100: most values clipped
    tight = m.release(Xnew, seed=4, **OPTIONS)
    inside = (tight.mean > LO) & (tight.mean < HI)
    assert inside.sum() < tight.rank  # too few values left to recover the noise
    loaded = dp.load(tight.save(tmp_path / "tight.json", inputs=Xnew))
    report = dp.audit(loaded, m, Xnew)
    assert report.passed  # the privacy of the description is still recomputed
    assert report.noise_test.startswith(f"not run: only {inside.sum()} of {len(Xnew)} values lie strictly inside")
    assert dp.audit(tight, m, Xnew).noise_test == "passed"  # in memory: its raw mean is kept


def test_the_interval_is_the_chi_square_quantiles_of_the_rank():
    """NumPy release of known noise (F = diag, r = 3): the acceptance interval is scipy's chi-square quantiles,
    widened only by the grid's and floating point's allowance."""
    F = np.diag([1.0, 2.0, 3.0])
    C = np.eye(3)
    y_c = np.array([1.0, -1.0, 0.5])
    offset = np.zeros(3)
    rel = dataclasses.replace(_fake_release(F), mean=C @ y_c + F @ np.array([0.3, -1.2, 0.8]))
    audited = audit_release(rel, C, data_sensitivity=1.0, offset=offset, y_centred=y_c)
    assert audited.noise.statistic == pytest.approx(0.3 ** 2 + 1.2 ** 2 + 0.8 ** 2, rel=1e-12)
    lo, hi = chi2_interval(3)
    # widened on the norm's scale by the grid's and floating point's allowance (~1e-8 here), never narrowed
    assert 0 <= math.sqrt(lo) - math.sqrt(audited.noise.lower) < 1e-7
    assert 0 <= math.sqrt(audited.noise.upper) - math.sqrt(hi) < 1e-7
    assert lo == pytest.approx(2 * special.gammaincinv(1.5, NOISE_FALSE_ALARM / 2), rel=1e-9)
    tiny = dataclasses.replace(rel, mean=C @ y_c + F @ np.array([1e-4, 0.0, 0.0]))
    audited = audit_release(tiny, C, data_sensitivity=1.0, offset=offset, y_centred=y_c)
    assert audited.noise.outcome == "too little noise"
    assert not audit_release(rel, C, data_sensitivity=1.0, offset=offset).noise.ran  # no outputs given: not run


def _fake_release(F):
    from dpgp_gpflow.released import PrivateRelease

    k = F.shape[0]
    return PrivateRelease(mean=np.zeros(k), variance=np.zeros(k), noise_std=np.linalg.norm(F, axis=1), noise_factor=F,
                          epsilon=1.0, delta=1e-3, data_sensitivity=1.0, sensitivity=1.0, noise_multiplier=10.0,
                          calibration="analytic", objective="mse", certificate=None, rank=k)
