"""Benchmark: the cost of exact noise (issue 15 part 1), exact vs floating-point samplers.

Writes the fragment ``benchmarks/results/exact_noise.md`` (``--quick``: ``results/quick/``). Three parts, each at k = 200, 5,000 and 100,000:

1. **Samplers**: ``k`` draws of :func:`dpgp_gpflow.sampling.standard_normal` (exact discrete Gaussian
   via OpenDP) vs :func:`~dpgp_gpflow.sampling.float_standard_normal` (the earlier CSPRNG float
   sampler); the same for the Laplace samplers; one exponential-mechanism draw over ``k`` candidates,
   :func:`~dpgp_gpflow.sampling.gumbel_argmax` (exact) vs ``argmax(w + gumbel(k))`` (float); a
   Laplace release of ``k`` bin means, :func:`~dpgp_gpflow.sampling.add_laplace` (exact whitening,
   rounding and addition in rationals) vs ``means + b * float_laplace(k)``.
2. **Cloaking release** of ``k`` predictions, end to end with a reused :class:`~dpgp_gpflow.mechanisms.NoisePlan`
   (so the optimiser is not timed): ``C = A B`` with ``A`` k x 30, ``B`` 30 x n, n = 2,000 training
   outputs (rank <= 30). The exact path adds the public solve ``F^{-1} V`` (r x n), r exact draws and
   the exact grid addition.
3. **Standard-mechanism noise step** with a k x k Cholesky factor ``L`` (the Cholesky itself, common
   to both, is not timed): exact = triangular solve ``L^{-1} mean`` + k exact draws + grid addition +
   ``L z``; float = k float draws + ``L xi``. At k = 100,000 ``L`` would take 80 GB: not run.

Usage::

    python benchmarks/exact_noise.py             # all three sizes
    python benchmarks/exact_noise.py --quick     # k = 200 only, into results/quick/
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from dpgp_gpflow import sampling  # noqa: E402
from dpgp_gpflow.mechanisms import NoisePlan, cloaking_release  # noqa: E402


def timed(fn, repeats):
    """Median wall time of ``repeats`` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def fmt(seconds):
    return f"{seconds * 1e3:.3g} ms" if seconds < 1.0 else f"{seconds:.3g} s"


def float_argmax(w):
    noise, _ = sampling.gumbel(w.size)
    return int(np.argmax(w + noise))


def samplers_row(k, repeats):
    w = np.random.default_rng(0).standard_normal(k)
    means = np.random.default_rng(3).uniform(0.0, 10.0, k)
    rows = [
        ("Gaussian", lambda: sampling.standard_normal(k), lambda: sampling.float_standard_normal(k)),
        ("Laplace", lambda: sampling.laplace(k), lambda: sampling.float_laplace(k)),
        ("exponential mechanism (1 draw of k)", lambda: sampling.gumbel_argmax(w), lambda: float_argmax(w)),
        ("Laplace release of k bin means (add_laplace)", lambda: sampling.add_laplace(means, 0.3, 1.0),
         lambda: means + 0.3 * sampling.float_laplace(k)[0]),
    ]
    out = []
    for name, exact, flt in rows:
        te, tf_ = timed(exact, repeats), timed(flt, repeats)
        out.append(f"| {k:,} | {name} | {fmt(te)} | {fmt(tf_)} | {te / tf_:.1f}x |")
    return out


def cloaking_row(k, repeats, n=2000, m=30):
    rng = np.random.default_rng(1)
    A = rng.standard_normal((k, m))
    B = rng.standard_normal((m, n)) * 0.5 ** np.arange(m)[:, None]  # decaying spectrum
    y = rng.uniform(-1.0, 1.0, n)
    kw = dict(data_sensitivity=2.0, output_bound=1.0, objective="mse", rtol=1e-6)
    plan = NoisePlan((tf.constant(A), tf.constant(B)), **kw)
    zeros = np.zeros(k)

    def release(sampler):
        return cloaking_release(plan, tf.constant(y), zeros, zeros, epsilon=1.0, delta=0.01, sampler=sampler, **kw)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rank = release("exact").rank
        te, tf_ = timed(lambda: release("exact"), repeats), timed(lambda: release("float"), repeats)
    return f"| {k:,} | cloaking release (rank {rank}, n = {n:,}) | {fmt(te)} | {fmt(tf_)} | {te / tf_:.2f}x |"


def standard_row(k, repeats):
    if k > 20_000:
        return f"| {k:,} | standard-mechanism noise step | not run (k x k factor: {8 * k * k / 1e9:.0f} GB) | | |"
    rng = np.random.default_rng(2)
    G = rng.standard_normal((k, k)) / np.sqrt(k)
    L = tf.constant(np.tril(G) + 2.0 * np.eye(k))  # a well-conditioned lower-triangular factor
    mean = tf.constant(rng.standard_normal(k))
    scale = 3.7

    def exact():
        z = tf.linalg.triangular_solve(L, mean[:, None], lower=True)[:, 0] / scale
        xi, _ = sampling.standard_normal(k)
        return tf.linalg.matvec(L, tf.constant(sampling.grid_sum(z.numpy(), xi))) * scale

    def flt():
        xi, _ = sampling.float_standard_normal(k)
        return mean + tf.linalg.matvec(L, tf.constant(xi)) * scale

    te, tf_ = timed(exact, repeats), timed(flt, repeats)
    return f"| {k:,} | standard-mechanism noise step | {fmt(te)} | {fmt(tf_)} | {te / tf_:.1f}x |"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", default="200,5000,100000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="k = 200 only; fragment in results/quick/")
    args = parser.parse_args()
    started = _common.utc_now()
    ks = [200] if args.quick else [int(k) for k in args.ks.split(",")]
    lines = ["| k | what | exact | float | exact / float |", "| ---: | --- | ---: | ---: | ---: |"]
    for k in ks:
        reps = args.repeats if k <= 5000 else 1
        lines += samplers_row(k, reps)
        lines.append(cloaking_row(k, reps))
        lines.append(standard_row(k, reps))
        print("\n".join(lines[-6:]), flush=True)
    body = "\n".join(lines) + (
        f"\n\nMedians of {args.repeats} warm calls ({'1 call' if max(ks) > 5000 else 'every k'} at k > 5,000), "
        "exact and float side by side in one process; the cloaking row reuses its noise plan (the optimiser "
        "is not timed). The standard mechanism at k = 100,000 is not run (its k x k factor is 80 GB).")
    path = _common.write_fragment("exact_noise", "Exact vs floating-point noise (cost of the exact samplers)", body,
                                  machine=_common.machine_info(), started=started, quick=args.quick)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
