"""DPGPR: the cloaking matrix against GPflow's own prediction and a NumPy reference; releases
against independent recomputations of what they claim (DESIGN 2, 5.1, 5.2 and 6)."""

from __future__ import annotations

import warnings
from functools import partial

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from reference import (
    b_bound,
    gaussian_delta_at_shift,
    gpr_reference,
    k_linear,
    k_matern52,
    k_periodic_se,
    k_se,
    mahalanobis_shifts,
    assert_first_rank_that_holds,
    projection_bias,
    range_projector,
    rank_rule_holds,
    rkhs_sensitivity_unit,
)

import dpgp_gpflow
from dpgp_gpflow import PrivateRelease, ReproducibleNoiseWarning
from dpgp_gpflow.contract import PrivateModel
from dpgp_gpflow.models import DPGPR, gpr_rkhs_sensitivity
from dpgp_gpflow.models.gpr import gpr_cloaking_matrix_and_variance

NOISE = 0.1
LO, HI = -1.5, 2.5  # asymmetric, so the public prior mean (0.5) is not zero
D = HI - LO
MID = 0.5 * (LO + HI)
EPS, DELTA = 1.0, 0.01
S_ANALYTIC = 1.8779  # DESIGN 3, (1, 0.01)

# (gpflow kernel factory, numpy reference) for D-dimensional inputs
KERNELS = {
    "SE": (
        lambda D_: gpflow.kernels.SquaredExponential(variance=1.3, lengthscales=[1.7, 1.1, 2.3][:D_] if D_ > 1 else 1.7),
        lambda D_: partial(k_se, variance=1.3, lengthscale=np.array([1.7, 1.1, 2.3][:D_]) if D_ > 1 else 1.7),
    ),
    "Matern52": (
        lambda D_: gpflow.kernels.Matern52(variance=0.8, lengthscales=2.1),
        lambda D_: partial(k_matern52, variance=0.8, lengthscale=2.1),
    ),
    "Linear+Periodic": (
        lambda D_: gpflow.kernels.Linear(variance=0.3)
        + gpflow.kernels.Periodic(gpflow.kernels.SquaredExponential(variance=1.1, lengthscales=0.9), period=3.0),
        lambda D_: (lambda A, B: k_linear(A, B, 0.3) + k_periodic_se(A, B, 1.1, 0.9, 3.0)),
    ),
}


def make_data(n: int, dim: int, seed: int):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 6.0, (n, dim))
    Y = np.clip(np.sin(X.sum(1, keepdims=True)) + 0.3 * rng.standard_normal((n, 1)) + MID, LO, HI)
    Xnew = rng.uniform(-0.5, 6.5, (9, dim))
    return X, Y, Xnew


def fresh_se():
    return gpflow.kernels.SquaredExponential(variance=1.3, lengthscales=1.7)


def se_ref(A, B):
    return k_se(A, B, 1.3, 1.7)


# ---------------------------------------------------------------------------------------------
# The cloaking matrix


@pytest.mark.parametrize("dim", [1, 3])
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_cloaking_matrix_reproduces_predict_f(kernel, dim):
    X, Y, Xnew = make_data(20, dim, seed=dim)
    make_kernel, make_ref = KERNELS[kernel]
    model = DPGPR((X, Y), make_kernel(dim), y_bounds=(LO, HI), noise_variance=NOISE, hyperparameters_public=True)
    C = model.cloaking_matrix(Xnew).numpy()
    assert C.shape == (9, 20) and C.dtype == np.float64
    mean, var = (t.numpy()[:, 0] for t in model.predict_f(Xnew))
    np.testing.assert_allclose(C @ (Y[:, 0] - MID) + MID, mean, rtol=1e-8, atol=1e-12)
    # ... and against an independent NumPy computation (LU solve, GPflow's kernel formulas)
    ref_mean, ref_var, ref_C = gpr_reference(make_ref(dim), X, Y, Xnew, NOISE, mean=MID)
    np.testing.assert_allclose(C, ref_C, rtol=1e-7, atol=1e-10 * np.abs(ref_C).max())
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(var, ref_var, rtol=1e-7, atol=1e-12)
    # the release's matrix and variance come from one factorisation
    C2, var2 = gpr_cloaking_matrix_and_variance(model.kernel, tf.constant(X), NOISE, tf.constant(Xnew))
    np.testing.assert_allclose(C2.numpy(), C, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(var2.numpy()[:, 0], ref_var, rtol=1e-7, atol=1e-12)


def test_cloaking_matrix_of_a_plain_gpflow_gpr():
    X, Y, Xnew = make_data(15, 2, seed=5)
    plain = gpflow.models.GPR((X, Y), gpflow.kernels.Matern52(variance=0.8, lengthscales=2.1), noise_variance=NOISE)
    assert not isinstance(plain, PrivateModel)
    C = dpgp_gpflow.cloaking_matrix(plain, Xnew).numpy()
    mean = plain.predict_f(Xnew)[0].numpy()[:, 0]
    np.testing.assert_allclose(C @ Y[:, 0], mean, rtol=1e-8, atol=1e-12)  # zero mean function
    _, _, ref_C = gpr_reference(partial(k_matern52, variance=0.8, lengthscale=2.1), X, Y, Xnew, NOISE)
    np.testing.assert_allclose(C, ref_C, rtol=1e-7, atol=1e-10 * np.abs(ref_C).max())


def test_protocol_and_dispatch():
    X, Y, Xnew = make_data(10, 1, seed=6)
    model = DPGPR((X, Y), fresh_se(), y_bounds=(LO, HI), noise_variance=NOISE, hyperparameters_public=True)
    assert isinstance(model, PrivateModel)
    assert isinstance(model, gpflow.models.GPR)
    np.testing.assert_array_equal(dpgp_gpflow.cloaking_matrix(model, Xnew).numpy(), model.cloaking_matrix(Xnew).numpy())

    class OnlyAMatrix:  # a cloaking_matrix method alone does not meet the contract
        def cloaking_matrix(self, Xnew):
            return np.ones((len(Xnew), 3))

    assert not isinstance(OnlyAMatrix(), PrivateModel)
    for bad in (OnlyAMatrix(), object()):
        with pytest.raises(TypeError, match="cloaking matrix"):
            dpgp_gpflow.cloaking_matrix(bad, Xnew)


def test_rkhs_sensitivity_matches_numpy():
    X, Y, _ = make_data(12, 1, seed=7)
    unit = float(gpr_rkhs_sensitivity(fresh_se(), X, NOISE))
    assert unit == pytest.approx(rkhs_sensitivity_unit(se_ref(X, X), NOISE), rel=1e-9)


def test_design_two_point_example_b_bound_is_not_a_bound():
    """DESIGN 5.2: two far-apart points, kernel variance 10, sigma^2 = 1: b = 0.091, exact 0.287."""
    X = np.array([[0.0], [1000.0]])
    Kff = k_se(X, X, 10.0, 1.0)
    K = Kff + np.eye(2)
    assert b_bound(np.linalg.inv(K)) == pytest.approx(1 / 11, abs=1e-12) == pytest.approx(0.091, abs=5e-4)
    exact = rkhs_sensitivity_unit(Kff, 1.0)
    assert exact == pytest.approx(np.sqrt(10) / 11, rel=1e-12) == pytest.approx(0.287, abs=5e-4)
    kern = gpflow.kernels.SquaredExponential(variance=10.0, lengthscales=1.0)
    assert float(gpr_rkhs_sensitivity(kern, X, 1.0)) == pytest.approx(exact, rel=1e-10)
    # and a standard release of that model uses it (not b)
    model = DPGPR((X, np.array([[0.2], [0.7]])), kern, y_bounds=(0.0, 1.0), noise_variance=1.0,
                  hyperparameters_public=True)
    with pytest.warns(ReproducibleNoiseWarning):
        rel = model.release(np.array([[0.0], [500.0]]), epsilon=EPS, delta=DELTA, mechanism="standard", seed=0)
    assert rel.sensitivity == pytest.approx(exact * 1.0, rel=1e-6)
    assert rel.sensitivity > b_bound(np.linalg.inv(K))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_sensitivity_is_below_b_for_unit_variance_kernels(seed):
    """DESIGN 5.2: where b(K^{-1}) is valid (k(x, x) <= 1) the exact formula is never larger."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 5.0, (10, 2))
    kern = gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=0.8 + seed)
    Kff = k_se(X, X, 1.0, 0.8 + seed)
    exact = float(gpr_rkhs_sensitivity(kern, X, NOISE))
    assert exact == pytest.approx(rkhs_sensitivity_unit(Kff, NOISE), rel=1e-9)
    assert exact <= b_bound(np.linalg.inv(Kff + NOISE * np.eye(10)))


# ---------------------------------------------------------------------------------------------
# Releases


@pytest.fixture(scope="module")
def problem():
    """A 1-D problem whose cloaking matrix is numerically rank deficient (dense test grid)."""
    rng = np.random.default_rng(11)
    X = np.sort(rng.uniform(0.0, 10.0, (25, 1)), axis=0)
    Y = np.clip(np.sin(X) + 0.3 * rng.standard_normal((25, 1)) + MID, LO, HI)
    Y[3, 0] = LO  # so that a neighbour may move it by the full d
    Xnew = np.linspace(0.0, 10.0, 30)[:, None]
    mean, var, C = gpr_reference(se_ref, X, Y, Xnew, NOISE, mean=MID)
    return dict(X=X, Y=Y, Xnew=Xnew, mean=mean, var=var, C=C)


def make_model(problem, Y=None):
    return DPGPR((problem["X"], problem["Y"] if Y is None else Y), fresh_se(), y_bounds=(LO, HI), noise_variance=NOISE,
                 hyperparameters_public=True)


@pytest.fixture(scope="module")
def model(problem):
    return make_model(problem)


@pytest.fixture(scope="module")
def releases(model, problem):
    """One seeded release per objective (computed once)."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)
        for objective in ("mse", "entropy"):
            out[objective] = model.release(problem["Xnew"], epsilon=EPS, delta=DELTA, objective=objective,
                                           seed=3).unclipped()  # the raw DP mean (default: clipped)
    return out


def exact_audit(rel: PrivateRelease, C: np.ndarray, d: float, projected: bool = True) -> float:
    """Recompute the worst Mahalanobis shift over all n neighbours from the covariance the release
    claims; it must be <= 1 / multiplier and delta(eps) there <= delta. Returns the shift."""
    F = rel.noise_factor
    shifts = d * (range_projector(F) @ C if projected else C)
    mu = float(mahalanobis_shifts(F, shifts).max())
    assert mu <= (1.0 / rel.noise_multiplier) * (1 + 1e-6), (mu, 1.0 / rel.noise_multiplier)
    assert gaussian_delta_at_shift(rel.epsilon, mu) <= rel.delta * (1 + 1e-6)
    return mu


@pytest.mark.parametrize("objective", ["mse", "entropy"])
def test_release_fields(releases, problem, objective):
    rel = releases[objective]
    k = problem["Xnew"].shape[0]
    assert isinstance(rel, PrivateRelease)
    assert rel.mean.shape == rel.variance.shape == rel.noise_std.shape == (k, 1)  # GPflow's [k, P]
    assert rel.noise_factor.shape == (k, rel.rank) and 1 <= rel.rank <= k
    assert all(a.dtype == np.float64 for a in (rel.mean, rel.variance, rel.noise_std, rel.noise_factor))
    np.testing.assert_allclose(rel.noise_std[:, 0], np.linalg.norm(rel.noise_factor, axis=1), rtol=1e-12)
    np.testing.assert_allclose(rel.variance[:, 0], problem["var"], rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(rel.total_variance[:, 0], problem["var"] + rel.noise_std[:, 0]**2, rtol=1e-7)
    assert (rel.epsilon, rel.delta, rel.data_sensitivity) == (EPS, DELTA, D)
    assert rel.noise_multiplier == pytest.approx(S_ANALYTIC, rel=1e-4)
    assert rel.mu == pytest.approx(1.0 / rel.noise_multiplier)
    assert rel.calibration == "analytic" and rel.objective == objective and rel.mechanism == "cloaking"
    assert rel.certificate.converged and rel.certificate.objective == objective
    assert rel.reproducible
    # DP noise is not negligible: the Mahalanobis sensitivity is at least d * max_i ||c_i|| / ||M||
    assert rel.sensitivity > 0 and np.all(rel.noise_std > 0)


def test_variance_equals_predict_f(model, releases, problem):
    var = model.predict_f(problem["Xnew"])[1].numpy()  # [k, 1], as the release's
    np.testing.assert_allclose(releases["mse"].variance, var, rtol=1e-12)


@pytest.mark.parametrize("objective", ["mse", "entropy"])
def test_exact_audit_of_the_release(releases, problem, objective):
    rel = releases[objective]
    mu = exact_audit(rel, problem["C"], D)
    # The optimiser's normalisation is tight: the worst neighbour sits on the boundary.
    assert mu == pytest.approx(1.0 / rel.noise_multiplier, rel=1e-5)


@pytest.mark.parametrize("objective", ["mse", "entropy"])
def test_rank_rtol_and_bias_bound_recorded(releases, problem, objective):
    rel = releases[objective]
    s = np.linalg.svd(problem["C"], compute_uv=False)
    assert rel.rtol is not None and 0 < rel.rtol < 1
    assert rel.rank == int(np.sum(s > rel.rtol * s[0]))
    assert rel.rank < problem["Xnew"].shape[0]  # the dense grid makes C rank deficient
    n = problem["X"].shape[0]
    C, B = problem["C"], (HI - LO) / 2  # centred outputs lie within B of the prior mean (the midpoint)
    bias, largest = projection_bias(C, rel.rank, B)
    assert rel.bias_bound == pytest.approx(bias.max(), rel=1e-6)
    assert rel.bias_bound <= s[rel.rank] * np.sqrt(n) * B * (1 + 1e-9)  # the 2-norm bound holds too
    # The rule: every prediction's worst-case bias is <= 1% of its noise std (and of its floor) ...
    assert np.all(bias <= 0.01 * rel.noise_std[:, 0] * (1 + 1e-9))
    assert rank_rule_holds(C, rel.rank, B, D, rel.noise_multiplier)
    # ... and the previous candidate rank breaks it (the rule takes the first that holds).
    assert_first_rank_that_holds(C, rel, B, D, objective)


@pytest.mark.parametrize("objective", ["mse", "entropy"])
def test_released_mean_lies_in_the_noise_range(releases, problem, objective):
    rel = releases[objective]
    P = range_projector(rel.noise_factor)
    centred = rel.mean - MID
    assert np.linalg.norm(centred - P @ centred) <= 1e-9 * np.linalg.norm(centred)


@pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")
@pytest.mark.parametrize("objective", ["mse", "entropy"])
def test_neighbours_differ_by_the_projected_shift(problem, objective):
    """Same seed, outputs differing by d in one entry: the released means differ by exactly
    d * P c_j, where P projects onto range(noise_factor) -- the mean is projected (DESIGN 2)."""
    j = 3
    Y2 = problem["Y"].copy()
    Y2[j, 0] += D  # LO -> HI
    kw = dict(epsilon=EPS, delta=DELTA, objective=objective, seed=17)
    a = make_model(problem).release(problem["Xnew"], **kw).unclipped()  # the raw DP means
    b = make_model(problem, Y2).release(problem["Xnew"], **kw).unclipped()
    np.testing.assert_array_equal(a.noise_factor, b.noise_factor)  # C does not depend on y
    shift = D * problem["C"][:, j]
    P = range_projector(a.noise_factor)
    np.testing.assert_allclose((b.mean - a.mean)[:, 0], P @ shift, rtol=1e-7, atol=1e-9 * np.abs(shift).max())
    assert np.linalg.norm(shift - P @ shift) > 1e-9 * np.linalg.norm(shift)  # a projection happened


def test_seed_none_is_fresh_and_not_reproducible(model, problem):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReproducibleNoiseWarning)  # no warning for OS entropy
        a = model.release(problem["Xnew"], epsilon=EPS, delta=DELTA)
        b = model.release(problem["Xnew"], epsilon=EPS, delta=DELTA)
    assert not a.reproducible and not b.reproducible
    assert not np.allclose(a.mean, b.mean)
    np.testing.assert_allclose(a.noise_factor, b.noise_factor, rtol=1e-12)


def test_seed_int_is_reproducible_and_warns(model, problem):
    with pytest.warns(ReproducibleNoiseWarning, match="seed"):
        a = model.release(problem["Xnew"], epsilon=EPS, delta=DELTA, seed=123)
    with pytest.warns(ReproducibleNoiseWarning):
        b = model.release(problem["Xnew"], epsilon=EPS, delta=DELTA, seed=123)
    with pytest.warns(ReproducibleNoiseWarning):
        c = model.release(problem["Xnew"], epsilon=EPS, delta=DELTA, seed=124)
    assert a.reproducible and b.reproducible
    np.testing.assert_array_equal(a.mean, b.mean)
    assert not np.allclose(a.mean, c.mean)


@pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")
def test_explicit_rtol_is_recorded(model, problem):
    rel = model.release(problem["Xnew"], epsilon=EPS, delta=DELTA, rtol=1e-4, seed=0)
    s = np.linalg.svd(problem["C"], compute_uv=False)
    r = int(np.sum(s > 1e-4 * s[0]))
    assert rel.rtol == 1e-4 and rel.rank == r
    assert rel.bias_bound == pytest.approx(projection_bias(problem["C"], r, D / 2)[0].max(), rel=1e-6)
    exact_audit(rel, problem["C"], D)


@pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")
def test_classical_calibration_scales_the_noise(model, problem):
    kw = dict(epsilon=EPS, delta=DELTA, rtol=1e-4, seed=0)
    a = model.release(problem["Xnew"], calibration="analytic", **kw)
    c = model.release(problem["Xnew"], calibration="classical", **kw)
    assert c.calibration == "classical" and c.noise_multiplier == pytest.approx(3.2552, rel=1e-4)
    np.testing.assert_allclose(c.noise_std / a.noise_std, np.sqrt(2 * np.log(2 / DELTA)) / a.noise_multiplier, rtol=1e-9)
    exact_audit(c, problem["C"], D)


@pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")
def test_mse_beats_entropy_on_a_kung_like_problem():
    """Heights from ages (d = 100 cm, EQ lengthscale 15, variance 10, noise 25): "mse" gives lower
    mean noise variance; at a common rank it minimises the trace and "entropy" the log det."""
    rng = np.random.default_rng(2)
    age = np.sort(rng.uniform(0.0, 80.0, (60, 1)), axis=0)
    height = np.clip(60.0 + 95.0 * (1 - np.exp(-age / 12.0)) + 6.0 * rng.standard_normal((60, 1)), 50.0, 150.0)
    Xnew = np.linspace(0.0, 80.0, 25)[:, None]

    def release(objective, rtol=None):
        kern = gpflow.kernels.SquaredExponential(variance=10.0, lengthscales=15.0)
        m = DPGPR((age, height), kern, y_bounds=(50.0, 150.0), noise_variance=25.0, hyperparameters_public=True)
        return m.release(Xnew, epsilon=1.0, delta=0.01, objective=objective, rtol=rtol, seed=0)

    mse, ent = release("mse"), release("entropy")
    assert np.mean(mse.noise_std**2) < 0.8 * np.mean(ent.noise_std**2)  # about 0.58 here
    mse, ent = release("mse", 1e-4), release("entropy", 1e-4)
    assert mse.rank == ent.rank
    assert np.sum(mse.noise_std**2) <= np.sum(ent.noise_std**2) * (1 + 1e-6)

    def log_pdet(F):
        return 2 * np.sum(np.log(np.linalg.svd(F, compute_uv=False)))

    assert log_pdet(ent.noise_factor) <= log_pdet(mse.noise_factor) + 1e-6 * abs(log_pdet(mse.noise_factor))


# ---------------------------------------------------------------------------------------------
# The standard (Hall et al.) mechanism


@pytest.fixture(scope="module")
def standard(problem):
    X, Y = problem["X"], problem["Y"]
    Xnew = np.linspace(0.0, 10.0, 8)[:, None]
    mean, var, C = gpr_reference(se_ref, X, Y, Xnew, NOISE, mean=MID)
    out = dict(Xnew=Xnew, mean=mean, var=var, C=C)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)
        kw = dict(epsilon=EPS, delta=DELTA, mechanism="standard", seed=5)
        out["a"] = make_model(problem).release(Xnew, **kw).unclipped()  # the raw DP means
        Y2 = Y.copy()
        Y2[3, 0] += D
        out["b"] = make_model(problem, Y2).release(Xnew, **kw).unclipped()
    return out


def test_standard_release_sensitivity_and_noise(standard, problem):
    rel = standard["a"]
    k = standard["Xnew"].shape[0]
    X = problem["X"]
    unit = rkhs_sensitivity_unit(se_ref(X, X), NOISE)
    assert rel.mechanism == "standard" and rel.objective is None and rel.certificate is None
    assert rel.sensitivity == pytest.approx(D * unit, rel=1e-7)
    assert rel.sensitivity >= D * unit  # the safety factor only adds noise
    assert rel.noise_factor.shape == (k, k) and rel.mean.shape == rel.variance.shape == rel.noise_std.shape == (k, 1)
    cov = rel.noise_factor @ rel.noise_factor.T
    Kss = se_ref(standard["Xnew"], standard["Xnew"])
    np.testing.assert_allclose(cov, (rel.noise_multiplier * rel.sensitivity) ** 2 * Kss, rtol=1e-6, atol=1e-9 * cov.max())
    np.testing.assert_allclose(rel.noise_std[:, 0], np.linalg.norm(rel.noise_factor, axis=1), rtol=1e-12)
    np.testing.assert_allclose(rel.variance[:, 0], standard["var"], rtol=1e-7, atol=1e-12)
    exact_audit(rel, standard["C"], D, projected=False)


def test_standard_release_neighbours_differ_by_the_full_shift(standard):
    a, b = standard["a"], standard["b"]
    shift = D * standard["C"][:, 3]
    np.testing.assert_allclose((b.mean - a.mean)[:, 0], shift, rtol=1e-7, atol=1e-9 * np.abs(shift).max())


def test_cloaking_beats_standard_noise(releases, standard, problem):
    """Sanity: the optimised covariance adds less noise than GP-prior noise at matching points."""
    cl = releases["mse"]
    grid = problem["Xnew"][:, 0]
    idx = [int(np.argmin(np.abs(grid - x))) for x in standard["Xnew"][:, 0]]
    assert np.mean(cl.noise_std[idx] ** 2) < np.mean(standard["a"].noise_std ** 2)


# ---------------------------------------------------------------------------------------------
# Closed forms: one test point (k = 1) and one training point (n = 1)


@pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")
@pytest.mark.parametrize("objective", ["mse", "entropy"])
def test_single_test_point_closed_form(problem, objective):
    """k = 1: the release is the scalar Gaussian mechanism, noise std = s * d * max_i |c_i|."""
    Xnew = np.array([[4.2]])
    rel = make_model(problem).release(Xnew, epsilon=EPS, delta=DELTA, objective=objective, seed=0)
    _, var, C = gpr_reference(se_ref, problem["X"], problem["Y"], Xnew, NOISE, mean=MID)
    assert rel.rank == 1 and rel.noise_factor.shape == (1, 1) and rel.bias_bound == 0.0
    assert rel.noise_std[0, 0] == pytest.approx(rel.noise_multiplier * D * np.abs(C).max(), rel=1e-7)
    assert rel.noise_multiplier == pytest.approx(S_ANALYTIC, rel=1e-4)
    np.testing.assert_allclose(rel.variance[:, 0], var, rtol=1e-8)
    exact_audit(rel, C, D)


@pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")
@pytest.mark.parametrize("objective", ["mse", "entropy"])
def test_single_training_point_closed_form(objective):
    """n = 1: C is one column c, so the noise is s * d * c * xi (rank 1)."""
    X, Y = np.array([[1.0]]), np.array([[0.3]])
    Xnew = np.array([[0.0], [1.0], [2.5]])
    model = DPGPR((X, Y), fresh_se(), y_bounds=(LO, HI), noise_variance=NOISE, hyperparameters_public=True)
    rel = model.release(Xnew, epsilon=EPS, delta=DELTA, objective=objective, seed=0)
    _, _, C = gpr_reference(se_ref, X, Y, Xnew, NOISE, mean=MID)
    assert rel.rank == 1 and rel.noise_factor.shape == (3, 1)
    np.testing.assert_allclose(np.abs(rel.noise_factor[:, 0]), rel.noise_multiplier * D * np.abs(C[:, 0]), rtol=1e-7)
    exact_audit(rel, C, D)


# ---------------------------------------------------------------------------------------------
# FUZZ-BUG-2: public terms that are not finite (a kernel overflowing at huge inputs) are refused
# before any budget is reserved (the accountant's history stays empty) and before any draw.


def _fuzz_model(kernel):
    X = np.linspace(0.0, 3.0, 8)[:, None]
    Y = np.clip(np.sin(X), LO, HI)
    return DPGPR((X, Y), kernel, y_bounds=(LO, HI), noise_variance=NOISE, hyperparameters_public=True)


@pytest.mark.parametrize("x, lengthscale", [(1e100, 1e-60), (-1e100, 1e-60), (1e80, 1e-80)])
def test_standard_mechanism_refuses_non_finite_prior_covariance(draws, x, lengthscale):
    # inputs and lengthscales within dpgp_gpflow.validation.MAX_MAGNITUDE whose ratio still overflows the kernel
    model = _fuzz_model(gpflow.kernels.SquaredExponential(lengthscales=lengthscale))
    Xnew = np.array([[x], [1.0]])
    prior = model.standard_terms(tf.constant(Xnew)).prior_covariance.numpy()
    assert not np.all(np.isfinite(prior))  # (x / l)^2 overflows: inf - inf
    acc = dpgp_gpflow.PrivacyAccountant(epsilon=10.0, delta=0.5)
    with pytest.raises(ValueError, match="not finite"):
        model.release(Xnew, epsilon=EPS, delta=DELTA, mechanism="standard", accountant=acc)
    assert draws == [] and acc.history() == []


def test_standard_release_refuses_non_finite_prior_covariance_before_drawing(draws):
    acc = dpgp_gpflow.PrivacyAccountant(epsilon=10.0, delta=0.5)
    with pytest.raises(ValueError, match="prior_covariance"):
        dpgp_gpflow.mechanisms.standard_release(np.zeros(2), np.ones(2), np.array([[np.nan, 0.0], [0.0, 1.0]]),
                                             sensitivity=1.0, data_sensitivity=1.0, epsilon=EPS, delta=DELTA,
                                             accountant=acc)
    assert draws == [] and acc.history() == []


@pytest.mark.parametrize("mechanism", ["cloaking", "standard"])
def test_release_refuses_overflowing_cloaking_terms(draws, mechanism):
    """A product of two linear kernels at |x| = 1e100 (the largest input accepted): k(x, x) = x^4 overflows."""
    model = _fuzz_model(gpflow.kernels.Linear(variance=1.0) * gpflow.kernels.Linear(variance=1.0))
    Xnew = np.array([[1e100], [1.0]])
    acc = dpgp_gpflow.PrivacyAccountant(epsilon=10.0, delta=0.5)
    with pytest.raises(ValueError, match="not finite"):
        model.release(Xnew, epsilon=EPS, delta=DELTA, mechanism=mechanism, accountant=acc)
    assert draws == [] and acc.history() == []


def test_huge_inputs_with_finite_terms_still_release(draws):
    """The squared exponential vanishes far away: finite cloaking terms at |x| = 1e100 (the largest input
    accepted: dpgp_gpflow.validation.MAX_MAGNITUDE), so the release goes ahead."""
    model = _fuzz_model(gpflow.kernels.SquaredExponential())
    rel = model.release(np.array([[1e100], [1.0]]), epsilon=EPS, delta=DELTA)
    assert np.all(np.isfinite(rel.mean)) and rel.mean[0, 0] == pytest.approx(MID)  # the prior mean, exactly public
    assert len(draws) == 1
