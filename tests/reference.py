"""Independent NumPy / SciPy / cvxpy references for the core tests.

Nothing here imports ``dpgp_gpflow``: every quantity the tests compare against is recomputed from
its definition (DESIGN.md sections 2-5), so a bug in the package cannot hide in its own reference.
"""

from __future__ import annotations

import math
import warnings
from functools import partial

import numpy as np
from scipy import optimize, special, stats

# ---------------------------------------------------------------------------------------------
# Calibration (DESIGN 3)


def analytic_delta(epsilon: float, s: float) -> float:
    """delta(epsilon) of the Gaussian mechanism with unit sensitivity and noise std ``s``
    (Balle & Wang 2018): ``Phi(1/(2s) - eps s) - exp(eps) Phi(-1/(2s) - eps s)``."""
    a = 1.0 / (2.0 * s) - epsilon * s
    b = -1.0 / (2.0 * s) - epsilon * s
    return float(stats.norm.cdf(a) - math.exp(epsilon + stats.norm.logcdf(b)))


def reference_multiplier(epsilon: float, delta: float) -> float:
    """The Gaussian multiplier ``s``: the root of ``analytic_delta(epsilon, s) = delta`` (Brent's method)."""
    return optimize.brentq(lambda s: analytic_delta(epsilon, s) - delta, 1e-3, 1e3, xtol=1e-14)


def gaussian_delta_at_shift(epsilon: float, mu: float) -> float:
    """delta(epsilon) for a Gaussian mechanism whose (Mahalanobis) shift / noise std is ``mu``."""
    if mu <= 0.0:
        return 0.0
    return analytic_delta(epsilon, 1.0 / mu)


# ---------------------------------------------------------------------------------------------
# Kernels (GPflow's parameterisations) and GP regression


def _sqdist(A: np.ndarray, B: np.ndarray, lengthscale) -> np.ndarray:
    A = np.asarray(A, float) / lengthscale
    B = np.asarray(B, float) / lengthscale
    return np.maximum(((A[:, None, :] - B[None, :, :]) ** 2).sum(-1), 0.0)


def k_se(A, B, variance=1.0, lengthscale=1.0) -> np.ndarray:
    return variance * np.exp(-0.5 * _sqdist(A, B, lengthscale))


#: The classifier tests' kernel (tests/models: the binary, sparse and multi-class Laplace classifiers): a squared
#: exponential of variance 1.2 and lengthscale 1 (GPflow's side: conftest.classifier_kernel).
CLASSIFIER_VAR, CLASSIFIER_LS = 1.2, 1.0


def K_np(A, B=None) -> np.ndarray:
    """The classifier tests' kernel matrix ``k(A, B)`` (``k(A, A)`` without ``B``)."""
    return k_se(A, A if B is None else B, variance=CLASSIFIER_VAR, lengthscale=CLASSIFIER_LS)


def k_matern52(A, B, variance=1.0, lengthscale=1.0) -> np.ndarray:
    r = np.sqrt(_sqdist(A, B, lengthscale))
    s5 = math.sqrt(5.0)
    return variance * (1.0 + s5 * r + 5.0 / 3.0 * r**2) * np.exp(-s5 * r)


def k_linear(A, B, variance=1.0) -> np.ndarray:
    return variance * np.asarray(A, float) @ np.asarray(B, float).T


def k_periodic_se(A, B, variance=1.0, lengthscale=1.0, period=1.0) -> np.ndarray:
    """GPflow's ``Periodic(SquaredExponential)``: ``v exp(-1/2 sum_d (sin(pi (a_d - b_d) / p) / l)^2)``."""
    diff = np.asarray(A, float)[:, None, :] - np.asarray(B, float)[None, :, :]
    s = np.sin(np.pi * diff / period) / lengthscale
    return variance * np.exp(-0.5 * (s**2).sum(-1))


def gpr_reference(kern, X, Y, Xnew, noise_variance, mean=0.0):
    """Posterior mean/variance of f at ``Xnew`` and the cloaking matrix ``C = K_*f K^{-1}``, via
    an explicit LU solve (deliberately a different route from the package's Cholesky solves)."""
    n = X.shape[0]
    K = kern(X, X) + noise_variance * np.eye(n)
    Ksf = kern(Xnew, X)
    C = np.linalg.solve(K, Ksf.T).T  # K symmetric: (K^{-1} K_f*)^T = K_*f K^{-1}
    mu = C @ (np.ravel(Y) - mean) + mean
    var = np.diag(kern(Xnew, Xnew)) - np.sum(Ksf * C, axis=1)
    return mu, var, C


def rkhs_sensitivity_unit(Kff: np.ndarray, noise_variance: float) -> float:
    """``max_j sqrt([K^{-1} Kff K^{-1}]_jj)``, K = Kff + sigma^2 I (DESIGN 5.2)."""
    Kinv = np.linalg.inv(Kff + noise_variance * np.eye(Kff.shape[0]))
    return float(np.sqrt(np.max(np.diag(Kinv @ Kff @ Kinv))))


def b_bound(Kinv: np.ndarray) -> float:
    """The papers' ``b(K^{-1})``: the largest column sum of the positive (or negative) parts."""
    pos = np.maximum(Kinv, 0.0).sum(0).max()
    neg = np.maximum(-Kinv, 0.0).sum(0).max()
    return float(max(pos, neg))


# ---------------------------------------------------------------------------------------------
# Noise covariances


def leverages(M: np.ndarray, V: np.ndarray) -> np.ndarray:
    """``v_i^T M^{-1} v_i`` for the columns of ``V`` (M invertible)."""
    return np.sum(V * np.linalg.solve(M, V), axis=0)


def range_projector(F: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """Orthogonal projector onto the column space of ``F``."""
    U, s, _ = np.linalg.svd(F, full_matrices=False)
    U = U[:, s > rtol * s[0]]
    return U @ U.T


def mahalanobis_shifts(F: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """``sqrt(c_i^T (F F^T)^+ c_i)`` for the columns ``c_i`` of ``shifts`` (minimum-norm solves)."""
    z = np.linalg.pinv(F) @ shifts
    return np.sqrt(np.sum(z * z, axis=0))


def entropy_dual_bound(V: np.ndarray, weights: np.ndarray) -> float:
    """Best lower bound on ``min log det M`` from the ray ``t * weights`` of the Lagrange dual
    ``log det S(l) + r - sum(l)``: ``r log(r / sum l) + log det S(l)``."""
    r = V.shape[0]
    S = (V * weights) @ V.T
    return float(r * math.log(r / weights.sum()) + np.linalg.slogdet(S)[1])


def mse_dual_bound(V: np.ndarray, weights: np.ndarray) -> float:
    """Best lower bound on ``min tr M`` from the ray ``t * weights`` of the Lagrange dual
    ``2 tr S(l)^{1/2} - sum(l)``: ``(tr S^{1/2})^2 / sum l``."""
    S = (V * weights) @ V.T
    w = np.linalg.eigvalsh(0.5 * (S + S.T))
    T = np.sqrt(np.maximum(w, 0.0)).sum()
    return float(T**2 / weights.sum())


def sqrtm_psd(S: np.ndarray) -> np.ndarray:
    w, U = np.linalg.eigh(0.5 * (S + S.T))
    return (U * np.sqrt(np.maximum(w, 0.0))) @ U.T


#: cvxpy's optimum per (objective, vectors): a pure function of its arguments, solved once per process (the
#: same problems are compared in several tests, e.g. test_noise_planning's dense and conjugate-gradient solves)
_CVX_SOLVED: dict = {}


def cvx_noise_covariance(V: np.ndarray, objective: str) -> np.ndarray:
    """The optimal ``M`` by cvxpy (CLARABEL), rescaled to exact feasibility (a copy of the one solve of
    these vectors in this process).

    entropy: ``max log det A s.t. v_i^T A v_i <= 1``, ``M = A^{-1}``;
    mse: ``min tr M s.t. [[M, v_i], [v_i^T, 1]] >= 0``.
    """
    V = np.ascontiguousarray(V, dtype=np.float64)
    key = (objective, V.shape, V.tobytes())
    if key not in _CVX_SOLVED:
        _CVX_SOLVED[key] = _cvx_noise_covariance_retried(V, objective)
    return _CVX_SOLVED[key].copy()


def _cvx_noise_covariance_retried(V: np.ndarray, objective: str) -> np.ndarray:
    import cvxpy as cp

    for tol in (1e-11, 1e-9):  # CLARABEL occasionally fails at the tightest setting: relax once
        try:
            return _cvx_noise_covariance(V, objective, tol)
        except cp.error.SolverError:
            if tol == 1e-9:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _cvx_noise_covariance(V: np.ndarray, objective: str, tol: float) -> np.ndarray:
    import warnings

    import cvxpy as cp

    r, n = V.shape
    opts = dict(solver="CLARABEL", tol_gap_abs=tol, tol_gap_rel=tol, tol_feas=tol, max_iter=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "solution may be inaccurate": we rescale and compare anyway
        if objective == "entropy":
            A = cp.Variable((r, r), PSD=True)
            prob = cp.Problem(cp.Maximize(cp.log_det(A)), [cp.sum(cp.multiply(V, A @ V), axis=0) <= 1])
            prob.solve(**opts)
            M = np.linalg.inv(0.5 * (A.value + A.value.T))
        elif objective == "mse":
            Mv = cp.Variable((r, r), symmetric=True)
            one = np.ones((1, 1))
            cons = [cp.bmat([[Mv, V[:, [i]]], [V[:, [i]].T, one]]) >> 0 for i in range(n)]
            prob = cp.Problem(cp.Minimize(cp.trace(Mv)), cons)
            prob.solve(**opts)
            M = 0.5 * (Mv.value + Mv.value.T)
        else:  # pragma: no cover
            raise ValueError(objective)
    if prob.status not in ("optimal", "optimal_inaccurate"):  # pragma: no cover
        raise RuntimeError(f"cvxpy failed: {prob.status}")
    return M * leverages(M, V).max()  # exactly feasible: max leverage 1


def objective_value(M: np.ndarray, objective: str) -> float:
    if objective == "entropy":
        sign, logdet = np.linalg.slogdet(M)
        if sign <= 0:  # pragma: no cover
            raise ValueError("M is not positive definite")
        return float(logdet)
    return float(np.trace(M))


def projection_bias(C: np.ndarray, r: int, output_bound: float):
    """Per row j of ``C``: the worst-case bias ``b ||C_j - P_j||_1`` of replacing ``C y`` (``|y_i| <= b``)
    by its projection ``P = U_r U_r^T C`` onto the top r left singular vectors (numpy SVD), and
    ``max_i |P_ji|``. Brute-force reference for the automatic rank rule."""
    U = np.linalg.svd(C, full_matrices=False)[0][:, :r]
    P = U @ (U.T @ C)
    return output_bound * np.abs(C - P).sum(axis=1), np.abs(P).max(axis=1)


def rank_rule_holds(C: np.ndarray, r: int, output_bound: float, d: float, multiplier: float) -> bool:
    """The automatic rank rule: every row's worst-case bias <= 1% of ``multiplier d max_i |P_ji|``."""
    bias, largest = projection_bias(C, r, output_bound)
    return bool(np.all(bias <= 0.01 * multiplier * d * largest))


def assert_first_rank_that_holds(C: np.ndarray, release, output_bound: float, d: float, objective: str) -> None:
    """``release.rank`` is the first automatic candidate (rtols 1e-2, 1e-3, ...; mse stops at 1e-7)
    whose rank satisfies :func:`rank_rule_holds`; the smaller candidate ranks break the rule."""
    s = np.linalg.svd(C, compute_uv=False)
    rtols = [10.0 ** -e for e in range(2, 11) if objective == "entropy" or e <= 7]
    ranks = []
    for t in rtols:
        r = int(np.sum(s > t * s[0]))
        if r not in ranks:
            ranks.append(r)
    assert release.rank in ranks
    assert rank_rule_holds(C, release.rank, output_bound, d, release.noise_multiplier)
    for r in ranks[: ranks.index(release.rank)]:
        assert not rank_rule_holds(C, r, output_bound, d, release.noise_multiplier)


# ---------------------------------------------------------------------------------------------
# Selection (docs/selection.md#sensitivity)


def reference_maps(X, splits, config):
    """Per fold ``(train, test)``: the GP regression fold map ``K_te,tr (K_tr + s2 I)^{-1}`` by an LU solve
    (:func:`gpr_reference`), SE kernel of variance 1 and the configuration's lengthscale and noise variance."""
    kern = partial(k_se, variance=1.0, lengthscale=config[".kernel.lengthscales"])
    nv = config[".likelihood.variance"]
    return [gpr_reference(kern, X[tr], np.zeros(tr.size), X[te], nv)[2] for tr, te in splits]


def reference_influence(maps, splits, n):
    """Per row: sum over folds of ``||C_f[:, j]||_1`` where j trains and 1 where it is tested (loops)."""
    out = np.zeros(n)
    for C, (tr, te) in zip(maps, splits):
        for col, j in enumerate(tr):
            out[j] += np.abs(C[:, col]).sum()
        for j in te:
            out[j] += 1.0
    return out


# ---------------------------------------------------------------------------------------------
# Laplace classification (docs/mechanisms.md#laplace-classification)


def newton_map_np(K: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``C = 1/2 (K^{-1} + W)^{-1}``, ``W = pi (1 - pi)`` at the public ``f`` (``f = 0``: step 1)."""
    pi = special.expit(f)
    return 0.5 * np.linalg.inv(np.linalg.inv(K) + np.diag(pi * (1.0 - pi)))


def quiet(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with every warning silenced (the package's own warnings are asserted where they are
    tested)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def clipped_sine_toy(lo: float, hi: float):
    """25 inputs uniform on [0, 6] (seed 7), ``sin(x)`` plus noise of std 0.2 clipped to ``[lo, hi]``, and 40 test
    inputs on [-1, 7]: ``(X [25, 1], Y [25, 1], Xs [40, 1])``."""
    rng = np.random.default_rng(7)
    X = rng.uniform(0.0, 6.0, (25, 1))
    Y = np.clip(np.sin(X) + 0.2 * rng.standard_normal((25, 1)), lo, hi)
    return X, Y, np.linspace(-1.0, 7.0, 40)[:, None]


# ---------------------------------------------------------------------------------------------
# Composition (privacy loss distributions)


def reference_pld_epsilon(events, deltas, discretization: float = 1e-4):
    """Epsilons at each of ``deltas`` of the replace-one composition of ``events`` (objects with ``kind``,
    ``epsilon``, ``delta``, ``mu``), built WITHOUT dpgp_gpflow.composition: dp_accounting's own ``PLDAccountant``
    (``REPLACE_ONE``) composes every event one at a time, a Gaussian as ``GaussianDpEvent(2 / mu)`` (the replace-one
    conversion trap: its shift is 2), a pure event as ``RandomizedResponseDpEvent(2 / (1 + e^eps), 2)``, and an
    (epsilon, delta) event's randomised-response part the same way. dp-accounting 0.6.0 has no (epsilon, delta)
    event, so that event's worst case (loss +inf with probability delta, else randomised response at epsilon, as
    ``from_privacy_parameters`` builds it) enters in closed form: an infinite-loss outcome counts whole in the
    hockey-stick divergence, so ``delta_total(eps) = 1 - prod(1 - delta_i) * (1 - delta_rest(eps))`` and the
    epsilon at ``delta`` is the rest's epsilon at ``1 - (1 - delta) / prod(1 - delta_i)`` (inf if that is <= 0).

    Not bit for bit: each of the ``k`` discretised PLDs composed rounds the loss up by less than ``discretization``,
    so this and ``composition.pld_epsilon`` both lie in ``[exact, exact + k * discretization]`` (k <=
    ``len(events)`` each). The events are composed one by one (``compose(event, count)`` of 0.6.0 ignores ``count``
    for randomised response)."""
    import dp_accounting
    from dp_accounting.pld import PLDAccountant

    accountant = PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE, discretization)
    kept = 1.0  # prod(1 - delta_i) of the (epsilon, delta) events: the mass of outcomes with a finite loss
    for e in events:
        if e.kind == "gaussian":
            accountant.compose(dp_accounting.GaussianDpEvent(2.0 / e.mu))
            continue
        if e.kind == "approximate":
            kept *= 1.0 - e.delta
        if e.epsilon > 0.0:  # randomised response at epsilon 0 loses nothing (and dp_accounting refuses p = 1)
            accountant.compose(dp_accounting.RandomizedResponseDpEvent(2.0 / (1.0 + math.exp(e.epsilon)), 2))
    out = []
    for delta in deltas:
        rest = 1.0 - (1.0 - delta) / kept if kept > 0.0 else 0.0
        out.append(math.inf if rest <= 0.0 else float(max(accountant.get_epsilon(rest), 0.0)))
    return out


def gdp_epsilon_closed_form(mu: float, delta: float) -> float:
    """Smallest epsilon at which ``mu``-GDP is (epsilon, delta)-DP: the root of ``gaussian_delta_at_shift(eps, mu) =
    delta`` (the exact profile, decreasing in epsilon), by Brent's method."""
    if gaussian_delta_at_shift(0.0, mu) <= delta:
        return 0.0
    hi = 1.0
    while gaussian_delta_at_shift(hi, mu) > delta:
        hi *= 2.0
    return float(optimize.brentq(lambda eps: gaussian_delta_at_shift(eps, mu) - delta, 0.0, hi, xtol=1e-12))
