"""The non-stationary Gibbs kernel and a density-driven lengthscale function (JMLR section 3.1).

Privacy assumption: the lengthscale function must be built from the *public* inputs only (never
from the private outputs y); ``kde_lengthscale_function`` reads nothing but ``X_public``, so the
kernel, like any other fixed kernel, spends no privacy budget.
"""

from __future__ import annotations

from numbers import Real
from typing import Any, Callable, Optional, Union

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import Parameter, TensorType
from gpflow.utilities import positive

LengthscaleFunction = Callable[[tf.Tensor], tf.Tensor]

#: Largest number of grid offsets the neighbourhood minimum may evaluate per input point.
_MAX_NEIGHBOURHOOD_OFFSETS = 100_000


class Gibbs(gpflow.kernels.Kernel):
    """Gibbs' non-stationary squared-exponential kernel (JMLR eq. 8).

    ``k(x, x') = variance * prod_d sqrt(2 l_d(x) l_d(x') / (l_d(x)^2 + l_d(x')^2))
    * exp(-sum_d (x_d - x'_d)^2 / (l_d(x)^2 + l_d(x')^2))``.

    It is positive definite for any positive lengthscale function, has ``k(x, x) = variance``,
    and equals GPflow's ``SquaredExponential(variance, lengthscales=l)`` when ``l(x) = l`` is
    constant. ``lengthscale_function`` maps inputs ``[N, D]`` (after ``active_dims`` slicing) to
    positive lengthscales ``[N, D]`` (one per dimension) or ``[N, 1]`` (shared by all
    dimensions); it is held fixed (``variance`` is the only Parameter). Build it from public
    inputs only, e.g. with :func:`kde_lengthscale_function`. Inputs are rank 2 (no batch
    dimensions).
    """

    def __init__(
        self,
        lengthscale_function: LengthscaleFunction,
        variance: TensorType = 1.0,
        **kwargs: Any,
    ) -> None:
        """
        :param lengthscale_function: callable ``X [N, D] -> [N, D] or [N, 1]``, positive.
        :param variance: initial value of the (positive) kernel variance.
        :param kwargs: ``name`` and ``active_dims``, as for GPflow kernels.
        """
        if not callable(lengthscale_function):
            raise TypeError(
                f"lengthscale_function must be callable, got {type(lengthscale_function).__name__}"
            )
        for kwarg in kwargs:
            if kwarg not in {"name", "active_dims"}:
                raise TypeError(f"Unknown keyword argument: {kwarg}")
        super().__init__(**kwargs)
        self.lengthscale_function = lengthscale_function
        self.variance = Parameter(variance, transform=positive())

    @check_shapes(
        "X: [N, D]",
        "return: [N, D]",
    )
    def lengthscales(self, X: TensorType) -> tf.Tensor:
        """The lengthscale function at ``X`` (already sliced), broadcast to one per dimension."""
        X = tf.convert_to_tensor(X, dtype=gpflow.config.default_float())
        if X.shape.rank is not None and X.shape.rank != 2:
            raise ValueError(f"Gibbs supports rank-2 inputs [N, D] only, got shape {X.shape}")
        ell = tf.cast(self.lengthscale_function(X), X.dtype)
        n_cols = ell.shape[-1] if ell.shape.rank == 2 else None
        if ell.shape.rank != 2 or (
            n_cols is not None and X.shape[-1] is not None and n_cols not in (1, X.shape[-1])
        ):
            raise ValueError(
                f"lengthscale_function must return [N, D] or [N, 1], got shape {ell.shape} "
                f"for inputs of shape {X.shape}"
            )
        return tf.broadcast_to(ell, tf.shape(X))

    @inherit_check_shapes
    def K(self, X: TensorType, X2: Optional[TensorType] = None) -> tf.Tensor:
        L1 = self.lengthscales(X)  # [N, D]
        if X2 is None:
            X2, L2 = X, L1
        else:
            L2 = self.lengthscales(X2)  # [M, D]
        sq_sum = tf.square(L1)[:, None, :] + tf.square(L2)[None, :, :]  # [N, M, D]
        log_prefactor = 0.5 * tf.reduce_sum(
            tf.math.log(2.0 * L1[:, None, :] * L2[None, :, :] / sq_sum), axis=-1
        )  # [N, M]
        diff = X[:, None, :] - X2[None, :, :]  # [N, M, D]
        exponent = tf.reduce_sum(tf.square(diff) / sq_sum, axis=-1)  # [N, M]
        return self.variance * tf.exp(log_prefactor - exponent)

    @inherit_check_shapes
    def K_diag(self, X: TensorType) -> tf.Tensor:
        return self.variance * tf.ones(tf.shape(X)[:-1], dtype=self.variance.dtype)


def _positive_scalar(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not np.isfinite(value) or value <= 0.0:
        raise ValueError(f"{name} must be finite and > 0, got {value}")
    return value


def _positive_per_dim(name: str, value: Any, n_dims: int) -> np.ndarray:
    """A positive scalar or length-``n_dims`` vector, as a float64 array of shape [n_dims]."""
    if isinstance(value, (Real, np.floating, np.integer)) and not isinstance(value, bool):
        return np.full(n_dims, _positive_scalar(name, value))
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{name} must be a positive number or array of {n_dims}, got {value!r}"
        ) from exc
    if arr.shape != (n_dims,):
        raise ValueError(
            f"{name} must be a scalar or have shape ({n_dims},), got shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0.0):
        raise ValueError(f"{name} must be finite and > 0, got {arr}")
    return arr


def kde_lengthscale_function(
    X_public: TensorType,
    *,
    n_target: float,
    m: float,
    bandwidth: Union[None, float, np.ndarray] = None,
    neighbourhood: Union[None, float, np.ndarray] = None,
    neighbourhood_grid: int = 21,
) -> LengthscaleFunction:
    """The JMLR (section 3.1) lengthscale function ``r(x) = [1/m + rho(x)/n_target]^{-1}``.

    ``rho`` is a Gaussian kernel density estimate on the *counts* scale: with the public inputs
    ``x_i`` (n of them) and per-dimension bandwidths ``h_d``,
    ``rho(x) = sum_i prod_d N(x_d; x_id, h_d^2)``, i.e. n times the normalised KDE, in points per
    unit volume (points per unit length in 1-D, where ``n_target / rho(x)`` is the width of an
    interval holding about ``n_target`` points, so ``r`` is in the units of x). ``m`` is the
    lengthscale where there is no data (``r <= m``). In D > 1 the formula is applied as in the
    paper, giving one lengthscale shared by all dimensions (``rho`` is then per unit volume).

    With ``neighbourhood=radius`` (JMLR section 6.1 variant) ``rho(x)`` is replaced by its
    smallest value over the ellipsoid ``||(z - x) / radius|| <= 1``, evaluated on a regular grid
    of ``neighbourhood_grid`` points per dimension (offsets outside the ellipsoid are dropped; an
    odd grid includes x itself), so points next to sparse regions get long lengthscales too.

    Privacy: built from the public inputs only; no private output is read, so using it spends no
    privacy budget. Use it only where the inputs are public.

    :param X_public: public inputs, ``[n, D]``.
    :param n_target: number of points wanted within a lengthscale (> 0).
    :param m: largest lengthscale (> 0), reached where the density is zero.
    :param bandwidth: KDE standard deviation, scalar or ``[D]``; default Scott's rule
        ``h_d = std_d(X_public, ddof=1) * n^(-1 / (D + 4))`` (scipy's ``gaussian_kde`` default in
        1-D).
    :param neighbourhood: radius (scalar or ``[D]``) of the minimum-density neighbourhood, or
        ``None`` for the plain function.
    :param neighbourhood_grid: grid points per dimension for the neighbourhood minimum (>= 2).
    :return: a function ``X [N, D] -> r(X) [N, 1]`` (float64 TF) for :class:`Gibbs`.
    """
    X_np = np.asarray(X_public, dtype=np.float64)
    if X_np.ndim != 2 or X_np.shape[0] < 1 or X_np.shape[1] < 1:
        raise ValueError(f"X_public must have shape [n, D] with n, D >= 1, got shape {X_np.shape}")
    if not np.all(np.isfinite(X_np)):
        raise ValueError("X_public must be finite, got non-finite entries")
    n, D = X_np.shape
    n_target = _positive_scalar("n_target", n_target)
    m = _positive_scalar("m", m)
    if bandwidth is None:
        if n < 2:
            raise ValueError(f"Scott's rule needs at least 2 public points, got n = {n}")
        h = X_np.std(axis=0, ddof=1) * n ** (-1.0 / (D + 4))
        if np.any(h <= 0.0):
            raise ValueError(
                f"Scott's rule bandwidth is zero (constant column); pass bandwidth, got {h}"
            )
    else:
        h = _positive_per_dim("bandwidth", bandwidth, D)

    offsets_np: Optional[np.ndarray] = None
    if neighbourhood is not None:
        radius = _positive_per_dim("neighbourhood", neighbourhood, D)
        if isinstance(neighbourhood_grid, bool) or not isinstance(
            neighbourhood_grid, (int, np.integer)
        ):
            raise TypeError(f"neighbourhood_grid must be an integer, got {neighbourhood_grid!r}")
        if neighbourhood_grid < 2:
            raise ValueError(f"neighbourhood_grid must be >= 2, got {neighbourhood_grid}")
        if float(neighbourhood_grid) ** D > _MAX_NEIGHBOURHOOD_OFFSETS:
            raise ValueError(
                f"neighbourhood_grid ** D = {neighbourhood_grid}**{D} exceeds "
                f"{_MAX_NEIGHBOURHOOD_OFFSETS} offsets; use a smaller neighbourhood_grid"
            )
        unit = np.linspace(-1.0, 1.0, int(neighbourhood_grid))
        grid = np.stack(np.meshgrid(*([unit] * D), indexing="ij"), axis=-1).reshape(-1, D)
        grid = grid[np.sum(grid**2, axis=-1) <= 1.0 + 1e-12]
        offsets_np = grid * radius  # [G, D]

    dtype = gpflow.config.default_float()
    centres = tf.constant(X_np / h, dtype=dtype)  # [n, D], scaled by the bandwidth
    inv_h = tf.constant(1.0 / h, dtype=dtype)  # [D]
    log_norm = float(-0.5 * D * np.log(2.0 * np.pi) - np.sum(np.log(h)))
    inv_m = tf.constant(1.0 / m, dtype=dtype)
    inv_n_target = tf.constant(1.0 / n_target, dtype=dtype)

    def rho(X: tf.Tensor) -> tf.Tensor:
        """Counts-scale KDE at X [N, D] -> [N]."""
        diff = (X * inv_h)[:, None, :] - centres[None, :, :]  # [N, n, D]
        log_k = -0.5 * tf.reduce_sum(tf.square(diff), axis=-1) + log_norm  # [N, n]
        return tf.reduce_sum(tf.exp(log_k), axis=-1)

    if offsets_np is None:
        density = rho
    else:
        offsets = tf.constant(offsets_np, dtype=dtype)

        def density(X: tf.Tensor) -> tf.Tensor:
            """Smallest counts-scale KDE over the neighbourhood of each row of X -> [N]."""
            return tf.foldl(
                lambda acc, offset: tf.minimum(acc, rho(X + offset)),
                offsets,
                initializer=tf.fill(tf.shape(X)[:1], tf.constant(np.inf, dtype=dtype)),
            )

    @check_shapes(
        "X: [N, D]",
        "return: [N, 1]",
    )
    def lengthscale(X: TensorType) -> tf.Tensor:
        X = tf.convert_to_tensor(X, dtype=dtype)
        if X.shape[-1] is not None and X.shape[-1] != D:
            raise ValueError(f"inputs must have {D} columns like X_public, got shape {X.shape}")
        return (1.0 / (inv_m + density(X) * inv_n_target))[:, None]

    return lengthscale
