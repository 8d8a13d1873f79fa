"""Benchmark: the cost of privacy, a DP release timed against the non-private GP posterior it protects.

Issue 13 ("a compiled release engine within 5x of the GP posterior it protects"), measurement
only. For every case the *same* data, kernel and test inputs go to

* the non-private posterior: GPflow's ``gpflow.models.GPR.predict_f(Xnew)`` (mean and marginal
  variances, GPflow's default ``full_cov=False``, eager as GPflow runs it), and
* the DP release: ``dpgp_gpflow.models.DPGPR.release(Xnew, epsilon=1, delta=0.01)`` with the
  package's defaults (``objective="mse"``, automatic rtol, default ``tol``, analytic calibration).

Full GP: the grid of ``benchmarks/scaling.py`` (``make_synthetic_2d(n, seed=0)``, bounds (0, 100),
EQ lengthscale 10, kernel variance 100, noise variance 25, a regular grid of k test inputs),
n in {1000, 3000, 10000} x k in {200, 1000, 5000}. Sparse: ``benchmarks/sparse_scale.py``'s setting
(n = 100,000, m = 100 k-means inducing inputs, k = 100,000 uniform test inputs):
``DPGPRFITC.release_function(epsilon=1, delta=0.01)`` + ``predict(Xnew)`` against the non-private
``gpflow.models.GPRFITC.predict_f(Xnew)``.

Each case runs in ONE fresh process (a subprocess with a timeout): both models are built once,
then each side is called once "cold" (the release's cold call includes tf.function tracing), then
the two are called alternately (predict_f, release, release, predict_f, ...) for the warm
repeats, so the two sides see the same machine load. The ratio is the median warm release time
over the median warm predict_f time. Timings are noisy on a shared machine: compare the ratios,
which are measured side by side, rather than absolute times across runs.

Target (issue 13): release / predict_f <= 5x at every case (stretch: <= 2x).

Usage::

    python benchmarks/overhead.py                               # full grid + sparse (writes results/overhead.md)
    python benchmarks/overhead.py --quick                       # tiny cases (writes results/quick/overhead.md)
    python benchmarks/overhead.py --cases 1000x200,3000x1000 --repeats 5 --skip-sparse
    python benchmarks/overhead.py --timeout 900 --budget 3600   # no new case after an hour
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
from scaling import KERNEL_VARIANCE, LENGTHSCALE, NOISE_VARIANCE, grid  # noqa: E402  (the same set-up)

EPSILON, DELTA = 1.0, 0.01
NS = (1000, 3000, 10000)
KS = (200, 1000, 5000)
CASE_SETS = {
    "tiny": [(200, 50), (400, 100)],  # not in the grid: the --quick smoke test
    "small": [(1000, 200)],
    "all": [(n, k) for n in NS for k in KS],
}
#: Cases with n * k above this get ``--big-repeats`` warm repeats (default 1), the others ``--repeats``.
CHEAP = 3_000_000
SPARSE_DEFAULT = (100_000, 100, 100_000)  # n, m, k (sparse_scale.py's setting)
SPARSE_QUICK = (5_000, 20, 5_000)
TARGET_RATIO, STRETCH_RATIO = 5.0, 2.0


# ------------------------------------------------------------------------------------------
# workers: one case in this process, a JSON line on stdout after every stage


def _setup_worker():
    _common.quiet_tensorflow()
    import warnings

    import dpgp_gpflow

    warnings.filterwarnings("ignore", category=dpgp_gpflow.ClippingWarning)


def _alternate(public_fn, private_fn, repeats: int, record) -> None:
    """``repeats`` warm pairs, alternating which side goes first; ``record(side, seconds)`` after each call."""
    for i in range(repeats):
        order = [("public", public_fn), ("private", private_fn)]
        if i % 2:
            order.reverse()
        for side, fn in order:
            t, _ = _common.time_call(fn)
            record(side, t)


def worker_full(n: int, k: int, repeats: int) -> None:
    _setup_worker()
    import gpflow
    import numpy as np
    import tensorflow as tf

    from dpgp_gpflow.datasets import make_synthetic_2d
    from dpgp_gpflow.models import DPGPR

    X, Y, bounds = make_synthetic_2d(n, seed=0)
    Xnew, shape = grid(k)
    dp = DPGPR((X, Y), gpflow.kernels.SquaredExponential(lengthscales=LENGTHSCALE, variance=KERNEL_VARIANCE),
               y_bounds=bounds, noise_variance=NOISE_VARIANCE, hyperparameters_public=True)
    # The non-private model: GPflow's GPR on the same (clipped) data, an equal kernel (own object) and
    # the same constant prior mean (the midpoint of the bounds) as DPGPR's default.
    Xd, Yd = (t.numpy() for t in dp.data)
    mean = gpflow.functions.Constant(np.array([0.5 * (bounds[0] + bounds[1])]))
    gp = gpflow.models.GPR((Xd, Yd), gpflow.kernels.SquaredExponential(lengthscales=LENGTHSCALE,
                                                                         variance=KERNEL_VARIANCE),
                           mean_function=mean, noise_variance=NOISE_VARIANCE)
    Xnew_tf = tf.constant(Xnew)

    def public():
        m, v = gp.predict_f(Xnew_tf)
        return m.numpy(), v.numpy()

    def private():
        return dp.release(Xnew, epsilon=EPSILON, delta=DELTA)

    cold_public, _ = _common.time_call(public)
    cold_private, rel = _common.time_call(private)
    warm: Dict[str, List[float]] = {"public": [], "private": []}

    def report(complete: bool) -> None:
        print(json.dumps({
            "kind": "full", "n": n, "k": k, "grid": shape, "complete": complete,
            "cold_public_s": cold_public, "cold_private_s": cold_private,
            "warm_public_s": warm["public"], "warm_private_s": warm["private"],
            "rank": rel.rank, "rtol": rel.rtol, "certificate": rel.certificate._asdict(),
            "median_noise_std": float(np.median(rel.noise_std)),
            "peak_rss_bytes": _common.peak_rss_self_bytes(), "gpus": _common.gpu_names(),
            "cores": len(os.sched_getaffinity(0)),
        }), flush=True)

    report(complete=repeats == 0)

    def record(side, t):
        warm[side].append(t)
        if len(warm["public"]) == len(warm["private"]):
            report(complete=len(warm["public"]) == repeats)

    _alternate(public, private, repeats, record)


def worker_sparse(n: int, m: int, k: int, repeats: int) -> None:
    _setup_worker()
    import gpflow
    import numpy as np
    import tensorflow as tf

    from dpgp_gpflow.datasets import make_synthetic_2d
    from dpgp_gpflow.models import DPGPRFITC, kmeans_inducing_inputs

    X, Y, bounds = make_synthetic_2d(n, seed=0)
    Z = kmeans_inducing_inputs(X, m, seed=0)
    dp = DPGPRFITC((X, Y), gpflow.kernels.SquaredExponential(lengthscales=LENGTHSCALE, variance=KERNEL_VARIANCE),
                   Z, noise_variance=NOISE_VARIANCE, y_bounds=bounds, hyperparameters_public=True)
    Xd, Yd = (t.numpy() for t in dp.data)
    mean = gpflow.functions.Constant(np.array([0.5 * (bounds[0] + bounds[1])]))
    gp = gpflow.models.GPRFITC((Xd, Yd), gpflow.kernels.SquaredExponential(lengthscales=LENGTHSCALE,
                                                                             variance=KERNEL_VARIANCE),
                               Z.copy(), mean_function=mean, noise_variance=NOISE_VARIANCE)
    Xnew = np.random.default_rng(1).uniform(X.min(axis=0), X.max(axis=0), size=(k, X.shape[1]))
    Xnew_tf = tf.constant(Xnew)
    split: Dict[str, List[float]] = {"release_function": [], "predict": []}
    last: Dict[str, Any] = {}

    def public():
        mu, v = gp.predict_f(Xnew_tf)
        return mu.numpy(), v.numpy()

    def private():
        t0 = time.perf_counter()
        f = dp.release_function(epsilon=EPSILON, delta=DELTA)
        t1 = time.perf_counter()
        pred = f.predict(Xnew)
        t2 = time.perf_counter()
        split["release_function"].append(t1 - t0)
        split["predict"].append(t2 - t1)
        last["f"], last["pred"] = f, pred
        return pred

    cold_public, _ = _common.time_call(public)
    cold_private, _ = _common.time_call(private)
    warm: Dict[str, List[float]] = {"public": [], "private": []}

    def report(complete: bool) -> None:
        rel = last["f"].release
        print(json.dumps({
            "kind": "sparse", "n": n, "m": m, "k": k, "complete": complete,
            "cold_public_s": cold_public, "cold_private_s": cold_private,
            "warm_public_s": warm["public"], "warm_private_s": warm["private"], "private_split_s": split,
            "rank": rel.rank, "rtol": rel.rtol, "certificate": rel.certificate._asdict(),
            "median_noise_std": float(np.median(last["pred"].noise_std)),
            "peak_rss_bytes": _common.peak_rss_self_bytes(), "gpus": _common.gpu_names(),
            "cores": len(os.sched_getaffinity(0)),
        }), flush=True)

    report(complete=repeats == 0)

    def record(side, t):
        warm[side].append(t)
        if len(warm["public"]) == len(warm["private"]):
            report(complete=len(warm["public"]) == repeats)

    _alternate(public, private, repeats, record)


# ------------------------------------------------------------------------------------------
# driver (shared with benchmarks/gpu.py)


def parse_cases(spec: str) -> List[Tuple[int, int]]:
    if spec in CASE_SETS:
        return list(CASE_SETS[spec])
    cases = []
    for part in spec.split(","):
        try:
            n, k = (int(x) for x in part.strip().lower().split("x"))
        except ValueError:
            raise SystemExit(f"bad case {part!r}: use tiny, small, all or NxK[,NxK...] (e.g. 1000x200)")
        cases.append((n, k))
    return cases


def run_case(argv_worker: Sequence[str], timeout: float, env: Dict[str, str]) -> Dict[str, Any]:
    """Run one worker; its last JSON report (possibly partial), and what happened."""
    res = _common.run_isolated([sys.executable, str(Path(__file__).resolve()), *argv_worker], timeout=timeout, env=env)
    out = _common.last_json_line(res["stdout"])
    status = "ok"
    if res["timed_out"]:
        status = f"timeout (> {timeout:g} s)"
    elif res["returncode"] != 0:
        tail = (res["stderr"].strip().splitlines() or ["?"])[-1][:160]
        status = f"failed (exit {res['returncode']}): {tail}"
    return {"out": out, "status": status, "wall_s": res["wall_s"], "peak_rss_bytes": res["maxrss_bytes"],
            "stderr": res["stderr"]}


def _median(xs: Sequence[float]) -> Optional[float]:
    return statistics.median(xs) if xs else None


def ratio_of(out: Dict[str, Any]) -> Tuple[Optional[float], str]:
    """(release / predict_f, "warm" or "cold"): warm medians when there are warm pairs, else the cold calls."""
    wp, wq = out["warm_private_s"], out["warm_public_s"]
    n_pairs = min(len(wp), len(wq))
    if n_pairs:
        return statistics.median(wp[:n_pairs]) / statistics.median(wq[:n_pairs]), "warm"
    return out["cold_private_s"] / out["cold_public_s"], "cold"


def verdict(ratio: Optional[float], basis: str) -> str:
    if ratio is None:
        return "–"
    tag = "" if basis == "warm" else " (cold only)"
    if ratio <= STRETCH_RATIO:
        return f"yes, also stretch{tag}"
    if ratio <= TARGET_RATIO:
        return f"yes{tag}"
    return f"**no**{tag}"


def full_row(n: int, k: int, res: Optional[Dict[str, Any]], not_run: Optional[str] = None) -> Tuple[List[Any], Optional[bool]]:
    """A table row for a full-GP case, and whether it meets the target (None: not measured)."""
    blank = ["–"] * 9
    if not_run is not None:
        return [n, k, not_run, *blank], None
    out = res["out"]
    if out is None:
        return [n, k, res["status"], *blank], None
    ratio, basis = ratio_of(out)
    pairs = min(len(out["warm_private_s"]), len(out["warm_public_s"]))
    status = "ok" if res["status"] == "ok" else f"{res['status']} after {pairs} warm pair(s)"
    cert = out["certificate"]
    row = [
        n, k, status,
        _common.fmt(_median(out["warm_public_s"][:pairs]), ".3g") if pairs else "–",
        _common.fmt(_median(out["warm_private_s"][:pairs]), ".3g") if pairs else "–",
        f"{ratio:.1f}x" + ("" if basis == "warm" else " (cold)"),
        verdict(ratio, basis),
        pairs,
        f"{out['cold_public_s']:.3g} / {out['cold_private_s']:.3g}",
        f"{out['rank']} (rtol {out['rtol']:g})",
        f"{cert['relative_gap']:.1e}, {cert['iterations']} it{'' if cert['converged'] else ', NOT converged'}",
        f"{out['median_noise_std']:.3g}",
    ]
    return row, (ratio <= TARGET_RATIO if basis == "warm" else None)


FULL_HEADERS = ["n", "k", "status", "predict_f warm (s)", "release warm (s)", "ratio release / predict_f",
                "<= 5x?", "warm pairs", "cold: predict_f / release (s)", "r", "certificate (rel. gap, iterations)",
                "median noise std"]
FULL_ALIGN = "rrlrrrlrrlll"


def sparse_row(n: int, m: int, k: int, res: Optional[Dict[str, Any]], not_run: Optional[str] = None) -> Tuple[List[Any], Optional[bool]]:
    blank = ["–"] * 9
    head = [f"{n:,}", m, f"{k:,}"]
    if not_run is not None:
        return [*head, not_run, *blank], None
    out = res["out"]
    if out is None:
        return [*head, res["status"], *blank], None
    ratio, basis = ratio_of(out)
    pairs = min(len(out["warm_private_s"]), len(out["warm_public_s"]))
    status = "ok" if res["status"] == "ok" else f"{res['status']} after {pairs} warm pair(s)"
    cert = out["certificate"]
    sp = out["private_split_s"]
    # the split of the warm private calls (medians), or of the cold call
    rf = sp["release_function"][1:1 + pairs] if pairs else sp["release_function"][:1]
    pr = sp["predict"][1:1 + pairs] if pairs else sp["predict"][:1]
    row = [
        *head, status,
        _common.fmt(_median(out["warm_public_s"][:pairs]), ".3g") if pairs else "–",
        (f"{_median(out['warm_private_s'][:pairs]):.3g} ({_median(rf):.3g} + {_median(pr):.3g})" if pairs else "–"),
        f"{ratio:.1f}x" + ("" if basis == "warm" else " (cold)"),
        verdict(ratio, basis),
        pairs,
        f"{out['cold_public_s']:.3g} / {out['cold_private_s']:.3g}",
        f"{out['rank']} (rtol {out['rtol']:g})",
        f"{cert['relative_gap']:.1e}, {cert['iterations']} it{'' if cert['converged'] else ', NOT converged'}",
        f"{out['median_noise_std']:.3g}",
    ]
    return row, (ratio <= TARGET_RATIO if basis == "warm" else None)


SPARSE_HEADERS = ["n", "m", "k", "status", "GPRFITC.predict_f warm (s)",
                  "release_function + predict warm (s) (split)", "ratio", "<= 5x?", "warm pairs",
                  "cold: predict_f / release + predict (s)", "r", "certificate (rel. gap, iterations)",
                  "median noise std"]
SPARSE_ALIGN = "rrrlrrrlrrlll"


def run_all(full_cases: Sequence[Tuple[int, int]], sparse_cases: Sequence[Tuple[int, int, int]], *,
            repeats: int, big_repeats: int, timeout: float, budget: Optional[float], env: Dict[str, str],
            sparse_first: bool = True) -> Dict[str, Any]:
    """Run every case (each in its own process); rows for both tables, the GPUs the workers saw."""
    t_start = time.perf_counter()
    results: Dict[Tuple, Any] = {}
    gpus: List[str] = []
    jobs = [("sparse", c) for c in sparse_cases] + [("full", c) for c in full_cases]
    if not sparse_first:
        jobs = jobs[len(sparse_cases):] + jobs[:len(sparse_cases)]
    for kind, case in jobs:
        elapsed = time.perf_counter() - t_start
        if budget is not None and elapsed > budget:
            print(f"{kind} {case}: not run (time budget {budget:g} s spent)", flush=True)
            results[(kind, case)] = "not run (time)"
            continue
        if kind == "full":
            n, k = case
            reps = repeats if n * k <= CHEAP else big_repeats
            argv = ["--worker-full", str(n), str(k), "--worker-repeats", str(reps)]
        else:
            n, m, k = case
            reps = big_repeats if n * k > CHEAP else repeats
            argv = ["--worker-sparse", str(n), str(m), str(k), "--worker-repeats", str(reps)]
        print(f"[{_common.utc_now()}] {kind} case {case}: cold + {reps} warm pair(s), timeout {timeout:g} s ...",
              flush=True)
        res = run_case(argv, timeout, env)
        res["repeats"] = reps
        if res["out"] is not None:
            gpus = res["out"].get("gpus") or gpus
        elif res["status"] != "ok":
            print(res["stderr"][-2000:], flush=True)
        results[(kind, case)] = res
        out = res["out"]
        summary = "no result" if out is None else (
            f"cold {out['cold_public_s']:.2f}/{out['cold_private_s']:.2f} s, warm public {out['warm_public_s']}, "
            f"warm private {out['warm_private_s']}, ratio {ratio_of(out)[0]:.2f} ({ratio_of(out)[1]})")
        print(f"  {res['status']} in {res['wall_s']:.0f} s: {summary}", flush=True)

    full_rows, full_ok = [], []
    for n, k in full_cases:
        r = results[("full", (n, k))]
        row, ok = full_row(n, k, None, r) if isinstance(r, str) else full_row(n, k, r)
        full_rows.append(row)
        full_ok.append(ok)
    sparse_rows, sparse_ok = [], []
    for n, m, k in sparse_cases:
        r = results[("sparse", (n, m, k))]
        row, ok = sparse_row(n, m, k, None, r) if isinstance(r, str) else sparse_row(n, m, k, r)
        sparse_rows.append(row)
        sparse_ok.append(ok)
    return {"full_rows": full_rows, "full_ok": full_ok, "sparse_rows": sparse_rows, "sparse_ok": sparse_ok,
            "gpus": gpus, "wall_s": time.perf_counter() - t_start, "results": results}


def target_line(full_ok: Sequence[Optional[bool]], sparse_ok: Sequence[Optional[bool]],
                full_rows: Sequence[Sequence[Any]]) -> str:
    measured = [ok for ok in full_ok if ok is not None]
    n_meet = sum(1 for ok in measured if ok)
    n_missing = len(full_ok) - len(measured)
    failing = [f"{r[0]}x{r[1]} ({r[5]})" for r, ok in zip(full_rows, full_ok) if ok is False]
    if not full_ok:
        verdict_str = "not assessed (no full-GP case run)"
    elif n_missing:
        verdict_str = (f"**NOT established** ({n_meet} of {len(measured)} measured case(s) meet it; "
                       f"{n_missing} case(s) not measured)")
    elif n_meet == len(full_ok):
        verdict_str = "**met** at every case"
    else:
        verdict_str = f"**NOT met** ({n_meet} of {len(full_ok)} case(s) meet it)"
    line = f"Target (issue 13: DPGPR.release / GPR.predict_f <= {TARGET_RATIO:g}x at every case; stretch <= {STRETCH_RATIO:g}x): {verdict_str}."
    if failing:
        line += " Cases over 5x: " + ", ".join(failing) + "."
    if sparse_ok:
        s = ["met" if ok else ("NOT met" if ok is False else "not measured") for ok in sparse_ok]
        line += f" Sparse (release_function + predict vs GPRFITC.predict_f <= {TARGET_RATIO:g}x): {', '.join(s)}."
    return line


def method_text(repeats: int, big_repeats: int, shared: bool = True) -> str:
    return (
        "Synthetic 2-D data (`make_synthetic_2d(n, seed=0)`, bounds (0, 100), d = 100), EQ kernel lengthscale "
        f"{LENGTHSCALE:g}, kernel variance {KERNEL_VARIANCE:g}, noise variance {NOISE_VARIANCE:g}, prior mean the "
        "midpoint of the bounds; (1, 0.01)-DP. Full GP: k test inputs on a regular grid (as `scaling.py`); "
        "non-private side `gpflow.models.GPR.predict_f(Xnew)` (mean and marginal variances, eager as GPflow runs "
        "it), private side `DPGPR.release(Xnew, epsilon=1, delta=0.01)` with the defaults (mse objective, "
        "automatic rtol, default tol, analytic calibration). Sparse: m k-means inducing inputs (seed 0), k uniform "
        "test inputs (as `sparse_scale.py`); `DPGPRFITC.release_function(epsilon=1, delta=0.01)` + `predict(Xnew)` "
        "against `gpflow.models.GPRFITC.predict_f(Xnew)` with the same inducing inputs. "
        "Each case runs in one fresh process: both models are built once, each side is called once cold (the "
        "'cold' column; the release's includes tf.function tracing), then the two are called alternately "
        f"(warm pairs: {repeats} for cases with n k <= {CHEAP:,}, {big_repeats} for larger ones), and the ratio is "
        "the median warm release time over the median warm predict_f time (a ratio marked '(cold)' is of the cold "
        "calls, when no warm pair finished). "
        + ("Timings are noisy on this shared machine (other work ran beside this; cores and load average at "
           "start below), which is why the two sides are timed side by side, alternately, in one process: the ratio is "
           "the number to read, not the absolute times. " if shared else
           "The two sides are timed side by side, alternately, in one process: the ratio is the number to read. ")
        + "'r' is the number of noised directions, the certificate is the noise "
        "optimiser's relative duality gap, 'median noise std' the median DP noise standard deviation over the k "
        "test points (from the last release)."
    )


def build_body(run: Dict[str, Any], repeats: int, big_repeats: int, extra: str = "", shared: bool = True,
               grid_note: bool = True) -> str:
    parts = [method_text(repeats, big_repeats, shared) + (" " + extra if extra else ""), ""]
    if run["full_rows"]:
        parts += ["Full GP (`DPGPR.release` vs `GPR.predict_f`):", "",
                  _common.markdown_table(FULL_HEADERS, run["full_rows"], align=FULL_ALIGN), ""]
    if run["sparse_rows"]:
        parts += ["Sparse (`DPGPRFITC.release_function` + `predict` vs `GPRFITC.predict_f`):", "",
                  _common.markdown_table(SPARSE_HEADERS, run["sparse_rows"], align=SPARSE_ALIGN), ""]
    line = target_line(run["full_ok"], run["sparse_ok"], run["full_rows"])
    ran = [(r[0], r[1]) for r in run["full_rows"]]
    if grid_note and run["full_rows"] and sorted(ran) != sorted(CASE_SETS["all"]):
        line += (" (Assessed on the cases above only; the issue's grid is n in {1000, 3000, 10000} x "
                 "k in {200, 1000, 5000}.)")
    parts.append(line)
    parts.append("")
    parts.append(f"Total wall time of the run: {run['wall_s']:.0f} s.")
    return "\n".join(parts)


def worker_dispatch(args) -> bool:
    """Run a worker if the arguments ask for one (shared with gpu.py); True if one ran."""
    if args.worker_full:
        worker_full(args.worker_full[0], args.worker_full[1], args.worker_repeats)
        return True
    if args.worker_sparse:
        worker_sparse(*args.worker_sparse, args.worker_repeats)
        return True
    return False


def add_worker_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--worker-full", nargs=2, type=int, metavar=("N", "K"), help=argparse.SUPPRESS)
    parser.add_argument("--worker-sparse", nargs=3, type=int, metavar=("N", "M", "K"), help=argparse.SUPPRESS)
    parser.add_argument("--worker-repeats", type=int, default=0, help=argparse.SUPPRESS)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=None,
                        help="tiny (200x50, 400x100), small (1000x200), all, or NxK[,NxK...]; default all (quick: tiny)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny cases, sparse n=5000 m=20 k=5000, 1 warm pair (writes results/quick/)")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"warm pairs per cheap case (n*k <= {CHEAP:,}); default 3 (quick 1)")
    parser.add_argument("--big-repeats", type=int, default=1, help="warm pairs for the other cases (default 1)")
    parser.add_argument("--timeout", type=float, default=900.0, help="per-case wall-clock limit, s (default 900)")
    parser.add_argument("--budget", type=float, default=None,
                        help="start no new case after this many seconds (the rest: 'not run (time)')")
    parser.add_argument("--sparse-n", type=int, default=None, help="sparse case: training points (default 100000)")
    parser.add_argument("--sparse-m", type=int, default=None, help="sparse case: inducing inputs (default 100)")
    parser.add_argument("--sparse-k", type=int, default=None, help="sparse case: prediction inputs (default 100000)")
    parser.add_argument("--skip-sparse", action="store_true", help="no sparse case")
    parser.add_argument("--skip-full", action="store_true", help="no full-GP case")
    parser.add_argument("--cpu-only", action="store_true", help="hide GPUs from the cases (CUDA_VISIBLE_DEVICES='')")
    parser.add_argument("--name", default="overhead", help="fragment name (default overhead)")
    parser.add_argument("--out-dir", type=Path, default=None, help="where to write the fragment")
    add_worker_args(parser)
    args = parser.parse_args(argv)
    if worker_dispatch(args):
        return 0

    full_cases = [] if args.skip_full else parse_cases(args.cases or ("tiny" if args.quick else "all"))
    sd = SPARSE_QUICK if args.quick else SPARSE_DEFAULT
    sparse_cases = [] if args.skip_sparse else [(args.sparse_n or sd[0], args.sparse_m or sd[1], args.sparse_k or sd[2])]
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    started = _common.utc_now()
    machine = _common.machine_info(gpus=[])  # load average now; GPUs from the workers (no TF import here)
    env = dict(os.environ)
    if args.cpu_only:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    run = run_all(full_cases, sparse_cases, repeats=repeats, big_repeats=args.big_repeats, timeout=args.timeout,
                  budget=args.budget, env=env)
    machine["gpus"] = run["gpus"]
    extra = ("GPUs hidden. " if args.cpu_only else "") + (
        f"No new case was started after {args.budget:g} s of wall time ('not run (time)')." if args.budget else "")
    body = build_body(run, repeats, args.big_repeats, extra.strip())
    title = "Overhead of privacy: release vs the non-private posterior (issue 13)"
    path = _common.write_fragment(args.name, title, body, machine=machine, started=started, quick=args.quick,
                                  out_dir=args.out_dir)
    print(body)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
