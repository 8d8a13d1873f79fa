"""The rules of several classes, one-vs-rest (docs/mechanisms.md#several-classes): what
:mod:`dpgp_gpflow.models.multiclass`'s models, their released classifier
(:mod:`dpgp_gpflow.models.multiclass_classifier`) and its release file
(:mod:`dpgp_gpflow.models.multiclass_file`) share.

* Labels: integers ``0 .. K-1`` (:func:`validate_class_labels`), seen by class ``a``'s binary problem as
  ``+1`` where the label is ``a`` and ``-1`` elsewhere (:func:`one_vs_rest_labels`); class probabilities from
  the K latents (:func:`one_vs_rest_probabilities`).
* Persons and the step multiplier: a neighbour moves one row's label (with public ``groups``, every label of
  one person of at most g rows, :func:`largest_person`), so it changes at most ``m = min(K, 2g)`` problems
  (:func:`classes_moved`; 2 for one row per person), and each of the T Newton steps of every class is
  released at ``sqrt(m T) s`` (:func:`multiclass_step_multiplier`); the relations recorded
  (:func:`rows_relation`, :func:`class_relation`): these five live in :mod:`dpgp_gpflow.relations` (no
  TensorFlow: a release file's card is checked against them); each class's seed (:func:`class_seed`).

Everything here is public: it reads the labels only to check them, and the groups (public) otherwise.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any, List, Optional

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from ..relations import class_relation, classes_moved, largest_person, multiclass_step_multiplier, rows_relation
from ..released import probit_approximation
from ..validation import is_dask_array

__all__: list[str] = []  # internal: the package imports these names by name


class OneVsRestModel:
    """The base of the one-vs-rest models of several classes (:mod:`dpgp_gpflow.models.multiclass`): ``problems``,
    K binary problems on one public ``X``, and the public ``person_rows`` of their groups. A released
    multi-class classifier is audited only against such a model
    (:meth:`~dpgp_gpflow.models.multiclass_classifier.PrivateMulticlassClassifier.audit_parts`)."""


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


def class_seed(seed: Optional[int], num_classes: int, label: int) -> Optional[int]:
    """The seed of class ``label``'s binary release: None for None, else the first uint32 of
    ``np.random.SeedSequence([seed, num_classes, label])`` (an explicit seed is reproducible, not private)."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed), int(num_classes), int(label)]).generate_state(1, dtype=np.uint32)[0])


@check_shapes("means: [N, K]", "variances: [N, K]", "return: [N, K]")
def one_vs_rest_probabilities(means: tf.Tensor, variances: tf.Tensor) -> tf.Tensor:
    """Class probabilities from K one-vs-rest latents ``f_a ~ N(mean, variance)``: ``p_a`` by the probit
    approximation (:func:`~dpgp_gpflow.released.probit_approximation`), normalised to sum to one,
    ``P_a = p_a / sum_b p_b`` (in logs, so that no row underflows to 0 / 0)."""
    shape = tf.shape(means)
    p = probit_approximation(tf.reshape(means, [-1, 1]), tf.reshape(variances, [-1, 1]))  # [N K, 1]
    log_p = tf.reshape(tf.math.log(p), shape)
    return tf.nn.softmax(log_p, axis=1)
