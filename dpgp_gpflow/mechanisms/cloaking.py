"""The cloaking mechanism (AISTATS 2018; docs/mechanisms.md#cloaking): noise ``N(0, F F^T)`` shaped by
the optimised covariance, the mean projected onto the ``r`` directions that receive noise.

A release publishes ``v~ = offset + C (y - m) + noise`` where ``C`` (k x n) is public (a function of
public inputs and hyperparameters), ``y - m`` are the clipped, publicly centred private outputs and
``offset`` is public. :func:`plan_cloaking` is the one sequence of every cloaking release's noise (rank
rule, optimiser, sensitivity from the factor used, whitening, noise factor; :mod:`dpgp_gpflow.noise_planning`:
public, no draw), run over a provider of the column operations (:class:`ReleaseColumns`): :class:`NoisePlan`
(``C`` in memory), the compiled engine's traced one (:mod:`dpgp_gpflow.engine`) or the streamed release's
chunked one (:class:`~dpgp_gpflow.streaming.release.ChunkedRelease`); :func:`cloak` releases for a validated
request (:mod:`.request`) into the caller's reservation; :func:`cloaking_release` is the public wrapper that
validates and runs it through :func:`~dpgp_gpflow.measurement.measure` (one reservation).

Exact noise (``sampler="exact"``, the default; docs/exact_sampling.md): the release computes the
whitened query ``z = F^{-1} (V y) / (s Delta)`` (:func:`whitening_terms`), whose L2 sensitivity is at
most ``1/s`` once ``Delta`` is inflated for the floating-point error of the query and the grid
rounding (:func:`whitened_sensitivity_of_norms`); :func:`publish_cloaking` recomputes that shift from ``W``
itself (:func:`shift_of_norms`; ``W`` held whole, :class:`DenseQuery`, or by chunks,
:class:`~dpgp_gpflow.streaming.solver.StreamedQuery`) and refuses a mismatch;
:func:`draw_and_spend` adds exact discrete-Gaussian noise on a grid
(:func:`dpgp_gpflow.sampling.standard_normal`, :func:`dpgp_gpflow.sampling.grid_sum`), re-colours
(``s Delta F (z + xi)``, post-processing) and charges: the one draw of every exact cloaking release,
in memory, compiled (:mod:`dpgp_gpflow.engine`) or streamed. ``sampler="float"`` is the earlier
floating-point draw ``V y + s Delta F xi`` (warns :class:`~dpgp_gpflow.PrivacyLeakWarning`).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, NamedTuple, Optional, Protocol, Tuple, Union

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from .. import sampling
from ..accounting import PrivacyAccountant, Reservation
from ..noise_planning import (
    DEFAULT_TOL,
    ColumnSpace,
    certificate_of,
    column_spaces,
    compile_per_objective,
    first_harmless,
    mahalanobis_terms,
    optimise_tensors,
    projection_rows,
    row_norms,
    working_set,
)
from ..noise_planning.dual import COUNT_SPEC, MATRIX_SPEC, REAL_SPEC, VECTOR_SPEC
from ..noise_planning.rank import bias_rounding, candidate_rtols, projection_bias
from ..measurement import Measurement, SensitivityPath, check_covered, measure
from ..neighbours import Neighbours, neighbour_columns, path_of
from ..released import PrivateRelease
from ..sampling import (
    DISCRETE_GAUSSIAN_FACTOR,
    GRID_EXPONENT,
    MAX_GRID_LOSS,
    grid_factor_of_loss,
    grid_loss,
)
from ..validation import check_count, check_real
from .request import ReleaseRequest, gaussian_event, release_request, validate_public_bounds
from .rounding import SENSITIVITY_SAFETY, check_noise_condition, condition_number, safe_sensitivity

__all__ = ["NoisePlan", "cloaking_release"]  # publish_cloaking: internal (commits into its caller's reservation)


#: Relative inflation of the exact sampler's sensitivity (noise std 9e-10 larger) so that the shift
#: recomputed from the rescaled whitening matrix, with its own rounding, stays within the bound.
WHITENING_SLACK = 1.0 + 2.0**-30
#: Relative rounding allowed when the float sampler's sensitivity is checked against the shift recomputed from
#: its projection (a solve with ``F``: a relative error of order r ulp times F's condition number).
FLOAT_SENSITIVITY_RTOL = 1e-9


class _Noise(NamedTuple):
    """An optimised noise factor in a column space's basis coordinates, and what it implies."""

    factor: tf.Tensor  #: [r, r] in basis coordinates (unit multiplier)
    sensitivity: float  #: Mahalanobis sensitivity against ``factor`` (with the safety factors)
    certificate: Any  #: the optimiser's certificate
    solved: tf.Tensor  #: [r, n] ``factor^{-1} vectors``: the whitened columns of ``basis^T C`` (not of ``C A``)


class NoiseTerms(NamedTuple):
    """The compiled noise stage's outputs (tensors, :func:`noise_in_space`)."""

    factor: tf.Tensor  #: [r, r] the noise factor in basis coordinates (unit multiplier)
    sensitivity: tf.Tensor  #: [] its Mahalanobis sensitivity (with the safety factors)
    condition: tf.Tensor  #: [] its condition number
    gap: tf.Tensor  #: [] the optimiser's duality gap
    relative_gap: tf.Tensor  #: []
    iterations: tf.Tensor  #: [] int32
    support: tf.Tensor  #: [] int32
    solved: tf.Tensor  #: [r, n] ``factor^{-1} vectors``: the whitened sensitivity vectors


@check_shapes("singular_values: [r]", "return: [r]")
def optimiser_scale(singular_values, objective: str):
    """The coordinates the noise optimiser works in: the basis coordinates times this scale. Entropy:
    whitened coordinates (invariant objective, best conditioned); mse: the trace must be taken in the
    output coordinates, so only rescaled by ``s_1``. Graph-safe; public."""
    s = tf.convert_to_tensor(singular_values, tf.float64)
    return (1.0 / s) if objective == "entropy" else tf.fill(tf.shape(s), 1.0 / s[0])


def factor_in_basis(factor, scale):
    """The optimiser's noise factor (in its coordinates: the basis coordinates times ``scale``,
    :func:`optimiser_scale`) in basis coordinates, and its condition number: the one conversion of every
    provider (dense, traced, chunked). Graph-safe; public."""
    unscaled = tf.convert_to_tensor(factor, tf.float64) / tf.convert_to_tensor(scale, tf.float64)[:, None]
    return unscaled, condition_number(unscaled)


def checked_noise(condition: Any, sensitivity: Any) -> float:
    """The host's refusal of a noise that cannot be guaranteed (``FloatingPointError``), for the dense and
    chunked providers: a condition number over the limit (:func:`check_noise_condition`) or a sensitivity
    that is not finite. Returns the sensitivity (a float)."""
    check_noise_condition(float(condition))
    sensitivity = float(sensitivity)
    if not math.isfinite(sensitivity):
        raise FloatingPointError("the sensitivity is not finite: the noise covariance is singular, or the data "
                                 "sensitivity times its Mahalanobis norm overflows float64")
    return sensitivity


@check_shapes("vectors: [r, n]", "singular_values: [r]")
def noise_in_space(vectors, singular_values, data_sensitivity, tol, max_iter, dense_points, duplicate_rtol,
                         objective):
    """The :class:`NoiseTerms` of ``vectors``: the optimised noise factor in basis coordinates (r x r), its
    Mahalanobis sensitivity (with the safety factors), its condition number, the optimiser's certificate
    terms and the whitened vectors ``factor^{-1} vectors`` (r x n, one solve for the sensitivity and the
    whitening); pure TensorFlow."""
    scale = optimiser_scale(singular_values, objective)  # [r]
    scaled = vectors * scale[:, None]  # [r, n]
    solve = optimise_tensors(scaled, tf.zeros_like(scaled[0]), tol, max_iter, dense_points, duplicate_rtol, objective)
    factor = solve.eigenvectors * solve.scales[None, :]
    unscaled, condition = factor_in_basis(factor, scale)
    # The sensitivity of the released r-vector against the factor actually used (scaled coordinates:
    # ||F^{-1} diag(scale) beta_i|| == ||(diag(1/scale) F)^{-1} beta_i||, so nothing is lost).
    solved, norm2 = mahalanobis_terms(factor, scaled)
    sensitivity = safe_sensitivity(data_sensitivity, norm2, condition)
    return NoiseTerms(unscaled, sensitivity, condition, solve.gap, solve.relative_gap,
                      solve.iterations, solve.support, solved)


#: The compiled noise stage of a release, one per objective (stable signatures: any r and n).
NOISE_SOLVERS = compile_per_objective(noise_in_space, [MATRIX_SPEC, VECTOR_SPEC, REAL_SPEC, REAL_SPEC, COUNT_SPEC,
                                                       COUNT_SPEC, REAL_SPEC])


def _cloaking_noise(space: ColumnSpace, objective: str, d: float, tol: float, max_iter: int,
                    neighbours: Optional[Neighbours] = None) -> _Noise:
    """Optimised noise factor in ``space.basis`` coordinates (r x r) and the sensitivity it implies
    (one compiled call); refuses a factor whose rounding could leak (``FloatingPointError``). With
    ``neighbours`` (persons, :mod:`dpgp_gpflow.neighbours`) the optimiser's constraints and the
    sensitivity are over the columns of ``basis^T C A``; ``solved`` stays ``F^{-1} basis^T C`` (what the
    exact sampler whitens the actual outputs with)."""
    vectors = neighbour_columns(space.vectors, neighbours)  # [r, N_c]: the sensitivity vectors
    terms = NOISE_SOLVERS[objective](
        vectors, space.singular_values, tf.constant(float(d), tf.float64), tf.constant(float(tol), tf.float64),
        tf.constant(int(max_iter), tf.int32), tf.constant(int(working_set.DENSE_POINTS), tf.int32),
        tf.constant(float(working_set.DUPLICATE_RTOL), tf.float64))
    factor, solved = terms.factor, terms.solved
    sensitivity = checked_noise(terms.condition, terms.sensitivity)
    if neighbours is not None:  # the whitening acts on the actual outputs: F^{-1} basis^T C
        solved = mahalanobis_terms(factor, space.vectors)[0]
    certificate = certificate_of(objective, terms.gap, terms.relative_gap, tol, terms.iterations, terms.support)
    return _Noise(factor, sensitivity, certificate, solved)


def _unit_noise_factor(space: ColumnSpace, noise: _Noise) -> tf.Tensor:
    """The release's noise factor (k x r) at unit multiplier: ``basis F`` times the sensitivity."""
    return tf.linalg.matmul(space.basis, noise.factor) * noise.sensitivity


def shift_bound_of_norms(largest, total, n, data_sensitivity, output_bound):
    """``d max_i ||w_i|| + 2 gamma_n b sum_i ||w_i||`` (with the safety factor) from a public ``W``'s column
    norms (``largest = max_i ||w_i||``, ``total = sum_i ||w_i||``, ``n`` columns): the L2 shift of ``W y``
    between neighbours, computed in float64 in any summation order. Plain arithmetic: tensors (in a graph)
    or floats."""
    gamma_n = n * sampling.UNIT_ROUNDOFF / (1.0 - n * sampling.UNIT_ROUNDOFF)
    return SENSITIVITY_SAFETY * (data_sensitivity * largest + 2.0 * gamma_n * output_bound * total)


def _whitened_norms(W, neighbours: Optional[Neighbours] = None):
    """The column norms a shift bound reads from a public ``W`` [r, n] held whole: ``max_i ||w_i||`` (with
    ``neighbours``, persons: ``max_j ||W A_j||`` over the neighbour map's columns) and ``sum_i ||w_i||``
    over the columns of ``W`` itself (the rounding of ``W y``, computed with ``W``)."""
    norms = tf.norm(W, axis=0)  # [n]
    largest = tf.reduce_max(norms) if neighbours is None else \
        tf.reduce_max(tf.norm(neighbour_columns(W, neighbours), axis=0))
    return largest, tf.reduce_sum(norms)


def whitened_shift(whitening, data_sensitivity, output_bound, multiplier, neighbours: Optional[Neighbours] = None):
    """The whitened query's L2 shift ``mu`` recomputed from the whitening matrix ``W`` [r, n] itself (already
    divided by ``s Delta``): :func:`shift_bound_of_norms` plus the grid rounding ``sqrt(r) 2^GRID_EXPONENT``; infinite
    when the grid's loss at ``multiplier`` exceeds ``MAX_GRID_LOSS``. The one formula every exact cloaking
    release is checked with (:func:`check_whitened_shift`: ``mu K <= 1/s``); ``neighbours``: the persons'
    neighbour map (None: one row per person). Graph-safe; public."""
    W = tf.convert_to_tensor(whitening, tf.float64)
    d, b, s = (tf.convert_to_tensor(x, tf.float64) for x in (data_sensitivity, output_bound, multiplier))
    largest, total = _whitened_norms(W, neighbours)
    return shift_of_norms(largest, total, tf.shape(W)[1], tf.shape(W)[0], d, b, s)


def shift_of_norms(largest, total, n, rank, data_sensitivity, output_bound, multiplier):
    """:func:`whitened_shift` from the whitening matrix's column norms (``largest = max_j ||W a_j||`` over
    the neighbour map's columns, ``total = sum_i ||w_i||``, ``n`` columns, ``rank`` rows): the one formula
    of the whitened query's L2 shift, for a ``W`` held whole or recomputed chunk by chunk
    (:class:`~dpgp_gpflow.streaming.solver.StreamedQuery`). Graph-safe (tensors or floats); public."""
    d, b, s, largest, total = (tf.convert_to_tensor(x, tf.float64)
                               for x in (data_sensitivity, output_bound, multiplier, largest, total))
    r = tf.cast(rank, tf.float64)
    mu = shift_bound_of_norms(largest, total, tf.cast(n, tf.float64), d, b) + tf.sqrt(r) * 2.0**GRID_EXPONENT
    return tf.where(grid_loss(s, tf.sqrt(r)) <= MAX_GRID_LOSS, mu, tf.constant(np.inf, tf.float64))


def whitened_sensitivity_of_norms(sensitivity, largest, total, n, rank, data_sensitivity, output_bound, multiplier):
    """The exact sampler's sensitivity ``Delta`` (:func:`whitening_terms`) from the column norms of
    ``F^{-1} V`` (as :func:`shift_of_norms` takes them): the cloaking ``sensitivity`` or, if larger, the
    shift bound of ``F^{-1} V y``, inflated by the grid factor and ``WHITENING_SLACK``. The one formula for
    a ``W`` held whole or by chunks. Graph-safe; public."""
    d, b, s, largest, total, sensitivity = (tf.convert_to_tensor(x, tf.float64) for x in (
        data_sensitivity, output_bound, multiplier, largest, total, sensitivity))
    loss = grid_loss(s, tf.sqrt(tf.cast(rank, tf.float64)))
    # WHITENING_SLACK covers the rounding of recomputing the bound from the rescaled W (norms of
    # r entries: a relative error of order r ulp), which would otherwise refuse some valid releases.
    return tf.maximum(sensitivity, shift_bound_of_norms(largest, total, tf.cast(n, tf.float64), d, b)) \
        * grid_factor_of_loss(loss) \
        * WHITENING_SLACK


@check_shapes("solved: [r, n]")
def whitening_terms(solved, sensitivity, multiplier, data_sensitivity, output_bound,
                    neighbours: Optional[Neighbours] = None):
    """The exact sampler's sensitivity ``Delta`` and whitening matrix ``W = F^{-1} V / (s Delta)`` (from
    ``solved = F^{-1} V``, as :func:`noise_in_space` returns it).

    ``W`` is public (computed from ``C`` alone; its own rounding does not matter), so the L2 shift of
    ``W y`` between neighbours is exactly ``d max_i ||w_i||``; computing ``W y`` in float64 errs by at
    most ``gamma_n b sum_i ||w_i||`` (any summation order, ``|y_i| <= b``), which may differ between
    neighbours, so twice that is added; the grid rounding adds ``sqrt(r) 2^GRID_EXPONENT``. ``Delta``
    is the cloaking sensitivity or, if larger, this bound, inflated by the grid factor
    (:func:`~dpgp_gpflow.sampling.gaussian_grid_factor`). The shift is checked where the noise is drawn
    (:func:`publish_cloaking`, from ``W`` itself). With ``neighbours`` (persons) the neighbour term is
    ``d max_j ||W A_j||`` (:func:`_whitened_norms`).
    """
    W = solved  # [r, n]: F^{-1} V, public
    largest, total = _whitened_norms(W, neighbours)
    delta_ = whitened_sensitivity_of_norms(sensitivity, largest, total, tf.shape(W)[1], tf.shape(W)[0],
                                           data_sensitivity, output_bound, multiplier)
    return delta_, W / (multiplier * delta_)


_whitening = tf.function(whitening_terms, input_signature=[MATRIX_SPEC] + [REAL_SPEC] * 4, autograph=False)
_whitened_shift = tf.function(whitened_shift, input_signature=[MATRIX_SPEC] + [REAL_SPEC] * 3, autograph=False)


def _whitening_matrix(space: ColumnSpace, noise: _Noise, multiplier: float, data_sensitivity: float,
                      output_bound: float, neighbours: Optional[Neighbours] = None) -> Tuple[float, tf.Tensor]:
    """The exact sampler's sensitivity ``Delta`` and whitening matrix ``W`` (:func:`whitening_terms`, compiled;
    eager with ``neighbours``); :func:`publish_cloaking` checks the matrix before anything is drawn."""
    sens, s, d, b = (tf.constant(float(x), tf.float64) for x in (noise.sensitivity, multiplier, data_sensitivity,
                                                                 output_bound))
    if neighbours is None:
        sensitivity, W = _whitening(noise.solved, sens, s, d, b)
    else:
        sensitivity, W = whitening_terms(noise.solved, sens, s, d, b, neighbours)
    return float(sensitivity), W


def check_whitened_shift(mu: float, multiplier: float, rank: Optional[int] = None) -> None:
    """Refuse (``FloatingPointError``) a whitened query whose L2 shift ``mu`` exceeds ``1 / (s K)``, naming
    the cause: a multiplier too large for the exact sampler's grid in ``rank`` dimensions (when given), a
    shift that is not finite (the noise scale under- or overflows float64), or another plan's whitening."""
    if math.isfinite(mu) and mu * DISCRETE_GAUSSIAN_FACTOR <= 1.0 / multiplier:
        return
    if rank is not None and not grid_loss(multiplier, math.sqrt(rank)) <= MAX_GRID_LOSS:
        raise FloatingPointError(f"the noise multiplier {multiplier:.3g} is too large for the exact sampler's grid "
                                 f"in {rank} dimensions (epsilon or delta too small for this release); it cannot be "
                                 "guaranteed: nothing was drawn or charged")
    if not math.isfinite(mu):
        raise FloatingPointError("the whitened query's sensitivity is not finite: the noise scale (multiplier times "
                                 "sensitivity) under- or overflows float64 (a data sensitivity, bound or multiplier at "
                                 "the edge of float64's range: rescale the outputs); nothing was drawn or charged")
    raise FloatingPointError(f"the whitened query's sensitivity {mu:.6g} exceeds 1/(multiplier K) = "
                             f"{1.0 / (multiplier * DISCRETE_GAUSSIAN_FACTOR):.6g} (a plan made for another data "
                             "sensitivity or budget, or a modified whitening matrix?); this release cannot be "
                             "guaranteed: nothing was drawn or charged")


class NoisePlan:
    """The noise a cloaking release of ``C`` would add, as a function of the noise multiplier,
    without drawing any: it orchestrates the rank rule of :func:`cloaking_release`, whose terms
    (:func:`~dpgp_gpflow.noise_planning.rank.bias_rounding`, :func:`~dpgp_gpflow.noise_planning.rank.projection_bias`,
    :func:`~dpgp_gpflow.noise_planning.rank.projection_is_harmless`) and its loop
    (:func:`~dpgp_gpflow.noise_planning.rank.first_harmless`) are shared with the graph-mode plan
    (:func:`dpgp_gpflow.engine.noise_plan`) and the streamed release.

    ``rtol=None``: candidate ranks (:func:`candidate_rtols`) are tried in order, and the first whose
    projection is harmless is solved to ``tol``: for every prediction j, the exact worst-case bias
    of projecting, ``b ||C_j - P_j||_1`` (:func:`projection_rows`, ``b = output_bound``), must be at
    most ``BIAS_FRACTION`` of ``s d max_i |P_ji|``, a lower bound on the noise std of prediction j
    in any release of the projection ``P`` (:func:`~dpgp_gpflow.noise_planning.noise_std_lower_bound`). No optimisation is needed
    to choose the rank. (docs/mechanisms.md#rank-rule explains why; the original papers' rule compares the 2-norm bound ``s_{r+1} sqrt(n) b`` with the smallest
    noise std instead; that needs a solve per candidate, and lets the least noised prediction,
    e.g. one far from all data, dictate the rank for all.) Every solve is cached, so other
    multipliers (other budgets) cost nothing more. A release that cannot be guaranteed
    (``FloatingPointError``) raises for every multiplier that reaches it.

    ``neighbours`` (a :class:`~dpgp_gpflow.neighbours.Neighbours` map ``A``; None: one row per person):
    the optimiser's constraints, the sensitivity, the whitened shift and the noise floor of the rank rule
    are over the columns of ``C A`` (docs/mechanisms.md#groups); the projection bias uses ``C`` itself.

    Privacy assumption: ``C``, ``output_bound`` and ``neighbours`` are public; the outputs never enter.
    """

    def __init__(self, C, *, data_sensitivity: float, output_bound: float, objective: str,
                 rtol: Optional[float] = None, tol: float = DEFAULT_TOL, max_iter: int = 2000,
                 neighbours: Optional[Neighbours] = None) -> None:
        rtols = candidate_rtols(objective, rtol)
        left, right = (C[0], C[1]) if isinstance(C, (tuple, list)) else (C, C)  # C = A B, or C itself
        self.k, self.n = int(np.shape(left)[0]), int(np.shape(right)[1])
        if neighbours is not None and neighbours.size != self.n:
            raise ValueError(f"the neighbour map has {neighbours.size} rows but the cloaking matrix {self.n} columns")
        self._C = C
        self._neighbours = neighbours
        self._spaces: List[ColumnSpace] = list(column_spaces(C, rtols))  # nested views of one factorisation
        self._candidates: List[list] = []  # per candidate rank: [space, bias bound, bias ratio, noise]
        self._objective, self._d = objective, float(data_sensitivity)
        self._tol, self._max_iter = check_real("tol", tol), check_count("max_iter", max_iter)
        self._output_bound = float(output_bound)
        self._rounding: Optional[tf.Tensor] = None
        #: what the plan was built for (a release that reuses it must ask for exactly this)
        self.settings = dict(data_sensitivity=float(data_sensitivity), output_bound=float(output_bound),
                             objective=objective, rtol=None if rtol is None else float(rtol), tol=float(tol),
                             max_iter=int(max_iter), neighbours=neighbours)

    def _candidate(self, i: int):
        while len(self._candidates) <= i:  # the projection terms of each space, when first asked for
            space = self._spaces[len(self._candidates)]
            l1, largest = projection_rows(self._C, space, self._neighbours)
            if self._rounding is None:
                self._rounding = bias_rounding(l1, largest, self._output_bound)
            ratio, bias = projection_bias(l1, largest, self._output_bound, self._d, self._rounding)
            self._candidates.append([space, bias, ratio, None])
        return self._candidates[i]

    def _solve(self, space: ColumnSpace):
        try:
            return _cloaking_noise(space, self._objective, self._d, self._tol, self._max_iter, self._neighbours)
        except FloatingPointError as exc:
            return exc

    # -- the dense provider of the one sequence (:func:`plan_cloaking`) --

    @property
    def candidate_count(self) -> int:
        """The number of candidate column spaces (nested, narrowest first)."""
        if not self._spaces:  # a matrix with no candidate space (column_spaces refuses a zero C first)
            raise ValueError("the cloaking matrix has no column space to release in")
        return len(self._spaces)

    def ratio_and_bias(self, i) -> Tuple[Any, Any]:
        """The rank rule's terms of candidate ``i`` (:func:`~dpgp_gpflow.noise_planning.rank.projection_bias`)."""
        return tuple(self._candidate(int(i))[2:0:-1])

    def noise(self, i) -> Tuple[ColumnSpace, _Noise]:
        """Candidate ``i``'s column space and its (unit-multiplier) noise, solved once (cached: the noise
        depends on ``C`` and the settings alone); a noise that cannot be guaranteed raises, each time."""
        chosen = self._candidate(int(i))
        if chosen[3] is None:
            chosen[3] = self._solve(chosen[0])
        if isinstance(chosen[3], FloatingPointError):
            raise FloatingPointError(str(chosen[3]))
        return chosen[0], chosen[3]

    def whiten(self, space: ColumnSpace, noise: _Noise, multiplier: float, data_sensitivity: float,
               output_bound: float) -> Tuple[float, tf.Tensor]:
        """The exact sampler's sensitivity and whitening matrix ``W`` (held whole) of ``noise``."""
        return _whitening_matrix(space, noise, multiplier, data_sensitivity, output_bound, self._neighbours)

    def choose(self, multiplier: float) -> Tuple[ColumnSpace, _Noise, float]:
        """The column space, the (unit-multiplier) noise and the largest worst-case projection bias of
        a release with ``multiplier`` (:func:`choose_noise`)."""
        chosen = choose_noise(self, multiplier)
        return chosen.space, chosen.noise, float(chosen.bias_bound)

    def noise_std(self, multiplier: float) -> np.ndarray:
        """The release's ``noise_std`` (k) at ``multiplier``; raises where the release would."""
        space, noise, _ = self.choose(multiplier)
        return multiplier * row_norms(_unit_noise_factor(space, noise)).numpy()


class ReleaseColumns(Protocol):
    """The column operations of one cloaking release's sequence (:func:`plan_cloaking`), over the public map
    ``C``: held whole (:class:`NoisePlan`, in memory), traced into a graph (:mod:`dpgp_gpflow.engine`) or
    recomputed by chunks (:class:`dpgp_gpflow.streaming.release.ChunkedRelease`). Everything is public."""

    @property
    def candidate_count(self) -> Any:
        """The number of candidate column spaces (nested, narrowest first)."""

    def ratio_and_bias(self, i: Any) -> Tuple[Any, Any]:
        """Candidate ``i``'s rank-rule terms (:func:`~dpgp_gpflow.noise_planning.rank.projection_bias`)."""

    def noise(self, i: Any) -> Tuple[Any, Any]:
        """Candidate ``i``'s column space and its optimised noise: ``factor`` (basis coordinates, unit
        multiplier), ``sensitivity`` against that factor (safety factors included), ``certificate``;
        refused (raises) if it cannot be guaranteed."""

    def whiten(self, space: Any, noise: Any, multiplier: Any, data_sensitivity: Any,
               output_bound: Any) -> Tuple[Any, Any]:
        """The exact sampler's sensitivity ``Delta`` (:func:`whitened_sensitivity_of_norms`) and the whitened
        query's matrix (``W`` [r, n], or a :class:`WhitenedQuery` that reads the outputs itself)."""


class ChosenNoise(NamedTuple):
    """The rank rule's choice and the noise optimised for it (public)."""

    index: Any  #: the candidate chosen
    space: Any  #: its column space (``basis`` [k, r])
    noise: Any  #: its noise (``factor`` [r, r] in basis coordinates, ``sensitivity``, ``certificate``)
    bias_bound: Any  #: the largest worst-case projection bias of any released value


class CloakingPlan(NamedTuple):
    """What an exact cloaking release draws with (public): the chosen noise, the exact sampler's sensitivity
    ``Delta``, the noise factor ``basis F s Delta`` [k, r] and the whitening (``W`` or a :class:`WhitenedQuery`)
    that :func:`publish_cloaking` checks and draws for."""

    chosen: ChosenNoise
    sensitivity: Any
    noise_factor: Any
    whitening: Any


def choose_noise(columns: ReleaseColumns, multiplier: Any, first: Optional[Tuple[Any, Any]] = None) -> ChosenNoise:
    """The rank rule (:func:`~dpgp_gpflow.noise_planning.first_harmless`, ``first``: candidate 0's terms when the
    provider has them) and the optimiser with the sensitivity against the noise it returns, over ``columns``."""
    i, _, bias = first_harmless(columns.ratio_and_bias, columns.candidate_count, multiplier, first=first)
    space, noise = columns.noise(i)
    return ChosenNoise(i, space, noise, bias)


class FloatProjection(NamedTuple):
    """The query of a ``sampler="float"`` cloaking release (public, dense only): the projection ``V`` [r, n]
    (``basis^T C``), the basis [k, r] and the noise factor ``F`` [r, r] (basis coordinates, unit multiplier);
    :func:`publish_cloaking` draws ``offset + basis (V y + s Delta F xi)`` in floating point (no grid, no
    whitened shift: not an exact sample, warned)."""

    vectors: Any
    basis: Any
    factor: Any


def plan_cloaking(columns: ReleaseColumns, multiplier: Any, data_sensitivity: Any, output_bound: Any,
                  first: Optional[Tuple[Any, Any]] = None, sampler: str = "exact") -> CloakingPlan:
    """The one sequence of every cloaking release, over a provider of its column operations (dense,
    traced or chunked): column space and rank rule, noise optimiser, sensitivity from the noise covariance
    actually used (:func:`choose_noise`), the exact sampler's sensitivity and whitening (``columns.whiten``,
    :func:`whitened_sensitivity_of_norms`) and the noise factor; the hand-off is :func:`publish_cloaking`
    (which rechecks the whitened shift from the whitening itself, draws and spends). ``sampler="float"``
    (dense providers): no whitening, the cloaking sensitivity itself and a :class:`FloatProjection` to draw
    for. Graph-safe when the provider is. Privacy assumption: ``C``, the bounds and ``multiplier`` are public;
    no output enters."""
    chosen = choose_noise(columns, multiplier, first)
    if sampler == "float":  # the floating-point draw: no grid, so no whitening nor its inflation
        sensitivity, whitening = chosen.noise.sensitivity, FloatProjection(chosen.space.vectors, chosen.space.basis,
                                                                           chosen.noise.factor)
    else:
        sensitivity, whitening = columns.whiten(chosen.space, chosen.noise, multiplier, data_sensitivity,
                                                output_bound)
    # (the float draw recomputes its factor from the projection: publish_cloaking trusts no plan)
    noise_factor = tf.linalg.matmul(chosen.space.basis, chosen.noise.factor) * (multiplier * sensitivity)  # [k, r]
    return CloakingPlan(chosen, sensitivity, noise_factor, whitening)


def cloaking_release(
    C: tf.Tensor,
    y_centred: tf.Tensor,
    offset: tf.Tensor,
    variance: tf.Tensor,
    *,
    data_sensitivity: float,
    output_bound: float,
    epsilon: float,
    delta: float,
    objective: str = "mse",
    calibration: str = "analytic",
    seed: Optional[int] = None,
    accountant: Union[PrivacyAccountant, Reservation, None] = None,
    rtol: Optional[float] = None,
    tol: float = DEFAULT_TOL,
    max_iter: int = 2000,
    y_bounds: Optional[Tuple[float, float]] = None,
    sampler: str = "exact",
    neighbours: Optional[Neighbours] = None,
) -> PrivateRelease:
    """Release ``offset + C y_centred`` with cloaking noise, (epsilon, delta)-DP.

    ``C`` is the k x n cloaking matrix, a pair ``(A, B)`` with ``C = A B`` (sparse models), or a
    :class:`NoisePlan` of it built with the same keyword arguments (to reuse its optimiser solves when
    releasing the same predictions at several budgets; the release is then of the plan's matrix).

    Privacy assumptions: ``C``, ``offset`` and ``variance`` depend only on public data; each entry
    of ``y_centred`` lies within ``output_bound`` of zero and moves by at most ``data_sensitivity``
    between neighbours. ``rtol=None`` picks the rank by the bias rule of :class:`NoisePlan`: the
    smallest candidate for which no prediction's worst-case projection bias exceeds 1% of the
    least noise its projected value could carry.

    ``sampler="exact"`` (default) draws exact discrete-Gaussian noise for the whitened query (module
    docstring; ``sensitivity`` and ``noise_factor`` then include the inflation for its rounding, a
    relative 1e-11 or so); ``"float"`` is the floating-point sampler, for speed comparisons only (warns).
    An explicit ``seed`` draws numpy's normals either way (reproducible, not private).
    ``neighbours``: the public neighbour map of persons (:func:`dpgp_gpflow.neighbours.group_neighbours`;
    None: neighbours differ in one output), whose every extreme change the release protects; the release
    records the persons it was built for (its ``path``: ``"person (groups, up to G rows)"``); a map built by
    hand records none and is refused (``ValueError``) before anything is reserved.
    """
    request = release_request(epsilon, delta, calibration=calibration, objective=objective, sampler=sampler, seed=seed,
                              rtol=rtol, tol=tol)
    validate_public_bounds(data_sensitivity, output_bound, y_bounds)
    check_count("max_iter", max_iter)  # before reserving
    path = path_of(neighbours)  # the relation the map protects (a map without one: refused here)

    def mechanism(reservation: Reservation) -> PrivateRelease:
        return cloak(request, reservation, C, y_centred, offset, variance, data_sensitivity=data_sensitivity,
                     output_bound=output_bound, rtol=rtol, tol=tol, max_iter=max_iter, y_bounds=y_bounds,
                     neighbours=neighbours)

    return measure(Measurement(request, path.relation(), mechanism, path=path), accountant)


def cloak(request: ReleaseRequest, reservation: Reservation, C: Any, y_centred: Any, offset: Any, variance: Any, *,
          data_sensitivity: float, output_bound: float, rtol: Optional[float] = None, tol: float = DEFAULT_TOL,
          max_iter: int = 2000, y_bounds: Optional[Tuple[float, float]] = None,
          neighbours: Optional[Neighbours] = None) -> PrivateRelease:
    """The cloaking mechanism of :func:`cloaking_release` for a validated ``request``, committing its one event
    into the caller's ``reservation`` after the draw (which the caller closes): it neither validates the
    privacy parameters nor reserves. Privacy assumptions: those of :func:`cloaking_release`."""
    objective, multiplier, seed = request.objective, request.multiplier, request.seed
    if objective is None:
        raise ValueError("a cloaking release needs an objective ('mse' or 'entropy')")
    y_centred = tf.reshape(tf.convert_to_tensor(y_centred, dtype=tf.float64), [-1])
    n = int(y_centred.shape[0])
    settings: Dict[str, Any] = dict(data_sensitivity=float(data_sensitivity), output_bound=float(output_bound),
                                    objective=objective, rtol=None if rtol is None else float(rtol), tol=float(tol),
                                    max_iter=check_count("max_iter", max_iter), neighbours=neighbours)
    if isinstance(C, NoisePlan):
        plan = C
        if plan.settings != settings:
            raise ValueError(f"this NoisePlan was built for {plan.settings}, not for {settings}")
    else:
        plan = NoisePlan(C, **settings)
    if plan.n != n:
        raise ValueError(f"the cloaking matrix has {plan.n} columns but there are {n} outputs")
    # the one sequence; only the draw differs between samplers (publish_cloaking)
    planned = plan_cloaking(plan, multiplier, data_sensitivity, output_bound, sampler=request.sampler)
    return publish_cloaking(noise_factor=planned.noise_factor, whitening=planned.whitening, y_centred=y_centred,
                            offset=offset, variance=variance, sensitivity=planned.sensitivity,
                            multiplier=multiplier, output_bound=output_bound, reservation=reservation, seed=seed,
                            neighbours=neighbours, **release_record(request, data_sensitivity, planned.chosen, y_bounds))


def release_record(request: ReleaseRequest, data_sensitivity: Any, chosen: ChosenNoise, y_bounds: Any) -> Dict[str, Any]:
    """What a cloaking release records of its request and of the noise chosen (host values): every cloaking
    release's, in memory, compiled or streamed."""
    return dict(epsilon=request.epsilon, delta=request.delta, data_sensitivity=data_sensitivity,
                calibration=request.calibration, objective=request.objective, certificate=chosen.noise.certificate,
                rank=int(chosen.space.rank), rtol=float(chosen.space.rtol), bias_bound=float(chosen.bias_bound),
                y_bounds=y_bounds)


def _description(objective: str, k: int) -> str:
    return f"cloaking release ({objective}) of {k} values"


class WhitenedQuery(Protocol):
    """The whitened query ``z = W y_c`` of an exact cloaking release, as :func:`publish_cloaking` reads it: its
    L2 shift recomputed from ``W`` itself (before anything is drawn) and its value (PRIVATE: the only number
    computed from the outputs). Held whole (:class:`DenseQuery`: the in-memory and compiled releases) or
    recomputed chunk by chunk (:class:`~dpgp_gpflow.streaming.solver.StreamedQuery`)."""

    @property
    def rank(self) -> int:
        """The number of rows of ``W``: the dimension of ``z``."""

    def shift(self, data_sensitivity: float, output_bound: float, multiplier: float) -> float:
        """The L2 shift ``mu`` of ``W y_c`` between neighbours, recomputed from ``W`` (:func:`shift_of_norms`)."""

    def values(self) -> np.ndarray:
        """``z = W y_c`` ([r], PRIVATE)."""

    @property
    def covers(self) -> SensitivityPath:
        """The persons and outputs :meth:`shift` is computed over (public)."""


#: The :class:`WhitenedQuery` classes :func:`publish_cloaking` accepts: the package's own, whose ``shift``
#: recomputes the L2 shift from the ``W`` whose values it returns (:func:`trusted_query` registers one).
_TRUSTED_QUERIES: set = set()


def trusted_query(cls: type) -> type:
    """Class decorator: ``cls`` is one of the package's :class:`WhitenedQuery` classes, which
    :func:`publish_cloaking` accepts (a query object of any other class is refused: its ``shift`` would be a
    number handed in from outside)."""
    _TRUSTED_QUERIES.add(cls)
    return cls


@trusted_query
class DenseQuery:
    """:class:`WhitenedQuery` of a whitening matrix ``W`` [r, n] held whole and the clipped centred outputs
    ``y_centred`` [n]; ``neighbours``: the persons' neighbour map (None: one row per person)."""

    def __init__(self, whitening: Any, y_centred: Any, neighbours: Optional[Neighbours] = None) -> None:
        self.whitening = tf.convert_to_tensor(whitening, tf.float64)
        self.y_centred, self.neighbours = y_centred, neighbours
        if neighbours is not None and neighbours.size != int(self.whitening.shape[1]):
            raise ValueError(f"the neighbour map has {neighbours.size} rows but the whitening matrix "
                             f"{self.whitening.shape}")

    @property
    def rank(self) -> int:
        return int(self.whitening.shape[0])

    def shift(self, data_sensitivity: float, output_bound: float, multiplier: float) -> float:
        d_, b_, s_ = (tf.constant(float(x), tf.float64) for x in (data_sensitivity, output_bound, multiplier))
        return float(_whitened_shift(self.whitening, d_, b_, s_) if self.neighbours is None
                     else whitened_shift(self.whitening, d_, b_, s_, self.neighbours))

    def values(self) -> np.ndarray:
        return tf.linalg.matvec(self.whitening, self.y_centred).numpy()

    @property
    def covers(self) -> SensitivityPath:
        return path_of(self.neighbours)


def publish_cloaking(*, noise_factor: tf.Tensor, whitening: Any, y_centred: Any, offset: Any,
                     variance: Any, sensitivity: float, multiplier: float, output_bound: float,
                     reservation: Reservation, seed: Optional[int], neighbours: Optional[Neighbours] = None,
                     **record: Any) -> PrivateRelease:
    """The host's part of every exact cloaking release (in memory, compiled or streamed): check the whitened
    query's shift, whiten the query (``z = W y_c``), add exact grid noise
    (:func:`dpgp_gpflow.sampling.standard_normal`, :func:`~dpgp_gpflow.sampling.grid_sum`), re-colour
    (``offset + noise_factor z``: post-processing) and charge ``reservation``.

    ``whitening``: the matrix ``W`` [r, n] (then ``y_centred`` [n] are the outputs it whitens), or a
    :class:`WhitenedQuery` that reads its outputs itself (``y_centred=None``; the streamed release's
    :class:`~dpgp_gpflow.streaming.solver.StreamedQuery`, ``W`` recomputed chunk by chunk).

    Trusts no plan: before anything is drawn it validates the declared ``record["data_sensitivity"]`` and
    ``output_bound`` (:func:`validate_public_bounds`, against ``record["y_bounds"]``), recomputes the L2
    shift of ``W y_c`` from ``W`` itself (:func:`shift_of_norms`) and refuses (``FloatingPointError``,
    the caller's ``reservation`` is then cancelled, nothing charged) unless it is at most ``1 / (s K)`` for
    the ``multiplier`` being charged; with ``neighbours`` (persons) that shift is recomputed over every
    extreme change of a person (:func:`whitened_shift`). Privacy assumptions: ``y_centred`` moves by at most
    the declared data sensitivity in one entry (with ``neighbours``: in each entry of one person) between
    neighbours and lies within ``output_bound``; ``noise_factor`` is public (any public factor: re-colouring
    is post-processing). The persons and outputs its shift is computed over must be the running measurement's
    (:func:`~dpgp_gpflow.measurement.check_covered`, before the draw: ``ValueError``; with no measurement running,
    ``RuntimeError``, so it runs inside :func:`~dpgp_gpflow.measurement.measure` only, refused before the draw, as
    every commit is refused outside it: :meth:`~dpgp_gpflow.accounting.Reservation.commit`). ``reservation`` must
    hold, as its next uncommitted event, the event of what is drawn here (``record``'s epsilon and delta at
    ``multiplier``: :meth:`~dpgp_gpflow.accounting.Reservation.expect`, ``ValueError`` before anything), since its
    commit records the next *held* event: a measurement's request other than the draw's is never recorded for it.
    """
    reservation.expect((gaussian_event(record["epsilon"], record["delta"], multiplier),))  # the event drawn, held next
    d, b = validate_public_bounds(record["data_sensitivity"], output_bound, record.get("y_bounds"))
    if isinstance(whitening, FloatProjection):  # sampler="float": the same plan, a floating-point draw
        check_covered(path_of(neighbours))  # the persons its shift is checked over are those stated
        record["data_sensitivity"] = d
        return _draw_float(whitening, y_centred, offset=offset, variance=variance, sensitivity=sensitivity,
                           multiplier=multiplier, reservation=reservation, seed=seed, neighbours=neighbours,
                           **record)
    if y_centred is None:
        if neighbours is not None:
            raise ValueError("a whitened query that reads its own outputs carries its own persons: neighbours=None")
        if type(whitening) not in _TRUSTED_QUERIES:
            raise TypeError("publish_cloaking takes a whitening matrix W with y_centred, or one of the package's "
                            f"whitened queries ({sorted(c.__name__ for c in _TRUSTED_QUERIES)}), not "
                            f"{type(whitening).__name__}: a query's shift is recomputed by the package, never "
                            "taken from outside")
        query = whitening
    else:
        whitening = tf.convert_to_tensor(whitening, tf.float64)
        if whitening.shape.rank != 2:
            raise ValueError(f"the whitening matrix {whitening.shape} does not match the noise factor "
                             f"{noise_factor.shape}")
        query = DenseQuery(whitening, y_centred, neighbours)
    if query.rank == 0 or query.rank != int(noise_factor.shape[1]):
        raise ValueError(f"the whitening matrix ({query.rank} rows) does not match the noise factor "
                         f"{noise_factor.shape}")
    check_covered(query.covers)  # the persons its shift is computed over are those the measurement states
    mu = query.shift(d, b, float(multiplier))
    check_whitened_shift(mu, multiplier, query.rank)  # refused here: nothing drawn, nothing charged
    record["data_sensitivity"] = d
    return draw_and_spend(query.values(), noise_factor=noise_factor, offset=offset, variance=variance,
                          sensitivity=sensitivity, multiplier=multiplier, reservation=reservation, seed=seed, **record)


def draw_and_spend(z: np.ndarray, *, noise_factor: tf.Tensor, offset: Any, variance: Any, sensitivity: float,
                   multiplier: float, reservation: Reservation, seed: Optional[int], **record: Any) -> PrivateRelease:
    """The draw and the spend of every exact cloaking release (in memory, compiled or streamed): exact grid
    noise added to the whitened query ``z`` (:func:`dpgp_gpflow.sampling.add_whitened_noise`), re-coloured
    (``offset + noise_factor z``: post-processing), the event committed into ``reservation`` and the :class:`PrivateRelease` built.

    Privacy assumption: the caller has checked ``z``'s L2 shift against ``1 / (s K)``
    (:func:`check_whitened_shift`) for the multiplier being charged, over the running measurement's persons
    (:func:`publish_cloaking`, its one caller, checks both); ``noise_factor`` is public.
    """
    z, reproducible = sampling.add_whitened_noise(z, seed)
    released = tf.reshape(tf.cast(offset, tf.float64), [-1]) + tf.linalg.matvec(noise_factor, tf.constant(z))
    reservation.commit(_description(record["objective"], int(noise_factor.shape[0])))
    return _cloaking_record(released, noise_factor, variance, sensitivity, multiplier, reproducible, **record)


def _draw_float(projection: FloatProjection, y_centred: Any, *, offset: Any, variance: Any, sensitivity: float,
                multiplier: float, reservation: Reservation, seed: Optional[int], neighbours: Optional[Neighbours],
                **record: Any) -> PrivateRelease:
    """The ``sampler="float"`` draw and spend (warns :class:`~dpgp_gpflow.PrivacyLeakWarning`): ``offset + basis
    (V y_c + s Delta F xi)`` with floating-point normals ``xi`` (:func:`dpgp_gpflow.sampling.float_standard_normal`).
    Trusts no plan: before anything is drawn, ``Delta`` is checked against the L2 shift of ``F^{-1} V y_c``
    recomputed from the projection itself (``d max_i ||F^{-1} V e_i||``; with ``neighbours``, over every person)
    and refused (``FloatingPointError``, nothing charged) when smaller; the noise factor is recomputed from it.
    Called by :func:`publish_cloaking` only, after its check of the running measurement's persons."""
    V = tf.convert_to_tensor(projection.vectors, tf.float64)
    F = tf.convert_to_tensor(projection.factor, tf.float64)
    basis = tf.convert_to_tensor(projection.basis, tf.float64)
    y_centred = tf.reshape(tf.convert_to_tensor(y_centred, tf.float64), [-1])
    if V.shape.rank != 2 or F.shape != (V.shape[0], V.shape[0]) or basis.shape.rank != 2 \
            or basis.shape[1] != V.shape[0] or V.shape[1] != y_centred.shape[0] or V.shape[0] == 0:
        raise ValueError(f"a float projection needs V [r, n], F [r, r] and a basis [k, r] for {y_centred.shape[0]} "
                         f"outputs, got {V.shape}, {F.shape}, {basis.shape}")
    largest, _ = _whitened_norms(tf.linalg.solve(F, V), neighbours)
    needed = float(record["data_sensitivity"]) * float(largest)
    if not (math.isfinite(needed) and float(sensitivity) >= needed * (1.0 - FLOAT_SENSITIVITY_RTOL)):
        raise FloatingPointError(f"the float sampler's sensitivity {float(sensitivity):.6g} is below the shift "
                                 f"{needed:.6g} recomputed from its projection (a plan made for other outputs or "
                                 "another noise?); this release cannot be guaranteed: nothing was drawn or charged")
    unit = tf.linalg.matmul(basis, F)  # [k, r]
    noise_factor = unit * sensitivity * multiplier  # the float sampler's association ((basis F Delta) s), bit for bit
    description = _description(record["objective"], int(noise_factor.shape[0]))
    sampling.warn_float_sampler(description)
    xi, reproducible = sampling.float_standard_normal(int(projection.factor.shape[0]), seed)
    coords = tf.linalg.matvec(projection.vectors, y_centred)  # [r]: the mean projected onto the basis
    coords = coords + (multiplier * sensitivity) * tf.linalg.matvec(projection.factor, tf.constant(xi))
    released = tf.reshape(tf.cast(offset, tf.float64), [-1]) + tf.linalg.matvec(projection.basis, coords)
    reservation.commit(description)
    return _cloaking_record(released, noise_factor, variance, sensitivity, multiplier, reproducible, **record)


def _cloaking_record(released, noise_factor, variance, sensitivity, multiplier, reproducible, **record) -> PrivateRelease:
    record["data_sensitivity"] = float(record["data_sensitivity"])
    return PrivateRelease(
        mean=released.numpy(),
        variance=np.maximum(np.reshape(np.asarray(variance, dtype=np.float64), [-1]), 0.0),  # rounding: never < 0
        noise_std=row_norms(noise_factor).numpy(),
        noise_factor=noise_factor.numpy(),
        sensitivity=float(sensitivity),
        noise_multiplier=float(multiplier),
        mechanism="cloaking",
        reproducible=reproducible,
        **record,
    )
