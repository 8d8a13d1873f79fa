"""``dpgp release --private-inputs --x-bounds LO HI ...``: the whole-row release (docs/guides/whole_rows.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Tuple

import numpy as np

from ..__main__ import import_tensorflow_quietly
from ..io.tables import columns, one_line, person_groups
from ..validation import MAX_MAGNITUDE
from .common import (
    StagedFile,
    UsageError,
    check_column_names,
    check_noise_variance,
    check_seed,
    checked_bounds,
    checked_lengthscales,
    checked_multiplier,
    checked_output,
    checked_positive,
    checked_privacy,
    groups_card,
    kernel_class,
    open_ledger,
    read_args_table,
    refusal,
)

if TYPE_CHECKING:
    from ..accounting import Reservation

__all__: list = []  # internal: the package's entry point is dpgp_gpflow.cli.main


#: ``--inducing`` choices: k-means on the (public) inputs, or a design built from the public ``--x-bounds`` box
#: alone (:func:`~dpgp_gpflow.whole_rows.inducing_grid`, :func:`~dpgp_gpflow.whole_rows.inducing_design`).
INDUCING = ("kmeans", "grid", "halton", "sobol")


def checked_x_bounds(args) -> np.ndarray:
    """``--x-bounds``: one ``LO HI`` pair per ``--x`` column, the public box of private inputs, as a [D, 2] array
    (:func:`~dpgp_gpflow.whole_rows.design.validate_box`'s rule; within :data:`MAX_MAGNITUDE`). No TensorFlow."""
    from ..whole_rows.design import validate_box

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


def whole_rows_inducing(args, dim: int) -> Tuple[str, int]:
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


def checked_residual(args) -> Any:
    """``--residual [F ...]``: None (one release), ``"default"`` (the option alone), ``"histogram"`` (the histogram
    scheme, ``--residual histogram``: one given ``--lengthscale`` and given ``--variance`` and ``--noise``, as the
    library needs) or the public fractions of the budget, checked by the library's rule
    (:func:`~dpgp_gpflow.whole_rows.residual_bounds.validate_residual_fractions`) before anything is read (without
    ``--lengthscale``, the residual releases are of the lengthscale chosen in the first stage). No TensorFlow."""
    from ..whole_rows.residual_bounds import validate_residual_fractions

    if args.residual is None:
        return None
    if args.residual == ["histogram"]:
        if args.lengthscale is None or args.variance is None or args.noise is None:
            raise UsageError("--residual histogram needs --lengthscale, --variance and --noise (public, chosen "
                             "without the data): the histogram scheme has no lengthscale grid and no fitted "
                             "variances")
        return "histogram"
    try:
        fractions = "default" if not args.residual else tuple(float(f) for f in args.residual)
        validate_residual_fractions(fractions)
    except ValueError:
        raise UsageError("--residual takes no number (the default fractions), histogram (the histogram scheme) or "
                         "two or more fractions of the budget, each > 0, summing to 1 (the statistics' first, then "
                         f"one per residual release), got {' '.join(args.residual)}") from None
    return fractions


def cmd_release_whole_rows(args) -> int:
    """``dpgp release --private-inputs --x-bounds LO HI ...``: the whole-row release
    (``DPSGPR(..., private_inputs=True, x_bounds=...).release_function``, docs/guides/whole_rows.md), charged
    once (one Gaussian event at ``--epsilon``, ``--delta``) when its file is written.

    Privacy assumption: every row's inputs and output are private (clipped to the public box and bounds); the
    inducing inputs come from the box alone; the lengthscales are given (public) or chosen from the box's default
    grid inside the one release; the kernel and noise variances are given (public, both) or fitted on the
    released statistics (post-processing). With ``--residual``, residual releases follow the statistics under the
    same one event (``residual_fractions=``, :func:`checked_residual`; ``--residual histogram``: the histogram
    scheme)."""
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
    check_seed(args)
    epsilon, delta = checked_privacy(args.epsilon, args.delta)
    bounds = checked_bounds(args)
    box = checked_x_bounds(args)
    dim = len(args.x)
    if (args.variance is None) != (args.noise is None):  # never a unit default for the other one
        given, missing = ("--variance", "--noise") if args.noise is None else ("--noise", "--variance")
        raise UsageError(f"{given} given without {missing}: give both (public, chosen without the data) or neither "
                         "(fitted on the released statistics, free)")
    checked_positive("--variance", args.variance)
    checked_positive("--noise", args.noise)
    lengthscales = None if args.lengthscale is None else checked_lengthscales(args, dim)
    fractions = checked_residual(args)
    design, per_column = whole_rows_inducing(args, dim)
    multiplier = checked_multiplier(epsilon, delta)
    data = Path(args.data)
    table = read_args_table(args, data, [*args.x, *args.y])
    X = columns(table, args.x, private=True)  # private: a refusal never describes their values
    Y = columns(table, args.y, private=True)
    groups = person_groups(table, args.groups)
    if args.sparse > X.shape[0]:  # the number of rows is public
        raise UsageError(f"--sparse must be between 1 and the number of rows ({X.shape[0]}), got {args.sparse}")
    out = checked_output(Path(args.output), args.force, ("--ledger", args.ledger), ("data", args.data))
    accountant = open_ledger(args)  # opened last: every check above has passed
    import_tensorflow_quietly()  # every check that needs no model has run
    from ..measurement import Measurement, measure
    from ..mechanisms import gaussian_event
    from ..models import DPSGPR
    from ..whole_rows.design import inducing_design, inducing_grid
    from ..neighbours import sensitivity_path

    check_noise_variance(args.noise)
    ls: Any = np.ones(dim) if dim > 1 else 1.0  # placeholders: chosen from the box's default grid in the release
    if lengthscales is not None:
        ls = lengthscales[0] if len(lengthscales) == 1 else np.asarray(lengthscales, dtype=np.float64)
    kernel = kernel_class(args.kernel)(lengthscales=ls, **({} if args.variance is None else
                                                             {"variance": args.variance}))
    if fractions == "histogram":  # the grid's cells under the library's cap, before anything is reserved
        from ..whole_rows.histogram import histogram_cells
        from ..whole_rows.residual import grid_cells
        from ..whole_rows.residual_bounds import MAX_HISTOGRAM_CELLS

        try:
            histogram_cells(kernel, box)  # the library's rule; its one refusal (the cap) in the command's terms
        except ValueError:
            G, D = grid_cells(kernel, box), box.shape[0]
            raise UsageError(f"--residual histogram: the grid would count {G}^{D} cells (half a lengthscale per cell "
                             f"over --x-bounds), more than {MAX_HISTOGRAM_CELLS}: use --residual without histogram "
                             "(the whole-row statistics first) or a longer --lengthscale") from None
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
    extras = {**groups_card(args, groups), "inducing": {"design": design, "points": int(Z.shape[0])}}
    file = StagedFile(out, not args.quiet and sys.stderr.isatty())

    def mechanism(reservation: Reservation) -> Any:
        """The whole-row release within ``reservation`` (deferred: recorded once the file is written)."""
        file.drawing()
        try:
            return model.release_function(
                epsilon=epsilon, delta=delta, seed=args.seed, accountant=reservation, hyperparameters_public=True,
                lengthscales="kernel" if lengthscales is not None else "default",
                variances="given" if args.noise is not None else "fit", clip_to_bounds=not args.no_clip,
                residual_fractions=fractions)
        except (ValueError, ArithmeticError) as exc:
            raise refusal(exc) from None

    def store(released: Any) -> None:
        file.write(lambda tmp: released.save(tmp, columns=list(args.x), dataset=args.dataset or data.name,
                                             **extras))

    with file:
        path = sensitivity_path(model)  # whole rows, of the model's persons
        released = measure(Measurement(None, path.relation(), mechanism, events=events, path=path,
                                       store=store), accountant)
    if not args.quiet:
        sys.stderr.write(f"wrote {out}: {released!r}\n")
    return 0
