"""The compiled release engine: a cloaking release's whole noise plan as one TensorFlow graph.

:func:`noise_plan` computes, from the public cloaking matrix ``C`` alone, everything a cloaking
release needs except the private outputs and the random draw: the column space and the rank rule,
the optimised noise covariance with its certificate, the Mahalanobis sensitivity (with the exact
sampler's inflation) and the whitening matrix. It is pure TensorFlow, so a training script can call
it inside its own ``tf.function``, on any device. :func:`publish` then does the host's part, the
only part that touches the private outputs: reserve the budget, whiten the query, draw exact noise
from the OS CSPRNG (:mod:`dpgp_gpflow.sampling`), re-colour, charge the accountant.

The eager release path (:func:`dpgp_gpflow.mechanisms.cloaking_release`) runs the same compiled stages
(``cloaking.OPTIMISERS``, ``mechanisms.NOISE_SOLVERS``, the whitening); here they are composed in one
graph, with the rank rule's one loop (:func:`~dpgp_gpflow.cloaking.first_harmless`) traced into it.

Privacy assumption: ``C`` (and so the plan) is a function of public inputs and hyperparameters only;
the plan never sees ``y``. docs/guides/compiled_engine.md has the details and a Keras example.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple, Union

import tensorflow as tf
from check_shapes import check_shapes

from . import cloaking
from .accounting import PrivacyAccountant, Reservation, reserve
from .cloaking import DEFAULT_TOL, candidate_rtols, first_harmless, projection_terms, working_set
from .cloaking.rank import bias_rounding, projection_bias
from .mechanisms.request import validate_tol
from .mechanisms.rounding import MAX_NOISE_CONDITION
from .mechanisms import (
    noise_in_space,
    publish_cloaking,
    release_request,
    validate_public_bounds,
    whitened_shift,
    whitening_terms,
)
from .released import PrivateRelease

__all__ = ["GraphNoisePlan", "noise_plan", "publish"]


class GraphNoisePlan(NamedTuple):
    """The noise of one cloaking release, as tensors (all public: functions of ``C`` alone).

    The release is ``offset + noise_factor @ (round(whitening @ y_c) + xi)`` with ``xi`` exact
    standard discrete-Gaussian noise on a grid (:func:`publish`); its noise covariance is
    ``noise_factor noise_factor^T``.
    """

    noise_factor: tf.Tensor  #: [k, r] the release's noise factor (multiplier and sensitivity included)
    whitening: tf.Tensor  #: [r, n] the whitening matrix W (whitened query ``W y_c`` has L2 sensitivity <= 1/s)
    basis: tf.Tensor  #: [k, r] orthonormal basis of the noised directions
    sensitivity: tf.Tensor  #: [] the Mahalanobis sensitivity Delta (exact sampler's inflation included)
    noise_multiplier: tf.Tensor  #: [] the calibration's s
    rank: tf.Tensor  #: [] int32: r
    rtol: tf.Tensor  #: [] the singular-value tolerance that gave r
    bias_bound: tf.Tensor  #: [] largest worst-case projection bias of any released value
    relative_gap: tf.Tensor  #: [] the optimiser's certified relative duality gap
    gap: tf.Tensor  #: [] the optimiser's duality gap
    iterations: tf.Tensor  #: [] int32: Newton steps
    support: tf.Tensor  #: [] int32: training points carrying dual weight
    shift: tf.Tensor  #: [] the whitened query's L2 shift recomputed from ``whitening`` (must be <= 1/(s K))


@check_shapes("C: [k, n]")
def noise_plan(
    C: tf.Tensor,
    *,
    noise_multiplier: Any,
    data_sensitivity: Any,
    output_bound: Any,
    objective: str = "mse",
    rtol: Optional[float] = None,
    tol: float = DEFAULT_TOL,
    max_iter: int = 2000,
    groups: Any = None,
) -> GraphNoisePlan:
    """The :class:`GraphNoisePlan` of a cloaking release of ``C y_c`` at noise multiplier ``s``.

    Graph-safe: call it eagerly or inside a ``tf.function`` (``C`` may have unknown dimensions there);
    nothing leaves the graph. ``noise_multiplier`` comes from
    :func:`dpgp_gpflow.calibration.gaussian_multiplier` (epsilon, delta, calibration), computed on the
    host; ``objective``, ``rtol``, ``tol`` and ``max_iter`` are Python values (they shape the graph; a bad
    ``rtol`` or a ``tol`` not finite and > 0 is refused, as by every release).
    Same rank rule, optimiser and sensitivity as :func:`dpgp_gpflow.mechanisms.cloaking_release` for a
    dense ``C`` (:func:`~dpgp_gpflow.cloaking.singular_pairs`; the eager path may use a randomised SVD on large matrices). A plan
    that cannot be guaranteed (a noise factor too ill-conditioned, a whitened shift too large) raises
    ``tf.errors.InvalidArgumentError`` when it runs.

    Privacy assumption: ``C`` depends only on public data; ``y`` never enters. Per row only: ``groups``
    (person-level privacy) is refused.
    """
    if groups is not None:
        raise NotImplementedError("the compiled engine does not support groups= (person-level privacy) yet; "
                                  "use model.release or model.release_function")
    candidates = candidate_rtols(objective, rtol)  # the objective, then rtol
    tol = validate_tol(tol)
    rtols = tf.constant(candidates, tf.float64)
    f64 = lambda x: tf.convert_to_tensor(x, tf.float64)  # noqa: E731  (never via float32)
    s, d, b = f64(noise_multiplier), f64(data_sensitivity), f64(output_bound)
    C = tf.convert_to_tensor(C, tf.float64)
    singular, left, _ = cloaking.singular_pairs(C, min(candidates))
    tf.debugging.assert_positive(singular[0], "the cloaking matrix is zero: nothing to release privately")
    ranks = tf.reduce_sum(tf.cast(singular[None, :] > rtols[:, None] * singular[0], tf.int32), axis=1)

    def projection(i) -> Tuple[tf.Tensor, tf.Tensor]:  # ||C_j - P_j||_1 and max_i |P_ji| of candidate i
        basis = left[:, :ranks[i]]
        l1, largest = projection_terms(C, basis, tf.linalg.matmul(basis, C, transpose_a=True))
        return l1, largest

    def ratio_and_bias(i) -> Tuple[tf.Tensor, tf.Tensor]:
        l1, largest = projection(i)
        return projection_bias(l1, largest, b, d, rounding)

    l1_0, largest_0 = projection(0)  # candidate 0's terms, formed once: the rounding and the loop's start
    rounding = bias_rounding(l1_0, largest_0, b)

    # the first candidate whose projection is harmless (the rank rule's one loop)
    i, _, bias_bound = first_harmless(ratio_and_bias, tf.shape(rtols)[0], s,
                                      first=projection_bias(l1_0, largest_0, b, d, rounding))
    first = tf.argmax(tf.cast(tf.equal(ranks, ranks[i]), tf.int32), output_type=tf.int32)  # rtol that first gave r
    basis = left[:, :ranks[i]]
    vectors = tf.linalg.matmul(basis, C, transpose_a=True)  # [r, n]: exact sensitivity vectors
    noise = noise_in_space(
        vectors, singular[:ranks[i]], d, tf.constant(float(tol), tf.float64), tf.constant(int(max_iter)),
        tf.constant(int(working_set.DENSE_POINTS)), tf.constant(float(working_set.DUPLICATE_RTOL), tf.float64),
        objective=objective)
    tf.debugging.assert_less_equal(noise.condition, tf.constant(MAX_NOISE_CONDITION, tf.float64),
                                   "the noise covariance is too ill-conditioned to be guaranteed; use a larger rtol")
    delta_, whitening = whitening_terms(noise.solved, noise.sensitivity, s, d, b)
    return GraphNoisePlan(
        noise_factor=tf.linalg.matmul(basis, noise.factor) * (s * delta_),
        whitening=whitening,
        basis=basis,
        sensitivity=delta_,
        noise_multiplier=s,
        rank=ranks[i],
        rtol=rtols[first],
        bias_bound=bias_bound,
        relative_gap=noise.relative_gap,
        gap=noise.gap,
        iterations=noise.iterations,
        support=noise.support,
        shift=whitened_shift(whitening, d, b, s),
    )


def publish(
    plan: GraphNoisePlan,
    y_centred: Any,
    offset: Any,
    variance: Any,
    *,
    epsilon: float,
    delta: float,
    data_sensitivity: float,
    output_bound: float,
    objective: str = "mse",
    calibration: str = "analytic",
    tol: float = DEFAULT_TOL,
    seed: Optional[int] = None,
    accountant: Union[PrivacyAccountant, Reservation, None] = None,
    y_bounds: Optional[tuple] = None,
) -> PrivateRelease:
    """Release ``offset + C y_centred`` with the noise of ``plan`` (eager; the host's part).

    Trusts nothing the plan says about its own privacy: ``data_sensitivity`` (finite, > 0, at most the
    width of ``y_bounds`` when given) and ``output_bound`` are validated before the budget is reserved,
    and :func:`dpgp_gpflow.mechanisms.publish_cloaking` (the same code as every cloaking release) recomputes
    the whitened query's L2 shift from ``plan.whitening`` itself and the declared ``data_sensitivity``,
    and refuses (``FloatingPointError``; nothing drawn, nothing charged) a plan made for a smaller data
    sensitivity or with a modified whitening (``plan.shift`` is never read). A plan made for another
    noise multiplier is refused too (``ValueError``). Then it draws exact noise, re-colours with
    ``plan.noise_factor`` (any public factor: post-processing) and charges.

    Privacy assumptions: those of :func:`noise_plan`; ``y_centred`` centred as in
    :func:`~dpgp_gpflow.mechanisms.cloaking_release` (it is clipped here to ``|y_c,i| <= output_bound``, the
    bound the plan's shift assumes), and one entry moves by at most ``data_sensitivity`` between neighbours.
    """
    request = release_request(epsilon, delta, calibration=calibration, objective=objective, seed=seed, tol=tol)
    validate_public_bounds(data_sensitivity, output_bound, y_bounds)  # before anything is reserved
    epsilon, delta, multiplier = request.epsilon, request.delta, request.multiplier
    with reserve(accountant, [request.event()]) as reservation:
        if float(plan.noise_multiplier) != multiplier:
            raise ValueError(f"this plan was made for noise multiplier {float(plan.noise_multiplier)!r}, but "
                             f"(epsilon={epsilon}, delta={delta}, {calibration}) needs {multiplier!r}")
        certificate = cloaking.certificate_of(objective, plan.gap, plan.relative_gap, tol, plan.iterations, plan.support)
        # clipped to the declared bound the plan's shift assumes (what every model's release does first):
        # a caller's unclipped outputs are never trusted, and nothing about them is said
        y_centred = tf.clip_by_value(tf.reshape(tf.convert_to_tensor(y_centred, dtype=tf.float64), [-1]),
                                     -float(output_bound), float(output_bound))
        whitening = tf.convert_to_tensor(plan.whitening, tf.float64)
        if whitening.shape.rank != 2 or int(whitening.shape[1]) != int(y_centred.shape[0]):
            raise ValueError(f"the plan has {int(whitening.shape[-1])} columns but there are "
                             f"{int(y_centred.shape[0])} outputs")
        if int(plan.rank) != int(whitening.shape[0]):
            raise ValueError(f"the plan's rank {int(plan.rank)} does not match its whitening matrix {whitening.shape}")
        return publish_cloaking(
            noise_factor=tf.convert_to_tensor(plan.noise_factor, tf.float64), whitening=whitening,
            y_centred=y_centred, offset=offset, variance=variance, sensitivity=float(plan.sensitivity),
            multiplier=multiplier, output_bound=output_bound, reservation=reservation, seed=request.seed,
            epsilon=epsilon, delta=delta, data_sensitivity=data_sensitivity, calibration=request.calibration,
            objective=objective, certificate=certificate, rank=int(plan.rank), rtol=float(plan.rtol),
            bias_bound=float(plan.bias_bound), y_bounds=y_bounds)
