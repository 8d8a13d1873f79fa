"""Audit B (the hockey-stick Monte Carlo) for releases that protect more than one output of one row:
several outputs per row (``DPGPR`` with ``Y`` [N, P] on heterogeneous bounds, alone and with ``groups``),
persons on the binary classifier (``DPLaplaceGPC`` with ``groups``) and several classes (the whole
``DPMulticlassLaplaceGPC`` release, every one-vs-rest step).

Each test takes the worst neighbouring pair, found by brute force in NumPy from an independent cloaking
matrix and the published noise factor(s): every corner of every row's (person's) box
``prod_p [-d_p, d_p]``, or every row (person) and every move of its labels between classes. It
measures that pair's shift black-box (two releases with one explicit seed draw the same noise, so
their difference is the shift) and checks it against the NumPy shift. Then it draws releases on both datasets from the published noise
factor with the package's own noise source (:func:`auditing.draw_release_noise`; the release on D' is
the one on D moved by the shift) and estimates the hockey-stick divergence
``E_P[(1 - e^(eps - L))+]`` at the claimed epsilon, both ways, with exact binomial (Clopper-Pearson,
99.9%) intervals: PASS iff the lower ends are <= delta (:func:`auditing.audit_hockey_stick`,
``bound="binomial"``; at 400,000 draws and delta = 0.01 the tolerance is about 5.5e-4; the broken
variants, whose divergence is several times delta, use 200,000). The closed form
``delta(eps) = gaussian_delta(eps, mu)``, mu the norm of the whitened shift (Gaussian DP), is the
independent reference the interval must contain.

A broken variant must fail the same test by a clear margin (lower end > 3 delta): each output released
as its own person, a release calibrated on the first output's bounds for every output, releases that
ignore the persons (regression and classifier), and the multi-class release without the sqrt(2T)
factor of its composition.
Fixed seeds everywhere: the statistical tests are deterministic.
"""

from __future__ import annotations

import itertools
import math
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import gpflow
import numpy as np
import pytest
import scipy.linalg
from scipy import optimize

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from auditing import audit_hockey_stick, draw_release_noise, gaussian_delta, noise_span, whiten  # noqa: E402
from reference import k_se  # noqa: E402

import dpgp_gpflow as dp  # noqa: E402
import dpgp_gpflow.models.multiclass as multiclass_module  # noqa: E402
from dpgp_gpflow.models import DPGPR, DPLaplaceGPC, DPMulticlassLaplaceGPC  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ReproducibleNoiseWarning"),
              pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ClippingWarning")]

EPS, DELTA = 1.0, 0.01
SEED = 1234  # the release seed shared by the two neighbouring releases (the same noise draw)
N_DRAWS = 400_000  # releases per dataset: a binomial half-width of about 5.5e-4 at delta = 0.01
N_BROKEN = 200_000  # for a broken variant, whose delta(eps) is several times delta
FAIL_MARGIN = 3.0  # a broken variant's lower confidence end must exceed 3 delta

# ---------------------------------------------------------------------------------------------
# Several outputs: 16 rows, 1-D inputs, P <= 3 outputs of widths 5, 10 and 20

VAR, ELL, NOISE = 4.0, 1.5, 0.5
BOUNDS = np.array([[2.0, 7.0], [0.0, 10.0], [-10.0, 10.0]])
N_ROWS = 16
#: persons of 2 and 1 consecutive rows of the sorted inputs, 2 at both ends (with P = 2: up to 4 entries,
#: every corner enumerated by the release)
PERSONS = np.repeat(np.arange(10), [2, 1] * 4 + [2, 2])


def outputs_problem(P: int):
    rng = np.random.default_rng(20260601)
    X = np.sort(rng.uniform(0.0, 10.0, N_ROWS))[:, None]
    Xs = np.linspace(-0.5, 10.5, 8)[:, None]
    lo, hi = BOUNDS[:P, 0], BOUNDS[:P, 1]
    Y = (lo + hi) / 2 + 0.3 * (hi - lo) * np.sin(X + np.arange(P))  # inside the bounds
    C = np.linalg.solve(k_se(X, X, VAR, ELL) + NOISE * np.eye(N_ROWS), k_se(X, Xs, VAR, ELL)).T  # K_*f K^-1
    return X, Y, Xs, C


def gpr_release(X, Y, Xs, bounds, seed=SEED, **kw):
    model = DPGPR((X, Y), gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=ELL), y_bounds=bounds,
                  noise_variance=NOISE, hyperparameters_public=True, **kw)
    return model.release(Xs, epsilon=EPS, delta=DELTA, seed=seed).unclipped()  # the raw DP mean: the Gaussian


def corners(C: np.ndarray, widths: np.ndarray, persons):
    """Every corner of every person's box (both signs): output p of each of the person's rows moves by
    ``+-widths[p]``. The stacked release ``(I_P kron C) vec(Y)`` (output by output) then moves by
    ``shifts[j]``; ``moves[j] = (rows, signs [|rows|, P])``. Brute force from the relation, in NumPy."""
    P, n = widths.size, C.shape[1]
    big = np.kron(np.eye(P), C)
    persons = [np.arange(i, i + 1) for i in range(n)] if persons is None else \
        [np.flatnonzero(persons == g) for g in np.unique(persons)]
    shifts, moves = [], []
    for rows in persons:
        for s in itertools.product((-1.0, 1.0), repeat=rows.size * P):
            signs = np.reshape(s, (rows.size, P))
            delta = np.zeros((n, P))
            delta[rows] = signs * widths[None, :]
            shifts.append(big @ delta.T.reshape(-1))
            moves.append((rows, signs))
    return np.array(shifts), moves


def worst_corner(F: np.ndarray, C: np.ndarray, widths: np.ndarray, persons=None):
    """The corner whose projected shift ``P_F (I kron C) delta`` has the largest ``||F^+ v||``: (rows, signs,
    every projected corner shift [m, kP])."""
    U, _, _ = noise_span(F)
    shifts, moves = corners(C, widths, persons)
    projected = (shifts @ U) @ U.T
    j = int(np.argmax(np.linalg.norm(whiten(F, projected), axis=1)))
    return moves[j][0], moves[j][1], projected[j], projected


def corner_pair(Y: np.ndarray, bounds: np.ndarray, rows, signs):
    """D: the person's outputs at the opposite corner of their box; D': every one of them moved across it."""
    lo, hi = bounds[:, 0], bounds[:, 1]
    base, neighbour = Y.copy(), Y.copy()
    base[rows] = np.where(signs > 0, lo, hi)
    neighbour[rows] = np.where(signs > 0, hi, lo)
    return base, neighbour


def stacked_mean(release) -> np.ndarray:
    return np.asarray(release.mean).T.reshape(-1)  # [k, P] -> output by output


def noise_draws(F: np.ndarray, seed: int, n: int = N_DRAWS):
    """The noise of n releases on D and of n on D' ([n, k] each), from the package's sampler."""
    return draw_release_noise(F, n, seed), draw_release_noise(F, n, seed + 1)


def sampled_audit(claim, shift: np.ndarray, seed: int, n: int = N_DRAWS, draws=None):
    """Audit B on n releases per dataset drawn from the claimed noise factor (or on ``draws``)."""
    noise_p, noise_q = noise_draws(claim.noise_factor, seed, n) if draws is None else draws
    return audit_hockey_stick(claim, shift[None, :], noise_p=noise_p, noise_q=noise_q, bound="binomial", seed=seed)


def analytic_multiplier(epsilon: float, delta: float) -> float:
    """The analytic multiplier s (delta(eps; mu = 1/s) = delta), solved from the Balle-Wang profile."""
    return optimize.brentq(lambda s: gaussian_delta(epsilon, 1.0 / s) - delta, 0.05, 100.0, xtol=1e-14)


def assert_agrees_with_closed_form(result, epsilon: float = EPS):
    """Gaussian DP: the exact delta(eps) of the shift lies in both Monte Carlo intervals."""
    exact = gaussian_delta(epsilon, result.mu)
    for lo, hi in zip(result.ci_low, result.ci_high):
        assert lo <= exact <= hi, (lo, exact, hi)
    return exact


def assert_caught(result, delta: float = DELTA):
    assert not result.passed
    assert min(result.ci_low) > FAIL_MARGIN * delta, result


@pytest.mark.parametrize("P, persons", [(2, None), (3, None), (2, PERSONS)], ids=["P2", "P3", "P2-persons"])
def test_several_outputs_pass_the_hockey_stick_on_the_worst_corner(P, persons):
    X, Y, Xs, C = outputs_problem(P)
    widths = BOUNDS[:P, 1] - BOUNDS[:P, 0]
    rel = gpr_release(X, Y, Xs, BOUNDS[:P], groups=persons)
    rows, signs, expected, projected = worst_corner(rel.noise_factor, C, widths, persons)
    if persons is not None:
        assert rows.size == 2  # the worst neighbour is a person of two rows
    # black box: the measured shift of the worst corner is the NumPy one
    base, neighbour = corner_pair(Y, BOUNDS[:P], rows, signs)
    r0, r1 = gpr_release(X, base, Xs, BOUNDS[:P], groups=persons), gpr_release(X, neighbour, Xs, BOUNDS[:P], groups=persons)
    np.testing.assert_array_equal(r0.noise_factor, r1.noise_factor)  # public: the same on D and D'
    shift = stacked_mean(r1) - stacked_mean(r0)
    np.testing.assert_allclose(shift, expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())
    result = sampled_audit(r0, shift, seed=41)
    assert result.passed, result
    assert result.mu * r0.noise_multiplier == pytest.approx(1.0, abs=1e-6)  # tight: the worst corner
    exact = assert_agrees_with_closed_form(result)
    assert exact == pytest.approx(DELTA, rel=1e-4)
    # white box, every corner of every row's / person's box against the claimed Gaussian
    white = audit_hockey_stick(rel, projected, n=100_000, seed=43, bound="binomial")
    assert white.passed, white


@pytest.mark.parametrize("P", [2, 3])
def test_each_output_released_as_its_own_person_fails(P):
    """The broken variant: each output released alone at the full (epsilon, delta), calibrated for one
    entry's change; together the stacked release with noise factor diag(F_1, .., F_P)."""
    X, Y, Xs, C = outputs_problem(P)
    widths = BOUNDS[:P, 1] - BOUNDS[:P, 0]

    def alone(Y_, p):
        return gpr_release(X, Y_[:, p:p + 1], Xs, BOUNDS[p], seed=SEED + p)

    F = scipy.linalg.block_diag(*[alone(Y, p).noise_factor for p in range(P)])
    claim = SimpleNamespace(noise_factor=F, epsilon=EPS, delta=DELTA)
    rows, signs, expected, _ = worst_corner(F, C, widths)
    base, neighbour = corner_pair(Y, BOUNDS[:P], rows, signs)
    shift = np.concatenate([alone(neighbour, p).mean[:, 0] - alone(base, p).mean[:, 0] for p in range(P)])
    np.testing.assert_allclose(shift, expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())
    result = sampled_audit(claim, shift, seed=45, n=N_BROKEN)
    assert_caught(result)
    s = analytic_multiplier(EPS, DELTA)
    assert result.mu * s == pytest.approx(math.sqrt(P), rel=1e-3)  # every output of the row adds up
    assert_agrees_with_closed_form(result)


def test_a_release_calibrated_on_the_first_outputs_bounds_fails():
    """The broken variant that ignores the heterogeneous bounds: every output calibrated with the first
    output's width (5), while the others move by 10 and 20."""
    P = 3
    X, Y, Xs, C = outputs_problem(P)
    widths = BOUNDS[:, 1] - BOUNDS[:, 0]

    def broken(Y_):
        return gpr_release(X, Y_, Xs, BOUNDS, data_sensitivity=[widths[0]] * P)

    rel = broken(Y)
    rows, signs, expected, _ = worst_corner(rel.noise_factor, C, widths)
    base, neighbour = corner_pair(Y, BOUNDS, rows, signs)
    r0 = broken(base)
    shift = stacked_mean(broken(neighbour)) - stacked_mean(r0)
    np.testing.assert_allclose(shift, expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())
    result = sampled_audit(r0, shift, seed=47, n=N_BROKEN)
    assert_caught(result)
    assert result.mu * r0.noise_multiplier > 2.0
    assert_agrees_with_closed_form(result)


def test_a_release_of_several_outputs_that_ignores_the_persons_fails():
    """Each row its own person (P = 2 outputs) on data whose persons hold two rows."""
    P = 2
    X, Y, Xs, C = outputs_problem(P)
    widths = BOUNDS[:P, 1] - BOUNDS[:P, 0]
    rel = gpr_release(X, Y, Xs, BOUNDS[:P])  # a valid release of rows
    rows, signs, expected, _ = worst_corner(rel.noise_factor, C, widths, PERSONS)
    assert rows.size == 2
    base, neighbour = corner_pair(Y, BOUNDS[:P], rows, signs)
    r0 = gpr_release(X, base, Xs, BOUNDS[:P])
    shift = stacked_mean(gpr_release(X, neighbour, Xs, BOUNDS[:P])) - stacked_mean(r0)
    np.testing.assert_allclose(shift, expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())
    result = sampled_audit(r0, shift, seed=49, n=N_BROKEN)
    assert_caught(result)
    assert result.mu * r0.noise_multiplier > 1.5  # the person's two rows add up
    assert_agrees_with_closed_form(result)


# ---------------------------------------------------------------------------------------------
# Several classes: the whole one-vs-rest release, 20 rows, 2-D inputs, K = 3 classes

C_VAR, C_ELL = 1.2, 1.0
K_CLASSES = 3
D_LABEL = 2.0  # a one-vs-rest label moves between -1 and +1


def classes_problem():
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 6.0, (20, 2))
    labels = np.clip(np.floor(X[:, 0] / 2.0 + 0.3 * rng.standard_normal(20)), 0, K_CLASSES - 1).astype(int)
    return X, labels


def classes_release(X, labels, steps=1, seed=SEED, groups=None):
    model = DPMulticlassLaplaceGPC((X, labels), gpflow.kernels.SquaredExponential(variance=C_VAR, lengthscales=C_ELL),
                                   num_classes=K_CLASSES, hyperparameters_public=True, groups=groups)
    return model.release(epsilon=EPS, delta=DELTA, steps=steps, seed=seed)


def newton_map(X: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``C = 1/2 (K^-1 + W)^-1`` with ``W = pi (1 - pi)`` at the public latents ``f`` (step 1: f = 0)."""
    pi = 1.0 / (1.0 + np.exp(-f))
    return 0.5 * np.linalg.inv(np.linalg.inv(k_se(X, X, C_VAR, C_ELL)) + np.diag(pi * (1.0 - pi)))


def class_move_shifts(X: np.ndarray, released, persons=None):
    """Brute force over every person (every row when ``persons`` is None) and every reassignment of their
    labels: old classes ``a`` and new classes ``b`` in ``{0..K-1}^|G|``, each row its own move. Problem c's
    labels move by ``d (1[b = c] - 1[a = c])`` on the person's rows, so the whole release (every release,
    class by class, each step's map at the released latents of the step before: public) moves by
    ``P_F C_G delta_c`` in class c's steps. Returns (mu, rows, a, b, shift) of the worst move and the joint
    noise factor ``diag(F_1, .., F_KT)``."""
    per_step = []  # per class: [P_F C] over its steps
    factors = []
    for classifier in released.classifiers:
        fs = [np.zeros(len(X))] + [r.mean[:, 0] for r in classifier.releases[:-1]]
        steps = []
        for rel, f in zip(classifier.releases, fs):
            U, _, _ = noise_span(rel.noise_factor)
            steps.append(U @ (U.T @ newton_map(X, f)))
            factors.append(rel.noise_factor)
        per_step.append(steps)
    F = scipy.linalg.block_diag(*factors)
    persons = np.arange(len(X)) if persons is None else np.asarray(persons)
    best = None
    for person in np.unique(persons):
        rows = np.flatnonzero(persons == person)
        moves = np.array(list(itertools.product(range(K_CLASSES), repeat=2 * rows.size)))  # [R, 2g]: a, b
        a, b = moves[:, :rows.size], moves[:, rows.size:]
        shifts = np.concatenate([
            (D_LABEL * ((b == c).astype(float) - (a == c).astype(float))) @ PC[:, rows].T  # [R, k]
            for c, steps in enumerate(per_step) for PC in steps], axis=1)
        mus = np.linalg.norm(whiten(F, shifts), axis=1)
        j = int(np.argmax(mus))
        if best is None or mus[j] > best[0]:
            best = (float(mus[j]), rows, a[j], b[j], shifts[j])
    return best, F


def measured_class_shift(X, labels, rows, a, b, groups=None):
    """Black box (one step): the whole release on D (the rows labelled a) and on D' (labelled b), one seed."""
    base, moved = labels.copy(), labels.copy()
    base[rows], moved[rows] = a, b
    r0, r1 = classes_release(X, base, groups=groups), classes_release(X, moved, groups=groups)
    for x, y in zip(r0.releases, r1.releases):
        np.testing.assert_array_equal(x.noise_factor, y.noise_factor)
    return r0, np.concatenate([y.mean[:, 0] - x.mean[:, 0] for x, y in zip(r0.releases, r1.releases)])


# ---------------------------------------------------------------------------------------------
# Persons on the binary classifier (DPLaplaceGPC, groups=): one Newton step, a person's labels all flip

#: persons of 1 to 4 rows, each person's rows near one centre (nearly parallel columns of C)
CLASSIFIER_PERSONS = np.repeat(np.arange(8), [1, 2, 3, 4, 1, 2, 3, 4])


def persons_classes_problem():
    rng = np.random.default_rng(3)
    centres = rng.uniform(0.0, 6.0, (8, 2))
    X = centres[CLASSIFIER_PERSONS] + 0.25 * rng.uniform(-1.0, 1.0, (CLASSIFIER_PERSONS.size, 2))
    y = np.where(np.sin(X[:, 0]) + 0.5 * X[:, 1] - 1.5 > 0, 1.0, -1.0)[:, None]
    return X, y


def binary_release(X, y, groups):
    model = DPLaplaceGPC((X, y), gpflow.kernels.SquaredExponential(variance=C_VAR, lengthscales=C_ELL),
                         hyperparameters_public=True, groups=groups)
    return model.release(epsilon=EPS, delta=DELTA, seed=SEED).releases[0]


@pytest.mark.parametrize("groups", [CLASSIFIER_PERSONS, None], ids=["persons", "per-row"])
def test_a_grouped_binary_classifier_on_the_worst_persons_flip(groups):
    """Step 1 releases ``P_F C y + noise`` (C at f = 0); a person's labels all flip (a corner ``2 s`` of the
    box [-2, 2]^|G|). The release with the persons passes on the worst person's flip; the per-row release
    of the same data fails it."""
    X, y = persons_classes_problem()
    C = newton_map(X, np.zeros(len(X)))
    rel = binary_release(X, y, groups)
    rows, signs, expected, _ = worst_corner(rel.noise_factor, C, np.array([D_LABEL]), CLASSIFIER_PERSONS)
    assert rows.size > 1  # the worst neighbour is a person of several rows
    base, flipped = corner_pair(y, np.array([[-1.0, 1.0]]), rows, signs)  # every label of the person flips
    r0, r1 = binary_release(X, base, groups), binary_release(X, flipped, groups)
    np.testing.assert_array_equal(r0.noise_factor, r1.noise_factor)
    shift = (r1.mean - r0.mean)[:, 0]
    np.testing.assert_allclose(shift, expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())
    result = sampled_audit(r0, shift, seed=55, n=N_DRAWS if groups is not None else N_BROKEN)
    assert_agrees_with_closed_form(result)
    if groups is None:
        assert_caught(result)
        assert result.mu * r0.noise_multiplier > 1.5  # the person's rows add up
    else:
        assert result.passed, result
        assert result.mu * r0.noise_multiplier == pytest.approx(1.0, abs=1e-6)  # tight: the worst corner


@pytest.fixture
def without_the_sqrt_2T_factor(monkeypatch):
    """The broken variant: every class's step calibrated as if it alone moved (multiplier s, not sqrt(2T) s)."""
    monkeypatch.setattr(multiclass_module, "multiclass_step_multiplier", lambda s, steps, *args, **kwargs: s)


@pytest.mark.parametrize("broken", [False, True], ids=["release", "without-sqrt-2T"])
def test_the_whole_multiclass_release_on_the_worst_label_move(request, broken):
    if broken:
        request.getfixturevalue("without_the_sqrt_2T_factor")
    X, labels = classes_problem()
    released = classes_release(X, labels)
    s = analytic_multiplier(EPS, DELTA)
    (mu, rows, a, b, expected), F = class_move_shifts(X, released)
    assert rows.size == 1 and a[0] != b[0]
    _, shift = measured_class_shift(X, labels, rows, a, b)
    n = len(X)
    for c in set(range(K_CLASSES)) - {a[0], b[0]}:
        assert np.all(shift[c * n:(c + 1) * n] == 0.0)  # the other problems' labels did not move
    np.testing.assert_allclose(shift, expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())
    # the whole release's claim, against the joint Gaussian of its K independent steps
    claim = SimpleNamespace(noise_factor=F, epsilon=released.epsilon, delta=released.delta)
    draws = noise_draws(F, 51, N_BROKEN if broken else N_DRAWS)
    result = sampled_audit(claim, shift, seed=51, draws=draws)
    assert result.mu == pytest.approx(mu, rel=1e-9)
    exact = assert_agrees_with_closed_form(result)
    # the privacy-loss distribution N(mu^2/2, mu^2) in closed form against the same draws, at other epsilons
    for eps in (0.25, 2.0):
        other = sampled_audit(SimpleNamespace(noise_factor=F, epsilon=eps, delta=DELTA), shift, seed=51, draws=draws)
        assert_agrees_with_closed_form(other, eps)
    if broken:
        assert_caught(result)
        assert mu * s == pytest.approx(math.sqrt(2.0), rel=1e-3)  # two problems move, each by up to 1/s
        assert exact > FAIL_MARGIN * DELTA
    else:
        assert result.passed, result
        assert 0.9 <= mu * s <= 1.0 + 1e-9  # (eps, delta) holds and is nearly tight
        assert exact <= DELTA * (1.0 + 1e-6)


@pytest.mark.parametrize("broken", [False, True], ids=["release", "without-sqrt-2T"])
def test_two_newton_steps_along_the_released_path(request, broken):
    """T = 2: step 2 is linearised at the released step 1, so the mechanism is adaptive; given step 1's
    output (public) step 2 is a Gaussian mechanism whose map is known. The test takes the composition of
    the 2K releases along the released path (each step's map at the released latents before it), the worst
    move over rows and classes (2T = 4 changed steps) and audit B on the joint Gaussian; white box."""
    if broken:
        request.getfixturevalue("without_the_sqrt_2T_factor")
    X, labels = classes_problem()
    released = classes_release(X, labels, steps=2)
    (mu, _, _, _, shift), F = class_move_shifts(X, released)
    claim = SimpleNamespace(noise_factor=F, epsilon=released.epsilon, delta=released.delta)
    result = sampled_audit(claim, shift, seed=53, n=100_000)
    assert_agrees_with_closed_form(result)
    s = analytic_multiplier(EPS, DELTA)
    if broken:
        assert_caught(result)
        assert mu * s == pytest.approx(2.0, rel=0.05)  # four steps move, each by up to 1/s
    else:
        assert result.passed, result
        assert 0.9 <= mu * s <= 1.0 + 1e-9


@pytest.mark.parametrize("broken", [False, True], ids=["release", "without-sqrt-2T"])
def test_dp_audit_of_the_whole_multiclass_release_against_the_brute_force(request, broken):
    """dp.audit of the whole release (since e98c405; it refused before): its epsilon is at least the one of
    the NumPy brute force over every row and move (here equal: one step, every class the same map and
    factor). Without the sqrt(2T) factor every class passes alone but the whole fails."""
    if broken:
        request.getfixturevalue("without_the_sqrt_2T_factor")
    X, labels = classes_problem()
    model = DPMulticlassLaplaceGPC((X, labels), gpflow.kernels.SquaredExponential(variance=C_VAR, lengthscales=C_ELL),
                                   num_classes=K_CLASSES, hyperparameters_public=True)
    released = model.release(epsilon=EPS, delta=DELTA, seed=SEED)
    (mu, *_), _ = class_move_shifts(X, released)
    exact = optimize.brentq(lambda e: gaussian_delta(e, mu) - DELTA, 0.0, 20.0, xtol=1e-12)  # epsilon at delta
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert all(dp.audit(c, p).passed for c, p in zip(released.classifiers, model.problems))  # per class
        report = dp.audit(released, model)
    assert report.epsilon == pytest.approx(exact, rel=1e-5)
    if broken:
        assert not report.passed and report.epsilon > 1.5 * EPS
    else:
        assert report.passed and report.epsilon <= EPS * (1 + 1e-6)


# ---------------------------------------------------------------------------------------------
# Persons on the multi-class classifier: each of a person's rows moves to any class

#: persons of 1 to 3 rows (K = 3: a person changes up to m = min(K, 2 g) = 3 problems)
MULTICLASS_PERSONS = np.repeat(np.arange(7), [1, 2, 3, 2, 1, 2, 3])


@pytest.mark.parametrize("groups", [MULTICLASS_PERSONS, None], ids=["persons", "per-row"])
def test_a_grouped_multiclass_release_on_the_worst_reassignment_of_a_persons_labels(groups):
    """The whole release (every class, one step, each at sqrt(m) s) on the worst person and reassignment of
    their rows' labels, by brute force; the per-row release (sqrt(2) s, groups ignored) fails it."""
    rng = np.random.default_rng(5)
    centres = rng.uniform(0.0, 6.0, (7, 2))
    X = centres[MULTICLASS_PERSONS] + 0.25 * rng.uniform(-1.0, 1.0, (MULTICLASS_PERSONS.size, 2))
    labels = np.clip(np.floor(X[:, 0] / 2.0), 0, K_CLASSES - 1).astype(int)
    released = classes_release(X, labels, groups=groups)
    (mu, rows, a, b, expected), F = class_move_shifts(X, released, MULTICLASS_PERSONS)
    assert rows.size > 1  # a person of several rows
    _, shift = measured_class_shift(X, labels, rows, a, b, groups=groups)
    np.testing.assert_allclose(shift, expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())
    claim = SimpleNamespace(noise_factor=F, epsilon=released.epsilon, delta=released.delta)
    result = sampled_audit(claim, shift, seed=57, n=N_DRAWS if groups is not None else N_BROKEN)
    assert result.mu == pytest.approx(mu, rel=1e-9)
    exact = assert_agrees_with_closed_form(result)
    s = analytic_multiplier(EPS, DELTA)
    if groups is None:
        assert_caught(result)
        assert mu * s > 1.5
    else:
        assert result.passed, result
        assert exact <= DELTA * (1.0 + 1e-6)
        assert math.sqrt(2.0 / 3.0) * 0.99 <= mu * s <= 1.0 + 1e-9  # m = 3 problems paid, at least 2 move fully
