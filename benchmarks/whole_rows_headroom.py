"""Design study: how far the whole-row release is from the issue 36 accuracy targets, and what would close the gap.

A simulation, not a release: the exact statistics ``(S, b)`` of the rows are computed by the package
(``whole_rows.sufficient_statistics``), then Gaussian noise of the std the release adds (the analytic multiplier of
``(epsilon, 0.01)`` times the joint bound, ``whole_rows.bounds``; the exact sampler's grid and the rounding slack,
a factor below 1.001, are left out) is drawn in NumPy many times, and each draw goes through the package's own
post-processing (``posterior.regularised_statistic`` at the public floor, ``posterior.weight_posterior``). The
first row of each block is the release as it is (it reproduces ``whole_rows_vs_dpsgd``'s and
``whole_rows_scale``'s medians, which validates the simulation); the others are variants that are NOT in the
package:

* **shares**: another public split of the one release's sensitivity between ``S`` and ``b``;
* **k releases of residuals**: release 1 is the present release at a fraction of the Gaussian-DP budget
  (``mu_1^2 = f_1 mu^2``); each later release j adds noise to ``b_j = sum_i phi(x_i) clip(y_c,i - phi(x_i)^T u_{j-1},
  -R, R)`` only (sensitivity ``2 R`` in L2: ``|phi| <= 1``), at ``mu_j^2 = f_j mu^2`` (so ``sum_j mu_j^2 = mu^2``:
  the same (epsilon, delta) under Gaussian-DP composition), and the weights are updated to
  ``u_j = (lambda I + S^)^{-1} (b~_j + S^ u_{j-1})`` (the posterior mean with ``S^``'s error multiplied by
  ``u_{j-1} - u*`` instead of ``u*``). ``R`` is a public fraction of the bounds' width. The fractions and ``R``
  were picked from a small grid on these same held-out rows: optimistic figures, an upper estimate of what such
  a scheme gives, not a tuned result.

Usage::

    python benchmarks/whole_rows_headroom.py            # !Kung, synthetic 2-D n = 10^4, and n = 10^6 (a few minutes)
    python benchmarks/whole_rows_headroom.py --quick    # fewer draws; into results/quick/
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
from dpgp_gpflow.streaming import LocalChunks  # noqa: E402
from dpgp_gpflow.whole_rows.bounds import joint_bound, validate_shares  # noqa: E402
from dpgp_gpflow.whole_rows.posterior import (  # noqa: E402
    FLOOR_SCALE,
    regularised_statistic,
    spectral_noise_bound,
    weight_posterior,
)

DELTA = 0.01
DEFAULT = (0.30, 0.68, 0.02)
#: (label, shares of release 1, budget fractions of the releases, residual range R as a fraction of the width)
VARIANTS = (
    ("one release (the package)", DEFAULT, (1.0,), None),
    ("one release, shares (0.6, 0.38, 0.02)", (0.60, 0.38, 0.02), (1.0,), None),
    ("2 releases (0.6, 0.4), R = 0.2 d", (0.60, 0.38, 0.02), (0.6, 0.4), 0.2),
    ("3 releases (0.6, 0.2, 0.2), R = 0.05 d", DEFAULT, (0.6, 0.2, 0.2), 0.05),
)


def problems(quick: bool):
    """(title, X, Y, test X, test targets, Z, kernel, noise variance, box, bounds, epsilons, draws)."""
    import whole_rows_vs_dpsgd as vs

    out = []
    for key, title, load, draws in (("kung", "!Kung (height from age), n = 435", vs.kung, 40),
                                    ("synthetic", "synthetic 2-D (vs DP-SGD protocol), n = 10,000",
                                     lambda: vs.synthetic(10_000), 20)):
        (X, Y), (Xt, Yt), p = load()
        out.append((title, X, Y, Xt, Yt[:, 0], p["Z"], vs.kernel(p), p["noise_variance"], p["x_bounds"],
                    p["y_bounds"], (0.5, 1.0, 2.0), 8 if quick else draws))
    if not quick:
        from dpgp_gpflow.datasets import _synthetic_f, make_synthetic_2d

        X, Y, bounds = make_synthetic_2d(1_000_000, seed=0)  # whole_rows_scale.py's protocol, lengthscale 15
        box = [(0.0, 100.0), (0.0, 100.0)]
        Xt = np.random.default_rng(1).uniform(0.0, 100.0, (2000, 2))
        out.append(("synthetic 2-D (scale protocol, lengthscale 15), n = 1,000,000", X, Y, Xt,
                    _synthetic_f(Xt).reshape(-1), whole_rows.inducing_grid(box, 7),
                    gpflow.kernels.SquaredExponential(lengthscales=15.0, variance=100.0), 25.0, box, bounds, (1.0,), 10))
    return out


def simulate(problem, rng):
    title, X, Y, Xt, target, Z, kernel, noise_variance, box, bounds, epsilons, draws = problem
    features = whole_rows.FeatureMap(kernel, Z)
    rows = whole_rows.RowStatistics(features, box, bounds)
    exact = whole_rows.sufficient_statistics(LocalChunks(np.asarray(X), np.asarray(Y)), rows)
    lo, hi = bounds
    c, d, M = 0.5 * (lo + hi), hi - lo, Z.shape[0]
    lam = noise_variance / float(kernel.variance.numpy())
    Pt = features(Xt).numpy()
    Phi = np.concatenate([features(np.clip(X[i:i + 50_000], *np.asarray(box, dtype=float).T)).numpy()
                          for i in range(0, len(X), 50_000)])
    yc = np.clip(np.asarray(Y)[:, 0], lo, hi) - c

    def rmse(u):
        return float(np.sqrt(np.mean((np.clip(Pt @ u + c, lo, hi) - target) ** 2)))

    nonprivate = rmse(np.linalg.solve(exact.S + lam * np.eye(M), exact.b))

    def one(mu, shares):
        w_S2, w_b2, _ = validate_shares(shares)
        std = math.sqrt(joint_bound(shares)) / mu  # per entry of the packed vector
        offdiag, b_std = std / math.sqrt(w_S2), std * d / math.sqrt(w_b2)
        G = rng.standard_normal((M, M))
        S_noised = exact.S + offdiag * (G + G.T) / math.sqrt(2.0)
        floor = FLOOR_SCALE * spectral_noise_bound(offdiag, M)
        S_hat = regularised_statistic(tf.constant(S_noised), floor)
        b_noised = exact.b + b_std * rng.standard_normal(M)
        post = weight_posterior(S_hat, tf.constant(b_noised), kernel_variance=1.0, noise_variance=lam, b_std=b_std,
                                offdiag_std=offdiag)
        return post.mean.numpy(), S_hat.numpy()

    rows_out = []
    for eps in epsilons:
        mu = 1.0 / release_request(eps, DELTA, calibration="analytic", objective=None, seed=0).multiplier
        for label, shares, fractions, R in VARIANTS:
            errors = []
            for _ in range(draws):
                u, S_hat = one(mu * math.sqrt(fractions[0]), shares)
                for f in fractions[1:]:
                    r = np.clip(yc - Phi @ u, -R * d, R * d)
                    b_j = Phi.T @ r + (2.0 * R * d / (mu * math.sqrt(f))) * rng.standard_normal(M)
                    u = np.linalg.solve(S_hat + lam * np.eye(M), b_j + S_hat @ u)
                errors.append(rmse(u))
            rows_out.append((title, eps, label, float(np.median(errors)), nonprivate, draws))
            print(f"{title} eps {eps:g} {label}: {rows_out[-1][3]:.3g} (non-private {nonprivate:.3g})", flush=True)
    return rows_out


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
        "`whole_rows_scale`); the others are not implemented. RMSE against the held-out outputs (!Kung, the "
        "DP-SGD protocol's synthetic rows) or the noise-free surface (the scale protocol). The residual variants' "
        "fractions and R were picked from a small grid on these same rows (optimistic).")
    path = _common.write_fragment("whole_rows_headroom", "Whole rows private: headroom of the release (design study)",
                                  body, machine=machine, started=started, quick=args.quick)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
