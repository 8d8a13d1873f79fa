"""Benchmark: DP Laplace GP classification (JMLR 2019 sections 6.4-6.6: HMEQ, stripes, MNIST).

Three experiments, each at (epsilon, delta) = (1, 0.01), labels in {-1, +1} (d = 2):

* **HMEQ** (JMLR Figure 6): BAD from DELINQ, 200 rows sampled by the public balancing rule of
  :func:`dpgp_gpflow.datasets.load_hmeq`, EQ kernel (variance 1, lengthscale 4); quantiles of the
  DP predicted P(BAD) at DELINQ 0..14 over 100 releases, against the non-DP Laplace prediction.
* **Stripes** (JMLR Figure 7 / section 6.5): 200 points of :func:`make_stripes`, EQ lengthscale 3.5,
  the 10 x 10 test grid (50 per class); accuracy without DP (published 81%), DP with one Newton
  step (published 69%) and with two steps at (eps/2, delta/2) each (published 51%), 25 releases.
* **MNIST** (JMLR Figure 8 / section 6.6): digits 0-4 vs 5-9, 15 x 15, 256 train / 100 test,
  pixels on the 0..255 scale (the paper's lengthscales are on that scale), EQ kernel with variance
  1; the sparse (SoR) classifier with k-means inducing inputs: accuracy against the number of
  inducing inputs (16 log-spaced values 4..200) and lengthscale, DP (25 releases) and no DP.
  Published: DP about 68% at lengthscale 380 with 16 inducing inputs (chance 52%).

Settings: ``mse`` + analytic calibration (this package's defaults) everywhere; the papers'
``entropy`` + classical calibration where it is cheap (HMEQ, stripes, MNIST at lengthscale 380).

Repeated releases. The DP noise covariance of a one-step release depends on public quantities only
(the cloaking matrix), so releases 2..R of one configuration differ from release 1 only by the
noise draw. To avoid R identical optimisations, release 1 is made with ``model.release(seed=s0)``
and release k re-draws its noise: ``mean_k = mean_1 + F (xi_k - xi_1)`` with ``xi`` from
:func:`dpgp_gpflow.sampling.standard_normal` (the package's noise source) at seed ``s0 + k``. This is
exactly what ``model.release(seed=s0 + k)`` computes; the script checks it against a real release
once per experiment (the "re-draw check" lines). Two-step releases are all made for real (the
second step's cloaking matrix depends on the first step's noise). Seeds make the numbers
reproducible; a real release would use ``seed=None``.

Usage::

    python benchmarks/classification.py            # full: HMEQ 2 x 100, stripes 4 x 25, MNIST 80 x 25 releases
    python benchmarks/classification.py --quick    # smoke test (writes results/quick/)
    python benchmarks/classification.py --only stripes,mnist
"""

from __future__ import annotations

import argparse
import dataclasses
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
from dpgp_gpflow.datasets import load_hmeq, load_mnist_binary, make_stripes, stripes_test_grid  # noqa: E402
from dpgp_gpflow.models.dp_laplace import (  # noqa: E402
    DPLaplaceGPC,
    DPSparseLaplaceGPC,
    PrivateLaplaceClassifier,
    PrivateSparseClassifier,
)
from dpgp_gpflow.models import kmeans_inducing_inputs  # noqa: E402
from dpgp_gpflow.sampling import standard_normal  # noqa: E402

warnings.filterwarnings("ignore", category=dpgp_gpflow.ReproducibleNoiseWarning)
gpflow.config.set_default_float(np.float64)

EPSILON, DELTA = 1.0, 0.01
SETTINGS = {"mse": ("mse", "analytic"), "entropy": ("entropy", "classical")}
QUANTILES = (5, 25, 50, 75, 95)


# ------------------------------------------------------------------------------------------
# repeated releases


def _xi(r: int, seed: int) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return standard_normal(r, seed)[0]


def _rebuild(model, pc, rel):
    """The classifier ``model.release`` would return for the release ``rel`` (one step, no reference)."""
    if isinstance(model, DPSparseLaplaceGPC):
        return PrivateSparseClassifier(rel, model.public_readout())
    return PrivateLaplaceClassifier([rel], pc.readout)


def one_step_releases(model, n: int, seed0: int, objective: str, calibration: str):
    """``n`` one-step DP classifiers at seeds ``seed0 .. seed0 + n - 1`` (one optimisation, see the docstring)."""
    pc = model.release(epsilon=EPSILON, delta=DELTA, objective=objective, calibration=calibration, seed=seed0)
    rel = pc.releases[0]
    F, r = rel.noise_factor, rel.rank
    xi0 = _xi(r, seed0)
    out = [pc]
    for k in range(1, n):
        mean = rel.mean + (F @ (_xi(r, seed0 + k) - xi0))[:, None]  # [n, 1], the release's shape
        out.append(_rebuild(model, pc, dataclasses.replace(rel, mean=mean)))
    return out


def redraw_check(model, objective: str, calibration: str, seed0: int = 1000) -> float:
    """Max |difference| between the re-drawn release ``seed0 + 1`` and a real one (should be ~1e-15)."""
    fast = one_step_releases(model, 2, seed0, objective, calibration)[1]
    # The same call as release 1 (automatic rank: the same screening and warm-started solve).
    real = model.release(epsilon=EPSILON, delta=DELTA, objective=objective, calibration=calibration,
                         seed=seed0 + 1)
    return float(np.max(np.abs(fast.releases[0].mean - real.releases[0].mean)))


def accuracy(pc, Xt, Yt) -> float:
    return float(np.mean(pc.predict_class(Xt)[:, 0] == Yt[:, 0]))


def nondp_accuracy(model, Xt, Yt) -> float:
    p, _ = model.predict_y(Xt)
    return float(np.mean(np.where(p.numpy()[:, 0] >= 0.5, 1.0, -1.0) == Yt[:, 0]))


def pm(values) -> str:
    values = np.asarray(values, dtype=float)
    return f"{100 * values.mean():.1f} ± {100 * values.std(ddof=1 if values.size > 1 else 0):.1f}"


# ------------------------------------------------------------------------------------------
# experiments


def run_hmeq(n_releases: int, settings, log) -> str:
    X, Y = load_hmeq(n=200, seed=0)
    model = DPLaplaceGPC((X, Y), gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=4.0), hyperparameters_public=True)
    Xq = np.arange(15, dtype=float)[:, None]
    p_nondp = model.predict_y(Xq)[0].numpy()[:, 0]
    counts = [(int(np.sum(X[:, 0] == v)), float(np.mean(Y[X[:, 0] == v, 0] > 0)) if np.any(X[:, 0] == v) else None)
              for v in Xq[:, 0]]
    parts = [f"HMEQ: {X.shape[0]} rows (DELINQ 0..{int(X.max())}), EQ lengthscale 4, variance 1; "
             f"{n_releases} DP releases per setting at ({EPSILON}, {DELTA}); DP P(BAD) quantiles "
             f"{'/'.join(map(str, QUANTILES))}%."]
    for name in settings:
        objective, calibration = SETTINGS[name]
        t0 = time.perf_counter()
        pcs = one_step_releases(model, n_releases, 0, objective, calibration)
        P = np.stack([pc.predict_y(Xq)[0][:, 0] for pc in pcs])  # [R, 15]
        q = np.percentile(P, QUANTILES, axis=0)  # [5, 15]
        check = redraw_check(model, objective, calibration)
        rel = pcs[0].releases[0]
        log(f"hmeq {name}: {time.perf_counter() - t0:.1f} s, rank {rel.rank}, re-draw check {check:.1e}")
        rows = []
        for j, v in enumerate(Xq[:, 0]):
            n_v, rate = counts[j]
            rows.append([int(v), n_v, _common.fmt(rate, ".2f"), f"{p_nondp[j]:.2f}"] + [f"{q[i, j]:.2f}" for i in range(len(QUANTILES))])
        table = _common.markdown_table(
            ["DELINQ", "n", "BAD rate", "non-DP P"] + [f"DP {p}%" for p in QUANTILES], rows)
        parts.append(f"**{objective} + {calibration}** (rank {rel.rank}, noise std at the training latents "
                     f"{rel.noise_std.min():.2f}..{rel.noise_std.max():.2f}; re-draw check {check:.0e}):\n\n{table}")
    return "\n\n".join(parts)


def run_stripes(n_releases: int, settings, two_step_settings, log) -> str:
    X, Y = make_stripes(200, seed=0)
    Xt, Yt = stripes_test_grid()
    model = DPLaplaceGPC((X, Y), gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=3.5), hyperparameters_public=True)
    rows = [["no DP (Newton to convergence)", "–", f"{100 * nondp_accuracy(model, Xt, Yt):.1f}", "–", "81"]]
    notes = []
    for name in settings:
        objective, calibration = SETTINGS[name]
        t0 = time.perf_counter()
        pcs = one_step_releases(model, n_releases, 0, objective, calibration)
        accs = [accuracy(pc, Xt, Yt) for pc in pcs]
        check = redraw_check(model, objective, calibration)
        log(f"stripes 1 step {name}: {time.perf_counter() - t0:.1f} s, re-draw check {check:.1e}")
        rel = pcs[0].releases[0]
        notes.append(f"1 step {objective}: rank {rel.rank}, mean noise std {rel.noise_std.mean():.2f}, re-draw check {check:.0e}")
        rows.append([f"DP, 1 Newton step, {len(accs)} releases", f"{objective} + {calibration}", pm(accs),
                     f"{100 * min(accs):.0f}..{100 * max(accs):.0f}", "69"])
    for name in two_step_settings:
        objective, calibration = SETTINGS[name]
        t0 = time.perf_counter()
        accs = []
        for k in range(n_releases):
            pc = model.release(epsilon=EPSILON, delta=DELTA, steps=2, objective=objective, calibration=calibration, seed=k)
            accs.append(accuracy(pc, Xt, Yt))
        log(f"stripes 2 steps {name}: {time.perf_counter() - t0:.1f} s")
        rows.append([f"DP, 2 Newton steps (eps/2, delta/2 each), {len(accs)} releases", f"{objective} + {calibration}",
                     pm(accs), f"{100 * min(accs):.0f}..{100 * max(accs):.0f}", "51"])
    table = _common.markdown_table(["classifier", "noise", "accuracy % (mean ± sd)", "range %", "published %"], rows,
                                   align="llrrr")
    return (f"Stripes: 200 training points, EQ lengthscale 3.5, variance 1, 10 x 10 test grid, ({EPSILON}, {DELTA})-DP.\n\n"
            f"{table}\n\n" + "; ".join(notes) + ".")


def run_mnist(n_releases: int, ms, lengthscales, entropy_lengthscales, log):
    X, Y, Xt, Yt = load_mnist_binary(n_train=256, n_test=100, size=15, seed=0, pixel_max=255.0)
    chance = max(np.mean(Yt > 0), np.mean(Yt < 0))
    dp = {}  # (setting, ls, m) -> accuracies
    nondp = {}
    timings = []
    check = None
    for m in ms:
        Z = kmeans_inducing_inputs(X, int(m))
        for ls in lengthscales:
            t0 = time.perf_counter()
            model = DPSparseLaplaceGPC((X, Y), gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=float(ls)),
                                       Z, hyperparameters_public=True)
            nondp[(ls, m)] = nondp_accuracy(model, Xt, Yt)
            names = ["mse"] + (["entropy"] if ls in entropy_lengthscales else [])
            for name in names:
                objective, calibration = SETTINGS[name]
                pcs = one_step_releases(model, n_releases, 0, objective, calibration)
                dp[(name, ls, m)] = [accuracy(pc, Xt, Yt) for pc in pcs]
            if check is None:
                check = redraw_check(model, "mse", "analytic")
            timings.append(time.perf_counter() - t0)
            log(f"mnist m={m} ls={ls}: {timings[-1]:.1f} s; no DP {nondp[(ls, m)]:.2f}, "
                + ", ".join(f"{n} {np.mean(dp[(n, ls, m)]):.2f}" for n in names))
    parts = [f"MNIST 0-4 vs 5-9: 256 train / 100 test (chance {100 * chance:.0f}%), 15 x 15 pixels on 0..255, "
             f"EQ kernel variance 1, SoR with k-means inducing inputs; DP: {n_releases} releases per cell at "
             f"({EPSILON}, {DELTA}), accuracy % mean ± sd; re-draw check {check:.0e}."]
    headers = ["inducing"] + [f"l = {ls:g}" for ls in lengthscales]
    rows = [[m] + [pm(dp[("mse", ls, m)]) for ls in lengthscales] for m in ms]
    parts.append("**DP, mse + analytic:**\n\n" + _common.markdown_table(headers, rows))
    if entropy_lengthscales:
        e_ls = [ls for ls in lengthscales if ls in entropy_lengthscales]
        rows = [[m] + [pm(dp[("entropy", ls, m)]) for ls in e_ls] for m in ms]
        parts.append("**DP, entropy + classical (the papers' settings):**\n\n"
                     + _common.markdown_table(["inducing"] + [f"l = {ls:g}" for ls in e_ls], rows))
    rows = [[m] + [f"{100 * nondp[(ls, m)]:.0f}" for ls in lengthscales] for m in ms]
    parts.append("**No DP (SoR Laplace, Newton to convergence):**\n\n" + _common.markdown_table(headers, rows))
    if 380 in lengthscales and 16 in ms:
        parts.append(f"At l = 380 with 16 inducing inputs: DP mse {pm(dp[('mse', 380, 16)])}%"
                     + (f", DP entropy + classical {pm(dp[('entropy', 380, 16)])}%" if 380 in entropy_lengthscales else "")
                     + "; published about 68%.")
    return "\n\n".join(parts), float(np.mean(timings)), len(timings)


# ------------------------------------------------------------------------------------------


FULL_MS = [int(v) for v in np.unique(np.round(np.geomspace(4, 200, 16)).astype(int))]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke test: fewer releases and configurations")
    parser.add_argument("--only", default="hmeq,stripes,mnist", help="comma-separated subset of hmeq,stripes,mnist")
    parser.add_argument("--out-dir", type=Path, default=None, help="where to write the fragment")
    args = parser.parse_args(argv)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = only - {"hmeq", "stripes", "mnist"}
    if unknown:
        parser.error(f"unknown experiments: {sorted(unknown)}")

    started = _common.utc_now()
    machine = _common.machine_info()
    print(_common.describe_machine(machine), flush=True)

    def log(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    if args.quick:
        cfg = dict(hmeq=20, stripes=5, two_steps=["mse"], mnist=5, ms=[4, 16, 57, 200], ls=[380.0, 760.0], ent_ls=[380.0])
    else:
        cfg = dict(hmeq=100, stripes=25, two_steps=["mse", "entropy"], mnist=25, ms=FULL_MS,
                   ls=[95.0, 190.0, 380.0, 760.0], ent_ls=[380.0])
    sections, times = [], {}
    if "hmeq" in only:
        t0 = time.perf_counter()
        sections.append(("HMEQ (JMLR Figure 6)", run_hmeq(cfg["hmeq"], ["mse", "entropy"], log)))
        times["hmeq"] = time.perf_counter() - t0
    if "stripes" in only:
        t0 = time.perf_counter()
        sections.append(("Stripes (JMLR Figure 7)", run_stripes(cfg["stripes"], ["mse", "entropy"], cfg["two_steps"], log)))
        times["stripes"] = time.perf_counter() - t0
    if "mnist" in only:
        t0 = time.perf_counter()
        body, per_config, n_configs = run_mnist(cfg["mnist"], cfg["ms"], cfg["ls"], cfg["ent_ls"], log)
        sections.append(("MNIST, sparse (JMLR Figure 8)", body))
        times["mnist"] = time.perf_counter() - t0
        times["mnist per configuration"] = per_config

    timing = ", ".join(f"{k} {v:.0f} s" for k, v in times.items())
    body = "\n\n".join(f"### {title}\n\n{text}" for title, text in sections) + f"\n\nWall time: {timing}."
    print("\n" + body, flush=True)
    path = _common.write_fragment("classification", "DP Laplace GP classification (JMLR section 6.4-6.6)", body,
                                  machine=machine, started=started, quick=args.quick, out_dir=args.out_dir)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
