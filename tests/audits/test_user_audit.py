"""dp.audit (dpgp_gpflow.privacy_audit), the auditor's check of a published release: d and the map come
from the model, the mean must lie in the span its noise covers, malformed factors are refused.

References are independent NumPy: the cloaking matrix K_*f (K + s2 I)^{-1} from the kernel formula, the
posterior mean, and the span residual by least squares."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import gpflow
import numpy as np
import pytest
import scipy.linalg

import dpgp_gpflow as dp
from dpgp_gpflow.models import DPGPR, DPGPRFITC, DPLaplaceGPC, DPSGPR
from dpgp_gpflow.neighbours import MAX_CORNER_ROWS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import auditing  # noqa: E402
from reference import k_se  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ReproducibleNoiseWarning"),
              pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ClippingWarning")]

LO, HI = 0.0, 100.0
VAR, ELL, NOISE = 4.0, 1.5, 0.5


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    X = rng.uniform(0.0, 10.0, (40, 1))
    Y = 50.0 + 20.0 * np.sin(X) + 3.0 * rng.standard_normal((40, 1))
    Xnew = np.linspace(0.0, 10.0, 12)[:, None]
    return X, Y, Xnew


def model(data, d=None):
    X, Y, _ = data
    kernel = gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=ELL)
    return DPGPR((X, Y), kernel, y_bounds=(LO, HI), noise_variance=NOISE, data_sensitivity=d,
                 hyperparameters_public=True)


def numpy_map(data):
    X, _, Xnew = data
    return np.linalg.solve(k_se(X, X, VAR, ELL) + NOISE * np.eye(len(X)), k_se(X, Xnew, VAR, ELL)).T  # [k, n]


def test_an_honest_release_passes_and_its_mean_lies_in_the_noise_span(data):
    m = model(data)
    rel = m.release(data[2], epsilon=1.0, delta=1e-3, seed=4).unclipped()  # the raw DP mean (default: clipped)
    report = dp.audit(rel, m, data[2])
    assert report.passed and report.epsilon == pytest.approx(1.0, rel=1e-5)
    F = rel.noise_factor
    coeff = np.linalg.lstsq(F, rel.mean - 50.0, rcond=None)[0]  # the offset is the public midpoint
    assert np.linalg.norm(F @ coeff - (rel.mean - 50.0)) <= 1e-9 * np.linalg.norm(rel.mean)


def test_a_release_for_d_1_fails_against_the_model_with_d_100(data):
    """The review's case: a release noised for d = 1 passed an audit that took d from the release."""
    small = model(data, d=1.0)
    rel = small.release(data[2], epsilon=1.0, delta=1e-3, seed=4)
    assert dp.audit(rel, small, data[2]).passed  # honest for what it claims
    report = dp.audit(rel, model(data), data[2])  # the data's real sensitivity: hi - lo = 100
    assert not report.passed and report.epsilon > 50.0
    mu = 100.0 * np.max(np.linalg.norm(np.linalg.lstsq(rel.noise_factor, numpy_map(data), rcond=None)[0], axis=0))
    assert report.releases[0].mu == pytest.approx(mu, rel=1e-6)  # numpy: d max ||F^+ c_i|| with the model's d


def test_a_forged_non_private_mean_fails(data):
    """A file whose "mean" is the non-private posterior mean, next to an honest low-rank noise factor: C is
    full rank (k = 12 <= n), the factor is not, so the forged mean has a part no noise covers."""
    m = model(data)
    C = numpy_map(data)
    assert np.linalg.matrix_rank(C) == C.shape[0]
    rel = m.release(data[2], epsilon=1.0, delta=1e-3, seed=4, rtol=0.1).unclipped()  # the raw DP mean
    assert rel.noise_factor.shape[1] < C.shape[0]  # a low-rank noise factor
    y_c = np.clip(data[1][:, 0], LO, HI) - 50.0
    posterior_mean = 50.0 + C @ y_c  # numpy, non-private
    np.testing.assert_allclose(posterior_mean, m.predict_f(data[2])[0].numpy()[:, 0], rtol=1e-8)
    forged = dataclasses.replace(rel, mean=posterior_mean)
    report = dp.audit(forged, m, data[2])
    assert not report.passed
    assert report.releases[0].epsilon == pytest.approx(1.0, rel=1e-5)  # the noise description alone is fine
    assert report.releases[0].mean_outside > 1e-6
    assert dp.audit(rel, m, data[2]).passed  # the honest release with the same factor passes
    assert not dp.audit(forged.clipped(), m, data[2]).passed  # clipping (nothing to clip here) hides nothing


def test_a_clipped_release_passes_and_only_its_inner_values_are_checked(data):
    """Clipping to the bounds is post-processing: values at a bound leave span(F), the others must not (a
    necessary condition, with power only when more values lie inside than the noise has directions)."""
    X, Y, _ = data
    Xnew = np.linspace(0.0, 10.0, 30)[:, None]
    kernel = gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=ELL)
    m = DPGPR((X, Y), kernel, y_bounds=(35.0, 65.0), noise_variance=NOISE, hyperparameters_public=True)
    # clipped without its raw mean, as read from a file saved clipped (in memory the audit reads the raw mean)
    raw = m.release(Xnew, epsilon=2.0, delta=1e-3, seed=4, rtol=0.1).unclipped()
    rel = dataclasses.replace(raw, clip_to_bounds=True)
    at_bounds = ((rel.mean == 35.0) | (rel.mean == 65.0))[:, 0]  # [k]: the mean is [k, 1]
    assert 0 < at_bounds.sum() and (~at_bounds).sum() > rel.rank  # some values clipped, more inside than r
    assert dp.audit(rel, m, Xnew).passed
    inner = np.flatnonzero(~at_bounds)[0]
    shifted = rel.mean.copy()
    shifted[inner] += 1e-3 if rel.mean[inner] < 50.0 else -1e-3  # stays inside the bounds
    forged = dataclasses.replace(rel, mean=shifted)
    assert not dp.audit(forged, m, Xnew).passed

    def outside(mean):  # NumPy: the inner values' distance from the span of their rows of F (offset 50)
        F, v = rel.noise_factor[~at_bounds], mean[~at_bounds] - 50.0
        return np.linalg.norm(F @ np.linalg.lstsq(F, v, rcond=None)[0] - v)

    assert outside(rel.mean) <= 1e-9 * np.linalg.norm(rel.mean) and outside(shifted) > 1e-6  # the same verdicts


@pytest.mark.parametrize("factor, message", [
    (lambda F: F[:, :0], "no columns"),
    (lambda F: np.where(np.arange(F.size).reshape(F.shape) == 0, np.nan, F), "not finite"),
    (lambda F: F[:-1], "matrix"),
    (lambda F: F[:, 0], "matrix"),
    (lambda F: 0.0 * F, "zero"),
])
def test_malformed_noise_factors_are_refused_with_a_clear_error(data, factor, message):
    m = model(data)
    rel = m.release(data[2], epsilon=1.0, delta=1e-3, seed=4)
    with pytest.raises(ValueError, match=message):
        dp.audit(dataclasses.replace(rel, noise_factor=factor(rel.noise_factor)), m, data[2])


def test_a_two_step_classifier_passes_and_a_forged_second_step_fails(data):
    """Step 2 has a public offset b_2 (linearised at the released step 1): the audit recomputes it."""
    X = data[0]
    labels = np.where(np.sin(X) > 0, 1.0, -1.0)
    clf = DPLaplaceGPC((X, labels), gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=ELL),
                       hyperparameters_public=True)
    released = clf.release(epsilon=1.0, delta=1e-3, steps=2, seed=3)
    assert dp.audit(released, clf).passed
    second = released.releases[1]
    low = dataclasses.replace(second, noise_factor=second.noise_factor[:, :3])  # a factor covering 3 directions
    forged = type(released)([released.releases[0], low], released.readout)
    report = dp.audit(forged, clf)
    assert not report.passed and report.releases[1].mean_outside > 1e-6


# ---------------------------------------------------------------------------------------------
# Persons and several outputs (issue 28): a release that ignores them fails against the model that has them


#: three outputs of widths 5, 10 and 20; persons of three consecutive rows of the sorted inputs
OUT_BOUNDS = np.array([[2.0, 7.0], [0.0, 10.0], [-10.0, 10.0]])
TRIPLES = np.repeat(np.arange(6), 3)


@pytest.fixture(scope="module")
def persons_data():
    rng = np.random.default_rng(12)
    X = np.sort(rng.uniform(0.0, 10.0, 18))[:, None]
    lo, hi = OUT_BOUNDS[:, 0], OUT_BOUNDS[:, 1]
    Y = (lo + hi) / 2 + 0.3 * (hi - lo) * np.sin(X + np.arange(3))
    Xnew = np.linspace(0.0, 10.0, 7)[:, None]
    C = np.linalg.solve(k_se(X, X, VAR, ELL) + NOISE * np.eye(len(X)), k_se(X, Xnew, VAR, ELL)).T
    return X, Y, Xnew, C


def outputs_model(X, Y, bounds, **kw):
    return DPGPR((X, Y), gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=ELL), y_bounds=bounds,
                 noise_variance=NOISE, hyperparameters_public=True, **kw)


def brute_force_mu(rel, C, widths, groups=None):
    """NumPy: the largest ||F^+ v|| over every corner of every person's heterogeneous box (the stacked
    release output by output, output p of each of the person's rows within [-d_p, d_p])."""
    P, n = len(widths), C.shape[1]
    scaled = np.kron(np.eye(P), C) * np.repeat(np.asarray(widths) / np.max(widths), n)[None, :]
    rows = np.arange(n) if groups is None else np.asarray(groups)
    shifts, _ = auditing.person_shifts(scaled, np.tile(rows, P), float(np.max(widths)))
    return float(np.max(np.linalg.norm(auditing.whiten(rel.noise_factor, shifts), axis=1)))


def test_a_release_of_rows_of_several_outputs_fails_against_the_persons(persons_data):
    X, Y, Xnew, C = persons_data
    bounds, widths = OUT_BOUNDS[:2], OUT_BOUNDS[:2, 1] - OUT_BOUNDS[:2, 0]
    grouped = outputs_model(X, Y[:, :2], bounds, groups=TRIPLES)
    assert dp.audit(grouped.release(Xnew, epsilon=1.0, delta=1e-3, seed=4), grouped, Xnew).passed
    rows = outputs_model(X, Y[:, :2], bounds)
    rel = rows.release(Xnew, epsilon=1.0, delta=1e-3, seed=4)  # each row its own person (P outputs)
    assert dp.audit(rel, rows, Xnew).passed
    report = dp.audit(rel, grouped, Xnew)
    assert not report.passed and report.epsilon > 2.0
    # the audit's mu: persons of 3 rows x 2 outputs = 6 entries > MAX_CORNER_ROWS, so its documented bound,
    # at least the exact corner maximum and at most |G| = 6 times the per-entry one
    assert 3 * 2 > MAX_CORNER_ROWS
    exact = brute_force_mu(rel, C, widths, TRIPLES)
    assert exact * (1 - 1e-9) <= report.releases[0].mu <= 6.0 * brute_force_mu(rel, C, widths) * (1 + 1e-9)
    assert exact * rel.noise_multiplier > 1.5  # the exact corner alone is outside the claim


def test_a_release_calibrated_on_the_first_outputs_bounds_fails_against_the_real_bounds(persons_data):
    """Ignoring the heterogeneous bounds: every output calibrated with the first output's width (5)."""
    X, Y, Xnew, C = persons_data
    widths = OUT_BOUNDS[:, 1] - OUT_BOUNDS[:, 0]
    narrow = outputs_model(X, Y, OUT_BOUNDS, data_sensitivity=[widths[0]] * 3)
    rel = narrow.release(Xnew, epsilon=1.0, delta=1e-3, seed=4)
    assert dp.audit(rel, narrow, Xnew).passed  # honest for what it claims
    report = dp.audit(rel, outputs_model(X, Y, OUT_BOUNDS), Xnew)
    assert not report.passed and report.epsilon > 2.0
    # rows of 3 outputs: every corner, so the audit's mu is exact
    assert report.releases[0].mu == pytest.approx(brute_force_mu(rel, C, widths), rel=1e-6)


def test_a_release_for_smaller_persons_fails_against_the_real_ones(persons_data):
    """Persons split in two (rows 3 i, 3 i + 1 and 3 i + 2 apart) against the real persons of three rows."""
    X, Y, Xnew, C = persons_data
    split = np.arange(18) // 3 * 2 + (np.arange(18) % 3 == 2)
    made = outputs_model(X, Y[:, 1:2], OUT_BOUNDS[1], groups=split)
    rel = made.release(Xnew, epsilon=1.0, delta=1e-3, seed=4)
    assert dp.audit(rel, made, Xnew).passed
    report = dp.audit(rel, outputs_model(X, Y[:, 1:2], OUT_BOUNDS[1], groups=TRIPLES), Xnew)
    assert not report.passed and report.epsilon > 1.2
    assert report.releases[0].mu == pytest.approx(brute_force_mu(rel, C, [10.0], TRIPLES), rel=1e-6)  # 3 rows: exact


def sparse_numpy_map(X, Z, Xnew, fitc):
    """NumPy: the sparse predictive mean's map K_*u (Kuu + Kuf L^{-1} Kfu)^{-1} Kuf L^{-1} (Kuu with GPflow's
    jitter), L = s2 I (SGPR) or diag(Kff - Qff) + s2 I (FITC)."""
    Kuu = k_se(Z, Z, VAR, ELL) + gpflow.config.default_jitter() * np.eye(len(Z))
    Kuf = k_se(Z, X, VAR, ELL)
    lam = np.full(len(X), NOISE)
    if fitc:
        lam = lam + VAR - np.sum(Kuf * np.linalg.solve(Kuu, Kuf), axis=0)
    return k_se(Xnew, Z, VAR, ELL) @ np.linalg.solve(Kuu + (Kuf / lam) @ Kuf.T, Kuf / lam)


@pytest.mark.parametrize("cls", [DPSGPR, DPGPRFITC])
def test_a_sparse_release_of_rows_fails_against_the_persons(persons_data, cls):
    """The releases at Xnew (PrivateRelease; release_function is tests/test_groups.py's)."""
    X, Y, Xnew, _ = persons_data

    def sparse(**kw):
        return cls((X, Y[:, 1:2]), gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=ELL), X[::3].copy(),
                   noise_variance=NOISE, y_bounds=tuple(OUT_BOUNDS[1]), hyperparameters_public=True, **kw)

    grouped = sparse(groups=TRIPLES)
    honest = grouped.release(Xnew, epsilon=1.0, delta=1e-3, seed=4)
    assert dp.audit(honest, grouped, Xnew).passed
    per_row = sparse().release(Xnew, epsilon=1.0, delta=1e-3, seed=4)
    report = dp.audit(per_row, grouped, Xnew)
    assert not report.passed and report.epsilon > 2.0
    # the same verdicts by brute force in NumPy: the sparse map (checked against GPflow's predictive mean),
    # then the largest whitened shift over every corner of every person of 3 rows, against the claim 1/s
    C = sparse_numpy_map(X, X[::3], Xnew, cls is DPGPRFITC)
    mid = float(np.mean(OUT_BOUNDS[1]))
    np.testing.assert_allclose(mid + C @ (np.clip(Y[:, 1], *OUT_BOUNDS[1]) - mid),
                               grouped.predict_f(Xnew)[0].numpy()[:, 0], rtol=1e-6)
    assert brute_force_mu(honest, C, [10.0], TRIPLES) * honest.noise_multiplier <= 1.0 + 1e-6
    assert brute_force_mu(per_row, C, [10.0], TRIPLES) * per_row.noise_multiplier > 1.5


def test_a_release_of_rows_fails_against_persons_above_the_corner_limit(persons_data):
    """Persons of 6 rows: the audit uses the documented bound |G| max ||F^+ c_i||; a per-row release fails it
    and fails the exact corner maximum too (so the catch is not an artefact of the bound)."""
    X, Y, Xnew, C = persons_data
    sixes = np.repeat(np.arange(3), 6)
    grouped = outputs_model(X, Y[:, 1:2], OUT_BOUNDS[1], groups=sixes)
    assert dp.audit(grouped.release(Xnew, epsilon=1.0, delta=1e-3, seed=4), grouped, Xnew).passed
    rel = outputs_model(X, Y[:, 1:2], OUT_BOUNDS[1]).release(Xnew, epsilon=1.0, delta=1e-3, seed=4)
    report = dp.audit(rel, grouped, Xnew)
    assert not report.passed
    exact = brute_force_mu(rel, C, [10.0], sixes)
    assert report.releases[0].mu >= exact * (1 - 1e-9) and exact * rel.noise_multiplier > 1.5


@pytest.mark.parametrize("cls", [DPSGPR, DPGPRFITC])
def test_sparse_releases_of_several_outputs_that_ignore_them_fail(persons_data, cls):
    """P = 2 outputs (widths 10 and 20) on the sparse models: each output released alone (its own person),
    every output calibrated on the first output's width, and a release of rows against persons of 3 rows
    (at Xnew and as a function) all fail against the model that has them; the honest releases pass."""
    X, Y, Xnew, _ = persons_data
    bounds = OUT_BOUNDS[1:]

    def sparse(Y_, b, **kw):
        return cls((X, Y_), gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=ELL), X[::3].copy(),
                   noise_variance=NOISE, y_bounds=b, hyperparameters_public=True, **kw)

    options = dict(epsilon=1.0, delta=1e-3, seed=4)
    m = sparse(Y[:, 1:], bounds)
    rel = m.release(Xnew, **options).unclipped()  # the raw DP means, joined below
    assert dp.audit(rel, m, Xnew).passed and dp.audit(m.release_function(**options), m).passed
    alone = [sparse(Y[:, p:p + 1], tuple(bounds[p - 1])).release(Xnew, **options).unclipped() for p in (1, 2)]
    joined = dataclasses.replace(rel, mean=np.hstack([r.mean for r in alone]),  # [k, 1] each -> [k, 2]
                                 noise_factor=scipy.linalg.block_diag(*[r.noise_factor for r in alone]),
                                 noise_std=np.hstack([r.noise_std for r in alone]))
    assert not dp.audit(joined, m, Xnew).passed
    narrow = sparse(Y[:, 1:], bounds, data_sensitivity=[10.0, 10.0])
    narrow_rel = narrow.release(Xnew, **options)
    assert dp.audit(narrow_rel, narrow, Xnew).passed
    assert not dp.audit(narrow_rel, m, Xnew).passed
    grouped = sparse(Y[:, 1:], bounds, groups=TRIPLES)
    assert dp.audit(grouped.release(Xnew, **options), grouped, Xnew).passed
    report = dp.audit(rel, grouped, Xnew)
    assert not report.passed and report.epsilon > 2.0
    # the same verdicts by brute force in NumPy over every corner (widths 10 and 20; rows, then persons of 3)
    C, widths = sparse_numpy_map(X, X[::3], Xnew, cls is DPGPRFITC), bounds[:, 1] - bounds[:, 0]
    assert brute_force_mu(rel, C, widths) * rel.noise_multiplier <= 1.0 + 1e-6
    assert brute_force_mu(narrow_rel, C, widths) * narrow_rel.noise_multiplier > 1.5
    assert brute_force_mu(rel, C, widths, TRIPLES) * rel.noise_multiplier > 1.5
    assert not dp.audit(m.release_function(**options), grouped).passed
