"""``dpgp select``: hyperparameters chosen privately (pure epsilon), then with ``-o`` released with the choice."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional, Sequence, cast

import numpy as np

from ..__main__ import import_tensorflow_quietly
from ..io.tables import columns, person_groups
from .common import (
    StagedFile,
    UsageError,
    check_column_names,
    check_noise_variance,
    check_seed,
    checked_bounds,
    checked_epsilon,
    checked_multiplier,
    checked_output,
    checked_positive,
    checked_privacy,
    default_grid_or_refuse,
    groups_card,
    hyperparameters_of,
    kernel_class,
    objective_of,
    open_ledger,
    read_args_table,
    refusal,
)
from .release import build_model, release_inputs, release_model, store_step

if TYPE_CHECKING:
    from ..accounting import Reservation
    from ..released import Released
    from ..selection import Selection

__all__: list = []  # internal: the package's entry point is dpgp_gpflow.cli.main


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


def _select_grid(args, model) -> List[dict]:
    """``dpgp select``'s grid: ``--grid-lengthscale`` (else the default grid's lengthscales) combined with
    ``--variance``/``--noise`` (else the default grid's kernel/noise variance pairs). Public: the
    default grid reads the inputs, the bounds and the kernel's type only."""
    default = ([] if args.grid_lengthscale is not None and args.variance is not None  # all given: not needed
               else default_grid_or_refuse(model, "give --grid-lengthscale and both --variance and --noise"))
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
    check_seed(args)
    epsilon = checked_epsilon(args.epsilon)
    bounds = checked_bounds(args)
    if (args.variance is None) != (args.noise is None):  # never a unit default for the other one
        given, missing = ("--variance", "--noise") if args.noise is None else ("--noise", "--variance")
        raise UsageError(f"{given} given without {missing}: give both (public, chosen without the outputs) or "
                         "neither (selected privately with the lengthscale from the default grid)")
    public_variances = args.variance is not None
    if public_variances:
        checked_positive("--variance", args.variance)
        checked_positive("--noise", args.noise)
    if args.grid_lengthscale is not None:
        for v in args.grid_lengthscale:
            checked_positive("--grid-lengthscale", v)
        if public_variances and len(args.grid_lengthscale) < 2:
            raise UsageError("--grid-lengthscale with --variance and --noise needs at least two values to choose from")
    data = Path(args.data)
    table = read_args_table(args, data, [*args.x, *args.y])
    X = columns(table, args.x)
    Y = columns(table, args.y, private=True)
    groups = person_groups(table, args.groups)
    if not (2 <= args.folds <= X.shape[0]):
        raise UsageError(f"--folds must be between 2 and the number of rows, got {args.folds}")
    out = release_budget = multiplier = None
    if args.output is not None:  # then release with the chosen values: check it all first
        if args.release_epsilon is None or args.release_delta is None:
            raise UsageError("-o needs --release-epsilon and --release-delta (the release's own budget)")
        release_budget = checked_privacy(args.release_epsilon, args.release_delta)
        multiplier = checked_multiplier(*release_budget)
        Xnew = release_inputs(args, X)
        out = checked_output(Path(args.output), args.force, ("--ledger", args.ledger), ("data", args.data),
                      ("--at", args.at))
    elif any(v is not None for v in (args.release_epsilon, args.release_delta, args.at, args.grid, args.sparse)):
        raise UsageError("--release-epsilon, --release-delta, --at, --grid and --sparse release after the "
                         "selection: give -o OUT.json too")
    import_tensorflow_quietly()  # every check that needs no model has run
    from ..accounting import PrivacyEvent
    from ..measurement import Measurement, measure
    from ..mechanisms import gaussian_event
    from ..neighbours import sensitivity_path
    from ..selection import select_hyperparameters

    check_noise_variance(args.noise)
    events = [PrivacyEvent(epsilon, 0.0, "pure", None, "dpgp select")]
    if release_budget is not None and multiplier is not None:  # set together above
        events.append(gaussian_event(*release_budget, multiplier))
    # One lengthscale shared by the columns with --grid-lengthscale, one per column from the default grid.
    # Every value not given on the command line is a placeholder that the grid sets.
    dim = X.shape[1]
    shared = args.grid_lengthscale is not None or dim == 1
    kernel = kernel_class(args.kernel)(lengthscales=1.0 if shared else np.ones(dim, dtype=np.float64),
                                        variance=args.variance if public_variances else 1.0)
    model = build_model(args, X, Y, bounds, kernel, args.noise, public=public_variances, groups=groups)
    grid = _select_grid(args, model)  # public; refused here, before the ledger is opened
    accountant = open_ledger(args)
    if accountant is not None:
        accountant.check_events(events)  # the selection and the release together, before either runs
    release_options: dict = {} if release_budget is None else dict(
        epsilon_release=release_budget[0], delta_release=release_budget[1], objective=objective_of(args))
    result: dict = {}
    card = {"selection": {}, **groups_card(args, groups)}  # the selection's record is set once it is drawn
    file = None if out is None else StagedFile(out, not args.quiet and sys.stderr.isatty())

    def mechanism(reservation: Reservation) -> Optional[Released]:
        """The selection, then with -o the release with its choice, drawn within ``reservation``: without -o
        the selection is recorded when it is drawn; with -o, deferred (recorded with the release once the file
        is written, given back if it is not: the choice is printed only after)."""
        try:
            selection = cast("Selection", select_hyperparameters(  # a Selection: no diagnostics=True
                model, grid, epsilon=epsilon, folds=args.folds, accountant=reservation, seed=args.seed,
                progress=not args.quiet and sys.stderr.isatty(), mechanism=args.mechanism, **release_options))
        except (ValueError, ArithmeticError) as exc:
            raise refusal(exc) from None
        selection.apply(model)
        chosen = hyperparameters_of(model)
        source = _GRID_SOURCES[(args.grid_lengthscale is not None, public_variances)]
        result.update({"lengthscale": chosen["lengthscales"], "kernel_variance": chosen["kernel_variance"],
                       "noise_variance": chosen["noise_variance"], "epsilon": selection.epsilon,
                       "mechanism": selection.mechanism, "grid": source, "configurations": len(grid),
                       "folds": args.folds})
        if file is None or release_budget is None:  # set together above
            return None
        card["selection"] = {k: result[k] for k in ("grid", "configurations", "folds", "epsilon", "mechanism")}
        try:
            return release_model(args, model, Xnew, *release_budget, reservation, file)
        except (ValueError, ArithmeticError) as exc:  # the selection's choice may be why: charged
            raise refusal(exc, reservation) from None

    path = sensitivity_path(model)  # the relation checked before the reservation, recorded by the release
    if file is None:
        measure(Measurement(None, path.relation(), mechanism, events=tuple(events), path=path), accountant)
    else:
        with file:
            released = measure(Measurement(None, path.relation(), mechanism, events=tuple(events), path=path,
                                           store=store_step(args, data, model, Xnew, file, card)), accountant)
        result["release"] = str(out)
        if not args.quiet:
            sys.stderr.write(f"wrote {out}: {released!r}\n")
    print(json.dumps(result))
    return 0
