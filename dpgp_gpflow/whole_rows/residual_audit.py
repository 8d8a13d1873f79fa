"""The audit of a residual release (:func:`dpgp_gpflow.audit` builds its report from :func:`residual_audit`): the
privacy its noise achieves, every radius and estimate recomputed from the earlier stages, never read from the
release's claimed sensitivities.

Stage 1 is audited as a whole-row release (:func:`~.audit.whole_rows_audit`: ``mu_1`` from the model's bounds and
persons and the noise each part actually carries). For each later stage ``j`` the audit recomputes, from the
released statistics and the model's public pieces, the regularised ``S^``, the variances (the release's stated values,
or fitted on stage 1), the estimates ``u_1 .. u_{j-1}`` and the radius ``R_j`` (:mod:`.residual`), refuses a release
whose radii are not those by the loaders' rule (:func:`check_radii`: as many, none below), and
takes ``mu_j = 2 G R_j (1 + (M + 4) u) / sigma_j`` from the noise std ``sigma_j``
actually added to ``b~_j`` (``G`` the model's largest person). The whole is ``sqrt(sum_j mu_j^2)``-GDP (adaptive
composition). The noise test (PRIVATE: it reads the model's rows) recomputes every stage's sums from the model's
rows around the recomputed estimates; each stage's parts are tested on their own (:class:`~.audit.AuditPart`).

Privacy assumption of the audit itself: the model holds the rows, kernel, inducing inputs, box, bounds and
variances the release was made from; its outcome is for the data owner.
"""

from __future__ import annotations

import math
from typing import Any, List

import numpy as np

from ..relations import largest_person
from ..sampling import UNIT_ROUNDOFF
from ..streaming.chunks import DEFAULT_CHUNK_SIZE
from .audit import AuditPart, STD_RTOL, WholeRowsAudit, released_posterior, same_as_released, staged, whole_rows_audit
from .design import validate_box
from .release import model_rows
from .residual import ResidualStatistics, radius_features, radius_points, replay, residual_sums
from .residual_bounds import RESIDUAL_RADIUS_RTOL, radii_replayed
from .statistics import RowStatistics

__all__: List[str] = []  # internal: dpgp_gpflow.audit calls residual_audit


def recorded_radii(release: Any) -> np.ndarray:
    """The staged ``release``'s recorded radii [J - 1]; ``ValueError`` unless it has one residual sum, one row of
    noise stds and one radius per stage (a stage without a radius or noise std would be left out of the composed
    ``mu``)."""
    sums, stds = np.shape(release.statistics["residual_b"]), np.shape(release.statistics_noise_std["residual_b"])
    radii = np.asarray(release.radii, dtype=np.float64).reshape(-1)
    if len(sums) != 2 or sums != stds or sums[0] != radii.size:
        raise ValueError(f"the release's residual sums {list(sums)}, their noise stds {list(stds)} and radii "
                         f"[{radii.size}] are not one per stage")
    return radii


def check_radii(recorded: np.ndarray, radii: Any, rtol: float, what: str) -> None:
    """``ValueError`` unless the ``recorded`` radii are ``radii`` (recomputed from the earlier stages) by the loaders'
    one rule (:func:`~.residual_bounds.radii_replayed` at ``rtol``: within ``rtol`` above, never below). The audit's
    ``mu_j`` is taken from the recomputed radius and the noise actually added, so a recorded radius never enters
    its epsilon (a stage that clipped at its recorded radius, at most ``rtol`` above, has a ``mu_j`` at most
    ``1 + rtol`` times the one taken: far inside the audit's ``AUDIT_RTOL``); but a release whose radii a file's
    loader would refuse is not a ``what`` of this model."""
    if not radii_replayed(recorded, radii, rtol):
        raise ValueError(f"the release's radii {recorded.tolist()} are not those its earlier stages give, "
                         f"{[float(r) for r in radii]} (a radius within {rtol:g} above, never below): not a {what} "
                         "of this model")


def residual_audit(release: Any, model: Any) -> WholeRowsAudit:
    """The audit's pieces of a :class:`~.residual_release.ResidualRelease` against the
    ``DPSGPR(..., private_inputs=True)`` it was released from (module docstring): ``mu`` of the whole and every
    stage's parts (stage 1's ``S``, ``b``, ``q``, each later stage's residual sum), released and recomputed from the
    model's rows (PRIVATE), whitened by their noise.
    ``ValueError`` when the model's public pieces are not the release's, or a radius or noise is not what the
    earlier stages and the mechanism give."""
    head = release.first_stage
    first = whole_rows_audit(head, model)  # checks Z, box, bounds and the kernel's bound; stage 1's mu and sums
    features = release.features
    m = features.m
    box = validate_box(model.x_bounds, features.input_dim)
    lo, hi = (float(v) for v in model.y_bounds)
    statistics, std = release.statistics, release.statistics_noise_std
    S_hat, posterior = released_posterior(head, model, box)  # from the released statistics, never the object's
    points = radius_features(features, radius_points(features.kernel, box))
    source, groups = model_rows(model, None, DEFAULT_CHUNK_SIZE)
    rows = RowStatistics(features, box, (lo, hi), clip_inputs=model.clip_inputs)
    G = largest_person(groups)
    recorded = recorded_radii(release)
    radii, estimates, last = replay(posterior, S_hat, statistics["residual_b"], std["residual_b"][:, 0], points,
                                    hi - lo)
    check_radii(recorded, radii, RESIDUAL_RADIUS_RTOL, "residual release")
    # what predict_f reads must be post-processing of the released stages (a file or object could carry other weights)
    same_as_released(release.estimates, np.stack(estimates), "estimates")
    same_as_released(release.posterior.mean, last.mean, "last mean")
    same_as_released(release.posterior.chol, last.chol, "Cholesky factor")
    mus, parts = [first.mu], staged("stage 1", list(first.parts))
    stages = zip(statistics["residual_b"], std["residual_b"], radii, estimates)
    for j, (b, noise, radius, u) in enumerate(stages, start=2):
        sigma = float(noise[0])
        if not (math.isfinite(sigma) and sigma > 0.0 and np.allclose(noise, sigma, rtol=STD_RTOL, atol=0.0)):
            raise ValueError(f"stage {j}'s noise std is not one Gaussian noise on every entry")
        mus.append(G * 2.0 * radius * (1.0 + (m + 4) * UNIT_ROUNDOFF) / sigma)
        exact = residual_sums(source, ResidualStatistics(rows, u, radius))  # around the recomputed u_{j-1}
        parts.append(AuditPart(f"stage {j}: residual b", np.asarray(b) / sigma, exact / sigma))
    return WholeRowsAudit(math.sqrt(math.fsum(mu * mu for mu in mus)), tuple(parts))
