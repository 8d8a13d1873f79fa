"""Reading the release file of a multi-class release (docs/release_file.md#several-classes):
:func:`multiclass_releases_of_document` checks every step's release for meaning and recomputes the whole
guarantee (:class:`MulticlassGuarantee`) from the card's public counts, never reading it; what
:func:`dpgp_gpflow.load` and :func:`dpgp_gpflow.io.loading.read_card` run for a
``PrivateMulticlassClassifier`` file (its object is rebuilt by
:meth:`~dpgp_gpflow.models.multiclass_classifier.PrivateMulticlassClassifier.from_release_document`).

Privacy assumption: the card is a claim of whoever wrote the file; these checks make it consistent with the
steps' published multipliers and relations (docs/mechanisms.md#several-classes), not a proof.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple, Tuple

from ..calibration import gaussian_multiplier
from ..io.format import ReleaseDocument, ReleaseFileError
from ..released import PrivateRelease, check_reproducible
from ..validation import validate_delta, validate_epsilon
from .one_vs_rest import class_relation, classes_moved, multiclass_step_multiplier, rows_relation

__all__ = ["MulticlassGuarantee", "multiclass_releases_of_document"]


class MulticlassGuarantee(NamedTuple):
    """The whole guarantee of a multi-class release file, as checked by :func:`multiclass_releases_of_document`."""

    epsilon: float
    delta: float
    mu: float  #: ``1 / s(epsilon, delta)``, recomputed
    num_classes: int
    steps: int
    person_rows: int


#: Relative tolerance of the recomputed multipliers and ``mu`` against the recorded ones.
_RECOMPUTED_RTOL = 1e-9


def _card_int(card: Mapping[str, Any], name: str, least: int) -> int:
    value = card.get(name)
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= least):
        raise ReleaseFileError(f"card.{name} must be an integer >= {least}, got {value!r}")
    return value


def multiclass_releases_of_document(document: ReleaseDocument) -> Tuple[Tuple[PrivateRelease, ...], MulticlassGuarantee]:
    """Every release of a verified ``PrivateMulticlassClassifier`` file, each checked for meaning
    (:meth:`~dpgp_gpflow.released.PrivateRelease.from_release_card`), and the whole guarantee recomputed from
    the card's ``epsilon``, ``delta``, ``num_classes`` K, ``steps`` T and ``person_rows`` g, never read:
    ``mu = 1 / s(epsilon, delta)`` (analytic), ``classes_moved = min(K, 2g)``, the relation, and every
    release a cloaking step at ``delta`` with multiplier ``sqrt(m T) s`` and the problems' relation; so the
    K T steps compose to ``mu`` (docs/mechanisms.md#several-classes). ``ReleaseFileError`` naming the field."""
    card = document.card
    if card.get("composition") != "gaussian-dp":
        raise ReleaseFileError(f"card.composition must be 'gaussian-dp', got {card.get('composition')!r}")
    K, steps, g = _card_int(card, "num_classes", 2), _card_int(card, "steps", 1), _card_int(card, "person_rows", 1)
    entries = card.get("releases")
    if not isinstance(entries, list) or len(entries) != K * steps:
        raise ReleaseFileError(f"card.releases must be a list of num_classes x steps = {K * steps} releases")
    releases = tuple(PrivateRelease.from_release_card(e, document.arrays, f"releases/{i}/") for i, e in enumerate(entries))
    try:
        epsilon, delta = validate_epsilon(card.get("epsilon")), validate_delta(card.get("delta"))
        s = gaussian_multiplier(epsilon, delta, "analytic")
    except (TypeError, ValueError) as exc:
        raise ReleaseFileError(f"card.epsilon / card.delta: {exc}") from None
    mu = card.get("mu")
    if not (isinstance(mu, float) and math.isclose(mu, 1.0 / s, rel_tol=_RECOMPUTED_RTOL)):
        raise ReleaseFileError(f"card.mu {mu!r} is not 1 / s(epsilon, delta) = {1.0 / s!r} (analytic)")
    moved = classes_moved(K, g)
    if card.get("classes_moved") != moved:
        raise ReleaseFileError(f"card.classes_moved {card.get('classes_moved')!r} is not min(num_classes, 2 person_rows) "
                               f"= {moved}")
    if card.get("neighbours") != class_relation(g):
        raise ReleaseFileError(f"card.neighbours {card.get('neighbours')!r} is not {class_relation(g)!r} (person_rows {g})")
    step = multiclass_step_multiplier(s, steps, moved)
    for i, r in enumerate(releases):
        where = f"card.releases[{i}]"
        if (r.mechanism, r.calibration) != ("cloaking", "analytic"):
            raise ReleaseFileError(f"{where}: a multi-class step is an analytic cloaking release, got {r.mechanism!r} "
                                   f"and {r.calibration!r}")
        if r.delta != delta:
            raise ReleaseFileError(f"{where}.delta {r.delta!r} is not the release's delta {delta!r}")
        if not math.isclose(r.noise_multiplier, step, rel_tol=_RECOMPUTED_RTOL):
            raise ReleaseFileError(f"{where}.noise_multiplier {r.noise_multiplier!r} is not sqrt({moved} x {steps}) "
                                   f"s(epsilon, delta) = {step!r}")
        if r.neighbours != rows_relation(g):
            raise ReleaseFileError(f"{where}.neighbours {r.neighbours!r} is not {rows_relation(g)!r}")
    check_reproducible(card, releases)
    if card.get("clip_to_bounds", False) is not False:
        raise ReleaseFileError("card.clip_to_bounds must be false: a classifier's latents are never clipped")
    return releases, MulticlassGuarantee(epsilon, delta, mu, K, steps, g)
