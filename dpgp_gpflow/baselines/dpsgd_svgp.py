"""DP-SGD on a sparse variational GP: the peer the whole-row release is compared with (issue 36 item 7;
docs/baselines.md#dp-sgd-sparse-variational-gp).

GPflow's :class:`gpflow.models.SVGP` (Gaussian likelihood, whitened) on **public** inducing inputs, with
its kernel, likelihood variance, mean (the midpoint of the output bounds) and inducing inputs fixed and
public. Only the variational parameters ``q_mu`` and ``q_sqrt`` are trained, by DP-SGD (Abadi et al. 2016)
with Adam on the noisy gradients: each step samples a Poisson minibatch (every row independently with
probability ``q``), clips each row's gradient of its data term ``-E_q[log p(y_i | f_i)]`` to norm ``C``,
sums, adds Gaussian noise of std ``sigma C`` and adds the exact gradient of the KL term (it reads no
data). Everything trained on the private rows goes through that clipped, noised sum.

Privacy assumption: whole rows ``(x, y)`` are private; neighbours differ in one row, replaced by any other
(**replace-one**, the relation of the whole-row release; the inputs are clipped to the public box
``x_bounds`` and the outputs to ``y_bounds`` as there, though the guarantee below needs only the gradient
clipping). ``n`` is public under replace-one. Replacing a row moves the clipped sum by at most ``2C``
(``g_i`` to ``g_i'``, each of norm ``<= C``): twice the add/remove sensitivity. The accounting states it
with ``dp_accounting``'s privacy loss distributions under ``NeighboringRelation.REPLACE_ONE``, where a
``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))`` is the pair ``(1-q) N(0, sigma^2) + q N(-1, sigma^2)``
against ``(1-q) N(0, sigma^2) + q N(+1, sigma^2)`` (per-row norm bound 1, noise ``sigma``: the two rows
``2`` apart), composed over the steps, pessimistic discretisation (an upper bound). At ``q = 1`` this is
the Gaussian mechanism with shift ``2C`` against std ``sigma C``: ``mu = 2 sqrt(T) / sigma`` GDP.
:func:`dpsgd_noise_multiplier` finds the smallest ``sigma`` (to a relative ``1e-3``, on the safe side) for
a target ``(epsilon, delta)``; the release is charged once, as an ``(epsilon, delta)`` "approximate"
event, through :func:`~dpgp_gpflow.measurement.measure` (checks, reserve, train, commit).
(``dp_accounting`` 0.6's RDP accountant is not used: its sampled-without-replacement event under
REPLACE_ONE reads the noise multiplier against the per-row bound ``C``, not the shift ``2C``.)

Noise: with ``seed=None`` every step's noise is drawn by :func:`dpgp_gpflow.sampling.standard_normal`
(exact discrete Gaussian, one call for all steps: it does not depend on the data) and added on the
sampler's grid (:func:`~dpgp_gpflow.sampling.grid_sum`) to the whitened sum, whose per-row bound is
inflated by :func:`~dpgp_gpflow.sampling.gaussian_grid_factor` for the rounding; each row's gradient is
clipped to ``C / SENSITIVITY_SAFETY`` for the floating-point rounding of its norm and of the sum. The
minibatch coins come from the operating system's CSPRNG (``os.urandom``) with ``q`` rounded to a multiple
of ``2^-32`` (the rate accounted is that one). An explicit ``seed`` makes noise and batches reproducible
(NumPy, not private; it warns).
"""

from __future__ import annotations

import copy
import functools
import math
import os
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from dp_accounting import GaussianDpEvent, NeighboringRelation, PoissonSampledDpEvent
from dp_accounting.pld import pld_privacy_accountant

from .. import sampling
from ..accounting import PrivacyEvent, Reservation
from ..measurement import Measurement, SensitivityPath, measure
from ..mechanisms.request import release_request
from ..mechanisms.rounding import SENSITIVITY_SAFETY
from ..validation import (
    as_inputs,
    as_outputs,
    check_real,
    clip_outputs,
    require_float64,
    validate_bounds,
    validate_delta,
    validate_epsilon,
)
from ..whole_rows.design import check_public_inducing_inputs, clip_private_inputs, validate_box, warn_clipped_inputs

__all__ = ["DPSGDSVGP", "DPSGDSVGPRelease", "dpsgd_epsilon"]

#: What its sensitivity covers: one whole row, replaced (that of the whole-row release).
PATH = SensitivityPath(inputs=True)
#: The neighbour relation protected, as the release records it: ``"row (inputs and outputs)"`` (replace-one).
RELATION = PATH.relation()
#: Discretisation of the privacy loss when calibrating (pessimistic: an upper bound at any interval;
#: 1e-3 is within 1e-4 relative of 1e-4 on the benchmark's settings and ten times faster).
CALIBRATION_DISCRETIZATION = 1e-3
#: Relative tolerance of the noise-multiplier search (the returned sigma is always on the safe side).
CALIBRATION_RTOL = 1e-3
#: Minibatch probabilities are multiples of this (the CSPRNG's 32-bit coins).
RATE_GRID = 2.0**-32


# ------------------------------------------------------------------------------------------------
# accounting (public parameters only)


def _sampling_rate(sampling_rate: Any) -> float:
    """``q`` in (0, 1], rounded to the nearest multiple of 2^-32 (at least one): the rate the coins have."""
    q = check_real("sampling_rate", sampling_rate)
    if not 0.0 < q <= 1.0:
        raise ValueError(f"sampling_rate must be in (0, 1], got {q}")
    return max(round(q / RATE_GRID), 1) * RATE_GRID


def _steps(steps: Any) -> int:
    if isinstance(steps, (bool, np.bool_)) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    return int(steps)


def dpsgd_epsilon(noise_multiplier: float, sampling_rate: float, steps: int, delta: float, *,
                  discretization: float = CALIBRATION_DISCRETIZATION) -> float:
    """Epsilon at ``delta`` of ``steps`` Poisson-sampled Gaussian steps (rate ``sampling_rate``, noise std
    ``noise_multiplier * C`` on a sum of rows clipped to ``C``) under **replace-one**: ``dp_accounting``'s
    PLD accountant, ``REPLACE_ONE``, pessimistic discretisation (an upper bound)."""
    sigma = check_real("noise_multiplier", noise_multiplier)
    if not sigma > 0.0:
        raise ValueError(f"noise_multiplier must be > 0, got {sigma}")
    q, steps, delta = _sampling_rate(sampling_rate), _steps(steps), validate_delta(delta)
    accountant = pld_privacy_accountant.PLDAccountant(NeighboringRelation.REPLACE_ONE,
                                                      value_discretization_interval=float(discretization))
    accountant.compose(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), steps)
    return float(max(accountant.get_epsilon(delta), 0.0))


@functools.lru_cache(maxsize=256)
def _noise_multiplier(epsilon: float, delta: float, q: float, steps: int) -> float:
    def cost(sigma: float) -> float:
        return dpsgd_epsilon(sigma, q, steps, delta)

    hi = 1.0
    while cost(hi) > epsilon:
        hi *= 2.0
        if hi > 1e6:
            raise ValueError(f"no noise multiplier up to 1e6 reaches ({epsilon}, {delta}) in {steps} steps at "
                             f"rate {q}")
    lo = hi / 2.0
    while cost(lo) <= epsilon and lo > 1e-6:
        hi, lo = lo, lo / 2.0
    while hi / lo > 1.0 + CALIBRATION_RTOL:  # invariant: cost(hi) <= epsilon < cost(lo)
        mid = math.sqrt(lo * hi)
        if cost(mid) <= epsilon:
            hi = mid
        else:
            lo = mid
    return hi


def dpsgd_noise_multiplier(epsilon: float, delta: float, *, sampling_rate: float, steps: int) -> float:
    """The smallest noise multiplier ``sigma`` (relative tolerance :data:`CALIBRATION_RTOL`, always on the
    safe side: :func:`dpsgd_epsilon` of the result is ``<= epsilon``) for which ``steps`` replace-one
    Poisson-sampled Gaussian steps at ``sampling_rate`` are ``(epsilon, delta)``-DP. Public inputs only;
    cached."""
    epsilon, delta = validate_epsilon(epsilon), validate_delta(delta)
    return _noise_multiplier(epsilon, delta, _sampling_rate(sampling_rate), _steps(steps))


# ------------------------------------------------------------------------------------------------
# per-example gradients


def _trained(model: gpflow.models.SVGP) -> Tuple[tf.Variable, tf.Variable]:
    """The variables DP-SGD trains: ``q_mu`` and the unconstrained ``q_sqrt`` (its triangle as a vector)."""
    return model.q_mu.unconstrained_variable, model.q_sqrt.unconstrained_variable


@check_shapes("X: [batch, D]", "Y: [batch, 1]", "return: [batch, P]")
def per_example_gradients(model: gpflow.models.SVGP, X: Any, Y: Any) -> tf.Tensor:
    """``[B, P]``: row ``i`` is the gradient of the SVGP's data term of row ``i`` alone,
    ``-E_q[log p(y_i | f_i)]``, with respect to the trained variables (``q_mu`` then the unconstrained
    ``q_sqrt``, flattened), by ``tf.vectorized_map`` over the rows (one gradient tape per row, vectorised;
    a ``jacobian`` of the batch's losses would cost B times the batch's backward pass)."""
    X = tf.convert_to_tensor(X, gpflow.default_float())
    Y = tf.convert_to_tensor(Y, gpflow.default_float())
    variables = _trained(model)

    def one_row(row: Tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        x, y = row[0][None, :], row[1][None, :]  # [1, D], [1, 1]
        with tf.GradientTape() as tape:
            mean, var = model.predict_f(x, full_cov=False)  # [1, 1] each
            loss = -model.likelihood.variational_expectations(x, mean, var, y)[0]
        return tf.concat([tf.reshape(g, [-1]) for g in tape.gradient(loss, variables)], axis=0)  # [P]

    return tf.vectorized_map(one_row, (X, Y))


@check_shapes("G: [batch, P]", "return: [batch, P]")
def clip_per_example(G: Any, clip_norm: float) -> tf.Tensor:
    """Each row of ``G`` scaled to norm at most ``clip_norm`` (rows already within it unchanged)."""
    G = tf.convert_to_tensor(G, gpflow.default_float())
    norms = tf.norm(G, axis=1, keepdims=True)  # [B, 1]
    return G * tf.minimum(tf.ones_like(norms), clip_norm / tf.maximum(norms, tf.constant(1e-300, G.dtype)))


def _kl_gradient(model: gpflow.models.SVGP) -> tf.Tensor:
    """``[P]``: the gradient of the KL term (no data) with respect to the trained variables."""
    variables = _trained(model)
    with tf.GradientTape() as tape:
        kl = model.prior_kl()
    return tf.concat([tf.reshape(g, [-1]) for g in tape.gradient(kl, variables)], axis=0)


# ------------------------------------------------------------------------------------------------
# the released object


@dataclass(frozen=True, eq=False, repr=False)
class DPSGDSVGPRelease:
    """The variational posterior DP-SGD released, and how: every field is public or released.

    ``predict_f`` is post-processing (no further cost). The predictive variance is the SVGP's, from the
    released ``q_sqrt``; the noise the optimiser saw is not propagated into it (DP-SGD gives no closed form
    for that)."""

    q_mu: np.ndarray  #: [M, 1] released (whitened)
    q_sqrt: np.ndarray  #: [M, M] released, lower triangular (whitened)
    inducing_inputs: np.ndarray  #: [M, D] public
    kernel: gpflow.kernels.Kernel  #: public, fixed (a copy)
    noise_variance: float  #: public, fixed
    mean_constant: float  #: public: the midpoint of y_bounds
    x_bounds: Tuple[Tuple[float, float], ...]
    y_bounds: Tuple[float, float]
    epsilon: float
    delta: float
    noise_multiplier: float  #: sigma: the noise std on each step's clipped sum is sigma * clip_norm
    clip_norm: float
    sampling_rate: float  #: q, as the coins had it (a multiple of 2^-32)
    steps: int
    learning_rate: float
    relation: str = RELATION
    reproducible: bool = False

    @check_shapes("return[0]: [N, 1]", "return[1]: [N, 1]")
    def predict_f(self, Xnew: Any) -> Tuple[np.ndarray, np.ndarray]:
        """Mean and marginal variance of the latent function at ``Xnew`` ``[N, D]``, NumPy ``[N, 1]``."""
        Xnew = as_inputs("Xnew", Xnew, self.inducing_inputs.shape[1])
        mean, var = gpflow.conditionals.conditional(
            tf.constant(Xnew), gpflow.inducing_variables.InducingPoints(self.inducing_inputs), self.kernel,
            tf.constant(self.q_mu), q_sqrt=tf.constant(self.q_sqrt[None]), white=True, full_cov=False)
        return mean.numpy() + self.mean_constant, var.numpy()

    def __repr__(self) -> str:
        extra = ", reproducible=True" if self.reproducible else ""
        return (f"DPSGDSVGPRelease(epsilon={self.epsilon}, delta={self.delta}, steps={self.steps}, "
                f"sampling_rate={self.sampling_rate:.4g}, noise_multiplier={self.noise_multiplier:.4g}, "
                f"clip_norm={self.clip_norm}, M={self.q_mu.shape[0]}{extra})")


# ------------------------------------------------------------------------------------------------
# the release


def _positive(name: str, value: Any) -> float:
    value = check_real(name, value)
    if not value > 0.0:
        raise ValueError(f"{name} must be finite and > 0, got {value}")
    return value


def _batches(n: int, q: float, steps: int, seed: Optional[int]):
    """Each step's Poisson minibatch (row indices): the OS CSPRNG's 32-bit coins below ``q 2^32``, or
    NumPy's from ``seed`` (reproducible, not private)."""
    if q == 1.0:
        for _ in range(steps):
            yield np.arange(n)
        return
    threshold = round(q / RATE_GRID)
    rng = None if seed is None else np.random.default_rng([seed, 1])
    for _ in range(steps):
        coins: np.ndarray = (np.frombuffer(os.urandom(4 * n), dtype=np.uint32) if rng is None
                             else rng.integers(0, 2**32, n, dtype=np.uint64))
        yield np.flatnonzero(coins < threshold)


class _Adam:
    """Adam on a flat parameter vector (post-processing of the noisy gradients)."""

    def __init__(self, theta: np.ndarray, learning_rate: float, b1: float = 0.9, b2: float = 0.999) -> None:
        self.theta, self.lr, self.b1, self.b2 = theta, learning_rate, b1, b2
        self.m, self.v, self.t = np.zeros_like(theta), np.zeros_like(theta), 0

    def step(self, grad: np.ndarray) -> np.ndarray:
        self.t += 1
        self.m = self.b1 * self.m + (1 - self.b1) * grad
        self.v = self.b2 * self.v + (1 - self.b2) * grad**2
        m_hat, v_hat = self.m / (1 - self.b1**self.t), self.v / (1 - self.b2**self.t)
        self.theta = self.theta - self.lr * m_hat / (np.sqrt(v_hat) + 1e-8)
        return self.theta


class DPSGDSVGP:
    """A sparse variational GP whose variational parameters are released by DP-SGD, for whole rows
    (module docstring). Build it once, release with :meth:`release_function` (each call trains from the
    prior and is charged; the compiled gradient step is traced once per model).

    ``data = (X [N, D], Y [N, 1])``, both private: ``X`` is clipped to ``x_bounds`` (one public ``(lo, hi)``
    per column) and ``Y`` to ``y_bounds`` when a release reads them. ``kernel`` (its hyperparameters),
    ``inducing_variable`` (``Z [M, D]``, a design over the public box, never computed from the private
    inputs) and ``noise_variance`` are public and stay fixed; the prior mean is the midpoint of ``y_bounds``.
    """

    def __init__(self, data: Tuple[Any, Any], kernel: gpflow.kernels.Kernel, *, inducing_variable: Any,
                 noise_variance: float, x_bounds: Any, y_bounds: Any) -> None:
        require_float64()
        X, Y = data
        self._X = as_inputs("X", X)
        self._Y = as_outputs("Y", Y, self._X.shape[0])
        self.num_data, input_dim = self._X.shape
        self._box = validate_box(x_bounds, input_dim)  # the rules of every model with private inputs
        self.x_bounds = tuple((lo, hi) for lo, hi in self._box.tolist())
        if y_bounds is None:
            raise TypeError("y_bounds=(lo, hi), public bounds on the outputs, is required")
        self.y_bounds = validate_bounds(y_bounds)
        Z = as_inputs("inducing_variable", inducing_variable, input_dim)
        check_public_inducing_inputs(Z)
        if not isinstance(kernel, gpflow.kernels.Kernel):
            raise TypeError(f"kernel must be a gpflow kernel, got {type(kernel).__name__}")
        self.noise_variance = _positive("noise_variance", noise_variance)
        self.mean_constant = 0.5 * (self.y_bounds[0] + self.y_bounds[1])
        self.model = gpflow.models.SVGP(
            copy.deepcopy(kernel), gpflow.likelihoods.Gaussian(variance=self.noise_variance),
            gpflow.inducing_variables.InducingPoints(Z), mean_function=gpflow.mean_functions.Constant(self.mean_constant),
            whiten=True, num_data=self.num_data)
        for module in (self.model.kernel, self.model.likelihood, self.model.inducing_variable, self.model.mean_function):
            gpflow.set_trainable(module, False)
        self._prior = [v.numpy() for v in _trained(self.model)]  # the public starting point of every release
        self._sizes = [int(np.prod(v.shape)) for v in _trained(self.model)]
        self._clip = tf.Variable(1.0, dtype=tf.float64, trainable=False)  # the clip bound a step uses
        spec = [tf.TensorSpec([None, input_dim], tf.float64), tf.TensorSpec([None, 1], tf.float64)]
        self._clipped_sum = tf.function(self._clipped_sum_eager, input_signature=spec, autograph=False)
        self._kl_gradient = tf.function(lambda: _kl_gradient(self.model), autograph=False)

    @property
    def num_parameters(self) -> int:
        """P: how many numbers DP-SGD trains (``M`` of ``q_mu`` and ``M (M + 1) / 2`` of ``q_sqrt``)."""
        return sum(self._sizes)

    def _clipped_sum_eager(self, X: tf.Tensor, Y: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(clip_per_example(per_example_gradients(self.model, X, Y), self._clip), axis=0)

    def _assign(self, theta: np.ndarray) -> None:
        for v, part in zip(_trained(self.model), np.split(theta, np.cumsum(self._sizes)[:-1])):
            v.assign(part.reshape(v.shape))

    def release_function(self, *, epsilon: float, delta: float, clip_norm: float, sampling_rate: float,
                         steps: int, learning_rate: float = 0.05, seed: Optional[int] = None,
                         accountant: Any = None) -> DPSGDSVGPRelease:
        """Train ``q_mu`` and ``q_sqrt`` from the prior by DP-SGD and release them, ``(epsilon, delta)``-DP
        for whole rows under replace-one: ``steps`` steps at Poisson rate ``sampling_rate``
        (``steps * sampling_rate`` epochs in expectation), each row's data-term gradient clipped to
        ``clip_norm``, Adam at ``learning_rate``. Everything is checked and the noise multiplier computed
        (:func:`dpsgd_noise_multiplier`) before anything is reserved; one ledger event, committed after
        training. ``seed``: reproducible noise and minibatches (not private; warns)."""
        request = release_request(epsilon, delta, objective=None, seed=seed)
        clip_norm = _positive("clip_norm", clip_norm)
        learning_rate = _positive("learning_rate", learning_rate)
        q, steps = _sampling_rate(sampling_rate), _steps(steps)
        sigma = _noise_multiplier(request.epsilon, request.delta, q, steps)
        if not dpsgd_epsilon(sigma, q, steps, request.delta) <= request.epsilon:  # recomputed: what is charged
            raise RuntimeError("the calibrated noise multiplier does not reach the requested epsilon")
        dimension = self.num_parameters
        noise_std = sigma * clip_norm * sampling.gaussian_grid_factor(sigma, dimension)
        n = self.num_data
        description = (f"DP-SGD SVGP ({steps} steps, rate {q:.4g}, noise multiplier {sigma:.4g}, clip {clip_norm:g}; "
                       f"{RELATION})")

        def mechanism(reservation: Reservation) -> DPSGDSVGPRelease:
            X, outside = clip_private_inputs(self._X, self._box)
            warn_clipped_inputs(outside, self.num_data, self._box, stacklevel=2)
            Y = clip_outputs(self._Y, self.y_bounds)
            noise, reproducible = sampling.standard_normal(steps * dimension, request.seed)
            noise = noise.reshape(steps, dimension)
            self._clip.assign(clip_norm / SENSITIVITY_SAFETY)
            adam = _Adam(np.concatenate([p.reshape(-1) for p in self._prior]), learning_rate)
            self._assign(adam.theta)
            for t, rows in enumerate(_batches(n, q, steps, request.seed)):
                total = self._clipped_sum(X[rows], Y[rows]).numpy() if rows.size else np.zeros(dimension)
                if reproducible:
                    noisy = total + noise_std * noise[t]
                else:  # on the exact sampler's grid, whitened to unit noise
                    noisy = noise_std * sampling.grid_sum(total / noise_std, noise[t])
                self._assign(adam.step(noisy / (q * n) + self._kl_gradient().numpy() / n))
            reservation.commit(description)
            return DPSGDSVGPRelease(
                q_mu=self.model.q_mu.numpy(), q_sqrt=self.model.q_sqrt.numpy()[0],
                inducing_inputs=self.model.inducing_variable.Z.numpy(), kernel=copy.deepcopy(self.model.kernel),
                noise_variance=self.noise_variance, mean_constant=self.mean_constant, x_bounds=self.x_bounds,
                y_bounds=self.y_bounds, epsilon=request.epsilon, delta=request.delta, noise_multiplier=sigma,
                clip_norm=clip_norm, sampling_rate=q, steps=steps, learning_rate=learning_rate,
                reproducible=reproducible)

        event = PrivacyEvent(request.epsilon, request.delta, "approximate", None, description)
        return measure(Measurement(request=request, relation=RELATION, mechanism=mechanism, events=(event,), path=PATH,
                                   description=description), accountant)
