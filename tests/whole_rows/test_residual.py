"""Residual releases (docs/whole_rows.md#residual-releases): brute force of the clipped residual sums' sensitivity,
the update against a NumPy reference from the released stages, one event composing the stages, chunked = in memory.

The brute force replaces every row by the box's corners and the point of the box with the largest feature norm, its
output by the opposite bound, and measures how far the clipped residual sum around a fixed public estimate moves: at
most ``2 R`` (and close to it); a broken variant without the clipping moves it much further."""

from __future__ import annotations

import base64
import copy
import functools
import json
import math
import warnings
from pathlib import Path

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from reference import analytic_delta, reference_multiplier
from whole_rows_reference import features as reference_features
from whole_rows_reference import extreme_neighbours, widest_point

import dpgp_gpflow as dp
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.io import ReleaseFileError
from dpgp_gpflow.io import format as release_file
from dpgp_gpflow.models import DPSGPR
from dpgp_gpflow.streaming import LocalChunks
from dpgp_gpflow.whole_rows import residual as residual_module
from dpgp_gpflow.whole_rows.features import feature_map
from dpgp_gpflow.whole_rows.residual import ResidualStatistics, residual_sums
from dpgp_gpflow.whole_rows.statistics import RowStatistics

BOX = [(0.0, 10.0)]
BOUNDS = (0.0, 1.0)
LENGTHSCALE = 6.0
X = np.array([[0.0], [2.0], [5.0], [6.5], [10.0], [4.0], [8.0], [1.0]])
Y = np.array([[0.0], [1.0], [0.2], [0.9], [1.0], [0.0], [0.7], [0.4]])
Z = wr.inducing_grid(BOX, 3)
EPSILON, DELTA = 1.0, 1e-3
FRACTIONS = (0.5, 0.25, 0.25)
U = np.array([0.4, -0.3, 0.2])  # a public estimate (any: the bound holds for every u)
RADIUS = 0.15


@functools.lru_cache(maxsize=None)
def _kernel():
    """One kernel object for the module: its feature map is built (and its chunk sums traced) once."""
    return gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=LENGTHSCALE)


@functools.lru_cache(maxsize=None)
def _rows():
    return RowStatistics(feature_map(_kernel(), Z, BOX).compile(), BOX, BOUNDS)  # traced once for every pass


def _sum(X, Y, chunk=3):
    return residual_sums(LocalChunks(X, Y, chunk), ResidualStatistics(_rows(), U, RADIUS))


def _neighbours():  # the box's corners and the widest point, each row, outputs at the opposite bound
    return extreme_neighbours(X, Y, [0.0, 10.0, widest_point(0.0, 10.0, Z, LENGTHSCALE)], BOUNDS)


def _worst_shift():
    base = _sum(X, Y)
    return max(float(np.linalg.norm(base - _sum(X2, Y2))) for X2, Y2 in _neighbours())


def test_the_clipped_residual_sum_equals_a_numpy_reference():
    P = reference_features(X, Z, LENGTHSCALE)
    yc = Y[:, 0] - 0.5
    expected = P.T @ np.clip(yc - P @ U, -RADIUS, RADIUS)
    np.testing.assert_allclose(_sum(X, Y), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(_sum(X, Y, chunk=2), expected, rtol=0, atol=1e-12)


def test_every_extreme_neighbour_moves_the_residual_sum_within_two_radii():
    worst = _worst_shift()
    charged = 2.0 * RADIUS * (1.0 + 1e-8)
    assert worst <= charged
    assert worst >= 0.99 * charged  # the corners and the widest point reach the bound (1 - 5e-7 here)


def test_unclipped_residuals_fail_the_same_check(monkeypatch):
    """The broken variant: the residuals summed without their clipping, charged the same 2 R."""

    def unclipped(kernel, Z, L, k_max, X, yc, u, radius):
        phi = wr.whitened_features(kernel, Z, L, X, k_max)
        return (tf.linalg.matvec(phi, yc - tf.linalg.matvec(phi, u), transpose_a=True),)

    monkeypatch.setattr(residual_module, "chunk_residual_sums", unclipped)
    assert _worst_shift() > 2.0 * 2.0 * RADIUS


def test_a_person_moves_the_residual_sum_within_two_radii_per_row():
    base = _sum(X, Y)
    X2, Y2 = X.copy(), Y.copy()
    X2[[0, 5]], Y2[[0, 5]] = 10.0, 1.0  # one person of rows 0 and 5 (outputs 0), both rows replaced
    shift = float(np.linalg.norm(base - _sum(X2, Y2)))
    assert 2.0 * RADIUS < shift <= 2.0 * 2.0 * RADIUS * (1.0 + 1e-8)  # more than one row's charge, within two


def _release(source=None, seed=7, accountant=None, fractions=FRACTIONS, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        return wr.release_rows(LocalChunks(X, Y, 3) if source is None else source, _kernel(), Z, x_bounds=BOX,
                               y_bounds=BOUNDS, epsilon=EPSILON, delta=DELTA, seed=seed, noise_variance=0.05,
                               accountant=accountant, residual_fractions=fractions, **options)


def _reference_points():
    cells = math.ceil(10.0 / (0.5 * LENGTHSCALE))  # about two cells per lengthscale over the box
    return ((np.arange(cells) + 0.5) * 10.0 / cells)[:, None]


def test_the_update_equals_a_numpy_reference_from_the_released_stages():
    released = _release()
    st, std = released.statistics, released.statistics_noise_std
    M, kv, nv = Z.shape[0], 2.0, 0.05
    lam = nv / kv
    offdiag = std["S"][0, 1]
    floor = 0.75 * 2.0 * offdiag * (math.sqrt(M) + math.sqrt(math.log(2.0 / 0.01)))
    w, V = np.linalg.eigh(st["S"])
    P = (V * np.maximum(w, floor)) @ V.T
    A = P + lam * np.eye(M)
    Pg = reference_features(_reference_points(), Z, LENGTHSCALE)
    H = np.linalg.solve(A, Pg.T)  # [M, points]
    u = np.linalg.solve(A, st["b"])
    v = np.mean((std["b"][0] ** 2 + offdiag**2 * (u @ u)) * np.sum(H * H, axis=0) + offdiag**2 * (u @ H) ** 2)
    estimates, radii = [u], []
    for b_j, s_j in zip(st["residual_b"], std["residual_b"][:, 0]):
        radii.append(min(2.0 * math.sqrt(nv + v), 1.0))
        u = np.linalg.solve(A, b_j + P @ u)
        estimates.append(u)
        v = np.mean(s_j**2 * np.sum(H * H, axis=0))
    np.testing.assert_allclose(released.radii, radii, rtol=1e-10)
    np.testing.assert_allclose(released.estimates, estimates, rtol=1e-9, atol=1e-12)
    Xt = np.linspace(-1.0, 11.0, 7)[:, None]
    Pt = reference_features(Xt, Z, LENGTHSCALE)
    half = np.linalg.solve(np.linalg.cholesky(A), Pt.T)
    model = kv * (1.0 - np.sum(Pt**2, axis=1) + lam * np.sum(half**2, axis=0))
    Ainv = np.linalg.inv(A)
    u1 = estimates[0]
    C = Ainv @ ((std["b"][0] ** 2 + offdiag**2 * (u1 @ u1)) * np.eye(M) + offdiag**2 * np.outer(u1, u1)) @ Ainv
    B = Ainv @ (P - (V * np.maximum(w, 0.0)) @ V.T)  # S estimated by the PSD projection of the released S~
    for s_j in std["residual_b"][:, 0]:
        C = s_j**2 * Ainv @ Ainv + B @ C @ B.T
    noise = np.einsum("nm,mk,nk->n", Pt, C, Pt)
    mean, variance = released.unclipped().predict_f(Xt)
    np.testing.assert_allclose(mean[:, 0], 0.5 + Pt @ u, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(variance[:, 0], model + noise, rtol=1e-9)
    assert np.all(released.predict_f(Xt)[0] <= 1.0) and np.all(released.predict_f(Xt)[0] >= 0.0)


def test_one_reservation_one_event_and_the_stages_compose_to_it(draws):
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    released = _release(seed=None, accountant=acc)
    M = Z.shape[0]
    assert draws == [M * (M + 1) // 2 + M + 1, M, M]  # the statistics, then one draw per residual release
    (event,) = acc.history()
    assert event["status"] == "committed" and event["kind"] == "gaussian"
    assert (event["epsilon"], event["delta"]) == (EPSILON, DELTA) and acc.held == (0.0, 0.0)
    mu = event["mu"]
    assert mu == pytest.approx(1.0 / released.noise_multiplier, rel=1e-12)
    stages = [1.0 / s for s in released.stage_multipliers]
    assert math.sqrt(math.fsum(m * m for m in stages)) == pytest.approx(mu, rel=1e-12)  # Gaussian DP: sqrt(sum)
    np.testing.assert_allclose(np.square(stages) / mu**2, FRACTIONS, rtol=1e-12)
    assert analytic_delta(EPSILON, 1.0 / mu) <= DELTA * (1 + 1e-9)
    assert (released.epsilon, released.delta) == (EPSILON, DELTA) and not released.reproducible
    card = released.privacy_card()
    assert card["neighbours"] == "row (inputs and outputs)" and card["residual_fractions"] == list(FRACTIONS)
    # each stage's noise is its charge: std = s_j * Delta_j * 2 R_j with Delta_j one row's 2 R_j / (2 R_j) = 1 (its
    # rounding, safety and sampler's grid factors within 1e-6 of 1), s_j = s / sqrt(f_j) from the analytic multiplier
    # here (not the release's own stage_sensitivities; R_j: test_the_update_equals_a_numpy_reference_...)
    std = released.statistics_noise_std["residual_b"][:, 0]
    expected = reference_multiplier(EPSILON, DELTA) / np.sqrt(FRACTIONS[1:]) * 2.0 * released.radii
    assert np.all(std >= expected) and np.all(std <= expected * (1 + 1e-6))


def test_chunked_equals_in_memory_with_one_seed():
    a = _release(LocalChunks(X, Y, 2))
    b = _release(LocalChunks(X, Y, 100))
    std = a.statistics_noise_std
    for key in ("S", "b", "residual_b"):
        np.testing.assert_allclose(a.statistics[key], b.statistics[key], rtol=0, atol=1e-9 * np.min(std[key]))
    np.testing.assert_allclose(a.radii, b.radii, rtol=1e-9)


def test_a_dask_reduction_equals_in_memory_with_one_seed():
    da = pytest.importorskip("dask.array")
    from dpgp_gpflow.distributed import DaskChunks

    on_dask = _release(DaskChunks(da.from_array(X, chunks=(3, 1)), da.from_array(Y, chunks=(3, 1))))
    local = _release(LocalChunks(X, Y, 100))
    std = local.statistics_noise_std
    for key in ("S", "b", "residual_b"):
        np.testing.assert_allclose(on_dask.statistics[key], local.statistics[key], rtol=0,
                                   atol=1e-9 * np.min(std[key]))


@pytest.mark.filterwarnings("ignore::dpgp_gpflow.VarianceFitWarning")  # a small problem's fit may end on an edge
def test_variances_fitted_on_the_first_stage_audit_within_the_claim():
    model = DPSGPR((X, Y), _kernel(), Z, y_bounds=BOUNDS, x_bounds=BOX, private_inputs=True,
                   hyperparameters_public=True)  # no noise variance: both variances fitted on stage 1
    released = model.release_function(epsilon=EPSILON, delta=DELTA, residual_fractions=FRACTIONS)
    assert released.variances == "fit"
    assert released.noise_variance == released.first_stage.noise_variance  # fixed by stage 1 for every radius
    report = dp.audit(released, model)  # refits on stage 1 and recomputes every radius from it
    assert report.passed and report.epsilon <= EPSILON * (1 + 1e-9)


def test_the_model_releases_residuals_with_persons():
    groups = np.array([0, 0, 1, 2, 3, 3, 4, 5])
    model = DPSGPR((X, Y), _kernel(), Z, noise_variance=0.05, y_bounds=BOUNDS, x_bounds=BOX, private_inputs=True,
                   groups=groups, hyperparameters_public=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        released = model.release_function(epsilon=EPSILON, delta=DELTA, seed=3, residual_fractions="default")
        one_row = _release(seed=3, fractions="default")
    assert released.neighbours == "person (groups, up to 2 rows) (inputs and outputs)"
    assert released.fractions == (0.5, 0.25, 0.25)
    np.testing.assert_allclose(released.stage_sensitivities[1:], 2.0 * np.array(one_row.stage_sensitivities[1:]),
                               rtol=1e-6)


@pytest.mark.parametrize("fractions", [(1.0,), (0.5, 0.4), (0.5, -0.25, 0.75), "half", (0.5, float("nan"), 0.5),
                                       (True, 0.0)])
def test_bad_fractions_are_refused_before_anything_is_reserved(fractions, draws):
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with pytest.raises(ValueError, match="residual_fractions must be"):
        _release(accountant=acc, fractions=fractions)
    assert acc.history() == [] and draws == []


def test_what_is_not_implemented_is_refused_in_one_line(tmp_path):
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)  # (a lengthscale grid: tests/whole_rows/test_lengthscales.py)
    with pytest.raises(NotImplementedError, match="analytic"):
        _release(accountant=acc, calibration="classical")
    assert acc.history() == []


def _forge(path, tmp_path, edit):
    raw = json.loads(Path(path).read_text())
    edit(raw)
    raw["sha256"] = release_file.document_sha256(raw)
    forged = Path(tmp_path) / "forged.json"
    forged.write_text(json.dumps(raw))
    return forged


def _scale_array(raw, name, factor):
    entry = raw["arrays"][name]
    values = np.frombuffer(base64.b64decode(entry["data"]), dtype="<f8").reshape(entry["shape"]) * factor
    raw["arrays"][name] = release_file.encode_array(values)


FORGERIES = {
    "a radius": lambda raw: raw["card"]["radii"].__setitem__(0, raw["card"]["radii"][0] * 1.5),
    "a residual noise std": lambda raw: _scale_array(raw, "residual/noise_std", 0.5),
    "the fractions": lambda raw: raw["card"].update(residual_fractions=[0.6, 0.2, 0.2]),
    "a stage sensitivity": lambda raw: raw["card"]["stage_sensitivities"].__setitem__(1, 0.5),
    "the first stage's multiplier": lambda raw: raw["content"]["first_stage"].update(noise_multiplier=1.0),
    "the cards' kernel variance": lambda raw: [c.update(kernel_variance=1.0)  # not the content's
                                               for c in (raw["card"], raw["content"]["first_stage"])],
}


def _multipliers_a_hair_smaller(raw):
    """Every multiplier (the whole's, each stage's, the first stage's card) and every noise std times (1 - 9e-10):
    within the card's 1e-9 of the recomputed ones (the sensitivities' grid factor does not move at this change, the
    radii within their 1e-9), so only noise stds recomputed at the multipliers of (epsilon, delta) refuse it."""
    factor = 1.0 - 9e-10
    card = raw["card"]
    card["noise_multiplier"] *= factor
    card["stage_multipliers"] = [s * factor for s in card["stage_multipliers"]]
    raw["content"]["first_stage"]["noise_multiplier"] = card["stage_multipliers"][0]
    for name in ("noise_std/S", "noise_std/b", "noise_std/q", "residual/noise_std"):
        _scale_array(raw, name, factor)


def _radii_a_hair_smaller(raw):
    """Every radius and residual noise std times (1 - 9e-10) (the card consistent: s Delta 2 R): within the radii's
    1e-9 of those the earlier stages give, but below them, so less noise than the replayed radii need."""
    raw["card"]["radii"] = [r * (1.0 - 9e-10) for r in raw["card"]["radii"]]
    _scale_array(raw, "residual/noise_std", 1.0 - 9e-10)


def _overflowing_last_sums(raw):
    """The last stage's sums at 1e308 (no radius reads them): a finite but overflowing last estimate."""
    entry = raw["arrays"]["residual/b"]
    values = np.frombuffer(base64.b64decode(entry["data"]), dtype="<f8").reshape(entry["shape"]).copy()
    values[-1] = 1e308
    raw["arrays"]["residual/b"] = release_file.encode_array(values)


def test_a_saved_residual_release_loads_and_predicts_the_same_and_forgeries_are_refused(tmp_path):
    released = _release(seed=None).unclipped()
    path = released.save(tmp_path / "residual.json")
    loaded = dp.load(path)
    Xt = np.linspace(-1.0, 11.0, 5)[:, None]
    for a, b in zip(loaded.predict_f(Xt), released.predict_f(Xt)):  # bit-identical: the one preconditioner, the
        np.testing.assert_array_equal(a, b)  # first stage's regularised S~, rebuilt from the file's S~ and floor
    np.testing.assert_array_equal(loaded.estimates, released.estimates)
    np.testing.assert_allclose(loaded.radii, released.radii, rtol=1e-12)
    assert repr(loaded) == repr(released) and not loaded.clip_to_bounds
    for what, edit in FORGERIES.items():
        with pytest.raises(ReleaseFileError):
            dp.load(_forge(path, tmp_path, edit))
            pytest.fail(f"{what} was not refused")
    with pytest.raises(ReleaseFileError, match="noise_std"):  # the card's multipliers are only checked (loaded before)
        dp.load(_forge(path, tmp_path, _multipliers_a_hair_smaller))
    with pytest.raises(ReleaseFileError, match="not finite"):  # predicted NaN before
        dp.load(_forge(path, tmp_path, _overflowing_last_sums))
    with pytest.raises(ReleaseFileError, match="none may be below"):  # loaded before (a review's forgery)
        dp.load(_forge(path, tmp_path, _radii_a_hair_smaller))


def test_the_audit_recomputes_every_radius_and_the_noise_within_the_claim():
    model = DPSGPR((X, Y), _kernel(), Z, noise_variance=0.05, y_bounds=BOUNDS, x_bounds=BOX, private_inputs=True,
                   hyperparameters_public=True)
    released = model.release_function(epsilon=EPSILON, delta=DELTA, residual_fractions=FRACTIONS)
    report = dp.audit(released, model)
    assert report.passed and 0.99 * EPSILON <= report.epsilon <= EPSILON * (1 + 1e-9)
    quieter = copy.copy(released)  # the last stage's sums with half the noise (no later radius reads it)
    quieter._noise_std = {**released._noise_std, "residual_b": released._noise_std["residual_b"] * [[1.0], [0.5]]}
    report = dp.audit(quieter, model)
    assert not report.passed and report.epsilon > 1.2 * EPSILON
    wider = copy.copy(released)  # a radius its earlier stages do not give
    wider.radii = released.radii * 1.5
    with pytest.raises(ValueError, match="radius"):
        dp.audit(wider, model)
    # the loaders' rule (residual_bounds.radii_replayed), not a second one: radii and their noise a hair (9e-10)
    # smaller, within the audit's old two-sided 1e-9 (passed before; a file's loader refuses it); and the last
    # stage's radius dropped, its noise cut to 1e-3 (passed before at epsilon 0.84: that stage was left out)
    hair = copy.copy(released)
    hair.radii = released.radii * (1.0 - 9e-10)
    hair._noise_std = {**released._noise_std, "residual_b": released._noise_std["residual_b"] * (1.0 - 9e-10)}
    with pytest.raises(ValueError, match="never below"):
        dp.audit(hair, model)
    dropped = copy.copy(released)
    dropped.radii = released.radii[:1]
    dropped._noise_std = {**released._noise_std, "residual_b": released._noise_std["residual_b"] * [[1.0], [1e-3]]}
    with pytest.raises(ValueError, match="one per stage"):
        dp.audit(dropped, model)
    # predictions that are not post-processing of the released stages: the last mean replaced by the non-private
    # least-squares weights of the rows (a reviewer's forgery: the audit passed it before)
    phi = released.features(tf.constant(X)).numpy()
    private = np.linalg.lstsq(phi, np.clip(Y[:, 0], *BOUNDS) - 0.5 * sum(BOUNDS), rcond=None)[0]
    forged = copy.copy(released)
    forged.posterior = released.posterior._replace(mean=tf.constant(private))
    with pytest.raises(ValueError, match="last mean"):
        dp.audit(forged, model)
    forged = copy.copy(released)
    forged.estimates = released.estimates * 1.01
    with pytest.raises(ValueError, match="estimates"):
        dp.audit(forged, model)


def test_preconditioned_update_solves_its_system_and_refuses_wrong_shapes():
    """u_j = (lambda I + P)^{-1} (b + P u) against numpy.linalg.solve of the dense system; a [1] b (which would
    broadcast) and a [M, 1] u are refused."""
    preconditioned_update = residual_module.preconditioned_update
    rng = np.random.default_rng(3)
    M, lam = 5, 0.3
    A = rng.standard_normal((M, M))
    P = A @ A.T
    b, u = rng.standard_normal(M), rng.standard_normal(M)
    chol = np.linalg.cholesky(lam * np.eye(M) + P)
    expected = np.linalg.solve(lam * np.eye(M) + P, b + P @ u)
    np.testing.assert_allclose(preconditioned_update(chol, P, b, u), expected, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"b and u \[M\]"):
        preconditioned_update(chol, P, b[:1], u)
    with pytest.raises(ValueError, match=r"b and u \[M\]"):
        preconditioned_update(chol, P, b, u[:, None])


def test_the_propagated_covariances_are_traced_once_whatever_m_and_the_stages():
    """``C_J`` (``C_j = s_j^2 A A + B C_{j-1} B^T``, ``A = (lambda I + P)^{-1}``, ``B = A (P - S)``; for a residual
    release ``C_1`` from ``u_1``'s noise and ``S`` the PSD projection) against NumPy for (M, J) = (3, 2) and (5, 4),
    twice each (the first call eager, the rest compiled: the same numbers); one trace each for both shapes (their
    input signatures: a long-lived process keeps one graph, not one per (M, J); two before)."""
    rng = np.random.default_rng(4)
    for M, J in ((3, 2), (5, 4), (3, 2), (5, 4)):
        P, S, F = (W @ W.T for W in rng.standard_normal((3, M, M)))
        S = S - 2.0 * np.eye(M)  # not PSD: the residual release's covariance projects it
        chol = np.linalg.cholesky(0.3 * np.eye(M) + P)
        variances, u, b_var, o_var = rng.uniform(0.1, 2.0, J), rng.standard_normal(M), 0.7, 0.2
        A = np.linalg.solve(0.3 * np.eye(M) + P, np.eye(M))
        w, V = np.linalg.eigh(S)
        first = A @ ((b_var + o_var * (u @ u)) * np.eye(M) + o_var * np.outer(u, u)) @ A
        for S_, C, got in ((S, F, lambda: residual_module.propagated_covariance(chol, P, S, F, variances)),
                           ((V * np.maximum(w, 0.0)) @ V.T, first, lambda: residual_module._release_covariance(
                               *(tf.constant(a, tf.float64) for a in (chol, u, b_var, o_var, P, S, variances))))):
            for v in variances:
                C = v * A @ A + (A @ (P - S_)) @ C @ (A @ (P - S_)).T
            eager, compiled = got().numpy(), got().numpy()
            np.testing.assert_allclose(eager, C, rtol=1e-9, atol=1e-12 * np.max(np.abs(C)))
            assert np.array_equal(eager, compiled)
    for graph in (residual_module._propagated, residual_module._release_covariance):
        assert graph._graph.experimental_get_tracing_count() == 1
