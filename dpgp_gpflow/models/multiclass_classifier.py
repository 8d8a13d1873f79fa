"""The released classifier of several classes, one-vs-rest: :class:`PrivateMulticlassClassifier`.

K released one-vs-rest classifiers (one per class) made by :mod:`dpgp_gpflow.models.multiclass`'s models,
(epsilon, delta)-DP together by Gaussian-DP composition of their steps (docs/mechanisms.md#several-classes):
predictions (post-processing, free to query), the whole's privacy card, its audit against the model
(:meth:`PrivateMulticlassClassifier.audit_parts`, :meth:`PrivateMulticlassClassifier.audited_mu`) and its
release file (written by :func:`dpgp_gpflow.io.writing.classes_writer`; read by :func:`dpgp_gpflow.io.loading.load`,
its guarantee checked by :func:`~dpgp_gpflow.io.card.multiclass_releases`).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple, Type

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from ..io.writing import classes_writer, register
from ..released import PrivateClassifier, PrivateRelease, Released
from .dp_laplace import PrivateLaplaceClassifier, PrivateSparseClassifier
from .one_vs_rest import OneVsRestModel, class_relation, classes_moved, one_vs_rest_probabilities

__all__ = ["PrivateMulticlassClassifier"]


class PrivateMulticlassClassifier(Released):
    """K released one-vs-rest classifiers (one :class:`~dpgp_gpflow.released.PrivateClassifier` per class);
    (epsilon, delta)-DP together by Gaussian-DP composition (module docstring), not by summing the steps'.

    ``predict_f`` gives [k, K] latent means and variances (each with its DP noise variance propagated);
    ``predict_y`` the class probabilities [k, K] (:func:`one_vs_rest_probabilities`, rows sum to 1) and
    ``P (1 - P)``. Free to query. ``save`` writes one release file (docs/release_file.md#several-classes)
    whose card states the whole guarantee; :func:`dpgp_gpflow.load` reads it back and recomputes that
    guarantee from the steps (:func:`~dpgp_gpflow.io.card.multiclass_releases`)."""

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
        problems = getattr(model, "problems", None) if isinstance(model, OneVsRestModel) else None
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

    @check_shapes("return[0]: [N, K]", "return[1]: [N, K]")
    def predict_f(self, Xnew: Any) -> Tuple[np.ndarray, np.ndarray]:
        """DP latent means [k, K] and variances [k, K], NumPy: each class's public Laplace variance plus the DP
        noise variance propagated to ``Xnew`` (as :meth:`PrivateClassifier.predict_f`)."""
        pairs = [c.predict_f(Xnew) for c in self._classifiers]
        return np.concatenate([m for m, _ in pairs], axis=1), np.concatenate([v for _, v in pairs], axis=1)

    @check_shapes("return[0]: [N, K]", "return[1]: [N, K]")
    def predict_y(self, Xnew: Any) -> Tuple[np.ndarray, np.ndarray]:
        """Class probabilities [k, K] (:func:`one_vs_rest_probabilities`) and ``P (1 - P)``, NumPy."""
        P = one_vs_rest_probabilities(*(tf.constant(t) for t in self.predict_f(Xnew))).numpy()
        return P, P * (1.0 - P)

    def predict_class(self, Xnew: Any) -> np.ndarray:
        """The most probable class [k] (int64)."""
        return np.argmax(self.predict_y(Xnew)[0], axis=1).astype(np.int64)


#: The classifier of each class a multi-class release file holds, by kind (its class name).
CLASS_KINDS: Dict[str, Type[PrivateClassifier]] = {cls.__name__: cls for cls in (PrivateLaplaceClassifier, PrivateSparseClassifier)}

register(PrivateMulticlassClassifier, classes_writer(CLASS_KINDS))  # its file: dpgp_gpflow.io.writing
