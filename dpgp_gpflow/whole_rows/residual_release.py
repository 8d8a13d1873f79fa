"""Residual releases: the whole-row statistics, then releases of clipped residual sums, under one guarantee.

:func:`release_residuals` (``DPSGPR(..., private_inputs=True).release_function(..., residual_fractions=...)``)
releases the whole-row statistics ``(S, b, q)`` at a fraction ``f_1`` of the Gaussian-DP budget, then for
``j = 2 .. J`` the clipped residual sums ``b_j`` of :mod:`.residual` around the previous estimate at ``f_j``
(docs/whole_rows.md#residual-releases). Every stage is a Gaussian mechanism with the exact sampler, at the noise
multiplier ``s / sqrt(f_j)`` (:func:`~dpgp_gpflow.composition.gdp_fraction_multipliers`), adaptive on the earlier
stages' outputs; they compose in Gaussian DP to ``mu = 1 / s``, the user's (epsilon, delta). One
:class:`~dpgp_gpflow.measurement.Measurement` (checks, one reservation, the stages as
:func:`~dpgp_gpflow.measurement.stepwise` draws, one ledger event at the request's (epsilon, delta)), entered
through :func:`~dpgp_gpflow.measurement.measure` with the sensitivity path of whole rows.

:class:`ResidualRelease` holds every stage's released statistics, their noise std, the radii and the estimates,
and predicts from the last estimate (post-processing).

Privacy assumption: as :mod:`.release` (whole-row neighbours, public box, bounds, kernel, ``Z``, variances given
or fitted on the first stage's statistics); each stage's radius and centre are post-processing of the earlier
stages; the sensitivities are recomputed here from public values before anything is reserved.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from .. import sampling
from ..composition import gdp_fraction_multipliers, gdp_step_request
from ..io.card import RESIDUAL_MECHANISM, whole_rows_summary
from ..io.writing import file_content, register
from ..measurement import Measurement, SensitivityPath, StepDraws, measure, stepwise
from ..mechanisms.request import ReleaseRequest
from ..relations import largest_person
from ..released import Released
from ..streaming.chunks import ChunkSource, person_starts, source_persons
from ..validation import as_inputs, validate_groups
from .features import FeatureMap
from .mechanism import chunking, relation, statistics_measurement
from .posterior import WeightPosterior, predictive_terms
from .released import RegressionPredictions, StatisticsRelease, WholeRowsRelease
from .residual import (
    ResidualStatistics,
    holding,
    radius_features,
    radius_points,
    release_noise_covariance,
    residual_stages,
    residual_sums,
)
from .residual_bounds import residual_sensitivity, validate_residual_fractions
from .statistics import GridStatistics

__all__: list[str] = []  # internal: the package imports these names by name

#: The card's mechanism of a residual release (its file's checks know it: :mod:`dpgp_gpflow.io.card`).
MECHANISM = RESIDUAL_MECHANISM


class ResidualStage(NamedTuple):
    """What one residual release drew (all public)."""

    b: np.ndarray  #: [M] the released clipped residual sum ``b~_j``
    noise_std: float  #: the std of each entry's noise
    radius: float  #: ``R_j``
    multiplier: float  #: ``s_j = s / sqrt(f_j)``
    sensitivity: float  #: the charged sensitivity of ``b_j / (2 R_j)`` (rounding and the sampler's grid included)
    reproducible: bool  #: the noise came from an explicit seed (not private)


def stage_sensitivities(source: ChunkSource, groups: Any, requests: Sequence[ReleaseRequest], m: int
                        ) -> Tuple[ChunkSource, list]:
    """``(the source chunked between persons, [Delta_2 .. Delta_J])``: every residual stage's sensitivity
    (:func:`~.residual_bounds.residual_sensitivity`) for the stage requests ``requests[1:]``, from the source's
    chunking and the largest person of the ids it carries (as the first stage read them). Public; a check run
    before anything is reserved."""
    ids = source_persons(source, groups, None)
    chunked = source if ids is None else source.between_persons(person_starts(ids, int(source.n)))
    longest, count = chunking(chunked)
    return chunked, [residual_sensitivity(m=m, multiplier=r.multiplier, num_rows=int(source.n), chunk_rows=longest,
                                          num_chunks=count, person_rows=largest_person(ids)) for r in requests[1:]]


def draw_residual_stage(draws: StepDraws, source: ChunkSource, rows: Any, u: Any, radius: float,
                        stage: ReleaseRequest, sensitivity: float, label: str) -> ResidualStage:
    """One residual release: the clipped residual sums of ``source``'s rows around the public estimate ``u`` with
    the public radius ``radius`` (:func:`~.residual.residual_sums`; ``rows`` the pass's public pieces), noised at
    std ``s_j Delta_j 2 R_j`` (``stage.multiplier``, ``sensitivity``) from ``stage.seed`` and committed into
    ``draws`` as ``label``."""
    b = residual_sums(source, ResidualStatistics(rows, u, radius))
    std = stage.multiplier * sensitivity * 2.0 * radius
    noised_b, reproducible = sampling.add_whitened_noise(b / std, stage.seed)  # L2 shift <= 1 / s_j
    draws.commit(label)
    return ResidualStage(noised_b * std, std, radius, stage.multiplier, sensitivity, reproducible)


def stage_seed(seed: Optional[int], stage: int) -> Optional[int]:
    """Seed of stage ``stage`` (0-based): ``seed`` itself for the first, ``SeedSequence([seed, stage])`` after (as
    the Laplace classifiers' Newton steps); None (fresh noise) stays None."""
    if seed is None or stage == 0:
        return seed
    return int(np.random.SeedSequence([int(seed), int(stage)]).generate_state(1, dtype=np.uint32)[0])


def stage_requests(request: ReleaseRequest, fractions: Sequence[float]) -> Tuple[ReleaseRequest, ...]:
    """The request of each stage: :func:`~dpgp_gpflow.composition.gdp_step_request` at the multiplier
    ``s / sqrt(f_j)`` (:func:`~dpgp_gpflow.composition.gdp_fraction_multipliers`), its own seed
    (:func:`stage_seed`). ``NotImplementedError`` unless the calibration is analytic (Gaussian-DP composition)."""
    unseeded = _unseeded_stages(request._replace(seed=None), tuple(float(f) for f in fractions))
    return tuple(stage._replace(seed=stage_seed(request.seed, j)) for j, stage in enumerate(unseeded))


@functools.lru_cache(maxsize=64)
def _unseeded_stages(request: ReleaseRequest, fractions: Tuple[float, ...]) -> Tuple[ReleaseRequest, ...]:
    """:func:`stage_requests` without their seeds: public values only (each step's epsilon solved by bisection,
    :func:`~dpgp_gpflow.calibration.analytic_gaussian_epsilon`), so computed once per request and fractions in a
    process (immutable requests; exceptions are not cached)."""
    multipliers = gdp_fraction_multipliers(request.multiplier, fractions)
    return tuple(gdp_step_request(request, s) for s in multipliers)


def finite_estimates(estimates: np.ndarray, covariance: np.ndarray) -> None:
    """``ValueError`` unless the L2 norm of each of a staged release's estimates and the Frobenius norm of the
    noise covariance of its last one are finite in float64: with features of norm at most 1 they bound every
    prediction's ``|phi(x)^T u|`` and ``phi(x)^T C phi(x)`` and each partial sum of them, so a prediction's sums
    stay finite, never NaN (values handed in, e.g. a release file's replayed from released sums of 1e308). Public."""
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.append(np.linalg.norm(np.asarray(estimates, np.float64), axis=-1),
                          np.linalg.norm(np.asarray(covariance, np.float64)))
    if not np.all(np.isfinite(norms)):
        raise ValueError("the estimates or their noise covariance replayed from the released values are not "
                         "finite (their norms overflow float64: a prediction would be NaN)")


class StagedRelease(RegressionPredictions, StatisticsRelease, Released):
    """Mixin: a release of stages composed in Gaussian DP that predicts from its last estimate
    (:class:`ResidualRelease`, :class:`~.histogram_release.HistogramResidualRelease`): ``person_rows``,
    ``noise_multiplier`` (``s``), ``features``, ``posterior`` and ``noise_covariance`` set by the subclass."""

    person_rows: int
    noise_multiplier: float
    features: FeatureMap
    posterior: WeightPosterior
    noise_covariance: np.ndarray

    @property
    def neighbours(self) -> str:
        """The relation protected (as :class:`~.released.WholeRowsRelease`)."""
        return relation(self.person_rows)

    @property
    def lengthscales(self) -> Any:
        """The lengthscales of the released features' kernel (as :attr:`~.released.WholeRowsRelease.lengthscales`)."""
        return WholeRowsRelease.lengthscales.fget(self)  # type: ignore[attr-defined]

    @property
    def mu(self) -> float:
        """The Gaussian-DP parameter of the whole release, ``sqrt(sum_j mu_j^2) = 1 / s``."""
        return 1.0 / self.noise_multiplier

    def _terms(self, Xnew: Any) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Mean ``c + phi(x)^T u_J`` (clipped to the bounds when ``clip_to_bounds``), SGPR's variance from
        ``posterior`` and the first-order DP-noise variance ``phi(x)^T C phi(x)`` (``noise_covariance``), each
        [N, 1]. Post-processing."""
        X = tf.constant(as_inputs("Xnew", Xnew, self.features.input_dim))
        phi = self.features(X)
        mean, model, _ = predictive_terms(self.posterior, phi, self.features.unit_variance(X))
        noise = tf.reduce_sum(tf.linalg.matmul(phi, tf.constant(self.noise_covariance)) * phi, axis=1)
        mean = mean.numpy() + self.midpoint
        if self.clip_to_bounds:
            mean = np.clip(mean, *self.y_bounds)
        return mean[:, None], model.numpy()[:, None], noise.numpy()[:, None]


class ResidualRelease(StagedRelease):
    """A residual release (:func:`release_residuals`): the whole-row statistics and the clipped residual sums, and
    the sparse GP of the last estimate, queryable anywhere.

    ``statistics``: the first stage's ``S`` [M, M], ``b`` [M], ``q`` [] and ``residual_b`` [J - 1, M] (row
    ``j - 2``: ``b~_j``), as released; ``statistics_noise_std``: the std of each entry's noise, same keys and
    shapes. ``radii`` [J - 1]: ``R_j``; ``estimates`` [J, M]: ``u_1 .. u_J``; ``fractions``, the stages' noise
    multipliers (``stage_multipliers``) and charged sensitivities (``stage_sensitivities``: the first stage's of its
    packed vector, then those of ``b_j / (2 R_j)``). ``predict_f(Xnew)``: mean ``c + phi(x)^T u_J`` (clipped to the
    bounds by default) and SGPR's variance with the preconditioner, plus the first-order DP-noise variance
    ``phi(x)^T C phi(x)`` of the last estimate, ``C`` = ``noise_covariance`` [M, M] propagated through every stage
    (:func:`~.residual.release_noise_covariance`; docs/whole_rows.md#residual-releases).
    """

    def __init__(self, head: WholeRowsRelease, stages: Sequence[ResidualStage], posterior: WeightPosterior,
                 estimates: Sequence[Any], covariance: Any, *, fractions: Sequence[float],
                 request: ReleaseRequest) -> None:
        m = head.features.m
        self._head = head
        self._statistics = {**head.statistics, "residual_b": np.stack([np.asarray(s.b, np.float64) for s in stages])}
        self._noise_std = {**head.statistics_noise_std,
                           "residual_b": np.stack([np.full(m, float(s.noise_std)) for s in stages])}
        self.radii = np.array([s.radius for s in stages], dtype=np.float64)
        self.estimates = np.stack([np.asarray(u, np.float64) for u in estimates])
        self.fractions = tuple(float(f) for f in fractions)
        self.stage_multipliers = (head.noise_multiplier, *[float(s.multiplier) for s in stages])
        self.stage_sensitivities = (head.sensitivity, *[float(s.sensitivity) for s in stages])
        self.posterior = posterior
        #: [M, M] the first-order covariance of the DP noise of the last estimate (post-processing)
        self.noise_covariance = np.array(covariance, dtype=np.float64, copy=True)
        finite_estimates(self.estimates, self.noise_covariance)
        self.features: FeatureMap = head.features
        self.num_data, self.person_rows, self.chunking = head.num_data, head.person_rows, head.chunking
        self.x_bounds, self.y_bounds = head.x_bounds.copy(), head.y_bounds
        self.kernel_variance, self.noise_variance, self.variances = (head.kernel_variance, head.noise_variance,
                                                                     head.variances)
        self._epsilon, self._delta, self.calibration = request.epsilon, request.delta, request.calibration
        #: the whole release's noise multiplier ``s``: ``mu = 1 / s`` composes the stages' ``mu_j`` (Gaussian DP)
        self.noise_multiplier = float(request.multiplier)
        self._reproducible = bool(head.reproducible or any(s.reproducible for s in stages))
        self._clip_to_bounds = head.clip_to_bounds

    # -- what was released ----------------------------------------------------------------------------
    @property
    def statistics(self) -> Dict[str, np.ndarray]:
        """The released statistics: ``S`` [M, M], ``b`` [M], ``q`` [] of the first stage and ``residual_b``
        [J - 1, M] (unit kernel scale, outputs centred at the bounds' midpoint; copies)."""
        return {k: v.copy() for k, v in self._statistics.items()}

    @property
    def first_stage(self) -> WholeRowsRelease:
        """The first stage as released: the statistics at ``f_1`` of the budget and their post-processing (its
        ``epsilon`` and ``noise_multiplier`` are that stage's; the audit reads it, :mod:`.residual_audit`)."""
        return self._head

    # -- card, repr ---------------------------------------------------------------------------
    def privacy_card(self) -> Dict[str, Any]:
        """The guarantee and what was released, as plain values: the first stage's card (box, bounds, n, M, shares,
        persons, chunking, variances) with the whole release's epsilon, delta, noise multiplier and mechanism, and
        every stage's fraction, multiplier, sensitivity and radius."""
        card = self._head.privacy_card()
        card.update({"epsilon": self.epsilon, "delta": self.delta, "reproducible": self.reproducible,
                     "clip_to_bounds": self.clip_to_bounds, "mechanism": MECHANISM,
                     "noise_multiplier": self.noise_multiplier, "sensitivity": self.stage_sensitivities[0],
                     "residual_fractions": list(self.fractions),
                     "stage_multipliers": list(self.stage_multipliers),
                     "stage_sensitivities": list(self.stage_sensitivities), "radii": self.radii.tolist()})
        return card

    def __repr__(self) -> str:
        return whole_rows_summary(self.privacy_card())  # as ``dpgp show`` prints it from the file's card


def residual_release(head: WholeRowsRelease, P: tf.Tensor, stages: Sequence[ResidualStage],
                     posterior: WeightPosterior, estimates: Sequence[Any], *, fractions: Sequence[float],
                     request: ReleaseRequest) -> ResidualRelease:
    """The :class:`ResidualRelease` of a first stage ``head`` (preconditioner ``P``), its residual ``stages``, the
    last ``posterior`` and the ``estimates``, with the DP noise's covariance propagated through the stages
    (:func:`~.residual.release_noise_covariance`; ``S`` estimated by the PSD projection of the released ``S~``).
    Post-processing (a release and a loaded release file build it alike)."""
    covariance = release_noise_covariance(head.posterior, P, head.statistics["S"], [s.noise_std for s in stages])
    return ResidualRelease(head, stages, posterior, estimates, covariance, fractions=fractions, request=request)


def residual_content(released: ResidualRelease) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """``(content, arrays)`` of a residual release's file (docs/release_file.md#residual-releases): the first
    stage's content and arrays as a whole-row release writes them, its card (``content.first_stage``), and every
    residual stage's released sum (``residual/b`` [J - 1, M]) and noise std (``residual/noise_std`` [J - 1])."""
    content, arrays = file_content(released.first_stage)
    return ({"first_stage": released.first_stage.privacy_card(), **content},
            {**arrays, "residual/b": released.statistics["residual_b"],
             "residual/noise_std": released.statistics_noise_std["residual_b"][:, 0]})


register(ResidualRelease, residual_content)


def release_residuals(request: ReleaseRequest, source: ChunkSource, rows: Any, *, shares: Any,
                      fractions: Any, head: Callable[[Any, ReleaseRequest], WholeRowsRelease],
                      checks: Sequence[Callable[[], Any]] = (), groups: Any = None,
                      accountant: Any = None) -> ResidualRelease:
    """Release ``source``'s rows as the whole-row statistics (at the first of ``fractions`` of the Gaussian-DP budget
    of ``request``) followed by one residual release per further fraction, with one reservation and one ledger
    event at the request's (epsilon, delta) (module docstring). ``rows``: the public pieces of the pass (feature
    map, box, bounds, input clipping), a :class:`~.statistics.RowStatistics`, or a
    :class:`~.statistics.GridStatistics` of candidate lengthscales whose statistics the first stage releases together
    (:mod:`.lengthscales`); ``head(noised, stage_request)``: the first stage's :class:`~.released.WholeRowsRelease`
    from its noised statistics (post-processing: regularisation, variances given or fitted, the candidate chosen);
    the residual stages are those of the chosen candidate's feature map (post-processing of stage 1); ``checks`` the caller's public checks; ``groups`` the declared person ids (a person's rows
    are summed together: each stage's sensitivity is the largest person's). Everything public is checked before
    anything is reserved."""
    fractions = validate_residual_fractions(fractions)
    if fractions is None:
        raise ValueError("release_residuals needs residual fractions (None is one release: release_rows)")
    requests = stage_requests(request, fractions)  # NotImplementedError for the classical calibration
    rows = holding(source, rows)  # in this process: the first pass keeps the features the later stages read
    first = statistics_measurement(requests[0], source, rows, shares=shares, then=lambda noised: noised,
                                   checks=checks, groups=groups)
    grid = rows.rows if isinstance(rows, GridStatistics) else (rows,)
    m = grid[0].features.m  # every candidate's
    lo, hi = grid[0].y_bounds
    state: Dict[str, Any] = {}

    def own_checks() -> None:  # after the first stage's own (source, persons, shares, its sensitivity)
        state["source"], state["sensitivities"] = stage_sensitivities(source, groups, requests, m)

    def steps(draws: StepDraws) -> ResidualRelease:
        noised = first.mechanism(draws)  # the statistics: one draw, committed into draws
        released = head(noised, requests[0])  # post-processing: S^ regularised, the variances, u_1, the choice
        chosen = next(r for r in grid if r.features is released.features)  # the chosen candidate's pass
        points = radius_features(chosen.features, radius_points(chosen.features.kernel, chosen.box))  # public
        P = released.regularised_S  # the preconditioner: S~ regularised as the first stage's posterior reads it
        stages: List[ResidualStage] = []

        def drawn(j: int, radius: float, u: np.ndarray) -> Tuple[np.ndarray, float]:  # stage j + 2's draw
            stages.append(draw_residual_stage(draws, state["source"], chosen, u, radius, requests[j + 1],
                                              state["sensitivities"][j],
                                              f"residual release {j + 2} of {len(requests)}"))
            return stages[-1].b, stages[-1].noise_std

        _, estimates, posterior = residual_stages(released.posterior, P, drawn, len(requests) - 1, points, hi - lo)
        return residual_release(released, P, stages, posterior, estimates, fractions=fractions, request=request)

    description = (f"whole-row statistics and {len(requests) - 1} residual release(s) (M = {m}"
                   + (f", {len(grid)} candidate lengthscales" if isinstance(rows, GridStatistics) else "")
                   + ", Gaussian-DP composition)")
    declared = validate_groups(groups, int(np.shape(groups)[0])) if groups is not None else None
    measurement = Measurement(request, first.relation, stepwise(steps, requests[0].event(), description),
                              checks=(*first.checks, own_checks), description=description,
                              file_pieces=first.file_pieces,  # the statistics' kernel: the file holds it
                              path=SensitivityPath(largest_person(declared), 1, True))
    return measure(measurement, accountant)
