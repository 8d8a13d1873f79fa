"""The public entry point: :func:`select_hyperparameters`, its publishable result :class:`Selection`
and, on request only, the data owner's private :class:`SelectionDiagnostics`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np
from gpflow.utilities import multiple_assign

from ..accounting import PrivacyAccountant, PrivacyEvent, reserve
from ..calibration import exponential_mechanism_log_weights
from ..contract import PrivateModel
from ..validation import (
    validate_calibration,
    validate_data_sensitivity,
    validate_delta,
    validate_epsilon,
    validate_objective,
    validate_seed,
)
from .cross_validation import (
    Config,
    CrossValidation,
    Split,
    cross_validate,
    num_rows,
    resolve_splits,
    same_grid,
    validate_grid,
)
from .grid import default_grid
from .mechanism import MECHANISM_NAMES, draw, selection_probabilities, validate_mechanism

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
    sensitivity: float  #: Delta_u: max of the corrected sensitivity over the kept configurations
    epsilon: float
    grid: Tuple[Dict[str, Any], ...] = field(repr=False)
    kept: np.ndarray = field(repr=False)  #: [K] bool: configurations under the threshold
    config_sensitivities: np.ndarray = field(repr=False)  #: [K] corrected sensitivity per configuration
    published_sensitivity: float = field(repr=False, default=math.nan)  #: JMLR eq. (13)-(14), NOT valid
    splits: Tuple[Split, ...] = field(repr=False, default=())
    data_sensitivity: float = math.nan
    epsilon_release: Optional[float] = None
    delta_release: Optional[float] = None
    reproducible: bool = False  #: True when the mechanism's randomness came from an explicit seed (not private)
    mechanism: str = "exponential"  #: "exponential" or "permute_and_flip"
    grid_source: str = "given"  #: "given" (the caller's grid) or "default" (:func:`~dpgp_gpflow.selection.default_grid`)

    def apply(self, model) -> None:
        """Assign the chosen configuration to ``model`` (``gpflow.utilities.multiple_assign``) and record
        the values as public for its leak guard (the choice is the DP output of the selection)."""
        multiple_assign(model, self.chosen)
        if hasattr(model, "declare_hyperparameters_public"):
            model.declare_hyperparameters_public()


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


def select_hyperparameters(
    model,
    grid: Optional[Sequence[Config]] = None,
    *,
    epsilon: float,
    folds: Union[int, Sequence[Split]] = 5,
    d: Optional[float] = None,
    threshold: Optional[float] = None,
    seed: Optional[int] = None,
    delta_release: Optional[float] = None,
    epsilon_release: Optional[float] = None,
    objective: str = "mse",
    calibration: str = "analytic",
    accountant: Optional[PrivacyAccountant] = None,
    progress: bool = False,
    split_seed: int = 0,
    cross_validation: Optional[CrossValidation] = None,
    hyperparameters_public: bool = False,
    mechanism: str = "exponential",
    diagnostics: bool = False,
) -> Union[Selection, Tuple[Selection, SelectionDiagnostics]]:
    """Select one configuration of ``grid`` for ``model`` with an epsilon-DP selection mechanism.

    ``model``: any :class:`~dpgp_gpflow.contract.PrivateModel` (see :func:`cross_validate` for the
    loss) holding the private outputs. Its hyperparameters in the grid are not used and not changed
    (see :meth:`Selection.apply`); those outside the grid are used as they are, so they must be
    public: a model whose training objective ran is refused (``PrivacyLeakError``) unless
    ``hyperparameters_public=True``. ``grid``: a list of dicts of GPflow parameter paths to values;
    ``None`` (default) takes :func:`~dpgp_gpflow.selection.default_grid` (built from public information only).
    ``folds``: the number of folds (a public split seeded by ``split_seed``) or a list of
    ``(train, test)`` index arrays. ``d``: how far one output may move (default the model's
    ``data_sensitivity``); residuals are clipped to ``[-4d, 4d]``.

    The utility includes the expected effect of the DP noise of a cloaking release of each fold's
    test predictions at ``(epsilon_release, delta_release)`` (``objective``/``calibration`` as for
    ``release``); with no release budget the noise is taken as zero (the utility then ignores the
    privacy cost of the release, and tends to favour configurations that need a lot of noise).

    ``threshold``: public bound fixed in advance; configurations whose own sensitivity exceeds it
    are dropped before anything private is computed. ``Delta_u`` is the max over the kept ones.

    ``mechanism``: ``"exponential"`` (default; exact report-noisy-max) or ``"permute_and_flip"``
    (McKenna & Sheldon 2020; never worse in expected utility), both epsilon-DP with the same
    ``epsilon u / (2 Delta_u)`` (:mod:`~dpgp_gpflow.selection.mechanism`).

    The budget (``accountant`` or the innermost ``with PrivacyAccountant(...)``) is checked before
    anything is computed (after every argument, ``folds`` included, has been validated) and charged
    once with a pure ``(epsilon, 0)`` event after the draw. ``seed=None`` draws the mechanism's
    randomness exactly from the OS CSPRNG; an explicit seed warns.

    Returns the publishable :class:`Selection`; with ``diagnostics=True`` the pair
    ``(selection, SelectionDiagnostics)``, the latter PRIVATE (utilities and probabilities, for the
    data owner only).

    ``cross_validation``: a :class:`CrossValidation` from :func:`cross_validate` on the same model,
    grid and folds, to reuse its fold matrices and cached noise computations (then ``folds``,
    ``split_seed`` and ``d`` are taken from it).
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
    if not isinstance(model, PrivateModel):
        raise TypeError(f"{type(model).__name__} does not meet the PrivateModel contract (see dpgp_gpflow.contract)")
    # Parameters outside the grid are taken from the model: they must be public too (leak guard).
    model.check_hyperparameters_public(hyperparameters_public)
    validate_mechanism(mechanism)
    # Everything is refused before the budget is reserved: TypeError / ValueError.
    grid_source = "given" if grid is not None else "default"
    checked_grid = validate_grid(model, default_grid(model) if grid is None else grid)
    if cross_validation is None:
        splits = resolve_splits(folds, num_rows(model), split_seed)
        if d is not None:
            d = validate_data_sensitivity(d, tuple(model.y_bounds))
    elif not isinstance(cross_validation, CrossValidation):
        raise TypeError(f"cross_validation must be a CrossValidation, got {type(cross_validation).__name__}")
    description = f"{MECHANISM_NAMES[mechanism]}: hyperparameter selection"
    with reserve(accountant, [PrivacyEvent(epsilon, 0.0, "pure", None, description)]) as reservation:

        if cross_validation is None:
            cv = cross_validate(model, checked_grid, folds=splits, d=d, progress=progress)
        else:
            cv = cross_validation
            y = model.centred_outputs().numpy().reshape(-1)
            if not same_grid(cv.grid, checked_grid) or not cv.computed_for(y):
                raise ValueError("cross_validation was computed for another model, data set or grid")
        sens = cv.sensitivities
        kept = np.ones(len(cv), dtype=bool) if threshold is None else sens <= threshold
        if not np.any(kept):
            raise ValueError(f"no configuration has a sensitivity below the threshold {threshold} "
                             f"(smallest: {float(np.min(sens)):.6g})")
        idx = np.flatnonzero(kept)
        delta_u = float(np.max(sens[idx]))
        utilities = cv.utilities(epsilon_release, delta_release, objective=objective, calibration=calibration,
                                 indices=idx, progress=progress)
        position, reproducible = draw(exponential_mechanism_log_weights(utilities[idx], epsilon, delta_u),
                                      mechanism, seed)
        choice = int(idx[position])
        reservation.commit(f"{description} among {idx.size} configurations ({len(cv.splits)}-fold CV)")
    selection = Selection(
        chosen=dict(cv.grid[choice]),
        index=choice,
        sensitivity=delta_u,
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
    )
    if not diagnostics:
        return selection
    probabilities = np.zeros(len(cv))
    probabilities[idx] = selection_probabilities(utilities[idx], epsilon, delta_u, mechanism=mechanism)
    return selection, SelectionDiagnostics(utilities=utilities, probabilities=probabilities)
