"""Privacy audits of a linear Gaussian release (DESIGN.md section 8), reusable by every test.

Each audit is written from its definition with NumPy / SciPy only. It reads the *public* fields of a
release (``noise_factor`` F with noise covariance ``F F^T``, ``noise_multiplier``, ``epsilon``,
``delta``, ``data_sensitivity``) and the *shift vectors* of the mechanism actually implemented: how
the released vector moves when one private output moves by ``d``. Measure the shifts black-box
with :func:`measured_shifts` (two releases with the same explicit seed draw the same noise, so
their difference is exactly the shift), or pass ``d * C_ref[:, i]`` from an independently computed
cloaking matrix. Nothing here uses the package's maths; the only package import is the noise
source :func:`dpgp_gpflow.sampling.standard_normal` in :func:`draw_release_noise`, so that the
black-box and sampler audits exercise the sampler the package uses.

Units: a Gaussian with covariance ``Sigma = F F^T`` shifted by ``v`` has privacy loss
``mu = sqrt(v^T Sigma^+ v) = ||F^+ v||`` (Gaussian DP), and is (eps, delta(eps))-DP with
``delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)`` (Balle & Wang 2018). A release
with multiplier ``s`` claims ``mu <= 1 / s``: its noise std along every shift is ``s`` times the
shift's length in the noise metric.

The four audits, and the injected bugs each one catches on the tests' problem (statistic measured
there, mse objective at (1, 0.01); the correct release gives A: delta 0.0100, B: 0.0099,
C: eps_LB 0.90, D: 0.006, all passing):

===================  ==========================================  ===================================
audit                statistic                                   catches (measured)
===================  ==========================================  ===================================
A audit_exact        out-of-span residual of the shifts; max mu  (i) sqrt dropped: delta 0.150;
                     over shifts and C_ref; delta(eps) at mu     (iii) mean not projected: residual
                                                                 1.5e-5, delta = inf
B audit_hockey_      E_P[(1 - e^(eps - L))+], Hoeffding 99.9%    (i) 0.151; (ii) diagonal noise 0.43
  stick              (or exact binomial: bound="binomial")       (only over all column shifts);
                                                                 (iii) singular: 1
C audit_black_box    Clopper-Pearson lower bound on eps along    (i) eps_LB 2.22; (iii) 9.6;
                     Neyman-Pearson (+ noise-free) directions    (ii) 1.59 on this problem
D audit_sampler      max |E[w w^T] - I|, w = F^+ noise;          (ii) 1.9e4; (iv) z = M xi: 176
                     out-of-span noise                           (threshold 8/sqrt(N) = 0.018)
===================  ==========================================  ===================================

Usage from another test directory (there are no ``__init__.py`` files)::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audits"))
    import auditing
"""

from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Tuple

import numpy as np
from scipy import stats

__all__ = [
    "BlackBoxAudit",
    "ExactAudit",
    "HockeyStickAudit",
    "SamplerAudit",
    "audit_black_box",
    "audit_black_box_release",
    "audit_exact",
    "audit_hockey_stick",
    "audit_sampler",
    "draw_release_noise",
    "gaussian_delta",
    "measured_shifts",
    "neyman_pearson_directions",
    "noise_span",
    "person_shifts",
    "whiten",
]


# ---------------------------------------------------------------------------------------------
# Gaussian privacy profile and linear algebra of the noise factor


def gaussian_delta(epsilon: float, mu: float) -> float:
    """``delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)`` of a mu-GDP Gaussian shift.

    The exact privacy profile of ``N(0, 1)`` vs ``N(mu, 1)`` (Balle & Wang 2018, Theorem 8).
    ``e^eps Phi(.)`` is evaluated in log space so large epsilon cannot overflow.
    """
    mu = float(mu)
    epsilon = float(epsilon)
    if mu <= 0.0:
        return 0.0
    if not math.isfinite(mu):
        return 1.0
    a = -epsilon / mu + mu / 2.0
    b = -epsilon / mu - mu / 2.0
    return float(max(stats.norm.cdf(a) - math.exp(epsilon + stats.norm.logcdf(b)), 0.0))


def noise_span(noise_factor: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Thin SVD of the noise factor ``F = U diag(s) Vt``, numerically zero directions dropped.

    ``U`` (k x r) is an orthonormal basis of range(F), the only directions that receive noise.
    Directions with ``s_j <= max(k, r) * eps * s_1`` are treated as noise-free.
    """
    F = np.asarray(noise_factor, dtype=np.float64)
    if F.ndim != 2 or F.size == 0:
        raise ValueError(f"noise_factor must be a non-empty [k, r] matrix, got shape {F.shape}")
    U, s, Vt = np.linalg.svd(F, full_matrices=False)
    keep = s > max(F.shape) * np.finfo(np.float64).eps * s[0]
    return U[:, keep], s[keep], Vt[keep]


def whiten(noise_factor: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """``F^+ v`` for each row ``v`` of ``vectors`` ([m, k] -> [m, r']), up to a fixed rotation.

    Returns ``diag(1/s) U^T v`` (= ``Vt F^+ v``): Mahalanobis (whitened) coordinates.

    ``||F^+ v||`` is the Mahalanobis norm of ``v`` against ``F F^T`` after projecting ``v`` onto
    range(F) (the pseudo-inverse ignores the rest: check the residual separately).
    """
    U, s, Vt = noise_span(noise_factor)
    return (np.atleast_2d(vectors) @ U) / s[None, :]


def _span_residual(U: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """``||(I - U U^T) v|| / ||v||`` per row (0 for a zero row)."""
    vectors = np.atleast_2d(vectors)
    outside = vectors - (vectors @ U) @ U.T
    norms = np.linalg.norm(vectors, axis=1)
    return np.where(norms > 0.0, np.linalg.norm(outside, axis=1) / np.where(norms > 0.0, norms, 1.0), 0.0)


# ---------------------------------------------------------------------------------------------
# Measuring the mechanism black-box


def measured_shifts(
    release_mean: Callable[[np.ndarray], np.ndarray],
    y: np.ndarray,
    indices: Sequence[int],
    bounds: Tuple[float, float],
) -> Tuple[np.ndarray, np.ndarray]:
    """Shift vectors of the mechanism actually implemented, measured from its outputs.

    ``release_mean(y)`` must return the released vector for outputs ``y`` with a *fixed* explicit
    seed (so every call draws the same noise). The base dataset is ``y`` with ``y[i] = lo`` for every
    ``i`` in ``indices``; neighbour ``i`` moves ``y[i]`` to ``hi``, i.e. by ``d = hi - lo`` while staying
    in bounds. Returns ``(shifts [len(indices), k], base_y)`` with
    ``shifts[j] = release_mean(neighbour_j) - release_mean(base)``.
    """
    lo, hi = float(bounds[0]), float(bounds[1])
    base = np.array(y, dtype=np.float64).reshape(-1).copy()
    idx = [int(i) for i in indices]
    base[idx] = lo
    base_mean = np.asarray(release_mean(base), dtype=np.float64).reshape(-1)
    shifts = []
    for i in idx:
        neighbour = base.copy()
        neighbour[i] = hi
        shifts.append(np.asarray(release_mean(neighbour), dtype=np.float64).reshape(-1) - base_mean)
    return np.array(shifts), base


def draw_release_noise(noise_factor: np.ndarray, n: int, seed: Optional[int]) -> np.ndarray:
    """``n`` noise draws ``F xi`` ([n, k]) with ``xi`` from the package's own noise source.

    Uses :func:`dpgp_gpflow.sampling.standard_normal` (numpy PCG64 for an explicit seed, OS entropy
    for ``seed=None``), in one call of size ``n * r``; the reproducibility warning is silenced.
    """
    from dpgp_gpflow.sampling import standard_normal

    F = np.asarray(noise_factor, dtype=np.float64)
    r = F.shape[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xi, _ = standard_normal(n * r, seed)
    return np.asarray(xi, dtype=np.float64).reshape(n, r) @ F.T


def person_shifts(
    C: np.ndarray,
    groups: np.ndarray,
    d: float,
    *,
    interior: int = 0,
    seed: int = 0,
    max_rows: int = 12,
) -> Tuple[np.ndarray, np.ndarray]:
    """Every extreme change of every person, and random points inside their boxes: the shifts
    ``C_G delta`` ([m, k]) of a release ``C y`` when one person's outputs (rows with the same value
    of ``groups``) each move by ``delta_i`` in ``[-d, d]``. All ``2^|G|`` corners ``d s`` are listed
    (both signs: nothing assumed about symmetry) plus ``interior`` uniform points of each box.
    Returns ``(shifts, owner)``, ``owner[j]`` the person of shift j. Brute force from the definition
    of the neighbouring relation; refuses persons of more than ``max_rows`` rows (2^rows corners)."""
    C = np.asarray(C, dtype=np.float64)
    groups = np.asarray(groups).reshape(-1)
    rng = np.random.default_rng(seed)
    shifts, owner = [], []
    for person in np.unique(groups):
        rows = np.flatnonzero(groups == person)
        if rows.size > max_rows:
            raise ValueError(f"person {person} has {rows.size} rows: too many corners to enumerate")
        corners = np.array(list(itertools.product((-1.0, 1.0), repeat=rows.size)))  # [2^g, g]
        inside = rng.uniform(-1.0, 1.0, (interior, rows.size))
        deltas = d * np.concatenate([corners, inside], axis=0)
        shifts.append(deltas @ C[:, rows].T)
        owner.extend([person] * deltas.shape[0])
    return np.concatenate(shifts, axis=0), np.asarray(owner)


# ---------------------------------------------------------------------------------------------
# A. Exact audit


@dataclass
class ExactAudit:
    """Result of :func:`audit_exact`; ``passed`` is the verdict, ``failures`` say why not."""

    span_residual: float  #: max over shifts of ||(I - P_F) v|| / ||v||
    mu_shifts: np.ndarray  #: ||F^+ v|| per given shift
    mu_all: float  #: max_i d ||F^+ c_i|| over every column of C_ref (nan without C_ref)
    mu: float  #: the largest of the above
    mu_ratio: float  #: mu * noise_multiplier (the release claims <= 1)
    delta_at_mu: float  #: delta(epsilon) at mu (inf when a shift leaves range(F))
    delta: float
    passed: bool
    failures: list = field(default_factory=list)
    condition: float = 1.0  #: s_1 / s_r of F: the audit resolves mu to about 1e-16 * condition


def audit_exact(
    release,
    shifts: np.ndarray,
    C_ref: Optional[np.ndarray] = None,
    data_sensitivity: Optional[float] = None,
    *,
    span_rtol: float = 1e-8,
    mu_rtol: float = 1e-6,
    delta_rtol: float = 1e-9,
) -> ExactAudit:
    """A. Exact audit of a Gaussian linear release from its public noise factor.

    ``shifts`` ([m, k]) are the moves of the released vector between neighbouring datasets (measured
    with :func:`measured_shifts`, or ``d * C[:, i]``). Checks

    1. every shift lies in range(F): relative residual after projection <= ``span_rtol``. A shift
       with a component outside the noise span is published without noise there: the privacy loss
       is unbounded (this is what an unprojected mean does);
    2. ``mu = max ||F^+ v||`` over the shifts, and over all columns ``d c_i`` of ``C_ref`` (the
       projection onto range(F) is implied by the pseudo-inverse), satisfies
       ``mu * noise_multiplier <= 1 + mu_rtol`` (the release claims mu = 1 / multiplier);
    3. the analytic Gaussian ``delta(epsilon)`` at that mu is ``<= delta * (1 + delta_rtol)``.

    Floating point: ``F^+ v`` is accurate to about ``1e-16 * condition`` relative, where
    ``condition = s_1 / s_r`` of F (recorded in the result). Beyond ``condition ~ 1e9`` that exceeds
    ``mu_rtol``, and the released vector itself carries rounding of the same relative size along
    the directions with the least noise: the audit then fails by that margin (and rightly: the
    float release is not certified to 1e-6 there).
    """
    F = np.asarray(release.noise_factor, dtype=np.float64)
    U, s, _ = noise_span(F)
    shifts = np.atleast_2d(np.asarray(shifts, dtype=np.float64))
    if shifts.shape[1] != F.shape[0]:
        raise ValueError(f"shifts must be [m, {F.shape[0]}], got {shifts.shape}")
    residual = float(np.max(_span_residual(U, shifts))) if shifts.size else 0.0
    mu_shifts = np.linalg.norm(whiten(F, shifts), axis=1) if shifts.size else np.zeros(0)
    mu_all = float("nan")
    if C_ref is not None:
        d = float(release.data_sensitivity if data_sensitivity is None else data_sensitivity)
        mu_all = float(np.max(np.linalg.norm(whiten(F, d * np.asarray(C_ref, np.float64).T), axis=1)))
    candidates = list(mu_shifts) + ([] if math.isnan(mu_all) else [mu_all])
    mu = float(max(candidates)) if candidates else 0.0
    mu_ratio = mu * float(release.noise_multiplier)

    failures = []
    if residual > span_rtol:
        failures.append(f"a shift leaves the noise span: relative residual {residual:.3g} > {span_rtol:g}")
        delta_at_mu = math.inf
    else:
        delta_at_mu = gaussian_delta(release.epsilon, mu)
    if mu_ratio > 1.0 + mu_rtol:
        failures.append(f"mu * multiplier = {mu_ratio:.9g} > 1 + {mu_rtol:g}")
    if not delta_at_mu <= release.delta * (1.0 + delta_rtol):
        failures.append(f"delta(eps={release.epsilon:g}) at mu={mu:.6g} is {delta_at_mu:.6g} > {release.delta:g}")
    return ExactAudit(residual, mu_shifts, mu_all, mu, mu_ratio, delta_at_mu, float(release.delta),
                      not failures, failures, float(s[0] / s[-1]))


# ---------------------------------------------------------------------------------------------
# B. White-box Monte Carlo of the hockey-stick divergence


@dataclass
class HockeyStickAudit:
    """Result of :func:`audit_hockey_stick`. The tuples are (P vs Q, Q vs P) for the worst shift."""

    worst: int  #: index of the shift with the largest lower confidence bound
    mu: float  #: ||F^+ shift|| of that shift (inf when it leaves range(F))
    delta_hat: Tuple[float, float]  #: E_P[(1 - e^(eps - L))+] and the same with P, Q swapped
    ci_low: Tuple[float, float]
    ci_high: Tuple[float, float]
    p_loss_exceeds: Tuple[float, float]  #: P[L > eps] (NOT the test statistic; see the docstring)
    delta_hat_per_shift: np.ndarray  #: [m, 2]
    half_width: float  #: Hoeffding half-width of every interval (binomial: the largest half-width)
    delta: float
    passed: bool


def audit_hockey_stick(
    release,
    shifts: np.ndarray,
    *,
    noise_p: Optional[np.ndarray] = None,
    noise_q: Optional[np.ndarray] = None,
    n: int = 400_000,
    seed: int = 0,
    confidence: float = 0.999,
    span_rtol: float = 1e-8,
    bound: str = "hoeffding",
) -> HockeyStickAudit:
    """B. Monte Carlo estimate of the hockey-stick divergence with Hoeffding (or exact binomial) intervals.

    For each shift ``v`` (rows of ``shifts``, [m, k]), P = N(m, F F^T) (the release on D) and
    Q = N(m + v, F F^T) (on the neighbour D') are the densities the release *claims*. With
    ``L = log p/q`` at samples from P, ``delta(eps) = E_P[(1 - e^(eps - L))+]`` exactly; the same
    with P and Q swapped. Two-sided Hoeffding intervals for values in [0, 1], Bonferroni over all
    ``2 m`` of them at joint level ``confidence``; PASS iff every lower end is <= delta.

    The samples: ``noise_p`` / ``noise_q`` ([N, k]) are draws of the mechanism's noise on D and D'
    (output minus its noise-free mean) from the sampler actually used; the loss is still the
    claimed ``log p/q``, so a sampler that does not match the claim shows up as a statistic far
    from delta (diagonal-only noise, for shifts whose Neyman-Pearson direction it over-noises).
    Pass several shifts (e.g. every column ``d P_F c_i``): a mismatch need not show on the worst
    claimed shift. By default the samples are drawn from the claimed Gaussian (``n`` draws, numpy
    seed ``seed``, shared by all shifts): a purely white-box check of the calibration.

    Why not ``P[L > eps] <= delta``: since ``(1 - e^(eps - L))+ <= 1[L > eps]``, that condition is
    sufficient but not necessary for (eps, delta)-DP, and it rejects a correct analytic calibration:
    at (1, 0.01) the exact mechanism has P[L > 1] = 0.054. It is returned as ``p_loss_exceeds``
    only to show this.

    A shift outside range(F) makes P and Q mutually singular (supports on parallel affine
    subspaces): the divergence is 1 for every eps and the audit fails.

    ``bound="binomial"``: exact Clopper-Pearson intervals instead of Hoeffding's, by randomised
    rounding. With ``X = (1 - e^(eps - L))+`` in [0, 1] and ``U`` uniform on [0, 1] independent of it,
    ``P[U < X] = E[X]``, so the count of ``U_j < X_j`` over the N samples is exactly
    Binomial(N, delta(eps)) whatever the law of L: its Clopper-Pearson interval (Bonferroni as above)
    holds at every N, and is about ``sqrt(delta)`` times narrower than Hoeffding's for a small delta
    (at N = 400,000, delta = 0.01, two intervals at 99.9%: +-5.5e-4 against +-3.2e-3). The estimate
    ``delta_hat`` stays the mean of X (unbiased, of smaller variance than the count's);
    ``half_width`` is then the largest half-width of the intervals. The uniforms come from their own
    generator (``[seed, 1]``), so the samples are those of the default bound.
    """
    if bound not in ("hoeffding", "binomial"):
        raise ValueError(f"bound must be 'hoeffding' or 'binomial', got {bound!r}")
    F = np.asarray(release.noise_factor, dtype=np.float64)
    eps, delta = float(release.epsilon), float(release.delta)
    U, s, _ = noise_span(F)
    shifts = np.atleast_2d(np.asarray(shifts, dtype=np.float64))
    m = shifts.shape[0]
    alpha = 1.0 - confidence
    residual = _span_residual(U, shifts)
    u_all = whiten(F, shifts)  # [m, r]: P = N(0, I), Q = N(u, I) in whitened coordinates
    mus = np.linalg.norm(u_all, axis=1)
    if noise_p is None:
        rng = np.random.default_rng(seed)
        z_p, z_q = rng.standard_normal(n), rng.standard_normal(n)
        N = n
    else:
        noise_p = np.asarray(noise_p, dtype=np.float64)
        noise_q = np.asarray(noise_q, dtype=np.float64)
        N = min(noise_p.shape[0], noise_q.shape[0])
    half = math.sqrt(math.log(2.0 * 2 * m / alpha) / (2.0 * N))
    if bound == "binomial":  # one uniform per sample and side, shared by the shifts (Bonferroni needs no independence)
        uniforms = np.random.default_rng([seed, 1]).random((2, N))

    rows = np.ones((m, 8))  # columns: delta_hat (pq, qp), low (pq, qp), high (pq, qp), P[L > eps] (pq, qp)
    inside = np.flatnonzero(residual <= span_rtol)  # the others are singular: everything 1
    A = (U / s[None, :]) @ u_all.T  # [k, m]: (F F^T)^+ v_j, so a_j^T x = u_j^T w
    for block in np.array_split(inside, max(1, math.ceil(inside.size / 16))):
        if block.size == 0:
            continue
        mu = mus[block][None, :]
        if noise_p is None:
            proj_p, proj_q = z_p[:, None] * mu, z_q[:, None] * mu  # u^T w, w ~ N(0, I)
        else:
            proj_p, proj_q = noise_p[:N] @ A[:, block], noise_q[:N] @ A[:, block]
        # x = m + noise under P: log p(x)/q(x) = -u^T w + mu^2/2;
        # x' = m + v + noise under Q: log q(x')/p(x') = u^T w' + mu^2/2.
        for col, loss in enumerate((-proj_p + 0.5 * mu * mu, proj_q + 0.5 * mu * mu)):
            x = -np.expm1(np.minimum(eps - loss, 0.0))  # (1 - e^(eps - L))+, in [0, 1]
            hat = np.mean(x, axis=0)
            rows[block, col] = hat
            if bound == "binomial":
                counts = np.sum(uniforms[col][:, None] < x, axis=0)  # Binomial(N, delta(eps)) exactly
                rows[block, 2 + col], rows[block, 4 + col] = _clopper_pearson(counts, N, alpha / (2 * m))
            else:
                rows[block, 2 + col] = np.maximum(hat - half, 0.0)
                rows[block, 4 + col] = np.minimum(hat + half, 1.0)
            rows[block, 6 + col] = np.mean(loss > eps, axis=0)
    if bound == "binomial":
        half = float(np.max(rows[:, 4:6] - rows[:, 2:4]) / 2.0)
    worst = int(np.argmax(np.max(rows[:, 2:4], axis=1)))
    r = rows[worst]
    mu_worst = math.inf if residual[worst] > span_rtol else float(mus[worst])
    passed = bool(np.max(rows[:, 2:4]) <= delta)
    return HockeyStickAudit(worst, mu_worst, (r[0], r[1]), (r[2], r[3]), (r[4], r[5]), (r[6], r[7]),
                            rows[:, :2], half, delta, passed)


# ---------------------------------------------------------------------------------------------
# C. Black-box audit: Clopper-Pearson lower bound on epsilon


@dataclass
class BlackBoxAudit:
    """Result of :func:`audit_black_box`."""

    epsilon_lower_bound: float  #: a lower bound on the true epsilon at ``delta``, w.p. >= confidence
    per_direction: list  #: the bound for each direction
    epsilon: float
    delta: float
    n: int  #: samples per side used for counting
    passed: bool


def neyman_pearson_directions(noise_factor: np.ndarray, shifts: np.ndarray, *, span_rtol: float = 1e-8) -> np.ndarray:
    """Directions to project outputs on ([m', k], unit length), for each shift ``v`` (rows of
    ``shifts``): the Neyman-Pearson direction ``(F F^T)^+ v``, plus the part of ``v`` outside range(F)
    when its relative size exceeds ``span_rtol`` (along it the two output distributions do not
    overlap at all). Public: F and the shifts (measured, or ``d C[:, i]``) are."""
    F = np.asarray(noise_factor, dtype=np.float64)
    U, s, _ = noise_span(F)
    directions = []
    for v in np.atleast_2d(np.asarray(shifts, dtype=np.float64)):
        w = (U / s[None, :]) @ (whiten(F, v)[0])
        if np.linalg.norm(w) > 0:
            directions.append(w / np.linalg.norm(w))
        outside = v - U @ (U.T @ v)
        if np.linalg.norm(outside) > span_rtol * np.linalg.norm(v):
            directions.append(outside / np.linalg.norm(outside))
    return np.array(directions)


def _clopper_pearson(counts: np.ndarray, n: int, alpha: float) -> Tuple[np.ndarray, np.ndarray]:
    """Two-sided exact binomial interval at level 1 - alpha, vectorised."""
    counts = np.asarray(counts, dtype=np.float64)
    low = np.where(counts > 0, stats.beta.ppf(alpha / 2.0, counts, n - counts + 1.0), 0.0)
    high = np.where(counts < n, stats.beta.ppf(1.0 - alpha / 2.0, counts + 1.0, n - counts), 1.0)
    return np.nan_to_num(low, nan=0.0), np.nan_to_num(high, nan=1.0)


def audit_black_box(
    outputs_p: np.ndarray,
    outputs_q: np.ndarray,
    directions: np.ndarray,
    epsilon: float,
    delta: float,
    *,
    n_thresholds: int = 60,
    confidence: float = 0.999,
    n_pilot: Optional[int] = None,
) -> BlackBoxAudit:
    """C. Black-box lower bound on epsilon from mechanism outputs on neighbouring datasets.

    ``outputs_p`` / ``outputs_q`` ([N, k]) are independent outputs of the mechanism on D and D'. For
    each direction ``w`` the outputs are projected to ``t = o . w``; thresholds are quantiles of a
    pilot split (the first ``n_pilot`` rows of each side, default N / 10, used for nothing else),
    and on the remaining rows Clopper-Pearson intervals of ``P[t > tau]`` and ``Q[t > tau]``
    (Bonferroni over every interval, joint confidence ``confidence``) give, for each event ``E`` in
    ``{t > tau}, {t <= tau}`` and both orders,
    ``eps_LB = log((Q_lo(E) - delta) / P_hi(E))``. An (eps, delta)-DP mechanism has
    ``eps_LB <= eps`` with probability >= ``confidence``: PASS iff it does.
    """
    outputs_p = np.asarray(outputs_p, dtype=np.float64)
    outputs_q = np.asarray(outputs_q, dtype=np.float64)
    directions = np.atleast_2d(np.asarray(directions, dtype=np.float64))
    N = min(outputs_p.shape[0], outputs_q.shape[0])
    n_pilot = N // 10 if n_pilot is None else int(n_pilot)
    n = N - n_pilot
    # Each (direction, threshold) has two intervals (P and Q); complements reuse them.
    alpha = (1.0 - confidence) / (2 * len(directions) * n_thresholds)
    levels = np.linspace(0.005, 0.995, n_thresholds)
    per_direction = []
    for w in directions:
        t_p = outputs_p[:N] @ w
        t_q = outputs_q[:N] @ w
        thresholds = np.quantile(np.concatenate([t_p[:n_pilot], t_q[:n_pilot]]), levels)
        sp = np.sort(t_p[n_pilot:])
        sq = np.sort(t_q[n_pilot:])
        above_p = n - np.searchsorted(sp, thresholds, side="right")  # counts of t > tau
        above_q = n - np.searchsorted(sq, thresholds, side="right")
        p_lo, p_hi = _clopper_pearson(above_p, n, alpha)
        q_lo, q_hi = _clopper_pearson(above_q, n, alpha)
        bounds = []
        # events {t > tau} (probabilities p, q) and {t <= tau} (1 - p, 1 - q), both orders
        for lo_num, hi_den in ((q_lo, p_hi), (p_lo, q_hi), (1.0 - q_hi, 1.0 - p_lo), (1.0 - p_hi, 1.0 - q_lo)):
            num = lo_num - delta
            with np.errstate(divide="ignore", invalid="ignore"):
                value = np.where((num > 0) & (hi_den > 0), np.log(np.maximum(num, 1e-300) / hi_den), -np.inf)
            bounds.append(np.max(value))
        per_direction.append(float(max(bounds)))
    eps_lb = max(per_direction) if per_direction else -math.inf
    return BlackBoxAudit(eps_lb, per_direction, float(epsilon), float(delta), n, eps_lb <= epsilon)


def audit_black_box_release(
    release,
    shifts: np.ndarray,
    *,
    n: int = 200_000,
    n_pilot: int = 20_000,
    seed: int = 0,
    noise: Optional[Callable[[int, int], np.ndarray]] = None,
    span_rtol: float = 1e-8,
    **kwargs,
) -> BlackBoxAudit:
    """C on a release: outputs ``shift + noise`` vs ``noise`` for its most revealing shift.

    The shift audited is the one that leaves range(F) the most when any does (relative residual
    above ``span_rtol``), otherwise the one with the largest ``||F^+ v||``. ``noise(N, seed)``
    ([N, k]) draws the mechanism's noise; by default :func:`draw_release_noise` with the release's
    own factor and the package's noise source (seeds ``seed`` and ``seed + 1``). The noise-free
    mean is irrelevant (thresholds come from the pilot rows), so the outputs are centred at 0.
    Extra keyword arguments go to :func:`audit_black_box`.
    """
    F = np.asarray(release.noise_factor, dtype=np.float64)
    shifts = np.atleast_2d(np.asarray(shifts, dtype=np.float64))
    U, _, _ = noise_span(F)
    residual = _span_residual(U, shifts)
    if np.max(residual) > span_rtol:
        shift = shifts[int(np.argmax(residual))]
    else:
        shift = shifts[int(np.argmax(np.linalg.norm(whiten(F, shifts), axis=1)))]
    if noise is None:
        noise = lambda size, s: draw_release_noise(F, size, s)  # noqa: E731
    total = n + n_pilot
    outputs_p = noise(total, seed)
    outputs_q = shift[None, :] + noise(total, seed + 1)
    directions = neyman_pearson_directions(F, shift, span_rtol=span_rtol)
    return audit_black_box(outputs_p, outputs_q, directions, release.epsilon, release.delta,
                           n_pilot=n_pilot, **kwargs)


# ---------------------------------------------------------------------------------------------
# D. Sampler audit


@dataclass
class SamplerAudit:
    """Result of :func:`audit_sampler`."""

    max_cov_deviation: float  #: max |E[w w^T] - I| over entries, w = F^+ noise
    max_mean: float  #: max |E[w]|
    span_residual: float  #: ||(I - P_F) noise||_F / ||noise||_F: noise outside the claimed span
    threshold: float  #: threshold_factor / sqrt(N)
    passed: bool


def audit_sampler(
    noise: np.ndarray,
    noise_factor: np.ndarray,
    *,
    threshold_factor: float = 8.0,
    span_rtol: float = 1e-8,
) -> SamplerAudit:
    """D. Whitened noise draws ``w = F^+ (o - m)`` ([N, k] -> [N, r]) must be N(0, I).

    PASS iff the second moment ``E[w w^T]`` (about the true mean 0, so a bias shows too) is within
    ``threshold_factor / sqrt(N)`` of the identity in every entry, ``|E[w]|`` is within the same
    threshold, and the draws lie in range(F) (relative residual <= ``span_rtol``).
    """
    noise = np.atleast_2d(np.asarray(noise, dtype=np.float64))
    F = np.asarray(noise_factor, dtype=np.float64)
    U, s, _ = noise_span(F)
    N = noise.shape[0]
    w = (noise @ U) / s[None, :]  # F^+ noise (row-wise)
    cov = (w.T @ w) / N
    dev = float(np.max(np.abs(cov - np.eye(cov.shape[0]))))
    mean = float(np.max(np.abs(w.mean(axis=0))))
    outside = noise - (noise @ U) @ U.T
    residual = float(np.linalg.norm(outside) / max(np.linalg.norm(noise), 1e-300))
    threshold = threshold_factor / math.sqrt(N)
    passed = dev <= threshold and mean <= threshold and residual <= span_rtol
    return SamplerAudit(dev, mean, residual, threshold, passed)
