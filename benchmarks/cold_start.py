"""Benchmark: a fresh process's first release against its warm releases, this tree beside another revision.

Every command-line run, notebook and fresh test process pays, on its first release, TensorFlow's tracing of
the compiled noise stage (:data:`dpgp_gpflow.mechanisms.cloaking.NOISE_SOLVERS`) and the first run's
instantiation of its graph (Grappler included); later releases in the same process reuse both. Each cell
here is one fresh process (``python benchmarks/cold_start.py --worker CASE`` with one tree's package first on
``PYTHONPATH``): import time, the first release (the 'cold' one) and the median of ``WARM`` further releases of
the same model and inputs. The sides alternate within each round (baseline then this tree), so both see the
same load; each cell is the median over the rounds, wall time with the process's CPU time in brackets.

Cases (overhead.py's setting: ``make_synthetic_2d(n, seed=0)``, EQ kernel lengthscale 10, variance 100, noise
variance 25, hyperparameters public, (1, 0.01)-DP, the default mse objective):

* ``gpr``: ``DPGPR.release`` at n = 1000, k = 200 test inputs (overhead.py's 1000 x 200 grid);
* ``sgpr``: ``DPSGPR.release`` at n = 1000, m = 50 inducing inputs (every 20th input), the same 200 test inputs.

Usage::

    python benchmarks/cold_start.py --baseline 81c363d            # writes benchmarks/results/cold_start.md
    python benchmarks/cold_start.py --quick                       # this tree only, 1 round (results/quick/)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
from cli_startup import baseline_tree  # noqa: E402

CASES = {"gpr": "DPGPR.release, n = 1000, k = 200", "sgpr": "DPSGPR.release, n = 1000, m = 50, k = 200"}
#: Warm releases after the first, in the same process (their median is reported).
WARM = 3


def worker(case: str) -> None:
    """One fresh process: import, build, first release, ``WARM`` more; a JSON line on stdout."""
    _common.quiet_tensorflow()
    t0, c0 = time.perf_counter(), time.process_time()
    import warnings

    import gpflow
    import numpy as np

    import dpgp_gpflow
    from dpgp_gpflow.datasets import make_synthetic_2d
    from dpgp_gpflow.models import DPGPR, DPSGPR
    from scaling import KERNEL_VARIANCE, LENGTHSCALE, NOISE_VARIANCE, grid

    imported = time.perf_counter() - t0, time.process_time() - c0
    warnings.filterwarnings("ignore", category=dpgp_gpflow.ClippingWarning)
    X, Y, bounds = make_synthetic_2d(1000, seed=0)
    Xnew, _ = grid(200)
    kernel = gpflow.kernels.SquaredExponential(lengthscales=LENGTHSCALE, variance=KERNEL_VARIANCE)
    options = dict(y_bounds=bounds, noise_variance=NOISE_VARIANCE, hyperparameters_public=True)
    model = DPGPR((X, Y), kernel, **options) if case == "gpr" else \
        DPSGPR((X, Y), kernel, inducing_variable=np.asarray(X)[::20], **options)

    def release() -> Tuple[float, float]:
        t, c = time.perf_counter(), time.process_time()
        model.release(Xnew, epsilon=1.0, delta=0.01)
        return time.perf_counter() - t, time.process_time() - c

    first = release()
    warm = [release() for _ in range(WARM)]
    print(json.dumps({"import": imported, "first": first, "warm": [statistics.median(x) for x in zip(*warm)]}))


def run(case: str, tree: Path) -> Dict[str, Tuple[float, float]]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(Path(__file__).resolve().parent)])
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", case], env=env,
                          capture_output=True, text=True, timeout=1800, cwd=tempfile.gettempdir())
    out = _common.last_json_line(proc.stdout)
    if proc.returncode != 0 or out is None:
        raise SystemExit(f"{case} in {tree}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", choices=sorted(CASES), help=argparse.SUPPRESS)
    parser.add_argument("--baseline", metavar="REV", help="a git revision to time beside this tree")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated, of: " + ", ".join(CASES))
    parser.add_argument("--repeats", type=int, default=3, help="rounds: fresh processes per cell (default 3)")
    parser.add_argument("--quick", action="store_true", help="one round (a smoke test; results/quick/)")
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return 0
    cases = [c for c in args.cases.split(",") if c]
    if any(c not in CASES for c in cases):
        parser.error(f"--cases: choose from {', '.join(CASES)}")
    repeats = 1 if args.quick else args.repeats
    started, machine = _common.utc_now(), _common.machine_info(gpus=[])
    results: Dict[Tuple[str, str], List[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="cold_start_") as tmp:
        sides: Dict[str, Path] = {}
        if args.baseline:
            sides[f"baseline {args.baseline}"] = baseline_tree(args.baseline, Path(tmp) / "baseline")
        head = subprocess.run(["git", "-C", str(_common.REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        sides[f"this tree (HEAD {head})" if head else "this tree"] = _common.REPO_ROOT
        for round_ in range(repeats):
            for case in cases:
                for side, tree in sides.items():
                    results.setdefault((case, side), []).append(run(case, tree))
            print(f"round {round_ + 1} of {repeats} done", file=sys.stderr)

    def cell(outs: List[dict], key: str) -> str:
        wall = statistics.median(o[key][0] for o in outs)
        cpu = statistics.median(o[key][1] for o in outs)
        return f"{wall:.2f} ({cpu:.2f})"

    rows = []
    for case in cases:
        for side in sides:
            outs = results[(case, side)]
            excess = statistics.median(o["first"][0] - o["warm"][0] for o in outs)
            rows.append([CASES[case], side, cell(outs, "import"), cell(outs, "first"), cell(outs, "warm"),
                         f"{excess:.2f}"])
    headers = ["release", "tree", "import (s)", "first release, cold (s)", f"warm release, median of {WARM} (s)",
               "cold - warm (s)"]
    body = (f"Median of {repeats} fresh processes per row (wall time; the process's CPU time in brackets). 'cold "
            "- warm' is the first release's extra time: tracing and first-run instantiation of the compiled "
            "stages.\n\n"
            + _common.markdown_table(headers, rows))
    print(body)
    path = _common.write_fragment("cold_start", "Cold start: a fresh process's first release", body,
                                  machine=machine, started=started, quick=args.quick)
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
