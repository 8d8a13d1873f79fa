"""Assemble ``benchmarks/RESULTS.md`` from the fragments in ``benchmarks/results/``.

Each benchmark script writes its own fragment (``benchmarks/results/<name>.md``) with its table,
the command that made it, the machine and the date; this script only concatenates them, in a
fixed order (known benchmarks first, any others alphabetically). Fragments of ``--quick`` runs
live in ``benchmarks/results/quick/`` and are not collected.

Usage::

    python benchmarks/make_results.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

ORDER = ["optimiser_kung", "scaling", "scaling_gpu", "utility_kung"]
SCRIPTS = {
    "optimiser_kung": "benchmarks/optimiser_kung.py",
    "scaling": "benchmarks/scaling.py",
    "scaling_gpu": "benchmarks/scaling.py",
    "utility_kung": "benchmarks/utility_kung.py",
    "overhead": "benchmarks/overhead.py",
    "overhead_xla": "benchmarks/overhead_xla.py",
    "overhead_small_n": "benchmarks/overhead.py",
    "gpu": "benchmarks/gpu.py",
    "exact_noise": "benchmarks/exact_noise.py",
    "selection_kung": "benchmarks/selection_kung.py",
    "selection_synthetic": "benchmarks/selection_synthetic.py",
    "scale_out": "benchmarks/scale_out.py",
    "multiclass_mnist": "benchmarks/multiclass_mnist.py",
    "groups": "benchmarks/groups.py",
    "multi_output": "benchmarks/multi_output.py",
    "cli_startup": "benchmarks/cli_startup.py",
    "cold_start": "benchmarks/cold_start.py",
    "whole_rows_vs_dpsgd": "benchmarks/whole_rows_vs_dpsgd.py",
    "whole_rows_kung": "benchmarks/whole_rows_kung.py",
    "whole_rows_scale": "benchmarks/whole_rows_scale.py",
    "whole_rows_scale_10000000": "benchmarks/whole_rows_scale.py",
    "whole_rows_lengthscales": "benchmarks/whole_rows_lengthscales.py",
    "whole_rows_headroom": "benchmarks/whole_rows_headroom.py",
    "whole_rows_scale_dask": "benchmarks/whole_rows_scale.py",
    "whole_rows_pass_speed": "benchmarks/whole_rows_pass_speed.py",
    "whole_rows_projection": "benchmarks/whole_rows_projection.py",
    "whole_rows_residual": "benchmarks/whole_rows_residual.py",
    "whole_rows_scheme": "benchmarks/whole_rows_scheme.py",
}

HEADER = """# Benchmark results

Every number below was written by the script named beside its table (the exact command, the
machine and the date are recorded under each table); none was typed in by hand. To refresh a
table, re-run its command, then `python benchmarks/make_results.py` to rebuild this file from
the fragments in `benchmarks/results/`. Published figures are quoted for comparison only.

GPU: every table below was measured on CPUs. No GPU has been lent to this project's tasks (the
`device` tool's status showed none in its sessions of 2026-11-24 and 2026-11-25), so there is no GPU table yet.
`benchmarks/gpu.py` runs unchanged on a machine with a GPU (full GP up to n = 50,000, sparse up to
n = 10^7; it records the device's name) and writes `results/gpu.md`, which this file then includes;
`python benchmarks/gpu.py --cpu-smoke` runs it at tiny sizes anywhere.
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results-dir", type=Path, default=_common.RESULTS_DIR)
    parser.add_argument("--output", type=Path, default=_common.BENCH_DIR / "RESULTS.md")
    args = parser.parse_args(argv)

    fragments = {p.stem: p for p in sorted(args.results_dir.glob("*.md"))}
    names = [n for n in ORDER if n in fragments] + sorted(n for n in fragments if n not in ORDER)
    parts = [HEADER]
    if not names:
        parts.append("No results yet: run the benchmark scripts (usage in each script's docstring).\n")
    for name in names:
        script = SCRIPTS.get(name, "(see the command below)")
        path = fragments[name]
        shown = path.relative_to(_common.REPO_ROOT) if path.is_relative_to(_common.REPO_ROOT) else path
        lines = path.read_text().strip().splitlines()
        heading, rest = (lines[0], lines[1:]) if lines and lines[0].startswith("#") else ("## " + name, lines)
        parts.append("\n".join([f"<!-- assembled from {shown} -->", heading, "",
                                 f"*Made by `{script}` (exact command below).*", *rest, ""]))
    args.output.write_text("\n".join(parts))
    print(f"wrote {args.output} from {len(names)} fragment(s): {', '.join(names) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
