"""Benchmark: would XLA (``tf.function(jit_compile=True)``) speed up the noise optimiser's Newton step?

Issue 35 item 6 (the compiled engine within 5x of GPflow's ``predict_f``). At the overhead benchmark's
1000 x 1000 case the noise optimiser's Newton steps are about two thirds of a release; each step is a
few float64 products of size r x m x r (r = 248 noised directions, m ~ 400 working-set columns) and one
r x r eigendecomposition. The prebuilt TensorFlow CPU kernels of this machine lack AVX2/FMA; XLA's CPU
backend compiles with LLVM for the host and might not. This script measures, side by side in one
process (alternating, medians), each operation of the step compiled by TensorFlow's graph
(``tf.function``) and by XLA (``jit_compile=True``) on the same inputs (random, seed 0), and how far
the two results differ (largest absolute difference relative to the largest entry). It also tries to
compile the package's own Newton direction and restricted solve (one step) with XLA and reports
whether XLA accepts them. Measurement only; nothing here is used by the package.

Usage::

    python benchmarks/overhead_xla.py            # r = 248, m = 400 (writes results/overhead_xla.md)
    python benchmarks/overhead_xla.py --quick    # r = 40, m = 60 (writes results/quick/overhead_xla.md)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="r = 40, m = 60, 3 repeats (writes results/quick/)")
    parser.add_argument("--r", type=int, default=None, help="directions (default 248)")
    parser.add_argument("--m", type=int, default=None, help="working-set columns (default 400)")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per side (default 11; quick 3)")
    args = parser.parse_args(argv)
    r = args.r or (40 if args.quick else 248)
    m = args.m or (60 if args.quick else 400)
    repeats = args.repeats or (3 if args.quick else 11)
    started = _common.utc_now()
    machine = _common.machine_info()
    _common.quiet_tensorflow()
    import numpy as np
    import tensorflow as tf

    from dpgp_gpflow.noise_planning import dual

    rng = np.random.default_rng(0)
    A = tf.constant(rng.standard_normal((r, m)))
    v = tf.constant(rng.uniform(0.5, 1.5, m))
    S = tf.constant(np.cov(rng.standard_normal((r, 4 * r))) + np.eye(r))
    L = tf.linalg.cholesky(S)
    B = tf.constant(rng.standard_normal((r, r)))
    w, V = tf.linalg.eigh(S)
    P = tf.linalg.matmul(V, A, transpose_a=True)
    E = dual._mse_curvature(w)

    cases = [
        (f"product {r} x {m} x {r} (A diag(v) A^T)",
         lambda a, x: tf.linalg.matmul(a * x[None, :], a, transpose_b=True), (A, v)),
        (f"eigh {r} x {r} (self_adjoint_eig)", lambda s: tf.linalg.eigh(s), (S,)),
        (f"cholesky {r} x {r}", lambda s: tf.linalg.cholesky(s), (S,)),
        (f"triangular solve {r} x {r}, {r} right-hand sides", lambda l, b: tf.linalg.triangular_solve(l, b), (L, B)),
        (f"mse Hessian-vector product (2 products, r = {r}, m = {m})", dual._mse_hessian_vector, (E, P, v)),
        (f"line-search trial (Gram, eigh, V^T A: r = {r}, m = {m})",
         lambda a, x: dual._trial_terms(a, x, "mse"), (A, v)),
    ]
    rows = []
    for name, fn, inputs in cases:
        graph = tf.function(fn, autograph=False)
        xla = tf.function(fn, autograph=False, jit_compile=True)

        def run(f):
            out = f(*inputs)
            return [t.numpy() for t in tf.nest.flatten(out)]

        t0 = time.perf_counter()
        ref = run(graph)
        t_graph_first = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = run(xla)
        t_xla_first = time.perf_counter() - t0
        times = {"graph": [], "xla": []}
        for i in range(repeats):
            order = [("graph", graph), ("xla", xla)]
            if i % 2:
                order.reverse()
            for side, f in order:
                t, _ = _common.time_call(lambda: run(f))
                times[side].append(t)
        if name.startswith("eigh"):  # eigenvectors are defined up to sign: compare the eigenvalues and V diag(w) V^T
            ref = [ref[0], (ref[1] * ref[0]) @ ref[1].T]
            got = [got[0], (got[1] * got[0]) @ got[1].T]
        if name.startswith("line-search"):  # the value, the eigenvalues and the leverages (not V, P: signs)
            ref, got = [ref[0], ref[1], ref[4]], [got[0], got[1], got[4]]
        diff = max(float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-300)) for a, b in zip(ref, got)
                   if a.dtype.kind == "f")
        tg, tx = statistics.median(times["graph"]), statistics.median(times["xla"])
        rows.append([name, f"{1e3 * tg:.3g}", f"{1e3 * tx:.3g}", f"{tx / tg:.2g}x", f"{diff:.1e}",
                     f"{t_graph_first:.2g} / {t_xla_first:.2g}"])
        print(rows[-1], flush=True)

    # The package's own Newton direction and restricted solve (one step), as XLA would compile them.
    whole = []
    barrier = dual._barrier_curvature(tf.fill([m], tf.constant(1e-3, tf.float64)), v)
    gb = tf.constant(rng.standard_normal(m))
    attempts = [
        ("mse Newton direction (dual._mse_newton_direction)",
         lambda w_, p_, g_, b_: dual._mse_newton_direction(w_, p_, g_, b_), (w, P, gb, barrier)),
        ("restricted solve, one step (dual.barrier_newton, mse)",
         lambda a, x: dual.barrier_newton(a, x, tf.constant(1e-3, tf.float64), tf.constant(1), tf.constant(True),
                                          "mse")[0], (A, v)),
    ]
    for name, fn, inputs in attempts:
        try:
            t0 = time.perf_counter()
            tf.function(fn, autograph=False, jit_compile=True)(*inputs)
            whole.append([name, f"compiled and ran ({time.perf_counter() - t0:.2g} s with compilation)"])
        except Exception as err:  # XLA's refusal is the result
            first = str(err).strip().splitlines()[0][:200].replace("|", "/")
            whole.append([name, f"refused: {type(err).__name__}: {first}"])
        print(whole[-1], flush=True)

    body = "\n".join([
        f"Each operation of one mse Newton step of the noise optimiser at r = {r}, m = {m} (float64, random inputs, "
        "seed 0), compiled by TensorFlow's graph (`tf.function`) and by XLA (`tf.function(jit_compile=True)`) in one "
        f"process, called alternately ({repeats} timed calls per side after one untimed call each); medians of "
        "wall time. 'difference' is the largest absolute difference of the two results relative to the largest "
        "entry (eigh: eigenvalues and V diag(w) V^T, eigenvectors being defined up to sign; the trial: the dual "
        "value, the eigenvalues and the leverages). The machine is shared "
        "(load average at start below): compare the two columns, not the absolute times across runs.",
        "",
        _common.markdown_table(["operation", "tf.function (ms)", "XLA (ms)", "XLA / tf.function", "difference",
                                "first call: tf.function / XLA (s)"], rows, align="lrrrrr"),
        "",
        "The package's own functions compiled whole by XLA:",
        "",
        _common.markdown_table(["function", "XLA"], whole, align="ll"),
    ])
    path = _common.write_fragment("overhead_xla", "XLA for the noise optimiser's Newton step (issue 35 item 6)", body,
                                  machine=machine, started=started, quick=args.quick)
    print(body)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
