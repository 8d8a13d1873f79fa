"""What an auditor runs on a published release: :func:`audit` recomputes the privacy it achieves.

From the release's published noise factor ``F`` (k x r), the model's public cloaking map ``C`` (k x n)
and public offset, and the model's data sensitivity ``d`` (never the release's own claim), the audit:

1. refuses a malformed release (``ValueError``): a noise factor that is not a finite k x r matrix with
   r >= 1 columns and a non-zero column space, or a mean that is not a finite k-vector;
2. checks that the released mean can be a post-processing of a noised query: ``mean - offset`` must lie
   in ``span(F)`` (the directions the noise covers; a cloaking release projects its mean there, so any
   component outside would be published without noise). A clipped release that keeps its raw mean (every
   release made in memory: :meth:`~dpgp_gpflow.released.PrivateRelease.unclipped`) is checked on the raw
   mean; for one clipped without it (a file saved clipped) only the values strictly inside the bounds are
   checked (in the span of the corresponding rows of ``F``): a necessary condition, weaker than the full one;
3. recomputes the privacy of the noised query: the neighbour that moves output i by ``d`` shifts it by
   ``d P c_i`` (``P``: the projector onto ``span(F)``), a Gaussian mechanism with
   ``mu = d max_i ||F^+ c_i||``, whose exact ``epsilon`` at the release's ``delta`` follows from the
   analytic Gaussian privacy profile (``docs/mechanisms.md#calibration``); it must not exceed the claim.
   For a model with public ``groups`` (persons, docs/guides/groups.md) the neighbour moves all of one
   person's outputs within ``[-d, d]`` each, and the maximum is over the columns of ``C A``, every corner
   of every person's box (:mod:`dpgp_gpflow.neighbours`; above its size limit, the documented bound).
   For a model of P > 1 outputs per row (``DPGPR`` with ``Y`` [N, P]) ``C`` is the stacked map, the
   release's [k, P] mean is stacked output by output, and a row's P outputs (output p within
   ``[-d_p, d_p]``) are one person's (docs/guides/multi_output.md).
4. for an object whose claim composes its releases in Gaussian DP (several classes:
   :class:`~dpgp_gpflow.models.PrivateMulticlassClassifier`), audits every part's releases against its own
   model (:meth:`~dpgp_gpflow.released.Released.audit_parts`: each class's steps against that class's
   problem) and recomputes the whole's ``mu`` from the steps' audited ``mu``
   (:meth:`~dpgp_gpflow.released.Released.audited_mu`: a neighbour changes at most
   ``min(K, 2g)`` classes, g the model's largest person; docs/mechanisms.md#several-classes); the whole's
   epsilon at its delta must not exceed its claim.

5. tests the noise the mean carries (:func:`noise_test`, docs/privacy_model.md#the-noise-test-of-dpaudit): the
   auditor holds the model, so its data. The whitened residual ``w = F^+ (mean - offset - P C y_c)`` of the
   published mean against the noiseless value recomputed from the model's clipped, centred outputs
   ``y_c`` is the release's standard normal draw, so ``||w||^2`` must lie in the two-sided chi-square
   interval of the noise's rank at false-alarm rate :data:`NOISE_FALSE_ALARM` per call of :func:`audit`
   (shared by the object's releases). A mean with no noise, or with a fraction of what ``F`` claims, falls
   below it; one farther from this model's noiseless value than the noise explains (more noise, or a
   release of other outputs, inputs or hyperparameters) above it: both fail. Where the outputs cannot be
   read, or a release saved clipped keeps too few values inside the bounds to recover its noise, the
   test is reported not run (:attr:`AuditReport.noise_test`), never passed silently. A whole-row release
   (docs/whole_rows.md#the-audit) is tested part by part (``S``, ``b``, ``q`` of every candidate or class block,
   every later stage; :attr:`ReleaseAudit.noise_parts`), the rate shared equally by the parts, and fails when any
   part fails.

What it cannot establish: noise drawn from a guessable seed looks like any other draw; a model handed to
the audit with other public inputs or hyperparameters than the release was made with changes the privacy
recomputed (the noise test then usually fails, as for other outputs). The audit verifies that the
*published description* (noise factor, map, d, (epsilon, delta)) is a valid (epsilon, delta)-DP Gaussian
mechanism, that the mean is consistent with it, and that the noise in the mean is as large as described.

It trusts no number the release reports about itself except its mean, its noise factor and its
``(epsilon, delta)`` claim. The noise test READS THE PRIVATE OUTPUTS (``model.centred_outputs()``): its
statistic and outcome are functions of the noise drawn and of the data, for the data owner, not for
publication. Privacy assumption of the audit itself: the model holds the same public inputs,
hyperparameters and bounds as when the release was made (for a
:class:`~dpgp_gpflow.released.PrivateRelease`, pass the same ``Xnew``).
"""

from __future__ import annotations

import math
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
from scipy import special

from .calibration import analytic_gaussian_epsilon
from .contract import FactoredPrivateModel, PrivateModel, dense_map, stacked
from .models.laplace import newton_step_cloaking
from .neighbours import Neighbours, model_neighbours
from .released import PrivateFunction, PrivateRelease, Released
from .sampling import GRID_EXPONENT
from .validation import bound_columns
from .whole_rows.audit import AuditPart, whole_rows_audit
from .whole_rows.classification import WholeRowsClassifier
from .whole_rows.released import WholeRowsRelease
from .whole_rows.histogram_audit import histogram_audit
from .whole_rows.histogram_release import HistogramResidualRelease
from .whole_rows.residual_audit import residual_audit
from .whole_rows.residual_release import ResidualRelease

__all__ = ["AuditReport", "audit"]

#: Relative slack for floating point when comparing the achieved with the claimed epsilon.
AUDIT_RTOL = 1e-6
#: Singular values of ``F`` below this fraction of the largest do not count as noised directions.
SPAN_RTOL = 1e-14
#: Largest part of ``mean - offset`` outside ``span(F)``, relative to ``||mean - offset|| + ||offset||``,
#: that counts as the rounding of re-colouring ``offset + F z`` (float64: about 1e-15 times k).
MEAN_SPAN_RTOL = 1e-8
#: The noise test's false-alarm rate per call of :func:`audit`: the probability that it fails an honest
#: release (shared equally by the releases of the object audited).
NOISE_FALSE_ALARM = 1e-6
#: Floating-point allowance of the noise test, relative to the whitened size of the released values.
NOISE_RTOL = 1e-8
#: Smallest singular value of the noise factor's rows that are tested, relative to the largest of the whole
#: factor, for the noise to be recovered from them (a clipped release without its raw mean).
NOISE_RANK_RTOL = 1e-8

_NOT_RUN = "not run"


class NoiseTest(NamedTuple):
    """The test of the noise a release's mean carries (docs/privacy_model.md#audits): the whitened residual
    ``w = F^+ (mean - offset - P C y_c)`` of the published mean against the noiseless value the audit
    recomputes from the model's clipped, centred outputs must look like a draw of ``N(0, I)``: ``||w||^2``
    within the two-sided chi-square interval of ``dof`` degrees of freedom at level ``false_alarm``.

    PRIVATE: ``statistic`` is a function of the noise that was drawn and of the private outputs; the
    outcome is for the data owner, not for publication."""

    outcome: str  #: "passed", "too little noise", "too much noise" or "not run"
    statistic: float  #: ``||w||^2`` (nan when not run)
    dof: int  #: the noise's rank: the chi-square's degrees of freedom (0 when not run)
    lower: float  #: the statistic must be >= this (the interval, widened for rounding and the sampler's grid)
    upper: float  #: ... and <= this
    false_alarm: float  #: the probability that an honest release fails this test
    note: str = ""  #: why it was not run, or what a failure means
    #: the part of a whole-row release tested (e.g. ``"b"``, ``"stage 3: residual b"``); "" for a release tested whole
    part: str = ""

    @property
    def ran(self) -> bool:
        return self.outcome != _NOT_RUN

    @property
    def failed(self) -> bool:
        return self.outcome not in ("passed", _NOT_RUN)


def _not_run(why: str, false_alarm: float = 0.0) -> NoiseTest:
    return NoiseTest(_NOT_RUN, math.nan, 0, math.nan, math.nan, false_alarm, why)


class ReleaseAudit(NamedTuple):
    """The audit of one Gaussian release."""

    mu: float  #: Gaussian-DP parameter achieved: ``d max_i ||F^+ c_i||`` with the model's ``d``
    epsilon: float  #: exact epsilon at ``delta``
    delta: float
    claimed_epsilon: float
    #: largest relative part of a column of ``C`` outside ``span(F)``: projected away by the release
    #: (a bias of the published values, not a privacy loss: the shift is ``d P c_i``)
    projected_fraction: float
    #: relative part of ``mean - offset`` outside ``span(F)`` (published without noise if not ~0)
    mean_outside: float
    passed: bool
    #: the test of the noise the mean carries (not run when the model's outputs are not given); of a whole-row
    #: release, its first failed part's test, else the parts' statistics and degrees of freedom summed (``lower``,
    #: ``upper``: nan, each part has its own interval)
    noise: NoiseTest = _not_run("the model's outputs were not given")
    #: a whole-row release's noise test of every part on its own (docs/whole_rows.md#the-audit); () otherwise
    noise_parts: Tuple[NoiseTest, ...] = ()


class AuditReport(NamedTuple):
    """The audit of a released object: one :class:`ReleaseAudit` per release, and their total."""

    releases: Tuple[ReleaseAudit, ...]
    epsilon: float  #: total achieved epsilon (basic composition of the releases)
    delta: float  #: total delta
    passed: bool
    #: the noise test of every release in one line: "passed", "failed: ...", "not run: ..." or
    #: "partly run: ..." (:class:`NoiseTest`; PRIVATE: it reads the private outputs)
    noise_test: str = _NOT_RUN


def _noise_summary(reports: Sequence[ReleaseAudit]) -> str:
    """One line for :attr:`AuditReport.noise_test`."""
    failed = [f"release {i}{', part ' + t.part if t.part else ''}: {t.outcome} ({t.note})"
              for i, r in enumerate(reports) for t in r.noise_parts or (r.noise,) if t.failed]
    if failed:
        return "failed: " + "; ".join(failed)
    skipped = [(i, r.noise.note) for i, r in enumerate(reports) if not r.noise.ran]
    if not skipped:
        return "passed"
    why = "; ".join(sorted({note for _, note in skipped}))
    if len(skipped) == len(reports):
        return f"not run: {why}"
    return f"partly run: releases {[i for i, _ in skipped]} not tested ({why}); the others passed"


def _noise_span(F: Any, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """Orthonormal basis ``U`` (k x r') of ``span(F)`` and its singular values; ``ValueError`` for a factor
    that is not a finite k x r matrix with r >= 1 and a non-zero column space."""
    F = np.asarray(F, dtype=np.float64)
    if F.ndim != 2 or F.shape[0] != k:
        raise ValueError(f"the noise factor must be a [{k}, r] matrix (one row per released value), got shape "
                         f"{list(F.shape)}")
    if F.shape[1] == 0:
        raise ValueError("the noise factor has no columns: the release claims no noise at all")
    if not np.all(np.isfinite(F)):
        raise ValueError("the noise factor is not finite")
    U, s = _span(F)
    if not s.size:
        raise ValueError("the noise factor is zero: the release claims no noise at all")
    return U, s


def _span(F: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Orthonormal basis of ``span(F)`` and its singular values, those below ``SPAN_RTOL`` of the largest
    cut (none for a zero ``F``)."""
    U, s, _ = np.linalg.svd(F, full_matrices=False)
    keep = s > s[0] * SPAN_RTOL if s.size and s[0] > 0 else np.zeros(s.size, dtype=bool)
    return U[:, keep], s[keep]


def _span_residual(U: np.ndarray, v: np.ndarray) -> float:
    """``||v - U U^T v||``: the part of ``v`` outside the span of the orthonormal ``U``."""
    return float(np.linalg.norm(v - U @ (U.T @ v)))


def noise_test(mean: np.ndarray, F: np.ndarray, U: np.ndarray, C: np.ndarray, offset: np.ndarray,
               y_centred: np.ndarray, inside: np.ndarray, false_alarm: float) -> NoiseTest:
    """The test of :class:`NoiseTest` for a release's (stacked) ``mean`` and noise factor ``F`` (orthonormal
    basis ``U`` of its span), the map ``C``, ``offset`` and the model's centred clipped outputs ``y_centred``;
    only the values ``inside`` are read (all, unless the release was clipped without its raw mean), and the
    noise is recovered from them when their rows of ``F`` have its full rank."""
    y = np.asarray(y_centred, dtype=np.float64).reshape(-1)
    if y.shape != (C.shape[1],) or not np.all(np.isfinite(y)):
        return _not_run(f"the model's outputs ({y.size}) do not match the map's {C.shape[1]} columns", false_alarm)
    noiseless = offset + U @ (U.T @ (C @ y))  # the query projected onto the directions the noise covers
    F_in = F[inside]
    Uf, sf, Vt = np.linalg.svd(F_in, full_matrices=False)
    s_all = np.linalg.svd(F, compute_uv=False)
    dof = int(np.sum(s_all > s_all[0] * SPAN_RTOL))
    kept = sf > s_all[0] * NOISE_RANK_RTOL
    if int(np.sum(kept)) < dof:
        return _not_run(f"only {int(inside.sum())} of {inside.size} values lie strictly inside the bounds (the others "
                        "were clipped and the raw mean is not in the release): too few to recover its noise",
                        false_alarm)
    Uf, sf = Uf[:, kept], sf[kept]
    w = (Uf.T @ (mean[inside] - noiseless[inside])) / sf  # [dof]: F_in^+ (mean - noiseless), the drawn noise
    statistic = float(w @ w)
    # allowance: the exact sampler rounds the whitened query to its grid (each coordinate by at most half a step)
    # and draws on it; floating point re-colours and whitens again
    size = float(np.linalg.norm((Uf.T @ (noiseless[inside] - offset[inside])) / sf)) + math.sqrt(dof)
    margin = math.sqrt(dof) * 2.0 ** GRID_EXPONENT + NOISE_RTOL * size
    lo_q = 2.0 * float(special.gammaincinv(dof / 2.0, false_alarm / 2.0))
    hi_q = 2.0 * float(special.gammainccinv(dof / 2.0, false_alarm / 2.0))
    lower = max(math.sqrt(lo_q) - margin, 0.0) ** 2
    upper = (math.sqrt(hi_q) + margin) ** 2
    if statistic < lower:
        return NoiseTest("too little noise", statistic, dof, lower, upper, false_alarm,
                         f"||w||^2 = {statistic:.6g} below {lower:.6g}: the published mean is closer to the noiseless "
                         "value than the claimed noise allows (no noise, or less than the noise factor says)")
    if statistic > upper:
        return NoiseTest("too much noise", statistic, dof, lower, upper, false_alarm,
                         f"||w||^2 = {statistic:.6g} above {upper:.6g}: the published mean is farther from this "
                         "model's noiseless value than the claimed noise explains (more noise than claimed, or a release made "
                         "from other outputs, inputs or hyperparameters than this model's)")
    return NoiseTest("passed", statistic, dof, lower, upper, false_alarm)


def audit_release(release: PrivateRelease, C: Any, *, data_sensitivity: float, offset: Any,
                  neighbours: Optional[Neighbours] = None, y_centred: Optional[Any] = None,
                  false_alarm: float = NOISE_FALSE_ALARM, no_outputs: str = "") -> ReleaseAudit:
    """Audit one release against the public map ``C`` (k x n) and ``offset`` (k) it was computed with and
    the model's data sensitivity ``d`` (module docstring: what this can and cannot establish); ``neighbours``:
    the model's neighbour map of persons (None: one row per person). With the model's PRIVATE centred clipped
    outputs ``y_centred`` ([n], stacked for several outputs) the noise the mean carries is tested at level
    ``false_alarm`` (:class:`NoiseTest`); without them (``no_outputs``: why) the test is reported not run."""
    C = np.asarray(C, dtype=np.float64)
    if C.ndim != 2 or not np.all(np.isfinite(C)):
        raise ValueError(f"the map must be a finite [k, n] matrix, got shape {list(C.shape)}")
    k = C.shape[0]
    d = float(data_sensitivity)
    if not (math.isfinite(d) and d > 0.0):
        raise ValueError(f"the model's data sensitivity must be finite and > 0, got {d}")
    if release.clip_to_bounds:
        try:
            release = release.unclipped()  # the raw DP mean (every release made in memory keeps it): in full
        except ValueError:
            pass  # saved clipped, the raw mean not kept: the values strictly inside the bounds, below
    mean = np.asarray(release.mean, dtype=np.float64)
    inside = np.ones(mean.shape, dtype=bool)
    if release.clip_to_bounds and release.y_bounds is not None:  # clipped, raw not kept (a file saved clipped):
        lo, hi = bound_columns(release.y_bounds)  # per output: [P] against the [k, P] mean
        inside = (mean > lo) & (mean < hi)  # check the values strictly inside
    if mean.ndim == 2:  # [k, P]: the stacked release (docs/guides/multi_output.md); [k] for one output
        mean, inside = stacked(mean).numpy(), stacked(inside.astype(np.float64)).numpy() > 0.0
    offset = np.asarray(offset, dtype=np.float64).reshape(-1)
    if mean.shape != (k,) or offset.shape != (k,):
        raise ValueError(f"the map has {k} rows but the release has mean {list(mean.shape)} and offset "
                         f"{list(offset.shape)}")
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(offset))):
        raise ValueError("the released mean (or the model's offset) is not finite")
    U, s = _noise_span(release.noise_factor, k)
    centred = mean - offset
    if inside.all():
        outside_mean = _span_residual(U, centred)
    else:  # the span of the rows kept
        rows = np.asarray(release.noise_factor, dtype=np.float64)[inside]
        outside_mean = _span_residual(_span(rows)[0], centred[inside]) if inside.any() else 0.0
    mean_outside = float(outside_mean / max(np.linalg.norm(centred) + np.linalg.norm(offset), np.finfo(float).tiny))
    coords = U.T @ C  # [r, n]
    norms = np.linalg.norm(C, axis=0)
    outside = np.linalg.norm(C - U @ coords, axis=0)
    projected = float(np.max(np.where(norms > 0, outside / np.where(norms > 0, norms, 1.0), 0.0), initial=0.0))
    if neighbours is not None:
        if neighbours.size != C.shape[1]:
            raise ValueError(f"the model has {neighbours.size} rows of groups but the map {C.shape[1]} columns")
        coords = np.asarray((neighbours.matrix().T @ coords.T).T)  # [r, N_c]: every extreme change of a person
    mu = float(d * np.max(np.linalg.norm(coords / s[:, None], axis=0), initial=0.0))
    epsilon = analytic_gaussian_epsilon(mu, release.delta)
    if y_centred is None:
        noise = _not_run(no_outputs or "the model's outputs were not given", false_alarm)
    else:
        noise = noise_test(mean, np.asarray(release.noise_factor, dtype=np.float64), U, C, offset, y_centred, inside,
                           false_alarm)
    passed = epsilon <= release.epsilon * (1.0 + AUDIT_RTOL) and mean_outside <= MEAN_SPAN_RTOL and not noise.failed
    return ReleaseAudit(mu, float(epsilon), float(release.delta), float(release.epsilon), projected, mean_outside,
                        bool(passed), noise)


def _newton_offsets(model: Any, releases: Tuple[PrivateRelease, ...]) -> List[np.ndarray]:
    """The public offset of each Newton step of a multi-step classifier release (``release_maps``):
    ``model.release_offsets(releases)`` if the model offers it, else ``b_t`` of
    :func:`~dpgp_gpflow.models.laplace.newton_step_cloaking` at the released latents of step ``t - 1``
    (``0`` for the first step from ``f0 = 0``)."""
    offsets = getattr(model, "release_offsets", None)
    if offsets is not None:
        return [np.asarray(b, dtype=np.float64).reshape(-1) for b in offsets(releases)]
    X = model.data[0]
    K = model.kernel(X)
    out = [np.zeros(int(X.shape[0]))]
    for rel in releases[:-1]:
        out.append(newton_step_cloaking(K, tf.constant(rel.mean))[1].numpy()[:, 0])
    return out


def _terms(released: Released, model: Any, Xnew: Any) -> List[Tuple[np.ndarray, np.ndarray]]:
    """The public map and offset of each release in ``released``, recomputed from ``model``."""
    if isinstance(released, PrivateRelease):
        if Xnew is None:
            raise ValueError("pass the inputs the release was made at (Xnew=...)")
        terms = model.release_terms(tf.constant(np.asarray(Xnew, dtype=np.float64)))
        return [(dense_map(terms.map).numpy(), np.asarray(terms.offset, dtype=np.float64))]
    if hasattr(model, "release_maps"):  # releases whose later maps depend on earlier releases (Newton steps)
        maps = [np.asarray(C) for C in model.release_maps(released.releases)]
        return list(zip(maps, _newton_offsets(model, released.releases)))
    if isinstance(released, PrivateFunction) and isinstance(model, FactoredPrivateModel):
        latent = model.latent_terms()
        B = dense_map(latent.map).numpy()
        R = released.coordinates
        # the release of R u keeps the latents' offset (dpgp_gpflow.pipeline.release_function)
        return [(B if R is None else R.numpy() @ B, np.asarray(latent.offset, dtype=np.float64))]
    raise TypeError(f"cannot recompute the maps of a {type(released).__name__} from a {type(model).__name__}")


def audit(released: Released, model: PrivateModel, Xnew: Optional[Any] = None) -> AuditReport:
    """Recompute the (epsilon, delta) that ``released`` achieves from its published noise factors and
    ``model``'s public maps, offsets and data sensitivity ``model.data_sensitivity``, over all neighbours;
    ``passed`` when no release exceeds its claim, every released mean lies in the span its noise covers and
    no noise test fails: each release's mean is tested against the noiseless value recomputed from the
    model's PRIVATE outputs (``model.centred_outputs()``; :class:`NoiseTest`, module docstring), at
    false-alarm rate :data:`NOISE_FALSE_ALARM` for the whole call; ``noise_test`` says in one line whether it
    passed, failed or could not be run (and why). A model's public ``groups`` (persons) are read from the
    model and every person's box is audited. ``Xnew``: the inputs of a
    :class:`~dpgp_gpflow.released.PrivateRelease`. ``ValueError`` for a malformed release (noise factor
    without columns, not finite or of the wrong shape).

    An object whose releases compose in Gaussian DP (a :class:`~dpgp_gpflow.models.PrivateMulticlassClassifier`
    and its one-vs-rest model) is audited part by part (every class's steps against that class's problem)
    and as a whole: ``epsilon`` is then the whole's, from the ``mu`` its releases' audited ``mu`` compose to
    (:meth:`~dpgp_gpflow.released.Released.audited_mu`), at its ``delta``, and ``passed`` when it is within
    the claim, every released mean lies in the span its noise covers and no noise test fails."""
    if not isinstance(released, Released):
        raise TypeError(f"expected a released object, got {type(released).__name__}")
    if isinstance(released, (WholeRowsRelease, WholeRowsClassifier, ResidualRelease,
                             HistogramResidualRelease)):  # the statistics' own audit
        return _audit_whole_rows(released, model)
    parts = released.audit_parts(model)
    false_alarm = NOISE_FALSE_ALARM / max(sum(len(part.releases) for part, _ in parts), 1)  # shared by the releases
    reports: List[ReleaseAudit] = []
    for part, part_model in parts:
        d = float(part_model.data_sensitivity)
        terms = _terms(part, part_model, Xnew)
        if len(terms) != len(part.releases):
            raise ValueError(f"the model gives {len(terms)} maps for {len(part.releases)} releases")
        y, why = _centred_outputs(part_model)
        reports += [audit_release(r, C, data_sensitivity=d, offset=b,
                                  neighbours=model_neighbours(part_model, C.shape[1]), y_centred=y,
                                  false_alarm=false_alarm, no_outputs=why)
                    for r, (C, b) in zip(part.releases, terms)]
    noise = _noise_summary(reports)
    mu = released.audited_mu(model, [r.mu for r in reports])
    if mu is None:  # basic composition: each release against its own claim
        return AuditReport(tuple(reports), math.fsum(r.epsilon for r in reports), math.fsum(r.delta for r in reports),
                           all(r.passed for r in reports), noise)
    epsilon = float(analytic_gaussian_epsilon(mu, released.delta))
    passed = (epsilon <= released.epsilon * (1.0 + AUDIT_RTOL)
              and all(r.mean_outside <= MEAN_SPAN_RTOL and not r.noise.failed for r in reports))
    return AuditReport(tuple(reports), epsilon, float(released.delta), bool(passed), noise)


def _audit_whole_rows(release: Any, model: Any) -> AuditReport:
    """:func:`audit` of a whole-row release (docs/guides/whole_rows.md): ``mu`` from the model's bounds and persons
    and the noise each part of the statistics actually carries, never the release's sensitivity
    (:func:`~dpgp_gpflow.whole_rows.audit.whole_rows_audit`); its epsilon at the release's delta must not exceed
    the claim; the noise test of the released statistics against those of the model's rows (PRIVATE), every
    entry whitened by its noise (so ``F = I``), part by part (:func:`_part_tests`)."""
    pieces = (residual_audit(release, model) if isinstance(release, ResidualRelease)  # every stage, composed
              else histogram_audit(release, model) if isinstance(release, HistogramResidualRelease)
              else whole_rows_audit(release, model))
    epsilon = float(analytic_gaussian_epsilon(pieces.mu, release.delta))
    tests = _part_tests(pieces.parts)
    noise = next((t for t in tests if t.failed), None) or NoiseTest(
        "passed", math.fsum(t.statistic for t in tests), sum(t.dof for t in tests), math.nan, math.nan,
        NOISE_FALSE_ALARM, f"each of its {len(tests)} parts within its own interval", "every part")
    passed = epsilon <= release.epsilon * (1.0 + AUDIT_RTOL) and not noise.failed
    report = ReleaseAudit(pieces.mu, epsilon, release.delta, release.epsilon, 0.0, 0.0, bool(passed), noise, tests)
    return AuditReport((report,), epsilon, release.delta, bool(passed), _noise_summary((report,)))


def _part_tests(parts: Sequence[AuditPart]) -> Tuple[NoiseTest, ...]:
    """The noise test of every part of a whole-row release on its own (docs/whole_rows.md#the-audit), at
    :data:`NOISE_FALSE_ALARM` shared equally by the parts (Bonferroni: an honest release fails one with probability
    at most :data:`NOISE_FALSE_ALARM`). One test over all parts together would pass a part published exactly (no
    noise) whose missing noise was added to another part; tested apart, that part falls below its interval."""
    false_alarm = NOISE_FALSE_ALARM / max(len(parts), 1)
    tests = []
    for part in parts:
        k = part.released.size
        eye = np.eye(k)
        tests.append(noise_test(part.released, eye, eye, eye, np.zeros(k), part.recomputed, np.ones(k, dtype=bool),
                                false_alarm)._replace(part=part.name))
    return tuple(tests)


def _centred_outputs(model: Any) -> Tuple[Optional[np.ndarray], str]:
    """PRIVATE: ``model.centred_outputs()`` (the clipped outputs minus the public prior mean, as every release
    reads them) for the noise test, or None and why the audit cannot read them."""
    read = getattr(model, "centred_outputs", None)
    if read is None:
        return None, f"{type(model).__name__} does not give its outputs (centred_outputs)"
    try:
        return np.asarray(read(), dtype=np.float64).reshape(-1), ""
    except Exception as exc:  # e.g. outputs that are not in memory: reported, never a silent pass
        return None, f"the model's outputs could not be read ({type(exc).__name__}: {exc})"
