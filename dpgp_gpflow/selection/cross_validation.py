"""Cross-validation over a grid of public hyperparameters, built from the model contract only.

For each configuration the model's ``split_terms(train, test)`` gives each fold's public map from
the centred training outputs to the centred test predictions (any
:class:`~dpgp_gpflow.contract.PrivateModel`: no switch on the model's kind). :class:`CrossValidation`
holds those public matrices, their sensitivities and the noise a later release would add;
:meth:`CrossValidation.utilities` is the one private computation.

With persons (the model's public ``groups``; docs/guides/groups.md) a neighbour moves all of one person's
outputs, each by at most ``d``: a configuration's sensitivity is ``d L max_G sum_{i in G} influence_i``
(:func:`~dpgp_gpflow.selection.utility.person_influence`), and the release noise the utility models is
that of a release protecting persons: each fold's training rows get the neighbour map of their persons
(:func:`~dpgp_gpflow.neighbours.group_neighbours`, the corners of each person's box), whose columns
``C_f A`` replace those of ``C_f`` in the noise bound and the noise plan (docs/selection.md#groups).
Privacy assumption: ``groups`` is public, fixed before the outputs are read.

Several outputs per row (``Y`` [N, P]: ``DPGPR``, ``DPSGPR``, ``DPGPRFITC``) and several classes (the one-vs-rest classifiers)
are Q columns sharing each fold map (:mod:`~dpgp_gpflow.selection.columns`): the utility sums the
columns' utilities, each in units of its own sensitivity
(:func:`~dpgp_gpflow.selection.utility.cv_column_utility`), and a configuration's sensitivity is the
number of columns one neighbour moves (P, or 2 for a label moving between classes) times the one-column
sensitivity. The release noise the utility models is the stacked release of the P outputs under the
entry-level neighbour map (:func:`~dpgp_gpflow.neighbours.model_neighbours`), or each class's own
release at the multi-class step multiplier (docs/selection.md#several-outputs,
docs/selection.md#several-classes).
"""

from __future__ import annotations

import weakref
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf
from gpflow.utilities import deepcopy, multiple_assign, parameter_dict

from ..calibration import gaussian_multiplier
from ..noise_planning import DEFAULT_TOL, noise_std_lower_bound
from ..contract import PrivateModel, dense_map, output_terms, unstacked
from ..models.base import parameter_values
from ..models.multiclass import multiclass_step_multiplier
from ..progress import Progress
from ..mechanisms import NoisePlan
from ..neighbours import Neighbours, model_neighbours, neighbour_columns
from ..validation import (
    as_float64,
    check_parameter_magnitude,
    validate_calibration,
    validate_delta,
    validate_epsilon,
    validate_groups,
)
from .columns import (
    OutputColumns,
    check_selectable,
    fold_model,
    is_multiclass,
    model_columns,
    num_rows,
    private_columns,
    stack_noise,
)
from .utility import Fold, cv_column_utility, loss_lipschitz, person_influence, published_sensitivity, validate_utility

__all__ = ["CrossValidation", "cross_validate", "cv_folds"]

Config = Mapping[str, Any]
Split = Tuple[np.ndarray, np.ndarray]

#: How the utility models the release's noise (:meth:`CrossValidation.noise_std`): the lower bound
#: ``s d max_i |C_ji|`` (default; one pass over ``C``) or the cloaking release's optimised noise.
RELEASE_NOISE = ("bound", "optimised")


def validate_release_noise(release_noise: Any) -> str:
    """``"bound"`` or ``"optimised"``; anything else raises ``ValueError``."""
    if not isinstance(release_noise, str) or release_noise not in RELEASE_NOISE:
        raise ValueError(f"release_noise must be one of {RELEASE_NOISE}, got {release_noise!r}")
    return release_noise


#: Configurations whose maps on a public sub-problem (:func:`_probe_split`) agree to this relative
#: tolerance (max norm) are the same map up to rounding (e.g. a GP's kernel and noise variances
#: scaled together) and share one set of fold matrices, sensitivities and noise plans: the first
#: such configuration's (whose full fold maps alone are computed).
SHARE_RTOL = 1e-9


class _NoiseProfile:
    """The noise std per point of ``release.cloaking_release(C, ...)`` as a function of the noise
    multiplier, without drawing noise: :class:`~dpgp_gpflow.mechanisms.NoisePlan` (the release's own
    rank rule, cached across multipliers). Public: depends on ``C`` and the public output bound only.

    If the release would be refused (``FloatingPointError``: an ill-conditioned noise covariance),
    the std is ``inf``: that configuration could not be released, and its utility is the worst one.
    """

    def __init__(self, C, *, data_sensitivity: float, output_bound: float, objective: str,
                 rtol: Optional[float] = None, tol: float = DEFAULT_TOL, max_iter: int = 500,
                 neighbours: Optional[Neighbours] = None) -> None:
        self._plan = NoisePlan(C, data_sensitivity=data_sensitivity, output_bound=output_bound,
                               objective=objective, rtol=rtol, tol=tol, max_iter=max_iter, neighbours=neighbours)

    def std(self, multiplier: float) -> np.ndarray:
        try:
            return self._plan.noise_std(multiplier)
        except FloatingPointError:
            return np.full(self._plan.k, np.inf)


class _NoNoise:
    """The noise of a fold whose map ``C`` is exactly zero: its test predictions do not read the outputs, so a
    release of them adds none (``cloaking_release`` refuses such a ``C``: nothing to release privately). Zeros, as
    the lower bound ``s d max |C_ji|`` of ``release_noise="bound"``. Public: ``C`` is."""

    def __init__(self, k: int) -> None:
        self.k = int(k)

    def std(self, multiplier: float) -> np.ndarray:
        return np.zeros(self.k)


def _fold_profile(C, **options) -> Union[_NoiseProfile, _NoNoise]:
    """:class:`_NoiseProfile` of a fold's map ``C`` (dense or factored), or :class:`_NoNoise` when ``C`` is exactly
    zero (checked, densely, only when the plan refuses it: a non-finite ``C`` is still refused)."""
    try:
        return _NoiseProfile(C, **options)
    except ValueError:
        dense = dense_map(C).numpy()
        if not (np.all(np.isfinite(dense)) and not np.any(dense)):
            raise
        return _NoNoise(dense.shape[0])


def release_noise_std(C, *, data_sensitivity: float, output_bound: float, epsilon: float, delta: float,
                      objective: str = "mse", calibration: str = "analytic", rtol: Optional[float] = None,
                      tol: float = DEFAULT_TOL, max_iter: int = 500,
                      neighbours: Optional[Neighbours] = None) -> np.ndarray:
    """The DP noise std per point of ``cloaking_release(C, ...)`` at ``(epsilon, delta)``, drawing nothing.

    ``C`` is k x n or a pair ``(A, B)``; the arguments mean what they mean for
    :func:`dpgp_gpflow.mechanisms.cloaking_release` (``neighbours``: the public neighbour map of persons,
    None for one row per person), which would report the same ``noise_std``. For a model of P outputs
    per row the release is the stacked one: pass ``dp.cloaking_matrix(model, Xnew)`` (``I_P kron C``),
    ``data_sensitivity=model.data_sensitivity`` (the largest ``d_p``) and
    ``neighbours=dpgp_gpflow.neighbours.model_neighbours(model, N * P)``; the result is stacked output by
    output ([k P]; ``contract.unstacked(std, P)`` gives the release's [k, P]). Public: depends on ``C``,
    the public bound and the neighbour map only; charges nothing.
    """
    multiplier = gaussian_multiplier(validate_epsilon(epsilon), validate_delta(delta), validate_calibration(calibration))
    profile = _NoiseProfile(C, data_sensitivity=data_sensitivity, output_bound=output_bound, objective=objective,
                            rtol=rtol, tol=tol, max_iter=max_iter, neighbours=neighbours)
    return profile.std(multiplier)


def stacked_map(map_: Any, num_outputs: int) -> Any:
    """The map of the stacked release of ``num_outputs`` outputs sharing the fold map ``map_`` (a dense
    ``C``, or a factored pair whose factors are stacked alike): ``I_P kron C``
    (:func:`~dpgp_gpflow.contract.output_terms`, the one stacking convention); ``map_`` itself for
    one output. Public."""
    P = int(num_outputs)
    if P == 1:
        return map_

    def one(M: Any) -> np.ndarray:
        M = tf.convert_to_tensor(M, tf.float64)
        k = int(M.shape[0])
        return dense_map(output_terms(M, tf.zeros([k, 1], tf.float64), tf.zeros([k], tf.float64), P).map).numpy()

    return tuple(one(t) for t in map_) if isinstance(map_, (tuple, list)) else one(map_)


def cv_folds(n: int, folds: int = 5, seed: int = 0) -> List[Split]:
    """Seeded kappa-fold split of ``range(n)``: ``(train, test)`` index arrays, each point tested once.

    A ``default_rng(seed)`` permutation cut into ``folds`` near-equal blocks. Public: it depends on
    ``n`` and the seed only (the same rule as :func:`dpgp_gpflow.datasets.kung_folds`).
    """
    n, folds = int(n), int(folds)
    if not 2 <= folds <= n:
        raise ValueError(f"folds must be an integer in [2, n={n}], got {folds}")
    perm = np.random.default_rng(seed).permutation(n)
    return [(np.setdiff1d(perm, test), np.sort(test)) for test in np.array_split(perm, folds)]


def _validate_splits(splits: Any, n: int) -> List[Split]:
    out = []
    try:
        items = list(splits)
    except TypeError as exc:
        raise TypeError("folds must be an int or a list of (train, test) index arrays") from exc
    if not items:
        raise ValueError("folds is empty")
    for item in items:
        try:
            train, test = item
        except (TypeError, ValueError) as exc:
            raise TypeError("each fold must be a pair (train, test) of index arrays") from exc
        pair = []
        for name, idx in (("train", train), ("test", test)):
            arr = np.asarray(idx)
            if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
                raise ValueError(f"a fold's {name} indices must be a non-empty 1-D integer array")
            if arr.min() < 0 or arr.max() >= n or np.unique(arr).size != arr.size:
                raise ValueError(f"a fold's {name} indices must be distinct and in [0, {n})")
            pair.append(arr.astype(np.int64))
        out.append((pair[0], pair[1]))
    return out


def check_public(model: Any, declared: bool) -> None:
    """The leak guard of ``model`` (of each class's problem for a multi-class model): ``PrivacyLeakError``
    unless ``declared`` when its training objective ran or a parameter changed since it was recorded public."""
    for target in (model.problems if is_multiclass(model) else (model,)):
        target.check_hyperparameters_public(declared)


def model_groups(model: Any) -> Optional[np.ndarray]:
    """The model's public ``groups`` (validated int64 [N]), or None (one row per person): what the
    selection reads of the neighbouring relation. Public."""
    return validate_groups(getattr(model, "groups", None), num_rows(model))


class _FoldRows(NamedTuple):
    """The public description :func:`~dpgp_gpflow.neighbours.model_neighbours` reads of a model, for one
    fold's training rows: their persons (None: one row each), P and the outputs' sensitivities."""

    groups: Optional[np.ndarray]
    num_outputs: int
    output_sensitivities: Tuple[float, ...]


def resolve_splits(folds: Union[int, Sequence[Split]], n: int, split_seed: int = 0) -> List[Split]:
    """``folds`` as a list of ``(train, test)`` index arrays: an int is the number of folds of a
    :func:`cv_folds` split seeded by ``split_seed``; a list of pairs is checked against ``n``.
    ``TypeError`` / ``ValueError`` otherwise. Public: depends on ``n`` and the arguments only."""
    if isinstance(folds, (int, np.integer)) and not isinstance(folds, bool):
        return cv_folds(n, int(folds), split_seed)
    return _validate_splits(folds, n)


def _check_value(path: str, param: Any, value: Any) -> None:
    """``TypeError`` unless ``value`` holds real numbers; ``ValueError`` unless it has the parameter's
    shape and lies inside its constraint (its transform maps it to a finite unconstrained value)."""
    arr = as_float64(f"the grid value for {path}", value)
    if arr.shape != tuple(param.shape):
        raise ValueError(f"the grid value for {path} has shape {arr.shape}, the parameter {tuple(param.shape)}")
    ok = bool(np.all(np.isfinite(arr)))
    if ok and param.transform is not None:
        unconstrained = param.transform.inverse(tf.constant(arr, dtype=param.dtype))
        ok = bool(tf.reduce_all(tf.math.is_finite(unconstrained))) and bool(
            tf.reduce_all(tf.math.is_finite(param.transform.forward(unconstrained))))
    if not ok:
        raise ValueError(f"the grid value {value!r} for {path} is outside the parameter's constraint "
                         f"({param.transform.name if param.transform is not None else 'finite'})")
    check_parameter_magnitude(f"the grid value for {path}", param, arr)  # the releases' range: no overflow


def validate_grid(model, grid: Any) -> Tuple[Dict[str, Any], ...]:
    """The grid as a tuple of dicts, checked against ``model`` (public, nothing is assigned):
    ``TypeError`` for a grid that is not a list of dicts or a value that is not real numbers,
    ``ValueError`` for an empty grid, an unknown parameter path (the message lists the valid ones)
    or a value of the wrong shape or outside the parameter's constraint (e.g. a lengthscale <= 0)."""
    if isinstance(grid, Mapping) or not hasattr(grid, "__iter__"):
        raise TypeError("grid must be a list of dicts mapping parameter paths to values")
    try:
        grid = tuple(dict(c) for c in grid)
    except (TypeError, ValueError) as exc:
        raise TypeError("grid must be a list of dicts mapping parameter paths to values") from exc
    if not grid:
        raise ValueError("grid is empty")
    known = parameter_dict(model)
    if is_multiclass(model):  # a parameter of one class's problem only would leave the others' maps behind
        known = {k: v for k, v in known.items() if not k.startswith(".problems")}
    for config in grid:
        unknown = [k for k in config if k not in known]
        if unknown:
            raise ValueError(f"unknown parameter path(s) {unknown}; the model's parameters are {sorted(known)}"
                             + (" (a multi-class grid sets parameters every class shares)" if is_multiclass(model)
                                else ""))
        for path, value in config.items():
            _check_value(path, known[path], value)
    return grid


def same_grid(a, b) -> bool:
    return len(a) == len(b) and all(
        x.keys() == z.keys() and all(np.array_equal(np.asarray(x[k]), np.asarray(z[k])) for k in x)
        for x, z in zip(a, b))


class CrossValidation:
    """The public part of a CV over a grid (fold matrices, sensitivities) and, for the data owner,
    the private utilities. Build it with :func:`cross_validate`.

    Public: ``grid``, ``splits``, ``groups`` (the persons, None: one row each), ``columns`` (the
    :class:`~dpgp_gpflow.selection.columns.OutputColumns`: one output, P outputs or K classes),
    ``folds[i]`` (the :class:`Fold` list of configuration i),
    ``owners[i]`` (the configuration whose fold matrices configuration i uses: itself, or an
    earlier one with the same maps up to rounding, :data:`SHARE_RTOL`), ``influence`` and
    :meth:`sensitivities_of` (per configuration), ``published_sensitivities`` (JMLR eq. 13, NOT valid),
    ``noise_std(...)``. Private: :meth:`utilities` reads the model's outputs; publish a selection
    made from them only through a selection mechanism.
    """

    def __init__(self, grid, splits, folds, release_matrices, output_bounds, y, d, n, owners=None,
                 groups=None, columns: Optional[OutputColumns] = None) -> None:
        # y: the private centred outputs ([n], or [n, Q] columns); folds: offsets 0, maps from y[train] to
        # centred predictions, one map for every column
        self.grid: Tuple[Dict[str, Any], ...] = grid
        self.splits: Tuple[Split, ...] = tuple(splits)
        self.folds: List[List[Fold]] = folds
        self.owners = np.arange(len(grid)) if owners is None else np.asarray(owners, dtype=np.int64)
        #: public: the columns (their sensitivities, how many one neighbour moves, how they are released)
        self.columns: OutputColumns = OutputColumns("outputs", (float(d),), 1, "row") if columns is None else columns
        if columns is not None and float(d) != self.columns.data_sensitivity:
            raise ValueError(f"d = {float(d)} is not the columns' largest sensitivity {self.columns.data_sensitivity}")
        self.data_sensitivity = float(d)
        self.n = int(n)
        #: [n] int64 public person identifiers, or None (one row per person)
        self.groups: Optional[np.ndarray] = validate_groups(groups, self.n)
        self._fold_neighbours: Dict[int, Optional[Neighbours]] = {}
        self._release_matrices = release_matrices
        self._output_bounds = output_bounds
        self._y = y  # private outputs (clipped), [n] or [n, Q]
        self._profiles: Dict[Tuple[str, int, int], Union[_NoiseProfile, _NoNoise]] = {}
        self._largest: Dict[int, List[np.ndarray]] = {}
        self._model_state: Optional[Tuple[Any, Dict[str, np.ndarray]]] = None  # set by cross_validate
        one = self.columns.num_columns == 1 and self.columns.moved == 1  # the JMLR formula is for one output
        own = {int(o): (float(np.max(person_influence(folds[o], n, self.groups))),
                        published_sensitivity(folds[o], d) if one else float("nan"))
               for o in set(self.owners)}
        #: [K] public: max over persons (rows without groups) of the bound on the total change of the CV
        #: residuals per unit change of each of their outputs
        self.influence = np.array([own[int(o)][0] for o in self.owners])
        self.published_sensitivities = np.array([own[int(o)][1] for o in self.owners])

    def sensitivities_of(self, utility: str = "absolute") -> np.ndarray:
        """[K] public: each configuration's sensitivity ``d * loss_lipschitz(utility, d) * influence``
        (docs/selection.md#sensitivity), times the number of columns one neighbour moves (P outputs, or 2
        for a label moving between classes; docs/selection.md#several-outputs)."""
        one = self.data_sensitivity * loss_lipschitz(utility, self.data_sensitivity) * self.influence
        return one if self.columns.moved == 1 else self.columns.moved * one

    @property
    def sensitivities(self) -> np.ndarray:
        """[K] public: each configuration's sensitivity under the default (absolute) utility."""
        return self.sensitivities_of("absolute")

    def fold_neighbours(self, fold: int) -> Optional[Neighbours]:
        """The public neighbour map of the release of fold ``fold``'s predictions, over its training rows:
        their persons' extreme changes (:func:`~dpgp_gpflow.neighbours.model_neighbours` of
        ``groups[train]``), None without groups or when each person has one training row there. For P
        outputs the map of the stacked release (every output of a person's rows, output p scaled by
        ``d_p / d``); for classes each class's own (its release protects the person's rows). The same for
        every configuration (the split's)."""
        if fold not in self._fold_neighbours:
            train = self.splits[fold][0]
            P = self.columns.num_columns if self.columns.stacked else 1
            d = self.columns.sensitivities if self.columns.stacked else (self.data_sensitivity,)
            rows = _FoldRows(None if self.groups is None else self.groups[train], P, d)
            self._fold_neighbours[fold] = model_neighbours(rows, train.size * P)
        return self._fold_neighbours[fold]

    def computed_from(self, model: Any) -> bool:
        """Whether this cross-validation was computed from ``model`` itself (the same object) with the
        parameter values it has now. Public: compares parameters, not outputs."""
        if self._model_state is None:
            return False
        ref, values = self._model_state
        now = parameter_values(model)
        return ref() is model and now.keys() == values.keys() and all(
            np.array_equal(now[k], values[k]) for k in values)

    def __len__(self) -> int:
        return len(self.grid)

    def computed_for(self, y: Any) -> bool:
        """PRIVATE check: whether this cross-validation was computed on the centred outputs ``y`` ([n], or
        [n, Q] columns: :func:`~dpgp_gpflow.selection.columns.private_columns`)."""
        y = np.asarray(y, dtype=np.float64)
        return y.shape == np.shape(self._y) and bool(np.array_equal(self._y, y))

    def noise_std(self, index: int, epsilon_release: Optional[float], delta_release: Optional[float], *,
                  objective: str = "mse", calibration: str = "analytic",
                  release_noise: str = "bound") -> List[np.ndarray]:
        """Per fold of configuration ``index``: the noise std a release of its test predictions at
        ``(epsilon_release, delta_release)`` would add (zeros when no release budget is given).

        ``release_noise="bound"`` (default): ``s d max_i |C_ji|``
        (:func:`~dpgp_gpflow.noise_planning.noise_std_lower_bound`), the least noise any Gaussian release
        of those predictions can add, one pass over ``C``; ``"optimised"``: the cloaking release's
        own noise (:class:`~dpgp_gpflow.mechanisms.NoisePlan`, one noise optimisation per fold; ``inf``
        where that release would be refused; zeros for a fold whose map is exactly zero, as the bound: its
        predictions do not read the outputs). With ``groups`` both protect persons: the bound is taken
        over the columns of ``C A`` (:meth:`fold_neighbours`; ``s d max_G sum_{i in G} |C_ji|`` for
        persons of at most four rows) and the plan gets ``neighbours=A``. Public either way: functions
        of ``C``, the bounds and the persons.

        Several columns give [k, Q] per fold. P outputs: the stacked release of all P (its map
        ``I_P kron C``, :func:`stacked_map`, under the stacked neighbour map of :meth:`fold_neighbours`:
        ``s d_p max_i |C_ji|`` for output p without groups and P <= 4); classes: each class's own
        release at the multi-class step multiplier ``sqrt(m) s`` of one step (m = 2 without groups), the
        same for every class.
        """
        validate_release_noise(release_noise)
        cols = self.columns
        if epsilon_release is None and delta_release is None:
            return [self._per_column(np.zeros(f.test.size * (cols.num_columns if cols.stacked else 1)))
                    for f in self.folds[index]]
        multiplier = gaussian_multiplier(validate_epsilon(epsilon_release), validate_delta(delta_release), calibration)
        if cols.kind == "classes":  # each class on its own, at the step multiplier of a one-step multi-class release
            multiplier = multiclass_step_multiplier(multiplier, 1, cols.release_moved)
        index = int(self.owners[index])
        outputs = cols.num_columns if cols.stacked else 1
        if release_noise == "bound":
            if index not in self._largest:  # max_i |(C A)_ji| per fold: the bound at unit s d
                self._largest[index] = [
                    noise_std_lower_bound(m, 1.0, 1.0) if self.fold_neighbours(i) is None and outputs == 1
                    else noise_std_lower_bound(neighbour_columns(stacked_map(f.C, outputs),
                                                                 self.fold_neighbours(i)).numpy(), 1.0, 1.0)
                    for i, (m, f) in enumerate(zip(self._release_matrices[index], self.folds[index]))]
            return [self._per_column(multiplier * self.data_sensitivity * largest) for largest in self._largest[index]]
        out = []
        for i, f in enumerate(self.folds[index]):
            key = (objective, index, i)
            if key not in self._profiles:
                self._profiles[key] = _fold_profile(
                    stacked_map(self._release_matrices[index][i], outputs), data_sensitivity=self.data_sensitivity,
                    output_bound=self._output_bounds[index][i], objective=objective,
                    neighbours=self.fold_neighbours(i))
            out.append(self._per_column(self._profiles[key].std(multiplier)))
        return out

    def _per_column(self, std: np.ndarray) -> np.ndarray:
        """A release's noise std as the columns' [k, Q] (stacked P outputs unstacked; one class's std for
        every class); [k] for one column."""
        if self.columns.stacked:
            return unstacked(std, self.columns.num_columns)
        return stack_noise(std, self.columns.num_columns)

    def utilities(self, epsilon_release: Optional[float] = None, delta_release: Optional[float] = None, *,
                  objective: str = "mse", calibration: str = "analytic", indices: Optional[Sequence[int]] = None,
                  progress: bool = False, utility: str = "absolute", release_noise: str = "bound") -> np.ndarray:
        """PRIVATE: the expected CV utilities under ``utility`` (``nan`` for configurations not in
        ``indices``; ``-inf`` for one whose release at that budget would be refused, absolute loss),
        summed over the columns in units of each one's sensitivity (:func:`cv_column_utility`).

        Noise-std computations are cached, so calling again at other release budgets is cheap.
        """
        if (epsilon_release is None) != (delta_release is None):
            raise ValueError("give both epsilon_release and delta_release, or neither")
        validate_utility(utility)
        indices = range(len(self.grid)) if indices is None else list(indices)
        u = np.full(len(self.grid), np.nan)
        done: Dict[int, float] = {}  # per owner: configurations that share fold matrices share the utility
        bar = Progress(len(indices), progress, "CV utilities")
        try:
            for i in indices:
                owner = int(self.owners[i])
                if owner not in done:
                    sig = self.noise_std(owner, epsilon_release, delta_release, objective=objective,
                                         calibration=calibration, release_noise=release_noise)
                    done[owner] = cv_column_utility(self.folds[owner], self._y, self.columns.sensitivities, sig,
                                                    utility=utility)
                u[i] = done[owner]
                bar.update()
        finally:
            bar.close()
        return u

    def releasable(self, indices: Sequence[int], epsilon_release: Optional[float], delta_release: Optional[float], *,
                   objective: str = "mse", calibration: str = "analytic", release_noise: str = "bound") -> np.ndarray:
        """[len(indices)] bool, public: whether every fold's release of configuration i at
        ``(epsilon_release, delta_release)`` could be made (no infinite noise std: the release would
        not be refused). All True without a release budget, and with ``release_noise="bound"``
        (which does not run the release's optimiser)."""
        return np.array([all(np.all(np.isfinite(s)) for s in self.noise_std(
            int(i), epsilon_release, delta_release, objective=objective, calibration=calibration,
            release_noise=release_noise)) for i in indices], dtype=bool)


#: Configurations are compared on a public sub-problem before any full fold map is computed: this
#: many training and test points of the first fold, spread evenly over its (sorted) index arrays.
PROBE_TRAIN, PROBE_TEST = 256, 64


def _probe_split(splits: Sequence[Split]) -> Split:
    """The public sub-problem of :func:`cross_validate`'s sharing test: evenly spread training and
    test indices of the first fold (at most :data:`PROBE_TRAIN` and :data:`PROBE_TEST`). Public:
    depends on the split only."""
    train, test = splits[0]
    pick = lambda idx, size: idx[np.unique(np.linspace(0, idx.size - 1, min(size, idx.size)).astype(np.int64))]  # noqa: E731
    return pick(train, PROBE_TRAIN), pick(test, PROBE_TEST)


def _shares(a: List[Fold], bound_a: float, b: List[Fold], bound_b: float) -> bool:
    """Whether two configurations' fold maps are the same up to rounding (:data:`SHARE_RTOL`)."""
    if bound_a != bound_b:
        return False
    for fa, fb in zip(a, b):
        if fa.C.shape != fb.C.shape:
            return False
        off_a, off_b = np.asarray(fa.offset, dtype=np.float64), np.asarray(fb.offset, dtype=np.float64)  # set by _fold
        scale = max(float(np.max(np.abs(fb.C), initial=0.0)), float(np.max(np.abs(off_b), initial=0.0)), 1e-300)
        if not (np.max(np.abs(fa.C - fb.C), initial=0.0) <= SHARE_RTOL * scale
                and np.max(np.abs(off_a - off_b), initial=0.0) <= SHARE_RTOL * scale):
            return False
    return True


def _fold(model: PrivateModel, train: np.ndarray, test: np.ndarray) -> Tuple[Fold, Any]:
    """One fold from the contract: the dense fold matrix (for the utility) and the map as the model
    gives it (dense or factored, for the noise plan). Public: no outputs are read."""
    terms = model.split_terms(train, test)
    C = dense_map(terms.map).numpy()
    release_map = tuple(t.numpy() for t in terms.map) if isinstance(terms.map, (tuple, list)) else C
    return Fold(train, test, C, np.reshape(np.asarray(terms.offset, dtype=np.float64), [-1])), release_map


def cross_validate(model: Any, grid: Sequence[Config], *, folds: Union[int, Sequence[Split]] = 5,
                   split_seed: int = 0, d: Any = None, progress: bool = False,
                   hyperparameters_public: bool = False) -> CrossValidation:
    """Fold matrices of ``model`` (any :class:`~dpgp_gpflow.contract.PrivateModel`) for every configuration of ``grid``.

    Each configuration (a dict of GPflow parameter paths to values, e.g.
    ``{".kernel.lengthscales": 25.0, ".likelihood.variance": 1.0}``) is assigned to its own fresh copy
    of the model (parameters it does not set keep the model's values); nothing is trained and the
    model itself is not changed. ``folds``: the number of folds of
    a :func:`cv_folds` split seeded by ``split_seed``, or a list of ``(train, test)`` index arrays.
    Each fold's matrix is the model's ``split_terms(train, test)``: for the regression models the
    predictive mean at the test inputs given the training outputs; for the classifiers the latent
    mean after one Newton step from zero (what a one-step release predicts), whose clipped squared
    error against the held-out labels is a least-squares classification loss, linear in the labels,
    so the sensitivity of ``docs/selection.md`` applies unchanged.

    The model's parameters outside the grid shape every fold map, so they must be public: its leak
    guard runs first (``PrivacyLeakError`` unless ``hyperparameters_public=True``), and the result
    remembers the model and those values (:meth:`CrossValidation.computed_from`), so that
    :func:`select_hyperparameters` refuses it for another model or after they changed.

    A model with public ``groups`` is cross-validated for persons (module docstring). A model with
    ``Y`` [N, P] (``DPGPR``, ``DPSGPR``, ``DPGPRFITC``: one map for every output) is cross-validated on its P outputs together (``d``: one number or P), a
    ``DPMulticlassLaplaceGPC`` / ``DPSparseMulticlassLaplaceGPC`` on its K one-vs-rest label columns (the
    binary problem's fold maps; a grid sets parameters every class shares); module docstring. A classifier's
    ``d`` is fixed at 2 (a label flip): None or 2, any other value refused (``ValueError``).
    """
    check_selectable(model)
    # Parameters outside the grid are the model's own: its leak guard must pass (they shape every fold map).
    check_public(model, hyperparameters_public)
    grid = validate_grid(model, grid)
    columns = model_columns(model, d)
    y = private_columns(model)
    n = int(y.shape[0])
    d = columns.data_sensitivity
    splits = resolve_splits(folds, n, split_seed)
    probe_train, probe_test = _probe_split(splits)
    all_folds: List[List[Fold]] = []
    matrices: List[Any] = []
    bounds: List[List[float]] = []
    owners: List[int] = []
    probes: Dict[int, List[Fold]] = {}
    bar = Progress(len(grid), progress, "fold matrices")
    try:
        for i, config in enumerate(grid):
            work = deepcopy(model)  # every configuration starts from the model's own values
            multiple_assign(work, config)
            work = fold_model(work)  # a multi-class model's maps: its first problem's (every class shares them)
            bound = float(work.output_bound)
            # the map on a small public sub-problem decides sharing before any full fold is computed
            probe = [_fold(work, probe_train, probe_test)[0]]
            owner = next((j for j in probes if _shares(probe, bound, probes[j], bounds[j][0])), i)
            owners.append(owner)
            if owner == i:
                probes[i] = probe
                per = [_fold(work, train, test) for train, test in splits]
                all_folds.append([p[0] for p in per])
                matrices.append([p[1] for p in per])
            else:  # the same maps as an earlier configuration: its matrices, not computed again
                all_folds.append(all_folds[owner])
                matrices.append(matrices[owner])
            bounds.append([bound] * len(splits))
            bar.update()
    finally:
        bar.close()
    cv = CrossValidation(grid, splits, all_folds, matrices, bounds, y, d, n, owners, model_groups(model), columns)
    cv._model_state = (weakref.ref(model), parameter_values(model))
    return cv
