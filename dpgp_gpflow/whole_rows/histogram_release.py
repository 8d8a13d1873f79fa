"""The histogram residual release: the scheme of :mod:`.histogram_scheme` drawn from the rows, under one guarantee.

:func:`release_histogram_residuals` runs one :class:`~dpgp_gpflow.measurement.Measurement` (checks, one
reservation, the stages as :func:`~dpgp_gpflow.measurement.stepwise` draws, one ledger event at the request's
(epsilon, delta)): the histogram stage (:mod:`.histogram`) at ``s / sqrt(f_1)``, then each residual release
(:mod:`.residual`, sensitivity :func:`~.residual_bounds.residual_sensitivity`) at ``s / sqrt(f_j)``; they compose
in Gaussian DP to ``mu = 1 / s``. :class:`HistogramResidualRelease` predicts from the last estimate.

Privacy assumption: as :mod:`.residual_release`; the variances are given (public), not fitted (no ``q`` is
released); every sensitivity is recomputed from public values before anything is reserved.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np
import tensorflow as tf

from ..io.card import HISTOGRAM_MECHANISM, whole_rows_summary
from ..io.writing import histogram_content, register
from ..measurement import Measurement, SensitivityPath, StepDraws, measure, stepwise
from ..mechanisms.request import ReleaseRequest
from ..relations import largest_person
from ..streaming.chunks import ChunkSource
from ..validation import validate_groups
from .histogram import NoisedHistogram, counting, histogram_cells, histogram_centres, histogram_measurement
from .histogram_scheme import (
    HISTOGRAM_Z,
    PRECONDITIONER_FLOOR,
    HistogramChain,
    aware_noise_covariance,
    histogram_chain,
    histogram_stages,
    histogram_start,
    residual_noise_covariance,
)
from .posterior import WeightPosterior
from .residual import radius_features
from .residual_bounds import HISTOGRAM_RADIUS_RTOL, radii_replayed, validate_residual_fractions
from .residual_release import (
    ResidualStage,
    StagedRelease,
    draw_residual_stage,
    finite_estimates,
    stage_requests,
    stage_sensitivities,
)
from .statistics import RowStatistics

__all__: list[str] = []  # internal: the package imports these names by name

class HistogramResidualRelease(StagedRelease):
    """A histogram residual release (:func:`release_histogram_residuals`) and the sparse GP of its last estimate.

    ``statistics``: ``counts`` [C] and ``b`` [M] of the histogram stage, ``residual_b`` [J - 1, M], as released;
    ``statistics_noise_std``: the std of each entry's noise, same keys and shapes. ``centres`` [C, D]: the cells'
    centres (public). ``radii`` [J - 1], ``estimates`` [J, M], ``fractions``, ``stage_multipliers``,
    ``stage_sensitivities``. ``predict_f``: mean ``c + phi(x)^T u_J`` (clipped to the bounds by default), SGPR's
    variance with ``lambda I + P``, plus the first-order DP-noise variance ``phi(x)^T C phi(x)``
    (``noise_covariance``: the counts' and ``b~``'s noise through ``u_1``, then every stage's)."""

    def __init__(self, noised: NoisedHistogram, features: Any, centres: np.ndarray, stages: Sequence[ResidualStage],
                 *, fractions: Sequence[float], request: ReleaseRequest, x_bounds: Any, y_bounds: Tuple[float, float],
                 kernel_variance: float, noise_variance: float, clip_to_bounds: bool) -> None:
        """The object of what the stages released (a file's, or built by hand): the radii and estimates are
        replayed from the released values (:func:`~.histogram_scheme.histogram_chain`) and a radius that is not the
        one its earlier stages give is refused, as are estimates or a noise covariance that are not finite."""
        centres = np.array(centres, dtype=np.float64, copy=True)
        phi = radius_features(features, centres).phi.numpy()  # public
        chain = histogram_chain(noised.counts, noised.b, np.stack([np.asarray(s.b, np.float64) for s in stages]),
                                [s.noise_std for s in stages], phi, counts_std=noised.counts_std, b_std=noised.b_std,
                                kernel_variance=float(kernel_variance), noise_variance=float(noise_variance),
                                width=float(y_bounds[1]) - float(y_bounds[0]))
        if not radii_replayed([s.radius for s in stages], chain.radii, HISTOGRAM_RADIUS_RTOL):
            raise ValueError(f"the stages' radii {[s.radius for s in stages]} are not those their earlier stages give "
                             f"({chain.radii})")
        self._build(noised, features, centres, phi, stages, chain, fractions=fractions, request=request,
                    x_bounds=x_bounds, y_bounds=y_bounds, kernel_variance=kernel_variance,
                    noise_variance=noise_variance, clip_to_bounds=clip_to_bounds)

    @classmethod
    def _released(cls, noised: NoisedHistogram, features: Any, centres: np.ndarray, phi: np.ndarray,
                  stages: Sequence[ResidualStage], chain: HistogramChain, **options: Any) -> "HistogramResidualRelease":
        """The object of :func:`release_histogram_residuals`, from the chain its stages ran (the radii each stage
        drew with and the estimates it computed, the same calls as :func:`~.histogram_scheme.histogram_chain`'s
        replay): not replayed a second time."""
        released = cls.__new__(cls)
        released._build(noised, features, np.array(centres, dtype=np.float64, copy=True), phi, stages, chain,
                        **options)
        return released

    def _build(self, noised: NoisedHistogram, features: Any, centres: np.ndarray, phi: np.ndarray,
               stages: Sequence[ResidualStage], chain: HistogramChain, *, fractions: Sequence[float],
               request: ReleaseRequest, x_bounds: Any, y_bounds: Tuple[float, float], kernel_variance: float,
               noise_variance: float, clip_to_bounds: bool) -> None:
        self.features = features
        self.centres = centres
        self._statistics = {"counts": np.array(noised.counts, np.float64), "b": np.array(noised.b, np.float64),
                            "residual_b": np.stack([np.asarray(s.b, np.float64) for s in stages])}
        m = features.m
        self._noise_std = {"counts": np.full(noised.counts.shape, float(noised.counts_std)),
                           "b": np.full(m, float(noised.b_std)),
                           "residual_b": np.stack([np.full(m, float(s.noise_std)) for s in stages])}
        self.fractions = tuple(float(f) for f in fractions)
        self.stage_multipliers = (float(noised.multiplier), *[float(s.multiplier) for s in stages])
        self.stage_sensitivities = (float(noised.sensitivity), *[float(s.sensitivity) for s in stages])
        self.num_data, self.person_rows, self.chunking = noised.num_data, noised.person_rows, noised.chunking
        #: the counts' and b's squared shares ``(w_n^2, w_b^2)`` and G, the grid's cells per column (public)
        self.shares, self.cells = (float(noised.shares[0]), float(noised.shares[1])), int(noised.cells)
        self.x_bounds, self.y_bounds = np.array(x_bounds, dtype=np.float64), (float(y_bounds[0]), float(y_bounds[1]))
        self.kernel_variance, self.noise_variance = float(kernel_variance), float(noise_variance)
        self._epsilon, self._delta, self.calibration = request.epsilon, request.delta, request.calibration
        self.noise_multiplier = float(request.multiplier)
        self._reproducible = bool(noised.reproducible or any(s.reproducible for s in stages))
        self._clip_to_bounds = bool(clip_to_bounds)
        self.radii = np.array(chain.radii, dtype=np.float64)
        self.estimates = np.stack(chain.estimates)
        start = chain.start
        self.S_hat, self.preconditioner = start.S, start.P
        first = aware_noise_covariance(start.S, noised.counts, phi, noised.b,
                                       lam=self.noise_variance / self.kernel_variance,
                                       kappa=noised.b_std**2 / self.kernel_variance, b_std=noised.b_std,
                                       counts_std=noised.counts_std, eigen=start.eigen)
        #: [M, M] the first-order covariance of the DP noise of the last estimate (post-processing)
        self.noise_covariance = residual_noise_covariance(first, start.chol, start.P, start.S,
                                                          [s.noise_std**2 for s in stages])
        self.posterior = WeightPosterior(tf.constant(start.chol), tf.constant(self.estimates[-1]),
                                         self.kernel_variance, self.noise_variance, 0.0, 0.0)
        finite_estimates(self.estimates, self.noise_covariance)  # both paths: a release's and a file's

    @property
    def statistics(self) -> Dict[str, np.ndarray]:
        """The released ``counts`` [C], ``b`` [M] and ``residual_b`` [J - 1, M] (copies)."""
        return {k: v.copy() for k, v in self._statistics.items()}

    def privacy_card(self) -> Dict[str, Any]:
        """The guarantee and what was released, as plain values."""
        return {"epsilon": self.epsilon, "delta": self.delta, "reproducible": self.reproducible,
                "clip_to_bounds": self.clip_to_bounds, "neighbours": self.neighbours,
                "mechanism": HISTOGRAM_MECHANISM, "calibration": self.calibration,
                "noise_multiplier": self.noise_multiplier, "x_bounds": self.x_bounds.tolist(),
                "y_bounds": list(self.y_bounds), "num_data": self.num_data, "num_inducing": self.features.m,
                "cells": self.cells, "num_cells": int(self.centres.shape[0]), "shares": list(self.shares),
                "person_rows": self.person_rows,
                "chunking": list(self.chunking), "kernel_variance": self.kernel_variance,
                "noise_variance": self.noise_variance, "residual_fractions": list(self.fractions),
                "stage_multipliers": list(self.stage_multipliers),
                "stage_sensitivities": list(self.stage_sensitivities), "radii": self.radii.tolist(),
                "radius_z": HISTOGRAM_Z, "preconditioner_floor": PRECONDITIONER_FLOOR}

    def __repr__(self) -> str:
        return whole_rows_summary(self.privacy_card())  # as ``dpgp show`` prints it from the file's card


register(HistogramResidualRelease, histogram_content)  # docs/release_file.md#histogram-residual-releases


def release_histogram_residuals(request: ReleaseRequest, source: ChunkSource, rows: RowStatistics, *, shares: Any,
                                fractions: Any, kernel_variance: float, noise_variance: float,
                                clip_to_bounds: bool = True, checks: Sequence[Callable[[], Any]] = (),
                                groups: Any = None, accountant: Any = None) -> HistogramResidualRelease:
    """Release ``source``'s rows as the histogram stage (the first of ``fractions`` of the Gaussian-DP budget of
    ``request``) followed by one residual release per further fraction (module docstring), with one reservation and
    one ledger event at the request's (epsilon, delta). ``rows``: the public pieces of the pass (feature map, box,
    bounds, input clipping); ``kernel_variance``, ``noise_variance``: public. Everything public is checked before
    anything is reserved."""
    fractions = validate_residual_fractions(fractions)
    if fractions is None:
        raise ValueError("a histogram residual release needs residual fractions")
    requests = stage_requests(request, fractions)  # NotImplementedError for the classical calibration
    # the pass (public choice: keeps the rows' features for the residual stages when they fit, as residual.holding)
    rows = counting(source, rows, histogram_cells(rows.features.kernel, rows.box))  # refuses too many cells
    first = histogram_measurement(requests[0], source, rows, shares=shares, then=lambda noised: noised,
                                  checks=checks, groups=groups)
    m = rows.features.m
    lo, hi = rows.y_bounds
    state: Dict[str, Any] = {}

    def own_checks() -> None:  # after the histogram stage's own (grid, source, persons, shares, its sensitivity)
        state["source"], state["sensitivities"] = stage_sensitivities(source, groups, requests, m)
        state["centres"] = histogram_centres(rows.features.kernel, rows.box)

    def steps(draws: StepDraws) -> HistogramResidualRelease:
        noised = first.mechanism(draws)  # the counts and b: one draw, committed into draws
        phi = radius_features(rows.features, state["centres"]).phi.numpy()  # public
        start = histogram_start(noised.counts, noised.b, phi, counts_std=noised.counts_std, b_std=noised.b_std,
                                kernel_variance=kernel_variance, noise_variance=noise_variance)
        stages: List[ResidualStage] = []

        def drawn(j: int, radius: float, u: np.ndarray) -> Tuple[Any, float]:  # stage j + 2's draw
            stages.append(draw_residual_stage(draws, state["source"], rows, u, radius, requests[j + 1],
                                              state["sensitivities"][j],
                                              f"residual release {j + 2} of {len(requests)}"))
            return stages[-1].b, stages[-1].noise_std

        chain = histogram_stages(start, noised.b_std, drawn, len(requests) - 1, kernel_variance=kernel_variance,
                                 noise_variance=noise_variance, width=hi - lo)
        return HistogramResidualRelease._released(noised, rows.features, state["centres"], phi, stages, chain,
                                                  fractions=fractions, request=request, x_bounds=rows.box,
                                                  y_bounds=(lo, hi), kernel_variance=kernel_variance,
                                                  noise_variance=noise_variance, clip_to_bounds=clip_to_bounds)

    description = (f"whole-row histogram and {len(requests) - 1} residual release(s) (M = {m}, Gaussian-DP "
                   "composition)")
    declared = validate_groups(groups, int(np.shape(groups)[0])) if groups is not None else None
    measurement = Measurement(request, first.relation, stepwise(steps, requests[0].event(), description),
                              checks=(*first.checks, own_checks), description=description,
                              file_pieces=first.file_pieces, path=SensitivityPath(largest_person(declared), 1, True))
    return measure(measurement, accountant)
