"""Lengthscales chosen privately: every candidate's statistics in one Gaussian release (one event at the
request's (epsilon, delta)), the choice by SGPR's bound on the released statistics (post-processing).

Brute force as for one candidate (tests/whole_rows/test_mechanism.py): every row replaced by the box's corners
and the widest point, its output at the opposite bound, released with the same seed; the shift of all the
candidates' statistics together, in units of the noise added, must be within the charge; a broken variant that
charges the grid as one candidate fails. The choice is compared with a NumPy reference of the bound."""

from __future__ import annotations

import math
import warnings

import gpflow
import numpy as np
import pytest
from reference import analytic_delta, reference_multiplier
from whole_rows_reference import extreme_neighbours, sgpr_bound, widest_point
from whole_rows_reference import shift_in_noise_units as _shift

import dpgp_gpflow as dp
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.models import DPSGPR
from dpgp_gpflow.streaming import LocalChunks
from dpgp_gpflow.whole_rows import bounds as bounds_module  # the sensitivity formula the release calls

BOX = [(0.0, 10.0)]
BOUNDS = (0.0, 1.0)
CANDIDATES = [2.0, 4.0, 8.0]
X = np.array([[0.0], [2.0], [5.0], [6.5], [10.0], [4.0]])
Y = np.array([[0.0], [1.0], [0.2], [0.9], [1.0], [0.0]])
Z = wr.inducing_grid(BOX, 3)
EPSILON, DELTA = 1.0, 1e-3


def _release(X, Y, lengthscales=CANDIDATES, seed=11, accountant=None, **options):
    kernel = gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        return wr.release_rows(LocalChunks(X, Y, 4), kernel, Z, x_bounds=BOX, y_bounds=BOUNDS, epsilon=EPSILON,
                               delta=DELTA, seed=seed, noise_variance=0.1, accountant=accountant,
                               lengthscales=lengthscales, **options)




def _worst_shift():
    base = _release(X, Y)
    # the corners and the widest point of each candidate's features (each distinct point once)
    points = sorted({0.0, 10.0, *(widest_point(0.0, 10.0, Z, ell) for ell in CANDIDATES)})
    return base, max(_shift(base, _release(X2, Y2)) for X2, Y2 in extreme_neighbours(X, Y, points, BOUNDS))


@pytest.mark.slow
def test_every_extreme_neighbour_moves_all_candidates_within_the_one_charge():
    acc = dp.PrivacyAccountant(epsilon=5.0, delta=0.1)
    base = _release(X, Y, accountant=acc)
    (event,) = acc.history()
    _, worst = _worst_shift()
    assert worst <= event["mu"] == pytest.approx(1.0 / base.noise_multiplier)
    assert worst >= 0.8 * event["mu"]  # every candidate moved near its bound: the grid's charge is needed


@pytest.mark.slow
def test_charging_the_grid_as_one_candidate_fails_the_same_check(monkeypatch):
    real = bounds_module.release_sensitivity
    monkeypatch.setattr(bounds_module, "release_sensitivity",
                        lambda shares, **kwargs: real(shares, **{**kwargs, "blocks": 1}))
    base, worst = _worst_shift()
    assert worst > 1.2 / base.noise_multiplier


def test_a_grid_is_one_draw_and_one_event_at_the_requested_budget(draws):
    acc = dp.PrivacyAccountant(epsilon=EPSILON, delta=DELTA)  # basic composition: the whole budget, once
    released = _release(X, Y, accountant=acc, seed=None)
    K = 3 * 4 // 2 + 3 + 1
    assert draws == [len(CANDIDATES) * K]
    (event,) = acc.history()
    assert event["status"] == "committed" and event["kind"] == "gaussian"
    assert acc.spent == pytest.approx((EPSILON, DELTA))
    single = _release(X, Y, lengthscales=None)
    for candidate in released.candidates:  # each candidate's noise: sqrt(B) times one release's
        np.testing.assert_allclose(candidate.statistics_noise_std["b"] / single.statistics_noise_std["b"],
                                   math.sqrt(len(CANDIDATES)), rtol=1e-3)
    assert released.selection["lengthscales"] == CANDIDATES
    assert released.privacy_card()["lengthscale_candidates"] == CANDIDATES


def _reference_bound(release):
    """SGPR's collapsed bound on the released statistics (docs/whole_rows.md#variances-as-post-processing),
    written in NumPy: eigenvalue floor 0.75 tau, then whole_rows_reference.sgpr_bound (the b-noise correction,
    the residual sum and n - tr S as their means given >= 0)."""
    st, std = release.statistics, release.statistics_noise_std
    M, n = st["S"].shape[0], release.num_data
    so = std["S"][0, 1]
    floor = 0.75 * 2.0 * so * (math.sqrt(M) + math.sqrt(math.log(2.0 / 0.01)))
    lam, V = np.linalg.eigh(st["S"])
    S_hat = (V * np.maximum(lam, floor)) @ V.T
    return sgpr_bound(S_hat, st["b"], float(st["q"]), float(np.trace(st["S"])), n, std["b"][0],
                      float(std["q"]), so, release.kernel_variance, release.noise_variance)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_choice_is_the_largest_bound_on_the_released_statistics(seed):
    rng = np.random.default_rng(seed)
    Xs = rng.uniform(0, 10, (200, 1))
    Ys = np.clip(0.5 + 0.4 * np.sin(Xs / 1.5) + 0.05 * rng.normal(size=Xs.shape), *BOUNDS)
    released = _release(Xs, Ys, seed=seed, lengthscales=[0.5, 2.0, 8.0])
    bounds = [_reference_bound(c) for c in released.candidates]
    np.testing.assert_allclose(released.selection["bounds"], bounds, rtol=1e-6)  # TF vs NumPy eigh and solves
    assert released.selection["chosen"] == int(np.argmax(bounds))
    assert released.lengthscales == [0.5, 2.0, 8.0][int(np.argmax(bounds))]
    chosen = released.candidates[released.selection["chosen"]]
    np.testing.assert_array_equal(released.statistics["b"], chosen.statistics["b"])


def _model(kernel, **options):
    return DPSGPR((X, Y), kernel, Z, y_bounds=BOUNDS, x_bounds=BOX, private_inputs=True, **options)


@pytest.mark.filterwarnings("ignore::dpgp_gpflow.VarianceFitWarning")  # a small problem's fit may end on an edge
@pytest.mark.slow
def test_a_model_without_lengthscales_chooses_them_from_the_default_grid_of_the_box():
    acc = dp.PrivacyAccountant(epsilon=EPSILON, delta=DELTA)
    released = _model(gpflow.kernels.SquaredExponential()).release_function(epsilon=EPSILON, delta=DELTA,
                                                                            accountant=acc)
    assert released.selection["lengthscales"] == [1.0, 2.0, 4.0]  # 0.1, 0.2, 0.4 of the width 10
    assert released.variances == "fit" and len(acc.history()) == 1
    given = _model(gpflow.kernels.SquaredExponential(lengthscales=3.0), noise_variance=0.1,
                   hyperparameters_public=True).release_function(epsilon=EPSILON, delta=DELTA)
    assert given.selection is None and given.lengthscales == 3.0


@pytest.mark.parametrize("kernel, lengthscales, error, match", [
    (gpflow.kernels.SquaredExponential() + gpflow.kernels.Constant(), [1.0, 2.0], TypeError, "one stationary"),
    (gpflow.kernels.SquaredExponential(), [1.0, -2.0], ValueError, "> 0"),
    (gpflow.kernels.SquaredExponential(), "short", ValueError, "default"),
    (gpflow.kernels.SquaredExponential(), [], ValueError, "between 2"),
    (gpflow.kernels.SquaredExponential(), [[1.0, 2.0]], ValueError, "shape"),
])
def test_bad_candidates_are_refused_before_anything_is_reserved(kernel, lengthscales, error, match):
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with pytest.raises(error, match=match):
        wr.release_rows(LocalChunks(X, Y), kernel, Z, x_bounds=BOX, y_bounds=BOUNDS, epsilon=EPSILON, delta=DELTA,
                        noise_variance=0.1, lengthscales=lengthscales, accountant=acc)
    assert acc.history() == [] and acc.held == (0.0, 0.0)


@pytest.mark.parametrize("lengthscales, expected", [
    (1.0, [1.5, 3.0, 6.0]),  # one lengthscale: 0.1, 0.2, 0.4 of the mean width 15
    ([1.0, 1.0], [[1.0, 2.0], [2.0, 4.0], [4.0, 8.0]]),  # ARD: of each column's width (10, 20)
])
def test_the_default_grid_of_a_two_column_box(lengthscales, expected):
    box = [(0.0, 10.0), (0.0, 20.0)]
    rng = np.random.default_rng(0)
    X2 = rng.uniform(0, 10, (30, 2)) * [1.0, 2.0]
    released = wr.release_rows(LocalChunks(X2, rng.uniform(0, 1, (30, 1))),
                               gpflow.kernels.SquaredExponential(lengthscales=lengthscales),
                               wr.inducing_grid(box, 2), x_bounds=box, y_bounds=BOUNDS, epsilon=EPSILON, delta=DELTA,
                               noise_variance=0.1, lengthscales="default")
    assert released.selection["lengthscales"] == expected


FRACTIONS = (0.5, 0.25, 0.25)


def test_a_grid_with_residual_releases_is_one_event_composing_every_stage(draws, tmp_path):
    """The candidates' statistics together at f_1 of the budget, then residual releases of the chosen candidate:
    one reservation, one event at (epsilon, delta); the stages' multipliers s / sqrt(f_j) from the analytic
    multiplier computed here; the first stage's noise sqrt(B) times one candidate's (B = 3, at the same f_1); each
    residual stage's noise its charge; the whole's delta at epsilon within the request (analytic_delta, here)."""
    acc = dp.PrivacyAccountant(epsilon=EPSILON, delta=DELTA)
    released = _release(X, Y, accountant=acc, seed=None, residual_fractions=FRACTIONS)
    M, B = Z.shape[0], len(CANDIDATES)
    assert draws == [B * (M * (M + 1) // 2 + M + 1), M, M]  # one draw for the grid, one per residual stage
    (event,) = acc.history()
    assert event["status"] == "committed" and (event["epsilon"], event["delta"]) == (EPSILON, DELTA)
    assert acc.held == (0.0, 0.0) and "3 candidate lengthscales" in event["description"]
    s = reference_multiplier(EPSILON, DELTA)
    assert event["mu"] == pytest.approx(1.0 / s, rel=1e-8)
    np.testing.assert_allclose(released.stage_multipliers, s / np.sqrt(FRACTIONS), rtol=1e-8)
    assert analytic_delta(EPSILON, 1.0 / math.sqrt(sum(1.0 / m**2 for m in released.stage_multipliers))) \
        <= DELTA * (1 + 1e-6)
    single = _release(X, Y, lengthscales=None, seed=None, residual_fractions=FRACTIONS)  # one candidate, same f_1
    head = released.first_stage
    for candidate in head.candidates:
        np.testing.assert_allclose(candidate.statistics_noise_std["b"] / single.statistics_noise_std["b"],
                                   math.sqrt(B), rtol=1e-3)
    # the residual stages are the chosen candidate's (the largest bound, NumPy here); its statistics are stage 1's
    chosen = int(np.argmax([_reference_bound(c) for c in head.candidates]))
    # each residual stage's noise std is s_j * 2 G R_j (G = 1 row; the charge's rounding, safety and sampler's grid
    # factors within 1e-6 of 1), s_j and R_j computed here from public values (NumPy, the chosen candidate's)
    std = released.statistics_noise_std["residual_b"][:, 0]
    radii = _reference_radii(released.statistics, released.statistics_noise_std, CANDIDATES[chosen])
    expected = s / np.sqrt(FRACTIONS[1:]) * 2.0 * 1 * np.array(radii)
    assert np.all(std >= expected) and np.all(std <= expected * (1 + 1e-6))
    assert head.selection["chosen"] == chosen and head.lengthscales == CANDIDATES[chosen] == released.lengthscales
    assert float(released.features.kernel.lengthscales.numpy()) == CANDIDATES[chosen]
    np.testing.assert_array_equal(released.statistics["b"], head.candidates[chosen].statistics["b"])
    # the file: the card states the candidates and the stages, and loads to the same predictions
    released.save(tmp_path / "grid.json")
    card = dp.io.read_card(tmp_path / "grid.json")
    assert card["lengthscale_candidates"] == CANDIDATES and card["residual_fractions"] == list(FRACTIONS)
    Xnew = np.linspace(0.0, 10.0, 7)[:, None]
    loaded = dp.load(tmp_path / "grid.json")
    np.testing.assert_array_equal(loaded.predict(Xnew).mean, released.predict(Xnew).mean)
    assert loaded.lengthscales == CANDIDATES[chosen]  # as a whole-row release's (AttributeError before)
    np.testing.assert_array_equal(loaded.radii, released.radii)
    model = DPSGPR((X, Y), gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=3.0), Z, noise_variance=0.1,
                   y_bounds=BOUNDS, x_bounds=BOX, private_inputs=True, hyperparameters_public=True)
    report = dp.audit(released, model)  # the grid's stage 1 and every residual stage, from the model's pieces
    assert report.passed and 0.9 * EPSILON <= report.epsilon <= EPSILON * (1 + 1e-9)


def _reference_radii(st, std, lengthscale, kernel_variance=2.0, noise_variance=0.1):
    """``R_j = min(2 sqrt(sigma^2 + v_{j-1}), d)`` (docs/whole_rows.md, Residual releases) in NumPy from the released
    statistics and noise stds: ``v`` the mean first-order DP-noise variance of the estimate over the centres of
    ``ceil(10 / (l / 2))`` cells of the box, the posterior's ``S`` floored at ``0.75 tau``."""
    from whole_rows_reference import features as reference_features

    M = Z.shape[0]
    lam = noise_variance / kernel_variance
    offdiag = std["S"][0, 1]
    floor = 0.75 * 2.0 * offdiag * (math.sqrt(M) + math.sqrt(math.log(2.0 / 0.01)))
    w, V = np.linalg.eigh(st["S"])
    A = (V * np.maximum(w, floor)) @ V.T + lam * np.eye(M)
    cells = math.ceil(10.0 / (0.5 * lengthscale))
    H = np.linalg.solve(A, reference_features(((np.arange(cells) + 0.5) * 10.0 / cells)[:, None], Z, lengthscale).T)
    u = np.linalg.solve(A, st["b"])
    v = np.mean((std["b"][0] ** 2 + offdiag**2 * (u @ u)) * np.sum(H * H, axis=0) + offdiag**2 * (u @ H) ** 2)
    radii = []
    for s_j in std["residual_b"][:, 0]:
        radii.append(min(2.0 * math.sqrt(noise_variance + v), BOUNDS[1] - BOUNDS[0]))
        v = np.mean(s_j**2 * np.sum(H * H, axis=0))
    return radii


def test_the_residual_stages_of_a_grid_are_the_chosen_lengthscales_around_the_released_estimates():
    """With a seed the noise of stage j is the seeded standard normal draw (reproducible, drawn here too): what was
    released minus that noise is the clipped residual sum of the rows, in NumPy here, at the CHOSEN candidate's
    features around the released previous estimate and radius (not another candidate's)."""
    from whole_rows_reference import features as reference_features

    from dpgp_gpflow.sampling import standard_normal
    from dpgp_gpflow.whole_rows.residual_release import stage_seed

    seed = 7
    released = _release(X, Y, seed=seed, lengthscales=[1.0, 3.0, 9.0], residual_fractions=FRACTIONS)
    ell = float(released.features.kernel.lengthscales.numpy())
    assert ell == released.first_stage.lengthscales
    yc = np.clip(Y[:, 0], *BOUNDS) - 0.5 * sum(BOUNDS)
    std = released.statistics_noise_std["residual_b"][:, 0]
    for k, b_tilde in enumerate(released.statistics["residual_b"]):  # stage j = k + 2 (0-based stage k + 1)
        xi, _ = standard_normal(Z.shape[0], stage_seed(seed, k + 1))
        u, R = released.estimates[k], released.radii[k]
        for other in (1.0, 3.0, 9.0):
            P = reference_features(np.clip(X, *BOX[0]), Z, other)
            expected = P.T @ np.clip(yc - P @ u, -R, R)
            if other == ell:
                np.testing.assert_allclose(b_tilde - std[k] * xi, expected, rtol=0, atol=1e-9 * std[k])
            else:  # another candidate's features give other sums
                assert np.max(np.abs(b_tilde - std[k] * xi - expected)) > 1e-6


def test_a_grid_of_one_candidate_is_refused_before_anything_is_reserved():
    """One candidate is the kernel's own lengthscale (a release file holds a grid of two or more)."""
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    for fractions in (None, FRACTIONS):
        with pytest.raises(ValueError, match="between 2 and 16 candidate lengthscales, got 1"):
            _release(X, Y, lengthscales=[3.0], accountant=acc, residual_fractions=fractions)
    assert acc.history() == [] and acc.held == (0.0, 0.0)
