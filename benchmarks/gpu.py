"""Benchmark: the overhead of privacy on a GPU (release vs the non-private posterior, large n).

The measurement of ``benchmarks/overhead.py`` (same workers, same columns: each case in one fresh
process, both models built once, one cold call per side, then warm calls alternating between the
non-private ``predict_f`` and the DP release; the ratio is warm release / warm predict_f) at the
sizes a GPU is for:

* full GP (``DPGPR.release`` vs ``gpflow.models.GPR.predict_f``): n up to 50,000 (default
  n in {10000, 20000, 50000} x k in {1000, 5000}; n = 50,000 holds several 50,000^2 float64
  matrices, 20 GB each, at once: sized for an 80 GB GPU, an out-of-memory case is reported as failed);
* sparse (``DPGPRFITC.release_function`` + ``predict`` vs ``gpflow.models.GPRFITC.predict_f``):
  n up to 10^7 (default n in {10^5, 10^6, 10^7}, m = 100, k = min(n, 10^6)).

It runs unchanged on any machine with a GPU that TensorFlow sees
(``tf.config.list_physical_devices("GPU")``; the device name is recorded from
``tf.config.experimental.get_device_details``) and writes ``results/gpu.md``. Without a GPU it
refuses, unless ``--cpu-smoke``: tiny sizes on the CPU (GPUs hidden), written to
``results/quick/gpu.md``, to show the script works.

Usage::

    python benchmarks/gpu.py                                         # on a GPU machine
    python benchmarks/gpu.py --full-cases 10000x1000,50000x5000 --sparse-cases 10000000x100x1000000
    python benchmarks/gpu.py --cpu-smoke                             # anywhere: tiny, on the CPU
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
import overhead  # noqa: E402  (the workers and the tables)

FULL_DEFAULT = "10000x1000,10000x5000,20000x1000,20000x5000,50000x1000,50000x5000"
SPARSE_DEFAULT = "100000x100x100000,1000000x100x1000000,10000000x100x1000000"
FULL_SMOKE = "300x100,600x200"
SPARSE_SMOKE = "5000x20x5000"


def parse_sparse(spec: str) -> List[Tuple[int, int, int]]:
    cases = []
    for part in spec.split(","):
        if not part.strip():
            continue
        try:
            n, m, k = (int(x) for x in part.strip().lower().split("x"))
        except ValueError:
            raise SystemExit(f"bad sparse case {part!r}: use NxMxK[,NxMxK...] (e.g. 1000000x100x1000000)")
        cases.append((n, m, k))
    return cases


def detect_gpus(env) -> List[str]:
    """The GPU names TensorFlow sees, asked in a separate process (this one never touches the GPU)."""
    code = ("import json, sys; sys.path.insert(0, %r); import _common; _common.quiet_tensorflow(); "
            "print(json.dumps(_common.gpu_names()))" % str(_common.BENCH_DIR))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    out = None
    for line in reversed(res.stdout.strip().splitlines()):
        try:
            out = json.loads(line)
            break
        except json.JSONDecodeError:
            continue
    if res.returncode != 0 or not isinstance(out, list):
        raise SystemExit(f"could not ask TensorFlow for GPUs (exit {res.returncode}): {res.stderr[-500:]}")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full-cases", default=None,
                        help=f"full-GP cases NxK[,...] (default {FULL_DEFAULT}; smoke {FULL_SMOKE}); '' for none")
    parser.add_argument("--sparse-cases", default=None,
                        help=f"sparse cases NxMxK[,...] (default {SPARSE_DEFAULT}; smoke {SPARSE_SMOKE}); '' for none")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="tiny sizes on the CPU, GPUs hidden (writes results/quick/gpu.md)")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"warm pairs per case with n*k <= {overhead.CHEAP:,} (default 3; smoke 1)")
    parser.add_argument("--big-repeats", type=int, default=None, help="warm pairs for the larger cases (default 3; smoke 1)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per-case wall-clock limit, s (default 1800)")
    parser.add_argument("--budget", type=float, default=None,
                        help="start no new case after this many seconds (the rest: 'not run (time)')")
    parser.add_argument("--name", default="gpu", help="fragment name (default gpu)")
    parser.add_argument("--out-dir", type=Path, default=None, help="where to write the fragment")
    overhead.add_worker_args(parser)  # (workers run through overhead.py; accepted here too)
    args = parser.parse_args(argv)
    if overhead.worker_dispatch(args):
        return 0

    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.cpu_smoke:
        env["CUDA_VISIBLE_DEVICES"] = ""
        gpus: List[str] = []
    else:
        gpus = detect_gpus(env)
        if not gpus:
            print("no GPU visible to TensorFlow (tf.config.list_physical_devices('GPU') is empty): nothing to "
                  "measure. Use --cpu-smoke for a tiny CPU run of this script, or benchmarks/overhead.py for the "
                  "CPU benchmark.", file=sys.stderr)
            return 2
        print(f"GPU(s): {', '.join(gpus)}", flush=True)

    full_spec = args.full_cases if args.full_cases is not None else (FULL_SMOKE if args.cpu_smoke else FULL_DEFAULT)
    sparse_spec = args.sparse_cases if args.sparse_cases is not None else (SPARSE_SMOKE if args.cpu_smoke else SPARSE_DEFAULT)
    full_cases = overhead.parse_cases(full_spec) if full_spec.strip() else []
    sparse_cases = parse_sparse(sparse_spec)
    repeats = args.repeats if args.repeats is not None else (1 if args.cpu_smoke else 3)
    big_repeats = args.big_repeats if args.big_repeats is not None else (1 if args.cpu_smoke else 3)

    started = _common.utc_now()
    machine = _common.machine_info(gpus=gpus)
    run = overhead.run_all(full_cases, sparse_cases, repeats=repeats, big_repeats=big_repeats, timeout=args.timeout,
                           budget=args.budget, env=env, sparse_first=False)
    if not args.cpu_smoke:
        used = run["gpus"]
        if used:
            machine["gpus"] = used
    device = ("CPU only (--cpu-smoke: GPUs hidden, tiny sizes; not a GPU result)." if args.cpu_smoke
              else f"Device: {', '.join(machine['gpus'])} (TensorFlow's `get_device_details`), float64 throughout.")
    extra = device + (f" No new case was started after {args.budget:g} s of wall time ('not run (time)')."
                      if args.budget else "")
    body = overhead.build_body(run, repeats, big_repeats, extra, shared=args.cpu_smoke, grid_note=False)
    title = "Overhead of privacy on a GPU: release vs the non-private posterior (issue 13)"
    path = _common.write_fragment(args.name, title, body, machine=machine, started=started, quick=args.cpu_smoke,
                                  out_dir=args.out_dir)
    print(body)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
