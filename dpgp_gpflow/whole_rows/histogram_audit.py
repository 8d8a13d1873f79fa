"""The audit of a histogram residual release (:func:`dpgp_gpflow.audit` builds its report from
:func:`histogram_audit`): the privacy its noise achieves, every radius and estimate recomputed from the released
values and the model's public pieces, never read from the release's claimed sensitivities.

Stage 1 (:mod:`.histogram`): with the noise stds ``sigma_n`` of the counts and ``sigma_b`` of ``b`` actually added,
a person of ``G`` rows (the model's largest) moves the whitened vector by at most
``mu_1 = G sqrt(2 / sigma_n^2 + (d (1 + (M + 4) u))^2 / sigma_b^2)``. Stage ``j``: ``mu_j = 2 G R_j (1 + (M + 4) u) /
sigma_j`` with ``R_j`` recomputed (:func:`~.histogram_scheme.histogram_chain`; a release whose radii are not those
by the loaders' rule is refused, :func:`~.residual_audit.check_radii`), at the model's variances (its kernel's bound
on ``k(x, x)`` and its likelihood variance, what its release uses; a release stating others is refused). The whole
is ``sqrt(sum_j mu_j^2)``-GDP. The noise test (PRIVATE: it reads the model's rows) recomputes the counts, ``b`` and
every stage's residual sums around the recomputed estimates, each tested on its own (:class:`~.audit.AuditPart`).

Privacy assumption of the audit itself: the model holds the rows, kernel, inducing inputs, box, bounds and
variances the release was made from; its outcome is for the data owner.
"""

from __future__ import annotations

import math
from typing import Any, List

import numpy as np
import tensorflow as tf

from ..io.gpflow_specs import kernel_spec
from ..relations import largest_person
from ..sampling import UNIT_ROUNDOFF
from ..streaming.chunks import DEFAULT_CHUNK_SIZE
from ..validation import parameter_value
from .audit import STD_RTOL, AuditPart, WholeRowsAudit, check_kernel_bound, same_as_released
from .design import validate_box
from .features import kernel_bound
from .histogram import CellCounts, histogram_cells, histogram_centres, histogram_sums
from .histogram_scheme import histogram_chain
from .release import model_rows
from .residual import ResidualStatistics, residual_sums
from .residual_audit import check_radii, recorded_radii
from .residual_bounds import HISTOGRAM_RADIUS_RTOL
from .statistics import RowStatistics

__all__: List[str] = []  # internal: dpgp_gpflow.audit calls histogram_audit


def _one_std(noise: Any, what: str) -> float:
    noise = np.asarray(noise, dtype=np.float64)
    sigma = float(noise.reshape(-1)[0])
    if not (math.isfinite(sigma) and sigma > 0.0 and np.allclose(noise, sigma, rtol=STD_RTOL, atol=0.0)):
        raise ValueError(f"{what}'s noise std is not one Gaussian noise on every entry")
    return sigma


def histogram_audit(release: Any, model: Any) -> WholeRowsAudit:
    """The audit's pieces of a :class:`~.histogram_release.HistogramResidualRelease` against the
    ``DPSGPR(..., private_inputs=True)`` it was released from (module docstring). ``ValueError`` when the model's
    public pieces (kernel, inducing inputs, box, bounds, variances) are not the release's, or a radius, estimate or
    noise is not what the mechanism gives."""
    if not getattr(model, "private_inputs", False):
        raise ValueError("a whole-row release is audited against the DPSGPR(..., private_inputs=True) it was "
                         "released from")
    features = release.features
    Z = np.asarray(model.inducing_variable.Z.numpy(), dtype=np.float64)
    box = validate_box(model.x_bounds, Z.shape[1])
    lo, hi = (float(v) for v in model.y_bounds)
    if (not np.array_equal(Z, features.Z) or not np.array_equal(box, release.x_bounds)
            or (lo, hi) != release.y_bounds or kernel_spec(model.kernel) != kernel_spec(features.kernel)):
        raise ValueError("the model's kernel, inducing inputs, box or bounds are not the release's: audit it against "
                         "the model it was released from")
    check_kernel_bound(features, box)
    # the variances the model's release uses (release_model: the kernel's bound, the likelihood's variance)
    kernel_variance = kernel_bound(model.kernel, box)
    noise_variance = float(parameter_value(model.likelihood.variance))
    if not (math.isclose(float(release.kernel_variance), kernel_variance, rel_tol=1e-12)
            and math.isclose(float(release.noise_variance), noise_variance, rel_tol=1e-12)):
        raise ValueError(f"the release's kernel and noise variances ({float(release.kernel_variance):.17g}, "
                         f"{float(release.noise_variance):.17g}) are not the model's ({kernel_variance:.17g}, "
                         f"{noise_variance:.17g}): audit it against the model it was released from")
    m, G, d = features.m, largest_person(getattr(model, "groups", None)), hi - lo
    statistics, std = release.statistics, release.statistics_noise_std
    sigma_n, sigma_b = _one_std(std["counts"], "the counts"), _one_std(std["b"], "b")
    centres = histogram_centres(features.kernel, box)  # from the model's box and kernel, never the release's
    if centres.shape[0] != statistics["counts"].shape[0]:
        raise ValueError(f"the release has {statistics['counts'].shape[0]} counts, the model's grid "
                         f"{centres.shape[0]} cells")
    phi = features(tf.constant(centres)).numpy()
    recorded = recorded_radii(release)
    stds = [_one_std(noise, f"stage {j}") for j, noise in enumerate(std["residual_b"], start=2)]
    chain = histogram_chain(statistics["counts"], statistics["b"], statistics["residual_b"], stds, phi,
                            counts_std=sigma_n, b_std=sigma_b, kernel_variance=kernel_variance,
                            noise_variance=noise_variance, width=d)
    radii, estimates = chain.radii, chain.estimates
    check_radii(recorded, radii, HISTOGRAM_RADIUS_RTOL, "histogram residual release")
    same_as_released(release.estimates, np.stack(estimates), "estimates")  # what predict_f reads
    same_as_released(release.posterior.mean, estimates[-1], "last mean")
    rounding = 1.0 + (m + 4) * UNIT_ROUNDOFF
    mus = [G * math.sqrt(2.0 / sigma_n**2 + (d * rounding) ** 2 / sigma_b**2)]
    source, _ = model_rows(model, None, DEFAULT_CHUNK_SIZE)
    rows = RowStatistics(features, box, (lo, hi), clip_inputs=model.clip_inputs)
    counts, b = histogram_sums(source, CellCounts(rows, histogram_cells(features.kernel, box)))
    parts = [AuditPart("stage 1: counts", statistics["counts"] / sigma_n, counts / sigma_n),
             AuditPart("stage 1: b", statistics["b"] / sigma_b, b / sigma_b)]
    stages = zip(statistics["residual_b"], stds, radii, estimates)
    for j, (b_j, sigma, radius, u) in enumerate(stages, start=2):
        mus.append(G * 2.0 * radius * rounding / sigma)
        exact = residual_sums(source, ResidualStatistics(rows, u, radius))
        parts.append(AuditPart(f"stage {j}: residual b", np.asarray(b_j) / sigma, exact / sigma))
    return WholeRowsAudit(math.sqrt(math.fsum(mu * mu for mu in mus)), tuple(parts))
