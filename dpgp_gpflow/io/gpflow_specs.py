"""The public GPflow pieces a readout holds, as plain specifications of a release file and back: kernels
(:func:`kernel_spec`, :func:`kernel_from_spec`) and mean functions (:func:`mean_function_spec`,
:func:`mean_function_from_spec`); ``docs/release_file.md``. The one part of reading a release file that
needs GPflow and TensorFlow (:mod:`.format` and :mod:`.card` need neither): what
:func:`dpgp_gpflow.io.loading.load` runs to rebuild a readout, never ``dpgp show``.

Reading never executes anything from the file: kernels are rebuilt only from a fixed list of GPflow
classes (:data:`KERNEL_CLASSES`, ``Periodic`` of one of :data:`PERIODIC_BASES`, ``Sum`` and ``Product``) with a
fixed list of parameters each, at most :data:`MAX_KERNEL_TERMS` of them, each parameter positive, finite and
within the releases' range. Every release whose file holds its kernel (a function, a classifier, a whole-row
release) names it in its measurement's ``file_pieces``, which :func:`~dpgp_gpflow.measurement.measure` checks
(:func:`check_file_pieces`) before anything is reserved, so no result is charged that ``save`` would then refuse.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

import gpflow
import numpy as np
import tensorflow as tf

from ..validation import check_magnitude, refuse_booleans
from .format import ReleaseFileError, ReleaseFileKindError

__all__: list[str] = []  # internal: the package imports these names by name

#: Most kernels (leaves of Sum and Product) in one kernel specification: each costs milliseconds to build.
MAX_KERNEL_TERMS = 64
_MAX_KERNEL_DEPTH = 16


#: The GPflow kernels a release file may hold, by name, with their parameters (all positive).
KERNEL_CLASSES: Dict[str, Tuple[type, Tuple[str, ...]]] = {
    "SquaredExponential": (gpflow.kernels.SquaredExponential, ("variance", "lengthscales")),
    "Matern12": (gpflow.kernels.Matern12, ("variance", "lengthscales")),
    "Matern32": (gpflow.kernels.Matern32, ("variance", "lengthscales")),
    "Matern52": (gpflow.kernels.Matern52, ("variance", "lengthscales")),
    "Exponential": (gpflow.kernels.Exponential, ("variance", "lengthscales")),
    "RationalQuadratic": (gpflow.kernels.RationalQuadratic, ("variance", "lengthscales", "alpha")),
    "Constant": (gpflow.kernels.Constant, ("variance",)),
    "White": (gpflow.kernels.White, ("variance",)),
    "Linear": (gpflow.kernels.Linear, ("variance",)),
    "Cosine": (gpflow.kernels.Cosine, ("variance", "lengthscales")),
    # ``degree`` is a number, not a GPflow Parameter
    "Polynomial": (gpflow.kernels.Polynomial, ("variance", "offset", "degree")),
}
#: The parameters one number each (the others: one number or one per active input column).
_SCALARS = ("alpha", "degree")
#: The base kernels of a ``Periodic`` kernel a release file may hold (GPflow's isotropic stationary kernels).
PERIODIC_BASES = ("SquaredExponential", "Matern12", "Matern32", "Matern52", "Exponential", "RationalQuadratic")
_COMBINATIONS: Dict[str, type] = {"Sum": gpflow.kernels.Sum, "Product": gpflow.kernels.Product}
#: The mean functions a release file may hold.
MEAN_FUNCTION_CLASSES: Tuple[str, ...] = ("Zero", "Constant")


def _value(param: Any) -> Any:
    # a Parameter or tensor as its value; a plain number (Polynomial's degree) as given, never through float32
    return np.asarray(param.numpy() if hasattr(param, "numpy") else param, dtype=np.float64).tolist()


def _active_dims_spec(dims: Any) -> Any:
    if isinstance(dims, slice):
        if dims == slice(None, None, None):
            return None
        return {"start": dims.start, "stop": dims.stop, "step": dims.step}
    return [int(d) for d in np.asarray(dims).reshape(-1)]


def kernel_spec(kernel: gpflow.kernels.Kernel) -> Dict[str, Any]:
    """``{"class", "active_dims", "parameters"}`` of a kernel (``{"class": "Sum"|"Product", "kernels"}``
    for a combination, ``{"class": "Periodic", "base_kernel", "parameters": {"period"}}``) with the parameters'
    current values; ``NotImplementedError`` for a kernel class
    outside :data:`KERNEL_CLASSES` (subclasses included: their maths may differ) or a kernel that
    :func:`kernel_from_spec` would refuse (over :data:`MAX_KERNEL_TERMS` kernels, nested too deeply)."""
    spec = _kernel_spec(kernel)
    try:
        _check_kernel_size(spec)
    except ReleaseFileError as exc:
        raise NotImplementedError(f"cannot save this kernel: {exc}") from None
    return spec


def check_file_pieces(*pieces: Optional[Any]) -> None:
    """``NotImplementedError`` (one line) unless a release file can hold every one of ``pieces`` (GPflow kernels
    and mean functions; None skipped: a model without a kernel, whose readout is not the package's, has no file
    form to check): what :func:`~dpgp_gpflow.measurement.measure` checks of a measurement's ``file_pieces``
    before anything is reserved, so that nothing is charged for a result ``save`` would then refuse. Public:
    reads the pieces' classes and parameters only."""
    try:
        for piece in pieces:
            if isinstance(piece, gpflow.functions.MeanFunction):
                mean_function_spec(piece)
            elif piece is not None:
                kernel_spec(piece)
    except NotImplementedError as exc:
        raise NotImplementedError(f"{exc}; this release's file would hold it, so the release is refused before "
                                  "anything is reserved (nothing was reserved)") from None


def _kernel_spec(kernel: gpflow.kernels.Kernel) -> Dict[str, Any]:
    cls = type(kernel)
    for name, combo in _COMBINATIONS.items():
        if cls is combo:
            return {"class": name, "kernels": [_kernel_spec(k) for k in kernel.kernels]}
    if cls is gpflow.kernels.Periodic:  # its active_dims are its base kernel's
        base = _kernel_spec(kernel.base_kernel)
        if base["class"] not in PERIODIC_BASES:
            raise NotImplementedError(f"cannot save a Periodic kernel of a {base['class']} kernel: a release file "
                                      f"holds Periodic of {list(PERIODIC_BASES)}")
        return {"class": "Periodic", "base_kernel": base, "parameters": {"period": _value(kernel.period)}}
    for name, (known, params) in KERNEL_CLASSES.items():
        if cls is known:
            return {"class": name, "active_dims": _active_dims_spec(kernel.active_dims),
                    "parameters": {p: _value(getattr(kernel, p)) for p in params}}
    raise NotImplementedError(
        f"cannot save a {cls.__module__}.{cls.__qualname__} kernel: a release file holds only the GPflow kernels "
        f"{sorted(KERNEL_CLASSES)}, Periodic of one and Sum / Product of them (export_saved_model has no such list)")


def _check_kernel_size(spec: Any) -> None:
    """``ReleaseFileError`` for more than :data:`MAX_KERNEL_TERMS` kernels or combinations nested more than
    ``_MAX_KERNEL_DEPTH`` deep, counted before anything is built (iterative; malformed parts are left to
    :func:`kernel_from_spec`)."""
    stack, terms = [(spec, 0)], 0
    while stack:
        part, depth = stack.pop()
        if depth > _MAX_KERNEL_DEPTH:
            raise ReleaseFileError(f"kernel specification nested deeper than {_MAX_KERNEL_DEPTH} combinations")
        parts = part.get("kernels") if isinstance(part, dict) and part.get("class") in _COMBINATIONS else None
        if isinstance(parts, list):
            stack.extend((p, depth + 1) for p in parts)
        else:
            terms += 1
        if terms + len(stack) > MAX_KERNEL_TERMS:
            raise ReleaseFileError(f"a kernel specification may hold at most {MAX_KERNEL_TERMS} kernels")


def _parameter(cls_name: str, name: str, value: Any) -> np.ndarray:
    try:
        refuse_booleans(name, value)
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ReleaseFileError(f"kernel {cls_name}: parameter {name} must be a number or a list of numbers") from exc
    if name in _SCALARS and arr.size != 1:
        raise ReleaseFileError(f"kernel {cls_name}: parameter {name} must be one number")
    if arr.ndim > 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or not np.all(arr > 0):
        raise ReleaseFileError(f"kernel {cls_name}: parameter {name} must be positive and finite, a scalar or a vector")
    try:  # the releases' own rule for a positive scale: no subnormal (1e-320) or overflowing value
        check_magnitude(f"kernel {cls_name}: parameter {name}", arr, positive=True)
    except ValueError as exc:
        raise ReleaseFileError(str(exc)) from None
    return arr


def _active_dims(cls_name: str, spec: Any) -> Any:
    if spec is None:
        return None
    if isinstance(spec, list) and spec and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                               for d in spec):
        return spec
    if isinstance(spec, dict) and set(spec) == {"start", "stop", "step"} and all(
            v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in spec.values()) and spec["step"] != 0:
        return slice(spec["start"], spec["stop"], spec["step"])
    raise ReleaseFileError(f"kernel {cls_name}: invalid active_dims {spec!r}")


def _check_dimensions(cls_name: str, active_dims: Any, arrays: Mapping[str, np.ndarray], input_dim: int) -> None:
    """``ReleaseFileError`` unless a kernel's ``active_dims`` name columns of the file's ``input_dim`` inputs
    (at least one) and its ``lengthscales`` are one number or one per active column."""
    if isinstance(active_dims, list):
        beyond = sorted({d for d in active_dims if d >= input_dim})
        if beyond:
            raise ReleaseFileError(f"kernel {cls_name}: active_dims {beyond} are beyond the file's {input_dim} input "
                                   "column(s)")
        count = len(active_dims)
    else:
        count = len(range(input_dim) if active_dims is None else range(input_dim)[active_dims])
        if count == 0:
            raise ReleaseFileError(f"kernel {cls_name}: active_dims select none of the file's {input_dim} input column(s)")
    for name in ("lengthscales", "period") + (("variance",) if cls_name in ("Linear", "Polynomial") else ()):
        values = arrays.get(name)
        if values is not None and values.size not in (1, count):
            raise ReleaseFileError(f"kernel {cls_name}: {values.size} {name} for {count} active input column(s)")


def kernel_from_spec(spec: Any, input_dim: Optional[int] = None) -> gpflow.kernels.Kernel:
    """The frozen kernel (constants, no variables) of a :func:`kernel_spec`, with exactly the saved values;
    ``ReleaseFileError`` for a malformed specification or one over :data:`MAX_KERNEL_TERMS` kernels
    (checked before any is built), a parameter that is not positive, finite and within the releases' range
    (:func:`~dpgp_gpflow.validation.check_magnitude`: no subnormal lengthscale) and, with the file's
    ``input_dim``, ``active_dims`` or lengthscales that do not fit its inputs, or a kernel that cannot be
    evaluated on them to finite values (so that predicting never meets TensorFlow's errors)."""
    _check_kernel_size(spec)
    kernel = _kernel_from_spec(spec, input_dim)
    if input_dim is not None:
        points = tf.constant(np.stack([np.zeros(int(input_dim)), np.ones(int(input_dim))]))  # [2, D]
        try:
            values = kernel(points).numpy()
        except (tf.errors.InvalidArgumentError, ValueError, TypeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ReleaseFileError(f"kernel: cannot be evaluated on the file's {input_dim} input column(s) "
                                   f"({first})") from None
        if values.shape != (2, 2) or not np.all(np.isfinite(values)):
            raise ReleaseFileError(f"kernel: does not give finite [2, 2] values on the file's {input_dim} input column(s)")
    return kernel


def _kernel_from_spec(spec: Any, input_dim: Optional[int] = None) -> gpflow.kernels.Kernel:
    if not isinstance(spec, dict) or not isinstance(spec.get("class"), str):
        raise ReleaseFileError("a kernel specification must be an object with a \"class\"")
    name = spec["class"]
    if name in _COMBINATIONS:
        parts = spec.get("kernels")
        if set(spec) != {"class", "kernels"} or not isinstance(parts, list) or not parts:
            raise ReleaseFileError(f"kernel {name}: needs exactly a non-empty list \"kernels\"")
        return _COMBINATIONS[name]([_kernel_from_spec(p, input_dim) for p in parts])
    if name == "Periodic":
        return _periodic_from_spec(spec, input_dim)
    if name not in KERNEL_CLASSES:
        raise ReleaseFileKindError(f"unknown kernel class {name!r}; a release file holds {sorted(KERNEL_CLASSES)}, "
                                   "Periodic, Sum and Product")
    cls, params = KERNEL_CLASSES[name]
    values = spec.get("parameters")
    if set(spec) != {"class", "active_dims", "parameters"} or not isinstance(values, dict) or set(values) != set(params):
        raise ReleaseFileError(f"kernel {name}: needs class, active_dims and parameters {list(params)}")
    arrays = {p: _parameter(name, p, values[p]) for p in params}
    active_dims = _active_dims(name, spec["active_dims"])
    if input_dim is not None:
        _check_dimensions(name, active_dims, arrays, int(input_dim))
    kernel = gpflow.utilities.freeze(cls(active_dims=active_dims, **arrays))
    for p, arr in arrays.items():  # exactly the saved values (no round trip through a transform)
        setattr(kernel, p, tf.constant(arr))
    return kernel


def _periodic_from_spec(spec: Dict[str, Any], input_dim: Optional[int]) -> gpflow.kernels.Kernel:
    """``Periodic`` of a base kernel of :data:`PERIODIC_BASES` (a leaf: no nesting), with its ``period``."""
    base_spec, values = spec.get("base_kernel"), spec.get("parameters")
    if (set(spec) != {"class", "base_kernel", "parameters"} or not isinstance(values, dict) or set(values) != {"period"}
            or not isinstance(base_spec, dict) or base_spec.get("class") not in PERIODIC_BASES):
        raise ReleaseFileError(f"kernel Periodic: needs class, parameters {{period}} and a base_kernel of "
                               f"{list(PERIODIC_BASES)}")
    base = _kernel_from_spec(base_spec, input_dim)
    period = _parameter("Periodic", "period", values["period"])
    if input_dim is not None:
        _check_dimensions("Periodic", _active_dims("Periodic", base_spec["active_dims"]), {"period": period},
                          int(input_dim))
    try:
        kernel = gpflow.utilities.freeze(gpflow.kernels.Periodic(base, period=period))
    except (TypeError, ValueError) as exc:
        raise ReleaseFileError(f"kernel Periodic: {exc}") from None
    kernel.period = tf.constant(period)  # exactly the saved value
    return kernel


def mean_function_spec(mean_function: Optional[gpflow.functions.MeanFunction]) -> Dict[str, Any]:
    """``{"class": "Zero", "output_dim"}`` or ``{"class": "Constant", "c"}``; ``NotImplementedError`` otherwise."""
    if mean_function is None:
        return {"class": "Zero", "output_dim": 1}
    cls = type(mean_function)
    if cls is gpflow.functions.Zero:
        return {"class": "Zero", "output_dim": int(mean_function.output_dim)}
    if cls is gpflow.functions.Constant:
        return {"class": "Constant", "c": _value(mean_function.c)}
    raise NotImplementedError(
        f"cannot save a {cls.__module__}.{cls.__qualname__} mean function: a release file holds only "
        f"{list(MEAN_FUNCTION_CLASSES)} (export_saved_model has no such list)")


def mean_function_from_spec(spec: Any) -> gpflow.functions.MeanFunction:
    """The frozen mean function of a :func:`mean_function_spec`, with exactly the saved values."""
    if not isinstance(spec, dict) or spec.get("class") not in MEAN_FUNCTION_CLASSES:
        raise ReleaseFileKindError(f"unknown mean function {spec!r}; a release file holds {list(MEAN_FUNCTION_CLASSES)}")
    if spec["class"] == "Zero":
        dim = spec.get("output_dim")
        if set(spec) != {"class", "output_dim"} or not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise ReleaseFileError("mean function Zero: needs a positive integer output_dim")
        return gpflow.functions.Zero(output_dim=dim)
    if set(spec) != {"class", "c"}:
        raise ReleaseFileError("mean function Constant: needs exactly c")
    try:
        c = np.asarray(spec["c"], dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ReleaseFileError("mean function Constant: c must be a list of numbers") from exc
    if c.ndim > 1 or c.size == 0 or not np.all(np.isfinite(c)):
        raise ReleaseFileError("mean function Constant: c must be a finite number or a non-empty list of them")
    try:  # the releases' own range for a public value
        check_magnitude("mean function Constant: c", c)
    except ValueError as exc:
        raise ReleaseFileError(str(exc)) from None
    mean = gpflow.utilities.freeze(gpflow.functions.Constant(c))
    mean.c = tf.constant(c)
    return mean
