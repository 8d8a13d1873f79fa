"""The public entry point: :func:`select_hyperparameters`, its publishable result :class:`Selection`
and, on request only, the data owner's private :class:`SelectionDiagnostics`."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np
from gpflow.utilities import multiple_assign

from ..accounting import PrivacyAccountant, PrivacyEvent, Reservation
from ..exceptions import ReleaseBudgetWarning
from ..measurement import Measurement, measure
from ..neighbours import sensitivity_path
from ..validation import (
    validate_calibration,
    validate_delta,
    validate_epsilon,
    validate_objective,
    validate_seed,
)
from .columns import check_selectable, is_multiclass, model_columns, num_rows, private_columns
from .cross_validation import (
    Config,
    CrossValidation,
    Split,
    check_public,
    cross_validate,
    resolve_splits,
    same_grid,
    validate_grid,
    validate_release_noise,
)
from .grid import default_grid
from .mechanism import (
    DEFAULT_BETA,
    MECHANISM_NAMES,
    draw,
    log_weights,
    probabilities_of,
    validate_beta,
    validate_mechanism,
)
from .utility import validate_utility

__all__ = ["Selection", "SelectionDiagnostics", "select_hyperparameters"]



@dataclass(frozen=True, eq=False)
class Selection:
    """The result of :func:`select_hyperparameters`: everything on it is safe to publish.

    ``chosen`` / ``index`` are the epsilon-DP choice; ``grid``, ``kept``, ``config_sensitivities``,
    ``sensitivity``, ``epsilon``, ``mechanism``, the splits and the release budget the utility
    assumed are public inputs. Nothing computed from the private outputs other than the choice is
    held here: the utilities and probabilities are a separate :class:`SelectionDiagnostics`, returned
    only with ``diagnostics=True``.
    """

    chosen: Dict[str, Any]  #: the selected configuration
    index: int  #: its position in ``grid``
    sensitivity: float  #: max of the configurations' sensitivities over the candidates
    epsilon: float
    grid: Tuple[Dict[str, Any], ...] = field(repr=False)
    kept: np.ndarray = field(repr=False)  #: [K] bool: the candidates (under the threshold, releasable)
    config_sensitivities: np.ndarray = field(repr=False)  #: [K] sensitivity of each configuration's utility
    published_sensitivity: float = field(repr=False, default=math.nan)  #: JMLR eq. (13)-(14), NOT valid
    splits: Tuple[Split, ...] = field(repr=False, default=())
    data_sensitivity: float = math.nan
    epsilon_release: Optional[float] = None
    delta_release: Optional[float] = None
    reproducible: bool = False  #: True when the mechanism's randomness came from an explicit seed (not private)
    mechanism: str = "generalised_exponential"  #: one of :data:`~dpgp_gpflow.selection.MECHANISMS`
    grid_source: str = "given"  #: "given" (the caller's grid) or "default" (:func:`~dpgp_gpflow.selection.default_grid`)
    utility: str = "absolute"  #: the CV loss, "absolute" or "squared"
    release_noise: str = "bound"  #: how the utility modelled the release's noise, "bound" or "optimised"
    beta: float = math.nan  #: the generalised exponential mechanism's beta (public; shapes utility only)
    #: how far each column moves between neighbours: one output's ``d``, P outputs' ``d_p`` or K classes' 2
    output_sensitivities: Tuple[float, ...] = ()
    neighbours: str = "row"  #: the neighbouring relation the selection protects (as a release records it)

    def apply(self, model) -> None:
        """Assign the chosen configuration to ``model`` (``gpflow.utilities.multiple_assign``) and record
        those values as public for its leak guard (the choice is the DP output of the selection); the
        model's other parameters stay as they were declared (or not). A multi-class model: for each class's
        problem (they share the parameters the grid sets)."""
        multiple_assign(model, self.chosen)
        for target in (model.problems if is_multiclass(model) else (model,)):
            if hasattr(target, "declare_hyperparameters_public"):
                target.declare_hyperparameters_public(paths=list(self.chosen))


@dataclass(frozen=True, eq=False)
class SelectionDiagnostics:
    """PRIVATE diagnostics of one selection, for the data owner only: never publish them.

    Both arrays are computed from the private outputs (only the :class:`Selection`'s choice is DP).
    ``utilities``: [K] expected clipped CV utilities (nan for configurations dropped by the
    threshold); ``probabilities``: [K] the mechanism's selection probabilities (0 if dropped). The
    repr shows neither.
    """

    utilities: np.ndarray = field(repr=False)  #: [K] PRIVATE
    probabilities: np.ndarray = field(repr=False)  #: [K] PRIVATE

    def __repr__(self) -> str:
        return (f"SelectionDiagnostics(PRIVATE, for the data owner only: utilities and probabilities of "
                f"{np.size(self.utilities)} configurations, not shown)")


def _check_undeclared(model: Any, declared: bool, grid: Sequence[Config]) -> None:
    """The leak guard's check of undeclared values given at construction (each class's problem for a
    multi-class model), except the paths every configuration of ``grid`` sets (their values are replaced)."""
    if declared:
        return
    covered = sorted(set.intersection(*(set(config) for config in grid)))
    for target in (model.problems if is_multiclass(model) else (model,)):
        check = getattr(target, "check_undeclared_hyperparameters", None)
        if check is not None:
            check(grid=covered)


def _release_budget(accountants: Sequence[PrivacyAccountant]) -> Tuple[Optional[float], Optional[float]]:
    """The release budget a selection's utility assumes when none is given: the smallest budget left
    (``remaining``, basic composition) among ``accountants``, read while the selection's own event is held;
    ``(None, None)`` with a one-line :class:`~dpgp_gpflow.ReleaseBudgetWarning` when there is none (no
    accountant, or no epsilon or delta left). Public: the ledger holds budgets, not data."""
    left = [(acc.remaining, acc.epsilon, acc.delta) for acc in accountants]
    # a rounding residue of a spent budget (1e-9 of it or less) is no budget
    if left and all(e > 1e-9 * budget_e and d > 1e-9 * budget_d for (e, d), budget_e, budget_d in left):
        epsilon, delta = min(e for (e, _), _, _ in left), min(d for (_, d), _, _ in left)
        if epsilon < math.inf and delta < 1.0:
            return epsilon, delta
    warnings.warn(ReleaseBudgetWarning(
        "hyperparameter selection: the budget of the release that follows is unknown (no epsilon_release and "
        "delta_release, no accountant with epsilon and delta left), so the utility ignores the release's noise "
        "and may favour configurations that need much of it; give the budget you will release with "
        "(epsilon_release= and delta_release=; on the command line -o with --release-epsilon and "
        "--release-delta, or --ledger)"), stacklevel=5)  # from choose, in measure, in select_hyperparameters
    return None, None


def select_hyperparameters(
    model,
    grid: Optional[Sequence[Config]] = None,
    *,
    epsilon: float,
    folds: Union[int, Sequence[Split]] = 5,
    d: Any = None,
    threshold: Optional[float] = None,
    seed: Optional[int] = None,
    delta_release: Optional[float] = None,
    epsilon_release: Optional[float] = None,
    objective: str = "mse",
    calibration: str = "analytic",
    accountant: Union[PrivacyAccountant, Reservation, None] = None,
    progress: bool = False,
    split_seed: int = 0,
    cross_validation: Optional[CrossValidation] = None,
    hyperparameters_public: bool = False,
    mechanism: str = "generalised_exponential",
    diagnostics: bool = False,
    utility: str = "absolute",
    beta: float = DEFAULT_BETA,
    release_noise: str = "bound",
) -> Union[Selection, Tuple[Selection, SelectionDiagnostics]]:
    """Select one configuration of ``grid`` for ``model`` with an epsilon-DP selection mechanism.

    ``model``: any :class:`~dpgp_gpflow.contract.PrivateModel` (see :func:`cross_validate` for the
    loss) holding the private outputs. Its hyperparameters in the grid are not used and not changed
    (see :meth:`Selection.apply`); those outside the grid are used as they are, so they must be
    public: a model whose training objective ran, or whose values outside the grid were given at construction
    (not GPflow's defaults) and never declared public, is refused (``PrivacyLeakError``, nothing reserved)
    unless ``hyperparameters_public=True``. ``grid``: a list of dicts of GPflow parameter paths to values;
    ``None`` (default) takes :func:`~dpgp_gpflow.selection.default_grid` (built from public information only).
    ``folds``: the number of folds (a public split seeded by ``split_seed``) or a list of
    ``(train, test)`` index arrays. ``d``: how far one output may move (default the model's
    ``data_sensitivity``; for P outputs one number or P, default ``output_sensitivities``; a classifier's is
    fixed at 2, a label flip, and any other ``d`` is refused with ``ValueError``).

    ``utility``: the CV loss, ``"absolute"`` (default: ``E|r + Z|``, sensitivity ``d`` per unit of
    influence, no clipping) or ``"squared"`` (the JMLR paper's ``E[clip(r + Z, -4d, 4d)^2]``,
    ``8 d^2`` per unit; docs/selection.md#sensitivity). The utility includes the expected effect of the DP noise of a cloaking release of each fold's
    test predictions at ``(epsilon_release, delta_release)`` (``objective``/``calibration`` as for
    ``release``). Without them the release budget defaults to what the accountant has left once the
    selection's own epsilon is held (the smallest ``remaining``, basic composition, of the accountants
    it charges: ``accountant``, a reservation's, or the enclosing ``with PrivacyAccountant(...)`` blocks;
    public, read from the ledger), recorded on the :class:`Selection`; pass them when the release will spend
    less. With no accountant, or none with epsilon and delta left, the noise is taken as zero and a
    :class:`~dpgp_gpflow.ReleaseBudgetWarning` says so in one line (the utility then ignores the privacy
    cost of the release, and tends to favour configurations that need a lot of noise).
    ``release_noise``: how that noise is modelled, ``"bound"`` (default: ``s d max_i |C_ji|`` per
    prediction, the least noise any Gaussian release of it can add; one pass over each fold map;
    within a few percent of the optimised noise at most predictions) or ``"optimised"`` (the
    cloaking release's own noise: one noise optimisation per fold and configuration, far slower at
    large n; docs/selection.md#utility).

    Configurations whose release at that budget would be refused (an ill-conditioned noise
    covariance) are not candidates (a public fact about their fold maps). ``threshold``: optional
    public bound fixed in advance, in the units of the chosen utility's sensitivity; configurations
    whose own sensitivity exceeds it are dropped before anything private is computed.

    ``mechanism``: ``"generalised_exponential"`` (default; Raskhodnikova & Smith 2016: each
    configuration keeps its own sensitivity, ``beta`` sets its utility guarantee, never its privacy),
    ``"exponential"`` or ``"permute_and_flip"`` (McKenna & Sheldon 2020), these two with
    ``Delta_u`` the max over the candidates; all exact and epsilon-DP
    (:mod:`~dpgp_gpflow.selection.mechanism`). When every configuration has about the same
    sensitivity, ``"exponential"`` is sharper (the generalised scores halve the exponent there).

    The budget (``accountant``: a :class:`~dpgp_gpflow.accounting.PrivacyAccountant`, or a caller's
    :class:`~dpgp_gpflow.accounting.Reservation` to commit into; default the innermost
    ``with PrivacyAccountant(...)``) is checked before
    anything is computed (after every argument, ``folds`` included, has been validated) and charged
    once with a pure ``(epsilon, 0)`` event after the draw. ``seed=None`` draws the mechanism's
    randomness exactly from the OS CSPRNG; an explicit seed warns.

    Returns the publishable :class:`Selection`; with ``diagnostics=True`` the pair
    ``(selection, SelectionDiagnostics)``, the latter PRIVATE (utilities and probabilities, for the
    data owner only).

    ``cross_validation``: a :class:`CrossValidation` from :func:`cross_validate` on this same model
    object (with the parameter values it has now) and grid, to reuse its fold matrices and cached
    noise computations (then ``folds``, ``split_seed`` and ``d`` are taken from it); one computed from
    another model, or before the model's parameters changed, is refused (``ValueError``).

    **Persons.** A model with public ``groups`` (docs/guides/groups.md) is selected for persons: a
    neighbour moves all of one person's outputs, each by at most ``d``; each configuration's
    sensitivity is ``d L max_G sum_{i in G} influence_i`` and the release noise the utility models is
    that of a release protecting persons (docs/selection.md#groups).

    **Several outputs** (``DPGPR``, ``DPSGPR``, ``DPGPRFITC`` with ``Y`` [N, P]; ``d`` one number or P). A neighbour moves all P outputs
    of a row (of a person's rows), output p by at most ``d_p``; the utility sums each output's utility in
    units of its own ``d_p`` (times ``d = max d_p``: a wide output does not dominate), its sensitivity is
    ``P d L max_G sum_{i in G} influence_i``, and the release noise it models is the stacked release's
    (docs/selection.md#several-outputs). **Several classes** (``DPMulticlassLaplaceGPC``,
    ``DPSparseMulticlassLaplaceGPC``): the sum over the K classes of the one-vs-rest utility; a label moving
    from one class to another moves two of them, sensitivity ``2 d L max_j influence_j`` (``d = 2``), and
    each class's release noise is modelled at the multi-class step multiplier (docs/selection.md#several-classes).
    """
    epsilon = validate_epsilon(epsilon)
    seed = validate_seed(seed)
    if (epsilon_release is None) != (delta_release is None):
        raise ValueError("give both epsilon_release and delta_release, or neither")
    if epsilon_release is not None:
        epsilon_release = validate_epsilon(epsilon_release)
        delta_release = validate_delta(delta_release)
    validate_objective(objective)
    validate_calibration(calibration)
    if threshold is not None:
        threshold = float(threshold)
        if not threshold > 0.0:
            raise ValueError(f"threshold must be > 0, got {threshold}")
    check_selectable(model)
    # Parameters outside the grid are taken from the model: they must be public too (leak guard).
    check_public(model, hyperparameters_public)
    validate_mechanism(mechanism)
    validate_utility(utility)
    validate_release_noise(release_noise)
    beta = validate_beta(beta)
    # Everything is refused before the budget is reserved: TypeError / ValueError.
    grid_source = "given" if grid is not None else "default"
    checked_grid = validate_grid(model, default_grid(model) if grid is None else grid)
    # The values outside the grid are used as given: undeclared ones are refused too (leak guard).
    _check_undeclared(model, hyperparameters_public, checked_grid)
    if cross_validation is None:
        splits = resolve_splits(folds, num_rows(model), split_seed)
        if d is not None:
            model_columns(model, d)  # checked here, before the budget is reserved
    elif not isinstance(cross_validation, CrossValidation):
        raise TypeError(f"cross_validation must be a CrossValidation, got {type(cross_validation).__name__}")
    elif not cross_validation.computed_from(model) or not same_grid(cross_validation.grid, checked_grid):
        raise ValueError("cross_validation was computed for another model, other parameter values or another grid: "
                         "compute it with cross_validate(model, grid) on this model")
    description = f"{MECHANISM_NAMES[mechanism]}: hyperparameter selection"
    release = (epsilon_release, delta_release)  # None: the budget left once the selection's own is held

    def choose(reservation: Reservation) -> Tuple[Any, ...]:  # the cross-validation, utilities and draw
        epsilon_release, delta_release = release
        if epsilon_release is None:  # public: the ledger's budget left once the selection's own is held
            epsilon_release, delta_release = _release_budget(reservation.accountants)
        if cross_validation is None:
            cv = cross_validate(model, checked_grid, folds=splits, d=d, progress=progress,
                                hyperparameters_public=hyperparameters_public)
        else:
            cv = cross_validation
            if not cv.computed_for(private_columns(model)):
                raise ValueError("cross_validation was computed for another data set")
        sens = cv.sensitivities_of(utility)  # public, per configuration
        kept = np.ones(len(cv), dtype=bool) if threshold is None else sens <= threshold
        if not np.any(kept):
            raise ValueError(f"no configuration has a sensitivity below the threshold {threshold} "
                             f"(smallest: {float(np.min(sens)):.6g})")
        # Public: a configuration whose release would be refused is no candidate.
        kept[kept] = cv.releasable(np.flatnonzero(kept).tolist(), epsilon_release, delta_release, objective=objective,
                                   calibration=calibration, release_noise=release_noise)
        if not np.any(kept):
            raise ValueError("no configuration of the grid could be released at "
                             f"(epsilon, delta) = ({epsilon_release}, {delta_release}): every noise covariance is "
                             "ill-conditioned; widen the grid (larger noise variances or lengthscales)")
        idx = np.flatnonzero(kept)
        utilities = cv.utilities(epsilon_release, delta_release, objective=objective, calibration=calibration,
                                 indices=idx.tolist(), progress=progress, utility=utility, release_noise=release_noise)
        weights = log_weights(utilities[idx], sens[idx], epsilon, mechanism, beta)
        position, reproducible = draw(weights, mechanism, seed)
        choice = int(idx[position])
        reservation.commit(f"{description} among {idx.size} configurations ({len(cv.splits)}-fold CV)")
        return cv, sens, kept, idx, utilities, weights, choice, reproducible, epsilon_release, delta_release

    # The relation a selection protects: the model's own (a row, a person, a row's outputs or a label move), that
    # of the columns its utility's sensitivity is computed for; recorded as Selection.neighbours.
    path = sensitivity_path(model)
    columns = model_columns(model, d) if cross_validation is None else cross_validation.columns

    def same_relation() -> None:  # public, before anything is reserved
        if columns.neighbours != path.relation():
            raise ValueError(f"the utility's columns protect {columns.neighbours!r} but the model's releases "
                             f"{path.relation()!r}: nothing was reserved")

    event = PrivacyEvent(epsilon, 0.0, "pure", None, description)
    selecting = Measurement(None, path.relation(), choose, checks=(same_relation,), events=(event,),
                            description=description, path=path)
    (cv, sens, kept, idx, utilities, weights, choice, reproducible, epsilon_release,
     delta_release) = measure(selecting, accountant)
    selection = Selection(
        chosen=dict(cv.grid[choice]),
        index=choice,
        sensitivity=float(np.max(sens[idx])),
        epsilon=epsilon,
        grid=cv.grid,
        kept=kept,
        config_sensitivities=sens,
        published_sensitivity=float(np.max(cv.published_sensitivities[idx])),
        splits=cv.splits,
        data_sensitivity=cv.data_sensitivity,
        epsilon_release=epsilon_release,
        delta_release=delta_release,
        reproducible=reproducible,
        mechanism=mechanism,
        grid_source=grid_source,
        utility=utility,
        beta=beta,
        release_noise=release_noise,
        output_sensitivities=cv.columns.sensitivities,
        neighbours=selecting.relation,  # the measurement's (checked against the utility's columns)
    )
    if not diagnostics:
        return selection
    probabilities = np.zeros(len(cv))
    probabilities[idx] = probabilities_of(weights, mechanism)  # the very weights the draw used
    return selection, SelectionDiagnostics(utilities=utilities, probabilities=probabilities)
