"""Benchmark: DP hyperparameter selection at a realistic size (issue 26, items 4 and 7).

Protocol: ``make_synthetic_2d(n, seed=0)`` (default n = 3,000; public bounds (0, 100), d = 100)
holds the private outputs of a ``DPGPR`` (EQ kernel); ``select_hyperparameters`` runs over the
papers' grid shape, 5 lengthscales x 4 noise variances x 4 kernel variances = 80 configurations
(values for this data: inputs on [0, 100]^2, outputs of std about 13 with noise std 5), none
dropped, 5-fold CV (split seed 0), the utility including the noise of a (1, 0.01)-DP release of each
fold's predictions. The wall time is that of the selection with the library's defaults (absolute
utility, generalised exponential mechanism, release noise modelled by its lower bound):
``cross_validate`` (fold matrices) plus ``select_hyperparameters(cross_validation=cv)`` (release
noise of every fold, utilities, the draw), the same work as one ``select_hyperparameters`` call.

Evaluation: a held-out set ``make_synthetic_2d(n_eval, seed=1)`` (the same function, fresh inputs
and noise). Each configuration's evaluation RMSE is sqrt(mean over the held-out points of
(prediction - y)^2 + DP noise variance) of a (1, 0.01)-DP cloaking release fitted on the n points
(closed form, no noise drawn, the release's own optimised noise). Each scheme's selection
probabilities are those ``select_hyperparameters`` itself computes (``diagnostics=True``: the data
owner's private diagnostics) at selection epsilon 0.5, 1 and 2; expected RMSE = sum of
P(config) x RMSE(config), against the best configuration, the uniform choice and a non-private
selection (the best utility, read without DP).

A second, smaller run (``--compare-n``, default 1,000) compares the two models of the release's
noise in the utility, its lower bound (the default) and the release's optimised noise: selection
time and expected RMSE at selection epsilon 1.

Usage::

    python benchmarks/selection_synthetic.py              # n = 3,000 and the n = 1,000 comparison
    python benchmarks/selection_synthetic.py --n 300 --compare-n 200   # quick check (results/quick/)
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
from dpgp_gpflow.selection import cross_validate, release_noise_std, select_hyperparameters  # noqa: E402

gpflow.config.set_default_float(np.float64)
warnings.filterwarnings("ignore", category=dpgp_gpflow.ClippingWarning)

N_DEFAULT, N_COMPARE, N_EVAL, N_FOLDS = 3000, 1000, 300, 5
EPS_REL, DELTA_REL = 1.0, 0.01
EPS_SEL = (0.5, 1.0, 2.0)
TARGET_S = 600.0
LENGTHSCALES = (2.5, 5.0, 10.0, 20.0, 40.0)
NOISE_VARIANCES = (6.25, 25.0, 100.0, 400.0)
KERNEL_VARIANCES = (25.0, 100.0, 400.0, 1600.0)
LS, NV, KV = ".kernel.lengthscales", ".likelihood.variance", ".kernel.variance"
GRID = [{LS: ls, NV: nv, KV: kv} for ls, nv, kv in itertools.product(LENGTHSCALES, NOISE_VARIANCES, KERNEL_VARIANCES)]
#: (name, select_hyperparameters options); the first is the library's default.
SCHEMES = [
    ("absolute utility, generalised exponential (default)", {}),
    ("absolute utility, exponential mechanism", {"mechanism": "exponential"}),
    ("absolute utility, permute-and-flip", {"mechanism": "permute_and_flip"}),
    ("squared utility, exponential mechanism (the earlier default)", {"utility": "squared", "mechanism": "exponential"}),
]


def cpu_seconds() -> float:
    """User + system CPU time of this process (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def setup(n):
    X, Y, bounds = make_synthetic_2d(n, seed=0)
    model = DPGPR((X, Y), gpflow.kernels.SquaredExponential(), y_bounds=bounds, noise_variance=1.0)
    model.declare_hyperparameters_public()  # GPflow's defaults; every selected parameter is in the grid
    return X, Y, bounds, model


def evaluation_rmse(X, Y, bounds, d, output_bound):
    """Per configuration: RMSE on the held-out set of its (1, 0.01)-DP release fitted on (X, Y), DP
    noise variance included (the release's own optimised noise). Shared per (lengthscale, ratio)."""
    Xe, Ye, _ = make_synthetic_2d(N_EVAL, seed=1)
    y_ev = np.clip(Ye[:, 0], *bounds)
    Xt, Xet = tf.constant(X), tf.constant(Xe)
    m0 = 0.5 * sum(bounds)
    ys = np.clip(Y[:, 0], *bounds)
    cache, rmse = {}, np.empty(len(GRID))
    for i, config in enumerate(GRID):
        key = (config[LS], config[NV] / config[KV])
        if key not in cache:
            kernel = gpflow.kernels.SquaredExponential(lengthscales=config[LS], variance=config[KV])
            C = gpr_cloaking_matrix(kernel, Xt, tf.constant(config[NV], tf.float64), Xet).numpy()
            sigma = release_noise_std(C, data_sensitivity=d, output_bound=output_bound, epsilon=EPS_REL,
                                      delta=DELTA_REL)
            cache[key] = np.sqrt(np.mean((m0 + C @ (ys - m0) - y_ev) ** 2 + sigma**2))
        rmse[i] = cache[key]
    return rmse


def timed_selection(model, eps, **options):
    """The whole selection, timed: cross_validate, then select_hyperparameters on it (no accountant)."""
    t0, c0 = time.perf_counter(), cpu_seconds()
    cv = cross_validate(model, GRID, folds=N_FOLDS)
    t_folds, c_folds = time.perf_counter() - t0, cpu_seconds() - c0
    t1, c1 = time.perf_counter(), cpu_seconds()
    selection, diag = select_hyperparameters(model, GRID, epsilon=eps, epsilon_release=EPS_REL, delta_release=DELTA_REL,
                                             cross_validation=cv, diagnostics=True, **options)
    return cv, selection, diag, (t_folds, time.perf_counter() - t1, c_folds, cpu_seconds() - c1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=N_DEFAULT, help=f"training points (default {N_DEFAULT}; "
                        "any other value is a quick check written to results/quick/)")
    parser.add_argument("--compare-n", type=int, default=N_COMPARE,
                        help=f"training points of the bound-vs-optimised comparison (default {N_COMPARE}; 0: skip)")
    parser.add_argument("--out-dir", type=Path, default=None, help="where to write the fragment")
    args = parser.parse_args(argv)
    quick = args.n != N_DEFAULT or args.compare_n != N_COMPARE

    started = _common.utc_now()
    machine = _common.machine_info()
    X, Y, bounds, model = setup(args.n)
    d = model.data_sensitivity
    print(f"n = {args.n}, {len(GRID)} configurations, {N_FOLDS} folds", flush=True)

    # --- the selection with the defaults, timed
    cv, selection, diag, (t_folds, t_select, c_folds, c_select) = timed_selection(model, EPS_SEL[1])
    total = t_folds + t_select
    print(f"fold matrices {t_folds:.0f} s, noise + utilities + draw {t_select:.0f} s, total {total:.0f} s", flush=True)
    timing = _common.markdown_table(
        ["n", "configurations (candidates)", "distinct fold maps", "folds", "fold matrices (s)",
         "release noise + utilities + draw (s)", "total selection (s)", "target (s)", "CPU (s): folds / rest"],
        [[args.n, f"{len(GRID)} ({int(selection.kept.sum())})", len(set(cv.owners)), N_FOLDS, f"{t_folds:.0f}",
          f"{t_select:.0f}", f"{total:.0f}", f"{TARGET_S:.0f}", f"{c_folds:.0f} / {c_select:.0f}"]],
        align="rrrrrrrrr")

    t2 = time.perf_counter()
    rmse = evaluation_rmse(X, Y, bounds, d, model.output_bound)
    t_eval = time.perf_counter() - t2
    print(f"evaluation RMSEs: {t_eval:.0f} s", flush=True)
    best = int(np.argmin(rmse))
    rows = []
    for name, options in SCHEMES:
        cells = []
        for eps in EPS_SEL:
            _, dg = select_hyperparameters(model, GRID, epsilon=eps, epsilon_release=EPS_REL, delta_release=DELTA_REL,
                                           cross_validation=cv, diagnostics=True, **options)
            cells.append(f"{dg.probabilities @ rmse:.3f} ({dg.probabilities[best]:.3f})")
        rows.append([name] + cells)
    for name, utility in (("non-private selection, absolute utility", "absolute"),
                          ("non-private selection, squared utility", "squared")):
        u = cv.utilities(EPS_REL, DELTA_REL, utility=utility)  # PRIVATE: read without DP, for comparison
        rows.append([name] + [f"{rmse[int(np.argmax(u))]:.3f}"] * len(EPS_SEL))
    rows.append(["best configuration"] + [f"{rmse[best]:.3f} (1)"] * len(EPS_SEL))
    rows.append(["uniform choice"] + [f"{rmse.mean():.3f} ({1 / len(GRID):.4f})"] * len(EPS_SEL))
    quality = _common.markdown_table(["scheme"] + [f"selection eps = {e:g}" for e in EPS_SEL], rows,
                                     align="l" + "r" * len(EPS_SEL))

    # --- the two models of the release's noise, at a smaller n
    compare = ""
    if args.compare_n:
        Xc, Yc, bc, mc = setup(args.compare_n)
        rmse_c = evaluation_rmse(Xc, Yc, bc, mc.data_sensitivity, mc.output_bound)
        crow = []
        for noise in ("bound", "optimised"):
            _, sel_c, dg, (tf_, ts_, _, _) = timed_selection(mc, EPS_SEL[1], release_noise=noise)
            crow.append([f"`release_noise=\"{noise}\"`", f"{tf_ + ts_:.0f}", f"{dg.probabilities @ rmse_c:.3f}",
                         f"{dg.probabilities[int(np.argmin(rmse_c))]:.3f}"])
            print(f"compare n = {args.compare_n}, {noise}: {tf_ + ts_:.0f} s", flush=True)
        crow.append(["best configuration / uniform choice", "–", f"{rmse_c.min():.3f} / {rmse_c.mean():.3f}", "–"])
        compare = "\n".join([
            f"The release's noise in the utility, modelled by its lower bound (default) or by the release's own "
            f"optimised noise, on `make_synthetic_2d({args.compare_n}, seed=0)` with the same grid, folds and "
            f"evaluation, selection eps = {EPS_SEL[1]:g} (default utility and mechanism):",
            "",
            _common.markdown_table(["noise model", "selection (s)", "expected RMSE", "P(best)"], crow, align="lrrr"),
            "",
        ])

    cb = GRID[best]
    body = "\n".join([
        f"Synthetic 2-D (`make_synthetic_2d({args.n}, seed=0)`, bounds {bounds}, d = {d:g}): `select_hyperparameters` "
        f"on a `DPGPR` (EQ), grid lengthscale {LENGTHSCALES} x noise variance {NOISE_VARIANCES} x kernel variance "
        f"{KERNEL_VARIANCES} = {len(GRID)} configurations, none dropped, {N_FOLDS}-fold CV, the utility including "
        f"the noise of a ({EPS_REL:g}, {DELTA_REL:g})-DP release of each fold's predictions; library defaults "
        "(absolute utility, generalised exponential mechanism, the release's noise modelled by its lower bound). "
        "Configurations whose fold maps are the same up to rounding (a GP's kernel and noise variances scaled "
        "together) share them (`CrossValidation.owners`). Wall clock on the machine below (see its load "
        "average; the CPU column is this process's user + system time).",
        "",
        timing,
        "",
        f"Selection quality (data owner's private diagnostics): each cell is the expected RMSE on {N_EVAL} held-out "
        f"points (`make_synthetic_2d({N_EVAL}, seed=1)`) of the chosen configuration's ({EPS_REL:g}, {DELTA_REL:g})-DP "
        "release fitted on the n points (DP noise variance included), and in brackets the probability of the best "
        f"configuration (lengthscale {cb[LS]:g}, noise variance {cb[NV]:g}, kernel variance {cb[KV]:g}); the "
        "probabilities are the ones `select_hyperparameters` computes. All rows model the release's noise by its "
        "lower bound.",
        "",
        quality,
        "",
        compare,
        f"Evaluation RMSEs took {t_eval:.0f} s (not part of the selection).",
    ])
    print(body)
    path = _common.write_fragment("selection_synthetic", f"DP hyperparameter selection at n = {args.n:,} (synthetic "
                                  "2-D, 80 configurations, none dropped)", body, machine=machine, started=started,
                                  quick=quick, out_dir=args.out_dir)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
