"""DP hyperparameter selection (DESIGN 5.5) and tight composition (DESIGN 7).

References are independent of the code under test: the JMLR toy example worked by hand, brute-force
neighbours, Monte Carlo, a chi-squared test, GPflow's own predictions, the analytic Gaussian
mechanism and ``dp_accounting``'s own accountant.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import sqlite3
import warnings
from fractions import Fraction

import gpflow
import numpy as np
import tensorflow as tf
import pytest
from scipy import stats

import dpgp_gpflow as dp
import dpgp_gpflow.selection as selection_module
from dpgp_gpflow import BudgetExceededError, PrivacyAccountant, ReproducibleNoiseWarning, sampling
from dpgp_gpflow.accounting import PrivacyEvent
from dpgp_gpflow.calibration import analytic_gaussian_epsilon, analytic_gaussian_multiplier
from dpgp_gpflow.composition import (
    basic_composition,
    composed_epsilon,
    composition_report,
    gdp_composition,
    gdp_epsilon,
    pld_epsilon,
    pure_epsilon_rr_noise_parameter,
)
from dpgp_gpflow.models import DPGPR, DPGPRFITC
from dpgp_gpflow.selection import (
    Fold,
    cross_validate,
    cv_folds,
    cv_predictions,
    cv_sensitivity,
    cv_utility,
    expected_absolute,
    expected_clipped_square,
    exponential_mechanism,
    generalised_exponential_mechanism,
    generalised_scores,
    Selection,
    SelectionDiagnostics,
    gumbel_max,
    permute_and_flip,
    permute_and_flip_probabilities,
    point_sensitivities,
    published_sensitivity,
    release_noise_std,
    select_hyperparameters,
    selection_probabilities,
)


# ---------------------------------------------------------------------------------------------
# Closed-form expected clipped square


@pytest.mark.parametrize(
    "a, sigma, c",
    [(0.3, 1.0, 4.0), (3.5, 1.0, 4.0), (-5.0, 2.0, 4.0), (0.0, 10.0, 4.0), (4.6, 0.5, 4.0), (1.0, 0.05, 0.5)],
)
def test_expected_clipped_square_matches_monte_carlo(a, sigma, c):
    rng = np.random.default_rng(12345)
    samples = np.clip(a + sigma * rng.standard_normal(1_000_000), -c, c) ** 2
    se = samples.std(ddof=1) / math.sqrt(samples.size)
    exact = float(expected_clipped_square(a, sigma, c))
    # 5 Monte Carlo standard errors (plus a floor for the near-deterministic cases).
    assert abs(exact - samples.mean()) <= 5.0 * se + 1e-12, (exact, samples.mean(), se)


def test_expected_clipped_square_limits_and_lipschitz():
    a = np.linspace(-12.0, 12.0, 2001)
    assert np.array_equal(expected_clipped_square(a, 0.0, 4.0), np.clip(a, -4.0, 4.0) ** 2)
    # small sigma -> clip(a)^2; huge sigma -> c^2 (almost surely clipped)
    assert np.allclose(expected_clipped_square(a, 1e-9, 4.0), np.clip(a, -4, 4) ** 2, atol=1e-6)
    assert np.allclose(expected_clipped_square(a, 1e9, 4.0), 16.0, rtol=1e-6)
    assert np.all(expected_clipped_square(a, np.inf, 4.0) == 16.0)  # a release that cannot happen
    # 2c-Lipschitz in a for every sigma (what the sensitivity bound relies on)
    for sigma in (0.0, 0.3, 1.0, 3.0, 30.0):
        f = expected_clipped_square(a, sigma, 4.0)
        slopes = np.abs(np.diff(f)) / np.diff(a)
        assert slopes.max() <= 8.0 * (1.0 + 1e-9)


# ---------------------------------------------------------------------------------------------
# The JMLR toy example (section 5.1): polynomial linear smoothers


def polynomial_folds(x, splits, order):
    """Folds of the least-squares polynomial smoother: C = X*(X^T X)^{-1} X^T (computed here, by hand)."""
    out = []
    for train, test in splits:
        Xtr = np.vander(x[train], order + 1, increasing=True)
        Xte = np.vander(x[test], order + 1, increasing=True)
        C = Xte @ np.linalg.solve(Xtr.T @ Xtr, Xtr.T)
        out.append(Fold(np.asarray(train), np.asarray(test), C))
    return out


TOY_X = np.array([0.0, 1.0, 2.0, 4.0])
TOY_Y = np.array([0.0, 0.5, 1.0, 2.0])
HALVES = [(np.array([0, 1]), np.array([2, 3])), (np.array([2, 3]), np.array([0, 1]))]
INTERLEAVED = [(np.array([0, 2]), np.array([1, 3])), (np.array([1, 3]), np.array([0, 2]))]


def test_toy_example_matrices_sse_and_sensitivities():
    d = 2.0  # "a sensitivity of 2" (JMLR 5.1)
    f0 = polynomial_folds(TOY_X, HALVES, 0)
    f1 = polynomial_folds(TOY_X, HALVES, 1)
    np.testing.assert_allclose(f0[0].C, [[0.5, 0.5], [0.5, 0.5]], atol=1e-12)
    np.testing.assert_allclose(f1[0].C, [[-1.0, 2.0], [-3.0, 4.0]], atol=1e-12)
    # non-DP SSEs: 3.625 + 3.25 and 0 + 0 (no residual reaches the 4d = 8 clip)
    assert cv_utility(f0, TOY_Y, d, utility="squared") == pytest.approx(-6.875, abs=1e-12)
    assert cv_utility(f0[:1], TOY_Y, d, utility="squared") == pytest.approx(-3.625, abs=1e-12)
    assert cv_utility(f1, TOY_Y, d, utility="squared") == pytest.approx(0.0, abs=1e-12)
    # absolute errors by hand: fold 1 predicts 0.25 at y = 1, 2 (0.75 + 1.75), fold 2 predicts 1.5 at
    # y = 0, 0.5 (1.5 + 1.0)
    assert cv_utility(f0, TOY_Y, d) == pytest.approx(-5.0, abs=1e-12)
    assert cv_utility(f1, TOY_Y, d) == pytest.approx(0.0, abs=1e-12)

    # Corrected sensitivity by hand, 8 d^2 = 32:
    # order 0: each point trains once (column L1 = 0.5 + 0.5) and is tested once: 32 * 2 = 64.
    # order 1: split 1 columns [-1,-3] (L1 4), [2,4] (L1 6); split 2 trains on x = 2, 4 and
    # predicts x = 0, 1 with rows [2,-1], [1.5,-0.5]: columns L1 3.5 and 1.5. Worst: x = 1,
    # 32 * (6 + 1) = 224.
    np.testing.assert_allclose(point_sensitivities(f0, 4, d, utility="squared"), [64.0] * 4)
    np.testing.assert_allclose(point_sensitivities(f1, 4, d, utility="squared"), [32 * 5, 32 * 7, 32 * 4.5, 32 * 2.5])
    assert max(cv_sensitivity(f0, 4, d, utility="squared"), cv_sensitivity(f1, 4, d, utility="squared")) == \
        pytest.approx(224.0)
    # the absolute loss is 1-Lipschitz: d = 2 per unit of influence instead of 8 d^2 = 32
    np.testing.assert_allclose(point_sensitivities(f0, 4, d), [4.0] * 4)
    np.testing.assert_allclose(point_sensitivities(f1, 4, d), [2 * 5, 2 * 7, 2 * 4.5, 2 * 2.5])

    # The published formula reproduces the paper's numbers: Delta_u = 116 (halves), 53 (interleaved)
    assert max(published_sensitivity(f0, d), published_sensitivity(f1, d)) == pytest.approx(116.0)
    i0, i1 = polynomial_folds(TOY_X, INTERLEAVED, 0), polynomial_folds(TOY_X, INTERLEAVED, 1)
    assert max(published_sensitivity(i0, d), published_sensitivity(i1, d)) == pytest.approx(53.0)
    # ... and its selection probability: SSEs 50 vs 1597 with Delta_u = 116 -> 99.87% for order 0
    p = selection_probabilities([-50.0, -1597.0], 1.0, 116.0, mechanism="exponential")
    assert p[0] == pytest.approx(0.9987, abs=5e-5)


# ---------------------------------------------------------------------------------------------
# Brute force: neighbours never move the utility by more than the sensitivity


def max_neighbour_change(folds, y, d, noise_std=None, lo=0.0, hi=1.0, utility="absolute"):
    """Brute force over neighbours: every y_j moved to the corners (the bounds, y_j +- d) and to an
    interior point; the largest change of the utility."""
    u0 = cv_utility(folds, y, d, noise_std, utility=utility)
    worst = 0.0
    for j in range(y.size):
        for value in (lo, hi, np.clip(y[j] + d, lo, hi), np.clip(y[j] - d, lo, hi), lo + 0.37 * (hi - lo)):
            y2 = y.copy()
            y2[j] = value
            worst = max(worst, abs(cv_utility(folds, y2, d, noise_std, utility=utility) - u0))
    return worst


@pytest.mark.parametrize("utility", ["absolute", "squared"])
def test_brute_force_random_cloaking_matrices(utility):
    rng = np.random.default_rng(2024)
    published_violations = 0
    for trial in range(150):
        n = int(rng.integers(5, 13))
        kappa = int(rng.integers(2, 5))
        splits = cv_folds(n, kappa, seed=trial)
        kind = trial % 3
        if kind == 0:  # signed entries, residuals can be large
            folds = [Fold(tr, te, rng.choice([0.3, 1.0, 3.0]) * rng.standard_normal((te.size, tr.size)),
                          rng.standard_normal(te.size)) for tr, te in splits]
        else:  # positive smoothers
            folds = [Fold(tr, te, rng.uniform(0.0, 1.0, (te.size, tr.size))) for tr, te in splits]
        y = rng.integers(0, 2, n).astype(float) if kind == 2 else rng.uniform(0.0, 1.0, n)
        noise = None if trial % 2 else [rng.uniform(0.0, 2.0, te.size) for _, te in splits]
        change = max_neighbour_change(folds, y, 1.0, noise, utility=utility)
        assert change <= cv_sensitivity(folds, n, 1.0, utility=utility) * (1 + 1e-12), trial
        published_violations += change > published_sensitivity(folds, 1.0)
    if utility == "squared":
        assert published_violations >= 1  # the published bound is not a bound


def test_absolute_sensitivity_is_reached():
    # The bound is tight: one smoother column of weight w in every test row of the other fold. y_0
    # grows by d: its own test residual (pred - y_0, already negative) falls by d and the other fold's
    # k residuals (already positive) grow by w d each; every |r| grows: the utility moves by d (1 + k w).
    A, B = np.arange(4), np.arange(4, 8)
    C = np.full((4, 4), 0.25)
    folds = [Fold(A, B, C, np.full(4, 5.0)), Fold(B, A, C, np.full(4, -5.0))]
    y = np.zeros(8)
    y2 = y.copy()
    y2[0] = 1.0
    change = abs(cv_utility(folds, y2, 1.0) - cv_utility(folds, y, 1.0))
    assert change == pytest.approx(cv_sensitivity(folds, 8, 1.0)) == pytest.approx(1.0 * (1 + 4 * 0.25))


def test_published_formula_fails_explicit_case():
    # Two folds of 6, a smoother C = 0.5 (all entries), y = 1 on the first half and 0 on the second.
    # Fold 1 predicts 3 where y = 0 (residual 3 at 6 points); y_0: 1 -> 0 moves every prediction by
    # -0.5: 6 * (9 - 6.25) = 16.5, plus 1 in the fold where it is tested: 17.5 > 9 + 6 / 4 = 10.5.
    A, B = np.arange(6), np.arange(6, 12)
    folds = [Fold(A, B, np.full((6, 6), 0.5)), Fold(B, A, np.full((6, 6), 0.5))]
    y = np.r_[np.ones(6), np.zeros(6)]
    y2 = y.copy()
    y2[0] = 0.0
    change = abs(cv_utility(folds, y2, 1.0, utility="squared") - cv_utility(folds, y, 1.0, utility="squared"))
    assert change == pytest.approx(17.5)
    assert published_sensitivity(folds, 1.0) == pytest.approx(10.5)
    assert change > published_sensitivity(folds, 1.0)
    assert change <= cv_sensitivity(folds, 12, 1.0, utility="squared") == pytest.approx(8 * (3 + 1))


@pytest.mark.parametrize("utility", ["absolute", "squared"])
def test_brute_force_small_gps(utility):
    rng = np.random.default_rng(7)
    for trial in range(12):
        n = int(rng.integers(6, 11))
        X = rng.uniform(0.0, 5.0, (n, 1))
        y = rng.uniform(0.0, 1.0, n)
        model = DPGPR((X, y[:, None]), gpflow.kernels.SquaredExponential(), y_bounds=(0.0, 1.0), noise_variance=0.1)
        grid = [{".kernel.lengthscales": float(rng.choice([0.1, 1.0, 5.0])),
                 ".likelihood.variance": float(rng.choice([1e-3, 0.1, 1.0])),
                 ".kernel.variance": float(rng.choice([0.5, 5.0]))}]
        cv = cross_validate(model, grid, folds=int(rng.integers(2, 4)), split_seed=trial)
        noise = [rng.uniform(0.0, 1.0, f.test.size) for f in cv.folds[0]]
        change = max_neighbour_change(cv.folds[0], y, 1.0, noise, utility=utility)
        assert change <= cv.sensitivities_of(utility)[0] * (1 + 1e-12)


def test_expected_absolute_matches_quadrature_and_is_1_lipschitz():
    from scipy import integrate
    for a, sigma in [(0.0, 1.0), (2.5, 0.3), (-4.0, 2.0), (1e-3, 50.0), (300.0, 1.0), (-7.0, 0.0)]:
        if sigma == 0.0:
            ref = abs(a)
        else:
            f = lambda z: abs(a + z) * stats.norm.pdf(z, scale=sigma)  # noqa: E731
            lo, hi = -40.0 * sigma, 40.0 * sigma  # beyond: below float64's resolution of the result
            cuts = [lo] + ([-a] if lo < -a < hi else []) + [hi]
            ref = sum(integrate.quad(f, u, v, limit=200, epsabs=0.0, epsrel=1e-12)[0] for u, v in zip(cuts, cuts[1:]))
        assert expected_absolute(a, sigma) == pytest.approx(ref, rel=1e-9, abs=1e-12), (a, sigma)
    assert np.isinf(expected_absolute(1.0, np.inf))
    a = np.linspace(-20, 20, 4001)
    for sigma in (0.0, 0.01, 1.0, 30.0):
        e = expected_absolute(a, sigma)
        assert np.all(np.abs(np.diff(e)) <= np.diff(a) * (1 + 1e-12))  # 1-Lipschitz
        assert np.all(e >= np.abs(a) - 1e-12)  # Jensen: E|a + Z| >= |a|
    with pytest.raises(ValueError):
        expected_absolute(1.0, -1.0)


# ---------------------------------------------------------------------------------------------
# The exponential mechanism


def test_gumbel_max_frequencies_match_softmax():
    u = np.array([-3.0, -1.0, 0.0, -0.5, -6.0, -2.0])
    p = selection_probabilities(u, 2.0, 1.5, mechanism="exponential")
    assert p.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(p, np.exp(u / 1.5) / np.exp(u / 1.5).sum())
    log_w = 2.0 * u / (2 * 1.5)
    draws = 20_000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)
        noise, reproducible = sampling.gumbel(draws * u.size, seed=31337)  # the sampler gumbel_max uses
    assert reproducible
    counts = np.bincount(np.argmax(log_w + noise.reshape(draws, u.size), axis=1), minlength=u.size)
    chi2, pvalue = stats.chisquare(counts, draws * p)
    assert pvalue > 1e-3, (counts, draws * p)


def test_gumbel_max_from_os_entropy():
    u = np.array([0.0, -1.0, -2.0])
    p = selection_probabilities(u, 1.0, 0.5, mechanism="exponential")
    draws = 3000
    counts = np.bincount([gumbel_max(np.log(p))[0] for _ in range(draws)], minlength=3)
    assert stats.chisquare(counts, draws * p).pvalue > 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        index, probs = exponential_mechanism(u, 1.0, 0.5)  # seed None: no warning
    assert 0 <= index < 3 and np.allclose(probs, p)
    with pytest.warns(ReproducibleNoiseWarning):
        exponential_mechanism(u, 1.0, 0.5, seed=3)


# ---------------------------------------------------------------------------------------------
# Permute-and-flip (McKenna & Sheldon 2020)


def pf_reference(u, epsilon, sensitivity):
    """Permute-and-flip's distribution by enumerating every order: candidate r is returned when the
    coins of all candidates before it (heads with probability exp(eps (u - max u) / (2 Delta)))
    land tails and its own lands heads."""
    u = np.asarray(u, dtype=np.float64)
    p = np.exp(epsilon * (u - u.max()) / (2.0 * sensitivity))
    out = np.zeros(u.size)
    orders = list(itertools.permutations(range(u.size)))
    for order in orders:
        alive = 1.0
        for r in order:
            out[r] += alive * p[r]
            alive *= 1.0 - p[r]
    return out / len(orders)


PF_U = np.array([-3.0, -1.0, 0.0, -0.5, -6.0, -2.0])


@pytest.mark.parametrize("epsilon, sensitivity", [(2.0, 1.5), (0.1, 1.0), (40.0, 1.0)])
def test_permute_and_flip_probabilities_match_enumeration(epsilon, sensitivity):
    ref = pf_reference(PF_U, epsilon, sensitivity)
    np.testing.assert_allclose(permute_and_flip_probabilities(PF_U, epsilon, sensitivity), ref, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(selection_probabilities(PF_U, epsilon, sensitivity, mechanism="permute_and_flip"), ref,
                               rtol=1e-12, atol=1e-15)
    # ties (two best candidates), one candidate, and many (uniform utilities: 1/K each)
    np.testing.assert_allclose(permute_and_flip_probabilities([0.0, 0.0, -1.0], 1.0, 1.0),
                               pf_reference([0.0, 0.0, -1.0], 1.0, 1.0), rtol=1e-12)
    assert permute_and_flip_probabilities([5.0], 1.0, 1.0) == pytest.approx([1.0])
    np.testing.assert_allclose(permute_and_flip_probabilities(np.zeros(200), 1.0, 1.0), 1.0 / 200, rtol=1e-10)


def test_permute_and_flip_is_never_worse_than_the_exponential_mechanism():
    rng = np.random.default_rng(5)
    for _ in range(50):
        u = -rng.exponential(rng.uniform(0.1, 10.0), size=rng.integers(2, 7))
        eps, sens = rng.uniform(0.05, 20.0), rng.uniform(0.5, 2.0)
        pf, em = pf_reference(u, eps, sens), selection_probabilities(u, eps, sens, mechanism="exponential")
        best = np.argmax(u)
        assert pf[best] >= em[best] - 1e-12
        assert pf @ u >= em @ u - 1e-12  # McKenna & Sheldon, Theorem 2
        np.testing.assert_allclose(permute_and_flip_probabilities(u, eps, sens), pf, rtol=1e-10, atol=1e-14)
        # epsilon-DP: the log-ratio under a utility shift of at most sens is at most eps
        shifted = u + rng.uniform(-sens, sens, size=u.size)
        ratio = np.log(pf_reference(shifted, eps, sens) / pf)
        assert np.max(np.abs(ratio)) <= eps + 1e-9


def test_permute_and_flip_seeded_frequencies_and_reproducibility():
    p = pf_reference(PF_U, 2.0, 1.5)
    log_w = 2.0 * PF_U / (2 * 1.5)
    draws = 20_000
    with pytest.warns(ReproducibleNoiseWarning):
        first = [sampling.permute_and_flip_index(log_w, seed=31337 + i)[0] for i in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)
        again = [sampling.permute_and_flip_index(log_w, seed=31337 + i) for i in range(3)]
        counts = np.bincount([sampling.permute_and_flip_index(log_w, seed=i)[0] for i in range(draws)], minlength=p.size)
    assert [a[0] for a in again] == first and all(a[1] for a in again)  # same seed, same draw, marked
    assert stats.chisquare(counts, draws * p).pvalue > 1e-3, (counts, draws * p)


def test_permute_and_flip_exact_draws_match_the_closed_form():
    p = pf_reference(PF_U, 2.0, 1.5)
    log_w = 2.0 * PF_U / (2 * 1.5)
    draws = 6000
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # seed None: no warning
        results = [sampling.permute_and_flip_index(log_w) for _ in range(draws)]
    assert not any(r for _, r in results)
    counts = np.bincount([i for i, _ in results], minlength=p.size)
    assert stats.chisquare(counts, draws * p).pvalue > 1e-6, (counts, draws * p)
    index, probs = permute_and_flip(PF_U, 2.0, 1.5)
    assert 0 <= index < PF_U.size and np.allclose(probs, p)
    with pytest.raises(ValueError):
        sampling.permute_and_flip_index([0.0, math.inf])
    with pytest.raises(ValueError):
        sampling.permute_and_flip_index([])


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(27, 10), Fraction(0.1)])
def test_exact_bernoulli_exp_frequencies(gamma):
    rng = random.SystemRandom()
    draws = 20_000
    heads = sum(sampling._bernoulli_exp(gamma, rng) for _ in range(draws))
    p = math.exp(-float(gamma))
    if gamma == 0:
        assert heads == draws
    else:
        assert stats.binomtest(heads, draws, p).pvalue > 1e-6, (heads, draws * p)


# ---------------------------------------------------------------------------------------------
# GPflow plumbing


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0.0, 6.0, (30, 1)), axis=0)
    Y = np.clip(np.sin(X) + 0.1 * rng.standard_normal((30, 1)), -1.5, 1.5)
    return X, Y


def make_gpr(data):
    return DPGPR(data, gpflow.kernels.SquaredExponential(lengthscales=1.0), y_bounds=(-1.5, 1.5), noise_variance=0.05,
                 hyperparameters_public=True)  # chosen a priori


GRID = [{".kernel.lengthscales": ls, ".likelihood.variance": 0.01} for ls in (0.01, 1.0, 100.0)]


def test_fold_matrices_reproduce_gpflow_predictions(data):
    X, Y = data
    model = make_gpr(data)
    grid = [{".kernel.lengthscales": 0.7, ".likelihood.variance": 0.2, ".kernel.variance": 2.0}]
    cv = cross_validate(model, grid, folds=4, split_seed=5)
    assert model.kernel.lengthscales.numpy() == pytest.approx(1.0)  # the model itself is untouched
    preds = cv_predictions(cv.folds[0], Y[:, 0])
    tested = np.concatenate([te for _, te in cv.splits])
    assert np.array_equal(np.sort(tested), np.arange(30))  # each point tested exactly once
    for (train, test), pred in zip(cv.splits, preds):
        ref = gpflow.models.GPR((X[train], Y[train]), gpflow.kernels.SquaredExponential(lengthscales=0.7, variance=2.0),
                                mean_function=gpflow.functions.Constant(0.0), noise_variance=0.2)
        np.testing.assert_allclose(pred, ref.predict_f(X[test])[0].numpy()[:, 0], rtol=1e-9, atol=1e-9)


@pytest.mark.slow
def test_fitc_fold_matrices(data):
    X, Y = data
    Z = np.linspace(0.0, 6.0, 5)[:, None]
    model = DPGPRFITC(data, gpflow.kernels.SquaredExponential(), Z, noise_variance=0.1, y_bounds=(-1.5, 1.5),
                      hyperparameters_public=True)
    grid = [{".kernel.lengthscales": 2.0}, {".kernel.lengthscales": 0.5, ".inducing_variable.Z": Z + 0.1}]
    cv = cross_validate(model, grid, folds=3)
    for config, folds in zip(grid, cv.folds):
        for f in folds:
            ref = gpflow.models.GPRFITC((X[f.train], Y[f.train]),
                                        gpflow.kernels.SquaredExponential(lengthscales=config[".kernel.lengthscales"]),
                                        config.get(".inducing_variable.Z", Z), noise_variance=0.1)
            np.testing.assert_allclose(cv_predictions([f], Y[:, 0])[0],
                                       ref.predict_f(X[f.test])[0].numpy()[:, 0], rtol=1e-7, atol=1e-7)
    sel, diag = select_hyperparameters(model, grid, epsilon=1.0, folds=3, epsilon_release=1.0, delta_release=0.01,
                                       diagnostics=True)
    assert diag.probabilities.sum() == pytest.approx(1.0) and np.all(np.isfinite(diag.utilities))
    assert sel.chosen in grid


def test_release_noise_std_matches_actual_release(data):
    X, _ = data
    Xnew = np.linspace(-1.0, 7.0, 9)[:, None]
    model = make_gpr(data)
    with pytest.warns(ReproducibleNoiseWarning):
        rel = model.release(Xnew, epsilon=1.0, delta=0.01, seed=0)
    std = release_noise_std(model.cloaking_matrix(Xnew), data_sensitivity=model.data_sensitivity,
                            output_bound=model.output_bound, epsilon=1.0, delta=0.01)
    np.testing.assert_allclose(std, rel.noise_std[:, 0], rtol=1e-9)
    # one cached profile serves several budgets (as CrossValidation.noise_std does)
    short = DPGPR(data, gpflow.kernels.SquaredExponential(lengthscales=0.3), y_bounds=(-1.5, 1.5),
                  noise_variance=1e-4, hyperparameters_public=True)
    profile = selection_module.cross_validation._NoiseProfile(short.cloaking_matrix(X), data_sensitivity=3.0,
                                             output_bound=short.output_bound, objective="mse")
    for eps in (5.0, 0.2, 1.0):
        with pytest.warns(ReproducibleNoiseWarning):
            rel = short.release(X, epsilon=eps, delta=1e-3, seed=0)
        np.testing.assert_allclose(profile.std(analytic_gaussian_multiplier(eps, 1e-3)), rel.noise_std[:, 0], rtol=1e-9)
    Z = np.linspace(0.0, 6.0, 4)[:, None]
    fitc = DPGPRFITC(data, gpflow.kernels.SquaredExponential(), Z, noise_variance=0.1, y_bounds=(-1.5, 1.5), hyperparameters_public=True)
    with pytest.warns(ReproducibleNoiseWarning):
        rel = fitc.release(Xnew, epsilon=0.5, delta=0.01, seed=0)
    std = release_noise_std(fitc.release_terms(tf.constant(Xnew)).map, data_sensitivity=fitc.data_sensitivity,
                            output_bound=fitc.output_bound, epsilon=0.5, delta=0.01)
    np.testing.assert_allclose(std, rel.noise_std[:, 0], rtol=1e-9)


def test_select_hyperparameters_end_to_end(data):
    model = make_gpr(data)
    with pytest.warns(ReproducibleNoiseWarning):
        sel, diag = select_hyperparameters(model, GRID, epsilon=1e5, folds=5, seed=1, diagnostics=True)
    assert diag.probabilities.sum() == pytest.approx(1.0)
    assert np.all(sel.kept) and sel.sensitivity == pytest.approx(sel.config_sensitivities.max())
    assert sel.reproducible and sel.epsilon == 1e5
    assert np.argmax(diag.utilities) == 1 and diag.probabilities[1] > 0.99  # lengthscale 1 fits sin(x)
    assert sel.index == 1 and sel.chosen == GRID[1]
    # the sensitivities are the absolute utility's: recompute them from the fold matrices
    cv = cross_validate(model, GRID, folds=5)
    np.testing.assert_allclose(sel.config_sensitivities, [cv_sensitivity(f, 30, 3.0) for f in cv.folds])
    assert sel.sensitivity == pytest.approx(max(cv_sensitivity(f, 30, 3.0) for f in cv.folds))
    assert (sel.mechanism, sel.utility, sel.beta) == ("generalised_exponential", "absolute", 0.5)
    # tiny epsilon: the exponential mechanism is almost uniform; the generalised one tends to its
    # public limit p_i ~ exp(ln(K / beta) min_j (D_j - D_i) / (D_i + D_j)) (t D dominates the utilities)
    _, tiny = select_hyperparameters(model, GRID, epsilon=1e-6, folds=5, cross_validation=cv, diagnostics=True,
                                     mechanism="exponential")
    np.testing.assert_allclose(tiny.probabilities, 1.0 / 3.0, atol=1e-5)
    _, tiny = select_hyperparameters(model, GRID, epsilon=1e-9, folds=5, cross_validation=cv, diagnostics=True)
    D = sel.config_sensitivities
    limit = np.exp(math.log(3 / 0.5) * np.min((D[None, :] - D[:, None]) / (D[:, None] + D[None, :]), axis=1))
    np.testing.assert_allclose(tiny.probabilities, limit / limit.sum(), atol=1e-6)
    # apply assigns the chosen configuration
    sel.apply(model)
    assert model.kernel.lengthscales.numpy() == pytest.approx(1.0)
    assert model.likelihood.variance.numpy() == pytest.approx(0.01)


def test_utilities_include_release_noise(data):
    model = make_gpr(data)
    grid = [{".kernel.lengthscales": ls, ".likelihood.variance": 0.01} for ls in (0.3, 3.0)]
    cv = cross_validate(model, grid, folds=3)
    no_noise = cv.utilities()
    noisy = cv.utilities(0.5, 0.01)
    assert np.all(noisy < no_noise)  # the noise always costs
    sigma = cv.noise_std(0, 0.5, 0.01)
    assert all(s.shape == f.test.shape and np.all(s > 0) for s, f in zip(sigma, cv.folds[0]))
    # a direct check of the utility with the noise: cv_utility at those stds
    assert noisy[0] == pytest.approx(cv_utility(cv.folds[0], data[1][:, 0], 3.0, sigma))
    _, diag = select_hyperparameters(model, grid, epsilon=1.0, epsilon_release=0.5, delta_release=0.01,
                                     cross_validation=cv, diagnostics=True)
    np.testing.assert_allclose(diag.utilities, noisy)


def test_threshold_drops_configurations_first(data, monkeypatch):
    model = make_gpr(data)
    cv = cross_validate(model, GRID, folds=5)
    sens = cv.sensitivities
    assert len(set(np.round(sens, 6))) == 3
    threshold = float(np.sort(sens)[1])  # keeps the two least sensitive
    sel, diag = select_hyperparameters(model, GRID, epsilon=1.0, threshold=threshold, cross_validation=cv,
                                       diagnostics=True)
    assert np.array_equal(sel.kept, sens <= threshold)
    assert sel.sensitivity == pytest.approx(threshold)
    dropped = ~sel.kept
    assert np.all(diag.probabilities[dropped] == 0.0) and np.all(np.isnan(diag.utilities[dropped]))
    assert diag.probabilities.sum() == pytest.approx(1.0) and sel.kept[sel.index]
    with pytest.raises(ValueError, match="threshold"):
        select_hyperparameters(model, GRID, epsilon=1.0, threshold=0.5 * sens.min(), cross_validation=cv)


def test_accountant_charged_once_and_refuses_before_computing(data, monkeypatch):
    model = make_gpr(data)
    acc = PrivacyAccountant(epsilon=1.5, delta=0.01)
    sel = select_hyperparameters(model, GRID, epsilon=1.0, folds=3, accountant=acc)
    assert len(acc.ledger) == 1
    event = acc.ledger[0]
    assert (event.epsilon, event.delta, event.kind, event.mu) == (1.0, 0.0, "pure", None)
    assert acc.spent == (1.0, 0.0)

    def boom(*args, **kwargs):  # any computation on the data would call this
        raise AssertionError("computed before checking the budget")

    monkeypatch.setattr(selection_module, "cross_validate", boom)
    with pytest.raises(BudgetExceededError):
        select_hyperparameters(model, GRID, epsilon=1.0, folds=3, accountant=acc)
    with acc:  # the default accountant is used too
        with pytest.raises(BudgetExceededError):
            select_hyperparameters(model, GRID, epsilon=0.6, folds=3)
    assert len(acc.ledger) == 1
    assert sel.index in range(3)


def test_input_validation(data):
    model = make_gpr(data)
    with pytest.raises(ValueError, match="unknown parameter"):
        cross_validate(model, [{".kernel.lenghtscales": 1.0}])
    with pytest.raises(ValueError, match="both"):
        select_hyperparameters(model, GRID, epsilon=1.0, epsilon_release=1.0)
    with pytest.raises(ValueError):
        select_hyperparameters(model, GRID, epsilon=0.0)
    with pytest.raises(TypeError):
        select_hyperparameters(gpflow.models.GPR(data, gpflow.kernels.SquaredExponential()), GRID, epsilon=1.0)
    with pytest.raises(ValueError, match="indices"):
        cross_validate(model, GRID, folds=[(np.arange(5), np.array([40]))])
    cv = cross_validate(model, GRID[:2], folds=3)
    with pytest.raises(ValueError, match="another"):
        select_hyperparameters(model, GRID, epsilon=1.0, cross_validation=cv)
    # user-given splits, overlapping train/test: the bound still covers it (brute force)
    folds = [(np.arange(0, 20), np.arange(15, 30)), (np.arange(10, 30), np.arange(0, 12))]
    cv = cross_validate(model, GRID[1:2], folds=folds)
    y = data[1][:, 0]
    assert max_neighbour_change(cv.folds[0], y, 3.0, lo=-1.5, hi=1.5) <= cv.sensitivities[0]


# ---------------------------------------------------------------------------------------------
# Composition (DESIGN 7)


def gaussian_event(mu, delta):
    return PrivacyEvent(analytic_gaussian_epsilon(mu, delta), delta, "gaussian", mu)


def test_design7_numbers():
    # 10 releases at noise multiplier 5 (mu = 0.2), total delta 1e-5
    events = [gaussian_event(0.2, 1e-6)] * 10  # basic: each release at delta / 10
    eps_basic, delta_basic = basic_composition(events)
    assert eps_basic == pytest.approx(8.34, abs=0.005) and delta_basic == pytest.approx(1e-5)
    mu = gdp_composition([0.2] * 10)
    assert mu == pytest.approx(0.2 * math.sqrt(10))
    assert gdp_epsilon(mu, 1e-5) == pytest.approx(2.59, abs=0.005)
    pld = pld_epsilon(events, 1e-5)
    assert gdp_epsilon(mu, 1e-5) - 1e-6 <= pld <= gdp_epsilon(mu, 1e-5) + 5e-3  # PLD is pessimistic
    report = composition_report(events, 1e-5)
    assert report["basic"] == pytest.approx(eps_basic) and report["gdp"] == pytest.approx(2.59, abs=0.005)


@pytest.mark.parametrize("s", [1.878, 5.0, 1.2])
def test_pld_reproduces_analytic_gaussian_for_one_release(s):
    # the conversion trap: a replace-one release at noise multiplier s is GaussianDpEvent(2 s)
    import dp_accounting

    event = PrivacyEvent(1.0, 0.01, "gaussian", 1.0 / s)
    exact = analytic_gaussian_epsilon(1.0 / s, 0.01)
    assert pld_epsilon([event], 0.01) == pytest.approx(exact, abs=2e-4)
    acc = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.GaussianDpEvent(2.0 * s))
    assert acc.get_epsilon(0.01) == pytest.approx(exact, abs=2e-4)
    naive = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    naive.compose(dp_accounting.GaussianDpEvent(s))  # the trap: this is a shift of 2, not 1
    assert naive.get_epsilon(0.01) == pytest.approx(analytic_gaussian_epsilon(2.0 / s, 0.01), abs=2e-4)
    assert analytic_gaussian_multiplier(1.0, 0.01) == pytest.approx(1.878, abs=1e-3)


def test_pld_pure_and_mixed_events():
    import dp_accounting

    pure = PrivacyEvent(0.3, 0.0, "pure")
    assert pld_epsilon([pure], 0.0) == pytest.approx(0.3, abs=2e-4)
    p = pure_epsilon_rr_noise_parameter(0.3)
    assert math.log((1 - p / 2) / (p / 2)) == pytest.approx(0.3)
    # Research notes, scenario A: EM at 0.3 then a release at noise multiplier 4.983 is (1, 1e-5)
    release = gaussian_event(1 / 4.983, 1e-5)
    eps = pld_epsilon([pure, release], 1e-5)
    assert eps == pytest.approx(1.0, abs=2e-3)
    acc = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.RandomizedResponseDpEvent(p, 2))
    acc.compose(dp_accounting.GaussianDpEvent(2 * 4.983))
    assert eps == pytest.approx(acc.get_epsilon(1e-5), abs=1e-6)
    # tight <= gdp-plus-basic <= ... and all at most the basic sum of recorded pairs, here
    assert eps < composed_epsilon([pure, release], 1e-5, "gdp")
    # an (eps, delta) event needs its delta: below it the epsilon is infinite
    approx = PrivacyEvent(1.0, 0.01, "approximate")
    assert pld_epsilon([approx], 0.01) == pytest.approx(1.0, abs=2e-4)
    assert pld_epsilon([approx], 0.005) == math.inf


def test_composed_epsilon_methods():
    events = [gaussian_event(0.5, 1e-3), PrivacyEvent(1.0, 0.0, "pure"), PrivacyEvent(0.5, 1e-3, "approximate")]
    basic = composed_epsilon(events, 2e-3, "basic")
    assert basic == pytest.approx(analytic_gaussian_epsilon(0.5, 1e-3) + 1.5)
    assert composed_epsilon(events, 1e-3, "basic") == math.inf  # deltas do not fit
    gdp = composed_epsilon(events, 2e-3, "gdp")
    assert gdp == pytest.approx(analytic_gaussian_epsilon(0.5, 1e-3) + 1.5)  # same delta split here
    assert composed_epsilon(events, 2e-3, "pld") <= gdp
    assert composed_epsilon([], 1e-5, "pld") == 0.0
    with pytest.raises(ValueError):
        composed_epsilon(events, 1e-3, "rdp")
    with pytest.raises(ValueError):
        pld_epsilon([PrivacyEvent(1.0, 0.0, "gaussian", None)], 1e-5)


# ---------------------------------------------------------------------------------------------
# Classification: the one-step Laplace latent, clipped squared error against the labels


def ref_one_step_latent(Xtr, ytr, Xte, lengthscale, variance):
    """numpy: f1 = (K^{-1} + I/4)^{-1} y/2 = K (I + K/4)^{-1} y/2 (Newton step from 0, logistic:
    W = I/4, grad log p = y/2), then the latent mean k_*^T K^{-1} f1 = k_*^T (I + K/4)^{-1} y/2."""
    def k(A, B):
        return variance * np.exp(-0.5 * (A[:, None, 0] - B[None, :, 0]) ** 2 / lengthscale**2)

    K = k(Xtr, Xtr)
    return k(Xte, Xtr) @ np.linalg.solve(np.eye(len(Xtr)) + 0.25 * K, ytr / 2.0)


@pytest.fixture(scope="module")
def labels():
    rng = np.random.default_rng(3)
    X = np.sort(rng.uniform(0.0, 6.0, (24, 1)), axis=0)
    y = np.where(np.sin(2.0 * X[:, 0]) + 0.3 * rng.standard_normal(24) > 0.0, 1.0, -1.0)
    return X, y


def test_classification_fold_matrices_are_the_one_step_latent(labels):
    from dpgp_gpflow.models import DPLaplaceGPC

    X, y = labels
    model = DPLaplaceGPC((X, y[:, None]), gpflow.kernels.SquaredExponential())
    grid = [{".kernel.lengthscales": 0.8, ".kernel.variance": 3.0}]
    cv = cross_validate(model, grid, folds=4, split_seed=2)
    assert cv.data_sensitivity == 2.0  # a label moves from -1 to +1
    for (train, test), fold, pred in zip(cv.splits, cv.folds[0], cv_predictions(cv.folds[0], y)):
        ref = ref_one_step_latent(X[train], y[train], X[test], 0.8, 3.0)
        np.testing.assert_allclose(pred, ref, rtol=1e-7, atol=1e-9)
        assert np.all(fold.offset == 0.0)


def test_classification_brute_force_sensitivity(labels):
    """Flipping any one label never moves the utility by more than the computed sensitivity."""
    from dpgp_gpflow.models import DPLaplaceGPC

    X, y = labels
    model = DPLaplaceGPC((X, y[:, None]), gpflow.kernels.SquaredExponential())
    grid = [{".kernel.lengthscales": ls, ".kernel.variance": v} for ls in (0.1, 1.0) for v in (1.0, 30.0)]
    cv = cross_validate(model, grid, folds=3, split_seed=1)
    rng = np.random.default_rng(4)
    for i in range(len(grid)):
        noise = [rng.uniform(0.0, 2.0, f.test.size) for f in cv.folds[i]]
        u0 = cv_utility(cv.folds[i], y, 2.0, noise)
        worst = max(abs(cv_utility(cv.folds[i], np.where(np.arange(y.size) == j, -y, y), 2.0, noise) - u0)
                    for j in range(y.size))
        assert 0.0 < worst <= cv.sensitivities[i] * (1 + 1e-12)


def test_select_hyperparameters_for_a_classifier(labels):
    from dpgp_gpflow.models import DPLaplaceGPC

    X, y = labels
    model = DPLaplaceGPC((X, y[:, None]), gpflow.kernels.SquaredExponential())
    grid = [{".kernel.lengthscales": ls, ".kernel.variance": 10.0} for ls in (0.005, 0.5, 500.0)]
    acc = PrivacyAccountant(epsilon=1.0, delta=0.0)  # no budget left for a release: the noise-free utility
    with pytest.warns(ReproducibleNoiseWarning), pytest.warns(dp.ReleaseBudgetWarning):
        sel, diag = select_hyperparameters(model, grid, epsilon=1.0, folds=4, seed=0, accountant=acc,
                                           diagnostics=True)
    assert acc.spent[0] == pytest.approx(1.0) and acc.spent[1] == 0.0
    assert np.argmax(diag.utilities) == 1  # lengthscale 0.5 follows sin(2x); 0.005 and 500 predict ~0
    assert diag.probabilities.sum() == pytest.approx(1.0) and sel.chosen in grid
    with pytest.raises(ValueError, match="exceeds the width"):
        cross_validate(model, grid, folds=4, d=3.0)


@pytest.mark.parametrize("sparse", [False, True])
def test_classifier_selection_refuses_a_d_that_does_not_cover_a_label_flip(labels, sparse):
    """A label flip moves a +-1 label by 2: a classifier's selection with any other d is refused before the
    budget is reserved (no cancelled hold), d=2 (or None) accepted. A d = 0.5 selection would compute every
    sensitivity 4x too small, while recording the relation of label moves (a privacy hole)."""
    from dpgp_gpflow.models import DPLaplaceGPC, DPSparseLaplaceGPC

    X, y = labels
    kernel = gpflow.kernels.SquaredExponential()
    model = (DPSparseLaplaceGPC((X, y[:, None]), kernel, X[::4]) if sparse
             else DPLaplaceGPC((X, y[:, None]), kernel))
    grid = [{".kernel.lengthscales": ls} for ls in (0.5, 2.0)]
    acc = PrivacyAccountant(epsilon=2.0, delta=1e-3)
    for d in (0.5, 1.0, 1.999):
        with pytest.raises(ValueError, match="label flip.*leave d unset"):
            select_hyperparameters(model, grid, epsilon=1.0, d=d, folds=3, seed=0, accountant=acc)
        with pytest.raises(ValueError, match="label flip"):
            cross_validate(model, grid, folds=3, d=d)
    assert acc.spent == (0.0, 0.0) and acc.history() == []  # nothing reserved, not even a cancelled hold
    default, two = cross_validate(model, grid, folds=3, split_seed=1), cross_validate(model, grid, folds=3,
                                                                                       split_seed=1, d=2)
    assert default.data_sensitivity == two.data_sensitivity == 2.0
    np.testing.assert_array_equal(default.sensitivities, two.sensitivities)


# ---------------------------------------------------------------------------------------------
# Found by the fuzz suite (tests/fuzz): bad grids are refused before any budget is reserved (the
# accountant's history stays empty) and before any draw; each configuration starts from the model.

LS, KV, NV = ".kernel.lengthscales", ".kernel.variance", ".likelihood.variance"


def test_unknown_parameter_path_is_a_value_error_naming_it(data, draws):
    """FUZZ-BUG-5: a KeyError before the fix."""
    model = make_gpr(data)
    acc = PrivacyAccountant(epsilon=10.0)
    with pytest.raises(ValueError, match=r"\.kernel\.lenghtscales") as info:
        select_hyperparameters(model, [{LS: 1.0}, {".kernel.lenghtscales": 1.0}], epsilon=1.0, folds=3, accountant=acc)
    for path in (LS, KV, NV):  # the valid ones are listed
        assert path in str(info.value)
    assert draws == [] and acc.history() == []


@pytest.mark.parametrize("config, error", [
    ({LS: 0.0}, ValueError), ({LS: -1.0}, ValueError), ({LS: math.nan}, ValueError), ({KV: 0.0}, ValueError),
    ({KV: -2.0}, ValueError), ({KV: math.inf}, ValueError), ({NV: 1e-6}, ValueError), ({NV: 1e-300}, ValueError),
    ({LS: np.array([1.0, 2.0])}, ValueError), ({LS: "a"}, TypeError), ({LS: None}, TypeError), ({LS: True}, TypeError),
])
def test_grid_values_outside_constraints_are_refused_before_reserving(data, draws, config, error):
    """FUZZ-BUG-4: tensorflow's InvalidArgumentError from multiple_assign, after the budget was reserved."""
    model = make_gpr(data)
    acc = PrivacyAccountant(epsilon=10.0)
    with pytest.raises(error, match=next(iter(config)).replace(".", r"\.")):
        select_hyperparameters(model, [{LS: 1.0}, config], epsilon=1.0, folds=3, accountant=acc)
    assert draws == [] and acc.history() == []
    with pytest.raises(error):
        cross_validate(model, [config], folds=3)


def test_each_configuration_starts_from_the_model(data):
    """FUZZ-BUG-6: configurations were assigned one after another to one copy of the model, so the
    second configuration below used the first one's lengthscale 0.3 instead of the model's 1.0."""
    X, Y = data
    model = make_gpr(data)  # lengthscale 1.0, variance 1.0, noise 0.05
    cv = cross_validate(model, [{LS: 0.3}, {KV: 2.0}], folds=3, split_seed=1)
    for index, (ls, var) in enumerate([(0.3, 1.0), (1.0, 2.0)]):
        preds = cv_predictions(cv.folds[index], Y[:, 0])
        for (train, test), pred in zip(cv.splits, preds):
            ref = gpflow.models.GPR((X[train], Y[train]), gpflow.kernels.SquaredExponential(lengthscales=ls, variance=var),
                                    mean_function=gpflow.functions.Constant(0.0), noise_variance=0.05)
            np.testing.assert_allclose(pred, ref.predict_f(X[test])[0].numpy()[:, 0], rtol=1e-9, atol=1e-9)
    assert model.kernel.lengthscales.numpy() == pytest.approx(1.0) and model.kernel.variance.numpy() == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------
# Issue 15, finding 7c: the published Selection holds nothing private; refusals come before the budget


def test_published_selection_holds_no_private_values(data):
    model = make_gpr(data)
    cv = cross_validate(model, GRID, folds=3)
    u = cv.utilities(1.0, 0.01)
    sel = select_hyperparameters(model, GRID, epsilon=1.0, epsilon_release=1.0, delta_release=0.01, cross_validation=cv)
    assert isinstance(sel, Selection)
    assert not hasattr(sel, "utilities") and not hasattr(sel, "probabilities")
    # neither its fields nor its repr carry a utility or a probability
    public = repr(sel) + repr(dataclasses.asdict(sel))
    probabilities = selection_probabilities(u, 1.0, sel.config_sensitivities)
    for value in np.concatenate([u, probabilities]):
        for text in (repr(float(value)), f"{value:.6g}", f"{value:.4f}"):
            assert text not in public, text
    # the diagnostics come only on request, separately, marked private, and their repr shows no value
    again, diag = select_hyperparameters(model, GRID, epsilon=1.0, epsilon_release=1.0, delta_release=0.01,
                                         cross_validation=cv, diagnostics=True)
    assert isinstance(again, Selection) and isinstance(diag, SelectionDiagnostics)
    np.testing.assert_allclose(diag.utilities, u)
    np.testing.assert_allclose(diag.probabilities, probabilities)
    assert "PRIVATE" in repr(diag) and "PRIVATE" in SelectionDiagnostics.__doc__
    assert not any(f"{value:.4g}" in repr(diag) for value in u)


@pytest.mark.parametrize("folds", [1, 31, -2, 2.5, "3", [], [(np.arange(5), np.array([40]))], True])
def test_bad_folds_are_refused_before_the_budget_is_reserved(data, draws, tmp_path, folds):
    model = make_gpr(data)
    path = tmp_path / "budget.sqlite"
    acc = PrivacyAccountant(epsilon=10.0, ledger=path)
    with pytest.raises((TypeError, ValueError)):
        select_hyperparameters(model, GRID, epsilon=1.0, folds=folds, accountant=acc)
    assert draws == [] and acc.history() == []
    with sqlite3.connect(path) as db:  # no row at all, not even a cancelled reservation
        assert db.execute("SELECT COUNT(*) FROM dpgp_events").fetchone()[0] == 0
    with pytest.raises(ValueError, match="mechanism"):
        select_hyperparameters(model, GRID, epsilon=1.0, folds=3, accountant=acc, mechanism="gumbel")
    assert draws == [] and acc.history() == []


def test_select_with_permute_and_flip(data, draws):
    model = make_gpr(data)
    acc = PrivacyAccountant(epsilon=2e5)
    cv = cross_validate(model, GRID, folds=5)
    with pytest.warns(ReproducibleNoiseWarning):
        sel, diag = select_hyperparameters(model, GRID, epsilon=1e5, cross_validation=cv, seed=1, accountant=acc,
                                           mechanism="permute_and_flip", diagnostics=True)
    assert sel.mechanism == "permute_and_flip" and sel.reproducible and sel.index == 1 and sel.chosen == GRID[1]
    assert draws == [3] and len(acc.ledger) == 1 and acc.ledger[0].kind == "pure" and acc.ledger[0].epsilon == 1e5
    assert "permute-and-flip" in acc.ledger[0].description
    np.testing.assert_allclose(diag.probabilities, pf_reference(diag.utilities, 1e5, sel.sensitivity), atol=1e-12)
    # the same seed gives the same choice (as the exponential mechanism's seeded draw does)
    with pytest.warns(ReproducibleNoiseWarning):
        again = select_hyperparameters(model, GRID, epsilon=0.5, cross_validation=cv, seed=7,
                                       mechanism="permute_and_flip")
    with pytest.warns(ReproducibleNoiseWarning):
        third = select_hyperparameters(model, GRID, epsilon=0.5, cross_validation=cv, seed=7,
                                       mechanism="permute_and_flip")
    assert again.index == third.index and again.reproducible
    # exact (seed None): no warning, not reproducible, and PF's P(best) >= the exponential mechanism's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", dp.ReleaseBudgetWarning)  # no release budget here: the noise-free utility
        exact, pf = select_hyperparameters(model, GRID, epsilon=0.5, cross_validation=cv,
                                           mechanism="permute_and_flip", diagnostics=True)
    _, em = select_hyperparameters(model, GRID, epsilon=0.5, cross_validation=cv, diagnostics=True)
    assert not exact.reproducible and exact.mechanism == "permute_and_flip"
    best = int(np.argmax(pf.utilities))
    assert pf.probabilities[best] >= em.probabilities[best]


def test_configurations_with_the_same_fold_maps_share_their_work(data, monkeypatch):
    """Kernel and noise variances scaled together give the same GP map up to rounding: one set of
    fold matrices and one noise plan per fold serves them all, with the utilities and sensitivities
    each configuration gets on its own."""
    model = make_gpr(data)
    grid = [{LS: 1.0, KV: 1.0, NV: 0.05}, {LS: 1.0, KV: 4.0, NV: 0.2}, {LS: 1.0, KV: 3.0, NV: 0.15},
            {LS: 1.0, KV: 1.0, NV: 0.2}, {LS: 0.5, KV: 1.0, NV: 0.05}, {LS: 0.5, KV: 1e3, NV: 50.0}]
    built = []
    original = selection_module.cross_validation._NoiseProfile

    def counting(C, **kwargs):
        built.append(np.shape(C))
        return original(C, **kwargs)

    monkeypatch.setattr(selection_module.cross_validation, "_NoiseProfile", counting)
    cv = cross_validate(model, grid, folds=3)
    assert list(cv.owners) == [0, 0, 0, 3, 4, 4]
    u = cv.utilities(1.0, 0.01, release_noise="optimised")
    assert len(built) == 3 * 3  # three owners, three folds each
    assert cv.utilities(1.0, 0.01) is not None and len(built) == 9  # the bound runs no noise optimisation
    for i, config in enumerate(grid):  # each configuration alone: the same numbers
        alone = cross_validate(model, [config], folds=3)
        assert list(alone.owners) == [0]
        assert cv.sensitivities[i] == pytest.approx(alone.sensitivities[0], rel=1e-9)
        assert u[i] == pytest.approx(alone.utilities(1.0, 0.01, release_noise="optimised")[0], rel=1e-6)
        for f, g in zip(cv.folds[i], alone.folds[0]):
            np.testing.assert_allclose(f.C, g.C, rtol=0, atol=1e-9 * np.abs(g.C).max())


def test_fold_maps_sharing_and_release_noise_do_not_read_the_outputs(data):
    """Public: two datasets that differ only in their outputs get the same owners, fold matrices and
    release-noise std (bit for bit); only the utilities differ."""
    X, Y = data
    other = (X, np.clip(-Y[::-1] + 0.3, -1.5, 1.5))
    grid = [{LS: 1.0, KV: 1.0, NV: 0.05}, {LS: 1.0, KV: 4.0, NV: 0.2}, {LS: 0.3, KV: 1.0, NV: 0.01}]
    a, b = (cross_validate(make_gpr(d), grid, folds=3) for d in (data, other))
    assert list(a.owners) == list(b.owners) == [0, 0, 2]
    np.testing.assert_array_equal(a.sensitivities, b.sensitivities)
    for i in range(len(grid)):
        for f, g in zip(a.folds[i], b.folds[i]):
            np.testing.assert_array_equal(f.C, g.C)
        for s, t in [*zip(a.noise_std(i, 1.0, 0.01), b.noise_std(i, 1.0, 0.01)),
                     *zip(a.noise_std(i, 1.0, 0.01, release_noise="optimised"),
                          b.noise_std(i, 1.0, 0.01, release_noise="optimised"))]:
            np.testing.assert_array_equal(s, t)
            assert np.all(np.isfinite(s)) and np.all(s > 0)
    assert not np.array_equal(a.utilities(1.0, 0.01), b.utilities(1.0, 0.01))


def test_shared_configurations_skip_their_full_fold_maps(data, monkeypatch):
    """Sharing is decided on a small public sub-problem before the full fold maps are computed: a
    configuration with the same maps as an earlier one costs one probe map, not one map per fold."""
    model = make_gpr(data)
    grid = [{LS: 1.0, KV: 1.0, NV: 0.05}, {LS: 1.0, KV: 4.0, NV: 0.2}, {LS: 1.0, KV: 3.0, NV: 0.15},
            {LS: 1.0, KV: 1.0, NV: 0.2}, {LS: 0.5, KV: 1.0, NV: 0.05}, {LS: 0.5, KV: 1e3, NV: 50.0}]
    calls = []
    original = selection_module.cross_validation._fold

    def counting(work, train, test):
        calls.append((train.size, test.size))
        return original(work, train, test)

    monkeypatch.setattr(selection_module.cross_validation, "_fold", counting)
    splits = selection_module.cross_validation.resolve_splits(3, 30)
    cv = cross_validate(model, grid, folds=splits)
    assert list(cv.owners) == [0, 0, 0, 3, 4, 4]
    probe = selection_module.cross_validation._probe_split(splits)
    assert sum(c == (probe[0].size, probe[1].size) for c in calls) >= len(grid)
    assert all(f.C.shape == (test.size, train.size) for f, (train, test) in zip(cv.folds[5], splits))
    assert len(calls) == len(grid) + 3 * len(splits)  # one probe per configuration, full folds for the 3 owners
    # the probe is public and spread over the first fold (at most PROBE_TRAIN / PROBE_TEST points)
    big = selection_module.cross_validation.resolve_splits(5, 3000)
    tr, te = selection_module.cross_validation._probe_split(big)
    assert tr.size == selection_module.cross_validation.PROBE_TRAIN and np.all(np.isin(tr, big[0][0]))
    assert te.size == selection_module.cross_validation.PROBE_TEST and np.all(np.isin(te, big[0][1]))
    assert tr.min() == big[0][0].min() and tr.max() == big[0][0].max()


# ---------------------------------------------------------------------------------------------
# Issue 26: the generalised exponential mechanism, brute-force privacy over neighbours, and the
# cross-validation a selection may reuse


def gem_reference(u, D, epsilon, beta):
    """Raskhodnikova & Smith's normalised scores written out with loops (independent of the package)."""
    K = len(u)
    t = 2.0 * math.log(K / beta) / epsilon
    return np.array([min(((u[i] - t * D[i]) - (u[j] - t * D[j])) / (D[i] + D[j]) for j in range(K))
                     for i in range(K)])


def test_generalised_scores_match_reference_and_are_1_sensitive():
    rng = np.random.default_rng(26)
    for trial in range(200):
        K = int(rng.integers(1, 9))
        u = rng.normal(0.0, 10.0, K)
        D = rng.uniform(0.1, 5.0, K)
        eps, beta = float(rng.choice([0.1, 1.0, 3.0])), float(rng.choice([0.05, 0.5, 1.0]))
        s = generalised_scores(u, D, eps, beta)
        np.testing.assert_allclose(s, gem_reference(u, D, eps, beta), rtol=1e-12, atol=1e-12)
        assert np.all(s <= 1e-12) and np.max(s) == pytest.approx(0.0, abs=1e-12)
        # neighbours: every utility moves by at most its own D_i (corners and interior points)
        for _ in range(20):
            signs = rng.choice([-1.0, 1.0], K) if rng.random() < 0.5 else rng.uniform(-1.0, 1.0, K)
            s2 = generalised_scores(u + signs * D, D, eps, beta)
            assert np.max(np.abs(s2 - s)) <= 1.0 + 1e-12


def test_generalised_scores_in_blocks_equal_the_whole(monkeypatch):
    rng = np.random.default_rng(5)
    u, D = rng.normal(0.0, 10.0, 37), rng.uniform(0.1, 5.0, 37)
    whole = gem_reference(u, D, 1.0, 0.5)
    monkeypatch.setattr(selection_module.mechanism, "_SCORE_BLOCK", 4)
    np.testing.assert_allclose(generalised_scores(u, D, 1.0), whole, rtol=1e-12, atol=1e-12)


def test_generalised_mechanism_exact_draws_match_probabilities():
    u = np.array([-3.0, -1.0, 0.0, -0.5])
    D = np.array([0.5, 2.0, 1.0, 0.7])
    p = selection_probabilities(u, 2.0, D)
    w = 2.0 * gem_reference(u, D, 2.0, 0.5) / 2.0
    np.testing.assert_allclose(p, np.exp(w) / np.exp(w).sum(), rtol=1e-12)
    counts = np.zeros(4)
    for _ in range(4000):
        index, probs = generalised_exponential_mechanism(u, 2.0, D)  # exact, from the OS CSPRNG
        counts[index] += 1
    np.testing.assert_allclose(probs, p)
    assert stats.chisquare(counts, 4000 * p).pvalue > 1e-4


@pytest.mark.parametrize("mechanism", ["generalised_exponential", "exponential", "permute_and_flip"])
@pytest.mark.parametrize("utility", ["absolute", "squared"])
def test_selection_probabilities_are_epsilon_dp_over_neighbours(mechanism, utility):
    # Brute force: small GPs, a grid of 4 configurations, the release noise included; every
    # neighbour (one output moved to a bound, by +-d, or inside) changes no selection probability by
    # more than a factor exp(epsilon).
    rng = np.random.default_rng(11)
    eps = 0.7
    for trial in range(4):
        n = int(rng.integers(6, 10))
        X = rng.uniform(0.0, 5.0, (n, 1))
        y = rng.uniform(0.0, 1.0, n)
        model = DPGPR((X, y[:, None]), gpflow.kernels.SquaredExponential(), y_bounds=(0.0, 1.0), noise_variance=0.1)
        grid = [{".kernel.lengthscales": ls, ".likelihood.variance": nv} for ls, nv in
                [(0.2, 1e-3), (1.0, 0.1), (3.0, 0.01), (0.5, 1.0)]]
        cv = cross_validate(model, grid, folds=3, split_seed=trial)
        noise = [cv.noise_std(i, 1.0, 0.01) for i in range(len(grid))]
        sens = cv.sensitivities_of(utility)

        def probabilities(values):
            u = [cv_utility(cv.folds[i], values, 1.0, noise[i], utility=utility) for i in range(len(grid))]
            return selection_probabilities(u, eps, sens, mechanism=mechanism)

        p0 = probabilities(y)
        for j in range(n):
            for value in (0.0, 1.0, 0.37):
                y2 = y.copy()
                y2[j] = value
                ratio = np.max(np.abs(np.log(probabilities(y2)) - np.log(p0)))
                assert ratio <= eps * (1 + 1e-9), (trial, j, value)


def test_cross_validation_of_another_model_or_a_trained_one_is_refused(data):
    model = make_gpr(data)
    other = make_gpr(data)
    cv = cross_validate(model, GRID, folds=3)
    assert cv.computed_from(model) and not cv.computed_from(other)
    with pytest.raises(ValueError, match="another model"):
        select_hyperparameters(other, GRID, epsilon=1.0, cross_validation=cv)
    # the fold maps used the model's noise variance: a changed one makes the cross-validation stale
    changed = make_gpr(data)
    cv = cross_validate(changed, [{".kernel.lengthscales": 1.0}], folds=3)
    changed.likelihood.variance.assign(0.5)
    changed.declare_hyperparameters_public()
    with pytest.raises(ValueError, match="other parameter values"):
        select_hyperparameters(changed, [{".kernel.lengthscales": 1.0}], epsilon=1.0, cross_validation=cv)
    # a model trained on its outputs: the leak guard fires in cross_validate (and so in the selection)
    trained = make_gpr(data)
    gpflow.optimizers.Scipy().minimize(trained.training_loss, trained.trainable_variables,
                                       options={"maxiter": 3})
    from dpgp_gpflow import PrivacyLeakError
    acc = PrivacyAccountant(epsilon=5.0, delta=0.0)
    with pytest.raises(PrivacyLeakError):
        cross_validate(trained, GRID, folds=3)
    with pytest.raises(PrivacyLeakError):
        select_hyperparameters(trained, GRID, epsilon=1.0, accountant=acc)
    assert acc.spent == (0.0, 0.0)


def test_configurations_that_cannot_be_released_are_no_candidates(data, monkeypatch):
    model = make_gpr(data)
    cv = cross_validate(model, GRID, folds=3)
    original = type(cv).noise_std

    def refused_first(self, index, *args, **kwargs):  # pretend configuration 0's release is refused
        out = original(self, index, *args, **kwargs)
        return [np.full_like(s, np.inf) for s in out] if int(index) == 0 else out

    monkeypatch.setattr(type(cv), "noise_std", refused_first)
    assert list(cv.releasable(range(3), 1.0, 0.01)) == [False, True, True]
    sel, diag = select_hyperparameters(model, GRID, epsilon=1.0, epsilon_release=1.0, delta_release=0.01,
                                       cross_validation=cv, diagnostics=True)
    assert not sel.kept[0] and sel.kept[1:].all() and diag.probabilities[0] == 0.0 and sel.index != 0
    assert diag.probabilities.sum() == pytest.approx(1.0)


def test_release_noise_bound_is_the_lower_bound_and_tracks_the_optimised_noise(data):
    # "bound": s d max_i |C_ji| computed here by hand from the fold maps; never above the optimised
    # noise of the same fold's release (it is a lower bound on any Gaussian release), and close to it
    model = make_gpr(data)
    grid = [{LS: 0.3, NV: 0.01}, {LS: 1.0, NV: 0.05}, {LS: 3.0, NV: 0.2}]
    cv = cross_validate(model, grid, folds=3)
    s = analytic_gaussian_multiplier(1.0, 0.01)
    for i in range(len(grid)):
        bound = cv.noise_std(i, 1.0, 0.01)
        exact = cv.noise_std(i, 1.0, 0.01, release_noise="optimised")
        for f, b, e in zip(cv.folds[i], bound, exact):
            np.testing.assert_allclose(b, s * 3.0 * np.max(np.abs(f.C), axis=1), rtol=1e-12)
            assert np.all(b <= e * (1 + 1e-9))
            assert np.median(e / b) < 1.5
    sel = select_hyperparameters(model, grid, epsilon=1.0, epsilon_release=1.0, delta_release=0.01,
                                 cross_validation=cv, release_noise="optimised")
    assert sel.release_noise == "optimised"
    with pytest.raises(ValueError, match="release_noise"):
        select_hyperparameters(model, grid, epsilon=1.0, cross_validation=cv, release_noise="exact")
