"""What every private GPflow model shares: public output bounds, the leak guard, the contract's
common members and ``release``.

A private model subclasses a GPflow model and :class:`PrivateModelMixin` (or
:class:`FactoredModelMixin`). It clips its private outputs to the public bounds at construction,
centres them with a *public* prior mean (never a statistic of ``y``) and meets
:class:`~dpgp_gpflow.contract.PrivateModel`; ``release`` (and ``release_function``) are the only
methods that publish anything derived from the outputs.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
import warnings
from types import FrameType
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Type

import gpflow
import numpy as np
import tensorflow as tf

from .. import pipeline
from ..contract import (
    PublicReadout,
    ReleaseTerms,
    dense_map,
    latent_terms_and_readout,
    output_terms,
    readout_and_variance,
    stacked,
)
from ..exceptions import HyperparameterWarning, PrivacyLeakError
from ..leak_guard import undeclared_hyperparameters_refused, validate_declaration
from ..pipeline import reference_coordinates
from ..released import PrivateFunction, PrivateRelease
from ..validation import (
    as_dask_rows,
    as_inputs,
    as_outputs,
    bound_columns,
    bounds_array,
    clip_outputs,
    clip_private_outputs,
    is_dask_array,
    parameter_value,
    require_float64,
    validate_bounds,
    validate_data_sensitivity,
    validate_groups,
    validate_noise_variance,
    validate_output_bounds,
    validate_output_sensitivities,
)

__all__ = ["FactoredModelMixin", "LeakGuardMixin", "PrivateModelMixin"]


def check_mean_function(mean_function: Any, input_dim: int, num_outputs: int) -> None:
    """``ValueError`` (one line, at construction) unless a user's public prior mean (None: the model's own)
    evaluates at an input of ``input_dim`` columns to one column (one mean for every output) or
    ``num_outputs`` columns (one per output): anything else would broadcast against the outputs later."""
    if mean_function is None:
        return
    try:
        columns = mean_function(tf.zeros([1, int(input_dim)], tf.float64))
    except (tf.errors.InvalidArgumentError, ValueError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"the mean function cannot be evaluated at an input of {int(input_dim)} column(s): "
                         f"{first}") from None
    shape = tuple(columns.shape)
    if len(shape) != 2 or shape[0] != 1 or shape[1] not in (1, int(num_outputs)):
        allowed = "1" if int(num_outputs) == 1 else f"1 (one mean for every output) or {int(num_outputs)} (one per output)"
        raise ValueError(f"the mean function gives {shape[-1] if shape else 0} column(s) per input; a model of "
                         f"{int(num_outputs)} output(s) per row takes {allowed}")


def prepare_private_data(data: Any, y_bounds: Any, data_sensitivity: Any, noise_variance: Any = None, *,
                         several_outputs: bool = False, mean_function: Any = None):
    """Validate ``(X, Y)`` (and ``noise_variance``: ``validate_noise_variance``, ``TypeError`` /
    ``ValueError``; a user's ``mean_function``: :func:`check_mean_function`), clip ``Y`` to the public bounds;
    returns ``(X, Y, bounds, d)``.

    ``several_outputs``: ``Y`` may be [N, P]; ``y_bounds`` a pair or [P, 2]
    (:func:`~dpgp_gpflow.validation.validate_output_bounds`) and ``d`` the tuple of the P per-output
    sensitivities (``data_sensitivity`` one number or P). Otherwise ``Y`` [N, 1] (several columns:
    ``NotImplementedError``), a pair and one ``d``, as always."""
    require_float64()
    validate_noise_variance(noise_variance)
    try:
        X, Y = data
    except (TypeError, ValueError) as exc:
        raise TypeError("data must be a pair (X, Y)") from exc
    X = as_inputs("X", X)
    Y = as_outputs("Y", Y, X.shape[0], several=several_outputs)
    check_mean_function(mean_function, X.shape[1], Y.shape[1])
    if not several_outputs:
        bounds = validate_bounds(y_bounds)
        d = validate_data_sensitivity(data_sensitivity, bounds)
        return X, clip_outputs(Y, bounds), bounds, d
    P = int(Y.shape[1])
    output_bounds = validate_output_bounds(y_bounds, P)
    sensitivities = validate_output_sensitivities(data_sensitivity, output_bounds, P)
    return X, clip_outputs(Y, output_bounds), output_bounds, sensitivities


def split_dask_rows(data: Any, several_outputs: bool = False) -> Tuple[Any, Any, Optional[Tuple[Any, Any]]]:
    """``(X, Y, dask_rows)`` of the pair ``data``: when either is a Dask array, both must be, and
    ``dask_rows`` is the checked pair (:func:`~dpgp_gpflow.validation.as_dask_rows`, ``Y`` [N, P] allowed
    with ``several_outputs``; ``X, Y`` are it); otherwise ``dask_rows`` is None and ``X, Y`` are as given
    (the caller validates them)."""
    try:
        X, Y = data
    except (TypeError, ValueError) as exc:
        raise TypeError("data must be a pair (X, Y)") from exc
    if is_dask_array(X) or is_dask_array(Y):
        require_float64()
        rows = as_dask_rows(X, Y, several=several_outputs)
        return rows[0], rows[1], rows
    return X, Y, None


def prepare_sparse_data(data: Any, inducing_variable: Any, y_bounds: Any, data_sensitivity: Optional[float],
                        noise_variance: Any = None, mean_function: Any = None):
    """:func:`prepare_private_data` (several outputs: ``Y`` [N, P], ``y_bounds`` a pair or [P, 2],
    ``data_sensitivity`` one number or P; ``mean_function`` checked) for the sparse regression models, whose
    rows may also be Dask arrays, and their public inducing inputs; returns ``(data, Z, bounds, d, dask_rows)``,
    ``d`` the tuple of the P per-output sensitivities.

    In memory: ``data`` is the validated, clipped ``(X, Y)`` and ``dask_rows`` None. Dask arrays
    (:func:`~dpgp_gpflow.validation.as_dask_rows`): ``dask_rows = (X, Y)`` stays on the cluster (its
    outputs are clipped chunk by chunk where they are read) and ``data`` is an empty ``[0, D]``,
    ``[0, 1]`` placeholder for GPflow's constructor that :class:`DaskRowsMixin` never lets anything read.
    """
    X, Y, rows = split_dask_rows(data, several_outputs=True)
    if rows is not None:
        validate_noise_variance(noise_variance)
        P = int(rows[1].shape[1])
        bounds = validate_output_bounds(y_bounds, P)
        d = validate_output_sensitivities(data_sensitivity, bounds, P)
        dim = int(rows[0].shape[1])
        check_mean_function(mean_function, dim, P)
        data = (np.zeros((0, dim)), np.zeros((0, P)))
    else:
        X, Y, bounds, d = prepare_private_data((X, Y), y_bounds, data_sensitivity, noise_variance,
                                               several_outputs=True, mean_function=mean_function)
        dim, data = X.shape[1], (X, Y)
    return data, inducing_inputs(inducing_variable, dim), bounds, d, rows


def inducing_inputs(inducing_variable: Any, dim: int) -> np.ndarray:
    """The validated inducing inputs [M, dim] of a GPflow ``InducingPoints`` or an array (their values
    now: the models hold them fixed). Privacy assumption: they are public (a function of ``X`` only)."""
    if isinstance(inducing_variable, gpflow.inducing_variables.InducingPoints):
        inducing_variable = inducing_variable.Z.numpy()
    return as_inputs("inducing_variable", inducing_variable, dim)


def centred_latent_terms(B: tf.Tensor, num_outputs: int = 1) -> ReleaseTerms:
    """The latent release terms of a sparse model: the map ``B`` (m x n) of the centred outputs to its m
    latent values, offset 0 (public). ``num_outputs`` P > 1: the stacked latents of P outputs sharing
    ``B``, map ``I_P kron B`` (:func:`~dpgp_gpflow.contract.output_terms`)."""
    return output_terms(B, tf.zeros([int(B.shape[0]), 1], dtype=B.dtype), None, num_outputs)


def public_constant_mean(bounds: Any) -> gpflow.functions.Constant:
    """The default public prior mean: the midpoint of the bounds (per output: of each output's), not trainable."""
    pairs = bounds_array(bounds, np.size(bounds) // 2)  # [1, 2] for one pair
    mean = gpflow.functions.Constant(0.5 * (pairs[:, 0] + pairs[:, 1]))
    gpflow.set_trainable(mean, False)
    return mean


def _selection_hint() -> str:
    """How to select hyperparameters privately, with the grid format (for the leak guard's messages)."""
    return ("select them privately: selection = dpgp_gpflow.selection.select_hyperparameters(model, grid, "
            'epsilon=...) with grid = [{".kernel.lengthscales": 10.0, ".likelihood.variance": 1.0}, ...] '
            "(GPflow parameter paths, as gpflow.utilities.parameter_dict(model) lists them; grid optional: a "
            "default grid from public information), then selection.apply(model)")


def _ways_forward(model: Any) -> Tuple[str, str]:
    """``(how to choose the parameters privately, when they may be declared public)`` for the leak guard's messages.
    A model with private inputs (whole rows) protects its inputs too: :func:`~dpgp_gpflow.selection.select_hyperparameters`
    refuses it, its lengthscale is chosen inside the release (``DPSGPR``'s grid) or, for a classifier (no grid), from
    public knowledge, and public values must not come from the inputs either."""
    if getattr(model, "private_inputs", False):
        box = ("take the inducing inputs from the public box (dpgp_gpflow.whole_rows.inducing_grid or "
               "inducing_design, never from the rows)")
        if getattr(model, "classifier_latent", False):  # a whole-row classifier: model.release, no lengthscale grid
            choose = ("note that a private-inputs classifier cannot choose them from the data (it has no private "
                      "lengthscale grid, and select_hyperparameters refuses models with private inputs): give the "
                      f"lengthscale from public knowledge (e.g. a fraction of the box's width) and {box}, then "
                      "model.release(epsilon=..., delta=...)")
        else:
            choose = ("choose the lengthscale privately inside the release, model.release_function(epsilon=..., "
                      "delta=..., lengthscales=[...]) (a grid, docs/guides/whole_rows.md#lengthscales; "
                      f"select_hyperparameters refuses models with private inputs), and {box}")
        return choose, ("chosen without the private inputs and outputs (inducing inputs from the public box, never "
                        "from the rows)")
    return _selection_hint(), "chosen without the outputs"


def _parameter_owner(module: Any, path: str) -> Tuple[Any, str]:
    """The module holding the parameter at a ``gpflow.utilities.parameter_dict`` path, and its attribute name."""
    tokens = re.findall(r"\.([A-Za-z_]\w*)|\[(\d+)\]", path)
    for name, index in tokens[:-1]:
        module = module[int(index)] if index else getattr(module, name)
    return module, tokens[-1][0]


@functools.lru_cache(maxsize=None)
def _default_values(cls: Type[Any]) -> Dict[str, np.ndarray]:
    """GPflow's default value of each parameter of ``cls``: the numeric keyword defaults of its
    constructor when that constructor is GPflow's (or this package's), and (for GPflow's own classes) the
    parameters of an instance built with no arguments. A user's class that defines its own constructor has
    no defaults here: its keyword defaults could hold values fitted on the outputs."""
    defaults: Dict[str, np.ndarray] = {}
    signature: Mapping[str, inspect.Parameter]
    trusted = str(getattr(cls.__init__, "__module__", None) or "").startswith(("gpflow.", "dpgp_gpflow."))
    try:
        signature = inspect.signature(cls.__init__).parameters if trusted else {}
    except (TypeError, ValueError):
        signature = {}
    for name, p in signature.items():
        if isinstance(p.default, (int, float)) and not isinstance(p.default, bool):
            defaults[name] = np.asarray(p.default, dtype=np.float64)
    if cls.__module__.startswith("gpflow."):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                instance = cls()
        except Exception:  # noqa: BLE001 (a class that needs arguments: its signature defaults only)
            instance = None
        for name, value in (vars(instance).items() if instance is not None else ()):
            if isinstance(value, gpflow.Parameter):
                defaults[name] = np.asarray(value.numpy(), dtype=np.float64)
    return defaults


def _is_gpflow_default(module: Any, path: str, value: Any) -> bool:
    """True when the parameter at ``path`` of ``module`` holds its GPflow default (e.g. a kernel's
    ``variance=1.0``, ``lengthscales=1.0``, a Gaussian likelihood's ``variance=1.0``): not a fitted value."""
    owner, name = _parameter_owner(module, path)
    default = _default_values(type(owner)).get(name)  # type: ignore[arg-type]  # a class is hashable
    if default is None:
        return False
    try:
        return bool(np.all(np.isclose(np.asarray(value, dtype=np.float64), default, rtol=1e-9, atol=1e-12)))
    except ValueError:  # shapes that do not broadcast
        return False


def _outside_package_stacklevel() -> int:
    """``stacklevel`` for a warning raised here that points at the first caller outside ``dpgp_gpflow``."""
    level, frame = 1, sys._getframe(1)  # type: Tuple[int, Optional[FrameType]]
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def parameter_values(module: Any) -> Dict[str, np.ndarray]:
    """A copy of every parameter's value of a GPflow module, by its ``parameter_dict`` path: what the
    leak guard records as public, and what a cross-validation remembers it was computed with."""
    return {path: parameter_value(p) for path, p in gpflow.utilities.parameter_dict(module).items()}


class LeakGuardMixin:
    """Refuses releases whose hyperparameters may have been fitted on the private outputs.

    Two signals raise :class:`~dpgp_gpflow.PrivacyLeakError`: the training objective (which reads
    the outputs) ran (models call ``_mark_private_objective()`` from it), or a parameter's value
    changed since it was recorded as public (at construction, by :meth:`declare_hyperparameters_public`,
    or by :meth:`~dpgp_gpflow.selection.Selection.apply`): changed by training on another objective,
    by a kernel shared with a model trained on the outputs, by ``multiple_assign`` of trained values.

    What cannot be detected: values fitted on the outputs elsewhere *before* the model was built
    (GPflow's tutorial: train a ``gpflow.models.GPR``, reuse its kernel). So values given at
    construction that are not GPflow's defaults and were never declared public (constructor flag
    ``hyperparameters_public=True``, :meth:`declare_hyperparameters_public`,
    :meth:`~dpgp_gpflow.selection.Selection.apply`) make every release refuse too
    (:meth:`check_undeclared_hyperparameters`; only a warning, :class:`~dpgp_gpflow.HyperparameterWarning`,
    inside ``with dpgp_gpflow.allow_undeclared_hyperparameters():``); ``release(..., hyperparameters_public=True)``
    overrides all of this for one release (``docs/privacy_model.md#leak-guard``).
    """

    _private_objective_evaluated: bool = False

    def _mark_private_objective(self) -> None:
        # Runs in Python, so it fires when a tf.function traces the objective as well as eagerly.
        object.__setattr__(self, "_private_objective_evaluated", True)

    @property
    def private_objective_evaluated(self) -> bool:
        """True once the training objective (which reads the private outputs) was evaluated (and
        not declared public since)."""
        return bool(self._private_objective_evaluated)

    def _parameter_values(self) -> Dict[str, np.ndarray]:
        return parameter_values(self)

    def _guard_construction(self, hyperparameters_public: bool, model_made: Sequence[str] = ()) -> None:
        """Called at the end of a constructor: record the values as given (later changes are refused)
        and, unless ``hyperparameters_public``, note those a release refuses: not GPflow's
        defaults and not made by the model itself (paths under ``model_made``, e.g. the public
        default mean or the public inducing inputs)."""
        declared = validate_declaration(hyperparameters_public)
        self.declare_hyperparameters_public()
        if declared:
            return
        given = tuple(path for path, value in self._parameter_values().items()
                      if not any(path == p or path.startswith(p + ".") for p in model_made)
                      and not _is_gpflow_default(self, path, value))
        object.__setattr__(self, "_undeclared_hyperparameters", given)

    @property
    def undeclared_hyperparameters(self) -> List[str]:
        """Paths of the parameters given at construction (not GPflow's defaults) that were never
        declared public: a release refuses them (:meth:`check_undeclared_hyperparameters`)."""
        return list(self.__dict__.get("_undeclared_hyperparameters", ()))

    def declare_hyperparameters_public(self, paths: Optional[Iterable[str]] = None) -> None:
        """Declare the current parameter values public: chosen without the private outputs.

        The caller takes responsibility for the claim. With no ``paths``: every parameter; this also
        clears the record that the training objective ran (declaring values trained on the outputs
        public makes the releases not DP). With ``paths`` (GPflow parameter paths, as
        :meth:`~dpgp_gpflow.selection.Selection.apply` passes its chosen configuration): those only;
        the rest, and that record, stay as they were.
        """
        now = self._parameter_values()
        recorded = self.__dict__.get("_public_parameter_values")
        if paths is None or recorded is None:
            declared = set(now)
            recorded = {}
        else:
            declared = set(paths)
            unknown = sorted(declared - set(now))
            if unknown:
                raise ValueError(f"no parameters at {unknown}; the model has {sorted(now)}")
            recorded = dict(recorded)
        recorded.update({path: now[path] for path in declared})
        object.__setattr__(self, "_public_parameter_values", recorded)
        object.__setattr__(self, "_undeclared_hyperparameters",
                           tuple(p for p in self.undeclared_hyperparameters if p not in declared))
        if paths is None:
            object.__setattr__(self, "_private_objective_evaluated", False)

    def changed_hyperparameters(self) -> List[str]:
        """Paths of the parameters whose values changed since they were last recorded as public."""
        recorded = self.__dict__.get("_public_parameter_values")
        if recorded is None:
            return []
        now = self._parameter_values()
        return sorted(path for path in set(recorded) | set(now)
                      if path not in recorded or path not in now or not np.array_equal(recorded[path], now[path]))

    def _check_hyperparameters_public(self, hyperparameters_public: bool) -> None:
        if validate_declaration(hyperparameters_public):
            return
        name = type(self).__name__
        select, public = _ways_forward(self)
        if self._private_objective_evaluated:
            raise PrivacyLeakError(
                f"{name}'s training objective (the marginal likelihood of the private outputs) was "
                "evaluated, e.g. by training the hyperparameters with gpflow.optimizers.Scipy; "
                "hyperparameters fitted on private outputs leak them, and this release would not be DP. "
                f"Set them a priori from public information, or {select}. If they were in fact "
                f"{public}, call model.declare_hyperparameters_public() or pass "
                "hyperparameters_public=True (docs/guides/from_gpflow.md)."
            )
        changed = self.changed_hyperparameters()
        if changed:
            raise PrivacyLeakError(
                f"the parameters {changed} of {name} changed since the model was built (or last declared "
                "public); values trained on the private outputs (through any objective or another model "
                f"sharing them) leak them. To choose them from the data, {select}. If the new "
                f"values were {public}, call model.declare_hyperparameters_public() or pass "
                "hyperparameters_public=True (docs/guides/from_gpflow.md)."
            )

    def check_undeclared_hyperparameters(self, grid: Optional[Iterable[str]] = None) -> None:
        """The leak guard's third signal: :attr:`undeclared_hyperparameters` (given at construction, not
        GPflow's defaults, never declared public) may have been fitted on these outputs before the model was
        built, so they raise :class:`~dpgp_gpflow.PrivacyLeakError` naming them and the two ways forward
        (inside ``with dpgp_gpflow.allow_undeclared_hyperparameters():`` they warn instead,
        :class:`~dpgp_gpflow.HyperparameterWarning`, one line pointing at the caller). Releases call it
        (:func:`dpgp_gpflow.contract.check_release_hyperparameters`); a selection passes its ``grid``'s
        paths, whose values it replaces, and is refused for the rest only."""
        name, undeclared = type(self).__name__, self.undeclared_hyperparameters
        covered = set(grid or ())
        undeclared = [p for p in undeclared if not any(p == g or p.startswith(g + ".") for g in covered)]
        if not undeclared:
            return
        where = "this release" if grid is None else "this selection (its grid does not set them; they are used as given)"
        cause = (f"{name}: the hyperparameters {undeclared} were given when the model was built, are not GPflow's "
                 "defaults and were never declared public; nothing can tell them from values fitted on these "
                 "outputs (e.g. a kernel trained in gpflow.models.GPR with gpflow.optimizers.Scipy and reused), and "
                 f"then {where} would not be DP.")
        select, public = _ways_forward(self)
        private = select if grid is None else "add them to the grid (the selection then chooses them privately)"
        ways = (f"Either {private}; or, if they were {public}, build the model with "
                "hyperparameters_public=True (or call model.declare_hyperparameters_public()) "
                "(docs/guides/from_gpflow.md).")
        if undeclared_hyperparameters_refused():
            raise PrivacyLeakError(f"{cause} Refused, nothing reserved. {ways}")
        warnings.warn(HyperparameterWarning(f"{cause} {ways}"), stacklevel=_outside_package_stacklevel())


class PrivateModelMixin(LeakGuardMixin):
    """The :class:`~dpgp_gpflow.contract.PrivateModel` members every GPflow-based private model shares,
    and ``release``, for a model holding ``data = (X, Y)`` (``Y`` clipped), ``mean_function``
    (public), ``y_bounds`` and ``data_sensitivity``.

    A subclass adds :meth:`~dpgp_gpflow.contract.PrivateModel.release_terms` and
    :meth:`~dpgp_gpflow.contract.PrivateModel.split_terms` (and, when it releases m latent
    values once, :class:`FactoredModelMixin`'s pieces); the leak guard needs its training objective
    to call ``_mark_private_objective()``.
    """

    if TYPE_CHECKING:  # provided by the GPflow model this mixin is combined with, and by the subclass
        data: Any
        mean_function: Any

        def release_terms(self, Xnew: tf.Tensor) -> ReleaseTerms: ...

        def split_terms(self, train: Any, test: Any) -> ReleaseTerms: ...

    # -- public bounds and sensitivity: set once (at construction), read-only after ------------
    @property
    def num_outputs(self) -> int:
        """P: the number of private outputs per row (columns of ``Y``; public). Fixed at construction."""
        return int(self.__dict__.get("_dp_num_outputs", 1))

    def _hold_outputs(self, num_outputs: int) -> None:
        """Keep the number of outputs per row (constructors of models taking ``Y`` [N, P] only; before the
        bounds and the sensitivity are set)."""
        object.__setattr__(self, "_dp_num_outputs", int(num_outputs))

    @property
    def y_bounds(self) -> Any:
        """Public bounds ``(lo, hi)`` of each private output, or for several outputs with their own bounds
        one pair per output (a tuple of P pairs). Fixed at construction."""
        return self._fixed("_dp_y_bounds", "y_bounds")

    @y_bounds.setter
    def y_bounds(self, value: Any) -> None:
        self._set_once("_dp_y_bounds", validate_output_bounds(value, self.num_outputs), "y_bounds")

    @property
    def data_sensitivity(self) -> float:
        """How far one private output may move between neighbours (fixed at construction); with several
        outputs the largest of :attr:`output_sensitivities`."""
        return self._fixed("_dp_data_sensitivity", "data_sensitivity")

    @data_sensitivity.setter
    def data_sensitivity(self, value: Any) -> None:
        sensitivities = validate_output_sensitivities(value, self.y_bounds, self.num_outputs)
        self._set_once("_dp_output_sensitivities", sensitivities, "data_sensitivity")
        self._set_once("_dp_data_sensitivity", max(sensitivities), "data_sensitivity")

    @property
    def output_sensitivities(self) -> Tuple[float, ...]:
        """How far each of the P outputs of a row may move between neighbours (public; fixed at construction)."""
        return self._fixed("_dp_output_sensitivities", "data_sensitivity")

    @property
    def groups(self) -> Optional[np.ndarray]:
        """Public person identifiers [N] (rows with the same value belong to one person; a copy), or None:
        one row per person. Releases protect all of a person's outputs (docs/guides/groups.md). Fixed
        at construction."""
        groups = self.__dict__.get("_dp_groups")
        return None if groups is None else groups.copy()

    def _hold_groups(self, groups: Any, num_data: int) -> None:
        """Validate and keep the public ``groups`` of ``num_data`` rows (constructors only)."""
        object.__setattr__(self, "_dp_groups", validate_groups(groups, num_data))

    def _fixed(self, key: str, name: str) -> Any:
        try:
            return self.__dict__[key]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no {name} yet (set it in the constructor)") from None

    def _set_once(self, key: str, value: Any, name: str) -> None:
        if key in self.__dict__ and self.__dict__[key] != value:
            raise AttributeError(f"{name} is fixed when the model is built (the privacy guarantee is computed "
                                 "from it); build a new model for other bounds")
        object.__setattr__(self, key, value)

    @property
    def input_dim(self) -> int:
        """Number of input columns (public)."""
        return int(self.data[0].shape[1])

    @property
    def output_bound(self) -> float:
        """Public bound on ``|y_i - m(x_i)|``: the bounds' farthest point from the prior mean."""
        X, _ = self.data
        m = self.mean_function(X).numpy()
        lo, hi = bound_columns(self.y_bounds)  # per output: [P], against m's [N, P] (or [N, 1])
        return float(np.max(np.maximum(hi - m, m - lo)))

    def centred_outputs(self) -> tf.Tensor:
        """PRIVATE: the outputs clipped to ``y_bounds`` minus the public prior mean, [n] (P outputs: [N P],
        stacked output by output, :func:`~dpgp_gpflow.contract.stacked`).

        Clipped here, at every use, as well as at construction: ``model.data = (X, Y)`` (a GPflow
        idiom) must not bring unclipped outputs into a release.
        """
        X, Y = self.data
        if int(Y.shape[1]) != self.num_outputs:
            raise ValueError(f"the model was built with {self.num_outputs} output(s) per row, its data has "
                             f"{int(Y.shape[1])}")
        return stacked(tf.constant(clip_private_outputs(Y, self.y_bounds)) - self.mean_function(X))

    def check_hyperparameters_public(self, declared: bool) -> None:
        """The leak guard: unless ``declared``, raises ``PrivacyLeakError`` after the training objective
        ran or a parameter changed (releases also refuse undeclared values given at construction:
        :meth:`check_undeclared_hyperparameters`)."""
        self._check_hyperparameters_public(declared)

    def _split_inputs(self, train: Any, test: Any) -> Tuple[tf.Tensor, tf.Tensor]:
        X, _ = self.data
        return tf.gather(X, np.asarray(train)), tf.gather(X, np.asarray(test))

    def cloaking_matrix(self, Xnew: Any) -> tf.Tensor:
        """``C`` (k x n) at ``Xnew``, as :func:`dpgp_gpflow.cloaking_matrix` gives it. Public."""
        X, _ = self.data
        return dense_map(self.release_terms(tf.convert_to_tensor(Xnew, dtype=X.dtype)).map)

    def release(self, Xnew: Any, **options: Any) -> PrivateRelease:
        """Release the predictive mean at ``Xnew`` with an (epsilon, delta)-DP guarantee: keywords
        ``epsilon``, ``delta`` (required), ``objective``, ``calibration``, ``seed``, ``accountant``,
        ``mechanism``, ``hyperparameters_public``, ``rtol``, ``tol``, as for
        :func:`dpgp_gpflow.pipeline.release`, which states the privacy assumptions. The mean is clipped to
        ``y_bounds`` (post-processing); ``.unclipped()`` gives the raw DP mean."""
        return pipeline.release(self, Xnew, **options)


class FactoredModelMixin(PrivateModelMixin):
    """For models whose predictions go through m latent values ``u = B y_c``: they provide
    ``latent_terms()`` and ``public_readout()``; this gives :meth:`release_terms` (the factored map
    ``(A(Xnew), B)``) and :meth:`release_function` (release once, predict anywhere)."""

    if TYPE_CHECKING:  # provided by the subclass
        def latent_terms(self) -> ReleaseTerms: ...

        def public_readout(self) -> PublicReadout: ...

    def release_terms(self, Xnew: tf.Tensor) -> ReleaseTerms:
        """The factored map ``(A(Xnew), B)``, the prior mean and the public variance at ``Xnew``."""
        latent, readout = latent_terms_and_readout(self)
        A, variance = readout_and_variance(readout, Xnew)
        return ReleaseTerms((A, latent.map), readout.offset(Xnew), variance)

    #: what :meth:`release_function` returns
    function_type: type = PrivateFunction

    #: ``release_function``'s default reference inputs are the training inputs (the "mse" noise then
    #: minimises the expected squared error of the predictions there); False: the latents themselves
    reference_training_inputs: bool = True

    def release_function(self, *, reference_inputs: Any = None, **options: Any) -> PrivateFunction:
        """Release the m latent values once; the returned function predicts anywhere for free.

        With ``objective="mse"`` the noise minimises the expected squared error at
        ``reference_inputs`` (public; default: the training inputs, see
        ``reference_training_inputs``). With ``"entropy"`` the noise is the same (invariant)
        whatever the reference. Other keywords as for :func:`dpgp_gpflow.pipeline.release_function`.
        """
        if reference_inputs is None and self.reference_training_inputs:
            reference_inputs = self.data[0]
        return pipeline.release_function(self, reference_inputs=reference_inputs, function_type=self.function_type,
                                         **options)


class DaskRowsMixin:
    """For the sparse regression models, whose rows may be ``dask.array`` chunks on a cluster.

    Such a model holds them in :attr:`dask_rows`; GPflow's constructor got an empty placeholder, so
    everything that would read the rows in memory (``data``, and through it ``predict_f``, the
    training objectives, ``release``, ``release_function``) raises ``TypeError`` instead of computing
    on no data. :func:`dpgp_gpflow.streaming.release_function` releases such a model on the cluster.
    """

    @property
    def dask_rows(self) -> Optional[Tuple[Any, Any]]:
        """The ``(X, Y)`` Dask arrays the model was built from, or None for a model in memory."""
        return self.__dict__.get("_dp_dask_rows")

    def _hold_dask_rows(self, rows: Optional[Tuple[Any, Any]]) -> None:
        object.__setattr__(self, "_dp_dask_rows", rows)

    @property
    def data(self) -> Any:
        if self.dask_rows is not None:
            raise TypeError(
                f"this {type(self).__name__}'s rows are Dask arrays and stay on the cluster: release it with "
                "dpgp_gpflow.streaming.release_function(model, ...) and predict with dpgp_gpflow.streaming.predict; "
                "in-memory methods (predict_f, the training objective, release, release_function) need the rows "
                "in memory")
        try:
            return self.__dict__["_dp_data"]
        except KeyError:
            raise AttributeError("data") from None

    @data.setter
    def data(self, value: Any) -> None:
        if self.dask_rows is not None:
            raise TypeError("this model's rows are Dask arrays: build a new model for other data")
        object.__setattr__(self, "_dp_data", value)

    @property
    def input_dim(self) -> int:
        """Number of input columns (public)."""
        rows = self.dask_rows
        # the model class after this mixin in the MRO defines input_dim
        return int(rows[0].shape[1]) if rows is not None else super().input_dim  # type: ignore[misc]
