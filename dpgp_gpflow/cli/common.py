"""What every ``dpgp`` command shares: :class:`UsageError` (bad input: one line, exit code 2, before anything is drawn
or spent), the checks of the options (privacy parameters, bounds, hyperparameters, seed, output file, ledger), the
kernel and the result file written before it is charged (:class:`StagedFile`).

Privacy assumption: everything checked here is public (options, file names, the ledger); nothing reads the private
columns.
"""

from __future__ import annotations

import math
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from ..__main__ import import_tensorflow_quietly
from ..io.tables import Table, csv_format, one_line, read_table
from ..validation import MAX_MAGNITUDE, validate_bounds, validate_delta, validate_epsilon

if TYPE_CHECKING:
    import gpflow
    from ..accounting import PrivacyAccountant, Reservation
    from ..released import Released

__all__: list = []  # internal: the package's entry point is dpgp_gpflow.cli.main


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
SELECTION_MECHANISMS: Tuple[str, ...] = ("generalised_exponential", "exponential", "permute_and_flip")
COMPOSITIONS: Tuple[str, ...] = ("basic", "gdp", "pld")

#: MAX_MAGNITUDE (dpgp_gpflow.validation): the largest magnitude of a bound, a public input value or a
#: hyperparameter (and 1 / the smallest hyperparameter): beyond it squares and sums in the release could overflow
#: to inf or NaN, so such a value is refused before anything is spent (rescale the data instead).


class UsageError(Exception):
    """Bad input: reported as one line, exit code 2, before anything is drawn or spent (as a
    :class:`~dpgp_gpflow.io.tables.TableError`, a table that cannot be read as asked)."""


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


def read_args_table(args, path: Path, expect: Sequence[str] = ()) -> Table:
    """``path`` read with the command's ``--sep``, ``--decimal`` and ``--thousands``; the ``expect`` columns
    checked as soon as the header is read (:func:`read_table`)."""
    return read_table(path, *csv_format(args.sep, args.decimal, args.thousands), expect=expect)


def checked_output(path: Path, force: Optional[bool], *protected: Tuple[str, Optional[str]]) -> Path:
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


def unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


class StagedFile:
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
        from ..progress import Progress

        self._steps = Progress(2, self._progress, "release")

    def write(self, write: Callable[[Path], Any]) -> None:
        if self._steps is not None:
            self._steps.update("write")
        tmp = self.out.with_name(f".{self.out.name}.{secrets.token_hex(8)}.tmp")
        try:
            write(tmp)
        except (OSError, ValueError) as exc:
            unlink_quietly(tmp)
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise UsageError(f"{self.out}: cannot write it ({reason}); nothing was charged") from None
        except BaseException:
            unlink_quietly(tmp)
            raise
        self.tmp = tmp
        if self._steps is not None:
            self._steps.update()

    def __enter__(self) -> "StagedFile":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if self._steps is not None:
            self._steps.close()
        tmp, self.tmp = self.tmp, None
        if tmp is None:
            return
        if kind is not None:  # written, then not charged (the ledger could not record it): never seen
            unlink_quietly(tmp)
            if isinstance(exc, (OSError, ValueError)):
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise UsageError(f"{self.out}: cannot write it ({reason}); nothing was charged") from None
            return
        try:
            os.replace(tmp, self.out)
        except OSError as exc:
            raise UsageError(f"{self.out}: could not be put in place ({exc.strerror or exc}); the result is charged "
                             f"and written to {tmp}: move it there yourself") from None


def checked_privacy(epsilon: float, delta: float) -> Tuple[float, float]:
    try:
        return validate_epsilon(epsilon), validate_delta(delta)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def checked_bounds(args) -> Any:
    """``--bounds``: one ``LO HI`` pair for every ``--y`` column, or one pair per column (in their order)."""
    if args.bounds is None:  # optional for a classifier only (dpgp release --classes)
        raise UsageError("the following arguments are required: --bounds (the public bounds of the output)")
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


def checked_positive(name: str, value: Optional[float]) -> Optional[float]:
    if value is not None and not (math.isfinite(value) and value > 0.0):
        raise UsageError(f"{name} must be finite and > 0, got {value}")
    if value is not None and not (1.0 / MAX_MAGNITUDE <= value <= MAX_MAGNITUDE):
        raise UsageError(f"{name} must be between {1.0 / MAX_MAGNITUDE:g} and {MAX_MAGNITUDE:g} (the release "
                         f"would overflow), got {value:g}")
    return value


def check_noise_variance(value: Optional[float]) -> None:
    """``--noise`` against GPflow's lower bound on a likelihood variance
    (:func:`~dpgp_gpflow.validation.validate_noise_variance` reads GPflow's configuration: checked once
    TensorFlow is imported, before the model is built)."""
    from ..validation import validate_noise_variance

    try:
        validate_noise_variance(value)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--noise: {exc}") from None


def checked_multiplier(epsilon: float, delta: float) -> float:
    """The Gaussian noise multiplier of a release at (``epsilon``, ``delta``), computed before anything is read
    or reserved; the library's refusal (e.g. a noise scale that overflows) as one line."""
    from ..calibration import gaussian_multiplier

    try:
        return gaussian_multiplier(epsilon, delta)
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise UsageError(one_line(exc)) from None


def check_seed(args) -> None:
    """``--seed`` checked before anything is read: an integer in [0, 2**128)."""
    from ..validation import validate_seed

    try:
        validate_seed(args.seed)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--seed: {exc}") from None


def refusal(exc: Exception, reservation: Optional[Reservation] = None) -> UsageError:
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


def kernel_class(name: str) -> Any:
    """The GPflow kernel class of ``--kernel name`` (TensorFlow imported quietly first)."""
    import_tensorflow_quietly()
    import gpflow

    return getattr(gpflow.kernels, KERNELS[name])


def checked_lengthscales(args, dim: int) -> List[float]:
    """``--lengthscale`` checked (no TensorFlow): one value, or one per ``--x`` column, each within range."""
    ls = list(args.lengthscale)
    if len(ls) not in (1, dim):
        raise UsageError(f"--lengthscale takes one value or one per --x column ({dim}), got {len(ls)}")
    for v in ls:
        checked_positive("--lengthscale", v)
    return ls


def build_kernel(args, dim: int, lengthscales: Sequence[float]) -> gpflow.kernels.Kernel:
    """The ``--kernel`` with ``lengthscales`` (checked by :func:`checked_lengthscales`) and ``--variance``; without
    ``--variance``, placeholders the private selection replaces (one lengthscale per column)."""
    ls = list(lengthscales)
    if args.variance is None:
        return kernel_class(args.kernel)(lengthscales=ls[0] if dim == 1 else np.full(dim, ls[0], dtype=np.float64))
    return kernel_class(args.kernel)(lengthscales=ls[0] if len(ls) == 1 else np.asarray(ls, dtype=np.float64),
                                      variance=checked_positive("--variance", args.variance))


def open_ledger(args) -> Optional[PrivacyAccountant]:
    from ..accounting import PrivacyAccountant

    if args.ledger is None:
        return None
    path = Path(args.ledger)
    if not path.is_file():
        raise UsageError(f"{path}: no ledger there (create one with: dpgp budget init {path} --epsilon E --delta D)")
    return PrivacyAccountant.open(path, dataset=args.dataset or Path(args.data).name)


#: A full release (``--at``/``--grid``) forms the k x n map of its k inputs and n rows (and more of that
#: size): refused above this many entries (1 GiB of float64), before anything is read from the outputs.
MAX_MAP_ENTRIES = 2**27


def groups_card(args, groups: Optional[np.ndarray]) -> dict:
    """The card's record of the ``--groups`` column (public: the person codes' counts); each release in the
    card states the relation it protects (``neighbours``)."""
    if groups is None:
        return {}
    sizes = np.bincount(groups)
    return {"groups": {"column": args.groups, "persons": int(sizes.size), "largest_rows": int(sizes.max())}}


def hyperparameters_of(model) -> dict:
    """The model's public hyperparameters, for the card."""
    return {"lengthscales": np.asarray(model.kernel.lengthscales.numpy(), dtype=np.float64).tolist(),
            "kernel_variance": float(model.kernel.variance.numpy()),
            "noise_variance": float(model.likelihood.variance.numpy())}


#: ``dpgp release --at/--grid`` stores the inputs in the card (``release_inputs``, rows of numbers) when they
#: are at most this many numbers (rows x columns; about 200 kB of JSON); beyond, the first :data:`SHOW_ROWS`
#: rows only (what ``dpgp show`` prints), with ``release_inputs_rows`` the number of rows, so that a large
#: ``--grid`` (up to 1,000,000 points) does not fill the card.
STORED_INPUT_VALUES = 10_000


#: ``--objective`` when not given (the noise optimiser's default).
DEFAULT_OBJECTIVE = "mse"


def objective_of(args) -> str:
    """``--objective``, or :data:`DEFAULT_OBJECTIVE` when not given (None: so that a whole-row release, which has
    no noise optimiser, can refuse it when given)."""
    return DEFAULT_OBJECTIVE if args.objective is None else args.objective


def default_grid_or_refuse(model, instead: str) -> List[dict]:
    """The public default grid of ``model`` (:func:`~dpgp_gpflow.selection.default_grid`: inputs, bounds and
    kernel type only), built before anything is reserved; ``UsageError`` naming what to give ``instead`` when
    it cannot be built (e.g. every ``--x`` column is constant)."""
    from ..selection import default_grid

    try:
        return default_grid(model)
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise UsageError(f"cannot build the default grid ({one_line(exc)}): {instead}") from None


#: ``dpgp show`` prints at most this many rows of a release's values (then how many more there are).
SHOW_ROWS = 20


def output_names(card: dict, outputs: int) -> List[str]:
    """The names of a release's ``outputs`` output columns: the card's ``output_columns`` (the ``--y`` columns)
    when they are that many strings, else ``y1``, ``y2``, ..."""
    given = card.get("output_columns")
    if isinstance(given, list) and len(given) == outputs and all(isinstance(c, str) for c in given):
        return list(given)
    return [f"y{p + 1}" for p in range(outputs)]


def checked_epsilon(value: float) -> float:
    try:
        return validate_epsilon(value)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def load_release(path: Path) -> Tuple[Released, dict]:
    """The released object in a release file and its privacy card (as written, with the extras): read and
    checked by :func:`~dpgp_gpflow.io.loading.load` (TensorFlow imported quietly first)."""
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    import_tensorflow_quietly()
    from ..io.card import read_card
    from ..io.loading import load

    try:
        return load(path), read_card(path)
    except (ValueError, KeyError, TypeError, OSError) as exc:
        message = str(exc)  # the loader's own errors already name the file
        raise UsageError(message if message.startswith(str(path)) else f"{path}: {message}") from None
