"""The rank rule: how many directions of ``C``'s column space a cloaking release noises (docs/mechanisms.md#rank-rule).

Candidate tolerances (:func:`candidate_rtols`) give nested column spaces, narrowest first. The
first whose projection is harmless is chosen: for every prediction j, the exact worst-case bias of
projecting, ``b ||C_j - P_j||_1``, is at most :data:`BIAS_FRACTION` of ``s d max_i |P_ji|``, a lower
bound on the noise std of prediction j in any release of the projection ``P``. No optimisation is
needed to choose. :func:`first_harmless` is the rule's loop, written once for the eager, compiled
and streamed releases. Privacy assumption: ``C`` and the output bounds are public.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import numpy as np
import tensorflow as tf

from ..validation import check_real, validate_objective

#: Candidate relative singular-value tolerances tried (in order) when ``rtol`` is chosen automatically.
AUTO_RTOLS = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10)
#: Smallest rtol for the "mse" objective: its dual works with S in output coordinates, whose
#: condition number grows like rtol^-2; below this float64 eigen-decompositions lose the small directions.
MIN_MSE_RTOL = 1e-7
#: Automatic rank choice: every prediction's worst-case projection bias must be below this fraction
#: of the smallest noise std any release of its projected value could have.
BIAS_FRACTION = 0.01
#: Projection bias below this fraction of the largest ``b (||C_j - P_j||_1 + max_i |P_ji|)`` of the
#: widest candidate is float64 rounding of ``C`` and counts as none.
BIAS_ROUNDING = 1e-12


def bias_rounding(l1, largest, output_bound) -> tf.Tensor:
    """The bias that counts as none (:data:`BIAS_ROUNDING`), from the widest candidate's
    :func:`~dpgp_gpflow.noise_planning.projection_rows` terms ``l1`` and ``largest`` ([k] each). Graph-safe."""
    return BIAS_ROUNDING * tf.reduce_max(output_bound * (l1 + largest))


def projection_bias(l1, largest, output_bound, data_sensitivity, rounding):
    """The rank rule's terms for one candidate space, from its ``l1 = ||C_j - P_j||_1`` and
    ``largest = max_i |P_ji|`` ([k] each): the largest ratio of a prediction's worst-case projection
    bias ``b l1_j`` to the noise-std floor ``d largest_j`` of its projected value (bias within
    ``rounding`` counts as none), and the largest worst-case bias. Graph-safe; the rule is
    :func:`projection_is_harmless`. Public: ``C`` and the bounds only."""
    l1, largest = (tf.convert_to_tensor(x, tf.float64) for x in (l1, largest))
    bias = output_bound * l1
    floor = data_sensitivity * largest
    safe = tf.where(floor > 0.0, floor, tf.ones_like(floor))
    unbounded = tf.fill(tf.shape(bias), tf.constant(np.inf, tf.float64))  # a bias where no noise can be
    ratio = tf.where(bias > rounding, tf.where(floor > 0.0, bias / safe, unbounded), tf.zeros_like(bias))
    return tf.reduce_max(ratio), tf.reduce_max(bias)


def projection_is_harmless(ratio, noise_multiplier):
    """The rank rule: a candidate's projection is harmless when no prediction's worst-case bias exceeds
    :data:`BIAS_FRACTION` of the least noise std its projected value could carry (``ratio`` from
    :func:`projection_bias`, noise multiplier ``s``). Graph-safe."""
    return ratio <= BIAS_FRACTION * noise_multiplier


def validate_rtol(rtol: object) -> float:
    """A relative singular-value tolerance: a real number in [0, 1) (``TypeError`` / ``ValueError``)."""
    rtol = check_real("rtol", rtol)
    if not 0.0 <= rtol < 1.0:
        raise ValueError(f"rtol must be in [0, 1), got {rtol}")
    return rtol


def candidate_rtols(objective: str, rtol: Optional[float]) -> Tuple[float, ...]:
    """The singular-value tolerances a cloaking release tries, in order (one if ``rtol`` is given, checked
    by :func:`validate_rtol` and, for ``"mse"``, at least :data:`MIN_MSE_RTOL`)."""
    validate_objective(objective)
    if rtol is None:
        return tuple(t for t in AUTO_RTOLS if objective == "entropy" or t >= MIN_MSE_RTOL)
    rtol = validate_rtol(rtol)
    if objective == "mse" and rtol < MIN_MSE_RTOL:
        raise ValueError(
            f"rtol={rtol} is below {MIN_MSE_RTOL} for objective='mse' (its optimiser cannot resolve "
            "directions that small in float64); use a larger rtol or objective='entropy'"
        )
    return (float(rtol),)


def first_harmless(ratio_and_bias: Callable[[tf.Tensor], Tuple[tf.Tensor, tf.Tensor]], count,
                   noise_multiplier, first: Optional[Tuple[tf.Tensor, tf.Tensor]] = None
                   ) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """The rank rule's loop: the first of ``count`` candidates (narrowest first) whose projection is
    harmless at ``noise_multiplier`` (:func:`projection_is_harmless`), else the widest; with its ratio
    and largest worst-case bias. ``ratio_and_bias(i)`` gives candidate ``i``'s :func:`projection_bias`
    (each is asked for at most once; ``first``: candidate 0's, when the caller already has it). A
    ``tf.while_loop``: traced into the compiled engine's graph, a Python loop when called eagerly."""
    last = tf.convert_to_tensor(count, tf.int32) - 1
    return tf.while_loop(
        lambda i, ratio, _: (i < last) & ~projection_is_harmless(ratio, noise_multiplier),
        lambda i, ratio, _: (i + 1, *ratio_and_bias(i + 1)),
        (tf.constant(0), *(ratio_and_bias(tf.constant(0)) if first is None else first)))
