"""The neighbouring relation as a release records it, and the counts of a multi-class release: plain text
and integers, no TensorFlow, so that a release file's card is checked against them without building a model
(:mod:`dpgp_gpflow.io.card`) and recorded with them when a model releases (:mod:`dpgp_gpflow.neighbours`,
:mod:`dpgp_gpflow.models.one_vs_rest`).

* :func:`largest_person`: the most rows of one person (public ids).
* :func:`relation_of`: the one format of a recorded relation (``"row"``, ``"row (P outputs)"``,
  ``"person (groups, up to G rows[ of P outputs])"``); :func:`check_relation`: how a file's is read back.
* Several classes, one-vs-rest (docs/mechanisms.md#several-classes): a neighbour changes at most
  ``m = min(K, 2g)`` binary problems (:func:`classes_moved`), each of the T Newton steps of every class is
  released at ``sqrt(m T) s`` (:func:`multiclass_step_multiplier`); the relations it records
  (:func:`rows_relation`, :func:`class_relation`).
* Whole rows (inputs and outputs private, :mod:`dpgp_gpflow.whole_rows`): :func:`whole_rows_relation`.

Everything here is public: counts of classes, steps, outputs and a person's rows.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .composition import gdp_step_multiplier

__all__: list[str] = []  # internal: the package imports these names by name


def largest_person(groups: Any) -> int:
    """The largest number of rows of one person in the (validated, public) person ids ``groups``; 1 for None
    (one row per person). The one count of a person's rows: every relation and sensitivity reads it here."""
    if groups is None or not np.size(groups):
        return 1
    return int(np.unique(groups, return_counts=True)[1].max())


def relation_of(num_outputs: int, person_rows: int) -> str:
    """The one format of a recorded relation: ``"row"``, ``"row (P outputs)"`` or ``"person (groups, up to G
    rows[ of P outputs])"`` for ``num_outputs`` P and persons of at most ``person_rows`` G rows (1: a row)."""
    P, G = int(num_outputs), int(person_rows)
    if G > 1:
        return f"person (groups, up to {G} rows{f' of {P} outputs' if P > 1 else ''})"
    return f"row ({P} outputs)" if P > 1 else "row"


def check_relation(text: Any, num_outputs: int) -> str:
    """``text`` if it is a relation a release of ``num_outputs`` outputs per row records (:func:`relation_of`
    for some person size G >= 1), else ``ValueError``: how a release file's ``neighbours`` is read back."""
    match = re.fullmatch(r"person \(groups, up to (\d{1,18}) rows.*", text) if isinstance(text, str) else None
    if not (isinstance(text, str) and text == relation_of(num_outputs, int(match.group(1)) if match else 1)):
        raise ValueError(f"{text!r} is not a neighbouring relation of a release of {int(num_outputs)} output(s) per "
                         f"row ({relation_of(num_outputs, 1)!r} or {relation_of(num_outputs, 2)!r} with G >= 2 rows)")
    return text


def classes_moved(num_classes: int, person_rows: int) -> int:
    """``m = min(K, 2 g)``: the most one-vs-rest problems a neighbour changes, when a person has at most
    ``g = person_rows`` rows and each row's label may move from its class to any other (a row changes the
    problems of the class it leaves and of the class it joins; 2 for one row per person). Public."""
    return min(int(num_classes), 2 * int(person_rows))


def whole_rows_relation(person_rows: int = 1) -> str:
    """The relation a whole-row release records: ``"row (inputs and outputs)"`` for one row, ``"person (groups,
    up to G rows) (inputs and outputs)"`` for persons of at most ``person_rows`` G rows (:func:`relation_of`)."""
    return f"{relation_of(1, int(person_rows))} (inputs and outputs)"


def rows_relation(person_rows: int) -> str:
    """The relation each binary problem's release records for persons of at most ``person_rows`` rows (one
    output per row: ``"row"`` or ``"person (groups, up to g rows)"``, :func:`relation_of`)."""
    return relation_of(1, int(person_rows))


def class_relation(person_rows: int) -> str:
    """The neighbouring relation of a multi-class release for persons of at most ``person_rows`` rows, as its
    card records it: the binary problems' relation and that each label moves between classes."""
    return f"{rows_relation(person_rows)}, labels moved between classes"


def multiclass_step_multiplier(multiplier: float, steps: int, moved: int = 2) -> float:
    """Each Newton step's noise multiplier ``sqrt(m T) s``: a neighbour changes at most ``m = moved`` problems
    (:func:`classes_moved`; 2 for one row per person) x T steps, which compose (Gaussian DP) to
    ``sqrt(m T) / s_step = 1 / s``: :func:`~dpgp_gpflow.composition.gdp_step_multiplier` of the ``m T`` draws."""
    return gdp_step_multiplier(multiplier, moved * steps)
