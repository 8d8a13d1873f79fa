"""The ``dpgp`` command line: private GP releases from CSV or Parquet files, for data owners.

``dpgp release``, ``dpgp predict``, ``dpgp select``, ``dpgp show``, ``dpgp budget init|show`` and
``dpgp demo`` (``dpgp --help``; ``dpgp COMMAND --help``). Every input is checked before the ledger
is touched or any noise is drawn: bad input prints one line ``dpgp: error: ...`` and exits with
code 2, with nothing drawn and nothing spent; the package's warnings print as one line
``dpgp: warning: ...``. The standard library's ``argparse`` parses the options, so that
``--x COL [COL ...]`` takes several columns as written.

Tables (:mod:`dpgp_gpflow.io.tables`: :func:`~dpgp_gpflow.io.tables.read_table`,
:func:`~dpgp_gpflow.io.tables.columns`): CSV files with their separator (``--sep``), decimal mark
(``--decimal``) and thousands separator (``--thousands``) given or guessed, or Parquet files; every
selected cell must be a finite number (no missing values, booleans, text or numbers in another
format), and a CSV row must have as many fields as the header, or the command stops with one line
naming the column and the row.

Privacy model (``docs/privacy_model.md``): the ``--x`` columns are public, the ``--y`` column is
private and clipped to ``--bounds`` (several ``--y`` columns: one person's outputs per row, released
together, each clipped to its own bounds); hyperparameters given on the command line are public (chosen
without the outputs), or chosen privately by ``dpgp select`` (from the default grid, unless
``--grid-lengthscale`` or both ``--variance`` and ``--noise`` replace part of it). ``dpgp release`` without
``--lengthscale``, ``--variance`` and ``--noise`` chooses them privately from the public default grid
(:func:`~dpgp_gpflow.selection.default_grid`), spending ``--selection-share`` (default 0.2) of the
epsilon given; the release gets the rest, so the total charged is the epsilon given (basic
composition). Released means are clipped to ``--bounds`` (post-processing, free; ``--no-clip``
turns it off); the privacy card records both.

With ``--private-inputs --x-bounds LO HI ...`` (:func:`cmd_release_whole_rows`) the ``--x`` columns are private
too: whole rows are released through ``DPSGPR(..., private_inputs=True)`` (docs/guides/whole_rows.md), inputs
clipped to the public box, inducing inputs built from the box alone (never k-means), lengthscales given or chosen
inside the one release, variances given or fitted on it; one ledger event.

Start-up (issue 34): a command imports TensorFlow only once every check that needs no model has passed
(arguments, files, columns, the output, the ledger's existence), with its start-up log silenced
(:func:`~dpgp_gpflow.__main__.import_tensorflow_quietly`); ``dpgp budget init|show``, ``--help`` and every
such refusal never import it (``tests/test_cli_startup.py``; times in ``benchmarks/cli_startup.py``).
``dpgp show`` reads and checks the file's privacy card without it (:mod:`dpgp_gpflow.io.card`: the checks
:func:`~dpgp_gpflow.io.loading.load` runs first); ``dpgp predict`` loads the file, readout included, which needs it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import secrets
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, NoReturn, Optional, Sequence, Tuple, cast

import numpy as np

# Only light modules here (no TensorFlow, GPflow, pandas, SciPy or dp_accounting: tests/test_entry_point.py and
# tests/test_cli_startup.py check); the rest is imported by the functions that use it, TensorFlow only once
# every check that needs no model has passed (import_tensorflow_quietly).
from . import __version__
from .__main__ import import_tensorflow_quietly, run_demo
from .exceptions import BudgetExceededError, LedgerError, PrivacyLeakError
from .io.tables import (  # noqa: F401  (sniff_separator, sniff_decimal: dpgp_gpflow.cli's names before io/tables)
    Table,
    TableError,
    columns,
    csv_format,
    one_line,
    person_groups,
    read_table,
    sniff_decimal,
    sniff_separator,
)
from .validation import MAX_MAGNITUDE, OBJECTIVES, validate_bounds, validate_delta, validate_epsilon

if TYPE_CHECKING:
    import gpflow

    from .accounting import PrivacyAccountant, Reservation
    from .released import Released
    from .selection import Selection

__all__ = ["main"]

#: The share of ``dpgp release``'s epsilon spent on selecting the hyperparameters when none are given.
DEFAULT_SELECTION_SHARE = 0.2
#: The smallest ``--selection-share`` other than 0: below it the selection has almost no budget (and at
#: 1e-320 its arithmetic underflows); give public hyperparameters instead.
MIN_SELECTION_SHARE = 1e-3
#: Folds of the selection's cross-validation (fewer when there are fewer rows).
SELECTION_FOLDS = 5

#: ``--kernel`` choices: the class names in ``gpflow.kernels`` (imported when a kernel is built).
KERNELS = {
    "se": "SquaredExponential",
    "matern52": "Matern52",
    "matern32": "Matern32",
}
#: ``--mechanism`` and ``--composition`` choices: the library's own ``selection.MECHANISMS`` and
#: ``composition.COMPOSITIONS``, written out so that parsing imports neither
#: (tests/test_entry_point.py checks that they agree).
#: MAX_MAGNITUDE (dpgp_gpflow.validation): the largest magnitude of a bound, a public input value or a
#: hyperparameter (and 1 / the smallest hyperparameter): beyond it squares and sums in the release could overflow
#: to inf or NaN, so such a value is refused before anything is spent (rescale the data instead).

SELECTION_MECHANISMS: Tuple[str, ...] = ("generalised_exponential", "exponential", "permute_and_flip")
COMPOSITIONS: Tuple[str, ...] = ("basic", "gdp", "pld")


class UsageError(Exception):
    """Bad input: reported as one line, exit code 2, before anything is drawn or spent (as a
    :class:`~dpgp_gpflow.io.tables.TableError`, a table that cannot be read as asked)."""


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


# ---------------------------------------------------------------------------------------------
# Column names (the tables themselves: dpgp_gpflow.io.tables)


def check_column_names(x: Sequence[str], y: Sequence[str], groups: Optional[str] = None) -> None:
    """``UsageError`` when ``--x`` names a column twice or ``--y`` (the private output) is also an ``--x``
    column (a public input: it would go unnoised into the model's inputs, the k-means inducing inputs of
    ``--sparse`` and the release file) or the ``--groups`` column (public person identifiers). Checked
    before any file is read."""
    repeated = sorted({c for c in x if list(x).count(c) > 1})
    if repeated:
        raise UsageError(f"--x names the column(s) {repeated} more than once")
    repeated = sorted({c for c in y if list(y).count(c) > 1})
    if repeated:
        raise UsageError(f"--y names the column(s) {repeated} more than once")
    for c in y:
        if c in x:
            raise UsageError(f"--y {c!r} is also an --x column: the private output cannot be a public input")
    if groups is not None and groups in y:
        raise UsageError(f"--groups {groups!r} is a --y column: the person identifiers must be public")


def _read(args, path: Path, expect: Sequence[str] = ()) -> Table:
    """``path`` read with the command's ``--sep``, ``--decimal`` and ``--thousands``; the ``expect`` columns
    checked as soon as the header is read (:func:`read_table`)."""
    return read_table(path, *csv_format(args.sep, args.decimal, args.thousands), expect=expect)


def _output(path: Path, force: Optional[bool], *protected: Tuple[str, Optional[str]]) -> Path:
    """``path`` checked as a place to write a result, before anything is drawn or spent: not a folder, not
    an existing file unless ``force``, never one of the ``protected`` ``(flag, path)`` files (the ledger, the
    data, the inputs), in a folder that exists and that this user can write in."""
    if path.is_dir():
        raise UsageError(f"{path} is a folder: give a file name")
    if path.exists() and not force:
        raise UsageError(f"{path} exists" + (" (use --force to overwrite)" if force is not None else ""))
    for flag, other in protected:  # never overwrite the ledger or an input, --force or not
        if other is not None and path.exists() and Path(other).exists() and os.path.samefile(path, other):
            raise UsageError(f"{path} is the {flag} file: write the result elsewhere")
    folder = path.parent
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{folder}: cannot write in this folder (permission denied)")
    return path


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


class _StagedFile:
    """A result kept before it is charged: :meth:`write` (a release's ``store`` step,
    :class:`~dpgp_gpflow.measurement.Measurement`) writes it to a temporary file beside ``out``; leaving the
    ``with`` block around :func:`~dpgp_gpflow.measurement.measure` renames it into place once the spend is
    recorded. A failure before that removes the temporary file and the reservation is given back (the result
    was never seen): ``UsageError``, nothing charged. If the rename fails after the spend is recorded, the
    paid-for result is kept in the temporary file and named. A release's two steps (draw, write) show as a
    bar on a terminal (:meth:`drawing`)."""

    def __init__(self, out: Path, progress: bool = False) -> None:
        self.out, self._progress = out, progress
        self.tmp: Optional[Path] = None  # written, not yet in place
        self._steps: Any = None  # a progress.Progress once the release starts

    def drawing(self) -> None:
        """The release starts (its mechanism, after any selection): the bar of its two steps."""
        from .progress import Progress

        self._steps = Progress(2, self._progress, "release")

    def write(self, write: Callable[[Path], Any]) -> None:
        if self._steps is not None:
            self._steps.update("write")
        tmp = self.out.with_name(f".{self.out.name}.{secrets.token_hex(8)}.tmp")
        try:
            write(tmp)
        except (OSError, ValueError) as exc:
            _unlink(tmp)
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise UsageError(f"{self.out}: cannot write it ({reason}); nothing was charged") from None
        except BaseException:
            _unlink(tmp)
            raise
        self.tmp = tmp
        if self._steps is not None:
            self._steps.update()

    def __enter__(self) -> "_StagedFile":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if self._steps is not None:
            self._steps.close()
        tmp, self.tmp = self.tmp, None
        if tmp is None:
            return
        if kind is not None:  # written, then not charged (the ledger could not record it): never seen
            _unlink(tmp)
            if isinstance(exc, (OSError, ValueError)):
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise UsageError(f"{self.out}: cannot write it ({reason}); nothing was charged") from None
            return
        try:
            os.replace(tmp, self.out)
        except OSError as exc:
            raise UsageError(f"{self.out}: could not be put in place ({exc.strerror or exc}); the result is charged "
                             f"and written to {tmp}: move it there yourself") from None


def _privacy(epsilon: float, delta: float) -> Tuple[float, float]:
    try:
        return validate_epsilon(epsilon), validate_delta(delta)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def _bounds(args) -> Any:
    """``--bounds``: one ``LO HI`` pair for every ``--y`` column, or one pair per column (in their order)."""
    values, outputs = list(args.bounds), len(args.y)
    if len(values) not in (2, 2 * outputs):
        per_column = "" if outputs == 1 else f" or one LO HI per --y column ({2 * outputs} numbers)"
        raise UsageError(f"--bounds takes LO HI for all outputs{per_column}, got {len(values)} number(s)")
    pairs = [tuple(values[i:i + 2]) for i in range(0, len(values), 2)]
    checked = []
    for pair in pairs:
        try:
            lo, hi = validate_bounds(pair)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"--bounds: {exc}") from None
        if max(abs(lo), abs(hi)) > MAX_MAGNITUDE:  # (0, 1e308) released means of +-inf and a NaN noise std
            raise UsageError(f"--bounds must lie within +-{MAX_MAGNITUDE:g} (the release would overflow), got "
                             f"({lo:g}, {hi:g}): rescale the output")
        checked.append((lo, hi))
    return checked[0] if len(checked) == 1 else tuple(checked)


def _positive(name: str, value: Optional[float]) -> Optional[float]:
    if value is not None and not (math.isfinite(value) and value > 0.0):
        raise UsageError(f"{name} must be finite and > 0, got {value}")
    if value is not None and not (1.0 / MAX_MAGNITUDE <= value <= MAX_MAGNITUDE):
        raise UsageError(f"{name} must be between {1.0 / MAX_MAGNITUDE:g} and {MAX_MAGNITUDE:g} (the release "
                         f"would overflow), got {value:g}")
    return value


def _noise_variance(value: Optional[float]) -> None:
    """``--noise`` against GPflow's lower bound on a likelihood variance
    (:func:`~dpgp_gpflow.validation.validate_noise_variance` reads GPflow's configuration: checked once
    TensorFlow is imported, before the model is built)."""
    from .validation import validate_noise_variance

    try:
        validate_noise_variance(value)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--noise: {exc}") from None


def _multiplier(epsilon: float, delta: float) -> float:
    """The Gaussian noise multiplier of a release at (``epsilon``, ``delta``), computed before anything is read
    or reserved; the library's refusal (e.g. a noise scale that overflows) as one line."""
    from .calibration import gaussian_multiplier

    try:
        return gaussian_multiplier(epsilon, delta)
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise UsageError(one_line(exc)) from None


def _seed(args) -> None:
    """``--seed`` checked before anything is read: an integer in [0, 2**128)."""
    from .validation import validate_seed

    try:
        validate_seed(args.seed)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--seed: {exc}") from None


def _overflow(exc: Exception, reservation: Optional[Reservation] = None) -> UsageError:
    """A library refusal inside a release (public terms not finite, a zero cloaking matrix) as one line.

    Without ``reservation`` it depends on public values only: the caller's reservation is given back,
    nothing is charged. After a private selection it may depend on the configuration chosen, so what
    was drawn (the selection) is recorded in ``reservation`` first, and the message says so."""
    hint = "are the inputs, bounds or hyperparameters too large or small?"
    drawn = reservation.commit_drawn() if reservation is not None else ()
    if drawn:
        return UsageError(f"{exc} ({hint}); charged for what was drawn before the refusal (the private selection): "
                          f"epsilon {sum(e.epsilon for e in drawn):.6g}, delta {sum(e.delta for e in drawn):.6g}")
    message = one_line(exc)
    if "nothing was reserved" in message:  # refused before reserving: the library's line says why
        return UsageError(message)
    said = "nothing was charged" in message  # library refusals may say it already
    return UsageError(f"{message} ({hint})" if said else f"{message}; nothing was charged ({hint})")


def _kernel_class(name: str) -> Any:
    """The GPflow kernel class of ``--kernel name`` (TensorFlow imported quietly first)."""
    import_tensorflow_quietly()
    import gpflow

    return getattr(gpflow.kernels, KERNELS[name])


def _lengthscales(args, dim: int) -> List[float]:
    """``--lengthscale`` checked (no TensorFlow): one value, or one per ``--x`` column, each within range."""
    ls = list(args.lengthscale)
    if len(ls) not in (1, dim):
        raise UsageError(f"--lengthscale takes one value or one per --x column ({dim}), got {len(ls)}")
    for v in ls:
        _positive("--lengthscale", v)
    return ls


def _kernel(args, dim: int, lengthscales: Sequence[float]) -> gpflow.kernels.Kernel:
    """The ``--kernel`` with ``lengthscales`` (checked by :func:`_lengthscales`) and ``--variance``; without
    ``--variance``, placeholders the private selection replaces (one lengthscale per column)."""
    ls = list(lengthscales)
    if args.variance is None:
        return _kernel_class(args.kernel)(lengthscales=ls[0] if dim == 1 else np.full(dim, ls[0], dtype=np.float64))
    return _kernel_class(args.kernel)(lengthscales=ls[0] if len(ls) == 1 else np.asarray(ls, dtype=np.float64),
                                      variance=_positive("--variance", args.variance))


def _ledger(args) -> Optional[PrivacyAccountant]:
    from .accounting import PrivacyAccountant

    if args.ledger is None:
        return None
    path = Path(args.ledger)
    if not path.is_file():
        raise UsageError(f"{path}: no ledger there (create one with: dpgp budget init {path} --epsilon E --delta D)")
    return PrivacyAccountant.open(path, dataset=args.dataset or Path(args.data).name)


def _test_inputs(args, X: np.ndarray) -> Optional[np.ndarray]:
    if args.at is not None and args.grid is not None:
        raise UsageError("give --at or --grid, not both")
    if args.at is not None:
        path = Path(args.at)
        return columns(_read(args, path, args.x), args.x)
    if args.grid is not None:
        if not (1 <= args.grid <= 10_000):
            raise UsageError(f"--grid must be between 1 and 10000 points per axis, got {args.grid}")
        axes = [np.linspace(lo, hi, args.grid) for lo, hi in zip(X.min(axis=0), X.max(axis=0))]  # public range
        if args.grid ** X.shape[1] > 1_000_000:
            raise UsageError(f"--grid {args.grid} over {X.shape[1]} inputs is {args.grid ** X.shape[1]} points; use fewer")
        return np.stack([g.reshape(-1) for g in np.meshgrid(*axes, indexing="ij")], axis=1)
    return None


#: A full release (``--at``/``--grid``) forms the k x n map of its k inputs and n rows (and more of that
#: size): refused above this many entries (1 GiB of float64), before anything is read from the outputs.
MAX_MAP_ENTRIES = 2**27


# ---------------------------------------------------------------------------------------------
# Commands


def _release_inputs(args, X: np.ndarray) -> Optional[np.ndarray]:
    """The public inputs to release at (``--at``/``--grid``), checked against ``--sparse`` (a sparse release
    is a function, released once; ``--at``/``--grid`` with it are refused rather than ignored)."""
    if args.sparse is not None and (args.at is not None or args.grid is not None):
        given = "--at" if args.at is not None else "--grid"
        raise UsageError(f"{given} with --sparse: a sparse release is a function usable anywhere; release it "
                         f"without {given}, then predict at your inputs for free (dpgp predict OUT.json --at NEW.csv)")
    Xnew = _test_inputs(args, X)
    if args.sparse is None and Xnew is None:
        raise UsageError("give --at TEST.csv or --grid N (or --sparse M to release a function usable anywhere)")
    if Xnew is not None and Xnew.shape[0] * X.shape[0] > MAX_MAP_ENTRIES:  # public sizes only
        raise UsageError(f"a full release at {Xnew.shape[0]} inputs from {X.shape[0]} rows forms a "
                         f"{Xnew.shape[0]} x {X.shape[0]} map (over {MAX_MAP_ENTRIES:,} entries): release at fewer "
                         "inputs, or release a function with --sparse M and predict anywhere for free")
    if args.sparse is not None and not (1 <= args.sparse <= X.shape[0]):
        raise UsageError(f"--sparse must be between 1 and the number of rows ({X.shape[0]}), got {args.sparse}")
    return Xnew


def _model(args, X: np.ndarray, Y: np.ndarray, bounds: Tuple[float, float], kernel: gpflow.kernels.Kernel,
           noise: Optional[float], public: bool = False, groups: Optional[np.ndarray] = None):
    """The private model (``DPGPR``, or ``DPGPRFITC`` with ``--sparse M`` k-means inducing inputs);
    ``public``: the values given are public (given on the command line), declared so; ``groups``: the
    ``--groups`` person codes (releases then protect all of a person's rows)."""
    import_tensorflow_quietly()
    from .models import DPGPR, DPGPRFITC, kmeans_inducing_inputs

    if args.sparse is None:
        return DPGPR((X, Y), kernel, y_bounds=bounds, noise_variance=noise, hyperparameters_public=public,
                     groups=groups)
    Z = kmeans_inducing_inputs(X, args.sparse)  # the public --x columns only (never --y: check_column_names)
    return DPGPRFITC((X, Y), kernel, Z, noise_variance=noise, y_bounds=bounds, hyperparameters_public=public,
                     groups=groups)


def _groups_card(args, groups: Optional[np.ndarray]) -> dict:
    """The card's record of the ``--groups`` column (public: the person codes' counts); each release in the
    card states the relation it protects (``neighbours``)."""
    if groups is None:
        return {}
    sizes = np.bincount(groups)
    return {"groups": {"column": args.groups, "persons": int(sizes.size), "largest_rows": int(sizes.max())}}


def _hyperparameters(model) -> dict:
    """The model's public hyperparameters, for the card."""
    return {"lengthscales": np.asarray(model.kernel.lengthscales.numpy(), dtype=np.float64).tolist(),
            "kernel_variance": float(model.kernel.variance.numpy()),
            "noise_variance": float(model.likelihood.variance.numpy())}


def _release(args, model, Xnew: Optional[np.ndarray], epsilon: float, delta: float, reservation: Reservation,
             file: _StagedFile) -> Released:
    """Release ``model`` within ``reservation`` (the deferred view :func:`~dpgp_gpflow.measurement.measure`
    hands a release with a ``store`` step: its draw is recorded once the file is written), clipped to the
    bounds unless ``--no-clip``. The model's hyperparameters are public: given on the command line or
    selected privately."""
    model.declare_hyperparameters_public()
    file.drawing()
    if args.sparse is None:
        released = model.release(Xnew, epsilon=epsilon, delta=delta, objective=_objective(args),
                                 accountant=reservation, seed=args.seed)
    else:
        released = model.release_function(epsilon=epsilon, delta=delta, objective=_objective(args),
                                          accountant=reservation, seed=args.seed)
    if not all(np.all(np.isfinite(r.noise_std)) and np.all(np.isfinite(r.noise_factor))
               for r in released.releases):  # public (inputs, bounds, hyperparameters, budget): not the data
        raise ValueError("the release's noise is not finite")
    return released.unclipped() if args.no_clip else released.clipped()  # post-processing: free


def _store(args, data: Path, model, Xnew: Optional[np.ndarray], file: _StagedFile,
           card_extras: dict) -> Callable[[Released], None]:
    """The ``store`` step of a release's measurement: write it to ``file`` (renamed into place once charged)
    with its card (``card_extras`` read when it is written: a private selection adds its record first)."""

    def store(released: Released) -> None:
        extras = card_extras
        if Xnew is not None:  # public (--at or --grid): stored so that `dpgp show` can print the values at them
            extras = {**extras, **_card_inputs(Xnew)}
        file.write(lambda tmp: released.save(
            tmp, inputs=Xnew if args.sparse is None else None, columns=list(args.x),
            dataset=args.dataset or data.name, hyperparameters=_hyperparameters(model), **extras))

    return store


#: ``dpgp release --at/--grid`` stores the inputs in the card (``release_inputs``, rows of numbers) when they
#: are at most this many numbers (rows x columns; about 200 kB of JSON); beyond, the first :data:`SHOW_ROWS`
#: rows only (what ``dpgp show`` prints), with ``release_inputs_rows`` the number of rows, so that a large
#: ``--grid`` (up to 1,000,000 points) does not fill the card.
STORED_INPUT_VALUES = 10_000


def _card_inputs(Xnew: np.ndarray) -> dict:
    """The card's record of the public inputs of a full release (:data:`STORED_INPUT_VALUES`)."""
    if Xnew.size <= STORED_INPUT_VALUES:
        return {"release_inputs": Xnew.tolist()}
    return {"release_inputs": Xnew[:SHOW_ROWS].tolist(), "release_inputs_rows": int(Xnew.shape[0])}


#: ``--objective`` when not given (the noise optimiser's default).
DEFAULT_OBJECTIVE = "mse"


def _objective(args) -> str:
    """``--objective``, or :data:`DEFAULT_OBJECTIVE` when not given (None: so that a whole-row release, which has
    no noise optimiser, can refuse it when given)."""
    return DEFAULT_OBJECTIVE if args.objective is None else args.objective


def _selection_share(args, given: List[str]) -> float:
    """The share of epsilon for the private selection; ``UsageError`` for a partial or refused choice."""
    if given:
        missing = [n for n in ("--lengthscale", "--variance", "--noise") if n not in given]
        raise UsageError(f"{', '.join(given)} given without {', '.join(missing)}: give all three (public, chosen "
                         "without the outputs) or none (selected privately from the default grid)")
    share = DEFAULT_SELECTION_SHARE if args.selection_share is None else args.selection_share  # 0 or in
    # [MIN_SELECTION_SHARE, 1): selection_share_value
    if share == 0.0:
        raise UsageError("no hyperparameters: give --lengthscale, --variance and --noise (public, chosen without the "
                         f"outputs), or --selection-share S in [{MIN_SELECTION_SHARE:g}, 1) to select them privately "
                         "from the default grid")
    return share


def selection_share_value(text: str) -> float:
    """``--selection-share`` as argparse reads it: 0 (no selection) or a share in [:data:`MIN_SELECTION_SHARE`, 1)
    of ``--epsilon``; anything else is refused at parsing, before any file is read."""
    try:
        share = float(text)
    except ValueError:
        share = math.nan
    if not (share == 0.0 or MIN_SELECTION_SHARE <= share < 1.0):  # NaN and text fail too
        raise argparse.ArgumentTypeError(
            f"must be 0 (no selection) or a share of --epsilon in [{MIN_SELECTION_SHARE:g}, 1), got {text!r} (below "
            f"{MIN_SELECTION_SHARE:g} the selection has almost no budget: give --lengthscale, --variance and --noise "
            "instead)")
    return share


def cmd_release(args) -> int:
    if args.private_inputs or args.x_bounds is not None:  # whole rows private: its own command
        return cmd_release_whole_rows(args)
    if args.inducing not in (None, "kmeans"):
        raise UsageError(f"--inducing {args.inducing} builds the inducing inputs from the --x-bounds box: give it with "
                         "--private-inputs --x-bounds (public inputs: k-means, the default)")
    if args.no_clip_inputs:
        raise UsageError("--no-clip-inputs is for private inputs: give it with --private-inputs --x-bounds")
    check_column_names(args.x, args.y, args.groups)  # before anything is read
    _seed(args)
    epsilon, delta = _privacy(args.epsilon, args.delta)
    bounds = _bounds(args)
    given = [n for n, v in (("--lengthscale", args.lengthscale), ("--variance", args.variance),
                            ("--noise", args.noise)) if v is not None]
    share = None if len(given) == 3 else _selection_share(args, given)
    data = Path(args.data)
    table = _read(args, data, [*args.x, *args.y])
    X = columns(table, args.x)
    Y = columns(table, args.y, private=True)
    groups = person_groups(table, args.groups)
    Xnew = _release_inputs(args, X)
    if share is None:
        _positive("--noise", args.noise)
        _positive("--variance", args.variance)
        lengthscales = _lengthscales(args, X.shape[1])
        eps_select, eps_release = 0.0, epsilon
    else:
        if X.shape[0] < 2:
            raise UsageError("selecting the hyperparameters needs at least 2 rows")
        lengthscales = [1.0]  # placeholders: the selection sets every grid parameter
        eps_select = share * epsilon
        eps_release = epsilon - eps_select  # the two together: the epsilon given (basic composition)
    multiplier = _multiplier(eps_release, delta)
    out = _output(Path(args.output), args.force, ("--ledger", args.ledger), ("data", args.data),
                  ("--at", args.at))
    accountant = _ledger(args)  # opened last: every check above has passed
    import_tensorflow_quietly()  # every check that needs no model has run
    from .accounting import PrivacyEvent
    from .measurement import Measurement, measure
    from .mechanisms import gaussian_event
    from .neighbours import relation
    from .selection import select_hyperparameters

    _noise_variance(args.noise)
    kernel = _kernel(args, X.shape[1], lengthscales)
    events = [gaussian_event(eps_release, delta, multiplier)]
    if share is not None:
        events.insert(0, PrivacyEvent(eps_select, 0.0, "pure", None, "dpgp release: hyperparameter selection"))
    if accountant is not None:  # refuse an over-budget release before the model is even built
        accountant.check_events(events)
    model = _model(args, X, Y, bounds, kernel, args.noise if share is None else 1.0, groups=groups)
    grid = None if share is None else _default_grid(model, "give --lengthscale, --variance and --noise (public, "
                                                           "chosen without the outputs)")
    extras = {**_groups_card(args, groups), **({"output_columns": list(args.y)} if len(args.y) > 1 else {})}
    note = ""
    file = _StagedFile(out, not args.quiet and sys.stderr.isatty())

    def mechanism(reservation: Reservation) -> Released:
        """The selection (if any), then the release, each drawn within ``reservation`` (deferred: recorded
        once the file is written, given back if it is not)."""
        nonlocal note
        if share is not None and grid is not None:
            folds = min(SELECTION_FOLDS, X.shape[0])
            try:
                selection = cast("Selection", select_hyperparameters(  # a Selection: no diagnostics=True
                    model, grid, epsilon=eps_select, folds=folds, accountant=reservation, seed=args.seed,
                    epsilon_release=eps_release, delta_release=delta, objective=_objective(args),
                    progress=not args.quiet and sys.stderr.isatty()))
            except (ValueError, ArithmeticError) as exc:
                raise _overflow(exc) from None
            selection.apply(model)
            extras["selection"] = {"grid": "default", "configurations": len(grid), "folds": folds, "share": share,
                                   "epsilon": eps_select, "mechanism": selection.mechanism,
                                   "total_epsilon": eps_select + eps_release, "total_delta": delta}
            chosen = _hyperparameters(model)
            note = (f"hyperparameters selected privately from the default grid ({len(grid)} configurations, "
                    f"{folds}-fold CV) with {share:g} of epsilon ({eps_select:.6g}, pure; {selection.mechanism} "
                    f"mechanism); the release gets epsilon {eps_release:.6g}, delta {delta:g}: lengthscale "
                    f"{', '.join(f'{v:.4g}' for v in np.atleast_1d(chosen['lengthscales']))}, kernel variance "
                    f"{chosen['kernel_variance']:.4g}, noise variance {chosen['noise_variance']:.4g}\n")
        try:
            return _release(args, model, Xnew, eps_release, delta, reservation, file)
        except (ValueError, ArithmeticError) as exc:  # after a selection, its choice may be why: charged
            raise _overflow(exc, None if share is None else reservation) from None

    # Held by measure (checked again, atomically); recorded once the release file is written; given back if not.
    with file:
        released = measure(Measurement(None, relation(model), mechanism, events=tuple(events),
                                       store=_store(args, data, model, Xnew, file, extras)), accountant)
    if not args.quiet:  # the choice is shown once it is charged (with the release, in its file)
        sys.stderr.write(f"{note}wrote {out}: {released!r}\n")
    return 0


#: ``--inducing`` choices: k-means on the (public) inputs, or a design built from the public ``--x-bounds`` box
#: alone (:func:`~dpgp_gpflow.whole_rows.inducing_grid`, :func:`~dpgp_gpflow.whole_rows.inducing_design`).
INDUCING = ("kmeans", "grid", "halton", "sobol")


def _x_bounds(args) -> np.ndarray:
    """``--x-bounds``: one ``LO HI`` pair per ``--x`` column, the public box of private inputs, as a [D, 2] array
    (:func:`~dpgp_gpflow.whole_rows.design.validate_box`'s rule; within :data:`MAX_MAGNITUDE`). No TensorFlow."""
    from .whole_rows.design import validate_box

    values, dim = list(args.x_bounds), len(args.x)
    if len(values) != 2 * dim:
        raise UsageError(f"--x-bounds takes one LO HI pair per --x column ({2 * dim} number(s) for {dim} column(s)), "
                         f"got {len(values)} number(s)")
    try:
        box = validate_box(np.reshape(np.asarray(values, dtype=np.float64), (dim, 2)).tolist(), dim)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--x-bounds: {one_line(exc).replace('x_bounds', 'the box')}") from None
    if np.max(np.abs(box)) > MAX_MAGNITUDE:
        raise UsageError(f"--x-bounds must lie within +-{MAX_MAGNITUDE:g} (the release would overflow): rescale the "
                         "inputs")
    return box


def _whole_rows_inducing(args, dim: int) -> Tuple[str, int]:
    """``(design, points per column)`` of a whole-row release's inducing inputs (``--inducing``, ``--sparse M``),
    checked before anything is read from the data: never k-means (it reads the private inputs); ``grid`` needs
    ``M = m ** D`` (``m`` points per column); default ``grid`` for one input column, ``halton`` for more."""
    design = args.inducing or ("grid" if dim == 1 else "halton")
    if design == "kmeans":
        raise UsageError("--inducing kmeans with --private-inputs: k-means on the private inputs would publish their "
                         "cluster centres in every prediction; use a design of the --x-bounds box (--inducing grid, "
                         "halton or sobol)")
    if args.sparse is None:
        raise UsageError("--private-inputs needs --sparse M: a whole-row release is a sparse function on M inducing "
                         "inputs built from the --x-bounds box (then dpgp predict OUT.json --at NEW.csv, free)")
    if args.sparse < 1:
        raise UsageError(f"--sparse must be at least 1, got {args.sparse}")
    per_column = round(args.sparse ** (1.0 / dim))
    if design == "grid" and per_column ** dim != args.sparse:
        raise UsageError(f"--inducing grid over {dim} input columns needs --sparse M = m^{dim} (m points per column), "
                         f"got {args.sparse}: give --sparse {max(per_column, 1) ** dim} or --inducing halton")
    return design, per_column


def cmd_release_whole_rows(args) -> int:
    """``dpgp release --private-inputs --x-bounds LO HI ...``: the whole-row release
    (``DPSGPR(..., private_inputs=True, x_bounds=...).release_function``, docs/guides/whole_rows.md), charged
    once (one Gaussian event at ``--epsilon``, ``--delta``) when its file is written.

    Privacy assumption: every row's inputs and output are private (clipped to the public box and bounds); the
    inducing inputs come from the box alone; the lengthscales are given (public) or chosen from the box's default
    grid inside the one release; the kernel and noise variances are given (public, both) or fitted on the
    released statistics (post-processing)."""
    if not args.private_inputs:
        raise UsageError("--x-bounds is the public box of private inputs: give it with --private-inputs (without it "
                         "the --x columns are public and need no box)")
    if args.x_bounds is None:
        raise UsageError("--private-inputs needs --x-bounds LO HI [LO HI ...]: a public box holding every input, one "
                         "pair per --x column, declared without looking at the data")
    check_column_names(args.x, args.y, args.groups)  # before anything is read
    for set_, why in ((args.at is not None, "--at"), (args.grid is not None, "--grid")):
        if set_:
            raise UsageError(f"{why} with --private-inputs: a whole-row release is a function usable anywhere; release "
                             f"it without {why}, then predict at your inputs for free (dpgp predict OUT.json --at "
                             "NEW.csv)")
    if len(args.y) > 1:
        raise UsageError("--private-inputs releases one --y column for now")
    if args.selection_share is not None:
        raise UsageError("--selection-share with --private-inputs: the lengthscales are chosen inside the one "
                         "whole-row release and the variances fitted on it, at no extra cost: omit it")
    if args.objective is not None:
        raise UsageError("--objective with --private-inputs: a whole-row release adds Gaussian noise to its "
                         "statistics, with no noise optimiser: omit it")
    _seed(args)
    epsilon, delta = _privacy(args.epsilon, args.delta)
    bounds = _bounds(args)
    box = _x_bounds(args)
    dim = len(args.x)
    if (args.variance is None) != (args.noise is None):  # never a unit default for the other one
        given, missing = ("--variance", "--noise") if args.noise is None else ("--noise", "--variance")
        raise UsageError(f"{given} given without {missing}: give both (public, chosen without the data) or neither "
                         "(fitted on the released statistics, free)")
    _positive("--variance", args.variance)
    _positive("--noise", args.noise)
    lengthscales = None if args.lengthscale is None else _lengthscales(args, dim)
    design, per_column = _whole_rows_inducing(args, dim)
    multiplier = _multiplier(epsilon, delta)
    data = Path(args.data)
    table = _read(args, data, [*args.x, *args.y])
    X = columns(table, args.x, private=True)  # private: a refusal never describes their values
    Y = columns(table, args.y, private=True)
    groups = person_groups(table, args.groups)
    if args.sparse > X.shape[0]:  # the number of rows is public
        raise UsageError(f"--sparse must be between 1 and the number of rows ({X.shape[0]}), got {args.sparse}")
    out = _output(Path(args.output), args.force, ("--ledger", args.ledger), ("data", args.data))
    accountant = _ledger(args)  # opened last: every check above has passed
    import_tensorflow_quietly()  # every check that needs no model has run
    from .measurement import Measurement, measure
    from .mechanisms import gaussian_event
    from .models import DPSGPR
    from .relations import largest_person
    from .whole_rows.design import inducing_design, inducing_grid
    from .whole_rows.mechanism import relation

    _noise_variance(args.noise)
    ls: Any = np.ones(dim) if dim > 1 else 1.0  # placeholders: chosen from the box's default grid in the release
    if lengthscales is not None:
        ls = lengthscales[0] if len(lengthscales) == 1 else np.asarray(lengthscales, dtype=np.float64)
    kernel = _kernel_class(args.kernel)(lengthscales=ls, **({} if args.variance is None else
                                                             {"variance": args.variance}))
    Z = inducing_grid(box, per_column) if design == "grid" else inducing_design(box, args.sparse, kind=design)
    events = (gaussian_event(epsilon, delta, multiplier),)  # the release's one event (its request's)
    if accountant is not None:  # refuse an over-budget release before the model is even built
        accountant.check_events(events)
    try:
        model = DPSGPR((X, Y), kernel, Z, noise_variance=args.noise, y_bounds=bounds, x_bounds=box,
                       private_inputs=True, clip_inputs=not args.no_clip_inputs, groups=groups)
    except ValueError as exc:  # e.g. an input outside the box with --no-clip-inputs: nothing reserved
        raise UsageError(f"{one_line(exc).replace('(clip_inputs=False)', '(--no-clip-inputs)')}; nothing was "
                         "charged") from None
    extras = {**_groups_card(args, groups), "inducing": {"design": design, "points": int(Z.shape[0])}}
    file = _StagedFile(out, not args.quiet and sys.stderr.isatty())

    def mechanism(reservation: Reservation) -> Any:
        """The whole-row release within ``reservation`` (deferred: recorded once the file is written)."""
        file.drawing()
        try:
            return model.release_function(
                epsilon=epsilon, delta=delta, seed=args.seed, accountant=reservation, hyperparameters_public=True,
                lengthscales="kernel" if lengthscales is not None else "default",
                variances="given" if args.noise is not None else "fit", clip_to_bounds=not args.no_clip)
        except (ValueError, ArithmeticError) as exc:
            raise _overflow(exc) from None

    def store(released: Any) -> None:
        file.write(lambda tmp: released.save(tmp, columns=list(args.x), dataset=args.dataset or data.name,
                                             **extras))

    with file:
        released = measure(Measurement(None, relation(largest_person(groups)), mechanism, events=events,
                                       store=store), accountant)
    if not args.quiet:
        sys.stderr.write(f"wrote {out}: {released!r}\n")
    return 0


def cmd_predict(args) -> int:
    import pandas as pd

    if not Path(args.release).is_file():  # the checks that need no model first, then TensorFlow
        raise UsageError(f"{args.release}: no such file")
    at = Path(args.at)
    inputs = _read(args, at)
    out = _output(Path(args.output), args.force, ("release", args.release), ("--at", args.at))
    released, card = _load(Path(args.release))
    from .models.multiclass import PrivateMulticlassClassifier
    from .released import PrivateFunction
    from .whole_rows.released import WholeRowsRelease

    if isinstance(released, PrivateMulticlassClassifier):  # several classes: a probability per class
        dim = released.input_dim
    elif isinstance(released, WholeRowsRelease):  # whole rows private: a function too
        dim = released.features.input_dim
    elif isinstance(released, PrivateFunction):
        dim = released.readout.input_dim
    else:
        raise UsageError(f"{args.release} holds values at fixed inputs, not a function: nothing to predict "
                         "(release with --sparse M to predict anywhere)")
    names = card.get("columns") or []
    if not (isinstance(names, list) and all(isinstance(c, str) for c in names)
            and (not names or len(names) == dim)):
        raise UsageError(f"{args.release}: its card's columns must be {dim} column "
                         f"name(s), got {names!r}")
    if not names:
        names = [c for c in inputs.frame.columns][: dim]
    Xq = columns(inputs, names)
    table = pd.DataFrame(Xq, columns=names)  # the inputs as read (numbers, whatever their CSV format)
    if isinstance(released, PrivateMulticlassClassifier):
        P = released.predict_y(Xq)[0]
        table = table.assign(**{f"p_class_{c}": P[:, c] for c in range(P.shape[1])}, predicted_class=P.argmax(axis=1))
    else:
        pred = released.predict(Xq)
        values = {"mean": pred.mean, "variance": pred.variance, "noise_std": pred.noise_std}
        if np.ndim(pred.mean) == 2 and np.shape(pred.mean)[1] > 1:  # several --y: one column of each per output
            ys = _output_names(card, int(np.shape(pred.mean)[1]))
            table = table.assign(**{f"{k}_{c}": np.asarray(v)[:, p] for k, v in values.items() for p, c in enumerate(ys)})
        else:
            table = table.assign(**{k: np.reshape(v, -1) for k, v in values.items()})
    with _StagedFile(out) as file:  # free: nothing to charge
        file.write(lambda tmp: table.to_csv(tmp, index=False))
    if not args.quiet:
        sys.stderr.write(f"wrote {out}: {len(table)} predictions (post-processing: no privacy cost)\n")
    return 0


#: Where ``dpgp select``'s grid comes from: (lengthscales given, variances given) -> the card's label.
_GRID_SOURCES = {(False, False): "default", (True, False): "given lengthscales x default variances",
                 (False, True): "default lengthscales x given variances", (True, True): "given"}
_LENGTHSCALES, _KERNEL_VARIANCE, _NOISE_VARIANCE = ".kernel.lengthscales", ".kernel.variance", ".likelihood.variance"


def _distinct(values: Sequence) -> list:
    """``values`` without repeats, in order (scalars or ARD vectors)."""
    out, seen = [], set()
    for v in values:
        key = tuple(np.round(np.atleast_1d(np.asarray(v, dtype=np.float64)), 12))
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def _default_grid(model, instead: str) -> List[dict]:
    """The public default grid of ``model`` (:func:`~dpgp_gpflow.selection.default_grid`: inputs, bounds and
    kernel type only), built before anything is reserved; ``UsageError`` naming what to give ``instead`` when
    it cannot be built (e.g. every ``--x`` column is constant)."""
    from .selection import default_grid

    try:
        return default_grid(model)
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise UsageError(f"cannot build the default grid ({one_line(exc)}): {instead}") from None


def _select_grid(args, model) -> List[dict]:
    """``dpgp select``'s grid: ``--grid-lengthscale`` (else the default grid's lengthscales) combined with
    ``--variance``/``--noise`` (else the default grid's kernel/noise variance pairs). Public: the
    default grid reads the inputs, the bounds and the kernel's type only."""
    default = ([] if args.grid_lengthscale is not None and args.variance is not None  # all given: not needed
               else _default_grid(model, "give --grid-lengthscale and both --variance and --noise"))
    if args.grid_lengthscale is not None:
        lengthscales = [float(v) for v in args.grid_lengthscale]
    else:
        lengthscales = _distinct([c[_LENGTHSCALES] for c in default])
    if args.variance is not None:  # given on the command line: the model holds them (declared public)
        return [{_LENGTHSCALES: ls} for ls in lengthscales]
    pairs = _distinct([(c[_KERNEL_VARIANCE], c[_NOISE_VARIANCE]) for c in default])
    return [{_LENGTHSCALES: ls, _KERNEL_VARIANCE: float(v), _NOISE_VARIANCE: float(s2)}
            for ls in lengthscales for v, s2 in pairs]


def cmd_select(args) -> int:
    check_column_names(args.x, args.y, args.groups)  # before anything is read
    _seed(args)
    epsilon = _privacy_epsilon(args.epsilon)
    bounds = _bounds(args)
    if (args.variance is None) != (args.noise is None):  # never a unit default for the other one
        given, missing = ("--variance", "--noise") if args.noise is None else ("--noise", "--variance")
        raise UsageError(f"{given} given without {missing}: give both (public, chosen without the outputs) or "
                         "neither (selected privately with the lengthscale from the default grid)")
    public_variances = args.variance is not None
    if public_variances:
        _positive("--variance", args.variance)
        _positive("--noise", args.noise)
    if args.grid_lengthscale is not None:
        for v in args.grid_lengthscale:
            _positive("--grid-lengthscale", v)
        if public_variances and len(args.grid_lengthscale) < 2:
            raise UsageError("--grid-lengthscale with --variance and --noise needs at least two values to choose from")
    data = Path(args.data)
    table = _read(args, data, [*args.x, *args.y])
    X = columns(table, args.x)
    Y = columns(table, args.y, private=True)
    groups = person_groups(table, args.groups)
    if not (2 <= args.folds <= X.shape[0]):
        raise UsageError(f"--folds must be between 2 and the number of rows, got {args.folds}")
    out = release_budget = multiplier = None
    if args.output is not None:  # then release with the chosen values: check it all first
        if args.release_epsilon is None or args.release_delta is None:
            raise UsageError("-o needs --release-epsilon and --release-delta (the release's own budget)")
        release_budget = _privacy(args.release_epsilon, args.release_delta)
        multiplier = _multiplier(*release_budget)
        Xnew = _release_inputs(args, X)
        out = _output(Path(args.output), args.force, ("--ledger", args.ledger), ("data", args.data),
                      ("--at", args.at))
    elif any(v is not None for v in (args.release_epsilon, args.release_delta, args.at, args.grid, args.sparse)):
        raise UsageError("--release-epsilon, --release-delta, --at, --grid and --sparse release after the "
                         "selection: give -o OUT.json too")
    import_tensorflow_quietly()  # every check that needs no model has run
    from .accounting import PrivacyEvent
    from .measurement import Measurement, measure
    from .mechanisms import gaussian_event
    from .neighbours import relation
    from .selection import select_hyperparameters

    _noise_variance(args.noise)
    events = [PrivacyEvent(epsilon, 0.0, "pure", None, "dpgp select")]
    if release_budget is not None and multiplier is not None:  # set together above
        events.append(gaussian_event(*release_budget, multiplier))
    # One lengthscale shared by the columns with --grid-lengthscale, one per column from the default grid.
    # Every value not given on the command line is a placeholder that the grid sets.
    dim = X.shape[1]
    shared = args.grid_lengthscale is not None or dim == 1
    kernel = _kernel_class(args.kernel)(lengthscales=1.0 if shared else np.ones(dim, dtype=np.float64),
                                        variance=args.variance if public_variances else 1.0)
    model = _model(args, X, Y, bounds, kernel, args.noise, public=public_variances, groups=groups)
    grid = _select_grid(args, model)  # public; refused here, before the ledger is opened
    accountant = _ledger(args)
    if accountant is not None:
        accountant.check_events(events)  # the selection and the release together, before either runs
    release_options: dict = {} if release_budget is None else dict(
        epsilon_release=release_budget[0], delta_release=release_budget[1], objective=_objective(args))
    result: dict = {}
    card = {"selection": {}, **_groups_card(args, groups)}  # the selection's record is set once it is drawn
    file = None if out is None else _StagedFile(out, not args.quiet and sys.stderr.isatty())

    def mechanism(reservation: Reservation) -> Optional[Released]:
        """The selection, then with -o the release with its choice, drawn within ``reservation``: without -o
        the selection is recorded when it is drawn; with -o, deferred (recorded with the release once the file
        is written, given back if it is not: the choice is printed only after)."""
        try:
            selection = cast("Selection", select_hyperparameters(  # a Selection: no diagnostics=True
                model, grid, epsilon=epsilon, folds=args.folds, accountant=reservation, seed=args.seed,
                progress=not args.quiet and sys.stderr.isatty(), mechanism=args.mechanism, **release_options))
        except (ValueError, ArithmeticError) as exc:
            raise _overflow(exc) from None
        selection.apply(model)
        chosen = _hyperparameters(model)
        source = _GRID_SOURCES[(args.grid_lengthscale is not None, public_variances)]
        result.update({"lengthscale": chosen["lengthscales"], "kernel_variance": chosen["kernel_variance"],
                       "noise_variance": chosen["noise_variance"], "epsilon": selection.epsilon,
                       "mechanism": selection.mechanism, "grid": source, "configurations": len(grid),
                       "folds": args.folds})
        if file is None or release_budget is None:  # set together above
            return None
        card["selection"] = {k: result[k] for k in ("grid", "configurations", "folds", "epsilon", "mechanism")}
        try:
            return _release(args, model, Xnew, *release_budget, reservation, file)
        except (ValueError, ArithmeticError) as exc:  # the selection's choice may be why: charged
            raise _overflow(exc, reservation) from None

    if file is None:
        measure(Measurement(None, relation(model), mechanism, events=tuple(events)), accountant)
    else:
        with file:
            released = measure(Measurement(None, relation(model), mechanism, events=tuple(events),
                                           store=_store(args, data, model, Xnew, file, card)), accountant)
        result["release"] = str(out)
        if not args.quiet:
            sys.stderr.write(f"wrote {out}: {released!r}\n")
    print(json.dumps(result))
    return 0


def _card_lines(card: dict, indent: str = "  ") -> List[str]:
    """The privacy card as indented ``key: value`` lines (nested releases and dicts indented further)."""
    lines = []
    for key, value in card.items():
        if isinstance(value, dict):
            lines.append(f"{indent}{key}:")
            lines += _card_lines(value, indent + "  ")
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, v in enumerate(value):
                lines.append(f"{indent}{key} [{i + 1} of {len(value)}]:")
                lines += _card_lines(v, indent + "  ")
        else:
            lines.append(f"{indent}{key}: {value}")
    return lines


#: ``dpgp show`` prints at most this many rows of a release's values (then how many more there are).
SHOW_ROWS = 20


def _stored_inputs(card: dict, k: int) -> Tuple[Optional[np.ndarray], str]:
    """The inputs a release file stores in its card (``release_inputs``, written by ``dpgp release --at/--grid``)
    as a float64 [k, D] array checked against the card's ``inputs_hash``, or their first rows (with
    ``release_inputs_rows``: :data:`STORED_INPUT_VALUES`), and what to say of them; else ``None`` and why."""
    from .io.format import inputs_hash

    stored = card.get("release_inputs")
    if stored is None:
        return None, "the file does not store the inputs (only their hash)"
    try:
        X = np.asarray(stored, dtype=np.float64)
    except (TypeError, ValueError):
        return None, "the stored inputs are not a table of numbers"
    rows = card.get("release_inputs_rows")
    if rows is not None:  # the first rows only: no hash to check them against
        if rows != k or X.ndim != 2 or X.shape[0] != min(k, SHOW_ROWS):
            return None, f"the stored inputs' shape {X.shape} (of {rows} rows) does not match the {k} values"
        return X, (f"the file stores the inputs of the first {X.shape[0]} only (more than {STORED_INPUT_VALUES} "
                   "numbers), not checked against inputs_hash")
    if X.ndim != 2 or X.shape[0] != k:
        return None, f"the stored inputs' shape {X.shape} does not match the {k} values"
    if card.get("inputs_hash") != inputs_hash(X):
        return None, "the stored inputs do not match the card's inputs_hash"
    return X, ""


def _output_names(card: dict, outputs: int) -> List[str]:
    """The names of a release's ``outputs`` output columns: the card's ``output_columns`` (the ``--y`` columns)
    when they are that many strings, else ``y1``, ``y2``, ..."""
    given = card.get("output_columns")
    if isinstance(given, list) and len(given) == outputs and all(isinstance(c, str) for c in given):
        return list(given)
    return [f"y{p + 1}" for p in range(outputs)]


def _values_table(arrays: dict, card: dict) -> List[str]:
    """A full release's values (its ``mean`` and ``noise_std`` arrays, [k] or [k, P]) and, when the file stores
    them, their inputs: at most :data:`SHOW_ROWS` rows, then how many more."""
    mean = np.asarray(arrays["mean"], dtype=np.float64)
    noise_std = np.asarray(arrays["noise_std"], dtype=np.float64)
    mean, noise_std = (a.reshape(a.shape[0], -1) for a in (mean, noise_std))  # [k, P]: P = 1 unless several --y
    k, outputs = mean.shape
    X, why = _stored_inputs(card, k)
    names: List[str] = []
    if X is not None:
        given = card.get("columns")
        names = ([str(c) for c in given] if isinstance(given, list) and len(given) == X.shape[1]
                 else [f"x{j + 1}" for j in range(X.shape[1])])
    if outputs == 1:
        header = [*names, "mean", "noise_std"]
    else:
        ys = _output_names(card, outputs)
        header = [*names, *(f"mean_{c}" for c in ys), *(f"noise_std_{c}" for c in ys)]
    width = max(12, *(len(h) for h in header))
    lines = [f"released values ({k}{'; ' + why if why else ''}):",
             "  " + " ".join(f"{h:>{width}}" for h in header)]
    for i in range(min(k, SHOW_ROWS)):
        row = [*(X[i] if X is not None else ()), *mean[i], *noise_std[i]]
        lines.append("  " + " ".join(f"{v:>{width}.6g}" for v in row))
    if k > SHOW_ROWS:
        lines.append(f"  ... and {k - SHOW_ROWS} more row(s)")
    return lines


def _summary(checked) -> str:
    """One line of a checked release file (:class:`~dpgp_gpflow.io.card.CheckedCard`): its kind, total budget and
    last release, as the loaded object's repr shows them."""
    if checked.kind == "WholeRowsRelease":  # no PrivateRelease parts: its own line, from the card
        from .io.card import whole_rows_summary

        return whole_rows_summary(checked.card)
    card, last = checked.card, checked.releases[-1]
    mean = last.arrays["mean"]
    outputs = f", outputs={mean.shape[1]}" if mean.ndim == 2 else ""
    bounds = last["y_bounds"]
    return (f"{checked.kind}(mechanism={last['mechanism']!r}, epsilon={card['epsilon']:.6g}, delta={card['delta']:.6g}, "
            f"k={mean.shape[0]}{outputs}, r={last['rank']}, bounds={bounds}"
            + (f", releases={len(checked.releases)}" if len(checked.releases) > 1 else "")
            + (", clip_to_bounds=True" if card.get("clip_to_bounds") else "")
            + (", reproducible=True)" if card["reproducible"] else ")"))


def cmd_show(args) -> int:
    path = Path(args.release)
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    from .io.card import read_checked_card  # no TensorFlow: the card's checks, not the readout's

    try:
        checked = read_checked_card(path)
    except (ValueError, OSError) as exc:
        message = str(exc)  # the reader's own errors already name the file
        raise UsageError(message if message.startswith(str(path)) else f"{path}: {message}") from None
    card = checked.card
    print(f"{args.release}: {_summary(checked)}")
    shown = dict(card)
    if isinstance(shown.get("release_inputs"), list):  # printed in the table below, not as one long line
        rows = shown.pop("release_inputs_rows", None)
        shown["release_inputs"] = f"{len(shown['release_inputs'])}{'' if rows is None else f' of {rows}'} row(s) (below)"
    print("\n".join(_card_lines(shown)))
    if checked.kind == "PrivateRelease":
        print("\n".join(_values_table(checked.releases[0].arrays, card)))
    return 0


def cmd_budget_init(args) -> int:
    from .accounting import PrivacyAccountant

    path = _output(Path(args.file), force=None)  # never over an existing file (no --force here)
    epsilon, delta = _privacy(args.epsilon, args.delta)
    if args.composition not in COMPOSITIONS:
        raise UsageError(f"--composition must be one of {COMPOSITIONS}")
    PrivacyAccountant(epsilon=epsilon, delta=delta, composition=args.composition, ledger=path)
    print(f"created {path}: budget (epsilon={epsilon}, delta={delta}), {args.composition} composition")
    return 0


def cmd_budget_show(args) -> int:
    from .accounting import PrivacyAccountant

    path = Path(args.file)
    if not path.is_file():
        raise UsageError(f"{path}: no ledger there")
    acc = PrivacyAccountant.open(path)
    eps, dlt = acc.spent
    rem_eps, rem_dlt = acc.remaining
    print(f"ledger {path}: budget (epsilon={acc.epsilon}, delta={acc.delta}), {acc.composition} composition")
    print(f"spent (basic): epsilon={eps:.6g}, delta={dlt:.6g}; remaining (basic): epsilon={rem_eps:.6g}, delta={rem_dlt:.6g}")
    held_eps, held_dlt = acc.held
    if held_eps > 0.0 or held_dlt > 0.0:
        print(f"held by releases under way or by processes that died mid-release (counted as spent): "
              f"epsilon={held_eps:.6g}, delta={held_dlt:.6g}")
    if acc.composition != "basic":
        print(f"spent ({acc.composition}): epsilon={acc.epsilon_spent():.6g} at delta={acc.delta}")
    for row in acc.history():
        print("  " + ", ".join(f"{k}={row[k]}" for k in row))
    return 0


def cmd_demo(args) -> int:
    epsilon, delta = _privacy(args.epsilon, args.delta)
    for name, value in (("--split-seed", args.split_seed), ("--seed", args.seed)):
        if value is not None and value < 0:
            raise UsageError(f"{name} must be >= 0, got {value}")
    import_tensorflow_quietly()
    run_demo(epsilon, delta, Path(args.output), args.split_seed, args.seed)
    return 0


def _privacy_epsilon(value: float) -> float:
    try:
        return validate_epsilon(value)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def _load(path: Path) -> Tuple[Released, dict]:
    """The released object in a release file and its privacy card (as written, with the extras): read and
    checked by :func:`~dpgp_gpflow.io.loading.load` (TensorFlow imported quietly first)."""
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    import_tensorflow_quietly()
    from .io.card import read_card
    from .io.loading import load

    try:
        return load(path), read_card(path)
    except (ValueError, KeyError, TypeError, OSError) as exc:
        message = str(exc)  # the loader's own errors already name the file
        raise UsageError(message if message.startswith(str(path)) else f"{path}: {message}") from None


# ---------------------------------------------------------------------------------------------
# Parser


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
       --sep ";" --decimal , --thousands . -o kung.json""",
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


def _data_options(p: argparse.ArgumentParser, variance_help: str, noise_help: str) -> None:
    p.add_argument("data", help="CSV or Parquet file with the inputs and the private output")
    p.add_argument("--x", nargs="+", required=True, metavar="COL", help="public input column(s)")
    p.add_argument("--y", nargs="+", required=True, metavar="COL",
                   help="the private output column(s); several: one person's outputs per row, released together "
                        "(docs/guides/multi_output.md)")
    p.add_argument("--groups", metavar="COL", default=None,
                   help="public column of person identifiers (numbers or text): rows with the same value belong to "
                        "one person, and the release protects all of a person's outputs together (repeated "
                        "visits; docs/guides/groups.md); default: one row per person")
    p.add_argument("--bounds", nargs="+", type=float, required=True, metavar="LO HI",
                   help="public bounds of the output: LO HI, for every --y column, or one LO HI per --y column "
                        "(values outside are clipped)")
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
    p.add_argument("--sparse", type=int, metavar="M", help="sparse GP with M k-means inducing inputs: a function")
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
                     f"{__version__}). Inputs are public; the output column(s) are private.", **_examples("dpgp"))
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser,
                                help="the command to run (dpgp COMMAND --help for its options)")

    p = sub.add_parser(
        "release", help="release DP predictions (or a DP function with --sparse)", **_examples("release"),
        description="Release DP predictions. Hyperparameters: give --lengthscale, --variance and --noise (public: "
                    "chosen without the outputs), or none of them to select them privately from the public default "
                    "grid (dpgp_gpflow.selection.default_grid) with --selection-share of --epsilon; the release gets "
                    "the rest, so the total charged is --epsilon. Released means are clipped to --bounds unless "
                    "--no-clip.")
    _data_options(p, "kernel variance (public; with --lengthscale and --noise, else selected privately)",
                  "likelihood noise variance (public; with --lengthscale and --variance, else selected privately)")
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
    p.set_defaults(run=cmd_release)

    p = sub.add_parser("predict", help="predict from a released function (no privacy cost)", **_examples("predict"))
    p.add_argument("release", metavar="OUT.json", help="a release file holding a function (dpgp release --sparse M)")
    p.add_argument("--at", required=True, metavar="NEW.csv",
                   help="CSV or Parquet file of inputs to predict at (the release's --x column names)")
    _csv_options(p)
    p.add_argument("-o", "--output", required=True, metavar="PRED.csv",
                   help="CSV file to write: the inputs with mean, variance and noise_std columns (a function of "
                        "several --y columns: mean_COL, variance_COL and noise_std_COL for each)")
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
                    "multi-class file's whole guarantee (recomputed). Refused with one line otherwise. The readout "
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


def _warning_line(show: Callable[..., None]) -> Callable[..., None]:
    """A ``warnings.showwarning`` for the command line: the package's own warnings
    (:class:`~dpgp_gpflow.ClippingWarning`, ...) as one line ``dpgp: warning: MESSAGE`` on stderr, without
    the Python file and source line, each message once; other warnings as ``show`` prints them."""
    seen = set()

    def show_line(message, category, filename, lineno, file=None, line=None) -> None:
        if not category.__module__.startswith("dpgp_gpflow"):
            return show(message, category, filename, lineno, file, line)
        text = " ".join(str(message).split())
        if text not in seen:
            seen.add(text)
            (file or sys.stderr).write(f"dpgp: warning: {text}\n")

    return show_line


def main(argv: Optional[List[str]] = None) -> int:
    """Run ``dpgp`` (the console script) with ``argv`` (default: the command line); returns the exit code
    (2 for bad input, with one line on stderr).

    The command imports TensorFlow (quietly) only when it needs a model or a release file, after every
    other check (module docstring). While it runs, the package's warnings print as one line each
    (:func:`_warning_line`); the previous ``warnings.showwarning`` is restored when it returns. A library
    refusal that escapes a command (``ValueError``, ``ArithmeticError``) is one line too, exit code 2.
    """
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():  # restores the filters and warnings.showwarning when done
            warnings.showwarning = _warning_line(warnings.showwarning)
            return int(args.run(args))
    except (UsageError, TableError) as exc:
        sys.stderr.write(f"dpgp: error: {exc}\n")
        return 2
    except (BudgetExceededError, PrivacyLeakError, LedgerError, NotImplementedError) as exc:
        sys.stderr.write(f"dpgp: error: {exc}\n")  # refused before anything is drawn: the reservation is given back
        return 2
    except PermissionError as exc:  # e.g. a ledger or an output in a folder that cannot be written
        sys.stderr.write(f"dpgp: error: {exc.filename or ''}: permission denied\n")
        return 2
    except (ValueError, ArithmeticError) as exc:  # a library refusal not turned into a UsageError where it was
        # raised (e.g. a noise scale that overflows): one line too. A reservation is given back when its block
        # is left by an exception, and only a written result is charged.
        sys.stderr.write(f"dpgp: error: {one_line(exc)}\n")
        return 2
    except BrokenPipeError:  # the reader went away (dpgp budget show ... | head): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0


def demo(argv: Optional[List[str]] = None) -> int:
    """Run ``dpgp-demo`` (the same as ``dpgp demo``) with ``argv`` (default: the command line)."""
    return main(["demo", *(sys.argv[1:] if argv is None else argv)])
