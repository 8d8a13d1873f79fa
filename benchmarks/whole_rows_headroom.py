"""Design study: where the whole-row release's error comes from, and which mechanisms would close the gap to DP-SGD.

A simulation, not a release: the exact statistics ``(S, b)`` of the rows are computed in NumPy from the package's
features (``whole_rows.FeatureMap``, rows and outputs clipped to the box and bounds), then Gaussian noise of the
std a release would add at the same (epsilon, 0.01) (the analytic multiplier ``s``, ``mu = 1 / s`` in Gaussian DP;
the exact sampler's grid and the rounding slack, a factor below 1.001, are left out) is drawn many times, and each
draw goes through a post-processing. The first variant is the package's release as it is (the package's own
``posterior.regularised_statistic`` and ``posterior.weight_posterior``): it reproduces ``whole_rows_vs_dpsgd``'s
and ``whole_rows_scale``'s medians, which validates the simulation. Every other variant is NOT in the package:

* **oracles** (not private, they locate the error): the whole budget on ``b`` with ``S`` exact, or on ``S`` with
  ``b`` exact (``S`` regularised as the package does);
* **one release, other public constants**: the eigenvalue floor at 0.5 or 1.5 times the spectral bound (the
  package: 0.75), other shares of ``S`` and ``b``;
* **noise-aware posterior** (post-processing): ``u = S^ (S^2 + lambda S^ + kappa I)^{-1} b~``,
  ``kappa = sigma_b^2 / sigma_f^2``, the posterior mean when ``b~``'s noise is modelled (``S^`` the regularised
  statistic);
* **a public basis**: ``S`` and ``b`` released in the span of the top ``k`` eigenvectors of the features' mean
  outer product over a public grid (fewer noised entries, a truncation bias);
* **histogram S**: ``S`` replaced by ``sum_c max(n~_c, 0) phi(x_c) phi(x_c)^T`` over the cells ``c`` of a public
  grid on the box (cell centres ``x_c``; cell width about half the lengthscale, a rule fixed before the runs),
  the counts released with Gaussian noise (L2 sensitivity ``sqrt(2)`` under replace-one) in the same Gaussian-DP
  budget as ``b`` (squared shares 0.3 / 0.68 / 0.02 as the package's), the noise-aware posterior;
* **k releases of residuals**: release 1 is the package's release at a fraction ``f_1`` of the Gaussian-DP
  budget (``mu_1^2 = f_1 mu^2``); each later release j adds noise to ``b_j = sum_i phi(x_i) clip(y_c,i -
  phi(x_i)^T u_{j-1}, -R_j, R_j)`` only (L2 sensitivity ``2 R_j``: ``|phi| <= 1``) at ``mu_j^2 = f_j mu^2`` (the
  same (epsilon, delta) under Gaussian-DP composition) and ``u_j = (lambda I + S^)^{-1} (b~_j + S^ u_{j-1})``.
  ``R_j = z sqrt(sigma^2 + v_{j-1})`` is public: ``v_{j-1}`` is the mean over the histogram's cell centres of the
  first-order DP-noise variance of the previous estimate (the package's ``V_DP``, post-processing of the earlier
  releases; with a histogram first, weighted by the noised counts). ``z = 2`` was chosen among {1.5, 2, 3, 4},
  the fractions among a few splits and the histogram variant's scale 1.5 among {1, 1.5, 2} on these same rows
  (optimistic figures: an upper estimate of what such a scheme gives, not a tuned result);
* **ceiling of the residual schemes** (an oracle): one residual release at the whole budget around the
  non-private ``u*`` with ``R = 2 sigma`` (public): what a perfect first stage would allow.

Usage::

    python benchmarks/whole_rows_headroom.py            # !Kung, synthetic 2-D n = 10^4, 10^5, and 10^6 (minutes)
    python benchmarks/whole_rows_headroom.py --quick    # !Kung and n = 10^4, fewer draws; into results/quick/
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

import gpflow  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from dpgp_gpflow import whole_rows  # noqa: E402
from dpgp_gpflow.mechanisms.request import release_request  # noqa: E402
from dpgp_gpflow.whole_rows.bounds import DEFAULT_SHARES, joint_bound, validate_shares  # noqa: E402
from dpgp_gpflow.whole_rows.posterior import (  # noqa: E402
    FLOOR_SCALE,
    regularised_statistic,
    spectral_noise_bound,
    weight_posterior,
)

DELTA = 0.01
Z_RESIDUAL = 2.0


class Problem:
    """The exact statistics and public pieces of one protocol (NumPy)."""

    def __init__(self, title, X, Y, Xt, target, Z, kernel, noise_variance, box, bounds, epsilons, draws):
        self.title, self.epsilons, self.draws = title, epsilons, draws
        box = np.asarray(box, dtype=float)
        features = whole_rows.FeatureMap(kernel, Z)
        Xc = np.clip(np.asarray(X, dtype=float), box[:, 0], box[:, 1])
        self.Phi = np.concatenate([features(Xc[i:i + 50_000]).numpy() for i in range(0, len(Xc), 50_000)])
        self.Pt = features(Xt).numpy()
        self.lo, self.hi = bounds
        self.c, self.d, self.M = 0.5 * (self.lo + self.hi), self.hi - self.lo, Z.shape[0]
        self.yc = np.clip(np.asarray(Y, dtype=float).reshape(-1), self.lo, self.hi) - self.c
        self.S, self.b = self.Phi.T @ self.Phi, self.Phi.T @ self.yc
        self.kernel_variance = float(kernel.variance.numpy())
        self.noise_variance = float(noise_variance)
        self.lam = self.noise_variance / self.kernel_variance
        self.target = target
        # the public grid: cells of width about half the lengthscale (per axis), their centres' features
        ell = float(np.min(kernel.lengthscales.numpy()))
        G = int(math.ceil(float(np.max(box[:, 1] - box[:, 0])) / (0.5 * ell)))
        edges = [np.linspace(a, z, G + 1) for a, z in box]
        cells = [np.clip(np.searchsorted(e, Xc[:, j], side="right") - 1, 0, G - 1) for j, e in enumerate(edges)]
        self.counts = np.bincount(np.ravel_multi_index(cells, (G,) * box.shape[0]), minlength=G ** box.shape[0])
        centres = np.stack([g.reshape(-1) for g in np.meshgrid(*[0.5 * (e[1:] + e[:-1]) for e in edges],
                                                              indexing="ij")], axis=1)
        self.Pc = features(centres).numpy()
        self.u_star = np.linalg.solve(self.S + self.lam * np.eye(self.M), self.b)

    def rmse(self, u):
        return float(np.sqrt(np.mean((np.clip(self.Pt @ u + self.c, self.lo, self.hi) - self.target) ** 2)))


def _goe(rng, M, offdiag):
    G = rng.standard_normal((M, M))
    return offdiag * (G + G.T) / math.sqrt(2.0)


def _floored(S, floor):
    w, V = np.linalg.eigh(0.5 * (S + S.T))
    return (V * np.maximum(w, floor)) @ V.T


def _aware(S_hat, b, lam, kappa):
    """``S (S^2 + lam S + kappa I)^{-1} b`` for PSD ``S``: the weights' posterior mean when b's noise is data."""
    w, V = np.linalg.eigh(0.5 * (S_hat + S_hat.T))
    w = np.maximum(w, 0.0)
    return V @ ((w / (w * w + lam * w + kappa)) * (V.T @ b))


def _ridge(S_hat, b, lam):
    return np.linalg.solve(S_hat + lam * np.eye(S_hat.shape[0]), b)


def one_release(p, mu, rng, shares=DEFAULT_SHARES, floor_scale=FLOOR_SCALE):
    """``(S^, b~, sigma_b, sigma_o)`` of one release of ``(S, b, q)`` at Gaussian-DP ``mu``."""
    w_S2, w_b2, _ = validate_shares(shares)
    std = math.sqrt(joint_bound(shares)) / mu  # per entry of the packed vector
    offdiag, b_std = std / math.sqrt(w_S2), std * p.d / math.sqrt(w_b2)
    S_hat = _floored(p.S + _goe(rng, p.M, offdiag), floor_scale * spectral_noise_bound(offdiag, p.M))
    return S_hat, p.b + b_std * rng.standard_normal(p.M), b_std, offdiag


def package(p, mu, rng):
    """The package's release: its own post-processing functions (validates the simulation)."""
    w_S2, w_b2, _ = validate_shares(DEFAULT_SHARES)
    std = math.sqrt(joint_bound(DEFAULT_SHARES)) / mu
    offdiag, b_std = std / math.sqrt(w_S2), std * p.d / math.sqrt(w_b2)
    S_hat = regularised_statistic(tf.constant(p.S + _goe(rng, p.M, offdiag)),
                                  FLOOR_SCALE * spectral_noise_bound(offdiag, p.M))
    post = weight_posterior(S_hat, tf.constant(p.b + b_std * rng.standard_normal(p.M)), kernel_variance=1.0,
                            noise_variance=p.lam, b_std=b_std, offdiag_std=offdiag)
    return post.mean.numpy()


def oracle_b(aware):
    def run(p, mu, rng):
        b_std = p.d / mu
        b = p.b + b_std * rng.standard_normal(p.M)
        return _aware(p.S, b, p.lam, b_std**2 / p.kernel_variance) if aware else _ridge(p.S, b, p.lam)
    return run


def oracle_S(p, mu, rng):
    offdiag = 1.0 / mu  # the whole budget on S: a_S = 1 / sqrt(2), off-diagonal std = 1 / (sqrt(2) a_S mu)
    return _ridge(_floored(p.S + _goe(rng, p.M, offdiag), FLOOR_SCALE * spectral_noise_bound(offdiag, p.M)), p.b,
                  p.lam)


def constants(shares=DEFAULT_SHARES, floor_scale=FLOOR_SCALE, aware=False):
    def run(p, mu, rng):
        S_hat, b, b_std, _ = one_release(p, mu, rng, shares, floor_scale)
        return _aware(S_hat, b, p.lam, b_std**2 / p.kernel_variance) if aware else _ridge(S_hat, b, p.lam)
    return run


def public_basis(k):
    """One release of ``(V^T S V, V^T b, q)`` for the top ``min(k, M)`` eigenvectors ``V`` of the features' mean
    outer product over the public grid's cell centres (public; ``|V^T phi| <= |phi| <= 1``, so the same
    sensitivity), floored as the package does at the smaller dimension, predictions ``phi^T V u_k``."""
    def run(p, mu, rng):
        _, vectors = np.linalg.eigh(p.Pc.T @ p.Pc)
        V = vectors[:, ::-1][:, :min(int(k), p.M)]
        w_S2, w_b2, _ = validate_shares(DEFAULT_SHARES)
        std = math.sqrt(joint_bound(DEFAULT_SHARES)) / mu
        offdiag, b_std = std / math.sqrt(w_S2), std * p.d / math.sqrt(w_b2)
        S_k = V.T @ p.S @ V + _goe(rng, V.shape[1], offdiag)
        S_hat = _floored(S_k, FLOOR_SCALE * spectral_noise_bound(offdiag, V.shape[1]))
        return V @ _ridge(S_hat, V.T @ p.b + b_std * rng.standard_normal(V.shape[1]), p.lam)
    return run


def histogram_first(p, mu, rng, shares=DEFAULT_SHARES):
    """``(S^, b~, sigma_b, counts~)``: noised cell counts on the public grid (sensitivity sqrt 2, floored at 0) and
    ``b`` in one Gaussian-DP budget ``mu`` (squared shares as the package's; ``q``'s share unused here)."""
    w_S2, w_b2, _ = validate_shares(shares)
    counts = np.maximum(p.counts + math.sqrt(2.0) / (mu * math.sqrt(w_S2)) * rng.standard_normal(p.counts.size), 0.0)
    b_std = p.d / (mu * math.sqrt(w_b2))
    return (p.Pc * counts[:, None]).T @ p.Pc, p.b + b_std * rng.standard_normal(p.M), b_std, counts


def histogram(p, mu, rng):
    S_hat, b, b_std, _ = histogram_first(p, mu, rng)
    return _aware(S_hat, b, p.lam, b_std**2 / p.kernel_variance)


def residuals(fractions, first="release", scale=1.0):
    """Release 1 at ``f_1 mu^2``, then residual releases at ``f_j mu^2`` with the public ``R_j`` (docstring). With
    ``first="histogram"`` the first release is :func:`histogram_first`, every solve is noise-aware, the solves use
    ``scale * S^`` (an over-estimate keeps the iteration contracting when ``S^`` under-estimates ``S``: it
    converges when ``S < 2 scale S^ + lambda I``) and ``v`` is averaged with the noised counts as weights."""
    def run(p, mu, rng):
        mu1 = mu * math.sqrt(fractions[0])
        if first == "release":
            S_hat, b, b_std, offdiag = one_release(p, mu1, rng)
            weights = np.full(p.Pc.shape[0], 1.0 / p.Pc.shape[0])
            solve = lambda S, rhs, std: _ridge(S, rhs, p.lam)  # noqa: E731
        else:
            S_hat, b, b_std, counts = histogram_first(p, mu1, rng)
            offdiag, weights = 0.0, counts / max(float(np.sum(counts)), 1e-300)
            solve = lambda S, rhs, std: _aware(S, rhs, p.lam, std**2 / p.kernel_variance)  # noqa: E731
        u = solve(S_hat, b, b_std)
        P = scale * S_hat
        for f in fractions[1:]:
            H = np.linalg.solve(P + p.lam * np.eye(p.M), p.Pc.T)  # [M, cells]
            v = float(weights @ ((b_std**2 + offdiag**2 * (u @ u)) * np.sum(H * H, axis=0) + offdiag**2 * (u @ H) ** 2))
            R = min(Z_RESIDUAL * math.sqrt(p.noise_variance + v), p.d)
            b_std, offdiag = 2.0 * R / (mu * math.sqrt(f)), 0.0
            b_j = p.Phi.T @ np.clip(p.yc - p.Phi @ u, -R, R) + b_std * rng.standard_normal(p.M)
            u = solve(P, b_j + P @ u, b_std)
        return u
    return run


def ceiling(p, mu, rng):
    R = 2.0 * math.sqrt(p.noise_variance)
    b_std = 2.0 * R / mu
    b = p.Phi.T @ np.clip(p.yc - p.Phi @ p.u_star, -R, R) + b_std * rng.standard_normal(p.M) + p.S @ p.u_star
    return _aware(p.S, b, p.lam, b_std**2 / p.kernel_variance)


#: (label, simulation); the first is the package
VARIANTS = (
    ("one release (the package)", package),
    ("oracle: S exact, all noise on b (ridge posterior)", oracle_b(False)),
    ("oracle: S exact, all noise on b (noise-aware posterior)", oracle_b(True)),
    ("oracle: b exact, all noise on S", oracle_S),
    ("one release, floor 0.5 tau", constants(floor_scale=0.5)),
    ("one release, floor 1.5 tau", constants(floor_scale=1.5)),
    ("one release, shares (0.15, 0.83, 0.02)", constants(shares=(0.15, 0.83, 0.02))),
    ("one release, shares (0.5, 0.48, 0.02)", constants(shares=(0.5, 0.48, 0.02))),
    ("one release, noise-aware posterior", constants(aware=True)),
    ("one release in a public basis, k = min(20, M)", public_basis(20)),
    ("one release in a public basis, k = min(30, M)", public_basis(30)),
    ("histogram S + b, noise-aware posterior", histogram),
    ("3 releases (0.5, 0.25, 0.25), residuals, public R", residuals((0.5, 0.25, 0.25))),
    ("4 releases (0.4, 0.2, 0.2, 0.2), residuals, public R", residuals((0.4, 0.2, 0.2, 0.2))),
    ("3 releases, histogram S first, residuals, public R", residuals((0.5, 0.25, 0.25), first="histogram")),
    ("5 releases (0.3, 0.15, 0.15, 0.15, 0.25), histogram S first (x 1.5), residuals, public R",
     residuals((0.3, 0.15, 0.15, 0.15, 0.25), first="histogram", scale=1.5)),
    ("ceiling: one residual release around the exact u*, R = 2 sigma", ceiling),
)


def problems(quick: bool):
    import whole_rows_vs_dpsgd as vs

    sets = [("kung", "!Kung (height from age), n = 435", vs.kung, 40),
            ("s4", "synthetic 2-D (vs DP-SGD protocol), n = 10,000", lambda: vs.synthetic(10_000), 40)]
    if not quick:
        sets.append(("s5", "synthetic 2-D (vs DP-SGD protocol), n = 100,000", lambda: vs.synthetic(100_000), 20))
    for key, title, load, draws in sets:
        (X, Y), (Xt, Yt), p = load()
        yield Problem(title, X, Y, Xt, Yt[:, 0], p["Z"], vs.kernel(p), p["noise_variance"], p["x_bounds"],
                      p["y_bounds"], (0.5, 1.0, 2.0), 8 if quick else draws)
    if not quick:
        from dpgp_gpflow.datasets import _synthetic_f, make_synthetic_2d

        X, Y, bounds = make_synthetic_2d(1_000_000, seed=0)  # whole_rows_scale.py's protocol, lengthscale 15
        box = [(0.0, 100.0), (0.0, 100.0)]
        Xt = np.random.default_rng(1).uniform(0.0, 100.0, (2000, 2))
        yield Problem("synthetic 2-D (scale protocol, lengthscale 15), n = 1,000,000", X, Y, Xt,
                      _synthetic_f(Xt).reshape(-1), whole_rows.inducing_grid(box, 7),
                      gpflow.kernels.SquaredExponential(lengthscales=15.0, variance=100.0), 25.0, box, bounds, (1.0,),
                      6)


def simulate(p, rng):
    nonprivate = p.rmse(p.u_star)
    for eps in p.epsilons:
        mu = 1.0 / release_request(eps, DELTA, calibration="analytic", objective=None, seed=0).multiplier
        for label, run in VARIANTS:
            median = float(np.median([p.rmse(run(p, mu, rng)) for _ in range(p.draws)]))
            print(f"{p.title} eps {eps:g} {label}: {median:.3g} (non-private {nonprivate:.3g})", flush=True)
            yield p.title, eps, label, median, nonprivate, p.draws


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="!Kung and n = 10^4, 8 draws; into results/quick/")
    args = parser.parse_args()
    started, machine = _common.utc_now(), _common.machine_info()
    gpflow.config.set_default_float(np.float64)
    rng = np.random.default_rng(0)
    lines = ["| data | epsilon | variant | median RMSE | non-private SGPR RMSE | ratio | draws |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for problem in problems(args.quick):
            for title, eps, label, median, nonprivate, draws in simulate(problem, rng):
                lines.append(f"| {title} | {eps:g} | {label} | {median:.3g} | {nonprivate:.3g} | "
                             f"{median / nonprivate:.3f} | {draws} |")
    body = "\n".join(lines) + (
        "\n\nA simulation of the release's noise on the exact statistics (module docstring), not releases: the "
        "first variant is the package's release (compare the medians of `whole_rows_vs_dpsgd` and "
        "`whole_rows_scale`); the others are not implemented, and the oracles and the ceiling are not private "
        "(they locate the error). RMSE against the held-out outputs (!Kung, the DP-SGD protocol's synthetic rows) "
        "or the noise-free surface (the scale protocol). The residual variants' z and fractions were picked among "
        "a few values on these same rows (optimistic); the histogram's cell rule (half a lengthscale) and the other "
        "constants were fixed before the runs.")
    path = _common.write_fragment("whole_rows_headroom", "Whole rows private: headroom of the release (design study)",
                                  body, machine=machine, started=started, quick=args.quick)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
