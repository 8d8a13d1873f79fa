"""``dpgp release`` (public inputs): a full release at ``--at``/``--grid`` inputs or a sparse function (``--sparse
M``), hyperparameters given (public) or selected privately with ``--selection-share`` of ``--epsilon``; one
measurement, charged once its file is written. With ``--private-inputs`` it hands over to :mod:`.whole_rows`.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, List, Optional, Tuple, cast

import numpy as np

from ..__main__ import import_tensorflow_quietly
from ..io.tables import columns, person_groups
from .common import (
    DEFAULT_SELECTION_SHARE,
    MAX_MAP_ENTRIES,
    MIN_SELECTION_SHARE,
    SELECTION_FOLDS,
    SHOW_ROWS,
    STORED_INPUT_VALUES,
    StagedFile,
    UsageError,
    build_kernel,
    check_column_names,
    check_noise_variance,
    check_seed,
    checked_bounds,
    checked_lengthscales,
    checked_multiplier,
    checked_output,
    checked_positive,
    checked_privacy,
    default_grid_or_refuse,
    groups_card,
    hyperparameters_of,
    objective_of,
    open_ledger,
    read_args_table,
    refusal,
)
from .classify import cmd_release_classifier
from .whole_rows import cmd_release_whole_rows

if TYPE_CHECKING:
    import gpflow
    from ..accounting import Reservation
    from ..released import Released
    from ..selection import Selection

__all__: list = []  # internal: the package's entry point is dpgp_gpflow.cli.main


def _test_inputs(args, X: np.ndarray) -> Optional[np.ndarray]:
    if args.at is not None and args.grid is not None:
        raise UsageError("give --at or --grid, not both")
    if args.at is not None:
        path = Path(args.at)
        return columns(read_args_table(args, path, args.x), args.x)
    if args.grid is not None:
        if not (1 <= args.grid <= 10_000):
            raise UsageError(f"--grid must be between 1 and 10000 points per axis, got {args.grid}")
        axes = [np.linspace(lo, hi, args.grid) for lo, hi in zip(X.min(axis=0), X.max(axis=0))]  # public range
        if args.grid ** X.shape[1] > 1_000_000:
            raise UsageError(f"--grid {args.grid} over {X.shape[1]} inputs is {args.grid ** X.shape[1]} points; use fewer")
        return np.stack([g.reshape(-1) for g in np.meshgrid(*axes, indexing="ij")], axis=1)
    return None


def release_inputs(args, X: np.ndarray) -> Optional[np.ndarray]:
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


def build_model(args, X: np.ndarray, Y: np.ndarray, bounds: Tuple[float, float], kernel: gpflow.kernels.Kernel,
           noise: Optional[float], public: bool = False, groups: Optional[np.ndarray] = None):
    """The private model (``DPGPR``, or ``DPGPRFITC`` with ``--sparse M`` k-means inducing inputs);
    ``public``: the values given are public (given on the command line), declared so; ``groups``: the
    ``--groups`` person codes (releases then protect all of a person's rows)."""
    import_tensorflow_quietly()
    from ..models import DPGPR, DPGPRFITC, kmeans_inducing_inputs

    if args.sparse is None:
        return DPGPR((X, Y), kernel, y_bounds=bounds, noise_variance=noise, hyperparameters_public=public,
                     groups=groups)
    Z = kmeans_inducing_inputs(X, args.sparse)  # the public --x columns only (never --y: check_column_names)
    return DPGPRFITC((X, Y), kernel, Z, noise_variance=noise, y_bounds=bounds, hyperparameters_public=public,
                     groups=groups)


def release_model(args, model, Xnew: Optional[np.ndarray], epsilon: float, delta: float, reservation: Reservation,
             file: StagedFile) -> Released:
    """Release ``model`` within ``reservation`` (the deferred view :func:`~dpgp_gpflow.measurement.measure`
    hands a release with a ``store`` step: its draw is recorded once the file is written), clipped to the
    bounds unless ``--no-clip``. The model's hyperparameters are public: given on the command line or
    selected privately."""
    model.declare_hyperparameters_public()
    file.drawing()
    if args.sparse is None:
        released = model.release(Xnew, epsilon=epsilon, delta=delta, objective=objective_of(args),
                                 accountant=reservation, seed=args.seed)
    else:
        released = model.release_function(epsilon=epsilon, delta=delta, objective=objective_of(args),
                                          accountant=reservation, seed=args.seed)
    if not all(np.all(np.isfinite(r.noise_std)) and np.all(np.isfinite(r.noise_factor))
               for r in released.releases):  # public (inputs, bounds, hyperparameters, budget): not the data
        raise ValueError("the release's noise is not finite")
    return released.unclipped() if args.no_clip else released.clipped()  # post-processing: free


def store_step(args, data: Path, model, Xnew: Optional[np.ndarray], file: StagedFile,
           card_extras: dict) -> Callable[[Released], None]:
    """The ``store`` step of a release's measurement: write it to ``file`` (renamed into place once charged)
    with its card (``card_extras`` read when it is written: a private selection adds its record first)."""

    def store(released: Released) -> None:
        extras = card_extras
        if Xnew is not None:  # public (--at or --grid): stored so that `dpgp show` can print the values at them
            extras = {**extras, **_card_inputs(Xnew)}
        file.write(lambda tmp: released.save(
            tmp, inputs=Xnew if args.sparse is None else None, columns=list(args.x),
            dataset=args.dataset or data.name, hyperparameters=hyperparameters_of(model), **extras))

    return store


def _card_inputs(Xnew: np.ndarray) -> dict:
    """The card's record of the public inputs of a full release (:data:`STORED_INPUT_VALUES`)."""
    if Xnew.size <= STORED_INPUT_VALUES:
        return {"release_inputs": Xnew.tolist()}
    return {"release_inputs": Xnew[:SHOW_ROWS].tolist(), "release_inputs_rows": int(Xnew.shape[0])}


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
    if args.residual is not None and (args.classes is not None or not args.private_inputs):
        raise UsageError("--residual releases residual sums after a whole-row regression: give it with "
                         "--private-inputs --x-bounds and without --classes (a classifier, or a release of public "
                         "inputs, has no residual releases)")
    if args.classes is not None or args.steps is not None:  # labels: a classifier, its own command
        if args.classes is None:
            raise UsageError("--steps is for a classifier's Newton steps: give it with --classes K")
        return cmd_release_classifier(args)
    if args.private_inputs or args.x_bounds is not None:  # whole rows private: its own command
        return cmd_release_whole_rows(args)
    if args.inducing not in (None, "kmeans"):
        raise UsageError(f"--inducing {args.inducing} builds the inducing inputs from the --x-bounds box: give it with "
                         "--private-inputs --x-bounds (public inputs: k-means, the default)")
    if args.no_clip_inputs:
        raise UsageError("--no-clip-inputs is for private inputs: give it with --private-inputs --x-bounds")
    check_column_names(args.x, args.y, args.groups)  # before anything is read
    check_seed(args)
    epsilon, delta = checked_privacy(args.epsilon, args.delta)
    bounds = checked_bounds(args)
    given = [n for n, v in (("--lengthscale", args.lengthscale), ("--variance", args.variance),
                            ("--noise", args.noise)) if v is not None]
    share = None if len(given) == 3 else _selection_share(args, given)
    data = Path(args.data)
    table = read_args_table(args, data, [*args.x, *args.y])
    X = columns(table, args.x)
    Y = columns(table, args.y, private=True)
    groups = person_groups(table, args.groups)
    Xnew = release_inputs(args, X)
    if share is None:
        checked_positive("--noise", args.noise)
        checked_positive("--variance", args.variance)
        lengthscales = checked_lengthscales(args, X.shape[1])
        eps_select, eps_release = 0.0, epsilon
    else:
        if X.shape[0] < 2:
            raise UsageError("selecting the hyperparameters needs at least 2 rows")
        lengthscales = [1.0]  # placeholders: the selection sets every grid parameter
        eps_select = share * epsilon
        eps_release = epsilon - eps_select  # the two together: the epsilon given (basic composition)
    multiplier = checked_multiplier(eps_release, delta)
    out = checked_output(Path(args.output), args.force, ("--ledger", args.ledger), ("data", args.data),
                  ("--at", args.at))
    accountant = open_ledger(args)  # opened last: every check above has passed
    import_tensorflow_quietly()  # every check that needs no model has run
    from ..accounting import PrivacyEvent
    from ..measurement import Measurement, measure
    from ..mechanisms import gaussian_event
    from ..neighbours import sensitivity_path
    from ..selection import select_hyperparameters

    check_noise_variance(args.noise)
    kernel = build_kernel(args, X.shape[1], lengthscales)
    events = [gaussian_event(eps_release, delta, multiplier)]
    if share is not None:
        events.insert(0, PrivacyEvent(eps_select, 0.0, "pure", None, "dpgp release: hyperparameter selection"))
    if accountant is not None:  # refuse an over-budget release before the model is even built
        accountant.check_events(events)
    model = build_model(args, X, Y, bounds, kernel, args.noise if share is None else 1.0, groups=groups)
    grid = None if share is None else default_grid_or_refuse(model, "give --lengthscale, --variance and --noise (public, "
                                                           "chosen without the outputs)")
    extras = {**groups_card(args, groups), **({"output_columns": list(args.y)} if len(args.y) > 1 else {})}
    note = ""
    file = StagedFile(out, not args.quiet and sys.stderr.isatty())

    def mechanism(reservation: Reservation) -> Released:
        """The selection (if any), then the release, each drawn within ``reservation`` (deferred: recorded
        once the file is written, given back if it is not)."""
        nonlocal note
        if share is not None and grid is not None:
            folds = min(SELECTION_FOLDS, X.shape[0])
            try:
                selection = cast("Selection", select_hyperparameters(  # a Selection: no diagnostics=True
                    model, grid, epsilon=eps_select, folds=folds, accountant=reservation, seed=args.seed,
                    epsilon_release=eps_release, delta_release=delta, objective=objective_of(args),
                    progress=not args.quiet and sys.stderr.isatty()))
            except (ValueError, ArithmeticError) as exc:
                raise refusal(exc) from None
            selection.apply(model)
            extras["selection"] = {"grid": "default", "configurations": len(grid), "folds": folds, "share": share,
                                   "epsilon": eps_select, "mechanism": selection.mechanism,
                                   "total_epsilon": eps_select + eps_release, "total_delta": delta}
            chosen = hyperparameters_of(model)
            note = (f"hyperparameters selected privately from the default grid ({len(grid)} configurations, "
                    f"{folds}-fold CV) with {share:g} of epsilon ({eps_select:.6g}, pure; {selection.mechanism} "
                    f"mechanism); the release gets epsilon {eps_release:.6g}, delta {delta:g}: lengthscale "
                    f"{', '.join(f'{v:.4g}' for v in np.atleast_1d(chosen['lengthscales']))}, kernel variance "
                    f"{chosen['kernel_variance']:.4g}, noise variance {chosen['noise_variance']:.4g}\n")
        try:
            return release_model(args, model, Xnew, eps_release, delta, reservation, file)
        except (ValueError, ArithmeticError) as exc:  # after a selection, its choice may be why: charged
            raise refusal(exc, None if share is None else reservation) from None

    # Held by measure (checked again, atomically); recorded once the release file is written; given back if not.
    with file:
        path = sensitivity_path(model)  # the relation checked before the reservation, recorded by the release
        released = measure(Measurement(None, path.relation(), mechanism, events=tuple(events), path=path,
                                       store=store_step(args, data, model, Xnew, file, extras)), accountant)
    if not args.quiet:  # the choice is shown once it is charged (with the release, in its file)
        sys.stderr.write(f"{note}wrote {out}: {released!r}\n")
    return 0
