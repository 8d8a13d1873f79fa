"""Benchmark: DP hyperparameter selection at a realistic size (issue 13, item 3).

Protocol: ``make_synthetic_2d(n, seed=0)`` (default n = 3,000; public bounds (0, 100), d = 100)
holds the private outputs of a ``DPGPR`` (EQ kernel); ``select_hyperparameters`` runs over the
papers' grid shape, 5 lengthscales x 4 noise variances x 4 kernel variances = 80 configurations
(values for this data: inputs on [0, 100]^2, outputs of std about 13 with noise std 5), 5-fold CV
(split seed 0), the utility including the noise of a (1, 0.01)-DP cloaking release of each fold's
predictions (analytic calibration, mse objective), and a public threshold fixed in advance (default
3 x 8d^2, as benchmarks/selection_kung.py and the notebook; ``--threshold 0`` for none) drops, before
anything private is computed, the configurations whose own sensitivity exceeds it (the noisiest
ones, which also cost the most noise optimisation). The wall time is that of the selection:
``cross_validate`` (fold matrices) plus ``select_hyperparameters(cross_validation=cv)`` (release
noise of every fold, utilities, the draw), the same work as one ``select_hyperparameters`` call.

Evaluation: a held-out set ``make_synthetic_2d(n_eval, seed=1)`` (the same function, fresh inputs
and noise). Each configuration's evaluation RMSE is sqrt(mean over the held-out points of
(prediction - y)^2 + DP noise variance) of a (1, 0.01)-DP cloaking release fitted on the n points
(closed form, no noise drawn; as benchmarks/selection_kung.py). From the PRIVATE diagnostics (the
data owner's seat) each mechanism's selection probabilities at selection epsilon in {0.5, 1, 2}
give P(best) (the configuration with the lowest evaluation RMSE) and the expected RMSE
(sum of P(config) x RMSE(config)), against the best and the uniform choice.

Usage::

    nice -n 5 python benchmarks/selection_synthetic.py              # n = 3,000 (the result)
    python benchmarks/selection_synthetic.py --n 300                # quick check (writes results/quick/)
    nice -n 5 python benchmarks/selection_synthetic.py --threshold 0 # no threshold: all 80 configurations
"""

from __future__ import annotations

import argparse
import itertools
import resource
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

_common.quiet_tensorflow()

import gpflow  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import dpgp_gpflow  # noqa: E402
from dpgp_gpflow.datasets import make_synthetic_2d  # noqa: E402
from dpgp_gpflow.models import DPGPR, gpr_cloaking_matrix  # noqa: E402
from dpgp_gpflow.selection import (  # noqa: E402
    MECHANISMS,
    cross_validate,
    release_noise_std,
    select_hyperparameters,
    selection_probabilities,
)

gpflow.config.set_default_float(np.float64)
warnings.filterwarnings("ignore", category=dpgp_gpflow.ClippingWarning)

N_DEFAULT, N_EVAL, N_FOLDS = 3000, 300, 5
EPS_REL, DELTA_REL = 1.0, 0.01
EPS_SEL = (0.5, 1.0, 2.0)
TARGET_S = 600.0
THRESHOLD_UNITS = 3.0  # public threshold on a configuration's sensitivity, in units of 8 d^2
LENGTHSCALES = (2.5, 5.0, 10.0, 20.0, 40.0)
NOISE_VARIANCES = (6.25, 25.0, 100.0, 400.0)
KERNEL_VARIANCES = (25.0, 100.0, 400.0, 1600.0)
LS, NV, KV = ".kernel.lengthscales", ".likelihood.variance", ".kernel.variance"


def cpu_seconds() -> float:
    """User + system CPU time of this process (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=N_DEFAULT, help=f"training points (default {N_DEFAULT}; "
                        "any other value is a quick check written to results/quick/)")
    parser.add_argument("--threshold", type=float, default=THRESHOLD_UNITS,
                        help=f"public sensitivity threshold in units of 8 d^2 (default {THRESHOLD_UNITS:g}; 0: none)")
    parser.add_argument("--out-dir", type=Path, default=None, help="where to write the fragment")
    args = parser.parse_args(argv)
    quick = args.n != N_DEFAULT or args.threshold != THRESHOLD_UNITS

    started = _common.utc_now()
    machine = _common.machine_info()
    X, Y, bounds = make_synthetic_2d(args.n, seed=0)
    Xe, Ye, _ = make_synthetic_2d(N_EVAL, seed=1)
    y_ev = np.clip(Ye[:, 0], *bounds)
    model = DPGPR((X, Y), gpflow.kernels.SquaredExponential(lengthscales=10.0, variance=100.0), y_bounds=bounds,
                  noise_variance=25.0)
    grid = [{LS: ls, NV: nv, KV: kv} for ls, nv, kv in itertools.product(LENGTHSCALES, NOISE_VARIANCES, KERNEL_VARIANCES)]
    print(f"n = {args.n}, {len(grid)} configurations, {N_FOLDS} folds", flush=True)

    unit = 8.0 * model.data_sensitivity**2
    threshold = args.threshold * unit if args.threshold > 0 else None

    # --- the selection, timed (fold matrices, then noise plans + utilities + the draw)
    t0, c0 = time.perf_counter(), cpu_seconds()
    cv = cross_validate(model, grid, folds=N_FOLDS)
    t_folds, c_folds = time.perf_counter() - t0, cpu_seconds() - c0
    kept = np.ones(len(grid), dtype=bool) if threshold is None else cv.sensitivities <= threshold
    plans = len(set(cv.owners[kept])) * N_FOLDS
    print(f"fold matrices: {t_folds:.0f} s ({len(set(cv.owners))} distinct sets of fold maps; {kept.sum()} "
          f"configurations kept, {plans} noise plans)", flush=True)
    t1, c1 = time.perf_counter(), cpu_seconds()
    selection, diagnostics = select_hyperparameters(
        model, grid, epsilon=EPS_SEL[1], epsilon_release=EPS_REL, delta_release=DELTA_REL, cross_validation=cv,
        threshold=threshold, diagnostics=True)
    t_select, c_select = time.perf_counter() - t1, cpu_seconds() - c1
    total = t_folds + t_select
    print(f"noise plans, utilities and draw: {t_select:.0f} s; total {total:.0f} s", flush=True)
    u, sensitivity = diagnostics.utilities, selection.sensitivity  # PRIVATE: the data owner's diagnostics
    idx = np.flatnonzero(selection.kept)

    # --- evaluation RMSE of each configuration's release on the held-out set (public maps; a GP's
    # map depends on the lengthscale and the ratio noise / kernel variance only, so those are shared)
    t2 = time.perf_counter()
    Xt, Xet = tf.constant(X), tf.constant(Xe)
    m0 = 0.5 * sum(bounds)
    ys = np.clip(Y[:, 0], *bounds)
    cache = {}
    rmse = np.empty(len(grid))
    for i, config in enumerate(grid):
        key = (config[LS], config[NV] / config[KV])
        if key not in cache:
            kernel = gpflow.kernels.SquaredExponential(lengthscales=config[LS], variance=config[KV])
            C = gpr_cloaking_matrix(kernel, Xt, tf.constant(config[NV], tf.float64), Xet).numpy()
            sigma = release_noise_std(C, data_sensitivity=model.data_sensitivity, output_bound=model.output_bound,
                                      epsilon=EPS_REL, delta=DELTA_REL)
            cache[key] = np.sqrt(np.mean((m0 + C @ (ys - m0) - y_ev) ** 2 + sigma**2))
        rmse[i] = cache[key]
    t_eval = time.perf_counter() - t2
    print(f"evaluation RMSEs: {t_eval:.0f} s", flush=True)

    best = int(np.argmin(rmse))
    best_kept = int(idx[np.argmin(rmse[idx])])
    rows = []
    for eps in EPS_SEL:
        for mechanism in MECHANISMS:
            p = np.zeros(len(grid))
            p[idx] = selection_probabilities(u[idx], eps, sensitivity, mechanism=mechanism)
            rows.append([f"{eps:g}", mechanism, f"{p[best]:.4f}", f"{p[best_kept]:.4f}", f"{np.max(p):.4f}",
                         f"{p @ rmse:.3f}"])
    rows.append(["–", "best configuration", "1", "–", "–", f"{rmse[best]:.3f}"])
    rows.append(["–", "best kept configuration", "–", "1", "–", f"{rmse[best_kept]:.3f}"])
    rows.append(["–", "uniform choice", f"{1 / len(grid):.4f}", "–", "–", f"{rmse.mean():.3f}"])
    quality = _common.markdown_table(
        ["selection eps", "mechanism", "P(best)", "P(best kept)", "max P", "expected RMSE"], rows, align="llrrrr")

    cb = grid[best]
    timing = _common.markdown_table(
        ["n", "configurations (kept)", "distinct fold maps", "folds", "noise plans", "fold matrices (s)",
         "release noise + utilities + draw (s)", "total selection (s)", "target (s)", "CPU (s): folds / noise"],
        [[args.n, f"{len(grid)} ({kept.sum()})", len(set(cv.owners)), N_FOLDS, plans, f"{t_folds:.0f}",
          f"{t_select:.0f}", f"{total:.0f}", f"{TARGET_S:.0f}", f"{c_folds:.0f} / {c_select:.0f}"]],
        align="rrrrrrrrrr")
    threshold_text = ("no threshold" if threshold is None else
                      f"public threshold {args.threshold:g} x 8d^2 on each configuration's sensitivity (fixed in "
                      f"advance; {kept.sum()} of {len(grid)} configurations kept, the others dropped before anything "
                      "private is computed)")
    body = "\n".join([
        f"Synthetic 2-D (`make_synthetic_2d({args.n}, seed=0)`, bounds {bounds}, d = {model.data_sensitivity:g}): "
        f"`select_hyperparameters` on a `DPGPR` (EQ), grid lengthscale {LENGTHSCALES} x noise variance "
        f"{NOISE_VARIANCES} x kernel variance {KERNEL_VARIANCES} = {len(grid)} configurations, {N_FOLDS}-fold CV, "
        f"utility including the noise of a ({EPS_REL:g}, {DELTA_REL:g})-DP cloaking release (analytic, mse); "
        f"{threshold_text}. "
        "Configurations whose fold maps are the same up to rounding (a GP's kernel and noise variances scaled "
        "together) share fold matrices and noise plans (`CrossValidation.owners`). Times are wall clock on the "
        "machine below (see its load average; the CPU column is this process's user + system time).",
        "",
        timing,
        "",
        f"Selection quality from the private diagnostics (data owner's seat): evaluation RMSE of each configuration's "
        f"({EPS_REL:g}, {DELTA_REL:g})-DP release fitted on the n points, on {N_EVAL} held-out points "
        f"(`make_synthetic_2d({N_EVAL}, seed=1)`), DP noise variance included. Best: lengthscale {cb[LS]:g}, "
        f"noise variance {cb[NV]:g}, kernel variance {cb[KV]:g}. Delta_u = {sensitivity:.4g} "
        f"({sensitivity / (8 * model.data_sensitivity ** 2):.3g} x 8d^2). P(best) is the probability of that "
        "configuration (0 if the threshold dropped it), P(best kept) that of the best configuration the threshold "
        "kept; the expected RMSE is sum of P x RMSE; best and uniform are over all configurations of the grid.",
        "",
        quality,
        "",
        f"Evaluation RMSEs took {t_eval:.0f} s (not part of the selection).",
    ])
    print(body)
    path = _common.write_fragment("selection_synthetic", f"DP hyperparameter selection at n = {args.n:,} (synthetic "
                                  "2-D; exponential mechanism vs permute-and-flip)", body, machine=machine,
                                  started=started, quick=quick, out_dir=args.out_dir)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
