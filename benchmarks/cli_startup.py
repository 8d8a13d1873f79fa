"""Benchmark: how fast each ``dpgp`` command answers (issue 34 item 4), this tree beside another revision.

Each command runs in a fresh process (``python -c "from dpgp_gpflow.cli import main; ..."``, what the
``dpgp`` console script runs) with the package of one tree first on ``PYTHONPATH``: this working tree,
and with ``--baseline REV`` the package of that revision (``git archive``, read only). The commands:

* ``dpgp --help``;
* ``dpgp budget show budget.sqlite`` (a basic ledger holding one release);
* a wrong-column refusal: ``dpgp release Howell1.csv --x agee ...`` (exit code 2);
* ``dpgp show kung.json`` (a full release's card and values);
* a release: ``dpgp release Howell1.csv --x age --y height --bounds 40 200 --epsilon 0.5 --delta 1e-6 --grid 50``
  with public hyperparameters (lengthscale 10, variance 1600, noise 25), on the 544 rows of the !Kung census.

Each tree has its own folder, its ledger and release file written by its own code. The rounds alternate
(every command, baseline then this tree, ``--repeats`` times), so both sides see the same load; each cell
is the median wall time of the repeats, with the median CPU time (user + system, of the child) beside it:
on a loaded machine the wall time grows with the load, the CPU time much less.

Target (issue 34): ``dpgp budget show``, a wrong-column error and ``dpgp show`` (which reads the card
without TensorFlow since io/card.py) each under 1.5 s; a release no slower than before.

Usage::

    python benchmarks/cli_startup.py --baseline 39455a9      # writes benchmarks/results/cli_startup.md
    python benchmarks/cli_startup.py --baseline 39455a9 --tree HEAD   # two commits, not the working tree
    python benchmarks/cli_startup.py --quick                  # this tree only, 1 repeat (results/quick/)
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

#: The console script's entry point, as ``dpgp`` runs it.
ENTRY = "import sys; from dpgp_gpflow.cli import main; sys.exit(main())"
#: Public hyperparameters of the timed release (heights in cm, ages in years; chosen without the heights).
PUBLIC = ["--lengthscale", "10", "--variance", "1600", "--noise", "25"]
RELEASE = ["release", "Howell1.csv", "--x", "age", "--y", "height", "--bounds", "40", "200", "--epsilon", "0.5",
           "--delta", "1e-6", "--grid", "50", *PUBLIC, "--quiet"]
#: (label, argv, expected exit code).
COMMANDS: List[Tuple[str, List[str], int]] = [
    ("dpgp --help", ["--help"], 0),
    ("dpgp budget show", ["budget", "show", "budget.sqlite"], 0),
    ("wrong column (release --x agee)", ["release", "Howell1.csv", "--x", "agee", "--y", "height", "--bounds", "40",
                                         "200", "--epsilon", "0.5", "--delta", "1e-6", "--grid", "50", "-o", "x.json"], 2),
    ("dpgp show (a full release)", ["show", "kung.json"], 0),
    ("dpgp release (544 rows, --grid 50)", [*RELEASE, "-o", "timed.json", "--force"], 0),
]
TARGETS = {"dpgp budget show": "< 1.5 s", "wrong column (release --x agee)": "< 1.5 s",
           "dpgp show (a full release)": "< 1.5 s", "dpgp release (544 rows, --grid 50)": "no slower than before"}


def data_file() -> Path:
    folder = Path(os.environ.get("DPGP_SHARED_DATA") or _common.REPO_ROOT.parent / "shared" / "data")
    path = folder / "Howell1.csv"
    if not path.is_file():
        raise SystemExit(f"{path}: not found (set DPGP_SHARED_DATA to the folder of Howell1.csv)")
    return path


def environment(tree: Path) -> Dict[str, str]:
    """A user's environment with ``tree``'s package first on the path (TensorFlow's log level unset)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "PYTHONPATH")}
    env["PYTHONPATH"] = str(tree)
    return env


def run(argv: Sequence[str], tree: Path, cwd: Path, expected: int) -> Tuple[float, float]:
    """Wall time and the child's CPU time (user + system) of one ``dpgp argv`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", ENTRY, *argv], cwd=cwd, env=environment(tree), capture_output=True,
                          text=True, timeout=900)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != expected:
        raise SystemExit(f"dpgp {' '.join(argv)} (in {tree}): exit {proc.returncode}, expected {expected}\n"
                         f"{proc.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def prepare(tree: Path, folder: Path, data: Path) -> None:
    """``folder``: the data, a ledger holding one release and that release's file, written by ``tree``'s code."""
    folder.mkdir(parents=True)
    shutil.copy(data, folder / "Howell1.csv")
    code = "import dpgp_gpflow; print(dpgp_gpflow.__file__)"
    where = subprocess.run([sys.executable, "-c", code], cwd=folder, env=environment(tree), capture_output=True,
                           text=True, check=True).stdout.strip()  # as run() runs dpgp: in folder
    if not Path(where).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"PYTHONPATH={tree} imports dpgp_gpflow from {where}")
    run(["budget", "init", "budget.sqlite", "--epsilon", "100", "--delta", "0.5"], tree, folder, 0)
    run([*RELEASE, "--ledger", "budget.sqlite", "-o", "kung.json"], tree, folder, 0)


def baseline_tree(revision: str, into: Path) -> Path:  # also --tree
    """The package of ``revision`` unpacked into ``into`` (``git archive``: reads the repository only)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(_common.REPO_ROOT), "archive", revision, "dpgp_gpflow"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", metavar="REV", help="a git revision to time beside this tree")
    parser.add_argument("--tree", metavar="REV", help="time this git revision instead of the working tree")
    parser.add_argument("--repeats", type=int, default=5, help="rounds (default 5; 1 with --quick)")
    parser.add_argument("--quick", action="store_true", help="one round (a smoke test; results/quick/)")
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    if repeats < 1:
        parser.error("--repeats must be >= 1")
    started, machine = _common.utc_now(), _common.machine_info(gpus=[])  # no TensorFlow in this process
    data = data_file()
    with tempfile.TemporaryDirectory(prefix="cli_startup_") as tmp:
        sides: Dict[str, Tuple[Path, Path]] = {}
        if args.baseline:
            sides[f"baseline {args.baseline}"] = (baseline_tree(args.baseline, Path(tmp) / "baseline"),
                                                  Path(tmp) / "run-baseline")
        if args.tree:
            sides[args.tree] = (baseline_tree(args.tree, Path(tmp) / "tree"), Path(tmp) / "run-tree")
        else:
            sides["this tree"] = (_common.REPO_ROOT, Path(tmp) / "run-this")
        for tree, folder in sides.values():
            prepare(tree, folder, data)
        times: Dict[Tuple[str, str], List[Tuple[float, float]]] = {}
        for round_ in range(repeats):
            for label, command, expected in COMMANDS:
                for side, (tree, folder) in sides.items():
                    times.setdefault((label, side), []).append(run(command, tree, folder, expected))
            print(f"round {round_ + 1} of {repeats} done", file=sys.stderr)

    def cell(label: str, side: str) -> str:
        walls, cpus = zip(*times[(label, side)])
        return f"{statistics.median(walls):.2f} ({statistics.median(cpus):.2f})"

    headers = ["command", *(f"{side}: wall (CPU) s" for side in sides), "target"]
    rows = [[label, *(cell(label, side) for side in sides), TARGETS.get(label, "")] for label, _, _ in COMMANDS]
    body = (f"Median of {repeats} fresh processes per cell: wall time, and in brackets the child's CPU time "
            "(user + system). Data: Howell1.csv (544 rows).\n\n" + _common.markdown_table(headers, rows))
    print(body)
    path = _common.write_fragment("cli_startup", "Command line: start-up time of each command", body,
                                  machine=machine, started=started, quick=args.quick)
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
