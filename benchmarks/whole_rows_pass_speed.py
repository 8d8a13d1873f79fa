"""Benchmark: the speed of one whole-row release (issue 36), this tree against an earlier commit, side by side.

The protocol of ``whole_rows_vs_dpsgd.py`` (function ``synthetic``: n rows uniform on [0, 100]^2, the box
[0, 100]^2, outputs in [0, 100], 49 inducing inputs on a 7 x 7 grid, EQ kernel, lengthscale 15, variance 400,
noise variance 0.5): ``DPSGPR(..., private_inputs=True, hyperparameters_public=True)`` built once, then
``release_function(epsilon=1, delta=0.01, seed=s)`` again and again (chunks of the default 20,000 rows). Per
version and n: the first release of the process (it includes TensorFlow's one-time start-up), the second (the
first on a reused feature map), and the median of the next ones (steady state). Each version runs in fresh
processes, alternately (before, after, before, after, ...) so that the shared machine's load falls on both
alike; each version's package comes from ``git archive`` of its commit into a temporary directory
(``PYTHONPATH``; so uncommitted edits in the working tree are not measured). The
two versions' released statistics at the same seed are compared (in units of their noise std: the change of
the released numbers, float round-off only).

Usage::

    python benchmarks/whole_rows_pass_speed.py                       # 7f3cad5 against HEAD, n = 10^4 and 10^5
    python benchmarks/whole_rows_pass_speed.py --before <rev> --rounds 3 --releases 9
    python benchmarks/whole_rows_pass_speed.py --quick               # one round, few releases
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

#: the tree before the pass was sped up (issue 36, "the whole-row release vs DP-SGD SVGP": 0.8-1.3 s at 10^5)
BEFORE = "7f3cad5"
SIZES = (10_000, 100_000)


def worker(sizes, releases: int) -> None:
    _common.quiet_tensorflow()
    import warnings

    import numpy as np

    import dpgp_gpflow
    from dpgp_gpflow.models import DPSGPR
    from whole_rows_vs_dpsgd import kernel, synthetic

    warnings.simplefilter("ignore")
    out = {"package": str(Path(dpgp_gpflow.__file__).resolve().parent), "cases": []}
    for n in sizes:
        train, _, p = synthetic(n)
        model = DPSGPR(train, kernel(p), p["Z"], noise_variance=p["noise_variance"], y_bounds=p["y_bounds"],
                       x_bounds=p["x_bounds"], private_inputs=True, hyperparameters_public=True)
        seconds = []
        for r in range(releases):
            t0 = time.perf_counter()
            released = model.release_function(epsilon=1.0, delta=0.01, seed=r)
            seconds.append(time.perf_counter() - t0)
            if r == 0:
                first = {k: np.asarray(v).tolist() for k, v in released.statistics.items()}
                std = {k: np.asarray(v).tolist() for k, v in released.statistics_noise_std.items()}
        out["cases"].append({"n": n, "seconds": seconds, "statistics": first, "noise_std": std})
    print(json.dumps(out))


def export(rev: str, into: Path) -> Path:
    """The package ``dpgp_gpflow`` of commit ``rev`` under ``into`` (``git archive``; nothing else)."""
    archive = subprocess.run(["git", "archive", rev, "dpgp_gpflow"], cwd=_common.REPO_ROOT, check=True,
                             capture_output=True).stdout
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=BEFORE, help=f"the earlier commit (default {BEFORE})")
    parser.add_argument("--after", default="HEAD", help="the later commit (default HEAD)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="rows (default 10^4 10^5)")
    parser.add_argument("--rounds", type=int, default=None, help="processes per version (default 3; quick 1)")
    parser.add_argument("--releases", type=int, default=None, help="releases per process and n (default 9; quick 4)")
    parser.add_argument("--quick", action="store_true", help="smoke test (writes results/quick/)")
    parser.add_argument("--timeout", type=float, default=600.0, help="wall-clock limit per process, s")
    parser.add_argument("--out-dir", type=Path, default=None, help="where to write the fragment")
    parser.add_argument("--worker", type=int, metavar="RELEASES", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.sizes, args.worker)
        return 0
    rounds = args.rounds or (1 if args.quick else 3)
    releases = max(3, args.releases or (4 if args.quick else 9))
    started = _common.utc_now()
    machine = _common.machine_info(gpus=[])
    before_rev = subprocess.run(["git", "rev-parse", "--short", args.before], cwd=_common.REPO_ROOT, check=True,
                                capture_output=True, text=True).stdout.strip()
    after_rev = subprocess.run(["git", "rev-parse", "--short", args.after], cwd=_common.REPO_ROOT, check=True,
                               capture_output=True, text=True).stdout.strip()
    runs = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {v: export(rev, Path(tmp) / v) for v, rev in (("before", args.before), ("after", args.after))}
        for r in range(rounds):
            for version in ("before", "after"):
                env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
                env["PYTHONPATH"] = str(trees[version]) + os.pathsep + env.get("PYTHONPATH", "")
                argv = [sys.executable, str(Path(__file__).resolve()), "--worker", str(releases),
                        "--sizes", *(str(n) for n in args.sizes)]
                res = _common.run_isolated(argv, timeout=args.timeout, env=env)
                out = None if res["timed_out"] else _common.last_json_line(res["stdout"])
                if out is None:
                    print(res["stderr"][-3000:])
                    raise SystemExit(f"{version} round {r}: failed")
                expected = str(trees[version].resolve())
                if not out["package"].startswith(expected):
                    raise SystemExit(f"{version}: imported {out['package']}, expected under {expected}")
                runs[version].append(out)
                print(f"round {r} {version}: " + "; ".join(
                    f"n={c['n']}: " + ", ".join(f"{t:.2f}" for t in c["seconds"]) for c in out["cases"]), flush=True)
    import numpy as np

    rows = []
    for i, n in enumerate(args.sizes):
        cell = {}
        for version, outs in runs.items():
            cases = [o["cases"][i] for o in outs]
            cell[version] = (statistics.median(c["seconds"][0] for c in cases),
                             statistics.median(c["seconds"][1] for c in cases),
                             statistics.median(t for c in cases for t in c["seconds"][2:]))
        b, a = runs["before"][0]["cases"][i], runs["after"][0]["cases"][i]
        gap = max(float(np.max(np.abs(np.asarray(a["statistics"][k]) - np.asarray(b["statistics"][k]))
                                / np.asarray(a["noise_std"][k]))) for k in a["statistics"])
        rows.append([f"{n:,}", *(f"{cell['before'][j]:.3f}" for j in range(3)),
                     *(f"{cell['after'][j]:.3f}" for j in range(3)),
                     f"{cell['before'][2] / cell['after'][2]:.1f}x", f"{gap:.1g}"])
    table = _common.markdown_table(
        ["n", "before: 1st release (s)", "before: 2nd (s)", "before: steady (s)", "after: 1st (s)", "after: 2nd (s)",
         "after: steady (s)", "steady speed-up", "released statistics: max change / noise std (seed 0)"], rows)
    intro = (f"One whole-row release, `DPSGPR(..., private_inputs=True, hyperparameters_public=True)."
             f"release_function(epsilon=1, delta=0.01)`, on the synthetic 2-D protocol of `whole_rows_vs_dpsgd.py` "
             f"(49 inducing inputs, EQ kernel, chunks of 20,000 rows). Before = commit {before_rev} (its package by "
             f"`git archive`), after = commit {after_rev} (likewise); {rounds} fresh process(es) per "
             f"version, alternately; each builds the model once and releases {releases} times per n. 1st: the "
             "process's first release (TensorFlow's start-up included); 2nd: the second (the model's feature map "
             "reused); steady: the median of the later releases over every process. The last column compares the "
             "two versions' released statistics at the same seed (float round-off only).")
    body = "\n\n".join([intro, table])
    path = _common.write_fragment("whole_rows_pass_speed", "Whole rows private: the speed of one release, before "
                                  "and after (issue 36)", body, machine=machine, started=started, quick=args.quick,
                                  out_dir=args.out_dir)
    print(table)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
