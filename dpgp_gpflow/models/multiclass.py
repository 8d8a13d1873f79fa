"""DP Laplace GP classification of several classes, one-vs-rest (docs/mechanisms.md#several-classes,
docs/guides/multiclass.md).

Labels are integers ``0 .. K-1`` and private; inputs, kernel hyperparameters and inducing inputs are
public. Neighbouring datasets differ in one row's label, moved from a class ``a`` to a class ``b``; with
public ``groups`` (persons, docs/guides/groups.md) in the labels of all of one person's rows, each row's
label moved to any class (each row its own move).

The model holds K binary problems on the same public ``X`` and kernel, ``y_a = +1`` where the label is
``a`` and ``-1`` elsewhere (the binary models' convention, d = 2): :class:`DPMulticlassLaplaceGPC` on
:class:`~dpgp_gpflow.models.DPLaplaceGPC` (T cloaked Newton steps each), :class:`DPSparseMulticlassLaplaceGPC`
on :class:`~dpgp_gpflow.models.DPSparseLaplaceGPC` (SoR, one step; also from streamed rows,
:meth:`DPSparseMulticlassLaplaceGPC.release_streamed`). A label move ``a -> b`` changes exactly
two problems, ``y_a`` and ``y_b``, each in one row by d; the other K - 2 problems are identical.

Privacy (Gaussian DP): each binary release is T Gaussian mechanisms whose whitened shift is at most
``1 / s_step`` (checked where each is drawn, the exact sampler's rounding included), so a neighbour moves
2T mechanisms by at most ``1 / s_step`` each and the rest not at all: together ``sqrt(2T) / s_step``-GDP.
With persons of up to g rows each binary problem protects a person's whole box (its labels' changes are
in ``{-2, 0, 2}^g``), and a person's change touches at most ``m = min(K, 2g)`` problems (the classes its rows
leave and join; :func:`classes_moved`): ``sqrt(m T) / s_step``-GDP. (``sqrt(2T)`` is not enough for
persons: docs/mechanisms.md#several-classes.) With ``s_step = sqrt(m T) s(epsilon, delta)``
(:func:`multiclass_step_request`; ``s`` the analytic calibration) that is ``1 / s``-GDP, i.e.
(epsilon, delta)-DP. The release validates once
(:func:`~dpgp_gpflow.mechanisms.release_request`), reserves ONE ledger event ``(epsilon, delta, "gaussian",
mu = 1/s)`` and commits it once after all K x T draws; a refusal before the first draw charges nothing,
one after some draws charges the whole event (what was drawn is charged). Only ``calibration="analytic"``.
"""

from __future__ import annotations

import math
from numbers import Integral
import dataclasses
import hashlib
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Type

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from gpflow.base import MeanAndVariance
from gpflow.models import BayesianModel, InternalDataTrainingLossMixin

from ..accounting import PrivacyAccountant, PrivacyEvent, Reservation, reserve
from ..calibration import analytic_gaussian_epsilon, gaussian_multiplier
from ..cloaking import DEFAULT_TOL
from ..contract import check_release_hyperparameters, dense_map, latent_terms_and_readout
from ..mechanisms import ReleaseRequest, release_request
from ..neighbours import relation
from ..pipeline import cloak_outputs
from ..io.format import ReleaseDocument, ReleaseFileError, take_arrays
from ..released import PrivateClassifier, PrivateFunction, PrivateRelease, Released, probit_approximation
from ..streaming import DEFAULT_CHUNK_SIZE, ChunkSource, LocalChunks, cloak_function
from ..streaming.chunks import person_starts
from ..streaming.dask_chunks import DaskChunks
from ..validation import (
    as_inputs,
    is_dask_array,
    require_float64,
    validate_delta,
    validate_epsilon,
    validate_groups,
    validate_public_terms,
)
from .base import split_dask_rows
from .dp_laplace import (
    DPLaplaceGPC,
    DPSparseLaplaceGPC,
    PrivateLaplaceClassifier,
    PrivateSparseClassifier,
    check_steps,
)
from .sgpr_base import kmeans_inducing_inputs

__all__ = [
    "DPMulticlassLaplaceGPC",
    "DPSparseMulticlassLaplaceGPC",
    "OneVsRestChunks",
    "PrivateMulticlassClassifier",
    "StepDraws",
    "class_relation",
    "class_seed",
    "classes_moved",
    "largest_person",
    "multiclass_releases_of_document",
    "multiclass_step_multiplier",
    "multiclass_step_request",
    "one_vs_rest_labels",
    "one_vs_rest_probabilities",
    "validate_class_labels",
]


# ---------------------------------------------------------------------------------------------
# Labels, calibration, seeds.


def validate_class_labels(labels: Any, num_classes: Any, num_data: int) -> np.ndarray:
    """``labels`` as int64 [N]; ``TypeError`` / ``ValueError`` unless ``num_classes`` is an integer >= 2
    and every label is an integer in ``0 .. num_classes - 1`` ([N] or [N, 1], N = ``num_data``; integer
    dtype, or floats with integer values). The errors carry no statistic of the private labels."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, Integral) or num_classes < 2:
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    arr = np.asarray(labels)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1 or arr.shape[0] != num_data:
        raise ValueError(f"labels must have shape [{num_data}] or [{num_data}, 1] (one per row of X), "
                         f"got {np.shape(labels)}")
    if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"labels must be integers 0..{int(num_classes) - 1}, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr) & (arr == np.round(arr))):
        raise ValueError(f"labels must be integers 0..{int(num_classes) - 1} (a non-integer or non-finite value "
                         "was given)")
    if not np.all((arr >= 0) & (arr < num_classes)):
        raise ValueError(f"labels must be integers 0..{int(num_classes) - 1} (num_classes={int(num_classes)}): "
                         "a label outside that range was given")
    return arr.astype(np.int64)


def one_vs_rest_labels(labels: Any, num_classes: int) -> List[Any]:
    """The K binary label columns [N, 1]: ``+1`` where the label is ``a``, ``-1`` elsewhere (``labels`` [N], or
    a Dask array [N, 1] / [N], whose columns stay lazy Dask arrays)."""
    if is_dask_array(labels):
        flat = labels.reshape((-1,))
        return [2.0 * (flat == a).astype(np.float64)[:, None] - 1.0 for a in range(num_classes)]
    return [np.where(labels == a, 1.0, -1.0)[:, None] for a in range(num_classes)]


def largest_person(groups: Optional[np.ndarray]) -> int:
    """The largest number of rows of one person in the (validated, public) ``groups``; 1 for None (one row
    per person)."""
    if groups is None or not np.size(groups):
        return 1
    return int(np.unique(groups, return_counts=True)[1].max())


def classes_moved(num_classes: int, person_rows: int) -> int:
    """``m = min(K, 2 g)``: the most one-vs-rest problems a neighbour changes, when a person has at most
    ``g = person_rows`` rows and each row's label may move from its class to any other (a row changes the
    problems of the class it leaves and of the class it joins; 2 for one row per person). Public."""
    return min(int(num_classes), 2 * int(person_rows))


def _rows_relation(person_rows: int) -> str:
    """The relation each binary problem's release records for persons of at most ``person_rows`` rows
    (:func:`~dpgp_gpflow.neighbours.relation`: ``"row"`` or ``"person (groups, up to g rows)"``)."""
    return relation(_Persons(None if int(person_rows) == 1 else np.zeros(int(person_rows), dtype=np.int64)))


def class_relation(person_rows: int) -> str:
    """The neighbouring relation of a multi-class release for persons of at most ``person_rows`` rows, as its
    card records it: the binary problems' relation and that each label moves between classes."""
    return f"{_rows_relation(person_rows)}, labels moved between classes"


class _Persons(NamedTuple):
    """The public groups :func:`~dpgp_gpflow.neighbours.relation` reads (the one format of a relation)."""

    groups: Optional[np.ndarray]


def multiclass_step_multiplier(multiplier: float, steps: int, moved: int = 2) -> float:
    """Each Newton step's noise multiplier ``sqrt(m T) s``: a neighbour changes at most ``m = moved`` problems
    (:func:`classes_moved`; 2 for one row per person) x T steps, which compose (Gaussian DP) to
    ``sqrt(m T) / s_step = 1 / s``."""
    return math.sqrt(float(moved) * steps) * float(multiplier)


def multiclass_step_request(request: ReleaseRequest, steps: int, moved: int = 2) -> ReleaseRequest:
    """The request of every Newton step of a multi-class release of the validated ``request``: multiplier
    :func:`multiclass_step_multiplier` (``moved`` problems changed by a neighbour), and the step's own
    guarantee at ``request.delta`` (``epsilon = analytic_gaussian_epsilon(1 / s_step, delta)``, what each
    step records). Only the analytic calibration (``NotImplementedError`` otherwise: its multiplier is not
    a Gaussian-DP parameter)."""
    if request.calibration != "analytic":
        raise NotImplementedError(
            "a multi-class release composes its Newton steps in Gaussian DP, which needs calibration='analytic' "
            f"(got {request.calibration!r}: the classical multiplier is not the exact mu of (epsilon, delta))")
    multiplier = multiclass_step_multiplier(request.multiplier, steps, moved)
    return request._replace(epsilon=analytic_gaussian_epsilon(1.0 / multiplier, request.delta), multiplier=multiplier)


def class_seed(seed: Optional[int], num_classes: int, label: int) -> Optional[int]:
    """The seed of class ``label``'s binary release: None for None, else the first uint32 of
    ``np.random.SeedSequence([seed, num_classes, label])`` (an explicit seed is reproducible, not private)."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed), int(num_classes), int(label)]).generate_state(1, dtype=np.uint32)[0])


class StepDraws(Reservation):
    """A reservation holding nothing, into which the K x T Newton steps of a multi-class release commit: it
    counts them (``drawn``). The caller's one reservation commits the one event of the whole release."""

    def __init__(self, event: PrivacyEvent) -> None:
        super().__init__((), [])
        self.drawn = 0
        self._event = event

    def commit(self, description: str = "") -> PrivacyEvent:
        self.drawn += 1
        return self._event


@check_shapes("means: [N, K]", "variances: [N, K]", "return: [N, K]")
def one_vs_rest_probabilities(means: tf.Tensor, variances: tf.Tensor) -> tf.Tensor:
    """Class probabilities from K one-vs-rest latents ``f_a ~ N(mean, variance)``: ``p_a`` by the probit
    approximation (:func:`~dpgp_gpflow.released.probit_approximation`), normalised to sum to one,
    ``P_a = p_a / sum_b p_b`` (in logs, so that no row underflows to 0 / 0)."""
    shape = tf.shape(means)
    p = probit_approximation(tf.reshape(means, [-1, 1]), tf.reshape(variances, [-1, 1]))  # [N K, 1]
    log_p = tf.reshape(tf.math.log(p), shape)
    return tf.nn.softmax(log_p, axis=1)


# ---------------------------------------------------------------------------------------------
# The released classifier (post-processing only).


class PrivateMulticlassClassifier(Released):
    """K released one-vs-rest classifiers (one :class:`~dpgp_gpflow.released.PrivateClassifier` per class);
    (epsilon, delta)-DP together by Gaussian-DP composition (module docstring), not by summing the steps'.

    ``predict_f`` gives [k, K] latent means and variances (each with its DP noise variance propagated);
    ``predict_y`` the class probabilities [k, K] (:func:`one_vs_rest_probabilities`, rows sum to 1) and
    ``P (1 - P)``. Free to query. ``save`` writes one release file (docs/release_file.md#several-classes)
    whose card states the whole guarantee; :func:`dpgp_gpflow.load` reads it back and recomputes that
    guarantee from the steps (:func:`multiclass_releases_of_document`)."""

    def __init__(self, classifiers: Sequence[PrivateClassifier], *, epsilon: float, delta: float, mu: float,
                 steps: int, person_rows: int = 1) -> None:
        self._classifiers = tuple(classifiers)
        self._epsilon, self._delta, self._mu, self._steps = float(epsilon), float(delta), float(mu), int(steps)
        self._person_rows = int(person_rows)

    @property
    def classifiers(self) -> Tuple[PrivateClassifier, ...]:
        """The K one-vs-rest classifiers (class ``a``: label ``a`` against the rest). Each one's own
        ``epsilon`` is that class's releases alone under basic composition; the whole is :attr:`epsilon`."""
        return self._classifiers

    @property
    def num_classes(self) -> int:
        return len(self._classifiers)

    @property
    def steps(self) -> int:
        """Newton steps per class."""
        return self._steps

    @property
    def person_rows(self) -> int:
        """The most rows of one person it protects (the model's public ``groups``; 1: one row per person)."""
        return self._person_rows

    @property
    def classes_moved(self) -> int:
        """``m = min(K, 2 g)``: the most classes one neighbour changes (:func:`classes_moved`); each step was
        released at multiplier ``sqrt(m T) s``."""
        return classes_moved(self.num_classes, self._person_rows)

    @property
    def neighbours(self) -> str:
        """The neighbouring relation it protects (:func:`class_relation`)."""
        return class_relation(self._person_rows)

    @property
    def releases(self) -> Tuple[PrivateRelease, ...]:
        """Every release, class by class (class 0's T steps, then class 1's, ...)."""
        return tuple(r for c in self._classifiers for r in c.releases)

    @property
    def epsilon(self) -> float:
        """The epsilon of the whole release (Gaussian-DP composition of its steps)."""
        return self._epsilon

    @property
    def delta(self) -> float:
        return self._delta

    @property
    def mu(self) -> float:
        """Gaussian-DP parameter of the whole release, ``1 / s(epsilon, delta)`` (its ledger event's ``mu``)."""
        return self._mu

    @property
    def reproducible(self) -> bool:
        return any(c.reproducible for c in self._classifiers)

    @property
    def clip_to_bounds(self) -> bool:
        return False

    def privacy_card(self) -> Dict[str, Any]:
        """:meth:`Released.privacy_card` with the composition: ``epsilon``, ``delta`` and ``mu`` of the whole
        release (Gaussian DP over the m T steps a neighbour changes), ``num_classes``, ``steps``, the relation
        protected (``neighbours``), ``person_rows`` and ``classes_moved`` (m)."""
        card = super().privacy_card()
        card.update(composition="gaussian-dp", mu=self._mu, num_classes=self.num_classes, steps=self._steps,
                    neighbours=self.neighbours, person_rows=self._person_rows, classes_moved=self.classes_moved)
        return card

    def audit_parts(self, model: Any) -> Tuple[Tuple[Released, Any], ...]:
        """``(classifiers[c], model.problems[c])`` for every class c: what :func:`dpgp_gpflow.privacy_audit.audit`
        recomputes step by step. ``ValueError`` unless ``model`` is a one-vs-rest model of as many classes."""
        problems = getattr(model, "problems", None) if isinstance(model, _OneVsRest) else None
        if problems is None or len(problems) != self.num_classes:
            raise ValueError(f"audit a release of {self.num_classes} classes against the one-vs-rest model it was "
                             f"made with (a DPMulticlassLaplaceGPC or DPSparseMulticlassLaplaceGPC of "
                             f"{self.num_classes} classes), got a {type(model).__name__}")
        return tuple(zip(self._classifiers, problems))

    def audited_mu(self, model: Any, mus: Sequence[float]) -> Optional[float]:
        """The whole's Gaussian-DP parameter from every step's audited ``mu`` (class by class, as
        :meth:`audit_parts`): a neighbour changes at most ``m`` classes (:func:`classes_moved` of the *model's*
        public groups, never this object's record), all of their steps, so ``mu^2`` is at most the sum of the
        ``m`` largest per-class sums ``sum_t mu_{c,t}^2`` (docs/mechanisms.md#several-classes)."""
        per_class = np.sum(np.square(np.asarray(mus, dtype=np.float64).reshape(self.num_classes, -1)), axis=1)
        moved = classes_moved(self.num_classes, model.person_rows)
        return float(np.sqrt(np.sum(np.sort(per_class)[::-1][:moved])))

    @property
    def input_dim(self) -> int:
        """The number of input columns it predicts at (public)."""
        return int(self._classifiers[0].readout.input_dim)

    def file_content(self) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
        """Every release under ``releases/<i>/`` (class by class), and per class its classifier's kind, readout
        (``kind``, ``state``) and coordinates flag (``content.classes``), each readout's arrays by index into a
        pool ``readout/<j>`` in which identical arrays are stored once (every class shares ``X`` and, for one
        step or the sparse variant, every factor): docs/release_file.md#several-classes."""
        content, arrays = super().file_content()
        pool: Dict[Tuple[str, Tuple[int, ...], str], int] = {}
        classes = []
        for a, classifier in enumerate(self._classifiers):
            kind = type(classifier).__name__
            if _CLASS_KINDS.get(kind) is not type(classifier):
                raise NotImplementedError(f"cannot save a multi-class release of {kind}s: a release file holds "
                                          f"{sorted(_CLASS_KINDS)}")
            own, own_arrays = classifier.file_content()
            refs = {}
            for name in sorted(own_arrays):
                if not name.startswith("readout/"):
                    continue
                value = np.ascontiguousarray(own_arrays[name])
                key = (value.dtype.str, value.shape, hashlib.sha256(value.tobytes()).hexdigest())
                if key not in pool:
                    pool[key] = len(pool)
                    arrays[f"readout/{pool[key]}"] = value
                refs[name[len("readout/"):]] = pool[key]
            if own["coordinates"]:
                arrays[f"classes/{a}/coordinates"] = own_arrays["coordinates"]
            classes.append({"kind": kind, "readout": own["readout"], "coordinates": own["coordinates"],
                            "readout_arrays": refs})
        return {**content, "classes": classes}, arrays

    @classmethod
    def from_release_document(cls, document: ReleaseDocument,
                              readout: Callable[[Any, Mapping[str, np.ndarray], str], Any]) -> "PrivateMulticlassClassifier":
        """The object of a verified release file (:func:`dpgp_gpflow.io.format.read`): its card and releases
        checked by :func:`multiclass_releases_of_document`, then each class's classifier rebuilt from its
        releases and its readout (``readout(spec, arrays, where)``: :func:`dpgp_gpflow.io.loading.load` picks
        the readout class). ``ReleaseFileError`` naming the field otherwise."""
        releases, guarantee = multiclass_releases_of_document(document)
        K, steps = guarantee.num_classes, guarantee.steps
        entries = document.content.get("classes")
        if not isinstance(entries, list) or len(entries) != K:
            raise ReleaseFileError(f"content.classes must be a list of {K} classes")
        classifiers: List[PrivateClassifier] = []
        for a, entry in enumerate(entries):
            where = f"content.classes[{a}]"
            if not isinstance(entry, dict) or set(entry) != {"kind", "readout", "coordinates", "readout_arrays"}:
                raise ReleaseFileError(f"{where} must be an object with kind, readout, coordinates and readout_arrays")
            kind, refs, flag = entry["kind"], entry["readout_arrays"], entry["coordinates"]
            if kind not in _CLASS_KINDS or (kind == "PrivateSparseClassifier" and steps != 1):
                raise ReleaseFileError(f"{where}.kind must be one of {sorted(_CLASS_KINDS)} (sparse: one step), "
                                       f"got {kind!r}")
            if kind != entries[0].get("kind"):
                raise ReleaseFileError(f"{where}.kind {kind!r} is not the first class's")
            if not isinstance(flag, bool):
                raise ReleaseFileError(f"{where}.coordinates must be true or false")
            if not (isinstance(refs, dict) and all(isinstance(j, int) and not isinstance(j, bool) for j in refs.values())):
                raise ReleaseFileError(f"{where}.readout_arrays must map array names to integers")
            missing = sorted(f"readout/{j}" for j in refs.values() if f"readout/{j}" not in document.arrays)
            if missing:
                raise ReleaseFileError(f"{where}.readout_arrays: the file has no array(s) {missing}")
            own = releases[a * steps:(a + 1) * steps]
            m = own[-1].mean.shape[0]
            coordinates = None
            if flag:
                coordinates = take_arrays(where, document.arrays, {f"classes/{a}/coordinates": 2})[
                    f"classes/{a}/coordinates"]
                if coordinates.shape != (m, m):
                    raise ReleaseFileError(f"{where}: coordinates must be [{m}, {m}], got {list(coordinates.shape)}")
            rebuilt = readout(entry["readout"], {name: document.arrays[f"readout/{j}"] for name, j in refs.items()},
                              f"{where}.readout")
            probe = rebuilt.readout(tf.zeros([1, int(rebuilt.input_dim)], dtype=tf.float64))
            if tuple(probe.shape) != (1, m):
                raise ReleaseFileError(f"{where}: the readout maps {int(probe.shape[1])} latent values, the release "
                                       f"has {m}")
            if a and int(rebuilt.input_dim) != classifiers[0].readout.input_dim:
                raise ReleaseFileError(f"{where}: the readout takes {int(rebuilt.input_dim)} input columns, class 0's "
                                       f"{classifiers[0].readout.input_dim}")
            classifier = _CLASS_KINDS[kind].__new__(_CLASS_KINDS[kind])
            PrivateFunction.__init__(classifier, own[-1], rebuilt, coordinates, releases=own)  # as the constructors
            classifiers.append(classifier)
        return cls(classifiers, epsilon=guarantee.epsilon, delta=guarantee.delta, mu=guarantee.mu, steps=steps,
                   person_rows=guarantee.person_rows)

    @check_shapes("return[0]: [N, K]", "return[1]: [N, K]")
    def predict_f(self, Xnew: Any) -> MeanAndVariance:
        """DP latent means [k, K] and variances [k, K]: each class's public Laplace variance plus the DP noise
        variance propagated to ``Xnew`` (as :meth:`PrivateClassifier.predict_f`)."""
        pairs = [c.predict_f(Xnew) for c in self._classifiers]
        return tf.concat([m for m, _ in pairs], axis=1), tf.concat([v for _, v in pairs], axis=1)

    @check_shapes("return[0]: [N, K]", "return[1]: [N, K]")
    def predict_y(self, Xnew: Any) -> MeanAndVariance:
        """Class probabilities [k, K] (:func:`one_vs_rest_probabilities`) and ``P (1 - P)``."""
        P = one_vs_rest_probabilities(*self.predict_f(Xnew))
        return P, P * (1.0 - P)

    def predict_class(self, Xnew: Any) -> np.ndarray:
        """The most probable class [k] (int64)."""
        return np.argmax(self.predict_y(Xnew)[0].numpy(), axis=1).astype(np.int64)


#: The classifier of each class a multi-class release file holds, by kind (its class name).
_CLASS_KINDS: Dict[str, Type[PrivateClassifier]] = {cls.__name__: cls for cls in (PrivateLaplaceClassifier, PrivateSparseClassifier)}


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
        if r.neighbours != _rows_relation(g):
            raise ReleaseFileError(f"{where}.neighbours {r.neighbours!r} is not {_rows_relation(g)!r}")
    reproducible = any(r.reproducible for r in releases)
    if card.get("reproducible") is not reproducible:
        raise ReleaseFileError(f"card.reproducible {card.get('reproducible')!r} is not that of the releases "
                               f"({reproducible!r})")
    if card.get("clip_to_bounds", False) is not False:
        raise ReleaseFileError("card.clip_to_bounds must be false: a classifier's latents are never clipped")
    return releases, MulticlassGuarantee(epsilon, delta, mu, K, steps, g)


# ---------------------------------------------------------------------------------------------
# Streamed rows.


def _check_chunk_labels(labels: np.ndarray, num_classes: int) -> None:
    """``ValueError`` unless every label of a chunk is an integer in ``0 .. num_classes - 1`` (no statistic of
    the private labels in the message)."""
    if not np.all(np.isfinite(labels) & (labels == np.round(labels)) & (labels >= 0) & (labels < num_classes)):
        raise ValueError(f"labels must be integers 0..{num_classes - 1} (num_classes={num_classes}): a label outside "
                         "that range was read from the rows")


def _one_vs_rest_chunk(X: np.ndarray, Y: np.ndarray, start: int, fn: Callable[..., Any], label: int,
                       num_classes: int, *args: Any) -> Any:
    """``fn`` on a chunk with its integer labels as class ``label``'s binary labels (+1 for ``label``, -1 else),
    the labels checked first (:func:`_check_chunk_labels`)."""
    _check_chunk_labels(Y, num_classes)
    return fn(X, np.where(Y == label, 1.0, -1.0), start, *args)


def _labels_checked(X: np.ndarray, Y: np.ndarray, start: int, num_classes: int) -> bool:
    _check_chunk_labels(Y, num_classes)
    return True


def _both(a: bool, b: bool) -> bool:
    return a and b


class OneVsRestChunks(ChunkSource):
    """A chunk source of integer labels ``0 .. K-1`` (``source``, e.g. ``LocalChunks(X, labels)`` or
    ``DaskChunks(X, labels)``) seen as class ``label``'s one-vs-rest problem: every function mapped over
    its chunks gets the labels as ``+1`` (the class) / ``-1`` (the rest), each chunk's labels checked on the
    way (``ValueError``); functions of the inputs alone run on ``source`` as they are. The same rows and
    chunks as ``source``. Privacy: a public per-chunk relabelling of the private labels, inside the streamed
    release's own passes (:mod:`dpgp_gpflow.streaming`)."""

    def __init__(self, source: ChunkSource, label: int, num_classes: int) -> None:
        self.source, self.label, self.num_classes = source, int(label), int(num_classes)
        self.n, self.input_dim = source.n, source.input_dim

    def map_reduce(self, fn: Callable[..., Any], combine: Callable[[Any, Any], Any], *args: Any) -> Any:
        return self.source.map_reduce(_one_vs_rest_chunk, combine, fn, self.label, self.num_classes, *args)

    def map_inputs(self, fn: Callable[..., Any], combine: Callable[[Any, Any], Any], *args: Any) -> Any:
        return self.source.map_inputs(fn, combine, *args)

    def every(self, step: int) -> "OneVsRestChunks":
        return OneVsRestChunks(self.source.every(step), self.label, self.num_classes)

    def chunk_bounds(self) -> List[Tuple[int, int]]:
        return self.source.chunk_bounds()

    def between_persons(self, starts: np.ndarray) -> "OneVsRestChunks":
        return OneVsRestChunks(self.source.between_persons(starts), self.label, self.num_classes)


# ---------------------------------------------------------------------------------------------
# The models.


StepRelease = Callable[[int, Any, ReleaseRequest, Reservation], PrivateClassifier]


class _OneVsRest(BayesianModel, InternalDataTrainingLossMixin):
    """K binary problems on one public ``X`` and kernel: the non-private one-vs-rest predictions, the
    training objective (sum of the K Laplace marginal likelihoods; evaluating it marks every problem, the
    leak guard) and the one release of all classes."""

    def __init__(self, X: np.ndarray, labels: np.ndarray, kernel: gpflow.kernels.Kernel, num_classes: int,
                 make_problem: Callable[[np.ndarray, Optional[np.ndarray]], Any], groups: Any = None) -> None:
        super().__init__()
        self.kernel = kernel
        self.num_classes = int(num_classes)
        self._X = X
        self._labels = labels
        ids = validate_groups(groups, int(X.shape[0]))
        object.__setattr__(self, "_dp_groups", ids)
        self.problems = tuple(make_problem(y, ids) for y in one_vs_rest_labels(labels, self.num_classes))

    @property
    def groups(self) -> Optional[np.ndarray]:
        """Public person identifiers [N] (a copy; rows with the same value belong to one person), or None: one
        row per person. Every problem holds the same; fixed at construction."""
        groups = self.__dict__.get("_dp_groups")
        return None if groups is None else groups.copy()

    @property
    def person_rows(self) -> int:
        """The most rows of one person (public; 1 without groups)."""
        return largest_person(self.__dict__.get("_dp_groups"))

    @property
    def classes_moved(self) -> int:
        """``m = min(K, 2 g)``: the most problems one neighbour changes (:func:`classes_moved`)."""
        return classes_moved(self.num_classes, self.person_rows)

    @property
    def data(self) -> Tuple[np.ndarray, np.ndarray]:
        """``(X, labels)``: the public inputs and the private integer labels."""
        return self._X, self._labels

    def maximum_log_likelihood_objective(self) -> tf.Tensor:
        """Sum of the K binary Laplace log marginal likelihoods (reads the labels; marks every problem)."""
        return tf.add_n([p.maximum_log_likelihood_objective() for p in self.problems])

    @check_shapes("Xnew: [N, D]", "return[0]: [N, K]", "return[1]: [N, K]")
    def predict_f(self, Xnew: Any) -> MeanAndVariance:
        """Non-private latent means and variances [k, K] of the K binary Laplace models (they read the labels)."""
        pairs = [p.predict_f(Xnew) for p in self.problems]
        return tf.concat([m for m, _ in pairs], axis=1), tf.concat([v for _, v in pairs], axis=1)

    @check_shapes("Xnew: [N, D]", "return[0]: [N, K]", "return[1]: [N, K]")
    def predict_y(self, Xnew: Any) -> MeanAndVariance:
        """Non-private class probabilities [k, K] (:func:`one_vs_rest_probabilities`) and ``P (1 - P)``."""
        P = one_vs_rest_probabilities(*self.predict_f(Xnew))
        return P, P * (1.0 - P)

    def _request(self, epsilon: Any, delta: Any, steps: Any, calibration: Any, objective: Any, seed: Any,
                 hyperparameters_public: bool, rtol: Any, tol: Any) -> Tuple[int, ReleaseRequest, ReleaseRequest]:
        """``(steps, request, step request)``: the one validation (``rtol`` and ``tol`` included), then the
        leak guard of every problem."""
        steps = check_steps(steps)
        request = release_request(epsilon, delta, calibration=calibration, objective=objective, seed=seed,
                                  rtol=rtol, tol=tol)
        step_request = multiclass_step_request(request, steps, self.classes_moved)
        for problem in self.problems:
            check_release_hyperparameters(problem, hyperparameters_public)
        return steps, request, step_request

    def _release_classes(self, step_release: StepRelease, request: ReleaseRequest, step_request: ReleaseRequest,
                         steps: int, accountant: Optional[PrivacyAccountant]) -> PrivateMulticlassClassifier:
        """Reserve the one event, release every class (``step_release(class, problem, request, draws)``), commit."""
        description = (f"one-vs-rest Laplace release of {self.num_classes} classes x {steps} Newton step(s) "
                       f"({class_relation(self.person_rows)})")
        with reserve(accountant, [request.event(description)]) as reservation:  # the one reservation
            draws = StepDraws(step_request.event())
            try:
                classifiers = [step_release(a, problem, step_request._replace(seed=class_seed(request.seed,
                                                                                              self.num_classes, a)),
                                            draws)
                               for a, problem in enumerate(self.problems)]
            except BaseException:
                if draws.drawn:  # what was drawn is charged: the whole event bounds any part of it
                    reservation.commit(description)
                raise
            reservation.commit(description)
        return PrivateMulticlassClassifier(classifiers, epsilon=request.epsilon, delta=request.delta,
                                           mu=1.0 / request.multiplier, steps=steps, person_rows=self.person_rows)


def _unpack(data: Any, num_classes: Any) -> Tuple[np.ndarray, np.ndarray]:
    require_float64()
    try:
        X, labels = data
    except (TypeError, ValueError) as exc:
        raise TypeError("data must be a pair (X, labels)") from exc
    X = as_inputs("X", X)
    return X, validate_class_labels(labels, num_classes, int(X.shape[0]))


class DPMulticlassLaplaceGPC(_OneVsRest):
    """One-vs-rest DP Laplace GP classifier of ``num_classes`` classes (full GP).

    ``DPMulticlassLaplaceGPC((X, labels), kernel, num_classes=K)``: integer labels ``0 .. K-1`` ([N] or
    [N, 1]); ``problems[a]`` is a :class:`~dpgp_gpflow.models.DPLaplaceGPC` of label ``a`` against the rest
    (labels ``+1`` / ``-1``), all sharing ``X`` and ``kernel``. ``predict_f`` / ``predict_y`` are the
    non-private one-vs-rest Laplace predictions (they read the labels): publish only what :meth:`release`
    returns. For two classes use :class:`~dpgp_gpflow.models.DPLaplaceGPC` (one problem, less noise).

    Privacy assumption: ``X`` and the kernel hyperparameters are public (leak guard as the binary model's);
    neighbouring datasets differ in one label, moved from one class to another. ``groups`` (public integers
    [N], default None): rows with the same value belong to one person, and neighbours differ in the labels
    of all of a person's rows, each moved to any class (docs/guides/multiclass.md#persons); every problem
    protects the person's box and the steps are calibrated for the ``min(K, 2g)`` problems a person of g
    rows can change.
    """

    def __init__(self, data: Any, kernel: gpflow.kernels.Kernel, *, num_classes: int, max_iter: int = 100,
                 tol: float = 1e-10, hyperparameters_public: bool = False, groups: Any = None) -> None:
        X, labels = _unpack(data, num_classes)
        super().__init__(X, labels, kernel, int(num_classes), lambda y, ids: DPLaplaceGPC(
            (X, y), kernel, max_iter=max_iter, tol=tol, hyperparameters_public=hyperparameters_public, groups=ids),
            groups)

    def release(self, *, epsilon: float, delta: float, steps: int = 1, objective: str = "mse",
                calibration: str = "analytic", seed: Optional[int] = None,
                accountant: Optional[PrivacyAccountant] = None, hyperparameters_public: bool = False,
                rtol: Optional[float] = None, tol: float = DEFAULT_TOL) -> PrivateMulticlassClassifier:
        """Release ``steps`` cloaked Newton steps of each of the K problems; (epsilon, delta)-DP in total.

        Each step of each class is released at noise multiplier ``sqrt(m steps) s(epsilon, delta)``, ``m = 2``
        (with ``groups``: ``min(K, 2g)``, :func:`classes_moved`; :func:`multiclass_step_request`) through
        :meth:`DPLaplaceGPC.release_steps` (class ``a`` at seed
        :func:`class_seed`); one ledger event ``(epsilon, delta, mu = 1/s)`` is reserved before anything
        is computed and committed after the K x steps draws. Keywords as for :meth:`DPLaplaceGPC.release`;
        only ``calibration="analytic"``.
        """
        steps, request, step_request = self._request(epsilon, delta, steps, calibration, objective, seed,
                                                     hyperparameters_public, rtol, tol)
        # step 1's public terms, the same for every class, checked finite before anything is reserved
        first = self.problems[0].first_step()
        return self._release_classes(
            lambda a, problem, req, draws: problem.release_steps(req, draws, steps, first, rtol=rtol, tol=tol),
            request, step_request, steps, accountant)


class DPSparseMulticlassLaplaceGPC(_OneVsRest):
    """One-vs-rest DP Laplace GP classifier of ``num_classes`` classes, subset of regressors.

    ``DPSparseMulticlassLaplaceGPC((X, labels), kernel, inducing_variable, num_classes=K)``: as
    :class:`DPMulticlassLaplaceGPC` with ``problems[a]`` a :class:`~dpgp_gpflow.models.DPSparseLaplaceGPC`;
    ``inducing_variable`` an array [M, D], ``InducingPoints`` or an integer m (k-means on ``X``, seed 0,
    computed once for all classes). Its release is the first Newton step of the m SoR weights of every
    class (``steps=1``; ``reference_inputs`` is not offered): :meth:`release` in memory, or
    :meth:`release_streamed` over row chunks (a chunk source of ``(X, labels)``, or the model's own rows,
    which may then be Dask arrays: ``X`` [N, D] and ``labels`` [N] or [N, 1], with the inducing inputs given
    as an array).

    Privacy assumption: ``X``, ``Z`` and the kernel hyperparameters are public; ``groups`` (persons) as for
    :class:`DPMulticlassLaplaceGPC` (with Dask rows an in-memory array beside them; the streamed release cuts
    its chunks between persons, whose rows must be consecutive).
    """

    def __init__(self, data: Any, kernel: gpflow.kernels.Kernel, inducing_variable: Any, *, num_classes: int,
                 max_iter: int = 100, tol: float = 1e-10, hyperparameters_public: bool = False,
                 groups: Any = None) -> None:
        X, labels, dask_rows = split_dask_rows(data)
        if dask_rows is None:
            X, labels = _unpack(data, num_classes)
            if isinstance(inducing_variable, Integral) and not isinstance(inducing_variable, bool):
                inducing_variable = kmeans_inducing_inputs(X, int(inducing_variable))
        else:  # the labels stay on the cluster: checked chunk by chunk where they are read (release_streamed)
            validate_class_labels(np.zeros(0, np.int64), num_classes, 0)  # num_classes alone
            if is_dask_array(groups):
                raise TypeError("with Dask rows, give groups= as an in-memory array of the N public person ids "
                                "(e.g. groups.compute()): the streamed release cuts its chunks between persons from it")
        object.__setattr__(self, "_dp_dask_rows", dask_rows)
        super().__init__(X, labels, kernel, int(num_classes), lambda y, ids: DPSparseLaplaceGPC(
            (X, y), kernel, inducing_variable, max_iter=max_iter, tol=tol,
            hyperparameters_public=hyperparameters_public, groups=ids), groups)

    @property
    def dask_rows(self) -> Optional[Tuple[Any, Any]]:
        """The ``(X, labels)`` Dask arrays the model was built from (labels [N, 1]), or None in memory."""
        return self.__dict__.get("_dp_dask_rows")

    def release(self, *, epsilon: float, delta: float, steps: int = 1, objective: str = "mse",
                calibration: str = "analytic", seed: Optional[int] = None,
                accountant: Optional[PrivacyAccountant] = None, hyperparameters_public: bool = False,
                rtol: Optional[float] = None, tol: float = DEFAULT_TOL) -> PrivateMulticlassClassifier:
        """Release the first Newton step ``w1 = C_w y_a`` of each class's m SoR weights; (epsilon, delta)-DP
        in total, each at multiplier ``sqrt(m) s(epsilon, delta)`` (``m = 2``, with groups ``min(K, 2g)``; one
        ledger event, as
        :meth:`DPMulticlassLaplaceGPC.release`). ``steps=1`` only; only ``calibration="analytic"``."""
        if check_steps(steps) != 1:
            raise NotImplementedError("DPSparseMulticlassLaplaceGPC releases the first Newton step only (steps=1)")
        if self.dask_rows is not None:
            raise TypeError("this DPSparseMulticlassLaplaceGPC's rows are Dask arrays and stay on the cluster: release "
                            "it with model.release_streamed(epsilon=..., delta=...)")
        steps, request, step_request = self._request(epsilon, delta, steps, calibration, objective, seed,
                                                     hyperparameters_public, rtol, tol)
        # the public latent terms and readout, the same for every class, checked finite before anything is reserved
        latent, readout = latent_terms_and_readout(self.problems[0])
        B = dense_map(latent.map)  # [m, n]
        validate_public_terms("latent release", B, latent.offset, self.problems[0].output_bound,
                              variance=latent.variance)
        covariance = tf.convert_to_tensor(latent.variance, tf.float64)  # [m, m]: the weights' public covariance
        variance = tf.linalg.diag_part(covariance) if covariance.shape.rank == 2 else covariance

        def one_class(a: int, problem: Any, req: ReleaseRequest, draws: Reservation) -> PrivateClassifier:
            rel = cloak_outputs(problem, req, draws, B, latent.offset, variance, rtol=rtol, tol=tol)
            return PrivateSparseClassifier(rel, readout)

        return self._release_classes(one_class, request, step_request, steps, accountant)

    def release_streamed(self, *, epsilon: float, delta: float, objective: str = "mse", calibration: str = "analytic",
                         seed: Optional[int] = None, accountant: Optional[PrivacyAccountant] = None,
                         hyperparameters_public: bool = False, rtol: Optional[float] = None, tol: float = DEFAULT_TOL,
                         max_iter: int = 2000, source: Optional[ChunkSource] = None,
                         chunk_size: int = DEFAULT_CHUNK_SIZE) -> PrivateMulticlassClassifier:
        """:meth:`release` streamed over row chunks, without the m x n map: each class's first Newton step is
        :func:`dpgp_gpflow.streaming.cloak_function` of its problem over :class:`OneVsRestChunks` of the rows,
        at the same multiplier ``sqrt(m) s(epsilon, delta)`` (``m = 2``, with groups ``min(K, 2g)``), all under
        one reservation and one ledger event (as :meth:`release`).

        ``source``: a :class:`~dpgp_gpflow.streaming.ChunkSource` of ``(X, labels)`` with integer labels
        ``0 .. K-1`` (e.g. ``LocalChunks(X, labels)`` over memory maps, or ``DaskChunks(X, labels)``); default:
        the model's Dask rows, or its rows in chunks of ``chunk_size``. Every label is read and checked
        (``ValueError``, no statistic of the labels) before anything is reserved. With ``groups`` (persons) each
        person's rows must be consecutive in the source's row order (else ``ValueError``, nothing reserved):
        every class's chunks are recut between persons and protect each person's box, as in memory. The
        classical calibration is refused (``NotImplementedError``). Keywords as for
        :func:`dpgp_gpflow.streaming.release_function` (``max_iter``, ``chunk_size``). With the same seed each
        class equals the in-memory release up to floating-point summation order and the signs of the noise's
        eigenvectors (docs/guides/scaling.md). Privacy assumptions as for :meth:`release`; the chunking is public."""
        steps, request, step_request = self._request(epsilon, delta, 1, calibration, objective, seed,
                                                     hyperparameters_public, rtol, tol)
        rows = self._streamed_rows(source, chunk_size)
        dim = int(self.problems[0].inducing_variable.Z.shape[1])
        if rows.input_dim != dim:
            raise ValueError(f"the chunks have {rows.input_dim} input columns, the model {dim}")
        rows.map_reduce(_labels_checked, _both, self.num_classes)  # every label, before anything is reserved
        if self.groups is not None:  # public: each person's rows consecutive (else one line), nothing reserved
            person_starts(self.groups, rows.n)

        def one_class(a: int, problem: Any, req: ReleaseRequest, draws: Reservation) -> PrivateClassifier:
            function = cloak_function(problem, req, draws, source=OneVsRestChunks(rows, a, self.num_classes),
                                      rtol=rtol, tol=tol, max_iter=max_iter, chunk_size=chunk_size)
            # recorded as the in-memory release records it (the streamed one records persons only)
            rel = dataclasses.replace(function.release, neighbours=relation(problem))
            return PrivateSparseClassifier(rel, function.readout, function.coordinates)

        return self._release_classes(one_class, request, step_request, steps, accountant)

    def _streamed_rows(self, source: Optional[ChunkSource], chunk_size: int) -> ChunkSource:
        """``source``, else the model's Dask rows (:class:`~dpgp_gpflow.distributed.DaskChunks`, on the active
        Dask client's cluster if any) or its in-memory rows in chunks of ``chunk_size``."""
        if source is not None:
            if not isinstance(source, ChunkSource):
                raise TypeError(f"source must be a dpgp_gpflow.streaming.ChunkSource, got {type(source).__name__}")
            return source
        if self.dask_rows is not None:
            return DaskChunks(*self.dask_rows)
        X, labels = self.data
        return LocalChunks(X, labels, chunk_size)
