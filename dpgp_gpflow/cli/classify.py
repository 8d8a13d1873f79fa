"""``dpgp release --classes K``: the Laplace GP classifiers from the command line (docs/getting_started.md#classifiers).

The ``--y`` column holds class labels, integers ``0 .. K-1`` (``--classes 2``: 0 / 1, released as the binary
classifier's -1 / +1). The model follows the regression options: without ``--sparse`` the full GP
(``DPLaplaceGPC``, ``DPMulticlassLaplaceGPC``; ``--steps T`` Newton steps), with ``--sparse M`` the sparse
classifier on M k-means inducing inputs of the public inputs (``DPSparseLaplaceGPC``,
``DPSparseMulticlassLaplaceGPC``), and with ``--private-inputs --x-bounds`` the whole-row classifier on M inducing
inputs from the box (the sparse models with ``private_inputs=True``). Every release is a function: ``dpgp predict``
prints class probabilities at any inputs, for free. One Gaussian event at (``--epsilon``, ``--delta``), charged once
its file is written.

Privacy assumption: the labels are private (neighbours change one row's label, or with ``--groups`` all of a
person's; with ``--private-inputs`` the row's inputs too); ``--lengthscale`` and ``--variance`` are public (chosen
without the labels), the inducing inputs public (k-means of the public inputs, or from the box alone). A label
that is not an integer ``0 .. K-1`` is refused before anything is reserved, with no statistic of the labels.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, List

import numpy as np

from ..__main__ import import_tensorflow_quietly
from ..io.tables import columns, one_line, person_groups
from .common import (
    MAX_MAP_ENTRIES,
    StagedFile,
    UsageError,
    check_column_names,
    check_seed,
    checked_lengthscales,
    checked_multiplier,
    checked_output,
    checked_positive,
    checked_privacy,
    groups_card,
    kernel_class,
    objective_of,
    open_ledger,
    read_args_table,
    refusal,
)
from .whole_rows import checked_x_bounds, whole_rows_inducing

if TYPE_CHECKING:
    from ..accounting import Reservation

__all__: list = []  # internal: the package's entry point is dpgp_gpflow.cli.main


def _refuse_regression_options(args) -> None:
    """``UsageError`` for the options of a regression that a classifier has no use for (before any file is read)."""
    if not (isinstance(args.classes, int) and args.classes >= 2):
        raise UsageError(f"--classes must be an integer >= 2 (2: labels 0 / 1), got {args.classes}")
    if len(args.y) != 1:
        raise UsageError("--classes takes one --y column of labels")
    given = [name for name, value in (
        ("--bounds", args.bounds), ("--noise", args.noise), ("--selection-share", args.selection_share),
        ("--at", args.at), ("--grid", args.grid)) if value is not None]
    if args.no_clip:
        given.append("--no-clip")
    if given:
        raise UsageError(f"{', '.join(given)} with --classes: a classifier's labels need no bounds (they are its "
                         "classes), it has no noise variance, takes public --lengthscale and --variance, is never "
                         "clipped, and is a function (dpgp predict OUT.json --at NEW.csv prints class probabilities)")
    if args.lengthscale is None or args.variance is None:
        raise UsageError("--classes needs --lengthscale and --variance (public: chosen without the labels); a "
                         "classifier's hyperparameters are not selected privately")
    if args.steps is not None:
        if args.steps < 1:
            raise UsageError(f"--steps must be an integer >= 1, got {args.steps}")
        if args.sparse is not None or args.private_inputs:
            raise UsageError("--steps is for the full-GP classifier (without --sparse): a sparse or whole-row "
                             "classifier releases the first Newton step only")
    if args.private_inputs and args.objective is not None:
        raise UsageError("--objective with --private-inputs: a whole-row release adds Gaussian noise to its "
                         "statistics, with no noise optimiser: omit it")


def checked_labels(values: np.ndarray, num_classes: int, name: str) -> np.ndarray:
    """The ``--y`` column [n, 1] as int64 labels [n], each an integer ``0 .. num_classes - 1``; else ``UsageError``
    in one line carrying no statistic of the private labels (:func:`~dpgp_gpflow.models.one_vs_rest.validate_class_labels`,
    the library's rule). Checked before anything is reserved."""
    from ..models.one_vs_rest import validate_class_labels

    try:
        return validate_class_labels(values[:, 0], num_classes, int(values.shape[0]))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--y {name!r}: {one_line(exc)} (--classes {num_classes}); nothing was charged") from None


def _model(args, X: np.ndarray, labels: np.ndarray, kernel: Any, groups: Any, box: Any, Z: Any) -> Any:
    """The classifier the options choose (public hyperparameters declared so: given on the command line)."""
    from ..models import DPLaplaceGPC, DPMulticlassLaplaceGPC, DPSparseLaplaceGPC, DPSparseMulticlassLaplaceGPC

    K = args.classes
    Y = 2.0 * labels[:, None].astype(np.float64) - 1.0  # 0 / 1 -> -1 / +1 (binary)
    common = {"hyperparameters_public": True, "groups": groups}
    if args.sparse is None:
        if K == 2:
            return DPLaplaceGPC((X, Y), kernel, **common)
        return DPMulticlassLaplaceGPC((X, labels), kernel, num_classes=K, **common)
    private = {} if box is None else {"private_inputs": True, "x_bounds": box,
                                      "clip_inputs": not args.no_clip_inputs}
    if K == 2:
        return DPSparseLaplaceGPC((X, Y), kernel, Z, **common, **private)
    return DPSparseMulticlassLaplaceGPC((X, labels), kernel, Z, num_classes=K, **common, **private)


def cmd_release_classifier(args) -> int:
    """``dpgp release --classes K``: a Laplace GP classifier (module docstring), checked in full before the ledger
    is opened, released within one reservation and charged once its file is written."""
    _refuse_regression_options(args)
    if args.private_inputs != (args.x_bounds is not None):
        raise UsageError("--private-inputs and --x-bounds LO HI [LO HI ...] go together: the public box holding "
                         "every private input, one pair per --x column")
    check_column_names(args.x, args.y, args.groups)  # before anything is read
    check_seed(args)
    epsilon, delta = checked_privacy(args.epsilon, args.delta)
    dim = len(args.x)
    lengthscales = checked_lengthscales(args, dim)
    checked_positive("--variance", args.variance)
    box, design, per_column = None, "", 0
    if args.private_inputs:
        box = checked_x_bounds(args)
        design, per_column = whole_rows_inducing(args, dim)
    elif args.inducing not in (None, "kmeans"):
        raise UsageError(f"--inducing {args.inducing} builds the inducing inputs from the --x-bounds box: give it with "
                         "--private-inputs --x-bounds (public inputs: k-means, the default)")
    elif args.no_clip_inputs:
        raise UsageError("--no-clip-inputs is for private inputs: give it with --private-inputs --x-bounds")
    multiplier = checked_multiplier(epsilon, delta)
    data = Path(args.data)
    table = read_args_table(args, data, [*args.x, *args.y])
    X = columns(table, args.x, private=box is not None)  # private inputs: a refusal never describes their values
    labels = checked_labels(columns(table, args.y, private=True), args.classes, args.y[0])
    groups = person_groups(table, args.groups)
    n = X.shape[0]
    if args.sparse is not None and not (1 <= args.sparse <= n):  # the number of rows is public
        raise UsageError(f"--sparse must be between 1 and the number of rows ({n}), got {args.sparse}")
    if args.sparse is None and n * n > MAX_MAP_ENTRIES:
        raise UsageError(f"a full-GP classifier of {n} rows forms {n} x {n} matrices (over {MAX_MAP_ENTRIES:,} "
                         "entries): release a sparse classifier with --sparse M")
    out = checked_output(Path(args.output), args.force, ("--ledger", args.ledger), ("data", args.data))
    accountant = open_ledger(args)  # opened last: every check above has passed
    import_tensorflow_quietly()  # every check that needs no model has run
    from ..measurement import Measurement, measure
    from ..mechanisms import gaussian_event
    from ..models import kmeans_inducing_inputs
    from ..whole_rows.design import inducing_design, inducing_grid

    ls: Any = lengthscales[0] if len(lengthscales) == 1 else np.asarray(lengthscales, dtype=np.float64)
    kernel = kernel_class(args.kernel)(lengthscales=ls, variance=args.variance)
    Z: Any = None
    if box is not None:
        Z = inducing_grid(box, per_column) if design == "grid" else inducing_design(box, args.sparse, kind=design)
    elif args.sparse is not None:
        Z = kmeans_inducing_inputs(X, args.sparse)  # the public --x columns only
    events = (gaussian_event(epsilon, delta, multiplier),)  # the release's one event
    if accountant is not None:  # refuse an over-budget release before the model is even built
        accountant.check_events(events)
    try:
        model = _model(args, X, labels, kernel, groups, box, Z)
    except ValueError as exc:  # e.g. an input outside the box with --no-clip-inputs: nothing reserved
        raise UsageError(f"{one_line(exc).replace('(clip_inputs=False)', '(--no-clip-inputs)')}; nothing was "
                         "charged") from None
    from ..neighbours import sensitivity_path

    path = sensitivity_path(model)  # whole rows (a box), label moves between classes (K > 2), or rows / persons
    extras: dict = {**groups_card(args, groups), "labels": {"column": args.y[0], "classes": args.classes}}
    if box is not None:
        extras["inducing"] = {"design": design, "points": int(Z.shape[0])}
    hyperparameters = {"lengthscales": np.atleast_1d(np.asarray(lengthscales, dtype=np.float64)).tolist(),
                       "kernel_variance": float(args.variance)}
    file = StagedFile(out, not args.quiet and sys.stderr.isatty())

    def mechanism(reservation: Reservation) -> Any:
        """The classifier's release within ``reservation`` (deferred: recorded once the file is written)."""
        options: dict = {"epsilon": epsilon, "delta": delta, "seed": args.seed, "accountant": reservation,
                         "hyperparameters_public": True}
        if box is None:
            options["objective"] = objective_of(args)
        else:  # --lengthscale is required (public, given): the kernel's own, a 1.0 included
            options["lengthscales"] = "kernel"
        if args.sparse is None:
            options["steps"] = 1 if args.steps is None else args.steps
        file.drawing()
        try:
            return model.release(**options)
        except (ValueError, ArithmeticError) as exc:
            raise refusal(exc) from None

    def store(released: Any) -> None:
        file.write(lambda tmp: released.save(tmp, columns=list(args.x), dataset=args.dataset or data.name,
                                             hyperparameters=hyperparameters, **extras))

    with file:
        released = measure(Measurement(None, path.relation(), mechanism, events=events, store=store, path=path),
                           accountant)
    if not args.quiet:
        sys.stderr.write(f"wrote {out}: {released!r}\n")
    return 0


def label_names(card: dict, classes: int) -> List[Any]:
    """A binary classifier file's two labels, for ``dpgp predict``'s ``predicted_label``: 0 / 1 when the command line
    wrote it (``labels`` in its card), else the library's -1 / +1."""
    written = card.get("labels")
    if isinstance(written, dict) and written.get("classes") == classes:
        return list(range(classes))
    return [-1, 1]
