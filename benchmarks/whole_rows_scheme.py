"""Design study: a residual-release scheme fixed on tuning problems, then evaluated once on the benchmark's rows.

Issue 36's last target: lower RMSE than DP-SGD (``whole_rows_vs_dpsgd.py``) at the same (epsilon, delta) on
!Kung and on synthetic 2-D data at n = 10^4 and 10^5. The package's residual release (the statistics at half the
Gaussian-DP budget, two residual releases at a quarter each) loses at !Kung epsilon 0.5 and at n = 10^4; a
histogram first stage (``whole_rows_headroom.py``) wins at 10^4 and loses badly on !Kung. This study fixes a
scheme, every constant and the rule choosing between its variants from PUBLIC quantities only (n, D, M, the box,
the lengthscale, epsilon, delta), honestly:

1. **Tuning**: candidate schemes are simulated on problems that hold none of the benchmark's rows: a 1-D
   height-from-age surrogate written from public knowledge only (n = 435 ages of a forager-like stable population,
   heights from WHO median growth charts lowered to a short-statured population's ~155 cm, a spread of 4 % of the
   height plus a sex difference after 12: :func:`growth_surrogate`, its sources in a comment; no row or statistic of
   the benchmark's data; it replaced, in session 18, a surrogate whose shape had been read from the benchmark's 435
   training rows), and the benchmark's synthetic 2-D generator at n = 10^4 and 10^5 with other seeds (rows 10 / 20,
   held out 11 / 21; the benchmark uses 0 and 1). DP-SGD (the benchmark's baseline, settings as there) runs on the
   same tuning problems. The scheme kept is the one with the most tuning rows below DP-SGD, ties broken by the
   smallest worst ratio to DP-SGD (a mechanical choice, :func:`select`). The grid (:func:`candidates`) was laid out
   after a first look at a few variants on the tuning problems only (then with the data-shaped surrogate; the grid
   is kept as it was). As a secondary check (NOT disjoint: the same 544 people), !Kung 80/20 splits by other
   permutation seeds (1, 2) are also simulated, with DP-SGD.
2. **Evaluation**: the kept scheme and the package's current scheme simulated once on the benchmark's rows
   (!Kung seed-0 split, synthetic 2-D seeds 0 / 1), against DP-SGD's medians in
   ``results/whole_rows_vs_dpsgd.md``; and on other shapes (clustered 2-D inputs at 10^4, the
   ``whole_rows_scale`` protocol at 10^6) against the non-private SGPR only.

A simulation as ``whole_rows_headroom.py``'s (exact statistics + the release's Gaussian noise at the analytic
multiplier; the exact sampler's grid and rounding slack, factors below 1.001, left out): NOT releases.

A scheme: the first stage, ``"release"`` (the package's statistics release of ``(S, b, q)`` at ``f_1``, ridge
posterior) or ``"histogram"`` (noised counts on a public grid of cells, about two per lengthscale per axis,
sensitivity sqrt 2 under replace-one, and ``b``, shares of ``f_1`` as the package's ``S`` / ``b``; the
preconditioner ``P`` the histogram's ``S`` floored at ``h_floor tau_h``, :func:`histogram_tau`); the fractions
``f_j``; the radius factor ``z``; the residual stages' solve (``ridge``: ``(lambda I + P)^{-1}``; ``aware``:
``P (P^2 + lambda P + kappa I)^{-1}`` with ``kappa = sigma_j^2 / sigma_f^2``, the weights' posterior mean when
the released sum's noise is modelled); and the final estimate
(``last``: ``u_J``; ``precision``: the residual stages' estimates averaged with weights ``f_j / R_j^2``, the
inverse of their noise variances up to a common factor); the radius rule ``R_j = min(z sqrt(sigma^2 + v), d)``
with ``v`` the mean over public points of the previous estimate's DP-noise variance (``dp``, the package's) or of
its weights' posterior variance with the released sums' noise modelled (``bayes``: it includes the shrinkage a
noisy first stage leaves, which ``dp`` misses: ``(I / sigma_f^2 + S^ (sigma^2 S^ + sigma_b^2 I)^{-1} S^)^{-1}``).

Usage::

    python benchmarks/whole_rows_scheme.py           # tuning, the choice, the evaluation (minutes)
    python benchmarks/whole_rows_scheme.py --quick   # few draws; into results/quick/
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
import warnings
from pathlib import Path
from typing import NamedTuple, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # small dense algebra: threads only contend on 2 shared cores
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

import gpflow  # noqa: E402
import numpy as np  # noqa: E402

import whole_rows_headroom as headroom  # noqa: E402
import whole_rows_vs_dpsgd as vs  # noqa: E402
from dpgp_gpflow.mechanisms.request import release_request  # noqa: E402
from dpgp_gpflow.whole_rows.bounds import DEFAULT_SHARES, validate_shares  # noqa: E402
from dpgp_gpflow.whole_rows.histogram_scheme import (HISTOGRAM_FRACTIONS, HISTOGRAM_Z,  # noqa: E402
                                                     PRECONDITIONER_FLOOR)

DELTA = 0.01
EPSILONS = (0.5, 1.0, 2.0)


class Scheme(NamedTuple):
    first: str = "release"  # "release" or "histogram"
    fractions: Tuple[float, ...] = (0.5, 0.25, 0.25)
    z: float = 2.0
    solve: str = "ridge"  # residual stages: "ridge" or "aware"
    final: str = "last"  # "last" or "precision"
    scale: float = 1.0  # the preconditioner P = scale * S^ after a histogram first stage
    radius: str = "dp"  # "dp": v = the DP-noise variance (the package); "bayes": the weights' posterior variance
    p_floor: float = 0.75  # release first: the preconditioner's floor (multiple of tau; u_1 keeps 0.75)
    cells: float = 2.0  # histogram first: cells per lengthscale per axis
    h_floor: float = 0.0  # histogram first: P floored at h_floor * tau_h (the counts' noise spectral scale)

    def label(self) -> str:
        f = ", ".join(f"{x:g}" for x in self.fractions)
        extra = f", scale {self.scale:g}" if self.scale != 1.0 else ""
        extra += f", radius {self.radius}" if self.radius != "dp" else ""
        extra += f", P floor {self.p_floor:g} tau" if self.p_floor != 0.75 else ""
        extra += f", {self.cells:g} cells / lengthscale" if self.first != "release" and self.cells != 2.0 else ""
        extra += f", P floor {self.h_floor:g} tau_h" if self.first != "release" and self.h_floor else ""
        return f"{self.first} first, ({f}), z {self.z:g}, {self.solve}, {self.final}{extra}"


#: the package's residual release today (DEFAULT_RESIDUAL_FRACTIONS, RESIDUAL_Z)
PACKAGE = Scheme()
#: the package's ``residual_fractions="histogram"`` today (``histogram_scheme``'s constants), one of the candidates
IMPLEMENTED = Scheme("histogram", HISTOGRAM_FRACTIONS, HISTOGRAM_Z, "ridge", "last", radius="bayes",
                     h_floor=PRECONDITIONER_FLOOR)


def histogram_tau(Pc, M, count_std):
    """``tau_h = sigma_c sqrt(2 log(2 M) ||sum_c |phi_c|^2 phi_c phi_c^T||)``: the matrix-Gaussian-series scale of the
    spectral norm of the counts' noise in the histogram's ``S`` (public: the cells' features and the noise std)."""
    sq = np.sum(Pc**2, axis=1)
    return count_std * math.sqrt(2.0 * math.log(2.0 * M) * float(np.linalg.eigvalsh((Pc * sq[:, None]).T @ Pc)[-1]))


def grid_of(p, per_lengthscale):
    """``(exact counts [C], features of the cell centres [C, M])`` of the public grid with ``per_lengthscale`` cells
    per lengthscale per axis over the box (cached on the problem). The counts are PRIVATE (noised by the scheme)."""
    grids = p.__dict__.setdefault("grids", {})
    if per_lengthscale not in grids:
        box = p.box
        G = int(math.ceil(float(np.max(box[:, 1] - box[:, 0])) / (p.ell / per_lengthscale)))
        edges = [np.linspace(a, z, G + 1) for a, z in box]
        cells = [np.clip(np.searchsorted(e, p.Xc[:, j], side="right") - 1, 0, G - 1) for j, e in enumerate(edges)]
        counts = np.bincount(np.ravel_multi_index(cells, (G,) * box.shape[0]), minlength=G ** box.shape[0])
        centres = np.stack([g.reshape(-1) for g in np.meshgrid(*[0.5 * (e[1:] + e[:-1]) for e in edges],
                                                              indexing="ij")], axis=1)
        grids[per_lengthscale] = (counts.astype(float), p.features(centres).numpy())
    return grids[per_lengthscale]


def simulate(p, mu, rng, scheme: Scheme):
    """One draw of the scheme's final estimate ``u`` [M] on problem ``p`` at Gaussian-DP ``mu``."""
    fractions = scheme.fractions
    first = scheme.first
    mu1 = mu * math.sqrt(fractions[0])
    if first == "release":
        w_S2, w_b2, _ = validate_shares(DEFAULT_SHARES)
        std = math.sqrt(headroom.joint_bound(DEFAULT_SHARES)) / mu1
        offdiag, b_std = std / math.sqrt(w_S2), std * p.d / math.sqrt(w_b2)
        S_noisy = p.S + headroom._goe(rng, p.M, offdiag)
        tau = headroom.spectral_noise_bound(offdiag, p.M)
        S_hat = headroom._floored(S_noisy, headroom.FLOOR_SCALE * tau)
        b = p.b + b_std * rng.standard_normal(p.M)
        u = headroom._ridge(S_hat, b, p.lam)
        points = p.Pc
        weights = np.full(points.shape[0], 1.0 / points.shape[0])
        P = S_hat if scheme.p_floor == headroom.FLOOR_SCALE else headroom._floored(S_noisy, scheme.p_floor * tau)
    else:
        exact, Pc = grid_of(p, scheme.cells)
        w_S2, w_b2, _ = validate_shares(DEFAULT_SHARES)
        count_std = math.sqrt(2.0) / (mu1 * math.sqrt(w_S2))
        counts = np.maximum(exact + count_std * rng.standard_normal(exact.size), 0.0)
        b_std = p.d / (mu1 * math.sqrt(w_b2))
        S_hat, b = (Pc * counts[:, None]).T @ Pc, p.b + b_std * rng.standard_normal(p.M)
        offdiag = 0.0
        points, weights = Pc, counts / max(float(np.sum(counts)), 1e-300)
        u = headroom._aware(S_hat, b, p.lam, b_std**2 / p.kernel_variance)
        P = scheme.scale * S_hat
        if scheme.h_floor:
            P = headroom._floored(P, scheme.h_floor * histogram_tau(Pc, p.M, count_std))
    eye = np.eye(p.M)
    A = np.linalg.solve(P + p.lam * eye, points.T)  # [M, points]
    outs, precisions = [], []
    Sb = headroom._floored(S_hat, 0.0)
    for f in fractions[1:]:
        if scheme.radius == "bayes":  # (I / sf^2 + S (sigma^2 S + (sb^2 + so^2 |u|^2) I)^{-1} S)^{-1}, S ~ S^
            noise = (b_std**2 + offdiag**2 * (u @ u)) * eye
            C = np.linalg.inv(eye / p.kernel_variance + Sb @ np.linalg.solve(p.noise_variance * Sb + noise, Sb))
            v = float(weights @ np.sum((points @ C) * points, axis=1))
        else:
            v = float(weights @ ((b_std**2 + offdiag**2 * (u @ u)) * np.sum(A * A, axis=0)
                                 + offdiag**2 * (u @ A) ** 2))
        R = min(scheme.z * math.sqrt(p.noise_variance + v), p.d)
        b_std, offdiag = 2.0 * R / (mu * math.sqrt(f)), 0.0
        b_j = p.Phi.T @ np.clip(p.yc - p.Phi @ u, -R, R) + b_std * rng.standard_normal(p.M)
        rhs = b_j + P @ u
        if scheme.solve == "aware":
            u = headroom._aware(P, rhs, p.lam, b_std**2 / p.kernel_variance)
        else:
            u = headroom._ridge(P, rhs, p.lam)
        outs.append(u)
        precisions.append(f / R**2)
    if scheme.final == "precision" and len(outs) > 1:
        w = np.asarray(precisions) / np.sum(precisions)
        return np.sum(w[:, None] * np.stack(outs), axis=0)
    return u


# -- problems -----------------------------------------------------------------------------------------------------

# The growth surrogate is written from public knowledge only; no value of Howell1.csv (the benchmark's data) was
# read to make it (its author had seen the earlier, data-shaped surrogate's constants in this file; none is reused).
# Sources (values rounded; approximate readings of published tables and reviews, not checked against the originals
# here):
# - Growth curve: the sex-averaged median length/height-for-age of the WHO Child Growth Standards (2006; 0-5 y) and
#   the WHO Growth Reference 2007 (de Onis et al., Bull. WHO 85: 660-667; 5-19 y): about 49.5 cm at birth, 75 at 1,
#   87 at 2, 103 at 4, 110 at 5, 116 at 6, 127 at 8, 138 at 10, 150 at 12, 161.5 at 14, 167.5 at 16, 169.5 at 18,
#   170 from 19. A short-statured small-scale population (adults ~150-160 cm; e.g. Walker et al. 2006, "Growth rates
#   and life histories in twenty-two small-scale societies", Am. J. Hum. Biol. 18: 295-311) is modelled by a height
#   deficit growing linearly from 0 at birth to 14.5 cm at 18 (adult mean 155.5 cm), then stature loss in old age
#   of ~0.1 cm a year from 40 (order of Sorkin et al. 1999, Am. J. Epidemiol. 150: 969-977).
# - Spread: a coefficient of variation of ~4 % of the median height at every age (the WHO tables' SD / median), and
#   a sex difference growing linearly from 0 at 12 to 10 cm at 18 (adult men ~160, women ~150 cm), half the rows
#   each sex: adult SD ~8 cm, a few cm in infancy.
# - Ages: a stable population (Lotka) with a Siler mortality hazard of the order Gurven & Kaplan (2007, "Longevity
#   among hunter-gatherers", Popul. Dev. Rev. 33: 321-365) report for hunter-gatherers (a1 0.422, b1 1.131, a2 0.013,
#   a3 1.47e-4, b3 0.086: ~57 % survive to 15, ~14 % to 70) and growth rate r = 0.01 a year, on [0, 90]: many
#   children, few over 70.
GROWTH_AGES = np.array([0.0, 1.0, 2.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0, 18.0, 19.0, 90.0])
GROWTH_WHO = np.array([49.5, 75.0, 87.0, 103.0, 110.0, 116.0, 127.0, 138.0, 150.0, 161.5, 167.5, 169.5, 170.0, 170.0])


def growth_curve(age):
    """The surrogate's mean height (cm) at ``age`` (years): WHO medians less a deficit growing to 14.5 cm at 18,
    less 0.1 cm a year from 40 (sources above)."""
    who = np.interp(age, GROWTH_AGES, GROWTH_WHO)
    return who - 14.5 * np.clip(age / 18.0, 0.0, 1.0) - 0.1 * np.maximum(age - 40.0, 0.0)


def forager_ages(size, rng):
    """Ages (years) from the stable-population density ``exp(-r a) l(a)`` on [0, 90], ``l`` the Siler survival."""
    a = np.linspace(0.0, 90.0, 9001)
    a1, b1, a2, a3, b3 = 0.422, 1.131, 0.013, 1.47e-4, 0.086
    log_l = -a1 / b1 * (1.0 - np.exp(-b1 * a)) - a2 * a - a3 / b3 * np.expm1(b3 * a)
    density = np.exp(log_l - 0.01 * a)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (density[1:] + density[:-1]) * np.diff(a))])
    return np.interp(rng.uniform(0.0, cdf[-1], size), cdf, a)


def growth_surrogate(seed: int, n: int = 435, held_out: int = 109):
    """A 1-D height-from-age surrogate written from public knowledge only (the sources above; no row or statistic of
    the benchmark's data): forager-census ages, a short-statured population's growth curve, an SD of 4 % of the
    height plus a sex difference after 12; the !Kung protocol's box, bounds, Z and kernel (``whole_rows_vs_dpsgd``)."""
    def rows(size, rng):
        age = forager_ages(size, rng)
        mean = growth_curve(age)
        sex = rng.choice([-0.5, 0.5], size=size) * 10.0 * np.clip((age - 12.0) / 6.0, 0.0, 1.0)
        return age[:, None], (mean + sex + 0.04 * mean * rng.standard_normal(size))[:, None]

    protocol = dict(Z=vs.grid([(0.0, 90.0)], 8), x_bounds=[(0.0, 100.0)], y_bounds=(50.0, 190.0), lengthscale=15.0,
                    kernel_variance=400.0, noise_variance=25.0)  # as whole_rows_vs_dpsgd.kung's
    return rows(n, np.random.default_rng(seed)), rows(held_out, np.random.default_rng(seed + 1)), protocol


def synthetic(n: int, seed: int, held_out: int = 2000):
    """The benchmark's synthetic 2-D generator (``whole_rows_vs_dpsgd.synthetic``) with other seeds."""
    def rows(size, s):
        rng = np.random.default_rng(s)
        X = rng.uniform(0.0, 100.0, (size, 2))
        return X, vs.surface(X) + 0.7 * rng.standard_normal((size, 1))

    _, _, protocol = vs.synthetic(10)
    return rows(n, seed), rows(held_out, seed + 1), protocol


def kung_split(seed: int):
    """!Kung, all 544, an 80/20 split by ``default_rng(seed).permutation`` (secondary: the same people)."""
    from whole_rows_kung import kung_all

    X, Y = kung_all()
    order = np.random.default_rng(seed).permutation(len(X))
    train, test = order[:435], order[435:]
    _, _, protocol = vs.kung()
    return (X[train], Y[train]), (X[test], Y[test]), protocol


TUNING = (
    ("growth", "height-from-age surrogate from public knowledge, n = 435 (seed 100)", lambda: growth_surrogate(100),
     "kung", 60),
    ("s4_tune", "synthetic 2-D, n = 10,000 (seeds 10 / 11)", lambda: synthetic(10_000, 10), "synthetic_10000", 40),
    ("s5_tune", "synthetic 2-D, n = 100,000 (seeds 20 / 21)", lambda: synthetic(100_000, 20), "synthetic_100000", 12),
)
SECONDARY = (
    ("kung_p1", "!Kung, split by permutation seed 1 (secondary: same people)", lambda: kung_split(1), "kung", 60),
    ("kung_p2", "!Kung, split by permutation seed 2 (secondary: same people)", lambda: kung_split(2), "kung", 60),
)
def clustered(n: int, seed: int, held_out: int = 2000):
    """Another shape (after the choice): ``datasets.make_synthetic_2d`` (clustered inputs, noise std 5), the box
    [0, 100]^2, 7 x 7 inducing grid, lengthscale 15, kernel variance 100, noise variance 25; held-out noisy rows."""
    from dpgp_gpflow.datasets import make_synthetic_2d

    X, Y, bounds = make_synthetic_2d(n, seed=seed)
    Xt, Yt, _ = make_synthetic_2d(held_out, seed=seed + 1)
    box = [(0.0, 100.0), (0.0, 100.0)]
    protocol = dict(Z=vs.grid(box, 7), x_bounds=box, y_bounds=bounds, lengthscale=15.0, kernel_variance=100.0,
                    noise_variance=25.0)
    return (X, Y), (Xt, Yt), protocol


def scale_protocol(n: int = 1_000_000):
    """``whole_rows_scale.py``'s protocol (``make_synthetic_2d`` seed 0), against the noise-free surface."""
    from dpgp_gpflow.datasets import _synthetic_f, make_synthetic_2d

    _, _, protocol = clustered(10, 0)
    X, Y, _ = make_synthetic_2d(n, seed=0)
    Xt = np.random.default_rng(1).uniform(0.0, 100.0, (2000, 2))
    return (X, Y), (Xt, _synthetic_f(Xt).reshape(-1, 1)), protocol


OTHER = (
    ("clustered_4", "clustered 2-D (make_synthetic_2d, seeds 3 / 4), n = 10,000", lambda: clustered(10_000, 3), None,
     40),
    ("scale_6", "clustered 2-D, whole_rows_scale protocol, n = 1,000,000 (noise-free target)", scale_protocol, None,
     6),
)
EVALUATION = (
    ("kung", "!Kung (height from age), n = 435 (the benchmark's split)", vs.kung, "kung", 60),
    ("s4", "synthetic 2-D, n = 10,000 (the benchmark's rows)", lambda: vs.synthetic(10_000), "synthetic_10000", 40),
    ("s5", "synthetic 2-D, n = 100,000 (the benchmark's rows)", lambda: vs.synthetic(100_000), "synthetic_100000",
     20),
)


def problem(load, draws):
    from dpgp_gpflow import whole_rows

    (X, Y), (Xt, Yt), p = load()
    out = headroom.Problem("", X, Y, Xt, Yt[:, 0], p["Z"], vs.kernel(p), p["noise_variance"], p["x_bounds"],
                           p["y_bounds"], EPSILONS, draws)
    out.box = np.asarray(p["x_bounds"], dtype=float)
    out.Xc = np.clip(np.asarray(X, dtype=float), out.box[:, 0], out.box[:, 1])
    out.ell = float(p["lengthscale"])
    out.features = whole_rows.FeatureMap(vs.kernel(p), p["Z"])
    return out, ((X, Y), (Xt, Yt), p)


def dpsgd_medians(name, data, repeats):
    """DP-SGD's median held-out RMSE per epsilon (the benchmark's settings and seeds rule)."""
    train, test, p = data
    out, _, _ = vs.run_method("dpsgd", name, train, test, p, repeats)
    return {eps: out[eps][0] for eps in EPSILONS}


def benchmark_dpsgd():
    """DP-SGD's medians of the benchmark's rows, read from ``results/whole_rows_vs_dpsgd.md``."""
    text = (Path(__file__).resolve().parent / "results" / "whole_rows_vs_dpsgd.md").read_text()
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 6 and re.fullmatch(r"\d+", cells[1] or ""):
            key = {"435": "kung", "10000": "s4", "100000": "s5"}.get(cells[1])
            if key:
                out[(key, float(cells[2]))] = float(cells[5])
    return out


# -- candidates, tuning, evaluation --------------------------------------------------------------------------------

def candidates():
    """The package's scheme, the best release-first variants of a first look, and the histogram-first grid."""
    out = [PACKAGE, Scheme("release", (0.5, 0.25, 0.25), 1.5, p_floor=0.35), Scheme("release", p_floor=0.5)]
    for h_floor in (0.1, 0.15, 0.25, 0.35):
        for fractions in ((0.3, 0.15, 0.15, 0.15, 0.25), (0.3, 0.2, 0.2, 0.3), (0.2, 0.2, 0.2, 0.2, 0.2),
                          (0.4, 0.2, 0.2, 0.2), (0.3, 0.1, 0.1, 0.1, 0.1, 0.3)):
            for z in (1.5, 2.0, 2.5):
                for final in ("last", "precision"):
                    out.append(Scheme("histogram", fractions, z, "ridge", final, radius="bayes", h_floor=h_floor))
    return out


def multiplier_mu(eps):
    return 1.0 / release_request(eps, DELTA, calibration="analytic", objective=None, seed=0).multiplier


def medians(p, index, schemes, draws):
    """{(scheme, eps): median RMSE} with common random numbers (the same seed for every scheme)."""
    out = {}
    for eps in EPSILONS:
        mu = multiplier_mu(eps)
        for scheme in schemes:
            rng = np.random.default_rng([index, int(round(10 * eps))])
            out[(scheme, eps)] = float(np.median([p.rmse(simulate(p, mu, rng, scheme)) for _ in range(draws)]))
    return out


def run_problems(sets, schemes, dpsgd_repeats, quick):
    """Per problem: (title, non-private RMSE, {(scheme, eps): median}, {eps: DP-SGD median} or None)."""
    results = []
    for index, (key, title, load, name, draws) in enumerate(sets):
        draws = max(draws // 5, 4) if quick else draws
        p, data = problem(load, draws)
        t0 = time.perf_counter()
        sims = medians(p, index, schemes, draws)
        print(f"{title}: {len(schemes)} schemes x {draws} draws in {time.perf_counter() - t0:.0f} s", flush=True)
        dpsgd = dpsgd_medians(name, data, dpsgd_repeats[name]) if dpsgd_repeats else None
        results.append((key, title, p.rmse(p.u_star), sims, dpsgd, draws))
    return results


def select(results, schemes):
    """The scheme with the most tuning rows below DP-SGD, ties broken by the smallest worst ratio to DP-SGD."""
    def score(scheme):
        ratios = [sims[(scheme, eps)] / dpsgd[eps] for _, _, _, sims, dpsgd, _ in results for eps in EPSILONS]
        return (-sum(r < 1.0 for r in ratios), max(ratios))
    ranked = sorted(schemes, key=score)
    return ranked, score


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer draws and DP-SGD releases; into results/quick/")
    args = parser.parse_args()
    started, machine = _common.utc_now(), _common.machine_info()
    gpflow.config.set_default_float(np.float64)
    repeats = ({"kung": 3, "synthetic_10000": 2, "synthetic_100000": 2} if args.quick else
               {"kung": 10, "synthetic_10000": 5, "synthetic_100000": 3})
    schemes = candidates()
    lines = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tuning = run_problems(TUNING, schemes, repeats, args.quick)
        ranked, score = select(tuning, schemes)
        chosen = ranked[0]
        print(f"chosen: {chosen.label()} {score(chosen)}", flush=True)
        shown = ranked[:10] + [s for s in (IMPLEMENTED, PACKAGE, schemes[1], schemes[2]) if s not in ranked[:10]]
        lines += ["### 1. Tuning problems (none holds a benchmark row; the 1-D surrogate is written from public "
                  "knowledge only: WHO growth medians, a forager-like age structure; `growth_surrogate`): median RMSE, "
                  "DP-SGD below", "",
                  "| scheme | rank | rows below DP-SGD | worst ratio to DP-SGD | "
                  + " | ".join(f"{key} eps {eps:g}" for key, *_ in tuning for eps in EPSILONS) + " |",
                  "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in tuning for _ in EPSILONS) + " |"]
        for scheme in shown:
            wins, worst = score(scheme)
            lines.append(f"| {scheme.label()} | {ranked.index(scheme) + 1} | {-wins} of {3 * len(tuning)} | "
                         f"{worst:.3f} | " + " | ".join(f"{sims[(scheme, eps)]:.3g}" for _, _, _, sims, _, _ in tuning
                                                        for eps in EPSILONS) + " |")
        lines.append("| DP-SGD (the benchmark's settings) | | | | " + " | ".join(
            f"{dpsgd[eps]:.3g}" for _, _, _, _, dpsgd, _ in tuning for eps in EPSILONS) + " |")
        lines.append("| non-private SGPR | | | | " + " | ".join(
            f"{nonprivate:.3g}" for _, _, nonprivate, _, _, _ in tuning for _ in EPSILONS) + " |")
        lines += ["", "Tuning problems: " + "; ".join(f"{key}: {title}, {draws} draws" for key, title, _, _, _, draws
                                                        in tuning) + f". {len(schemes)} candidate schemes.", ""]
        rows = [f"{key} eps {eps:g}" for key, *_ in tuning for eps in EPSILONS]

        def worst_row(scheme):
            ratios = [sims[(scheme, eps)] / dpsgd[eps] for _, _, _, sims, dpsgd, _ in tuning for eps in EPSILONS]
            return rows[int(np.argmax(ratios))]
        lines += [f"The package's histogram scheme (`residual_fractions=\"histogram\"`: {IMPLEMENTED.label()}): "
                  f"rank {ranked.index(IMPLEMENTED) + 1} of {len(schemes)}, {-score(IMPLEMENTED)[0]} of "
                  f"{3 * len(tuning)} rows below DP-SGD, worst ratio {score(IMPLEMENTED)[1]:.4f} "
                  f"({worst_row(IMPLEMENTED)}); the chosen scheme's {score(chosen)[1]:.4f} ({worst_row(chosen)}); "
                  "the worst rows of ranks 1-10: " + ", ".join(sorted({worst_row(s) for s in ranked[:10]})) + ".", ""]
        assert IMPLEMENTED in schemes
        pair = tuple(dict.fromkeys((chosen, IMPLEMENTED, PACKAGE)))
        secondary = run_problems(SECONDARY, pair, repeats, args.quick)
        evaluation = run_problems(EVALUATION, pair, None, args.quick)
        other = run_problems(OTHER[:1] if args.quick else OTHER, pair, None, args.quick)
    reference = benchmark_dpsgd()
    lines += ["### 2. Evaluation, once, on the benchmark's rows (the chosen scheme fixed above)", "",
              "| data | epsilon | chosen scheme | the package's histogram scheme (simulated) | the package's residual "
              "release (simulated) | DP-SGD (whole_rows_vs_dpsgd.md) | chosen / DP-SGD | non-private SGPR | draws |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    below = 0
    for key, title, nonprivate, sims, _, draws in evaluation:
        for eps in EPSILONS:
            d = reference.get((key, eps))
            ratio = sims[(chosen, eps)] / d if d else float("nan")
            below += bool(d and ratio < 1.0)
            lines.append(f"| {title} | {eps:g} | {sims[(chosen, eps)]:.3g} | {sims[(IMPLEMENTED, eps)]:.3g} | "
                         f"{sims[(PACKAGE, eps)]:.3g} | {_common.fmt(d, '.3g')} | {ratio:.3f} | {nonprivate:.3g} | "
                         f"{draws} |")
    lines += ["", f"Chosen scheme: **{chosen.label()}**; below DP-SGD in {below} of {3 * len(evaluation)} evaluation "
              "rows (simulated).", "",
              "### 3. Secondary check (NOT disjoint: other 80/20 splits of the same 544 !Kung people)", "",
              "| data | epsilon | chosen scheme | the package's histogram scheme (simulated) | the package's residual "
              "release (simulated) | DP-SGD | draws |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for key, title, nonprivate, sims, dpsgd, draws in secondary:
        for eps in EPSILONS:
            lines.append(f"| {title} | {eps:g} | {sims[(chosen, eps)]:.3g} | {sims[(IMPLEMENTED, eps)]:.3g} | "
                         f"{sims[(PACKAGE, eps)]:.3g} | {dpsgd[eps]:.3g} | {draws} |")
    lines += ["", "### 4. Other shapes, after the choice (no DP-SGD run): the chosen scheme vs the package's two", "",
              "| data | epsilon | chosen scheme | the package's histogram scheme (simulated) | the package's residual "
              "release (simulated) | non-private SGPR | draws |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for key, title, nonprivate, sims, _, draws in other:
        for eps in EPSILONS:
            lines.append(f"| {title} | {eps:g} | {sims[(chosen, eps)]:.3g} | {sims[(IMPLEMENTED, eps)]:.3g} | "
                         f"{sims[(PACKAGE, eps)]:.3g} | {nonprivate:.3g} | {draws} |")
    body = "\n".join(lines) + (
        "\n\nA simulation (module docstring): exact statistics plus the Gaussian noise each stage would add at the "
        "analytic multiplier (Gaussian-DP composition of the stages), not releases; the simulated package scheme "
        "reproduces its benchmark medians only up to the draws' spread. The scheme was chosen mechanically "
        "(most tuning rows below DP-SGD, then the smallest worst ratio) on the tuning problems alone; the "
        "evaluation rows were simulated once, after the choice. DP-SGD on the tuning problems: "
        "`whole_rows_vs_dpsgd.run_method` (the benchmark's settings and seeds rule), "
        + ", ".join(f"{k} {v} releases" for k, v in repeats.items()) + " per epsilon.")
    path = _common.write_fragment("whole_rows_scheme", "Whole rows private: a residual scheme chosen on tuning "
                                  "problems, evaluated once (design study)", body, machine=machine, started=started,
                                  quick=args.quick)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
