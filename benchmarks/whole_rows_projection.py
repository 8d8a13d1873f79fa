"""Benchmark: a measured projection of the whole-row statistics' pass to 10^8 rows on a cluster (issue 36 item 5).

The pass (``whole_rows.sufficient_statistics`` over a :class:`~dpgp_gpflow.distributed.DaskChunks` source: each
partition's sums ``(S, b, q)`` on the worker that holds it, the sums added in a tree) is what grows with the
rows; the release's draw and post-processing do not (M = 49 here). Measured on a Dask ``LocalCluster`` of 2
single-threaded workers (threads of one process, as ``whole_rows_scale.py --dask``; ``--processes`` for worker
processes) on this machine at n = 10^6, 3 x 10^6 and 10^7 rows (2-D, uniform on the box
[0, 100]^2, outputs of the synthetic surface of ``whole_rows_vs_dpsgd.py``; 49 inducing inputs on a 7 x 7 grid,
EQ kernel, lengthscale 15), partitions of 250,000 rows (summed in slices of ``SLICE_ROWS``). The rows are
generated on the workers and held there (``persist``) before the timing: the pass is timed, not the data's
arrival. A least-squares fit ``time = a + b n`` over every pass gives the per-row cost ``b`` on 2 workers and
the fixed cost ``a`` (scheduling, the tree of sums, the first trace); the projection for 10^8 rows on W
workers is ``a + 2 b 10^8 / W``.

Usage::

    python benchmarks/whole_rows_projection.py            # n = 10^6, 3 x 10^6, 10^7 (a few minutes)
    python benchmarks/whole_rows_projection.py --quick    # n = 10^5, 3 x 10^5, 10^6; into results/quick/
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

SIZES = (10**6, 3 * 10**6, 10**7)
QUICK_SIZES = (10**5, 3 * 10**5, 10**6)
PARTITION = 250_000
WORKERS = 2
PROJECT_N = 10**8
PROJECT_W = (2, 8, 32, 128)
BOX = [(0.0, 100.0), (0.0, 100.0)]


def worker(sizes, repeats: int, processes: bool = False) -> None:
    _common.quiet_tensorflow()
    import warnings

    import dask.array as da
    import distributed
    import gpflow
    import numpy as np

    import dpgp_gpflow as dp
    from dpgp_gpflow import whole_rows
    from dpgp_gpflow.streaming.dask_chunks import DaskChunks

    warnings.simplefilter("ignore", dp.ClippingWarning)
    kernel = gpflow.kernels.SquaredExponential(variance=400.0, lengthscales=15.0)
    rows = whole_rows.RowStatistics(whole_rows.FeatureMap(kernel, whole_rows.inducing_grid(BOX, 7), x_bounds=BOX),
                                    BOX, (0.0, 100.0))
    out = {"passes": [], "workers": WORKERS, "partition": PARTITION, "processes": processes}
    with distributed.LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=processes,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        for n in sizes:
            state = da.random.RandomState(0)
            X = state.uniform(0.0, 100.0, (n, 2), chunks=(PARTITION, 2))
            Y = (50.0 + 25.0 * da.sin(X[:, :1] / 12.0) * da.cos(X[:, 1:] / 16.0)
                 + 0.7 * state.standard_normal((n, 1), chunks=(PARTITION, 1)))
            t0 = time.perf_counter()
            X, Y = client.persist([X, Y])
            distributed.wait([X, Y])
            data_s = time.perf_counter() - t0
            source = DaskChunks(X, Y, client)
            for r in range(repeats):
                t0 = time.perf_counter()
                stats = whole_rows.sufficient_statistics(source, rows)
                seconds = time.perf_counter() - t0
                assert stats.n == n and np.all(np.isfinite(stats.S))
                out["passes"].append({"n": n, "seconds": seconds, "data_s": data_s})
                print(f"n = {n:,}: pass {r + 1} {seconds:.2f} s (data on the workers {data_s:.1f} s)", file=sys.stderr,
                      flush=True)
            client.cancel([X, Y])
            del X, Y, source
    print(json.dumps(out))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="rows (default 10^6 3x10^6 10^7)")
    parser.add_argument("--repeats", type=int, default=3, help="passes per size (default 3)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (writes results/quick/)")
    parser.add_argument("--timeout", type=float, default=900.0, help="wall-clock limit, s (default 900)")
    parser.add_argument("--out-dir", type=Path, default=None, help="where to write the fragment")
    parser.add_argument("--processes", action="store_true",
                        help="workers as processes (each rebuilds the kernel per task and starts TensorFlow) instead of "
                             "threads of one process (the default, as whole_rows_scale.py --dask)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = args.sizes or list(QUICK_SIZES if args.quick else SIZES)
    if args.worker:
        worker(sizes, args.repeats, processes=args.processes)
        return 0
    started = _common.utc_now()
    machine = _common.machine_info(gpus=[])
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    res = _common.run_isolated([sys.executable, str(Path(__file__).resolve()), "--worker", "--repeats",
                                str(args.repeats), "--sizes", *(str(n) for n in sizes),
                                *(["--processes"] if args.processes else [])], timeout=args.timeout, env=env)
    out = None if res["timed_out"] else _common.last_json_line(res["stdout"])
    if out is None:
        print(res["stderr"][-3000:])
        print("failed" if not res["timed_out"] else f"timeout (> {args.timeout:g} s)")
        return 1
    import numpy as np

    n = np.array([p["n"] for p in out["passes"]], dtype=float)
    t = np.array([p["seconds"] for p in out["passes"]])
    (a, b), *_ = np.linalg.lstsq(np.stack([np.ones_like(n), n], axis=1), t, rcond=None)
    rows = []
    for size in sizes:
        ts = sorted(p["seconds"] for p in out["passes"] if p["n"] == size)
        rows.append([f"{size:,}", ", ".join(f"{v:.2f}" for v in ts), f"{float(np.median(ts)):.2f}",
                     f"{a + b * size:.2f}", f"{1e6 * float(np.median(ts)) / size:.2f}"])
    table = _common.markdown_table(["n", "pass (s), each", "median (s)", "fit a + b n (s)", "us per row (median)"],
                                   rows)
    per_worker_row = b * WORKERS
    projection = _common.markdown_table(
        ["workers W", f"projected pass over {PROJECT_N:.0e} rows (s)"],
        [[w, f"{a + per_worker_row * PROJECT_N / w:.0f}"] for w in PROJECT_W])
    data_s = {p["n"]: p["data_s"] for p in out["passes"]}
    lines = [
        f"Fit over the {len(t)} passes: a = {a:.2f} s, b = {b * 1e6:.3f} us per row on {WORKERS} workers, so "
        f"{per_worker_row * 1e6:.2f} us per row per worker (residuals: max {np.max(np.abs(t - a - b * n)):.2f} s).",
        f"Projection for {PROJECT_N:,} rows on W workers: a + {WORKERS} b 10^8 / W:\n\n{projection}",
        "Assumed: (1) the per-row cost of a worker is the one measured here (2 workers sharing this machine's 2 "
        "cores with the other load on it: a dedicated core per worker is faster, so this is pessimistic); (2) "
        "linear scaling in workers: the pass is a sum, each worker sums its own partitions and the sums "
        f"([M, M] + [M] + 1 numbers, M = 49: 20 kB each) meet in a tree of depth log2(W), a cost in a; (3) the "
        "rows are already on the workers, read where they are stored (each worker reads its own partitions; "
        "reading is not timed here: generating the rows on the workers took "
        + ", ".join(f"{v:.1f} s for {k:,}" for k, v in data_s.items())
        + "); (4) memory per worker O(partition x D) for the rows of a partition plus O(SLICE_ROWS x M) for the "
        "features, whatever n. The release's draw and post-processing (independent of n, about 0.1 s at M = 49) "
        "come on top.",
        f"Peak RSS of the client process: {res['maxrss_bytes'] / 2**30:.2f} GiB.",
    ]
    kind = "processes" if args.processes else "threads of one process (TensorFlow releases the GIL in its ops)"
    intro = (f"The whole-row statistics' pass over a `DaskChunks` source on a Dask `LocalCluster` of {WORKERS} "
             f"single-threaded worker {kind} on this machine: synthetic 2-D rows uniform on [0, 100]^2 "
             f"(generated on the workers and held there before timing), partitions of {PARTITION:,} rows, 49 "
             "inducing inputs on a 7 x 7 grid, EQ kernel (lengthscale 15); "
             f"`whole_rows.sufficient_statistics` timed {args.repeats} times per n.")
    body = "\n\n".join([intro, table, *lines])
    path = _common.write_fragment("whole_rows_projection", "Whole rows private: the pass measured on Dask and "
                                  "projected to 10^8 rows (issue 36)", body, machine=machine, started=started,
                                  quick=args.quick, out_dir=args.out_dir)
    print(body)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
