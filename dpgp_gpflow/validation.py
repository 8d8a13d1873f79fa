"""Input checks, in one place: data (float64, finite, shaped) and privacy parameters.

Every entry point validates ``epsilon``, ``delta``, ``objective`` and ``calibration`` here, so each
rule has one wording and one implementation.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import sys
import warnings
from numbers import Real
from typing import Any, Dict, Iterator, Literal, Optional, Tuple, Union

import numpy as np

from .exceptions import ClippingWarning

__all__: list[str] = []  # internal: the package imports these names by name

#: How the Gaussian noise multiplier is calibrated (:mod:`dpgp_gpflow.calibration`).
Calibration = Literal["analytic", "classical"]
CALIBRATIONS: Tuple[str, ...] = ("analytic", "classical")
#: The Gaussian release mechanisms (:mod:`dpgp_gpflow.pipeline`): the cloaking method and Hall et al.'s.
RELEASE_MECHANISMS: Tuple[str, ...] = ("cloaking", "standard")
#: What the cloaking noise covariance minimises (:mod:`dpgp_gpflow.noise_planning`).
Objective = Literal["mse", "entropy"]
OBJECTIVES: Tuple[str, ...] = ("mse", "entropy")


#: The largest magnitude of a public number a release computes with (a bound, a public input, a
#: hyperparameter, the noise multiplier), and 1 / the smallest positive scale (a data sensitivity, a
#: lengthscale, a variance): beyond it the release's squares, sums and whitening (1 / the noise scale)
#: could overflow float64 to inf or NaN, so such a value is refused before anything is reserved (rescale
#: the data instead). The command line applies the same constant.
MAX_MAGNITUDE = 1e100


def refuse_booleans(name: str, value: Any) -> None:
    """``TypeError`` when ``value`` is a boolean, a boolean array or a (nested) list or tuple holding one:
    wherever a number is expected, NumPy would read ``True`` as 1 (``[True, 5]`` as ``[1.0, 5.0]``). The one
    rule every numeric input of the package passes (scalars also through :func:`check_real`)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (bool, np.bool_)) or (isinstance(v, np.ndarray) and v.dtype == bool):
            raise TypeError(f"{name} must hold real numbers, got a boolean (True / False would be read as 1 / 0)")
        if isinstance(v, np.ndarray) and v.dtype == object:
            stack.extend(v.ravel().tolist())
        elif isinstance(v, (list, tuple)):
            kinds = set(map(type, v))
            if bool in kinds or np.bool_ in kinds:
                stack.append(True)
            else:
                stack.extend(x for x in v if isinstance(x, (list, tuple, np.ndarray)))


def check_magnitude(name: str, values: Any, *, positive: bool = False) -> None:
    """``ValueError`` naming ``name`` (public values only) unless every value lies within
    ``+-MAX_MAGNITUDE`` and, for a positive scale (``positive``), is at least ``1 / MAX_MAGNITUDE``: the
    range in which a release's arithmetic cannot overflow (:data:`MAX_MAGNITUDE`)."""
    arr = np.abs(np.asarray(values, dtype=np.float64))
    if arr.size and np.max(arr) > MAX_MAGNITUDE:
        raise ValueError(f"{name} has values beyond +-{MAX_MAGNITUDE:g} (largest {np.max(arr):.6g}), which would "
                         "overflow the release's arithmetic: rescale it")
    if positive and arr.size and np.min(arr) < 1.0 / MAX_MAGNITUDE:
        raise ValueError(f"{name} has values below {1.0 / MAX_MAGNITUDE:g} (smallest {np.min(arr):.6g}), which would "
                         "overflow the release's arithmetic (its reciprocal is beyond float64's reach): rescale it")


def check_real(name: str, value: object) -> float:
    """``value`` as a finite float; ``TypeError`` for non-reals (bools included), ``ValueError`` for inf/nan.
    A 0-d real array (e.g. a GPflow parameter's ``.numpy()``) counts as its value."""
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "fiu":
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {value!r} of type {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def check_count(name: str, value: object, least: int = 1) -> int:
    """``value`` as an int of at least ``least``; ``TypeError`` for non-integers (booleans included: ``True``
    is not a count of 1), ``ValueError`` below ``least``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r} of type {type(value).__name__}")
    if int(value) < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value}")
    return int(value)


#: Smallest delta accepted: float64's smallest normal number. Below it the analytic Gaussian profile
#: (a difference of two normal tail probabilities) cannot be evaluated to any relative accuracy, so
#: a calibration for a subnormal delta (e.g. 5e-324) is in fact only (epsilon, ~4e-314)-DP.
MIN_DELTA = float(np.finfo(np.float64).tiny)


def validate_epsilon(epsilon: object) -> float:
    """Return ``epsilon`` as a float; ``TypeError``/``ValueError`` unless it is finite and > 0."""
    epsilon = check_real("epsilon", epsilon)
    if epsilon <= 0.0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    return epsilon


def validate_delta(delta: object) -> float:
    """Return ``delta`` as a float; ``TypeError``/``ValueError`` unless 0 < delta < 1 (and not subnormal:
    ``delta >= MIN_DELTA``)."""
    delta = check_real("delta", delta)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in the open interval (0, 1), got {delta}")
    if delta < MIN_DELTA:
        raise ValueError(f"delta {delta} is subnormal (below {MIN_DELTA}): the Gaussian calibration cannot "
                         "resolve it in float64 (the noise would be too small for it)")
    return delta


def validate_budget_delta(delta: object) -> float:
    """A budget's or event's ``delta``: ``0`` or :func:`validate_delta`'s range; ``TypeError`` for
    non-reals (bools included), ``ValueError`` otherwise."""
    value = check_real("delta", delta)
    return 0.0 if value == 0.0 else validate_delta(value)


#: Seeds are taken below 2**128: numpy's SeedSequence pools 128 bits, so larger ones add nothing.
MAX_SEED = 2**128


def validate_seed(seed: object) -> Optional[int]:
    """``None`` or ``seed`` as an int in ``[0, 2**128)``; ``TypeError`` for non-integers (bools and
    floats included), ``ValueError`` when out of range. Checked before any budget is reserved."""
    if seed is None:
        return None
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be None or a non-negative integer, got {seed!r} of type {type(seed).__name__}")
    seed = int(seed)
    if not 0 <= seed < MAX_SEED:
        raise ValueError(f"seed must be in [0, 2**128), got {seed}")
    return seed


def validate_noise_variance(noise_variance: object) -> Optional[float]:
    """``None`` (GPflow's default, 1) or the likelihood variance as a float above GPflow's lower bound
    (``gpflow.config.default_likelihood_positive_minimum()``, 1e-6 by default); ``TypeError`` for
    non-reals (bools included), ``ValueError`` for nan, inf or values at or below the bound."""
    if noise_variance is None:
        return None
    import gpflow  # here, not at the top: the command line imports this module before TensorFlow

    value = check_real("noise_variance", noise_variance)
    lower = float(gpflow.config.default_likelihood_positive_minimum())
    if not value > lower:
        raise ValueError(f"noise_variance must be > {lower} (GPflow's lower bound on a likelihood variance), "
                         f"got {value}")
    check_magnitude("noise_variance", value)
    return value


#: The last value read through each parameter's transform (:func:`parameter_value`), and each transform's
#: positivity (:func:`_positive_parameter`), by ``id``, each with a weak reference to check the object is the same.
_READS: Dict[int, Tuple[Any, Any, bytes, np.ndarray]] = {}
_POSITIVE: Dict[Tuple[int, Tuple[int, ...]], Tuple[Any, bool]] = {}
_FIXED: Dict[int, Tuple[Any, bool]] = {}
_MAX_READS = 4096


def _fixed_transform(transform: Any) -> bool:
    """True when a transform has no variables of its own (its output depends on its input alone; remembered per
    transform: a bijector's variables are set when it is built)."""
    hit = _FIXED.get(id(transform))
    if hit is not None and hit[0]() is transform:
        return hit[1]
    try:
        fixed = not tuple(getattr(transform, "variables", ()))
    except Exception:  # noqa: BLE001 (not a module: treat as changing)
        return False
    import weakref

    if len(_FIXED) > _MAX_READS:
        _FIXED.clear()
    try:
        _FIXED[id(transform)] = (weakref.ref(transform), fixed)
    except TypeError:  # no weak reference to it: not remembered
        pass
    return fixed


#: Inside :func:`reading_once`: each parameter's value as first read there, by ``id``, with the parameter itself
#: (kept alive for the block, so no other object takes its ``id``).
_ONCE: "contextvars.ContextVar[Optional[Dict[int, Tuple[Any, np.ndarray]]]]" = contextvars.ContextVar(
    "dpgp_gpflow_reading_once", default=None)


@contextlib.contextmanager
def reading_once() -> Iterator[None]:
    """Inside this block (one release: its checks, the leak guard's included, and its public setup)
    :func:`parameter_value` reads each parameter once, and its later calls return copies of that value: nothing
    inside a release assigns a parameter already read in the block (a grid's candidate kernels are copies, assigned
    before their first read), so every check and the release see the same values, the reads of one
    snapshot. A block inside another shares the outer one's reads. This thread or asyncio task only."""
    token = _ONCE.set({}) if _ONCE.get() is None else None
    try:
        yield
    finally:
        if token is not None:
            _ONCE.reset(token)


def variable_value(variable: Any) -> np.ndarray:
    """The current value of a ``tf.Variable`` (``value()``: one read op, half the cost of ``numpy()``'s read and
    copy), as an array. The one place the package reads a parameter's unconstrained variable."""
    return np.asarray(variable.value().numpy())


def parameter_value(parameter: Any) -> np.ndarray:
    """A copy of a GPflow parameter's (constrained) value, ``parameter.numpy()``: read through its transform only
    when the parameter's unconstrained value or its transform changed since this process last read it (a TFP
    bijector call costs milliseconds; the unconstrained variable microseconds). Anything else: its ``numpy()``.
    Inside :func:`reading_once`, read once."""
    once = _ONCE.get()
    if once is not None:
        hit = once.get(id(parameter))
        if hit is not None and hit[0] is parameter:
            return hit[1].copy()
    value = _read_parameter(parameter)
    if once is not None:
        once[id(parameter)] = (parameter, value.copy())
    return value


def _read_parameter(parameter: Any) -> np.ndarray:
    """:func:`parameter_value` read now."""
    transform = getattr(parameter, "transform", None)
    raw_variable = getattr(parameter, "unconstrained_variable", None)
    if transform is None or raw_variable is None or not _fixed_transform(transform):
        return np.array(parameter.numpy(), copy=True)
    raw = variable_value(raw_variable).tobytes()
    hit = _READS.get(id(parameter))
    if hit is not None and hit[0]() is parameter and hit[1]() is transform and hit[2] == raw:
        return hit[3].copy()
    value = np.array(parameter.numpy(), copy=True)
    import weakref  # here: this module is imported before anything heavy

    if len(_READS) > _MAX_READS:  # parameters of models long gone: forget them all
        _READS.clear()
    _READS[id(parameter)] = (weakref.ref(parameter), weakref.ref(transform), raw, value.copy())
    return value


def _positive_parameter(parameter: Any) -> bool:
    """True when a GPflow parameter's transform maps onto the positive numbers (GPflow's ``positive()``:
    lengthscales, variances), read from the transform itself (probed far below its range; remembered per
    transform without variables and shape)."""
    transform = getattr(parameter, "transform", None)
    if transform is None:
        return False
    key = (id(transform), tuple(int(v) for v in parameter.shape))
    hit = _POSITIVE.get(key)
    if hit is not None and hit[0]() is transform:
        return hit[1]
    try:
        positive = bool(np.all(np.asarray(transform.forward(np.full(parameter.shape, -1e3))) >= 0.0))
    except Exception:  # noqa: BLE001 (a transform that is not elementwise: no positivity to read)
        positive = False
    if _fixed_transform(transform):
        import weakref

        if len(_POSITIVE) > _MAX_READS:
            _POSITIVE.clear()
        _POSITIVE[key] = (weakref.ref(transform), positive)
    return positive


def validate_hyperparameter_magnitudes(model: Any) -> None:
    """``ValueError`` naming the parameter (public values only) unless every parameter of a GPflow
    ``model`` (kernel, likelihood, mean function, inducing inputs) lies within ``+-MAX_MAGNITUDE`` and every
    positive one (a lengthscale, a variance) is at least ``1 / MAX_MAGNITUDE`` (:func:`check_magnitude`):
    beyond, the release's arithmetic overflows. Called before every release reserves anything
    (:func:`dpgp_gpflow.contract.check_release_hyperparameters`); a model that is not a GPflow module is
    skipped (its public terms are still checked finite)."""
    import gpflow  # here, not at the top: the command line imports this module before TensorFlow

    if not isinstance(model, gpflow.base.Module):
        return
    for path, parameter in gpflow.utilities.parameter_dict(model).items():
        if not isinstance(parameter, gpflow.Parameter):  # a variable may hold data (private outputs): never read
            continue
        check_parameter_magnitude(f"the hyperparameter {path}", parameter, parameter_value(parameter))


def check_parameter_magnitude(name: str, parameter: Any, values: Any) -> None:
    """:func:`check_magnitude` of ``values`` for a GPflow ``parameter`` (its value, or a value about to be
    assigned, e.g. a selection grid's): positive scales (a transform onto the positive numbers: GPflow's
    ``positive()``) also at least ``1 / MAX_MAGNITUDE``. The one rule of every hyperparameter's range."""
    check_magnitude(name, values, positive=_positive_parameter(parameter))


def validate_objective(objective: object) -> str:
    """``objective`` if it is one of :data:`OBJECTIVES`, else ``ValueError``."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    return str(objective)


def validate_calibration(calibration: object) -> str:
    """``calibration`` if it is one of :data:`CALIBRATIONS`, else ``ValueError``."""
    if calibration not in CALIBRATIONS:
        raise ValueError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
    return str(calibration)


def require_finite(what: str, **arrays: Any) -> None:
    """``ValueError`` naming ``what`` and the arrays (public values only) that are not all finite."""
    bad = [k for k, v in arrays.items()
           if v is not None and not np.all(np.isfinite(np.asarray(v.numpy() if hasattr(v, "numpy") else v,
                                                                  dtype=np.float64)))]
    if bad:
        raise ValueError(f"{what}: the public {', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not finite (do "
                         "the inputs overflow the kernel?); nothing was released or charged")


def validate_public_terms(what: str, C: Any, offset: Any, output_bound: float, **more: Any) -> None:
    """``ValueError`` unless a release's public terms are finite: the map ``C`` (k x n), ``offset``,
    every array in ``more`` (e.g. a prior covariance; None skipped) and the bound
    ``max_i ||C_i||_1 * output_bound + |offset_i|`` on the released mean (so that the private mean
    cannot overflow). Public values only: call it before any budget is reserved."""
    require_finite(what, map=C, offset=offset, **more)
    C = np.asarray(C.numpy() if hasattr(C, "numpy") else C, dtype=np.float64)
    offset = np.asarray(offset.numpy() if hasattr(offset, "numpy") else offset, dtype=np.float64).reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        rows = np.abs(C).reshape(C.shape[0], -1).sum(axis=1) if C.size else np.zeros(1)
        bound = np.max(rows * float(output_bound) + np.abs(offset), initial=0.0)
    require_finite(what, bound_on_the_released_mean=bound)


def as_float64(name: str, value: Any) -> np.ndarray:
    """``value`` as a float64 array. Integer and float32 arrays are converted (float32 -> float64 is
    exact); anything non-numeric (booleans included, also inside a list: :func:`refuse_booleans`) raises
    ``TypeError``."""
    refuse_booleans(name, value)
    try:
        arr = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    except Exception as exc:  # pragma: no cover - defensive
        raise TypeError(f"{name} must be array-like, got {type(value).__name__}") from exc
    require_real_dtype(name, arr.dtype)
    return arr.astype(np.float64)


def require_real_dtype(name: str, dtype: Any) -> None:
    """``TypeError`` unless ``dtype`` holds real numbers (integers or floats; never bool, complex,
    strings or objects): the one rule for arrays in memory, chunk sources and Dask arrays."""
    dtype = np.dtype(dtype)
    if dtype == bool or not (np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.integer)):
        raise TypeError(f"{name} must hold real numbers, got dtype {dtype}")


def as_inputs(name: str, X: Any, input_dim: Optional[int] = None) -> np.ndarray:
    """Public inputs as a finite float64 array of shape [N, D] with N >= 1, every value within
    ``+-MAX_MAGNITUDE`` (:func:`check_magnitude`)."""
    X = as_float64(name, X)
    if X.ndim != 2:
        raise ValueError(f"{name} must have shape [N, D], got shape {X.shape}")
    if X.shape[0] == 0:
        raise ValueError(f"{name} is empty (shape {X.shape}): give at least one input")
    if input_dim is not None and X.shape[1] != input_dim:
        raise ValueError(f"{name} must have {input_dim} columns like the training inputs, got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} contains {int(np.sum(~np.isfinite(X)))} non-finite values")
    check_magnitude(name, X)
    return X


def is_dask_array(value: Any) -> bool:
    """True for a ``dask.array.Array``. Dask is an optional extra and is not imported here: a value
    can only be a Dask array if Dask is already imported."""
    module = sys.modules.get("dask.array")
    return module is not None and isinstance(value, module.Array)


def as_dask_rows(X: Any, Y: Any, *, several: bool = False) -> Tuple[Any, Any]:
    """Public inputs [N, D] and private outputs [N, 1] (or [N]; ``several``: [N, P]) held as Dask arrays,
    rows chunked: shapes and dtypes are checked here; the values are checked chunk by chunk where they
    are used (non-finite inputs make the release refuse; non-finite outputs raise on the worker that reads
    them). ``Y`` is returned as [N, 1] ([N, P]). Both must be Dask arrays."""
    if not (is_dask_array(X) and is_dask_array(Y)):
        raise TypeError("give the inputs and the outputs both as dask arrays (or both in memory), got "
                        f"{type(X).__name__} and {type(Y).__name__}")
    for name, arr in (("X", X), ("Y", Y)):
        require_real_dtype(name, arr.dtype)
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"X must have shape [N, D] with N >= 1, got shape {X.shape}")
    if not (Y.ndim == 1 or (Y.ndim == 2 and (Y.shape[1] == 1 or (several and Y.shape[1] >= 1)))):
        raise ValueError(f"Y must have shape [N, 1] (one output){' or [N, P]' if several else ''}, got shape "
                         f"{Y.shape}")
    if Y.shape[0] != X.shape[0]:
        raise ValueError(f"Y has {Y.shape[0]} rows but the inputs have {X.shape[0]}")
    return X, Y.reshape((-1, 1)) if Y.ndim == 1 else Y


def as_outputs(name: str, Y: Any, num_data: int, *, several: bool = False) -> np.ndarray:
    """Private outputs as a finite float64 array of shape [N, 1] (``several``: [N, P], P >= 1 outputs
    per row). Several columns where one is expected: ``NotImplementedError`` (only ``DPGPR`` takes them)."""
    Y = as_float64(name, Y)
    if Y.ndim == 2 and Y.shape[1] > 1 and not several:
        raise NotImplementedError(f"{name} has {Y.shape[1]} columns: several outputs per row are released by "
                                  "DPGPR, DPSGPR and DPGPRFITC only (docs/guides/multi_output.md)")
    if Y.ndim != 2 or Y.shape[1] < 1:
        raise ValueError(f"{name} must have shape [N, 1] (one output){' or [N, P] (P outputs)' if several else ''}, "
                         f"got shape {Y.shape}")
    if Y.shape[0] != num_data:
        raise ValueError(f"{name} has {Y.shape[0]} rows but the inputs have {num_data}")
    if not np.all(np.isfinite(Y)):  # no count: it would be a statistic of the private outputs
        raise ValueError(f"{name} contains non-finite values (nan or inf)")
    return Y


def validate_bounds(y_bounds: Any) -> Tuple[float, float]:
    """Public output bounds ``(lo, hi)`` with finite lo < hi, both within ``+-MAX_MAGNITUDE``."""
    try:
        lo, hi = y_bounds
    except (TypeError, ValueError) as exc:
        raise TypeError(f"y_bounds must be a pair (lo, hi) of public bounds, got {y_bounds!r}") from exc
    for v in (lo, hi):
        if isinstance(v, bool) or not isinstance(v, (Real, np.floating, np.integer)):
            raise TypeError(f"y_bounds must hold real numbers, got {y_bounds!r}")
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"y_bounds must be finite, got {(lo, hi)}")
    if not lo < hi:
        raise ValueError(f"y_bounds must satisfy lo < hi, got {(lo, hi)}")
    if not (math.isfinite(hi - lo) and math.isfinite(lo + hi)):
        # the width (the default data sensitivity) and the midpoint (the default prior mean) must
        # be representable, or the noise scale / prior mean would be inf
        raise ValueError(f"y_bounds {(lo, hi)} overflow float64: hi - lo and lo + hi must be finite")
    if max(abs(lo), abs(hi)) > MAX_MAGNITUDE:  # (0, 1e308): released means of +-inf and a NaN noise std
        raise ValueError(f"y_bounds must lie within +-{MAX_MAGNITUDE:g} (the release's arithmetic would overflow "
                         f"float64), got {(lo, hi)}: rescale the outputs")
    return lo, hi


#: Public output bounds: one pair ``(lo, hi)`` for every output, or one pair per output (P >= 2).
Bounds = Union[Tuple[float, float], Tuple[Tuple[float, float], ...]]


def validate_output_bounds(y_bounds: Any, num_outputs: int = 1) -> Bounds:
    """Public bounds of ``num_outputs`` outputs: a pair ``(lo, hi)`` for all of them
    (:func:`validate_bounds`), or ``[P, 2]`` (one ordered, finite pair per output; returned as a tuple
    of P pairs, or as the pair when P = 1)."""
    try:
        shape = np.shape(y_bounds)
    except ValueError:  # ragged
        shape = ()
    if len(shape) != 2:
        return validate_bounds(y_bounds)
    if tuple(shape) != (int(num_outputs), 2):
        raise ValueError(f"y_bounds per output must have shape [{int(num_outputs)}, 2] (one (lo, hi) per output), "
                         f"got shape {list(shape)}")
    pairs = []
    for p, pair in enumerate(y_bounds):
        try:
            pairs.append(validate_bounds(tuple(pair)))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"y_bounds[{p}]: {exc}") from None
    return pairs[0] if len(pairs) == 1 else tuple(pairs)


def per_output(bounds: Any) -> bool:
    """True when ``bounds`` (validated) holds one pair per output, False for one pair for all."""
    return len(bounds) > 0 and isinstance(bounds[0], (tuple, list, np.ndarray))


def bounds_array(bounds: Any, num_outputs: int) -> np.ndarray:
    """Validated ``bounds`` as a [P, 2] array (one pair for all outputs repeated)."""
    return np.broadcast_to(np.asarray(bounds, dtype=np.float64).reshape(-1, 2), (int(num_outputs), 2))


def bound_columns(bounds: Any) -> Tuple[Any, Any]:
    """``(lo, hi)`` of validated ``bounds``: floats for one pair, [P] arrays for one pair per output (they
    broadcast over the columns of an [N, P] array)."""
    if per_output(bounds):
        values = np.asarray(bounds, dtype=np.float64)
        return values[:, 0], values[:, 1]
    return bounds[0], bounds[1]


#: Largest magnitude of a person identifier given as floats: every integer up to it is exact in float64.
MAX_FLOAT_GROUP = 2.0**53


def validate_groups(groups: Any, num_data: int) -> Optional[np.ndarray]:
    """Public person identifiers ``groups`` ([N] or [N, 1], one integer per row; rows with the same
    value belong to one person) as an int64 array [N], or None (one row per person). Floats are
    accepted only when every value is a finite integer (e.g. a column read with missing values
    filled); booleans, text, NaN, inf, fractions and another length are refused (``ValueError``).
    Privacy assumption: which rows belong to whom is public (docs/guides/groups.md)."""
    if groups is None:
        return None
    try:
        values = np.asarray(groups)
    except Exception as exc:  # noqa: BLE001 (ragged or otherwise not an array)
        raise ValueError(f"groups must be an integer array with one person identifier per row: {exc}") from None
    try:
        refuse_booleans("groups", groups)  # [True, 5] would read as [1, 5]
    except TypeError:
        raise ValueError("groups must be an integer array (one person identifier per row), got booleans") from None
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.ndim != 1 or values.shape[0] != int(num_data):
        raise ValueError(f"groups must be an integer array of shape [{int(num_data)}] (one person identifier per "
                         f"row), got shape {list(values.shape)}")
    if values.dtype.kind in "iu":
        if values.dtype.kind == "u" and values.size and int(values.max()) > np.iinfo(np.int64).max:
            raise ValueError("groups must fit in int64")
        return values.astype(np.int64)
    if values.dtype.kind == "f":
        finite = np.isfinite(values)
        if not np.all(finite):
            raise ValueError(f"groups must be integers, but row {int(np.argmin(finite))} is {values[~finite][0]}")
        integral = (values == np.round(values)) & (np.abs(values) <= MAX_FLOAT_GROUP)
        if not np.all(integral):
            row = int(np.argmin(integral))
            raise ValueError(f"groups must be integers, but row {row} is {values[row]!r}")
        return values.astype(np.int64)
    raise ValueError(f"groups must be an integer array (one person identifier per row), got dtype {values.dtype}")


#: Smallest data sensitivity accepted: ``1 / MAX_MAGNITUDE``. Below it the release's whitening (one over
#: the noise scale) overflows float64 (the bounds ``(-1e-300, 1e-300)``), and a subnormal ``d`` (the width
#: of ``(0, 5e-324)``) would make the noise underflow to exactly zero while the released mean can still
#: move: such a release could not be guaranteed.
MIN_DATA_SENSITIVITY = 1.0 / MAX_MAGNITUDE


def validate_data_sensitivity(d: Any, bounds: Tuple[float, float]) -> float:
    """Public data sensitivity ``d`` in (0, hi - lo]; ``None`` means ``hi - lo``. Either must be finite
    and at least :data:`MIN_DATA_SENSITIVITY` (smaller: the noise scale's reciprocal overflows float64)."""
    width = bounds[1] - bounds[0]
    if d is None:
        if not (math.isfinite(width) and width >= MIN_DATA_SENSITIVITY):
            raise ValueError(f"the width {width} of y_bounds {tuple(bounds)} must be finite and at least "
                             f"{MIN_DATA_SENSITIVITY:g}: a smaller data sensitivity makes the release's whitening "
                             "(1 / the noise scale) overflow float64; rescale the outputs")
        return width
    if isinstance(d, bool) or not isinstance(d, (Real, np.floating, np.integer)):
        raise TypeError(f"data_sensitivity must be a real number, got {d!r}")
    d = float(d)
    if not (math.isfinite(d) and d > 0.0):
        raise ValueError(f"data_sensitivity must be finite and > 0, got {d}")
    if d < MIN_DATA_SENSITIVITY:
        raise ValueError(f"data_sensitivity {d} is below {MIN_DATA_SENSITIVITY:g}: the release's whitening (1 / the "
                         "noise scale) would overflow float64 (or the noise underflow to zero); rescale the outputs")
    if d > width:
        raise ValueError(f"data_sensitivity {d} exceeds the width of the bounds {width}: use y_bounds instead")
    return d


def validate_output_sensitivities(d: Any, bounds: Any, num_outputs: int = 1) -> Tuple[float, ...]:
    """Public data sensitivity ``d_p`` of each of ``num_outputs`` outputs (:func:`validate_data_sensitivity`
    against output p's bounds): ``d`` None (each output's width), one number for all, or [P] numbers."""
    pairs = bounds_array(bounds, num_outputs)
    refuse_booleans("data_sensitivity", d)
    if d is None or np.ndim(d) == 0:
        values = [d] * len(pairs)
    else:
        values = list(np.asarray(d).reshape(-1)) if np.ndim(d) == 1 else []
        if len(values) != len(pairs):
            raise ValueError(f"data_sensitivity must be one number or one per output ({len(pairs)}), got shape "
                             f"{list(np.shape(d))}")
    return tuple(validate_data_sensitivity(v, (float(lo), float(hi))) for v, (lo, hi) in zip(values, pairs))


def clip_outputs(Y: np.ndarray, bounds: Bounds) -> np.ndarray:
    """Clip private outputs to the public bounds (per output: column p to pair p), warning with the count
    (never the values)."""
    lo, hi = bound_columns(bounds)
    outside = int(np.sum((Y < lo) | (Y > hi)))
    if outside:
        warnings.warn(
            f"{outside} of {Y.size} private outputs lay outside the public bounds {bounds} and were clipped",
            ClippingWarning,
            stacklevel=3,
        )
    return np.clip(Y, lo, hi)


def clip_private_outputs(Y: Any, bounds: Bounds) -> Any:
    """``Y`` (a tensor) clipped to the public bounds at release time; ``ValueError`` if any is not
    finite (the message carries no statistic of the outputs). Values outside warn as
    :func:`clip_outputs` does (a count, for the data owner)."""
    values = np.asarray(Y.numpy() if hasattr(Y, "numpy") else Y, dtype=np.float64)
    if not np.all(np.isfinite(values)):
        raise ValueError("the private outputs are not all finite (were they replaced after the model was built?)")
    return clip_outputs(values, bounds)


def require_float64() -> None:
    """``TypeError`` unless GPflow's default float is float64: the sensitivity bounds and their
    rounding safety factors are derived for float64 arithmetic, so a release in float32 could not
    be guaranteed (it fails closed, with this message, rather than with an unclear dtype error)."""
    import gpflow  # here, not at the top: the command line imports this module before TensorFlow

    if np.dtype(gpflow.config.default_float()) != np.float64:
        raise TypeError(
            f"dpgp_gpflow computes in float64 (its sensitivity bounds and rounding safety factors assume it), "
            f"but GPflow's default float is {np.dtype(gpflow.config.default_float()).name}: call "
            "gpflow.config.set_default_float(np.float64) before building the model"
        )
