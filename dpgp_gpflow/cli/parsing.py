"""The parser of ``dpgp``: every command's options, help and examples (the standard library's ``argparse``; negative
numbers in any notation).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, NoReturn

from .. import __version__
from ..validation import OBJECTIVES
from .budget import cmd_budget_init, cmd_budget_show, cmd_demo
from .common import COMPOSITIONS, DEFAULT_SELECTION_SHARE, KERNELS, MIN_SELECTION_SHARE, SELECTION_MECHANISMS
from .predict import cmd_predict
from .release import cmd_release, selection_share_value
from .select import cmd_select
from .show import cmd_show
from .whole_rows import INDUCING

__all__: list = []  # internal: the package's entry point is dpgp_gpflow.cli.main


#: What the parser reads as a negative number, not an option: ``-1``, ``-0.5``, ``-.5``, ``-1e-3``, ``-1E+2``, ``-inf``,
#: ``-nan`` (argparse's own rule misses scientific notation: ``--bounds -1e-3 10`` was "expected at least one
#: argument"). No option of ``dpgp`` looks like one.
NEGATIVE_NUMBER = re.compile(r"^-(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)$", re.IGNORECASE)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER  # argparse's hook (Python 3.10 to 3.13)

    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse prints the usage too)
        sys.stderr.write(f"dpgp: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(2)


#: The "Examples:" epilog of ``dpgp --help`` and of each command's help (real commands: Howell1.csv is the
#: !Kung census file, semicolon-separated; its separator is sniffed). Bounds that hold any height (40-200 cm),
#: a delta far below 1/n.
EXAMPLES = {
    "dpgp": """\
  dpgp budget init budget.sqlite --epsilon 2 --delta 1e-5
  dpgp release Howell1.csv --x age --y height --bounds 40 200 --epsilon 1 --delta 1e-6 --grid 50 \\
       --ledger budget.sqlite -o kung.json
  dpgp show kung.json
  dpgp release Howell1.csv --x age --y height --bounds 40 200 --epsilon 1 --delta 1e-6 --sparse 20 \\
       --ledger budget.sqlite -o kung-fn.json
  dpgp predict kung-fn.json --at ages.csv -o pred.csv
  dpgp budget show budget.sqlite
  dpgp COMMAND --help   (every option of a command)""",
    "release": """\
  # hyperparameters selected privately (0.2 of epsilon), then released on a 50-point grid of ages:
  dpgp release Howell1.csv --x age --y height --bounds 40 200 --epsilon 1 --delta 1e-6 --grid 50 -o kung.json
  # public hyperparameters (chosen without the heights), released at the ages in test.csv:
  dpgp release Howell1.csv --x age --y height --bounds 40 200 --epsilon 1 --delta 1e-6 --at test.csv \\
       --lengthscale 10 --variance 400 --noise 50 --ledger budget.sqlite -o kung.json
  # a function usable anywhere (then: dpgp predict kung-fn.json --at NEW.csv -o pred.csv):
  dpgp release Howell1.csv --x age weight --y height --bounds 40 200 --epsilon 1 --delta 1e-6 --sparse 20 \\
       -o kung-fn.json
  # two private columns released together (a row's outputs are one person), hyperparameters selected privately:
  dpgp release Howell1.csv --x age --y height weight --bounds 40 200 0 150 --epsilon 1 --delta 1e-6 --grid 50 \\
       -o kung-hw.json
  # a spreadsheet's CSV: ';' and decimal commas are guessed; thousands separators (1.234,5) are accepted
  # only when given, and the marks can be given when the guess cannot tell:
  dpgp release kung-de.csv --x age --y height --bounds 40 200 --epsilon 1 --delta 1e-6 --grid 50 \\
       --sep ";" --decimal , --thousands . -o kung.json
  # whole rows private (ages too), residual releases after the statistics, all under one ledger event:
  dpgp release Howell1.csv --x age --y height --bounds 40 200 --private-inputs --x-bounds 0 100 --sparse 8 \\
       --lengthscale 15 --epsilon 2 --delta 1e-2 --residual -o rows.json
  # a classifier of the labels 0 / 1 in the column male (public hyperparameters), sparse on 20 inducing inputs:
  dpgp release Howell1.csv --x height weight --y male --classes 2 --lengthscale 10 --variance 4 --sparse 20 \\
       --epsilon 1 --delta 1e-6 -o male.json""",
    "predict": """\
  dpgp predict kung-fn.json --at ages.csv -o pred.csv
  dpgp predict kung-fn.json --at ages.csv --sep ";" -o pred.csv --force""",
    "select": """\
  # choose lengthscale, kernel variance and noise variance privately; print them as JSON:
  dpgp select Howell1.csv --x age --y height --bounds 40 200 --epsilon 0.5 --ledger budget.sqlite
  # choose among given lengthscales, then release with the choice:
  dpgp select Howell1.csv --x age --y height --bounds 40 200 --epsilon 0.5 --grid-lengthscale 5 10 20 \\
       --variance 400 --noise 50 --release-epsilon 1 --release-delta 1e-6 --grid 50 -o kung.json""",
    "show": """\
  dpgp show kung.json""",
    "budget": """\
  dpgp budget init budget.sqlite --epsilon 2 --delta 1e-5
  dpgp budget show budget.sqlite""",
    "budget init": """\
  dpgp budget init budget.sqlite --epsilon 2 --delta 1e-5
  dpgp budget init budget.sqlite --epsilon 4 --delta 1e-5 --composition pld""",
    "budget show": """\
  dpgp budget show budget.sqlite""",
    "demo": """\
  dpgp demo
  dpgp demo --epsilon 0.5 --seed 1 --output demo_output""",
}


def _examples(name: str) -> dict:
    """``add_parser`` keywords for an "Examples:" epilog kept as written."""
    return {"epilog": "Examples:\n" + EXAMPLES[name], "formatter_class": argparse.RawDescriptionHelpFormatter}


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary on stderr")


def _csv_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sep", metavar="SEP", default=None,
                   help="CSV field separator (default: guessed from the first lines among , ; TAB |, else ,; "
                        "TAB: --sep '\\t')")
    p.add_argument("--decimal", metavar="MARK", default=None,
                   help="CSV decimal mark, . or , (default: the other mark of --thousands , or .; else , when the "
                        "separator is ; and the first lines write numbers with one comma and none with a point; "
                        "else .); a value written otherwise is refused, never misread")
    p.add_argument("--thousands", metavar="CHAR", default=None,
                   help="accept this CSV thousands separator between groups of three digits (e.g. , in \"1,234\" "
                        "or . in 1.234,5; default: none, and numbers written with one are refused)")


def _data_options(p: argparse.ArgumentParser, variance_help: str, noise_help: str, classes: bool = False,
                  private_inputs: bool = False) -> None:
    p.add_argument("data", help="CSV or Parquet file with the inputs and the private output")
    p.add_argument("--x", nargs="+", required=True, metavar="COL",
                   help="input column(s): public" + (", or private too with --private-inputs" if private_inputs else ""))
    p.add_argument("--y", nargs="+", required=True, metavar="COL",
                   help="the private output column(s); several: one person's outputs per row, released together "
                        "(docs/guides/multi_output.md)")
    p.add_argument("--groups", metavar="COL", default=None,
                   help="public column of person identifiers (numbers or text): rows with the same value belong to "
                        "one person, and the release protects all of a person's outputs together (repeated "
                        "visits; docs/guides/groups.md); default: one row per person")
    p.add_argument("--bounds", nargs="+", type=float, required=not classes, metavar="LO HI",
                   help="public bounds of the output: LO HI, for every --y column, or one LO HI per --y column "
                        "(values outside are clipped)" + ("; required, except with --classes" if classes else ""))
    p.add_argument("--kernel", choices=sorted(KERNELS), default="se",
                   help="the GP kernel: se (squared exponential, the default), matern52 or matern32")
    p.add_argument("--variance", type=float, default=None, help=variance_help)  # never a unit default
    p.add_argument("--noise", type=float, default=None, help=noise_help)
    _csv_options(p)
    p.add_argument("--ledger", metavar="FILE", help="privacy ledger to check and charge (dpgp budget init)")
    p.add_argument("--seed", type=int, default=None, help="reproducible noise: NOT private against the seed's holder")


def _release_options(p: argparse.ArgumentParser, required_output: bool) -> None:
    p.add_argument("--at", metavar="TEST.csv", help="inputs to predict at (same column names as --x)")
    p.add_argument("--grid", type=int, metavar="N", help="predict on an N-per-axis grid over the inputs' range")
    p.add_argument("--sparse", type=int, metavar="M",
                   help="sparse GP with M inducing inputs (k-means of the public inputs; with --private-inputs "
                        "from the --x-bounds box, --inducing): a function")
    p.add_argument("--objective", choices=OBJECTIVES, default=None,
                   help="what the cloaking noise covariance minimises: mse (its trace, the squared error the noise "
                        "adds; default) or entropy (its log-determinant, as in the papers)")
    p.add_argument("--dataset", help="label recorded in the ledger and the release file (default: the file name)")
    p.add_argument("--no-clip", action="store_true",
                   help="do not clip the released means to --bounds (clipping is post-processing: free; the card "
                        "records it; the noise std reported is the Gaussian noise's before clipping)")
    p.add_argument("-o", "--output", required=required_output, metavar="OUT.json", help="the release file")
    p.add_argument("--force", action="store_true", help="overwrite OUT.json")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dpgp", description="Differentially private Gaussian-process releases (dpgp_gpflow "
                     f"{__version__}). The output column(s) are private; the inputs are public, or private too with release "
                     "--private-inputs.", **_examples("dpgp"))
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser,
                                help="the command to run (dpgp COMMAND --help for its options)")

    p = sub.add_parser(
        "release", help="release DP predictions (or a DP function with --sparse, a classifier with --classes)",
        **_examples("release"),
        description="Release DP predictions. Hyperparameters: give --lengthscale, --variance and --noise (public: "
                    "chosen without the outputs), or none of them to select them privately from the public default "
                    "grid (dpgp_gpflow.selection.default_grid) with --selection-share of --epsilon; the release gets "
                    "the rest, so the total charged is --epsilon. Released means are clipped to --bounds unless "
                    "--no-clip. With --classes K: a classifier of the labels 0 .. K-1 in --y "
                    "(docs/getting_started.md#classifiers).")
    _data_options(p, "kernel variance (public; with --lengthscale and --noise, else selected privately)",
                  "likelihood noise variance (public; with --lengthscale and --variance, else selected privately)",
                  classes=True, private_inputs=True)
    p.add_argument("--epsilon", type=float, required=True, help="the total epsilon (selection included)")
    p.add_argument("--delta", type=float, required=True,
                   help="the release's delta, in (0, 1) (the chance that the epsilon guarantee fails)")
    p.add_argument("--lengthscale", type=float, nargs="+", default=None, metavar="L",
                   help="one lengthscale, or one per --x column (public; with --variance and --noise)")
    p.add_argument("--selection-share", type=selection_share_value, default=None, metavar="S",
                   help="without --lengthscale/--variance/--noise: the share of --epsilon spent on selecting them "
                        f"privately (pure epsilon-DP; in [{MIN_SELECTION_SHARE:g}, 1), default "
                        f"{DEFAULT_SELECTION_SHARE:g}); 0 refuses instead")
    _release_options(p, required_output=True)
    _common(p)
    p.add_argument("--private-inputs", action="store_true",
                   help="the --x columns are private too: release whole rows (inputs and output) through "
                        "DPSGPR(private_inputs=True) with --x-bounds, a function on --sparse M inducing inputs from "
                        "the box (docs/guides/whole_rows.md); lengthscales not given are chosen privately inside the "
                        "one release, --variance and --noise not given are fitted on it")
    p.add_argument("--x-bounds", nargs="+", type=float, default=None, metavar="LO HI",
                   help="with --private-inputs: the public box of the inputs, one LO HI pair per --x column (declared "
                        "without looking at the data; inputs outside are clipped to it)")
    p.add_argument("--inducing", choices=INDUCING, default=None,
                   help="how --sparse M inducing inputs are built: kmeans on the public inputs (the default without "
                        "--private-inputs; refused with it), or from the --x-bounds box: grid (m per column, M = m^D; "
                        "the default for one private input column) or a halton (the default for more) or sobol design")
    p.add_argument("--no-clip-inputs", action="store_true",
                   help="with --private-inputs: refuse (nothing charged) when an input lies outside --x-bounds, "
                        "instead of clipping it to the box")
    p.add_argument("--residual", nargs="*", default=None, metavar="F",
                   help="with --private-inputs: after the whole-row statistics (without --lengthscale: every "
                        "candidate's of the default grid, one chosen), release the rows' clipped residual sums "
                        "against the estimate so far, each stage a public fraction of the one "
                        "budget (Gaussian-DP composition: one ledger event at --epsilon, --delta; "
                        "docs/whole_rows.md#residual-releases); --residual alone: the default fractions 0.5 0.25 "
                        "0.25 (the statistics, then two residual releases), or --residual F1 F2 ...: two or more "
                        "fractions > 0 summing to 1, the statistics' first; --residual histogram: the histogram "
                        "scheme (noised cell counts and b first, then four residual releases; needs --lengthscale, "
                        "--variance and --noise)")
    p.add_argument("--classes", type=int, default=None, metavar="K",
                   help="release a classifier: the --y column holds labels 0 .. K-1 (2: labels 0 / 1); the full-GP "
                        "Laplace classifier, or with --sparse M the sparse one (with --private-inputs --x-bounds: "
                        "whole rows); public --lengthscale and --variance, no --bounds or --noise "
                        "(docs/getting_started.md#classifiers)")
    p.add_argument("--steps", type=int, default=None, metavar="T",
                   help="with --classes and no --sparse: T Newton steps, composed to --epsilon, --delta (default 1)")
    p.set_defaults(run=cmd_release)

    p = sub.add_parser("predict", help="predict from a released function (no privacy cost)", **_examples("predict"))
    p.add_argument("release", metavar="OUT.json", help="a release file holding a function (dpgp release --sparse M)")
    p.add_argument("--at", required=True, metavar="NEW.csv",
                   help="CSV or Parquet file of inputs to predict at (the release's --x column names)")
    _csv_options(p)
    p.add_argument("-o", "--output", required=True, metavar="PRED.csv",
                   help="CSV file to write: the inputs with mean, variance and noise_std columns (a function of "
                        "several --y columns: mean_COL, variance_COL and noise_std_COL for each; a classifier: "
                        "probability and predicted_label for two classes, else p_class_0 ... and predicted_class)")
    p.add_argument("--force", action="store_true", help="overwrite PRED.csv")
    _common(p)
    p.set_defaults(run=cmd_predict)

    p = sub.add_parser(
        "select", help="choose hyperparameters privately (cross-validated utility, pure epsilon-DP)",
        **_examples("select"),
        description="Choose the lengthscale, kernel variance and noise variance privately (pure --epsilon) from a "
                    "grid: by default the public default grid (dpgp_gpflow.selection.default_grid: inputs, bounds "
                    "and kernel type only). --grid-lengthscale replaces its lengthscales; --variance and --noise "
                    "(both, public: chosen without the outputs) replace its variance pairs. Prints the choice as "
                    "JSON; with -o, then releases with it (--release-epsilon, --release-delta).")
    _data_options(p, "kernel variance (public, with --noise; else selected privately from the default grid)",
                  "likelihood noise variance (public, with --variance; else selected privately from the default grid)")
    p.add_argument("--grid-lengthscale", type=float, nargs="+", default=None, metavar="L",
                   help="the lengthscales to choose from (public; one shared by the --x columns; default: the "
                        "default grid's, one per column)")
    p.add_argument("--epsilon", type=float, required=True, help="the selection's budget (pure epsilon)")
    p.add_argument("--folds", type=int, default=5,
                   help="folds of the cross-validated utility (between 2 and the number of rows; default 5)")
    p.add_argument("--mechanism", choices=SELECTION_MECHANISMS, default="generalised_exponential",
                   help="the selection mechanism (all pure epsilon-DP; default: generalised_exponential, as "
                        "select_hyperparameters)")
    p.add_argument("--release-epsilon", type=float, help="with -o: release with the chosen values at this epsilon")
    p.add_argument("--release-delta", type=float, help="with -o: ... and this delta")
    _release_options(p, required_output=False)
    _common(p)
    p.set_defaults(run=cmd_select)

    p = sub.add_parser(
        "show", help="print a release file's privacy card (and a full release's values)",
        description="Print a release file's privacy card, and a full release's values, once the card is checked "
                    "(without TensorFlow): size, JSON, format version, SHA-256; every release's privacy parameters, "
                    "noise multiplier (recomputed), sensitivities, bounds, neighbours, rank and noise std (recomputed "
                    "from the noise factor), variances >= 0; the totals, the reproducible and clip flags; a "
                    "multi-class or multi-step classifier file's whole guarantee (composition, mu, steps; recomputed). Refused with one line otherwise. The readout "
                    "(kernel, inducing inputs, factors) and that the file holds nothing else are verified when the "
                    "file is loaded: dpgp predict, dpgp_gpflow.load.", **_examples("show"))
    p.add_argument("release", metavar="OUT.json", help="a release file (dpgp release -o OUT.json)")
    p.set_defaults(run=cmd_show)

    budget = sub.add_parser("budget", help="create or show a privacy ledger", **_examples("budget"))
    bsub = budget.add_subparsers(dest="budget_command", required=True, parser_class=_Parser,
                                 help="init: create a ledger; show: what it holds")
    p = bsub.add_parser("init", help="create a ledger with a fixed budget", **_examples("budget init"))
    p.add_argument("file", metavar="FILE", help="the ledger to create (an SQLite file; must not exist)")
    p.add_argument("--epsilon", type=float, required=True, help="the total epsilon every release together may spend")
    p.add_argument("--delta", type=float, required=True, help="the total delta, in (0, 1)")
    p.add_argument("--composition", choices=COMPOSITIONS, default="basic",
                   help="how spends add up: basic (sums, the default), gdp (Gaussian DP) or pld (privacy loss "
                        "distributions); the tighter ones allow more releases of Gaussian noise")
    p.set_defaults(run=cmd_budget_init)
    p = bsub.add_parser("show", help="spent, remaining and every event", **_examples("budget show"))
    p.add_argument("file", metavar="FILE", help="the ledger (dpgp budget init)")
    p.set_defaults(run=cmd_budget_show)

    p = sub.add_parser("demo", help="the diabetes demo (a table and a PNG)", **_examples("demo"))
    p.add_argument("--epsilon", type=float, default=1.0, help="epsilon of each release (default 1.0)")
    p.add_argument("--delta", type=float, default=0.01, help="delta of each release (default 0.01)")
    p.add_argument("--output", default="demo_output", help="folder for the PNG (default: demo_output/)")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the public train/test split (default 0)")
    p.add_argument("--seed", type=int, default=None, help="reproducible noise: NOT private against the seed's holder")
    p.set_defaults(run=cmd_demo)
    return parser
