"""Benchmark: whole rows private at scale (issue 36's targets): one release of 10^6 rows x 2-D.

Synthetic 2-D data (``make_synthetic_2d(n, seed=0)``: inputs in [0, 100]^2, public bounds (0, 100)), inputs
and outputs both private (public box [0, 100]^2); 49 inducing inputs on a 7 x 7 grid over the box
(``whole_rows.inducing_grid``, spacing 16.7); EQ kernel, lengthscale 10 and 15 (one row each), kernel variance
100, noise variance 25 (public);
(1, 0.01)-DP; ``DPSGPR(..., private_inputs=True).release_function`` (one pass over the rows in chunks of
20,000, exact sampler). Wall time of each release (targets: 10^6 rows under 30 s on this 2-core machine);
RMSE against the noise-free surface at 2,000 uniform held-out points, the median of the releases against the
non-private sparse GP with the same inducing inputs and hyperparameters (the SGPR mean from the exact
statistics: within 5% at 10^6 rows). The case runs in a fresh process (its peak RSS is its own).

Usage::

    python benchmarks/whole_rows_scale.py                   # n = 10^6, 5 releases per lengthscale
    python benchmarks/whole_rows_scale.py --n 10000000 --releases 2 --lengthscales 15   # 10^7 rows (< 5 min)
    python benchmarks/whole_rows_scale.py --quick           # n = 20,000, 2 releases (smoke test)
    python benchmarks/whole_rows_scale.py --dask --releases 1 --lengthscales 15   # + one release on a Dask LocalCluster
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

LENGTHSCALES, KERNEL_VARIANCE, NOISE_VARIANCE = (10.0, 15.0), 100.0, 25.0
BOX, GRID = [(0.0, 100.0), (0.0, 100.0)], 7
EPSILON, DELTA = 1.0, 0.01
TARGET_S = {10**6: 30.0, 10**7: 300.0}
TARGET_RATIO = 1.05


def dask_case(model, X, Y, rmse, Xte, workers: int = 2, seed: int = 7) -> dict:
    """One release of ``model``'s rows in memory and one through a Dask ``LocalCluster`` (``workers`` single-threaded
    workers in this process, chunks of 20,000 rows), both with the explicit ``seed``: the same noise, so the two
    released statistics differ only by the rounding of the sums (their order differs)."""
    import warnings

    import dask.array as da
    import distributed
    import numpy as np

    import dpgp_gpflow as dp
    from dpgp_gpflow.streaming.dask_chunks import DaskChunks

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        t0 = time.perf_counter()
        local = model.release_function(epsilon=EPSILON, delta=DELTA, seed=seed)
        local_s = time.perf_counter() - t0
        with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=False,
                                      dashboard_address=None) as cluster, distributed.Client(cluster):
            source = DaskChunks(da.from_array(X, chunks=(20_000, X.shape[1])), da.from_array(Y, chunks=(20_000, 1)))
            t0 = time.perf_counter()
            on_dask = model.release_function(epsilon=EPSILON, delta=DELTA, seed=seed, source=source)
            dask_s = time.perf_counter() - t0
    std = local.statistics_noise_std
    gap = max(float(np.max(np.abs(on_dask.statistics[k] - local.statistics[k]) / std[k])) for k in ("S", "b", "q"))
    mean_gap = float(np.max(np.abs(on_dask.predict_f(Xte)[0] - local.predict_f(Xte)[0])))
    return {"workers": workers, "local_s": local_s, "dask_s": dask_s, "gap_in_noise_std": gap, "mean_gap": mean_gap,
            "rmse_local": rmse(local.predict_f(Xte)[0]), "rmse_dask": rmse(on_dask.predict_f(Xte)[0])}


def worker(n: int, releases: int, lengthscales, dask: bool = False) -> None:
    _common.quiet_tensorflow()
    import warnings

    import gpflow
    import numpy as np

    import dpgp_gpflow as dp
    from dpgp_gpflow import whole_rows
    from dpgp_gpflow.datasets import _synthetic_f, make_synthetic_2d
    from dpgp_gpflow.streaming import LocalChunks

    warnings.filterwarnings("ignore", category=dp.ClippingWarning)
    t0 = time.perf_counter()
    X, Y, bounds = make_synthetic_2d(n, seed=0)
    data_s = time.perf_counter() - t0
    Z = whole_rows.inducing_grid(BOX, GRID)
    Xte = np.random.default_rng(1).uniform(0.0, 100.0, (2000, 2))
    truth = _synthetic_f(Xte)[:, None]

    def rmse(mean):
        return float(np.sqrt(np.mean((np.asarray(mean) - truth) ** 2)))

    cases = []
    for lengthscale in lengthscales:
        kernel = gpflow.kernels.SquaredExponential(lengthscales=lengthscale, variance=KERNEL_VARIANCE)
        t0 = time.perf_counter()
        model = dp.models.DPSGPR((X, Y), kernel, Z, noise_variance=NOISE_VARIANCE, y_bounds=bounds, x_bounds=BOX,
                                 private_inputs=True, hyperparameters_public=True)
        model_s = time.perf_counter() - t0
        times, errors = [], []
        for _ in range(releases):
            t0 = time.perf_counter()
            released = model.release_function(epsilon=EPSILON, delta=DELTA)
            times.append(time.perf_counter() - t0)
            errors.append(rmse(released.predict_f(Xte)[0]))
        # the non-private sparse GP (SGPR's mean, same Z and hyperparameters) from the exact statistics
        features = whole_rows.FeatureMap(kernel, Z)
        rows = whole_rows.RowStatistics(features, BOX, bounds)
        exact = whole_rows.sufficient_statistics(LocalChunks(np.asarray(X), np.asarray(Y)), rows)
        ratio = NOISE_VARIANCE / KERNEL_VARIANCE
        u = np.linalg.solve(exact.S + ratio * np.eye(Z.shape[0]), exact.b)
        nonprivate = rmse(np.clip(features(Xte).numpy() @ u + rows.midpoint, *bounds)[:, None])
        cases.append({"lengthscale": lengthscale, "model_s": model_s, "release_s": times, "rmse_private": errors,
                      "rmse_nonprivate": nonprivate})
        if dask:
            cases[-1]["dask"] = dask_case(model, np.asarray(X), np.asarray(Y), rmse, Xte)
        del model
    print(json.dumps({"n": n, "m": int(Z.shape[0]), "data_s": data_s, "cases": cases,
                      "cores": len(os.sched_getaffinity(0))}))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=None, help="rows (default 10^6; quick 20,000)")
    parser.add_argument("--releases", type=int, default=None, help="releases per lengthscale (default 5; quick 2)")
    parser.add_argument("--lengthscales", type=float, nargs="+", default=list(LENGTHSCALES),
                        help="EQ lengthscales, one row each (default 10 15)")
    parser.add_argument("--quick", action="store_true", help="smoke test (writes results/quick/)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="wall-clock limit, s (default 1800)")
    parser.add_argument("--out-dir", type=Path, default=None, help="where to write the fragment")
    parser.add_argument("--dask", action="store_true",
                        help="also one release through a Dask LocalCluster (2 workers) against one in memory, same "
                             "seed (fragment whole_rows_scale_dask[_n])")
    parser.add_argument("--worker", nargs=2, type=int, metavar=("N", "RELEASES"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(*args.worker, args.lengthscales, args.dask)
        return 0
    n = args.n or (20_000 if args.quick else 10**6)
    releases = args.releases or (2 if args.quick else 5)
    started = _common.utc_now()
    machine = _common.machine_info(gpus=[])
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    print(f"whole-row release: n = {n}, {releases} releases (timeout {args.timeout:g} s) ...", flush=True)
    res = _common.run_isolated([sys.executable, str(Path(__file__).resolve()), "--worker", str(n), str(releases),
                                "--lengthscales", *(str(v) for v in args.lengthscales), *(["--dask"] if args.dask else [])],
                               timeout=args.timeout, env=env)
    out = None if res["timed_out"] else _common.last_json_line(res["stdout"])
    if out is None:
        why = f"timeout (> {args.timeout:g} s)" if res["timed_out"] else f"failed (exit {res['returncode']})"
        print(res["stderr"][-3000:])
        body = f"n = {n}: **{why}**."
    else:
        table_rows, lines = [], []
        limit = TARGET_S.get(n)
        for case in out["cases"]:
            median_s = statistics.median(case["release_s"])
            private = statistics.median(case["rmse_private"])
            ratio = private / case["rmse_nonprivate"]
            table_rows.append([f"{n:,}", out["m"], f"{case['lengthscale']:g}", f"{median_s:.1f}",
                               ", ".join(f"{t:.1f}" for t in case["release_s"]), f"{case['rmse_nonprivate']:.3f}",
                               f"{private:.3f}", f"{ratio:.3f}"])
            if limit is not None:
                lines.append(f"Target (lengthscale {case['lengthscale']:g}: {n:,} rows, one release under {limit:g} s): "
                             f"**{'met' if median_s <= limit else 'NOT met'}** ({median_s:.1f} s).")
            if n == 10**6:
                lines.append(f"Target (lengthscale {case['lengthscale']:g}: private within 5% of the non-private sparse "
                             f"GP's RMSE): **{'met' if ratio <= TARGET_RATIO else 'NOT met'}** (ratio {ratio:.3f}).")
        table = _common.markdown_table(
            ["n", "M", "lengthscale", "release (s), median", "release (s), each", "RMSE non-private SGPR",
             "RMSE private, median", "private / non-private"], table_rows)
        for case in out["cases"]:
            if "dask" in case:
                c = case["dask"]
                equal = c["gap_in_noise_std"] <= 1e-6
                lines.append(
                    f"Dask LocalCluster (lengthscale {case['lengthscale']:g}; {c['workers']} single-threaded workers in "
                    f"this process, chunks of 20,000 rows; the same explicit seed as one release in memory): one release "
                    f"{c['dask_s']:.1f} s (in memory {c['local_s']:.1f} s); released statistics differ by at most "
                    f"{c['gap_in_noise_std']:.2g} of their noise std (the sums' rounding), predicted means by at most "
                    f"{c['mean_gap']:.2g}; RMSE {c['rmse_dask']:.4f} on Dask vs {c['rmse_local']:.4f} in memory: "
                    f"**{'equal' if equal else 'NOT equal'}** to the local run (to rounding, <= 1e-6 noise std).")
        lines.append(f"Peak RSS of the process: {res['maxrss_bytes'] / 2**30:.2f} GiB; data generation "
                     f"{out['data_s']:.1f} s.")
        body = "\n\n".join([table, *lines])
    intro = ("Synthetic 2-D data (`make_synthetic_2d(n, seed=0)`, bounds (0, 100)), inputs and outputs private (box "
             f"[0, 100]^2); {GRID * GRID} inducing inputs on a {GRID} x {GRID} grid over the box (spacing 16.7); EQ "
             f"kernel (lengthscale per row), kernel variance {KERNEL_VARIANCE:g}, noise variance {NOISE_VARIANCE:g}; "
             f"({EPSILON:g}, {DELTA:g})-DP; `DPSGPR(..., private_inputs=True).release_function` (one pass in chunks of "
             "20,000, exact sampler); RMSE against the noise-free surface at 2,000 uniform points. The non-private "
             "column is SGPR's mean with the same inducing inputs and hyperparameters, from the exact statistics. "
             "One fresh process; release time excludes data generation and model construction.")
    name = ("whole_rows_scale" if n == 10**6 else f"whole_rows_scale_{n}").replace(
        "whole_rows_scale", "whole_rows_scale_dask" if args.dask else "whole_rows_scale", 1)
    title = f"Whole rows private at scale, n = {n:,}" + (", and on a Dask LocalCluster" if args.dask else "")
    path = _common.write_fragment(name, f"{title} (issue 36)",
                                  "\n\n".join([intro, body]), machine=machine, started=started, quick=args.quick,
                                  out_dir=args.out_dir)
    print(body)
    print(f"wrote {path}")
    return 0 if out is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
