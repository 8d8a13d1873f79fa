"""Whitened Nystrom features of public inducing inputs, and the public bound that makes them safe to sum.

With public inducing inputs ``Z`` [M, D] and ``L L^T = K_ZZ / k_max + jitter I``, the features of an input
``x`` are

    phi(x) = L^{-1} k(Z, x) / k_max      [M],

the whitened features of the kernel scaled to ``k / k_max`` ("unit scale"; ``k_max`` the public bound on
``k(x, x)``, :func:`kernel_bound`). Their norm is at most 1 for every ``x``: ``||phi(x)||^2 =
k_Z(x)^T (K_ZZ + k_max jitter I)^{-1} k_Z(x) / k_max <= k_Z(x)^T K_ZZ^+ k_Z(x) / k_max <= k(x, x) / k_max
<= 1`` (the Schur complement of the joint Gram matrix of ``(Z, x)`` is >= 0, and jitter only lowers the
quadratic form; docs/whole_rows.md#features). :func:`whitened_features` also rescales any row whose computed
norm exceeds 1 back onto the unit sphere, so the bound the release charges for holds for the numbers actually
summed, whatever the rounding. The sensitivity of the whole-row statistics rests on that bound alone.

Releasing at unit scale makes the kernel's variance post-processing: the features of ``sigma_f^2 k / k_max``
are ``sigma_f phi`` (docs/whole_rows.md#variances-as-post-processing).

Privacy assumption: the kernel's parameters other than its overall scale, ``Z`` and the jitter are public
(never computed from the private rows); the inputs ``X`` may be private: only sums over rows of these features
leave :mod:`dpgp_gpflow.whole_rows.statistics`.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any, Callable, Dict, Optional, Tuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from .. import linalg
from ..io.gpflow_specs import kernel_from_spec, kernel_spec
from ..validation import parameter_value, variable_value
from .signature import InputSignature

__all__: list[str] = []  # internal: the package imports these names by name


def kernel_bound(kernel: gpflow.kernels.Kernel, x_bounds: Any = None) -> float:
    """The public bound ``k_max >= k(x, x)`` for every ``x`` in the box ``x_bounds`` ([D, 2]; None: no box, then
    only kernels whose ``k(x, x)`` is the same everywhere have one), attained where the kernel allows:

    * stationary kernels (and ``Periodic`` of one), ``Constant``: the ``variance`` (``k(x, x)`` everywhere);
    * ``Linear``: ``sum_d variance_d max(lo_d^2, hi_d^2)`` over its active columns of the box (at a corner);
    * ``Polynomial``: ``(s_max + offset)^degree`` with ``s_max`` the ``Linear`` part's bound (``offset >= 0``
      and a whole ``degree >= 1``: increasing in ``s >= 0``, so also at a corner);
    * ``Sum`` / ``Product``: the sum / product of their kernels' bounds (each ``k_i(x, x) >= 0``).

    Any other kernel (``ArcCosine``, ``ChangePoints``, ``White``, multi-output kernels, ...) is refused with one
    line naming it (``NotImplementedError``), as is a kernel that needs the box when none is given. Public:
    reads the kernel's parameters and the box only."""
    box = None if x_bounds is None else np.asarray(x_bounds, dtype=np.float64)
    if isinstance(kernel, gpflow.kernels.Sum):
        return float(sum(kernel_bound(k, box) for k in kernel.kernels))
    if isinstance(kernel, gpflow.kernels.Product):
        return float(np.prod([kernel_bound(k, box) for k in kernel.kernels]))
    if isinstance(kernel, gpflow.kernels.Periodic):
        return kernel_bound(kernel.base_kernel, box)
    if isinstance(kernel, (gpflow.kernels.Stationary, gpflow.kernels.Constant)):
        return _positive("variance", parameter_value(kernel.variance))
    if isinstance(kernel, gpflow.kernels.Linear):  # Polynomial too
        hi = _linear_bound(kernel, box)
        if not isinstance(kernel, gpflow.kernels.Polynomial):
            return _positive("bound", hi)
        offset = float(np.asarray(parameter_value(kernel.offset), dtype=np.float64))
        degree = float(np.asarray(kernel.degree, dtype=np.float64))
        if not (np.isfinite(offset) and offset >= 0.0):
            raise ValueError(f"the Polynomial kernel's offset must be finite and >= 0, got {offset}")
        if not (np.isfinite(degree) and degree >= 1.0 and degree == round(degree)):
            raise NotImplementedError(f"whole-row privacy takes a Polynomial kernel of whole degree >= 1, got "
                                      f"degree {degree:g}")
        # t^degree is increasing in t = s + offset >= 0: largest at s = s_max
        return _positive("bound", (hi + offset) ** degree)
    raise NotImplementedError(
        f"whole-row privacy needs a public bound on k(x, x) over the box, and {type(kernel).__module__}."
        f"{type(kernel).__qualname__} has none here: use a stationary kernel (SquaredExponential, Matern12/32/52, "
        "RationalQuadratic, Exponential, Cosine, Periodic of one), Constant, Linear, Polynomial, or a Sum / Product "
        "of them")


def constant_diagonal(kernel: gpflow.kernels.Kernel) -> bool:
    """Whether ``k(x, x)`` is the same at every ``x`` (stationary kernels, ``Periodic`` of one, ``Constant``, and
    ``Sum`` / ``Product`` of them): then ``sum_i k(x_i, x_i) = n k_max``, which the variance fit and the lengthscale
    choice on the released statistics rely on (:mod:`.variances`). Public: reads the kernel's classes only."""
    if isinstance(kernel, (gpflow.kernels.Sum, gpflow.kernels.Product)):
        return all(constant_diagonal(k) for k in kernel.kernels)
    if isinstance(kernel, gpflow.kernels.Periodic):
        return constant_diagonal(kernel.base_kernel)
    return isinstance(kernel, (gpflow.kernels.Stationary, gpflow.kernels.Constant))


def _positive(what: str, value: Any) -> float:
    value = float(np.asarray(value, dtype=np.float64))
    if not (np.isfinite(value) and value > 0.0):
        raise ValueError(f"the kernel's {what} must be finite and > 0, got {value}")
    return value


def _linear_bound(kernel: gpflow.kernels.Linear, box: Optional[np.ndarray]) -> float:
    """The largest value over the box of a ``Linear`` kernel's ``k(x, x) = sum_d variance_d x_d^2`` (its active
    columns of the box; ARD or one variance): each ``x_d^2`` is largest at the end of its interval farther
    from 0."""
    if box is None:
        raise NotImplementedError(f"the k(x, x) of a {type(kernel).__name__} kernel grows with |x|: its bound needs "
                                  "the public box (kernel_bound(kernel, x_bounds))")
    if box.ndim != 2 or box.shape[1] != 2 or not np.all(np.isfinite(box)):
        raise ValueError(f"x_bounds must be a finite [D, 2] array, got shape {box.shape}")
    columns = np.arange(box.shape[0])[kernel.active_dims]
    lo, hi = box[columns, 0], box[columns, 1]
    variance = np.broadcast_to(np.asarray(parameter_value(kernel.variance), dtype=np.float64), lo.shape)
    if not np.all(np.isfinite(variance) & (variance > 0.0)):
        raise ValueError(f"the Linear kernel's variance must be finite and > 0, got {variance}")
    return float(np.sum(variance * np.maximum(lo ** 2, hi ** 2)))


@check_shapes("Z: [M, D]", "return: [M, M]")
def inducing_cholesky(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, k_max: float, jitter: float) -> tf.Tensor:
    """``L`` with ``L L^T = K_ZZ / k_max + jitter I`` (public: ``Z``, the kernel and ``jitter`` are)."""
    Z = tf.convert_to_tensor(Z, dtype=tf.float64)
    M = tf.shape(Z)[0]
    Kzz = kernel(Z) / k_max  # [M, M]
    return tf.linalg.cholesky(Kzz + jitter * tf.eye(M, dtype=tf.float64))


@check_shapes("X: [N, D]", "Z: [M, D]", "L: [M, M]", "return: [N, M]")
def whitened_features(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, X: tf.Tensor,
                      k_max: float) -> tf.Tensor:
    """``phi(X)`` [N, M]: row i is ``L^{-1} k(Z, x_i) / k_max``, rescaled onto the unit sphere if its computed
    norm exceeds 1 (a no-op in exact arithmetic: the norm is at most ``sqrt(k(x, x) / k_max) <= 1``).
    Each row depends on its own input only. Memory O(N M): callers pass a chunk of rows.

    From :data:`SPLIT_FEATURE_ROWS` rows on, up to the solves :func:`~dpgp_gpflow.linalg.triangular_solve` splits
    itself, the rows are computed in two blocks (split at a multiple of :data:`FEATURE_ROW_ALIGNMENT` rows), which a
    compiled graph runs side by side: every row's features are the same numbers as in one block (each operation
    is row by row, its vectorised loops aligned alike)."""
    X = tf.convert_to_tensor(X, dtype=tf.float64)
    n = tf.shape(X)[0]
    half = (n // (2 * FEATURE_ROW_ALIGNMENT)) * FEATURE_ROW_ALIGNMENT
    m = tf.cast(tf.shape(L)[0], tf.float64)
    one_solve = (n < linalg.WIDE_COLUMNS) & (m * m * tf.cast(n, tf.float64) < linalg.SPLIT_FLOPS)
    return tf.cond((n >= SPLIT_FEATURE_ROWS) & one_solve,
                   lambda: tf.concat([_unit_features(kernel, Z, L, X[:half], k_max),
                                      _unit_features(kernel, Z, L, X[half:], k_max)], axis=0),
                   lambda: _unit_features(kernel, Z, L, X, k_max))


#: :func:`whitened_features` splits its rows in two blocks from this many rows on ...
SPLIT_FEATURE_ROWS = 4096
#: ... at a multiple of this many rows (the solve's and the element-wise loops' alignment: any multiple of 8 rows
#: gives every row the bits of the one-block computation)
FEATURE_ROW_ALIGNMENT = 64


def _unit_features(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, X: tf.Tensor,
                   k_max: float) -> tf.Tensor:
    """:func:`whitened_features` of one block of rows: a row of computed norm above 1 is divided by its norm (the
    division runs only when some row needs it: dividing by 1 is the identity)."""
    kzx = kernel(Z, X) / k_max  # [M, N]
    phi = tf.transpose(linalg.triangular_solve(L, kzx, lower=True))  # [N, M]
    norms = tf.norm(phi, axis=1, keepdims=True)  # [N, 1]
    return tf.cond(tf.reduce_any(norms > 1.0), lambda: phi / tf.maximum(norms, tf.constant(1.0, tf.float64)),
                   lambda: phi)


def _features(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, k_max: float, X: tf.Tensor) -> tf.Tensor:
    """:func:`whitened_features` in :meth:`FeatureMap.apply`'s argument order."""
    return whitened_features(kernel, Z, L, X, k_max)


class FeatureMap:
    """The public pieces of :func:`whitened_features`: a frozen copy of the kernel, ``Z`` [M, D], ``k_max`` and
    the jitter, with ``L`` computed once. It pickles through the kernel's release-file specification
    (:func:`~dpgp_gpflow.io.gpflow_specs.kernel_spec`), so Dask workers rebuild exactly the same public map.

    ``k_max`` (default :func:`kernel_bound` over the box ``x_bounds``) must bound ``k(x, x)`` there; a larger public value is safe (smaller
    features), a smaller one is clipped by the unit-norm rescaling and changes the model, never the privacy.
    """

    def __init__(self, kernel: gpflow.kernels.Kernel, Z: Any, *, jitter: Optional[float] = None,
                 k_max: Optional[float] = None, x_bounds: Any = None) -> None:
        self.Z = np.array(Z, dtype=np.float64, copy=True)
        if self.Z.ndim != 2 or self.Z.shape[0] < 1 or not np.all(np.isfinite(self.Z)):
            raise ValueError(f"Z must be a finite [M, D] array with M >= 1, got shape {self.Z.shape}")
        self.kernel = gpflow.utilities.freeze(kernel)
        self.k_max = kernel_bound(kernel, x_bounds) if k_max is None else float(k_max)
        if not (np.isfinite(self.k_max) and self.k_max > 0.0):
            raise ValueError(f"k_max must be finite and > 0, got {self.k_max}")
        self.jitter = float(gpflow.config.default_jitter() if jitter is None else jitter)
        if not (np.isfinite(self.jitter) and self.jitter >= 0.0):
            raise ValueError(f"jitter must be finite and >= 0, got {self.jitter}")
        self.L = inducing_cholesky(self.kernel, tf.constant(self.Z), self.k_max, self.jitter)
        if not bool(tf.reduce_all(tf.math.is_finite(self.L))):
            raise FloatingPointError("the inducing inputs' kernel matrix has no Cholesky factor (repeated inducing "
                                     "inputs?): increase the jitter or choose other inducing inputs")

    @property
    def m(self) -> int:
        """M: the number of inducing inputs (public)."""
        return int(self.Z.shape[0])

    @property
    def input_dim(self) -> int:
        """D: the number of input columns (public)."""
        return int(self.Z.shape[1])

    def __call__(self, X: Any) -> tf.Tensor:
        """:func:`whitened_features` of ``X`` [N, D] -> [N, M] (through the compiled function once
        :meth:`compile` ran)."""
        return self.apply(_features, tf.convert_to_tensor(X, tf.float64))

    @property
    def compiled(self) -> bool:
        """Whether :meth:`compile` ran: :meth:`apply` then traces its functions once and reuses the trace."""
        return self.__dict__.get("_compiled") is not None

    def apply(self, fn: Callable[..., Any], *args: tf.Tensor) -> Any:
        """``fn(kernel, Z, L, k_max, *args)`` over this map's public pieces: eager, or once :meth:`compile` ran,
        through one ``tf.function`` of ``args`` per ``fn`` (traced once for every number of rows: each arg's
        first dimension is free; cached on the map, which is immutable, so the trace stays valid; not pickled:
        a Dask worker's copy starts eager). ``fn`` must be a module-level function (the cache key). Compiled, the
        args must match the signature of the first call's (their number, dtypes, ranks and every dimension but the
        first: :class:`~.signature.InputSignature`), as the ``tf.function`` would require."""
        traces = self.__dict__.get("_compiled")
        if traces is None:
            return fn(self.kernel, tf.constant(self.Z), self.L, self.k_max, *args)
        compiled = traces.get((fn, "concrete"))
        if compiled is None:
            kernel, Z, L, k_max = self.kernel, tf.constant(self.Z), self.L, self.k_max
            specs = [tf.TensorSpec([None, *a.shape[1:]], a.dtype) for a in args]
            traced = tf.function(lambda *a: fn(kernel, Z, L, k_max, *a), autograph=False, input_signature=specs)
            # its one trace, called directly: half the overhead of the tf.function's dispatch per call; the
            # concrete function checks the dtypes only, the signature the rest
            signature = InputSignature(specs, getattr(fn, "__name__", repr(fn)))
            compiled = traces[(fn, "concrete")] = (traced.get_concrete_function(), signature)
        concrete, signature = compiled
        signature.check(args)
        return concrete(*args)

    def compile(self) -> "FeatureMap":
        """From now on, run :meth:`apply`'s functions (the features, a chunk's sums) compiled: worth its tracing
        (a fraction of a second each) for a map used on many chunks or again and again (:func:`feature_map`
        compiles a map on its reuse, :class:`~dpgp_gpflow.whole_rows.statistics.RowStatistics` after its first
        few chunks, ``compile_after``). The same operations as eagerly, so the same numbers up to rounding."""
        if self.__dict__.get("_compiled") is None:
            self._compiled: Dict[Any, Any] = {}
        return self

    def unit_variance(self, X: Any) -> tf.Tensor:
        """``k(x, x) / k_max`` at ``X`` [N] (1 for a stationary kernel; public)."""
        return self.kernel(tf.convert_to_tensor(X, tf.float64), full_cov=False) / self.k_max

    # -- pickling (Dask workers): the kernel travels as its specification -------------------------------
    def __getstate__(self) -> Dict[str, Any]:
        return {"kernel_spec": kernel_spec(self.kernel), "Z": self.Z, "k_max": self.k_max, "jitter": self.jitter,
                "L": self.L.numpy()}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.Z = np.asarray(state["Z"], dtype=np.float64)
        self.kernel = kernel_from_spec(state["kernel_spec"])
        self.k_max = float(state["k_max"])
        self.jitter = float(state["jitter"])
        self.L = tf.constant(state["L"])  # the client's factor itself: every worker sums the same features


class RecentlyUsed:
    """The ``size`` most recently used entries of a cache of public values (feature maps, compiled functions), the
    package's one least-recently-used rule: :meth:`get` and :meth:`put` make an entry the most recent; :meth:`put`
    then forgets the least recent beyond ``size``."""

    def __init__(self, size: int) -> None:
        self.size = int(size)
        self._entries: "OrderedDict[Any, Any]" = OrderedDict()

    def get(self, key: Any) -> Any:
        """The entry of ``key`` (now the most recent), or None."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: Any, value: Any) -> Any:
        """Keep ``value`` (not None) as the most recent entry of ``key``; returns it."""
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._entries)


#: How many feature maps :func:`feature_map` keeps (each holds a frozen kernel, ``Z``, ``L`` and its compiled
#: features), and compiled functions :func:`~.residual.held_stage_sum` keeps.
MAP_CACHE_SIZE = 16
#: :func:`feature_map`'s maps by :func:`_map_key`, each with a weak reference to its kernel.
_MAPS = RecentlyUsed(MAP_CACHE_SIZE)


#: Kernel classes (exactly these, not subclasses) whose kernels inside are only their ``kernels`` (a ``Sum`` /
#: ``Product``) or ``base_kernel`` (``Periodic``), or none: :func:`_kernels` reads those instead of walking every
#: submodule (the parameters' transforms included).
_LEAF_KERNELS = (gpflow.kernels.SquaredExponential, gpflow.kernels.Matern12, gpflow.kernels.Matern32,
                 gpflow.kernels.Matern52, gpflow.kernels.RationalQuadratic, gpflow.kernels.Exponential,
                 gpflow.kernels.Cosine, gpflow.kernels.Constant, gpflow.kernels.Linear, gpflow.kernels.Polynomial)


def _kernels(kernel: Any) -> Tuple[Any, ...]:
    """The kernel and every kernel inside it, at any depth (a ``Sum`` / ``Product``'s terms, a ``Periodic``'s
    ``base_kernel``): read directly for GPflow's own classes of :data:`_LEAF_KERNELS`, ``Sum``, ``Product`` and
    ``Periodic``, else in ``tf.Module``'s deterministic order (every submodule)."""
    if type(kernel) in _LEAF_KERNELS:
        return (kernel,)
    if type(kernel) in (gpflow.kernels.Sum, gpflow.kernels.Product):
        return (kernel, *(k for term in kernel.kernels for k in _kernels(term)))
    if type(kernel) is gpflow.kernels.Periodic:
        return (kernel, *_kernels(kernel.base_kernel))
    return (kernel, *(m for m in kernel.submodules if isinstance(m, gpflow.kernels.Kernel)))


#: Whether a parameter's transform has variables of its own (a bijector's variables are fixed when it is built).
_TRANSFORM_VARIABLES: "weakref.WeakKeyDictionary[Any, bool]" = weakref.WeakKeyDictionary()


def _has_variables(transform: Any) -> bool:
    try:
        return _TRANSFORM_VARIABLES[transform]
    except (KeyError, TypeError):
        has = bool(tuple(getattr(transform, "variables", None) or ()))
        try:
            _TRANSFORM_VARIABLES[transform] = has
        except TypeError:  # not weakly referable: not cached
            pass
        return has


def _map_key(kernel: gpflow.kernels.Kernel, Z: np.ndarray, box: Optional[np.ndarray]) -> Optional[Tuple[Any, ...]]:
    """What a :class:`FeatureMap` of ``kernel`` and ``Z`` at the default jitter depends on: the kernel object, every
    parameter's unconstrained value and transform (read without the transform: cheap), every kernel's class,
    ``active_dims`` and (Polynomial) degree, ``Z``, the box (``k_max``) and the jitter. None (do not reuse) when a transform has variables of its own."""
    values = []
    for path, p in gpflow.utilities.parameter_dict(kernel).items():
        transform = getattr(p, "transform", None)
        if transform is not None and _has_variables(transform):
            return None
        raw = variable_value(p.unconstrained_variable) if isinstance(p, gpflow.Parameter) else np.asarray(p.numpy())
        values.append((path, type(transform), id(transform), raw.tobytes()))
    # every kernel's class and active_dims: a kernel inside a Sum replaced by another class sharing the same
    # Parameter objects changes the key
    dims = tuple((type(k), repr(getattr(k, "active_dims", None)), repr(getattr(k, "degree", None)))
                 for k in _kernels(kernel))
    where = None if box is None else (box.shape, box.tobytes())
    return (id(kernel), type(kernel), tuple(values), dims, Z.shape, Z.tobytes(), where, gpflow.config.default_jitter())


def feature_map(kernel: gpflow.kernels.Kernel, Z: Any, x_bounds: Any = None) -> FeatureMap:
    """``FeatureMap(kernel, Z, x_bounds=x_bounds)`` (default jitter; ``k_max`` the kernel's bound over the box), the
    same object again when this kernel object, with the same parameter values, was mapped on the same ``Z`` and
    box before in this process: a map is public and immutable
    (a frozen copy of the kernel), so repeated releases of one model skip the kernel's freezing and the Cholesky
    factor, and from the second on use the compiled features (:meth:`FeatureMap.compile`). Public: kernel and
    ``Z`` only."""
    Z = np.asarray(Z, dtype=np.float64)
    box = None if x_bounds is None else np.asarray(x_bounds, dtype=np.float64)
    key = _map_key(kernel, Z, box) if Z.ndim == 2 else None
    if key is None:
        return FeatureMap(kernel, Z, x_bounds=box)
    hit = _MAPS.get(key)
    if hit is not None and hit[0]() is kernel:  # the same object (an id is reused only after it died)
        return hit[1].compile()
    features = FeatureMap(kernel, Z, x_bounds=box)
    _MAPS.put(key, (weakref.ref(kernel), features))
    return features
