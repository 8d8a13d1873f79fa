"""The compiled release engine: a cloaking release's whole noise plan as one TensorFlow graph.

:func:`noise_plan` computes, from the public cloaking matrix ``C`` alone, everything a cloaking
release needs except the private outputs and the random draw: the column space and the rank rule,
the optimised noise covariance with its certificate, the Mahalanobis sensitivity (with the exact
sampler's inflation) and the whitening matrix. It is pure TensorFlow, so a training script can call
it inside its own ``tf.function``, on any device. :func:`publish` then does the host's part, the
only part that touches the private outputs: reserve the budget, whiten the query, draw exact noise
from the OS CSPRNG (:mod:`dpgp_gpflow.sampling`), re-colour, charge the accountant.

The sequence is the one every cloaking release runs (:func:`dpgp_gpflow.mechanisms.cloaking.plan_cloaking`:
rank rule, optimiser, sensitivity, whitening), here over a traced provider of ``C``'s column operations
(:class:`_TracedColumns`), so the whole plan is one graph, the rank rule's loop
(:func:`~dpgp_gpflow.noise_planning.first_harmless`) traced into it; the eager release runs it over
:class:`~dpgp_gpflow.mechanisms.NoisePlan` (compiled stages), the streamed one over chunks.

Privacy assumption: ``C`` (and so the plan) is a function of public inputs and hyperparameters only;
the plan never sees ``y``. docs/guides/compiled_engine.md has the details and a Keras example.
"""

from __future__ import annotations

import math
import types
from typing import Any, NamedTuple, Optional, Tuple, Union

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from . import noise_planning
from .accounting import PrivacyAccountant, Reservation
from .noise_planning import DEFAULT_TOL, candidate_rtols, mahalanobis_terms, projection_terms, working_set
from .noise_planning.rank import bias_rounding, projection_bias
from .measurement import Measurement, measure
from .mechanisms.request import validate_tol
from .mechanisms.rounding import MAX_NOISE_CONDITION
from .mechanisms.cloaking import plan_cloaking
from .mechanisms import (
    noise_in_space,
    publish_cloaking,
    release_request,
    validate_public_bounds,
    whitened_shift,
    whitening_terms,
)
from .neighbours import Neighbours, group_neighbours, neighbour_columns, sensitivity_path
from .released import PrivateRelease
from .validation import check_count

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
    #: [] int32: N_c, the extreme changes the plan protects (the neighbour map's columns; n per row)
    neighbour_count: tf.Tensor


def _neighbours(groups: Any, n: Optional[int]) -> Optional[Neighbours]:
    """The public neighbour map of ``groups`` (host ids, [n]) for ``n`` columns (None: ``groups``' own length,
    checked against the graph's ``C`` when it runs); None per row. Built once, on the host."""
    if groups is None:
        return None
    if tf.is_tensor(groups):
        value = tf.get_static_value(groups)
        if value is None:
            raise TypeError("groups must be public person ids known when the graph is built (a NumPy array or "
                            "an eager tensor), not a symbolic tensor")
        groups = value
    return group_neighbours(groups, np.shape(groups)[0] if n is None else n)


# explicit tf.while_loop / tf.cond throughout: nothing for autograph to convert, and converting it in a user's
# tf.function (autograph on by default) made tracing about three times slower
@tf.autograph.experimental.do_not_convert
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
    dense ``C`` (:func:`~dpgp_gpflow.noise_planning.singular_pairs`; the eager path may use a randomised SVD on
    large matrices). A plan that cannot be guaranteed (a noise factor too ill-conditioned, a whitened shift
    too large) raises ``tf.errors.InvalidArgumentError`` when it runs.

    ``groups`` (public person ids [n] for the columns of ``C``, a host array; None: one row per person):
    the release protects persons (docs/guides/groups.md). The neighbour map ``A``
    (:func:`~dpgp_gpflow.neighbours.group_neighbours`) is built once on the host, a constant in the graph,
    and the plan is the eager path's (:class:`~dpgp_gpflow.mechanisms.NoisePlan` with ``neighbours=A``): the
    optimiser's constraints, the sensitivity, the rank rule's noise floor and the whitened shift are over
    the columns of ``C A``; the whitening still acts on the outputs themselves. Publish it with the same
    ``groups`` (:func:`publish` rechecks them).

    Privacy assumption: ``C`` and ``groups`` depend only on public data; ``y`` never enters.
    """
    candidates = candidate_rtols(objective, rtol)  # the objective, then rtol
    tol = validate_tol(tol)
    rtols = tf.constant(candidates, tf.float64)
    f64 = lambda x: tf.convert_to_tensor(x, tf.float64)  # noqa: E731  (never via float32)
    s, d, b = f64(noise_multiplier), f64(data_sensitivity), f64(output_bound)
    C = tf.convert_to_tensor(C, tf.float64)
    neighbours = _neighbours(groups, C.shape[1])
    if neighbours is not None:  # the map is a constant of n rows: C's columns are checked when the graph runs
        C = tf.ensure_shape(C, [None, neighbours.size])
    singular, left, _ = noise_planning.singular_pairs(C, min(candidates))
    tf.debugging.assert_positive(singular[0], "the cloaking matrix is zero: nothing to release privately")
    ranks = tf.reduce_sum(tf.cast(singular[None, :] > rtols[:, None] * singular[0], tf.int32), axis=1)
    columns = _TracedColumns(C, singular, left, ranks, rtols, neighbours, d, b, objective, tol,
                             check_count("max_iter", max_iter))
    planned = plan_cloaking(columns, s, d, b, first=columns.first)  # the one sequence, traced
    chosen = planned.chosen
    i, noise = chosen.index, chosen.noise
    first = tf.argmax(tf.cast(tf.equal(ranks, ranks[i]), tf.int32), output_type=tf.int32)  # rtol that first gave r
    whitening = planned.whitening
    return GraphNoisePlan(
        noise_factor=planned.noise_factor,
        whitening=whitening,
        basis=chosen.space.basis,
        sensitivity=planned.sensitivity,
        noise_multiplier=s,
        rank=ranks[i],
        rtol=rtols[first],
        bias_bound=chosen.bias_bound,
        relative_gap=noise.relative_gap,
        gap=noise.gap,
        iterations=noise.iterations,
        support=noise.support,
        shift=whitened_shift(whitening, d, b, s, neighbours),
        neighbour_count=tf.shape(C)[1] if neighbours is None else tf.constant(neighbours.count, tf.int32),
    )


class _TracedColumns:
    """The traced provider of the one cloaking sequence (:func:`~dpgp_gpflow.mechanisms.cloaking.plan_cloaking`):
    the column operations of ``C`` [k, n] as graph ops, the candidate spaces the leading ``ranks[i]`` left
    singular vectors ``left`` of one factorisation; with ``neighbours`` (persons) the optimiser's constraints,
    the sensitivity, the noise floor and the whitened shift are over the columns of ``C A``, the whitening acts
    on the outputs themselves (as :class:`~dpgp_gpflow.mechanisms.NoisePlan`'s). A noise that cannot be
    guaranteed fails the graph's assertion (``tf.errors.InvalidArgumentError``). Public: ``C`` only."""

    def __init__(self, C, singular, left, ranks, rtols, neighbours, d, b, objective, tol, max_iter) -> None:
        self.C, self.singular, self.left, self.ranks, self.neighbours = C, singular, left, ranks, neighbours
        self.d, self.b, self.objective, self.tol, self.max_iter = d, b, objective, tol, max_iter
        self.candidate_count = tf.shape(rtols)[0]
        l1_0, largest_0 = self._projection(0)  # candidate 0's terms, formed once: the rounding and the loop's start
        self.rounding = bias_rounding(l1_0, largest_0, b)
        self.first = projection_bias(l1_0, largest_0, b, d, self.rounding)

    def _vectors(self, i):
        basis = self.left[:, :self.ranks[i]]
        return basis, tf.linalg.matmul(basis, self.C, transpose_a=True)  # [r, n]: exact sensitivity vectors

    def _projection(self, i) -> Tuple[tf.Tensor, tf.Tensor]:  # ||C_j - P_j||_1 and max_i |P_ji| of candidate i
        basis, vectors = self._vectors(i)
        return projection_terms(self.C, basis, vectors,
                                None if self.neighbours is None else neighbour_columns(vectors, self.neighbours))

    def ratio_and_bias(self, i) -> Tuple[tf.Tensor, tf.Tensor]:
        return projection_bias(*self._projection(i), self.b, self.d, self.rounding)

    def noise(self, i):
        basis, vectors = self._vectors(i)
        noise = noise_in_space(  # the constraints: the columns of vectors A (vectors itself per row)
            neighbour_columns(vectors, self.neighbours), self.singular[:self.ranks[i]], self.d,
            tf.constant(float(self.tol), tf.float64), tf.constant(self.max_iter),
            tf.constant(int(working_set.DENSE_POINTS)), tf.constant(float(working_set.DUPLICATE_RTOL), tf.float64),
            objective=self.objective)
        tf.debugging.assert_less_equal(
            noise.condition, tf.constant(MAX_NOISE_CONDITION, tf.float64),
            "the noise covariance is too ill-conditioned to be guaranteed; use a larger rtol")
        if self.neighbours is not None:  # the whitening acts on the outputs themselves: F^{-1} basis^T C
            noise = noise._replace(solved=tf.ensure_shape(mahalanobis_terms(noise.factor, vectors)[0],
                                                          [None, self.neighbours.size]))
        return types.SimpleNamespace(basis=basis), noise

    def whiten(self, space, noise, multiplier, data_sensitivity, output_bound):
        return whitening_terms(noise.solved, noise.sensitivity, multiplier, data_sensitivity, output_bound,
                               self.neighbours)


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
    groups: Any = None,
) -> PrivateRelease:
    """Release ``offset + C y_centred`` with the noise of ``plan`` (eager; the host's part).

    Trusts nothing the plan says about its own privacy: ``data_sensitivity`` (finite, > 0, at most the
    width of ``y_bounds`` when given) and ``output_bound`` are validated before the budget is reserved,
    and :func:`dpgp_gpflow.mechanisms.publish_cloaking` (the same code as every cloaking release) recomputes
    the whitened query's L2 shift from ``plan.whitening`` itself and the declared ``data_sensitivity``,
    and refuses (``FloatingPointError``; nothing drawn, nothing charged) a plan made for a smaller data
    sensitivity or with a modified whitening (``plan.shift`` is never read); the sensitivity it records is
    recomputed from ``plan.whitening`` (:func:`whitened_sensitivity`; ``plan.sensitivity`` is never read). A plan made for another
    noise multiplier is refused too (``ValueError``). ``groups`` (public person ids [n], as given to
    :func:`noise_plan`; None: one row per person) are the persons the release protects and records: their
    neighbour map is built here and the shift is recomputed over every extreme change of one of *these*
    persons, whatever the plan was made for (too large: ``FloatingPointError``); the release records the relation
    as a model's release does (``"row"`` without ``groups``). A plan whose number of
    extreme changes (``plan.neighbour_count``) is not theirs (a per-row plan published with groups, a grouped
    plan without them or with others) is refused first (``ValueError``), before anything is reserved, so a
    forgotten ``groups`` never silently turns a grouped plan into a per-row release. Then it draws exact noise, re-colours with
    ``plan.noise_factor`` (any public factor: post-processing) and charges.

    Privacy assumptions: those of :func:`noise_plan`; ``y_centred`` centred as in
    :func:`~dpgp_gpflow.mechanisms.cloaking_release` (it is clipped here to ``|y_c,i| <= output_bound``, the
    bound the plan's shift assumes), and one entry (with ``groups``: each entry of one person) moves by at
    most ``data_sensitivity`` between neighbours; ``groups`` is public.
    """
    request = release_request(epsilon, delta, calibration=calibration, objective=objective, seed=seed, tol=tol)
    validate_public_bounds(data_sensitivity, output_bound, y_bounds)  # before anything is reserved
    n = int(tf.convert_to_tensor(plan.whitening).shape[-1])
    neighbours = _neighbours(groups, n)
    count = n if neighbours is None else neighbours.count
    if int(plan.neighbour_count) != count:
        raise ValueError(f"this plan protects {int(plan.neighbour_count)} extreme changes but the groups given to "
                         f"publish have {count}: publish with the groups= the plan was made with")
    epsilon, delta, multiplier = request.epsilon, request.delta, request.multiplier
    path = sensitivity_path(types.SimpleNamespace(groups=groups))  # the persons of groups, as a model's releases

    def draw(reservation: Reservation) -> PrivateRelease:  # publish_cloaking commits the one event after its draw
        if float(plan.noise_multiplier) != multiplier:
            raise ValueError(f"this plan was made for noise multiplier {float(plan.noise_multiplier)!r}, but "
                             f"(epsilon={epsilon}, delta={delta}, {calibration}) needs {multiplier!r}")
        certificate = noise_planning.certificate_of(objective, plan.gap, plan.relative_gap, tol, plan.iterations, plan.support)
        # clipped to the declared bound the plan's shift assumes (what every model's release does first):
        # a caller's unclipped outputs are never trusted, and nothing about them is said
        clipped = tf.clip_by_value(tf.reshape(tf.convert_to_tensor(y_centred, dtype=tf.float64), [-1]),
                                   -float(output_bound), float(output_bound))
        whitening = tf.convert_to_tensor(plan.whitening, tf.float64)
        if whitening.shape.rank != 2 or int(whitening.shape[1]) != int(clipped.shape[0]):
            raise ValueError(f"the plan has {int(whitening.shape[-1])} columns but there are "
                             f"{int(clipped.shape[0])} outputs")
        if int(plan.rank) != int(whitening.shape[0]):
            raise ValueError(f"the plan's rank {int(plan.rank)} does not match its whitening matrix {whitening.shape}")
        release = publish_cloaking(
            noise_factor=tf.convert_to_tensor(plan.noise_factor, tf.float64), whitening=whitening,
            y_centred=clipped, offset=offset, variance=variance,
            sensitivity=whitened_sensitivity(whitening, multiplier, neighbours),  # recomputed: plan.sensitivity unread
            multiplier=multiplier, output_bound=output_bound, reservation=reservation, seed=request.seed,
            epsilon=epsilon, delta=delta, data_sensitivity=data_sensitivity, calibration=request.calibration,
            objective=objective, certificate=certificate, rank=int(plan.rank), rtol=float(plan.rtol),
            bias_bound=float(plan.bias_bound), y_bounds=y_bounds, neighbours=neighbours)
        return release  # recording the measurement's relation ("row" per row)

    return measure(Measurement(request, path.relation(), draw, path=path), accountant)


def whitened_sensitivity(whitening: Any, multiplier: float, neighbours: Optional[Neighbours] = None) -> float:
    """The Mahalanobis sensitivity ``Delta`` a published whitening matrix ``W`` [r, n] implies, recomputed from
    ``W`` itself (never read from a plan): ``W = F^{-1} V / (s Delta)`` with the noise factor ``F`` scaled so
    that its worst extreme change has unit Mahalanobis norm (the optimiser's convention: the eager release's
    sensitivity, to rounding), so ``Delta = 1 / (s max_j ||W a_j||)`` over the neighbour map's columns ``a_j``
    (``W``'s own without ``neighbours``). At least ``d K`` whenever the whitened shift passed its check."""
    largest = float(tf.reduce_max(tf.norm(neighbour_columns(tf.convert_to_tensor(whitening, tf.float64), neighbours),
                                          axis=0)))
    if not (math.isfinite(largest) and largest > 0.0):
        raise ValueError(f"the whitening matrix's largest column norm is {largest}: not a plan of any release")
    return 1.0 / (float(multiplier) * largest)
