"""Benchmark: time and peak memory of a full ``DPGPR.release`` on synthetic 2-D data.

Data: ``dpgp_gpflow.datasets.make_synthetic_2d(n, seed=0)`` (clustered inputs in [0, 100]^2,
public bounds (0, 100), so d = 100). Test inputs: a regular grid of k points on [0, 100]^2
(``gx x gy`` with ``gx * gy = k``, the factor pair closest to square). Model: EQ kernel,
lengthscale 10, kernel variance 10^2, noise variance 5^2 (the generator's noise std is 5).
Release: ``model.release(Xnew, epsilon=1, delta=0.01, objective="mse")`` with the package's
defaults otherwise (automatic rtol, analytic calibration, OS-entropy noise).

Each case runs in a fresh Python process, so its peak resident memory (``ru_maxrss`` of that
process, read by the parent with ``os.wait4``) belongs to that case alone; it includes the
~0.5 GB of TensorFlow itself (the "baseline" column: peak RSS before the data are built). Within
the process the release is called once "cold" (includes tf.function tracing) and then
``--repeats`` more times ("warm", median reported) when the case is cheap; large cases get no
warm repeats (the cold time is then the only time); a case that times out during its warm
repeats keeps its cold result. The split (cloaking matrix with the posterior variance, SVD, rank
rule, optimiser) is measured on the cold call by wrapping the package's functions in the worker.

Usage::

    python benchmarks/scaling.py --cases all          # the full grid (n in 1000, 3000, 10000; k in 200, 1000, 5000)
    python benchmarks/scaling.py --quick              # = --cases tiny (200x50) --repeats 0 (writes results/quick/)
    python benchmarks/scaling.py --cases 10000x5000 --timeout 1200
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

NS = (1000, 3000, 10000)
KS = (200, 1000, 5000)
CASE_SETS = {
    "tiny": [(200, 50)],  # not in the grid: the --quick smoke test
    "small": [(1000, 200)],
    "medium": [(n, k) for n in NS[:2] for k in KS[:2]],
    "all": [(n, k) for n in NS for k in KS],
}
#: Cases with n * k above this get no warm repeats by default (1 cold call only).
CHEAP = 3_000_000

LENGTHSCALE = 10.0
KERNEL_VARIANCE = 10.0**2
NOISE_VARIANCE = 5.0**2
EPSILON, DELTA = 1.0, 0.01


def grid(k: int):
    import numpy as np

    gx = max(d for d in range(1, int(math.isqrt(k)) + 1) if k % d == 0)
    gy = k // gx
    xs = np.linspace(0.0, 100.0, gy)
    ys = np.linspace(0.0, 100.0, gx)
    XX, YY = np.meshgrid(xs, ys)
    return np.column_stack([XX.ravel(), YY.ravel()]), (gx, gy)


# ------------------------------------------------------------------------------------------
# worker: one case in this process, one JSON line on stdout


def worker(n: int, k: int, repeats: int, cores: int | None) -> None:
    if cores:
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:cores]))
    _common.quiet_tensorflow()
    import gpflow
    import numpy as np
    import tensorflow as tf

    if cores:
        tf.config.threading.set_intra_op_parallelism_threads(cores)
        tf.config.threading.set_inter_op_parallelism_threads(cores)
    import dpgp_gpflow.mechanisms as rel_mod
    from dpgp_gpflow.datasets import make_synthetic_2d
    from dpgp_gpflow.models import DPGPR

    baseline_rss = _common.peak_rss_self_bytes()
    timers = {"cloaking_matrix": 0.0, "svd": 0.0, "rank_rule": 0.0, "optimiser": 0.0}
    calls = {"optimiser": 0}
    certificates = []

    orig_spaces = rel_mod.column_spaces
    orig_opt = rel_mod.optimise_noise_covariance
    orig_rows = rel_mod.projection_rows

    def timed_spaces(C, rtols):
        gen = orig_spaces(C, rtols)
        while True:
            t0 = time.perf_counter()
            try:
                item = next(gen)
            except StopIteration:
                timers["svd"] += time.perf_counter() - t0
                return
            timers["svd"] += time.perf_counter() - t0
            yield item

    def timed_opt(*a, **kw):
        t0 = time.perf_counter()
        out = orig_opt(*a, **kw)
        timers["optimiser"] += time.perf_counter() - t0
        calls["optimiser"] += 1
        certificates.append(out.certificate._asdict())
        return out

    def timed_rows(*a, **kw):
        t0 = time.perf_counter()
        out = orig_rows(*a, **kw)
        timers["rank_rule"] += time.perf_counter() - t0
        return out

    rel_mod.column_spaces = timed_spaces
    rel_mod.optimise_noise_covariance = timed_opt
    rel_mod.projection_rows = timed_rows

    class TimedDPGPR(DPGPR):
        def release_terms(self, Xnew):  # the cloaking matrix and the posterior variance
            t0 = time.perf_counter()
            out = super().release_terms(Xnew)
            timers["cloaking_matrix"] += time.perf_counter() - t0
            return out

    X, Y, bounds = make_synthetic_2d(n, seed=0)
    Xnew, shape = grid(k)
    kernel = gpflow.kernels.SquaredExponential(lengthscales=LENGTHSCALE, variance=KERNEL_VARIANCE)
    model = TimedDPGPR((X, Y), kernel, y_bounds=bounds, noise_variance=NOISE_VARIANCE, hyperparameters_public=True)

    def call():
        return model.release(Xnew, epsilon=EPSILON, delta=DELTA, objective="mse")

    cold, release = _common.time_call(call)
    split = dict(timers)
    n_opt = calls["optimiser"]
    cert = certificates[-1]
    warm = []

    def report(complete: bool) -> None:
        # Printed after the cold call and after each warm repeat: if the case times out during the
        # repeats, the parent still has the cold result and the repeats done so far.
        print(json.dumps({
            "n": n, "k": k, "grid": shape, "cold_s": cold, "warm_s": warm, "complete": complete,
            "warm_median_s": statistics.median(warm) if warm else None,
            "split_cold_s": split, "optimiser_calls_cold": n_opt,
            "rank": release.rank, "rtol": release.rtol, "bias_bound": release.bias_bound,
            "certificate": cert, "sensitivity": release.sensitivity,
            "median_noise_std": float(np.median(release.noise_std)),
            "baseline_rss_bytes": baseline_rss, "self_peak_rss_bytes": _common.peak_rss_self_bytes(),
            "gpus": _common.gpu_names(), "tf_threads": [tf.config.threading.get_intra_op_parallelism_threads(),
                                                      tf.config.threading.get_inter_op_parallelism_threads()],
            "cores": len(os.sched_getaffinity(0)),
        }), flush=True)

    report(complete=repeats == 0)
    for i in range(repeats):
        t, _ = _common.time_call(call)
        warm.append(t)
        report(complete=i == repeats - 1)


# ------------------------------------------------------------------------------------------
# driver


def parse_cases(spec: str):
    if spec in CASE_SETS:
        return CASE_SETS[spec]
    cases = []
    for part in spec.split(","):
        try:
            n, k = (int(x) for x in part.lower().split("x"))
        except ValueError:
            raise SystemExit(f"bad case {part!r}: use tiny, small, medium, all or NxK[,NxK...] (e.g. 1000x200)")
        cases.append((n, k))
    return cases


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="all",
                        help="tiny (200x50), small (1000x200), medium (n<=3000, k<=1000), all, or NxK[,NxK...]; default all")
    parser.add_argument("--quick", action="store_true", help="= --cases tiny (200x50) --repeats 0 (smoke test)")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"warm repeats per cheap case (n*k <= {CHEAP}); default 3 (quick 0)")
    parser.add_argument("--big-repeats", type=int, default=0, help="warm repeats for the other cases (default 0)")
    parser.add_argument("--timeout", type=float, default=900.0, help="per-case wall-clock limit, s (default 900)")
    parser.add_argument("--cores", type=int, default=None, help="pin each case to this many cores (default: all)")
    parser.add_argument("--cpu-only", action="store_true", help="hide GPUs from the cases (CUDA_VISIBLE_DEVICES='')")
    parser.add_argument("--name", default=None, help="fragment name (default scaling, or scaling_gpu with a GPU)")
    parser.add_argument("--out-dir", type=Path, default=None, help="where to write the fragment")
    parser.add_argument("--worker", nargs=2, type=int, metavar=("N", "K"), help=argparse.SUPPRESS)
    parser.add_argument("--worker-repeats", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        worker(args.worker[0], args.worker[1], args.worker_repeats, args.cores)
        return 0

    cases = parse_cases("tiny" if args.quick and args.cases == "all" else args.cases)
    repeats = args.repeats if args.repeats is not None else (0 if args.quick else 3)
    started = _common.utc_now()
    machine = _common.machine_info(gpus=[])  # GPUs are filled in from the workers (no TF import here)
    env = dict(os.environ)
    if args.cpu_only:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    rows = []
    gpus = None
    for n, k in cases:
        reps = repeats if n * k <= CHEAP else args.big_repeats
        argv_case = [sys.executable, str(Path(__file__).resolve()), "--worker", str(n), str(k),
                     "--worker-repeats", str(reps)]
        if args.cores:
            argv_case += ["--cores", str(args.cores)]
        print(f"case n={n}, k={k} ({reps} warm repeats, timeout {args.timeout:g} s) ...", flush=True)
        res = _common.run_isolated(argv_case, timeout=args.timeout, env=env)
        peak_mib = res["maxrss_bytes"] / 2**20
        out = _common.last_json_line(res["stdout"])  # on a timeout: the cold result, if it got that far
        if res["timed_out"] and out is None:
            rows.append([n, k, "–", f"timeout (> {args.timeout:g} s)", "–", "–", f"{peak_mib:.0f}", "–", "–", "–", "–"])
        elif (res["returncode"] != 0 and not res["timed_out"]) or out is None:
            tail = (res["stderr"].strip().splitlines() or ["?"])[-1][:120]
            rows.append([n, k, "–", f"failed (exit {res['returncode']}): {tail}", "–", "–", f"{peak_mib:.0f}",
                         "–", "–", "–", "–"])
        else:
            gpus = out["gpus"]
            sp = out["split_cold_s"]
            other = out["cold_s"] - sum(sp.values())
            split = (f"{sp['cloaking_matrix']:.1f} / {sp['svd']:.1f} / {sp['rank_rule']:.1f} / "
                     f"{sp['optimiser']:.1f} ({out['optimiser_calls_cold']}x) / {other:.1f}")
            cert = out["certificate"]
            warm = (f"{out['warm_median_s']:.2f} (of {len(out['warm_s'])})" if out["warm_s"] else "–")
            if res["timed_out"]:
                warm = f"{warm}; timeout (> {args.timeout:g} s) during the warm repeats"
            rows.append([
                n, k, f"{out['grid'][0]}x{out['grid'][1]}", f"{out['cold_s']:.2f}", warm, split,
                f"{peak_mib:.0f}", f"{out['baseline_rss_bytes'] / 2**20:.0f}",
                f"{out['rank']} (rtol {out['rtol']:g})",
                f"{cert['relative_gap']:.1e}, {cert['iterations']} it{'' if cert['converged'] else ', NOT converged'}",
                f"{out['median_noise_std']:.3g}",
            ])
        print("  " + " | ".join(str(c) for c in rows[-1]), flush=True)

    headers = ["n", "k", "grid", "cold time (s)", "warm median (s)",
               "split of cold call (s): C and post. var / SVD / rank rule / optimiser (calls) / other",
               "peak RSS (MiB)", "RSS after import (MiB)", "r", "certificate (rel. gap, iterations)",
               "median noise std"]
    table = _common.markdown_table(headers, rows, align="rrlrrlrrlll")
    machine["gpus"] = gpus or []
    n_big = sum(1 for n, k in cases if n * k > CHEAP)
    target_case = [r for r in rows if r[0] == 10000 and r[1] == 5000]
    target = ""
    if target_case:
        t = target_case[0][3]
        try:
            ok = float(t) < 300.0
            target = f"Target (n = 10,000, k = 5,000 under 5 minutes on 2 CPU cores): **{'met' if ok else 'NOT met'}** ({t} s)."
        except ValueError:
            target = f"Target (n = 10,000, k = 5,000 under 5 minutes on 2 CPU cores): **NOT met** ({t})."
    body = "\n".join([
        f"Synthetic 2-D data (`make_synthetic_2d(n, seed=0)`, bounds (0, 100), d = 100), test inputs on a regular "
        f"grid, EQ kernel lengthscale {LENGTHSCALE:g}, kernel variance {KERNEL_VARIANCE:g}, noise variance "
        f"{NOISE_VARIANCE:g}; `DPGPR.release(Xnew, epsilon=1, delta=0.01, objective=\"mse\")`, automatic rtol, "
        "analytic calibration. Each case in a fresh process: peak RSS is that process's `ru_maxrss` (TensorFlow's "
        "own footprint is the 'after import' column). 'cold' is the first release in the process (includes "
        f"tf.function tracing); 'warm' the median of further releases, run only for cases with n k <= {CHEAP:,} "
        f"(here {repeats} warm repeat(s) for those, {args.big_repeats} for the other {n_big} case(s)). The split is of the cold call: cloaking "
        "matrix and posterior variance (one Cholesky factor), SVD (`column_spaces`; randomised when both sides "
        "of C exceed 2,000), rank rule (`projection_rows`, per candidate rank), optimiser (number of calls in "
        "brackets), rest. "
        + (f"Cases pinned to {args.cores} core(s). " if args.cores else "")
        + ("GPUs hidden. " if args.cpu_only else ""),
        "",
        table,
        "",
        target,
    ])
    print(body)
    name = args.name or ("scaling_gpu" if machine["gpus"] else "scaling")
    path = _common.write_fragment(name, "Scaling (synthetic 2-D)" + (" on GPU" if machine["gpus"] else ""), body,
                                  machine=machine, started=started, quick=args.quick, out_dir=args.out_dir)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
