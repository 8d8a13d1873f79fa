"""The audit of a whole-row release (:func:`dpgp_gpflow.audit` builds its report from :func:`whole_rows_audit`): the privacy its noise achieves,
recomputed from the model and the noise actually added, never from the release's claimed sensitivity.

A whole-row release adds independent Gaussian noise to the entries of ``(S, b, q)`` (``S`` through its upper
triangle). Whitening each part by the noise of its entries, a whole-row neighbour moves the whitened vector by
at most (docs/whole_rows.md#sensitivity, :func:`~dpgp_gpflow.whole_rows.bounds.joint_bound`)

    mu = G sqrt(B T J(a_S^2 / T, a_b^2 / T, a_q^2 / T)),   a_S = sqrt(2) / sigma_S,  a_b = d / sigma_b,
    a_q = (d^2 / 4) / sigma_q,  T = a_S^2 + a_b^2 + a_q^2

(``sigma_S`` the std of a diagonal entry of ``S``'s noise, the off-diagonal ones ``sigma_S / sqrt(2)``; ``d`` the
model's bounds' width; ``G`` the model's largest person; ``B`` the candidates released together), times the
features' rounding ``(1 + (M + 4) u)^2``. The release's shares and sensitivity are not read: the shares the
noise actually gives are. The epsilon of a Gaussian mechanism of that ``mu`` at the release's delta must not
exceed its claim. What the release predicts from (its weights' posterior) must be the one its released
statistics give (:func:`released_posterior`: regularised, at its stated variances or fitted on the release), else
its predictions are not post-processing of this release and it is refused. The noise test (PRIVATE: it reads the
model's rows) recomputes the statistics from the model's rows; :func:`dpgp_gpflow.audit` checks, part by part
(:class:`AuditPart`: ``S``, ``b`` and ``q`` of every candidate or class block, every later stage), that the released
ones differ from them by a draw of the noise described (docs/whole_rows.md#the-audit).

Privacy assumption of the audit itself: the model holds the rows, kernel, inducing inputs, box and bounds the
release was made from; its outcome is for the data owner.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, NamedTuple, Tuple

import numpy as np
import tensorflow as tf

from ..io.gpflow_specs import kernel_spec
from ..relations import largest_person
from ..sampling import UNIT_ROUNDOFF
from ..streaming.chunks import DEFAULT_CHUNK_SIZE
from .bounds import joint_bound, part_bounds
from .classification import (LABEL_BOUNDS, LabelStatistics, OneVsRestStatistics, WholeRowsClassifier,
                             classifier_posteriors)
from .design import validate_box
from .features import kernel_bound
from .lengthscales import choose
from .posterior import WeightPosterior, regularised_release, weight_posterior
from .release import model_rows
from .statistics import RowStatistics, grid_statistics, sufficient_statistics
from .variances import fit_variances

__all__: List[str] = []  # internal: dpgp_gpflow.audit calls whole_rows_audit

#: Relative spread allowed between the noise std of entries that the mechanism gives the same noise.
STD_RTOL = 1e-12
#: Relative difference allowed between what a release predicts from (its weights, their Cholesky factor, its
#: variances) and the same recomputed from its released statistics (relative to each array's largest entry).
PREDICTION_RTOL = 1e-9


def same_as_released(claimed: Any, recomputed: Any, what: str) -> None:
    """``ValueError`` unless ``claimed`` (what a release predicts from) is ``recomputed`` (the same from its
    released statistics) within :data:`PREDICTION_RTOL`: else its predictions are not post-processing of it."""
    a, b = np.asarray(claimed, dtype=np.float64), np.asarray(recomputed, dtype=np.float64)
    scale = max(float(np.max(np.abs(b))) if b.size else 0.0, float(np.finfo(np.float64).tiny))
    if a.shape != b.shape or not np.all(np.abs(a - b) <= PREDICTION_RTOL * scale):
        raise ValueError(f"the release's {what} is not the one its released statistics give: its predictions are not "
                         "post-processing of this release")


def released_posterior(release: Any, model: Any, box: np.ndarray) -> Tuple[tf.Tensor, WeightPosterior]:
    """``(S^, the weights' posterior)`` recomputed from a whole-row release's released statistics and their noise
    std (:func:`~.posterior.regularised_release`; never the object's own ``S^``) at the kernel and noise variances
    the release states (public: any given pair is post-processing, e.g. ``with_variances``), or, for a release whose
    variances were fitted, both fitted again on the released statistics (:func:`~.variances.fit_variances`)."""
    statistics, std = release.statistics, release.statistics_noise_std
    regularised = regularised_release(statistics["S"], std["S"])
    b_std = float(np.asarray(std["b"])[0])
    if release.variances == "fit":
        lo, hi = (float(v) for v in model.y_bounds)
        kernel_variance, noise_variance = fit_variances(
            regularised.S_hat, statistics["b"], float(statistics["q"]), float(np.trace(statistics["S"])),
            int(release.num_data), b_std, hi - lo, q_std=float(np.asarray(std["q"])),
            offdiag_std=regularised.offdiag_std)
    else:  # the variances the release states (public; any given pair is post-processing, e.g. with_variances)
        kernel_variance, noise_variance = float(release.kernel_variance), float(release.noise_variance)
    return regularised.S_hat, weight_posterior(regularised.S_hat, tf.constant(statistics["b"]),
                                               kernel_variance=kernel_variance, noise_variance=noise_variance,
                                               b_std=b_std, offdiag_std=regularised.offdiag_std)


def check_posterior(claimed: WeightPosterior, recomputed: WeightPosterior) -> None:
    """``ValueError`` unless a release's weights' posterior (what ``predict_f`` reads) is ``recomputed``
    (:func:`released_posterior`, or a residual release's replay): its mean, Cholesky factor, variances and noise
    stds."""
    same_as_released(claimed.mean, recomputed.mean, "weights' mean")
    same_as_released(claimed.chol, recomputed.chol, "Cholesky factor")
    for what in ("kernel_variance", "noise_variance", "b_std", "offdiag_std"):
        same_as_released(getattr(claimed, what), getattr(recomputed, what), what.replace("_", " "))


def check_chosen(release: Any) -> None:
    """``ValueError`` unless a lengthscale-grid release predicts from its chosen candidate: the candidate with the
    largest SGPR bound on its released statistics (:func:`~.lengthscales.choose`, recomputed here, never read from
    ``selection``), whose statistics and features (kernel, ``Z``, ``k_max``, jitter) must be the release's."""
    if not release.candidates:
        return
    chosen = choose([c.bound() for c in release.candidates])
    c = release.candidates[chosen]
    ours, theirs = release.features, c.features
    if (kernel_spec(ours.kernel) != kernel_spec(theirs.kernel) or not np.array_equal(ours.Z, theirs.Z)
            or (ours.k_max, ours.jitter) != (theirs.k_max, theirs.jitter)
            or any(not np.array_equal(v, c.statistics[k]) for k, v in release.statistics.items())):
        raise ValueError(f"the release's features or statistics are not its chosen candidate's ({chosen}: the "
                         "largest SGPR bound on the released statistics): its predictions are not post-processing "
                         "of the choice")


def _part_stds(release: Any) -> Dict[str, float]:
    """The noise std of each part's entries of a whole-row release (``S``: a diagonal entry's)
    (:func:`_block_stds`)."""
    return _block_stds(release.statistics_noise_std, release.features.m)


def _block_stds(std: Dict[str, Any], m: int) -> Dict[str, float]:
    """The noise std of each part's entries of one block ``std`` (``S``: a diagonal entry's), checked to be the
    one structure the mechanism adds (off-diagonal ``S`` entries ``1 / sqrt(2)`` of the diagonal's, each part's
    entries equal); ``ValueError`` otherwise."""
    S = np.asarray(std["S"])
    diagonal = float(S[0, 0])
    expected = np.full((m, m), diagonal / math.sqrt(2.0))
    np.fill_diagonal(expected, diagonal)
    out = {"S": diagonal, "b": float(np.asarray(std["b"])[0]), "q": float(std["q"])}
    if (not all(math.isfinite(v) and v > 0.0 for v in out.values())
            or not np.allclose(S, expected, rtol=STD_RTOL, atol=0.0)
            or not np.allclose(std["b"], out["b"], rtol=STD_RTOL, atol=0.0)):
        raise ValueError("the release's statistics_noise_std is not one Gaussian noise per part (S's off-diagonal "
                         "entries 1 / sqrt(2) of its diagonal's): it cannot be audited as a whole-row release")
    return out


def audited_mu(release: Any, width: float, person_rows: int) -> float:
    """``mu`` of the module docstring: the largest whitened shift between neighbours that differ in one person
    of at most ``person_rows`` rows (outputs of bounds' ``width``), from the noise actually added. Public."""
    return _mu(_part_stds(release), width, person_rows, max(len(release.candidates), 1), release.features.m)


def _mu(stds: Dict[str, float], width: float, person_rows: int, blocks: int, m: int) -> float:
    """``mu`` of ``blocks`` blocks each carrying the part noise ``stds`` (:func:`audited_mu`)."""
    a2 = [(bound / stds[p]) ** 2 for p, bound in zip("Sbq", part_bounds(width))]
    total = math.fsum(a2)
    rounding = (1.0 + (m + 4) * UNIT_ROUNDOFF) ** 2
    return person_rows * math.sqrt(blocks * total * joint_bound(a2)) * rounding


def check_kernel_bound(features: Any, box: np.ndarray) -> None:
    """``ValueError`` unless the release's ``k_max`` is its kernel's public bound on ``k(x, x)`` over the model's
    box, recomputed here (:func:`~dpgp_gpflow.whole_rows.features.kernel_bound`), never read from the release."""
    expected = kernel_bound(features.kernel, box)
    if not math.isclose(float(features.k_max), expected, rel_tol=1e-12):
        raise ValueError(f"the release's k_max {float(features.k_max):.17g} is not its kernel's bound on k(x, x) over "
                         f"the model's box, {expected:.17g}: audit it against the model it was released from")


class AuditPart(NamedTuple):
    """One part of a whole-row release that the noise test checks on its own (docs/whole_rows.md#the-audit): its
    released entries and those recomputed from the model's rows (PRIVATE), each divided by its noise std."""

    name: str  #: e.g. ``"b"``, ``"candidate 1: S"``, ``"class 2: q"``, ``"stage 3: residual b"``, ``"stage 1: counts"``
    released: np.ndarray
    recomputed: np.ndarray


def block_parts(std: Dict[str, Any], released: Dict[str, Any], exact: Any, m: int, prefix: str = "") -> List[AuditPart]:
    """The parts ``S`` (through its upper triangle), ``b`` and ``q`` of one block: its ``released`` statistics and the
    ``exact`` ones (``.S``, ``.b``, ``.q``: the model's rows' sums, PRIVATE), each entry divided by its noise std
    ``std``; named ``prefix`` + the part."""
    upper = np.triu_indices(m)
    recomputed = {"S": exact.S, "b": exact.b, "q": exact.q}

    def whitened(statistics: Dict[str, Any], part: str) -> np.ndarray:
        value, noise = np.asarray(statistics[part]), np.asarray(std[part])
        return np.reshape(value[upper] / noise[upper] if part == "S" else value / noise, [-1])

    return [AuditPart(prefix + part, whitened(released, part), whitened(recomputed, part)) for part in "Sbq"]


def staged(prefix: str, parts: List[AuditPart]) -> List[AuditPart]:
    """``parts`` renamed ``prefix: name`` (a stage's parts)."""
    return [part._replace(name=f"{prefix}: {part.name}") for part in parts]


class WholeRowsAudit(NamedTuple):
    """What :func:`dpgp_gpflow.audit` needs of a whole-row release (it builds the report): ``mu`` and every part of
    the released statistics with its recomputed one (:class:`AuditPart`; every candidate's, class's and stage's
    parts), each tested on its own."""

    mu: float
    parts: Tuple[AuditPart, ...]


def whole_rows_audit(release: Any, model: Any) -> WholeRowsAudit:
    """The audit's pieces of a whole-row release against the ``DPSGPR(..., private_inputs=True)`` it was released
    from: ``mu`` from the model's bounds and persons and the noise added (:func:`audited_mu`), and every
    candidate's parts (``S``, ``b``, ``q``), released and recomputed from the model's rows (PRIVATE), whitened by the
    noise. ``ValueError`` when the model is not one with private inputs or its public pieces (``Z``, box, bounds) are not
    the release's. A :class:`~.classification.WholeRowsClassifier` is audited by :func:`classifier_audit`."""
    if isinstance(release, WholeRowsClassifier):
        return classifier_audit(release, model)
    if not getattr(model, "private_inputs", False):
        raise ValueError("a whole-row release is audited against the DPSGPR(..., private_inputs=True) it was "
                         "released from")
    Z = np.asarray(model.inducing_variable.Z.numpy(), dtype=np.float64)
    box = validate_box(model.x_bounds, Z.shape[1])
    lo, hi = (float(v) for v in model.y_bounds)
    if (not np.array_equal(Z, release.features.Z) or not np.array_equal(box, release.x_bounds)
            or (lo, hi) != release.y_bounds):
        raise ValueError("the model's inducing inputs, box or bounds are not the release's: audit it against the "
                         "model it was released from")
    mu = audited_mu(release, hi - lo, largest_person(getattr(model, "groups", None)))
    check_chosen(release)  # a grid's release is its chosen candidate's: its k_max is checked with the candidates'
    # what predict_f reads must be post-processing of the released statistics (a copy could carry other weights)
    check_posterior(release.posterior, released_posterior(release, model, box)[1])
    source, _ = model_rows(model, None, DEFAULT_CHUNK_SIZE)
    parts: List[AuditPart] = []
    for i, c in enumerate(release.candidates or (release,)):
        check_kernel_bound(c.features, box)
        exact = sufficient_statistics(source, RowStatistics(c.features, box, (lo, hi), clip_inputs=model.clip_inputs))
        parts += block_parts(c.statistics_noise_std, c.statistics, exact, c.features.m,
                             f"candidate {i}: " if release.candidates else "")
    return WholeRowsAudit(mu, tuple(parts))


def _blocks(parts: Dict[str, Any], B: int) -> List[Dict[str, np.ndarray]]:
    """A classifier's statistics (or noise std) block by block: as they are for one block, else along axis 0."""
    return [{k: np.asarray(v) if B == 1 else np.asarray(v)[a] for k, v in parts.items()} for a in range(B)]


def classifier_audit(release: Any, model: Any) -> WholeRowsAudit:
    """The audit's pieces of a :class:`~.classification.WholeRowsClassifier` against the sparse Laplace classifier
    (``private_inputs=True``) it was released from: ``mu`` of the module docstring with the labels' width
    ``d = 2``, ``G`` the model's largest person and ``B`` the model's number of blocks (1 binary, K one-vs-rest),
    from the noise each block actually carries (every block's checked to be one structure; never the release's
    sensitivity or shares); every block's statistics, released and recomputed from the model's rows (PRIVATE),
    whitened. What its predictions read (each block's weights' posterior) must be the one its released statistics
    give (:func:`~.classification.classifier_posteriors`), else it is refused. ``ValueError`` when the model is not one with private inputs or its public pieces (``Z``, box,
    number of classes) are not the release's."""
    if not getattr(model, "private_inputs", False):
        raise ValueError("a whole-row classifier is audited against the sparse Laplace classifier "
                         "(private_inputs=True) it was released from")
    first = getattr(model, "problems", (model,))[0]
    num_classes = getattr(model, "num_classes", None)
    m = release.features.m
    Z = np.asarray(first.inducing_variable.Z.numpy(), dtype=np.float64)
    box = validate_box(first.x_bounds, Z.shape[1])
    if (num_classes != release.num_classes or not np.array_equal(Z, release.features.Z)
            or not np.array_equal(box, release.x_bounds)):
        raise ValueError("the model's number of classes, inducing inputs or box are not the release's: audit it "
                         "against the model it was released from")
    check_kernel_bound(release.features, box)
    B = 1 if num_classes is None else int(num_classes)
    std = release.statistics_noise_std
    stds = _blocks(std, B)
    parts = [_block_stds(s, m) for s in stds]
    if not all(np.allclose(list(p.values()), list(parts[0].values()), rtol=STD_RTOL, atol=0.0) for p in parts):
        raise ValueError("the release's blocks do not carry the same noise: it cannot be audited as a whole-row "
                         "classifier")
    # what predict_f reads must be post-processing of the released statistics (a copy could carry other weights)
    recomputed_posteriors = classifier_posteriors(release.statistics, std, float(release.features.k_max), B)[3]
    if len(release.posteriors) != B:
        raise ValueError(f"the release has {len(release.posteriors)} weights' posteriors for its {B} blocks")
    for claimed, posterior in zip(release.posteriors, recomputed_posteriors):
        check_posterior(claimed, posterior)
    source, groups = model_rows(model, None, DEFAULT_CHUNK_SIZE)
    lo, hi = LABEL_BOUNDS
    mu = _mu(parts[0], hi - lo, largest_person(groups), B, m)
    exact: Tuple[Any, ...]
    if num_classes is None:
        exact = (sufficient_statistics(source, LabelStatistics(release.features, box, clip_inputs=first.clip_inputs)),)
    else:
        exact = grid_statistics(source, OneVsRestStatistics([
            LabelStatistics(release.features, box, label=a, num_classes=B, clip_inputs=first.clip_inputs)
            for a in range(B)]))
    tested = [part for a, (s, r, e) in enumerate(zip(stds, _blocks(release.statistics, B), exact))
              for part in block_parts(s, r, e, m, "" if num_classes is None else f"class {a}: ")]
    return WholeRowsAudit(mu, tuple(tested))
