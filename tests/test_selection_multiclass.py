"""Private hyperparameter selection for several classes (``DPMulticlassLaplaceGPC``,
``DPSparseMulticlassLaplaceGPC``; docs/selection.md#several-classes).

The utility is the sum over the K classes of the binary one-vs-rest utility (labels ``+1`` for the class, ``-1``
elsewhere, d = 2). A neighbour moves one row's label from class a to class b (with ``groups`` each of one
person's rows to any class), changing two one-vs-rest columns per row; the sensitivity is
``2 d L max_G sum_{i in G} influence_i``. Every check is against NumPy references written here: the
first-step latent maps ``2 K_*f (K_ff + 4 I)^{-1}`` and the SoR ``1/2 K_*z (K_zz + K_zf K_fz / 4)^{-1} K_zf`` by
dense solves, the expected absolute loss from SciPy's normal cdf and pdf, influences and noise bounds by
loops, the Gaussian multiplier by root-finding on the Balle-Wang delta. Neighbours: every label moved to every
other class (every reassignment of a person's rows).
"""

from __future__ import annotations

import itertools
import math
import warnings

import gpflow
import numpy as np
import pytest
from reference import analytic_delta, k_se, reference_influence, reference_multiplier
from scipy import optimize, stats

import dpgp_gpflow as dp
from dpgp_gpflow import PrivacyAccountant, PrivacyLeakError
from dpgp_gpflow.models import DPLaplaceGPC, DPMulticlassLaplaceGPC, DPSparseMulticlassLaplaceGPC
from dpgp_gpflow.selection import (
    Fold,
    cross_validate,
    cv_sensitivity,
    default_grid,
    select_hyperparameters,
    selection_probabilities,
)

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ReproducibleNoiseWarning")

D = 2.0  # a label moves by 2 in each of the two one-vs-rest columns it leaves and joins
GRID = [{".kernel.lengthscales": ls, ".kernel.variance": v} for ls, v in [(0.1, 4.0), (0.8, 4.0), (3.0, 1.0)]]
MECHANISMS = ["generalised_exponential", "exponential", "permute_and_flip"]
JITTER = 1e-6  # GPflow's default jitter, added to K_zz by the SoR features


def class_data(n, K, seed, sizes=None):
    """Labels 0..K-1 following sin(x) bands (some noise); with ``sizes`` persons of those rows at nearby inputs."""
    rng = np.random.default_rng(seed)
    if sizes is None:
        X = np.sort(rng.uniform(0.0, 6.0, (n, 1)), axis=0)
        groups = None
    else:
        groups = np.repeat(np.arange(len(sizes)), sizes)
        X = (rng.uniform(0.0, 6.0, len(sizes))[groups] + 0.2 * rng.uniform(-1, 1, groups.size))[:, None]
        groups = groups * 7 + 3
    score = np.sin(X[:, 0]) + 0.3 * rng.standard_normal(X.shape[0])
    labels = np.clip(np.floor((score + 1.2) / 2.4 * K), 0, K - 1).astype(np.int64)
    return X, labels, groups


def multiclass(X, labels, K, groups=None, sparse=False):
    if sparse:
        return DPSparseMulticlassLaplaceGPC((X, labels), gpflow.kernels.SquaredExponential(), X[::3].copy(),
                                            num_classes=K, hyperparameters_public=True, groups=groups)
    return DPMulticlassLaplaceGPC((X, labels), gpflow.kernels.SquaredExponential(), num_classes=K,
                                  hyperparameters_public=True, groups=groups)


def reference_map(X, tr, te, config, Z=None):
    """The first-step latent map at X[te] from the labels at X[tr]: 2 K_*f (K_ff + 4 I)^{-1}, or with inducing
    inputs Z the SoR one 1/2 K_*z (K_zz + K_zf K_fz / 4)^{-1} K_zf (push-through of Phi* (I + Phi^T Phi/4)^-1 Phi^T / 2)."""
    k = lambda A, B: k_se(A, B, variance=config[".kernel.variance"], lengthscale=config[".kernel.lengthscales"])  # noqa: E731
    if Z is None:
        return 2.0 * np.linalg.solve(k(X[tr], X[tr]) + 4.0 * np.eye(tr.size), k(X[tr], X[te])).T
    Kzz = k(Z, Z) + JITTER * np.eye(len(Z))
    Kzf = k(Z, X[tr])
    return 0.5 * k(X[te], Z) @ np.linalg.solve(Kzz + Kzf @ Kzf.T / 4.0, Kzf)


def one_vs_rest(labels, K):
    return np.where(labels[:, None] == np.arange(K)[None, :], 1.0, -1.0)


def reference_utility(maps, splits, labels, K, noise=None, utility="absolute"):
    """-sum_a sum_f sum_k E loss(C y_a,train - y_a,test + Z): E|a + Z| = a (1 - 2 Phi(-a/s)) + 2 s phi(a/s);
    the squared loss clip(a, -8, 8)^2 (c = 4 d) without noise."""
    Y = one_vs_rest(labels, K)
    total = 0.0
    for a in range(K):
        for f, (C, (tr, te)) in enumerate(zip(maps, splits)):
            r = C @ Y[tr, a] - Y[te, a]
            if utility == "squared":
                total += np.sum(np.clip(r, -4 * D, 4 * D) ** 2)
            elif noise is None:
                total += np.sum(np.abs(r))
            else:
                s = noise[f][:, a]
                total += np.sum(r * (1.0 - 2.0 * stats.norm.cdf(-r / s)) + 2.0 * s * stats.norm.pdf(r / s))
    return -total


def label_neighbours(labels, K, groups=None):
    """Every neighbour: for each person (row), every reassignment of their rows' labels but the identity."""
    ids = np.arange(labels.size) if groups is None else groups
    for person in np.unique(ids):
        rows = np.flatnonzero(ids == person)
        for new in itertools.product(range(K), repeat=rows.size):
            if np.array_equal(new, labels[rows]):
                continue
            moved = labels.copy()
            moved[rows] = new
            yield moved


# ---------------------------------------------------------------------------------------------
# Fold maps, sensitivity and noise against NumPy


@pytest.mark.parametrize("sparse", [False, True])
def test_fold_maps_are_the_binary_first_step_latent_and_the_utility_sums_the_classes(sparse):
    X, labels, _ = class_data(15, 3, seed=1)
    model = multiclass(X, labels, 3, sparse=sparse)
    cv = cross_validate(model, GRID, folds=3)
    assert cv.columns.kind == "classes" and cv.columns.sensitivities == (D, D, D) and cv.data_sensitivity == D
    for i, config in enumerate(GRID):
        maps = [reference_map(X, tr, te, config, X[::3] if sparse else None) for tr, te in cv.splits]
        for f, C in enumerate(maps):
            np.testing.assert_allclose(cv.folds[i][f].C, C, rtol=1e-6, atol=1e-9)
        assert cv.utilities(indices=[i])[i] == pytest.approx(reference_utility(maps, cv.splits, labels, 3), rel=1e-9)


@pytest.mark.parametrize("utility", ["absolute", "squared"])
@pytest.mark.parametrize("K, sizes", [(3, None), (4, None), (3, [1, 2, 3, 1, 2])])
def test_sensitivity_bounds_every_label_move(K, sizes, utility):
    """|u(D') - u(D)| <= 2 d L max_G sum_{i in G} influence_i over every label moved to every other class (every
    reassignment of a person's rows), utilities in NumPy; the package's sensitivity is that bound."""
    X, labels, groups = class_data(10, K, seed=K, sizes=sizes)
    cv = cross_validate(multiclass(X, labels, K, groups), GRID, folds=3, split_seed=1)
    L = 1.0 if utility == "absolute" else 8.0 * D
    ids = np.arange(len(X)) if groups is None else groups
    for i, config in enumerate(GRID):
        maps = [reference_map(X, tr, te, config) for tr, te in cv.splits]
        influence = reference_influence(maps, cv.splits, len(X))
        bound = 2 * D * L * max(influence[ids == g].sum() for g in np.unique(ids))
        assert cv.sensitivities_of(utility)[i] == pytest.approx(bound, rel=1e-9)
        noise = cv.noise_std(i, 1.0, 0.01) if utility == "absolute" else None
        u0 = reference_utility(maps, cv.splits, labels, K, noise, utility)
        worst = max(abs(reference_utility(maps, cv.splits, moved, K, noise, utility) - u0)
                    for moved in label_neighbours(labels, K, groups))
        assert 0.0 < worst <= cv.sensitivities_of(utility)[i] * (1 + 1e-12), (i, worst)


def designed_folds(c):
    """Two folds of 4 (rows 0-3 train 4-7 and back), C = c everywhere. With every label in class 0 and c = 1/4
    every residual is 0; moving row 0 to class 1 moves columns 0 and 1 at row 0 by 2: each column's
    |residuals| grow by 4 x 1/2 + 2 = 4 = d x influence 2, together 8. With c = -1/4 they shrink by 8."""
    A, B = np.arange(4), np.arange(4, 8)
    C = np.full((4, 4), c)
    return [Fold(A, B, C), Fold(B, A, C)]


@pytest.mark.parametrize("mechanism", ["exponential", "permute_and_flip"])
def test_binary_sensitivities_fail_and_the_class_sensitivities_pass(mechanism):
    """Broken variant: the selection calibrated with the binary classifier's sensitivity (one column moved).
    On the designed case the utilities move by exactly the class bound (8 = 2 d influence), one falling and one
    rising; then the probabilities move by more than exp(eps), and with the class sensitivities they never do.
    (The generalised mechanism with equal sensitivities is the exponential mechanism at twice the sensitivity,
    so a factor 2 cannot break it: it passes both ways, checked for the class sensitivities only.)"""
    eps, K = 1.0, 3
    configs = [designed_folds(0.25), designed_folds(-0.25)]
    labels = np.zeros(8, dtype=np.int64)

    def u(folds, values):  # NumPy: -sum_a sum |C y_a,train - y_a,test|
        Y = one_vs_rest(values, K)
        return -sum(np.abs(f.C @ Y[f.train, a] - Y[f.test, a]).sum() for a in range(K) for f in folds)

    moved = labels.copy()
    moved[0] = 1
    assert [u(f, moved) - u(f, labels) for f in configs] == pytest.approx([-8.0, 8.0])
    classes = np.array([cv_sensitivity(f, 8, D, columns=2) for f in configs])
    binary = np.array([cv_sensitivity(f, 8, D) for f in configs])
    np.testing.assert_allclose(classes, [8.0, 8.0])  # by hand: 2 columns x d = 2 x influence 2
    np.testing.assert_allclose(binary, [4.0, 4.0])

    def ratio(sens, mech):
        def probabilities(values):
            return selection_probabilities([u(f, values) for f in configs], eps, sens, mechanism=mech)
        p0 = probabilities(labels)
        return max(np.max(np.abs(np.log(probabilities(m)) - np.log(p0))) for m in label_neighbours(labels, K))

    assert ratio(classes, mechanism) <= eps * (1 + 1e-9)
    assert ratio(binary, mechanism) > 1.5 * eps  # a label moves two columns: the binary sensitivity breaks
    assert ratio(classes, "generalised_exponential") <= eps * (1 + 1e-9)


@pytest.mark.parametrize("sizes", [None, [1, 2, 3, 2, 1, 3]])
def test_release_noise_is_each_class_release_at_the_step_multiplier(sizes):
    """release_noise="bound": sqrt(m) s d max over each person's corners of |sum_{i in G} C_ji s_i|, the same for
    every class (m = min(K, 2 g), g the largest person: 2 without groups), by loops. "optimised": the binary
    classifier's own noise (its cross-validation, persons included) at the budget whose multiplier is sqrt(m) s
    (found by root-finding on the Balle-Wang delta)."""
    K = 3
    X, labels, groups = class_data(12, K, seed=2, sizes=sizes)
    s = reference_multiplier(1.0, 0.01)
    m = 2 if groups is None else min(K, 2 * int(np.max(np.unique(groups, return_counts=True)[1])))
    ids = np.arange(len(X)) if groups is None else groups
    model = multiclass(X, labels, K, groups)
    cv = cross_validate(model, GRID[1:], folds=3)
    for i, config in enumerate(GRID[1:]):
        got = cv.noise_std(i, 1.0, 0.01)
        for f, (tr, te) in enumerate(cv.splits):
            C = reference_map(X, tr, te, config)
            largest = np.zeros(C.shape[0])
            for g in np.unique(ids[tr]):
                cols = C[:, ids[tr] == g]
                if cols.shape[1] <= 4:
                    corners = np.array(list(itertools.product((-1.0, 1.0), repeat=cols.shape[1])))
                    value = np.abs(cols @ corners.T).max(axis=1)
                else:
                    value = cols.shape[1] * np.abs(cols).max(axis=1)
                largest = np.maximum(largest, value)
            assert got[f].shape == (C.shape[0], K)
            np.testing.assert_allclose(got[f], np.repeat(math.sqrt(m) * s * D * largest[:, None], K, axis=1),
                                       rtol=1e-6, atol=1e-12)
    eps_step = optimize.brentq(lambda e: analytic_delta(e, math.sqrt(m) * s) - 0.01, 1e-3, 10.0, xtol=1e-14)
    binary = cross_validate(model.problems[0], GRID[1:2], folds=3)  # labels 0 vs rest, the same persons
    for opt, one in zip(cv.noise_std(0, 1.0, 0.01, release_noise="optimised"),
                        binary.noise_std(0, eps_step, 0.01, release_noise="optimised")):
        np.testing.assert_allclose(opt, np.repeat(one[:, None], K, axis=1), rtol=1e-6)


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("sizes", [None, [2, 1, 2, 3]])
def test_selection_probabilities_are_epsilon_dp_over_every_label_move(mechanism, sizes):
    eps, K = 0.7, 3
    for seed in range(2):
        X, labels, groups = class_data(9, K, seed=seed, sizes=sizes)
        cv = cross_validate(multiclass(X, labels, K, groups), GRID, folds=3, split_seed=seed)
        noise = [cv.noise_std(i, 1.0, 0.01) for i in range(len(GRID))]
        maps = [[reference_map(X, tr, te, c) for tr, te in cv.splits] for c in GRID]

        def probabilities(values):
            u = [reference_utility(maps[i], cv.splits, values, K, noise[i]) for i in range(len(GRID))]
            return selection_probabilities(u, eps, cv.sensitivities, mechanism=mechanism)

        p0 = probabilities(labels)
        ratio = max(np.max(np.abs(np.log(probabilities(m)) - np.log(p0))) for m in label_neighbours(labels, K, groups))
        assert ratio <= eps * (1 + 1e-9), (seed, ratio)


# ---------------------------------------------------------------------------------------------
# End to end


@pytest.mark.parametrize("sparse", [False, True])
def test_select_hyperparameters_for_several_classes_end_to_end(sparse):
    K = 3
    X, labels, _ = class_data(18, K, seed=6)
    model = multiclass(X, labels, K, sparse=sparse)
    accountant = PrivacyAccountant(epsilon=3.0, delta=0.5)
    sel, diag = select_hyperparameters(model, GRID, epsilon=1.0, folds=3, seed=1, diagnostics=True,
                                       epsilon_release=1.0, delta_release=0.01, accountant=accountant)
    assert accountant.spent == pytest.approx((1.0, 0.0))
    cv = cross_validate(model, GRID, folds=3)
    maps = [[reference_map(X, tr, te, c, X[::3] if sparse else None) for tr, te in cv.splits] for c in GRID]
    sens = [2 * D * reference_influence(m, cv.splits, len(X)).max() for m in maps]
    np.testing.assert_allclose(sel.config_sensitivities, sens, rtol=1e-9)
    u = [reference_utility(m, cv.splits, labels, K, cv.noise_std(i, 1.0, 0.01)) for i, m in enumerate(maps)]
    np.testing.assert_allclose(diag.utilities, u, rtol=1e-9)
    np.testing.assert_allclose(diag.probabilities, selection_probabilities(u, 1.0, sens), rtol=1e-9)
    assert sel.output_sensitivities == (D,) * K and sel.neighbours == "row, labels moved between classes"
    sel.apply(model)  # every class's problem records the choice as public
    for problem in model.problems:
        assert problem.kernel.lengthscales.numpy() == pytest.approx(sel.chosen[".kernel.lengthscales"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", dp.HyperparameterWarning)
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        released = model.release(epsilon=1.0, delta=0.01, seed=0, accountant=accountant)
    assert released.predict_y(X[:2])[0].shape == (2, K)


def test_multiclass_grids_and_refusals():
    K = 3
    X, labels, _ = class_data(12, K, seed=3)
    model = multiclass(X, labels, K)
    # the default grid is the binary classifier's (public: inputs and kernel type), every class shares it
    binary = DPLaplaceGPC((X, one_vs_rest(labels, K)[:, :1]), gpflow.kernels.SquaredExponential())
    grid = default_grid(model)
    assert len(grid) == len(default_grid(binary)) >= 4 and {c[".kernel.variance"] for c in grid} == {0.25, 1.0, 4.0, 16.0}
    assert all(sorted(a) == [".kernel.lengthscales", ".kernel.variance"] and a[".kernel.variance"] == b[".kernel.variance"]
               and np.allclose(a[".kernel.lengthscales"], b[".kernel.lengthscales"])
               for a, b in zip(grid, default_grid(binary)))
    accountant = PrivacyAccountant(epsilon=2.0, delta=0.5)
    with pytest.raises(ValueError, match="every class shares"):  # one class's parameter only: refused
        select_hyperparameters(model, [{".problems[0].kernel.lengthscales": 1.0}], epsilon=1.0, accountant=accountant)
    with pytest.raises(ValueError, match="exceeds the width"):
        select_hyperparameters(model, GRID, epsilon=1.0, d=3.0, accountant=accountant)
    model.maximum_log_likelihood_objective()  # reads the labels: the leak guard refuses
    with pytest.raises(PrivacyLeakError):
        select_hyperparameters(model, GRID, epsilon=1.0, accountant=accountant)
    assert accountant.spent == (0.0, 0.0) and accountant.history() == []
