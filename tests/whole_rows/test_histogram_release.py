"""Whole rows private, the histogram residual scheme (benchmarks/whole_rows_scheme.py's choice) as a release.

The post-processing (S^ from the released counts, tau_h, the floored preconditioner, the noise-aware first solve, the
posterior-variance radius at z = 1.5, the residual updates) equals a NumPy reference written here from the released
quantities; each stage's noise std is its charge computed here; the predictive variance's DP-noise covariance equals
a finite-difference linearisation of that reference; the stages are one event and one draw each; a grid with too
many cells is refused before anything is reserved."""

from __future__ import annotations

import math
import warnings

import gpflow
import numpy as np
import pytest
from whole_rows_reference import features as reference_features

import dpgp_gpflow as dp
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.mechanisms.request import release_request
from dpgp_gpflow.streaming import LocalChunks
from dpgp_gpflow.whole_rows.features import feature_map
from dpgp_gpflow.whole_rows.histogram_release import release_histogram_residuals
from dpgp_gpflow.whole_rows.histogram_scheme import aware_noise_covariance
from dpgp_gpflow.whole_rows.statistics import RowStatistics

BOX = [(0.0, 10.0)]
BOUNDS = (-3.0, 3.0)
LENGTHSCALE = 2.0  # 10 cells
KERNEL_VARIANCE, NOISE_VARIANCE = 1.0, 0.09
FRACTIONS = (0.3, 0.15, 0.15, 0.15, 0.25)
SHARES = (0.30, 0.68, 0.02)
EPSILON, DELTA = 2.0, 1e-3
Z = wr.inducing_grid(BOX, 6)


def _rows(n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 10.0, (n, 1)) ** 1.3 / 10.0 ** 0.3  # uneven density
    return X, np.sin(X) + 0.3 * rng.standard_normal((n, 1))


def _release(X, Y, seed=5, accountant=None, box=BOX, Zs=Z, lengthscale=LENGTHSCALE):
    request = release_request(EPSILON, DELTA, calibration="analytic", objective=None, seed=seed)
    kernel = gpflow.kernels.SquaredExponential(variance=KERNEL_VARIANCE, lengthscales=lengthscale)
    rows = RowStatistics(feature_map(kernel, Zs, box), box, BOUNDS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        return release_histogram_residuals(request, LocalChunks(X, Y, 128), rows, shares=SHARES, fractions=FRACTIONS,
                                           kernel_variance=KERNEL_VARIANCE, noise_variance=NOISE_VARIANCE,
                                           accountant=accountant)


def _floor(S, floor):
    w, V = np.linalg.eigh(S)
    return (V * np.maximum(w, floor)) @ V.T


def _first(counts, b, Pc, b_std):
    """u_1 = S (S^2 + lam S + kappa I)^{-1} b, S = sum_c max(n_c, 0) phi_c phi_c^T (written out)."""
    lam, kappa = NOISE_VARIANCE / KERNEL_VARIANCE, b_std**2 / KERNEL_VARIANCE
    S = Pc.T @ np.diag(np.maximum(counts, 0.0)) @ Pc
    w, V = np.linalg.eigh(S)
    w = np.maximum(w, 0.0)
    return V @ np.diag(w / (w**2 + lam * w + kappa)) @ V.T @ b, S


def _reference(released, Pc):
    """(radii, estimates, P) from the released counts, b, residual sums and noise stds, in NumPy."""
    st, std = released.statistics, released.statistics_noise_std
    counts_std, b_std = std["counts"][0], std["b"][0]
    u, S = _first(st["counts"], st["b"], Pc, b_std)
    M = Pc.shape[1]
    tau = counts_std * math.sqrt(2 * math.log(2 * M) * np.linalg.norm(
        sum(np.sum(p**2) * np.outer(p, p) for p in Pc), 2))
    P = _floor(S, 0.15 * tau)
    lam = NOISE_VARIANCE / KERNEL_VARIANCE
    weights = np.maximum(st["counts"], 0.0) / np.sum(np.maximum(st["counts"], 0.0))
    radii, estimates, previous = [], [u], b_std
    for b_j, s in zip(st["residual_b"], std["residual_b"][:, 0]):
        C = np.linalg.inv(np.eye(M) / KERNEL_VARIANCE + S @ np.linalg.inv(NOISE_VARIANCE * S + previous**2
                                                                          * np.eye(M)) @ S)
        v = sum(wc * p @ C @ p for wc, p in zip(weights, Pc))
        radii.append(min(1.5 * math.sqrt(NOISE_VARIANCE + v), BOUNDS[1] - BOUNDS[0]))
        u = np.linalg.solve(lam * np.eye(M) + P, b_j + P @ u)
        estimates.append(u)
        previous = s
    return np.array(radii), np.array(estimates), P, S


def _centre_features(released):
    return reference_features(released.centres, Z, LENGTHSCALE)


def test_the_post_processing_equals_a_numpy_reference_from_the_released_quantities():
    X, Y = _rows()
    released = _release(X, Y)
    assert released.centres.shape == (10, 1)
    np.testing.assert_allclose(released.centres[:, 0], np.arange(10) + 0.5)
    radii, estimates, P, _ = _reference(released, _centre_features(released))
    np.testing.assert_allclose(released.radii, radii, rtol=1e-5)
    np.testing.assert_allclose(released.estimates, estimates, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(released.preconditioner, P, rtol=1e-5, atol=1e-6)
    # each residual stage's noise std is its charge: s / sqrt(f_j) * 2 R_j times a sensitivity of one row (slack)
    s = released.noise_multiplier
    for f, m, R, std in zip(FRACTIONS[1:], released.stage_multipliers[1:], radii,
                            released.statistics_noise_std["residual_b"][:, 0]):
        assert m == pytest.approx(s / math.sqrt(f), rel=1e-9)
        assert 1.0 <= std / (m * 2.0 * R) <= 1.0 + 1e-6
    # the predictions read the last estimate
    Xt = np.linspace(0.0, 10.0, 7)[:, None]
    mean, _ = released.predict_f(Xt)
    np.testing.assert_allclose(mean[:, 0], np.clip(reference_features(Xt, Z, LENGTHSCALE) @ estimates[-1], *BOUNDS),
                               rtol=1e-4, atol=1e-5)


def test_the_dp_noise_covariance_is_the_linearised_reference():
    X, Y = _rows()
    released = _release(X, Y)
    Pc = _centre_features(released)
    st, std = released.statistics, released.statistics_noise_std
    b_std, counts_std = std["b"][0], std["counts"][0]
    _, _, P, S = _reference(released, Pc)
    M = Pc.shape[1]
    J = np.zeros((M, M + Pc.shape[0]))  # d u_1 / d (b, counts), central differences
    for k in range(M + Pc.shape[0]):
        h = 1e-4 * (1.0 if k < M else max(1.0, abs(st["counts"][k - M])))
        plus, minus = [st["b"].copy(), st["counts"].copy()], [st["b"].copy(), st["counts"].copy()]
        i, j = (0, k) if k < M else (1, k - M)
        plus[i][j] += h
        minus[i][j] -= h
        J[:, k] = (_first(plus[1], plus[0], Pc, b_std)[0] - _first(minus[1], minus[0], Pc, b_std)[0]) / (2 * h)
    lam = NOISE_VARIANCE / KERNEL_VARIANCE
    # the first stage's two parts apart (the counts' part is small beside b~'s here, so checked on its own)
    for part_b, part_n, cols in ((b_std, 0.0, slice(0, M)), (0.0, counts_std, slice(M, None))):
        got = aware_noise_covariance(S, st["counts"], Pc, st["b"], lam=lam, kappa=b_std**2 / KERNEL_VARIANCE,
                                     b_std=part_b, counts_std=part_n)
        want = (part_b**2 + part_n**2) * J[:, cols] @ J[:, cols].T
        assert np.max(np.abs(want)) > 0.0
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6 * np.max(np.abs(want)))
    C = J @ np.diag(np.r_[np.full(M, b_std**2), np.full(Pc.shape[0], counts_std**2)]) @ J.T
    A = np.linalg.inv(lam * np.eye(M) + P)
    for s in std["residual_b"][:, 0]:  # u_j = A (b - S u_{j-1} + e_j + P u_{j-1}) linearised
        C = s**2 * A @ A + A @ (P - S) @ C @ (A @ (P - S)).T
    np.testing.assert_allclose(released.noise_covariance, C, rtol=1e-3, atol=1e-6 * np.max(np.abs(C)))


def test_the_stages_are_one_event_and_one_draw_each(draws):
    acc = dp.PrivacyAccountant(epsilon=3.0, delta=1e-2)
    X, Y = _rows(60)
    released = _release(X, Y, seed=None, accountant=acc)
    M = Z.shape[0]
    assert draws == [10 + M] + [M] * 4
    (event,) = acc.history()
    assert event["status"] == "committed" and acc.spent == pytest.approx((EPSILON, DELTA))
    assert event["mu"] == pytest.approx(released.mu)
    assert released.neighbours == "row (inputs and outputs)" and not released.reproducible


def test_a_grid_with_too_many_cells_is_refused_before_anything_is_reserved(draws):
    acc = dp.PrivacyAccountant(epsilon=3.0, delta=1e-2)
    box = [(0.0, 100.0), (0.0, 100.0)]
    X = np.random.default_rng(1).uniform(0.0, 100.0, (20, 2))
    with pytest.raises(ValueError, match="cells"):
        _release(X, np.zeros((20, 1)), accountant=acc, box=box, Zs=wr.inducing_grid(box, 3), lengthscale=1.0)
    assert draws == [] and acc.history() == [] and acc.spent == (0.0, 0.0) and acc.held == (0.0, 0.0)


def test_the_model_releases_the_scheme_by_name_as_the_direct_call():
    from dpgp_gpflow.models import DPSGPR

    X, Y = _rows(120)
    kernel = gpflow.kernels.SquaredExponential(variance=KERNEL_VARIANCE, lengthscales=LENGTHSCALE)
    model = DPSGPR((X, Y), kernel, Z, noise_variance=NOISE_VARIANCE, y_bounds=BOUNDS, x_bounds=BOX,
                   private_inputs=True, hyperparameters_public=True)
    acc = dp.PrivacyAccountant(epsilon=3.0, delta=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        released = model.release_function(epsilon=EPSILON, delta=DELTA, seed=5, residual_fractions="histogram",
                                          accountant=acc)
    direct = _release(X, Y, seed=5)
    assert released.fractions == FRACTIONS and len(acc.history()) == 1
    # the same release (other chunks: the sums' rounding only)
    np.testing.assert_allclose(released.estimates, direct.estimates, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(released.radii, direct.radii, rtol=1e-10)


@pytest.mark.parametrize("options", [dict(lengthscales=[1.0, 2.0]), dict(variances="fit")])
def test_a_grid_or_fitted_variances_are_refused_before_anything_is_reserved(options, draws):
    X, Y = _rows(30)
    acc = dp.PrivacyAccountant(epsilon=3.0, delta=1e-2)
    kernel = gpflow.kernels.SquaredExponential(variance=KERNEL_VARIANCE, lengthscales=LENGTHSCALE)
    given = {} if options.get("variances") == "fit" else dict(noise_variance=NOISE_VARIANCE)
    with pytest.raises(NotImplementedError, match="histogram"):
        wr.release_rows(LocalChunks(X, Y), kernel, Z, x_bounds=BOX, y_bounds=BOUNDS, epsilon=EPSILON, delta=DELTA,
                        accountant=acc, residual_fractions="histogram", **given, **options)
    assert draws == [] and acc.history() == [] and acc.spent == (0.0, 0.0) and acc.held == (0.0, 0.0)


@pytest.mark.parametrize("scheme", ["histogram", "default", None])
@pytest.mark.parametrize("bad", [dict(kernel_variance=-1.0), dict(kernel_variance=0.0),
                                 dict(kernel_variance=float("nan")), dict(noise_variance=float("nan"))])
def test_a_bad_kernel_or_noise_variance_is_refused_before_anything_is_reserved(scheme, bad, draws):
    """Histogram, default residual fractions and one release alike: nothing drawn, nothing spent."""
    X, Y = _rows(30)
    acc = dp.PrivacyAccountant(epsilon=3.0, delta=1e-2)
    kernel = gpflow.kernels.SquaredExponential(variance=KERNEL_VARIANCE, lengthscales=LENGTHSCALE)
    given = {"kernel_variance": KERNEL_VARIANCE, "noise_variance": NOISE_VARIANCE, **bad}
    with pytest.raises(ValueError, match="variance"):
        wr.release_rows(LocalChunks(X, Y), kernel, Z, x_bounds=BOX, y_bounds=BOUNDS, epsilon=EPSILON, delta=DELTA,
                        accountant=acc, residual_fractions=scheme, seed=3, **given)
    assert draws == [] and acc.history() == [] and acc.spent == (0.0, 0.0) and acc.held == (0.0, 0.0)


def test_the_residual_stages_read_the_kept_features_with_the_same_numbers(monkeypatch):
    from dpgp_gpflow.whole_rows import residual

    X, Y = _rows(300)
    calls = []
    original = residual.ResidualStatistics.__call__
    monkeypatch.setattr(residual.ResidualStatistics, "__call__",
                        lambda self, *args: calls.append(1) or original(self, *args))
    held = _release(X, Y, seed=7)
    assert calls == []  # every residual stage summed the features kept by the histogram's pass
    monkeypatch.setattr(residual, "MAX_HELD_FEATURES", 0)  # too many to keep: every stage reads the rows
    read = _release(X, Y, seed=7)
    assert len(calls) == 4 * 3  # 4 stages x 3 chunks of 128 rows
    np.testing.assert_allclose(held.estimates, read.estimates, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(held.radii, read.radii)


def test_a_dask_source_gives_the_in_memory_release():
    da = pytest.importorskip("dask.array")
    from dpgp_gpflow.distributed import DaskChunks

    X, Y = _rows(200)
    request = release_request(EPSILON, DELTA, calibration="analytic", objective=None, seed=9)
    kernel = gpflow.kernels.SquaredExponential(variance=KERNEL_VARIANCE, lengthscales=LENGTHSCALE)
    rows = RowStatistics(feature_map(kernel, Z, BOX), BOX, BOUNDS)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        for source in (LocalChunks(X, Y, 50), DaskChunks(da.from_array(X, chunks=(50, 1)),
                                                         da.from_array(Y, chunks=(50, 1)))):
            out.append(release_histogram_residuals(request, source, rows, shares=SHARES, fractions=FRACTIONS,
                                                   kernel_variance=KERNEL_VARIANCE, noise_variance=NOISE_VARIANCE))
    local, on_dask = out
    np.testing.assert_allclose(on_dask.statistics["counts"], local.statistics["counts"], rtol=1e-10)
    np.testing.assert_allclose(on_dask.estimates, local.estimates, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(on_dask.radii, local.radii, rtol=1e-10)


def _model(X, Y, **options):
    from dpgp_gpflow.models import DPSGPR

    kernel = gpflow.kernels.SquaredExponential(variance=KERNEL_VARIANCE, lengthscales=LENGTHSCALE)
    return DPSGPR((X, Y), kernel, Z, noise_variance=NOISE_VARIANCE, y_bounds=BOUNDS, x_bounds=BOX,
                  private_inputs=True, hyperparameters_public=True, **options)


def test_the_audit_recomputes_every_radius_and_the_noise_within_the_claim():
    import copy

    X, Y = _rows(150)
    model = _model(X, Y)
    released = model.release_function(epsilon=EPSILON, delta=DELTA, residual_fractions="histogram")
    report = dp.audit(released, model)
    assert report.passed and 0.99 * EPSILON <= report.epsilon <= EPSILON * (1 + 1e-9)
    less = copy.copy(released)  # the last stage with half the noise it claims: more privacy lost than claimed
    less._noise_std = {**released._noise_std, "residual_b": released._noise_std["residual_b"].copy()}
    less._noise_std["residual_b"][-1] *= 0.5
    forged = dp.audit(less, model)
    assert not forged.passed and forged.epsilon > 1.2 * EPSILON
    wider = copy.copy(released)
    wider.radii = released.radii * np.r_[1.5, np.ones(released.radii.size - 1)]
    with pytest.raises(ValueError, match="radius"):
        dp.audit(wider, model)
    # the loaders' rule (residual_bounds.radii_replayed at the constructor's 1e-12), not a second one: radii with their
    # noise a hair smaller (9e-13) or larger (1e-10), both within the audit's old two-sided 1e-9 (passed before; the
    # constructor refuses both); the last stage's radius dropped, its noise cut to 1e-3 (passed before: left out)
    for change in (1.0 - 9e-13, 1.0 + 1e-10):
        hair = copy.copy(released)
        hair.radii = released.radii * change
        hair._noise_std = {**released._noise_std, "residual_b": released._noise_std["residual_b"] * change}
        with pytest.raises(ValueError, match="never below"):
            dp.audit(hair, model)
    dropped = copy.copy(released)
    dropped.radii = released.radii[:-1]
    dropped._noise_std = {**released._noise_std, "residual_b": released._noise_std["residual_b"].copy()}
    dropped._noise_std["residual_b"][-1] *= 1e-3
    with pytest.raises(ValueError, match="one per stage"):
        dp.audit(dropped, model)
    other = copy.copy(released)
    other.estimates = released.estimates + 0.01
    with pytest.raises(ValueError, match="estimates"):
        dp.audit(other, model)


def test_the_audit_refuses_a_release_made_at_other_variances_than_the_models():
    """The model's kernel bound and likelihood variance are what its release uses: a release made at other variances
    (each self-consistent, its radii and estimates those its variances give) is not this model's."""
    X, Y = _rows(80)
    model = _model(X, Y)
    kernel = gpflow.kernels.SquaredExponential(variance=KERNEL_VARIANCE, lengthscales=LENGTHSCALE)
    for given in (dict(kernel_variance=2.0 * KERNEL_VARIANCE, noise_variance=NOISE_VARIANCE),
                  dict(kernel_variance=KERNEL_VARIANCE, noise_variance=2.0 * NOISE_VARIANCE)):
        other = wr.release_rows(LocalChunks(X, Y), kernel, Z, x_bounds=BOX, y_bounds=BOUNDS, epsilon=EPSILON,
                                delta=DELTA, residual_fractions="histogram", **given)
        with pytest.raises(ValueError, match="variances"):
            dp.audit(other, model)
    same = wr.release_rows(LocalChunks(X, Y), kernel, Z, x_bounds=BOX, y_bounds=BOUNDS, epsilon=EPSILON, delta=DELTA,
                           residual_fractions="histogram", kernel_variance=KERNEL_VARIANCE,
                           noise_variance=NOISE_VARIANCE)
    assert dp.audit(same, model).passed


def test_the_audit_fails_a_release_whose_counts_were_charged_as_if_a_row_moved_them_by_one(monkeypatch):
    """The first stage broken: the counts scaled to a unit bound, not sqrt 2 (their noise sqrt 2 too small). The
    audit takes sqrt 2 from the mechanism, not from the module's constant, so it finds more privacy lost than
    claimed."""
    from dpgp_gpflow.whole_rows import residual_bounds  # the histogram's noise rule (histogram_noise_stds)

    X, Y = _rows(150)
    model = _model(X, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        honest = model.release_function(epsilon=EPSILON, delta=DELTA, seed=8, residual_fractions="histogram")
        monkeypatch.setattr(residual_bounds, "COUNT_BOUND", 1.0)
        broken = model.release_function(epsilon=EPSILON, delta=DELTA, seed=8, residual_fractions="histogram")
    ratio = broken.statistics_noise_std["counts"][0] / honest.statistics_noise_std["counts"][0]
    assert ratio == pytest.approx(1.0 / math.sqrt(2.0), rel=1e-9)  # the monkeypatch reached the release
    report = dp.audit(broken, model)
    assert not report.passed and report.epsilon > 1.03 * EPSILON  # 1.055 times the claim here


def test_persons_are_charged_as_their_largest_in_every_stage():
    X, Y = _rows(60)
    groups = np.repeat(np.arange(20), 3)  # persons of 3 rows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        persons = _model(X, Y, groups=groups).release_function(epsilon=EPSILON, delta=DELTA, seed=4,
                                                               residual_fractions="histogram")
        rows = _model(X, Y).release_function(epsilon=EPSILON, delta=DELTA, seed=4, residual_fractions="histogram")
    assert persons.person_rows == 3 and persons.neighbours == "person (groups, up to 3 rows) (inputs and outputs)"
    np.testing.assert_allclose(persons.stage_sensitivities, 3.0 * np.asarray(rows.stage_sensitivities), rtol=1e-6)
    report = dp.audit(persons, _model(X, Y, groups=groups))
    assert report.passed and 0.99 * EPSILON <= report.epsilon <= EPSILON * (1 + 1e-9)
