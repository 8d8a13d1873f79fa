"""What a selection reads of a model's private outputs: Q *columns* sharing one fold map, each with its
own public data sensitivity, and how many of them one neighbour moves (docs/selection.md#several-outputs,
docs/selection.md#several-classes).

* **One output** (``DPGPR``, ``DPSGPR``, ``DPGPRFITC``, the binary Laplace classifiers): Q = 1; a neighbour
  moves it (one row, or with ``groups`` each row of one person).
* **Several outputs** (``Y`` [N, P]: ``DPGPR``, ``DPSGPR``, ``DPGPRFITC``): Q = P columns; one kernel and
  likelihood (and inducing inputs) give every output the same fold map ``C_f`` (``split_terms``). A neighbour moves all P columns of a row (with ``groups``: of each of
  one person's rows), column p by at most ``d_p``. Each column's loss is measured in units of its own
  ``d_p`` (:func:`~dpgp_gpflow.selection.utility.output_weight`), so a wide output does not dominate. The
  release the utility models is the stacked one, ``(I_P kron C_f) vec(Y)``, under the entry-level neighbour
  map (:func:`~dpgp_gpflow.neighbours.model_neighbours`).
* **Several classes** (``DPMulticlassLaplaceGPC``, ``DPSparseMulticlassLaplaceGPC``): Q = K one-vs-rest label
  columns (``+1`` for the class, ``-1`` elsewhere; ``d = 2`` each), every class sharing the binary problem's
  first-step map. A label moving from class a to class b moves columns a and b of its row, by 2 each, and
  no other: each row of the neighbour (one row, or with ``groups`` each of one person's rows) moves 2
  columns. Each class is released on its own, protecting the person's rows (with ``groups``), at the
  multi-class step multiplier ``sqrt(m) s`` of one step, ``m = min(K, 2 g)`` the classes a person of up to g
  rows changes (:func:`~dpgp_gpflow.models.multiclass.multiclass_step_multiplier`, ``classes_moved``).

Privacy assumption: the number of columns, the bounds and the sensitivities are public (fixed without the
outputs); only :func:`private_columns` reads the outputs.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Tuple

import numpy as np

from ..contract import PrivateModel, unstacked
from ..models.multiclass import DPMulticlassLaplaceGPC, DPSparseMulticlassLaplaceGPC, class_relation
from ..neighbours import model_outputs, relation
from ..validation import validate_data_sensitivity, validate_output_sensitivities

__all__: list[str] = []  # internal: the package imports these names by name

#: The kinds of columns: ``"outputs"`` (one or several outputs per row) or ``"classes"`` (one-vs-rest labels).
KINDS = ("outputs", "classes")


class OutputColumns(NamedTuple):
    """The public description of a model's private columns (module docstring)."""

    kind: str  #: ``"outputs"`` or ``"classes"``
    sensitivities: Tuple[float, ...]  #: [Q] how far column q moves between neighbours (``d_q``)
    moved: int  #: how many columns each row of a neighbour moves: P (a row's outputs), 2 (a label between classes), 1
    neighbours: str  #: the relation, as a release records it (``neighbours.relation``, ``class_relation``)
    #: classes: how many classes' releases one neighbour changes, ``m`` of the step multiplier ``sqrt(m) s``
    #: (the model's ``classes_moved``); 1 otherwise (one release of every column)
    release_moved: int = 1

    @property
    def num_columns(self) -> int:
        """Q, the number of columns."""
        return len(self.sensitivities)

    @property
    def data_sensitivity(self) -> float:
        """``d = max_q d_q``: the unit of every column's loss (:func:`~dpgp_gpflow.selection.utility.output_weight`)."""
        return max(self.sensitivities)

    @property
    def stacked(self) -> bool:
        """Whether the columns are released together, stacked output by output (several outputs per row);
        otherwise each column is released on its own (one output; each class)."""
        return self.kind == "outputs" and self.num_columns > 1


def is_multiclass(model: Any) -> bool:
    """Whether ``model`` is a one-vs-rest classifier of several classes."""
    return isinstance(model, (DPMulticlassLaplaceGPC, DPSparseMulticlassLaplaceGPC))


def check_selectable(model: Any) -> None:
    """``TypeError`` unless ``model`` meets the :class:`~dpgp_gpflow.contract.PrivateModel` contract or is a
    multi-class classifier (whose binary problems do)."""
    if not (is_multiclass(model) or isinstance(model, PrivateModel)):
        raise TypeError(f"{type(model).__name__} does not meet the PrivateModel contract (see dpgp_gpflow.contract)")


def fold_model(model: Any) -> Any:
    """The :class:`~dpgp_gpflow.contract.PrivateModel` whose ``split_terms``, bounds and ``output_bound``
    serve every column: the model itself, or a multi-class model's first binary problem (every class shares
    the public ``X`` and kernel, hence the fold maps). Public."""
    return model.problems[0] if is_multiclass(model) else model


def is_classifier(model: Any) -> bool:
    """Whether ``model`` is a Laplace classifier (binary, or several classes): its labels ``+1`` / ``-1``
    move by exactly its fixed ``data_sensitivity`` (2) between neighbours (a label flip)."""
    return getattr(fold_model(model), "classifier_latent", False) is True


def label_sensitivity(model: Any, d: Any) -> float:
    """A classifier's label change: its fixed ``data_sensitivity`` (2); ``d`` must be None or that value.

    A smaller ``d`` would not cover a label flip (``-1`` to ``+1`` moves a label by 2) while the selection
    records the relation of label moves: ``ValueError`` before anything is reserved."""
    fixed = float(fold_model(model).data_sensitivity)
    if d is not None and validate_data_sensitivity(d, fold_model(model).y_bounds) != fixed:
        raise ValueError(f"d = {float(d)} for {type(model).__name__}: a classifier's labels move by exactly "
                         f"{fixed:g} between neighbours (a label flip from -1 to +1), so d is fixed; leave d unset "
                         "(None)")
    return fixed


def model_columns(model: Any, d: Any = None) -> OutputColumns:
    """The public :class:`OutputColumns` of ``model``. ``d``: how far each output may move (None: the
    model's own sensitivities), validated against the bounds: one number, or for P outputs one number or
    P numbers (``ValueError`` / ``TypeError`` otherwise). Classifiers (binary or several classes): ``d`` is
    fixed at the labels' 2 (:func:`label_sensitivity`: None or 2, any other value refused); classes: a
    neighbour moves two columns. Reads no outputs."""
    if is_multiclass(model):
        K = int(model.num_classes)
        return OutputColumns("classes", (label_sensitivity(model, d),) * K, 2, class_relation(model.person_rows),
                             int(model.classes_moved))
    P = model_outputs(model)
    if P == 1:
        if is_classifier(model):
            sensitivity = label_sensitivity(model, d)
        elif d is None:
            sensitivity = model.data_sensitivity
        else:
            lo, hi = model.y_bounds
            sensitivity = validate_data_sensitivity(d, (lo, hi))
        return OutputColumns("outputs", (float(sensitivity),), 1, relation(model))
    sensitivities = tuple(model.output_sensitivities) if d is None else \
        validate_output_sensitivities(d, model.y_bounds, P)
    return OutputColumns("outputs", tuple(float(v) for v in sensitivities), P, relation(model))


def private_columns(model: Any) -> np.ndarray:
    """PRIVATE: the model's centred, clipped outputs as columns: [n] for one column, [n, Q] otherwise
    (several outputs unstacked, :func:`~dpgp_gpflow.contract.unstacked`; classes the K binary problems'
    labels, ``+1`` / ``-1``)."""
    if is_multiclass(model):
        return np.stack([p.centred_outputs().numpy().astype(np.float64).reshape(-1) for p in model.problems], axis=1)
    y = model.centred_outputs().numpy().astype(np.float64).reshape(-1)
    return unstacked(y, model_outputs(model))


def num_rows(model: Any) -> int:
    """The number of training rows of ``model``: public (neighbours differ in outputs' values, not in their
    number); only the shape of the outputs is read."""
    n = int(fold_model(model).centred_outputs().shape[0])
    return n // model_outputs(model) if not is_multiclass(model) else n


def column(values: np.ndarray, q: int) -> np.ndarray:
    """Column ``q`` of [n] (one column) or [n, Q] values."""
    return values if values.ndim == 1 else values[:, q]


def stack_noise(noise: np.ndarray, count: int) -> np.ndarray:
    """One column's noise std [k] repeated for ``count`` columns ([k, count]); [k] itself for one column."""
    if count == 1:
        return noise
    return np.repeat(np.asarray(noise)[:, None], count, axis=1)
