"""Private hyperparameter selection with persons (``groups=``; docs/selection.md#groups).

A neighbour moves all the outputs of one person, each within the public bounds. Every check is a brute
force from that definition, against NumPy references written here: the fold maps ``K_*f (K_ff + s2 I)^{-1}``
by an LU solve (tests/reference.py), the expected absolute loss as SciPy's folded-normal mean, the
influence and the release-noise bound by loops over persons, the Gaussian multiplier by root-finding on
the Balle-Wang delta. The neighbouring datasets are every corner of every person's box (each of the
person's outputs at a bound: all ``2^|G|`` of them) and random points inside it.
"""

from __future__ import annotations

import itertools

import gpflow
import numpy as np
import pytest
from reference import reference_influence, reference_maps, reference_multiplier
from scipy import stats

from dpgp_gpflow import PrivacyAccountant
from dpgp_gpflow.models import DPGPR
from dpgp_gpflow.selection import (
    Fold,
    cross_validate,
    cv_sensitivity,
    person_influence,
    select_hyperparameters,
    selection_probabilities,
)

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ReproducibleNoiseWarning")

LO, HI = 0.0, 1.0
D = HI - LO
NOISE = 0.1
GRID = [{".kernel.lengthscales": ls, ".likelihood.variance": nv} for ls, nv in
        [(0.2, 1e-3), (1.0, 0.1), (3.0, 0.01), (0.5, 1.0)]]
SIZES = [1, 2, 3, 4, 2, 1, 3]  # 16 rows, persons of up to MAX_CORNER_ROWS = 4 rows
MECHANISMS = ["generalised_exponential", "exponential", "permute_and_flip"]


def persons_data(sizes, seed, spread=0.2):
    """Persons with the given numbers of rows, each person's inputs within ``spread`` of a random centre
    (nearly parallel columns of C: a person's rows act together), rows shuffled, arbitrary identifiers."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(len(sizes)), sizes)
    centres = rng.uniform(0.0, 5.0, len(sizes))
    X = (centres[groups] + spread * rng.uniform(-1.0, 1.0, groups.size))[:, None]
    y = rng.uniform(LO, HI, groups.size)
    perm = rng.permutation(groups.size)
    return X[perm], y[perm], groups[perm] * 5 + 2


def gpr(X, y, groups=None):
    return DPGPR((X, y[:, None]), gpflow.kernels.SquaredExponential(), y_bounds=(LO, HI), noise_variance=NOISE,
                 groups=groups, hyperparameters_public=True)


def reference_utility(maps, splits, y, noise=None, utility="absolute"):
    """-sum of E loss(pred - y + Z) over folds, pred = m + C (y_train - m), m the bounds' midpoint;
    E|a + Z| as the folded normal's mean (SciPy), clip(a, -4d, 4d)^2 without noise."""
    m = 0.5 * (LO + HI)
    total = 0.0
    for f, (C, (tr, te)) in enumerate(zip(maps, splits)):
        a = m + C @ (y[tr] - m) - y[te]
        if utility == "squared":
            total += np.sum(np.clip(a, -4 * D, 4 * D) ** 2)
        elif noise is None or not np.any(noise[f] > 0):
            total += np.sum(np.abs(a))
        else:
            s = noise[f]
            total += np.sum(stats.foldnorm.mean(np.abs(a) / s, scale=s))
    return -total


def person_neighbours(y, groups, interior=2, seed=0):
    """Every neighbour of ``y``: for each person, every corner of the box (each output at LO or HI) and
    ``interior`` uniform points inside it; yields (person, y')."""
    rng = np.random.default_rng(seed)
    for person in np.unique(groups):
        rows = np.flatnonzero(groups == person)
        values = list(itertools.product((LO, HI), repeat=rows.size)) + list(rng.uniform(LO, HI, (interior, rows.size)))
        for v in values:
            y2 = y.copy()
            y2[rows] = v
            yield person, y2


# ---------------------------------------------------------------------------------------------
# groups=None is unchanged


def test_groups_none_and_one_row_per_person_select_exactly_as_before():
    X, y, _ = persons_data(SIZES, 0)
    runs = []
    for groups in (None, np.arange(y.size)[::-1]):
        for release_noise, grid in (("bound", GRID), ("optimised", GRID[:2])):  # the optimiser is slower
            sel, diag = select_hyperparameters(
                gpr(X, y, groups), grid, epsilon=1.0, folds=3, seed=3, diagnostics=True, epsilon_release=1.0,
                delta_release=0.01, release_noise=release_noise, accountant=PrivacyAccountant(epsilon=10, delta=0.5))
            runs.append((sel.config_sensitivities, diag.utilities, diag.probabilities, sel.index))
    for a, b in zip(runs[:2], runs[2:]):  # singletons are the per-row relation, bit for bit
        assert all(np.array_equal(x, z) for x, z in zip(a, b))
    # the per-row sensitivities are d max_j influence_j (NumPy reference)
    cv = cross_validate(gpr(X, y), GRID, folds=3)
    for i, config in enumerate(GRID):
        maps = reference_maps(X, cv.splits, config)
        assert cv.sensitivities[i] == pytest.approx(D * reference_influence(maps, cv.splits, y.size).max(), rel=1e-9)


def test_groups_none_probabilities_are_those_of_the_release_before_groups():
    # Recorded from the commit before selection accepted groups (HEAD 9ac9c7f), same problem and seed.
    X, y, _ = persons_data(SIZES, 0)
    _, diag = select_hyperparameters(gpr(X, y), GRID, epsilon=1.0, folds=3, seed=3, diagnostics=True,
                                     epsilon_release=1.0, delta_release=0.01,
                                     accountant=PrivacyAccountant(epsilon=10, delta=0.5))
    np.testing.assert_allclose(diag.probabilities, BEFORE_GROUPS, rtol=1e-9)


BEFORE_GROUPS = np.array([0.05293951402279958, 0.21557863303932162, 0.28933431270391646, 0.44214754023396236])


# ---------------------------------------------------------------------------------------------
# The grouped sensitivity and noise against brute force


@pytest.mark.parametrize("utility", ["absolute", "squared"])
def test_grouped_sensitivity_bounds_every_corner_of_every_person(utility):
    """|u(D') - u(D)| <= d L max_G sum_{i in G} influence_i over every corner (and interior points) of every
    person's box, the utilities recomputed in NumPy."""
    for seed in range(2):
        X, y, groups = persons_data(SIZES, seed)
        cv = cross_validate(gpr(X, y, groups), GRID, folds=3, split_seed=seed)
        L = 1.0 if utility == "absolute" else 8.0 * D
        for i, config in enumerate(GRID):
            maps = reference_maps(X, cv.splits, config)
            for f, C in enumerate(maps):
                np.testing.assert_allclose(cv.folds[i][f].C, C, rtol=1e-6, atol=1e-9)
            noise = cv.noise_std(i, 1.0, 0.01) if utility == "absolute" else None
            # the bound: d L max_G of the sum of the person's rows' influences (NumPy)
            influence = reference_influence(maps, cv.splits, y.size)
            bound = D * L * max(influence[groups == g].sum() for g in np.unique(groups))
            assert cv.sensitivities_of(utility)[i] == pytest.approx(bound, rel=1e-9)
            u0 = reference_utility(maps, cv.splits, y, noise, utility)
            if utility == "absolute":
                assert cv.utilities(1.0, 0.01, indices=[i])[i] == pytest.approx(u0, rel=1e-9)
            worst = max(abs(reference_utility(maps, cv.splits, y2, noise, utility) - u0)
                        for _, y2 in person_neighbours(y, groups, seed=seed))
            assert worst <= cv.sensitivities_of(utility)[i] * (1 + 1e-12), (seed, i)


def test_person_influence_and_cv_sensitivity_with_groups_on_a_hand_worked_case():
    # Two folds of 4 (A trains B, B trains A), C = 1/4 everywhere: every influence is 1 + 4/4 = 2.
    A, B = np.arange(4), np.arange(4, 8)
    folds = [Fold(A, B, np.full((4, 4), 0.25)), Fold(B, A, np.full((4, 4), 0.25))]
    groups = np.array([9, 9, 9, 1, 1, 4, 4, 4])  # persons of 3, 2, 3 rows (person 9 only in A)
    np.testing.assert_allclose(person_influence(folds, 8, groups), [4.0, 6.0, 6.0])  # ids 1, 4, 9
    assert cv_sensitivity(folds, 8, 2.0, groups=groups) == pytest.approx(12.0)
    assert cv_sensitivity(folds, 8, 2.0) == pytest.approx(4.0)
    assert cv_sensitivity(folds, 8, 2.0, utility="squared", groups=groups) == pytest.approx(16 * 2 * 6)


def test_release_noise_bound_with_groups_is_over_every_persons_corners():
    """release_noise="bound" with persons: s d max_G |sum_{i in G} C_ji s_i| over corners, i.e.
    s d max_G sum_{i in G} |C_ji| (at most four training rows per person), by loops in NumPy; persons of
    more than four training rows get the package's bound s d |G| max_{i in G} |C_ji|."""
    s = reference_multiplier(1.0, 0.01)
    X, y, groups = persons_data(SIZES + [6], 4)  # a person of six rows
    model = gpr(X, y, groups)
    cv = cross_validate(model, GRID, folds=3, split_seed=1)
    big = [g for g in np.unique(groups) if np.sum(groups == g) == 6][0]
    assert any(np.sum(groups[tr] == big) > 4 for tr, _ in cv.splits)  # the bound rule is exercised
    for i, config in enumerate(GRID):
        maps = reference_maps(X, cv.splits, config)
        got = cv.noise_std(i, 1.0, 0.01)
        rows = cross_validate(gpr(X, y), GRID, folds=3, split_seed=1).noise_std(i, 1.0, 0.01)
        for f, (C, (tr, _)) in enumerate(zip(maps, cv.splits)):
            largest = np.zeros(C.shape[0])
            for g in np.unique(groups[tr]):
                cols = C[:, groups[tr] == g]
                if cols.shape[1] <= 4:  # every corner, both signs
                    corners = np.array(list(itertools.product((-1.0, 1.0), repeat=cols.shape[1])))
                    value = np.abs(cols @ corners.T).max(axis=1)
                    np.testing.assert_allclose(value, np.abs(cols).sum(axis=1), rtol=1e-12)
                else:
                    value = cols.shape[1] * np.abs(cols).max(axis=1)
                largest = np.maximum(largest, value)
            np.testing.assert_allclose(got[f], s * D * largest, rtol=1e-6, atol=1e-12)
            np.testing.assert_allclose(rows[f], s * D * np.abs(C).max(axis=1), rtol=1e-6, atol=1e-12)
            assert np.all(got[f] >= rows[f] * (1 - 1e-12)) and np.any(got[f] > 1.5 * rows[f])


def test_optimised_release_noise_with_groups_covers_every_person():
    """release_noise="optimised" with persons: the noise plan of the fold's persons (NoisePlan with the
    neighbour map) is at least the grouped bound at every prediction and above the per-row plan's."""
    X, y, groups = persons_data(SIZES, 2)
    cv = cross_validate(gpr(X, y, groups), GRID[:2], folds=3)
    cv_rows = cross_validate(gpr(X, y), GRID[:2], folds=3)
    for i in range(2):
        opt = cv.noise_std(i, 1.0, 0.01, release_noise="optimised")
        bound = cv.noise_std(i, 1.0, 0.01)
        per_row = cv_rows.noise_std(i, 1.0, 0.01, release_noise="optimised")
        for o, b, r in zip(opt, bound, per_row):
            assert np.all(o >= b * (1 - 1e-6))
            assert np.sum(o) > 1.2 * np.sum(r)


# ---------------------------------------------------------------------------------------------
# The selection probabilities over every grouped neighbour


def probabilities_over_neighbours(cv, X, y, groups, sens, epsilon, mechanism, noise):
    """The largest |log p(D') - log p(D)| over every grouped neighbour D', utilities in NumPy."""
    maps = [reference_maps(X, cv.splits, config) for config in cv.grid]

    def probabilities(values):
        u = [reference_utility(maps[i], cv.splits, values, noise[i]) for i in range(len(cv.grid))]
        return selection_probabilities(u, epsilon, sens, mechanism=mechanism)

    p0 = probabilities(y)
    return max(np.max(np.abs(np.log(probabilities(y2)) - np.log(p0))) for _, y2 in person_neighbours(y, groups))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_selection_probabilities_are_epsilon_dp_over_every_grouped_neighbour(mechanism):
    eps = 0.7
    for seed in range(2):
        X, y, groups = persons_data(SIZES, seed)
        cv = cross_validate(gpr(X, y, groups), GRID, folds=3, split_seed=seed)
        noise = [cv.noise_std(i, 1.0, 0.01) for i in range(len(GRID))]
        ratio = probabilities_over_neighbours(cv, X, y, groups, cv.sensitivities, eps, mechanism, noise)
        assert ratio <= eps * (1 + 1e-9), (seed, ratio)


def designed_folds(shift):
    """Two folds of 4 (A = rows 0-3 trains B = 4-7 and back), C = 1/4: at y = 0 every residual of fold 1
    is ``shift`` and of fold 2 ``-shift``. Two persons of four rows (A and B); raising one person's outputs
    by d moves every |residual| it touches the same way: the utility by exactly d (sum of its influences) = 8d."""
    A, B = np.arange(4), np.arange(4, 8)
    C = np.full((4, 4), 0.25)
    return [Fold(A, B, C, np.full(4, shift)), Fold(B, A, C, np.full(4, -shift))]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_per_row_sensitivities_fail_the_grouped_check_and_the_grouped_ones_pass(mechanism):
    """Broken variant: the selection calibrated with per-row sensitivities (``groups`` ignored). On a
    problem where persons' changes add up (config 0's utility falls by 8d, config 1's rises by 8d when a
    person's four outputs rise by d), its probabilities move by more than exp(eps) over a grouped neighbour;
    with the grouped sensitivities they never do, and per row the per-row ones are valid."""
    eps = 2.0
    groups = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    configs = [designed_folds(5.0), designed_folds(-3.0)]
    y = np.zeros(8)
    grouped = np.array([cv_sensitivity(f, 8, D, groups=groups) for f in configs])
    per_row = np.array([cv_sensitivity(f, 8, D) for f in configs])
    np.testing.assert_allclose(grouped, [8.0, 8.0])  # by hand: four rows of influence 2
    np.testing.assert_allclose(per_row, [2.0, 2.0])
    u = lambda folds, values: -sum(np.abs(f.offset + f.C @ values[f.train] - values[f.test]).sum() for f in folds)  # noqa: E731
    raised = np.r_[np.ones(4), np.zeros(4)]  # person 0's outputs up by d: the grouped bound is reached
    assert [u(f, raised) - u(f, y) for f in configs] == pytest.approx([-8.0, 8.0])

    def ratio(sens, neighbours):
        def probabilities(values):  # utilities in NumPy: -sum |offset + C y_train - y_test|
            return selection_probabilities([u(f, values) for f in configs], eps, sens, mechanism=mechanism)
        p0 = probabilities(y)
        return max(np.max(np.abs(np.log(probabilities(y2)) - np.log(p0))) for y2 in neighbours)

    by_person = [y2 for _, y2 in person_neighbours(y, groups, interior=5)]
    by_row = [np.where(np.arange(8) == j, v, y) for j in range(8) for v in (LO, HI, 0.4)]
    assert ratio(grouped, by_person) <= eps * (1 + 1e-9)
    assert ratio(per_row, by_row) <= eps * (1 + 1e-9)
    assert ratio(per_row, by_person) > 1.3 * eps  # ignoring the persons breaks the guarantee


# ---------------------------------------------------------------------------------------------
# End to end


def test_select_hyperparameters_with_groups_uses_the_grouped_sensitivities_and_noise():
    X, y, groups = persons_data(SIZES, 5)
    model = gpr(X, y, groups)
    accountant = PrivacyAccountant(epsilon=2.0, delta=0.5)
    sel, diag = select_hyperparameters(model, GRID, epsilon=1.0, folds=3, diagnostics=True, epsilon_release=1.0,
                                       delta_release=0.01, accountant=accountant)
    assert accountant.spent == pytest.approx((1.0, 0.0))
    cv = cross_validate(model, GRID, folds=3)
    maps = [reference_maps(X, cv.splits, config) for config in GRID]
    sens = [D * max(reference_influence(m, cv.splits, y.size)[groups == g].sum() for g in np.unique(groups))
            for m in maps]
    np.testing.assert_allclose(sel.config_sensitivities, sens, rtol=1e-9)
    u = [reference_utility(m, cv.splits, y, cv.noise_std(i, 1.0, 0.01)) for i, m in enumerate(maps)]
    np.testing.assert_allclose(diag.utilities, u, rtol=1e-9)
    np.testing.assert_allclose(diag.probabilities, selection_probabilities(u, 1.0, sens), rtol=1e-9)
    assert sel.chosen == GRID[sel.index]
