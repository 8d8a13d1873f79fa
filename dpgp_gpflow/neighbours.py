"""Who a release protects: the neighbouring relation as a public sparse *neighbour map* ``A`` (n x N_c).

Per row (the default, ``groups=None``): neighbouring datasets differ in one centred output by at most
``d``, so a release ``C y_c`` moves by ``d c_i`` for one column ``c_i`` of ``C``: ``A = I``, and
nothing here is used. With ``groups`` (public integers [N]; rows with the same value belong to one
person) neighbours differ in *all* the outputs of one person G, each by at most ``d``: the release
moves by ``C_G delta`` with ``delta`` in the box ``[-d, d]^|G|``. Every quantity the cloaking
mechanism bounds is a norm of a linear map of that shift (``||F^{-1} V_G delta||``, ``||W_G delta||``,
``|P_{jG} delta|``), a convex function of ``delta``, so its largest value over the box is at a corner
``delta = d s``, ``s`` in ``{-1, +1}^|G|`` (``s`` and ``-s`` give the same norm: ``2^(|G|-1)`` corners).
Each corner is one column of ``A`` (entries ``s`` on the person's rows), and the mechanism uses the
columns of ``C A`` wherever it used those of ``C`` (docs/mechanisms.md#groups).

Persons with more than :data:`MAX_CORNER_ROWS` rows would need too many corners; for them ``A`` holds
the columns ``|G| e_i`` (i in G) instead, a valid bound: for any linear ``M`` and ``delta`` in the box,
``||M C_G delta|| <= sum_i |delta_i| ||M c_i|| <= d |G| max_{i in G} ||M c_i||`` (triangle inequality),
the largest norm of ``d M C A`` over that person's columns. It is exact when the person's columns are
parallel with the same sign, and at most ``|G|`` times too large.

**Several outputs** (``Y`` [N, P], :class:`~dpgp_gpflow.models.DPGPR`): the release is of the stacked
vector ``vec(Y_c)`` (all N rows of output 1, then output 2, ...), one *entry* per (row, output), and a
person is all the entries of all their rows (every row its own person without ``groups``). Output p
moves by at most ``d_p`` (its data sensitivity), so a person's box is ``prod_i [-d_i, d_i]`` over their
entries: with ``d = max_p d_p`` and the per-entry ``scale_i = d_i / d`` it is ``D [-d, d]^|G|``
(``D = diag(scale)``), every quantity above is a norm of ``M C D delta'`` for ``delta'`` in the
homogeneous box, and ``A`` is ``D`` times the homogeneous map: corners with entries ``s_i scale_i``,
and above :data:`MAX_CORNER_ROWS` entries the bound's columns ``|G| scale_i e_i`` (the triangle
inequality for the map ``M C D``). The corner/bound rule counts a person's entries (rows x outputs).

The column space of ``C A`` equals that of ``C`` (a person's corners span ``R^|G|``; so do the bound's
columns), so the release's projection and rank rule are unchanged but for the noise floor.
Privacy assumption: ``groups`` is public (which rows belong to one person), fixed without the outputs;
so are the per-output bounds and data sensitivities.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import scipy.sparse
import tensorflow as tf
from check_shapes import check_shapes

# check_relation: released.py reads it here
from .measurement import SensitivityPath
from .relations import check_relation, largest_person, relation_of  # noqa: F401
from .validation import validate_groups

__all__ = ["group_neighbours", "output_neighbours"]

#: Persons with at most this many rows get every corner of their box (``2^(|G|-1)`` columns, exact);
#: larger persons get the ``|G| e_i`` bound (``|G|`` columns). At 4 rows: 8 columns per 4 rows, so
#: ``N_c <= 2 n`` whatever the persons' sizes.
MAX_CORNER_ROWS = 4


@dataclass(frozen=True, eq=False)
class Neighbours:
    """A public neighbour map ``A`` (``size`` x ``count``) held as its non-zero entries: column
    ``columns[j]`` has ``values[j]`` at row ``rows[j]``. Never formed densely."""

    rows: np.ndarray  #: [nnz] int64
    columns: np.ndarray  #: [nnz] int64
    values: np.ndarray  #: [nnz] float64: +-1 on a corner, |G| on the bound's columns
    count: int  #: N_c, the number of extreme changes (columns)
    size: int  #: n, the number of rows
    #: the persons it protects, as a release records them: set only by this module's constructors
    #: (:func:`group_neighbours`, :func:`output_neighbours`: not an argument, so a hand-built map cannot claim
    #: persons its entries do not protect); None for a map built otherwise, which no release records (:func:`path_of`)
    path: Optional[SensitivityPath] = field(default=None, init=False)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Neighbours) and (self.count, self.size) == (other.count, other.size)
                and all(np.array_equal(a, b) for a, b in zip((self.rows, self.columns, self.values),
                                                             (other.rows, other.columns, other.values))))

    __hash__ = None  # type: ignore[assignment]  # mutable arrays inside

    def matrix(self) -> scipy.sparse.csc_matrix:
        """``A`` as a SciPy sparse matrix (``size`` x ``count``)."""
        return scipy.sparse.csc_matrix((self.values, (self.rows, self.columns)), shape=(self.size, self.count))

    def transposed_tensor(self) -> tf.sparse.SparseTensor:
        """``A^T`` as a TensorFlow sparse tensor (``count`` x ``size``, float64)."""
        At = tf.sparse.SparseTensor(np.stack([self.columns, self.rows], axis=1), self.values,
                                    [self.count, self.size])
        return tf.sparse.reorder(At)


def corner_signs(g: int) -> np.ndarray:
    """The ``2^(g-1)`` sign vectors ``s`` in ``{-1, +1}^g`` with ``s_0 = +1`` ([2^(g-1), g]): the corners
    of a box up to the global sign."""
    bits = (np.arange(2 ** (g - 1))[:, None] >> np.arange(g - 2, -1, -1)[None, :]) & 1  # [2^(g-1), g-1]
    return np.concatenate([np.ones((bits.shape[0], 1)), 1.0 - 2.0 * bits], axis=1)


def group_neighbours(groups: Any, num_data: int, scales: Any = None) -> Optional[Neighbours]:
    """The neighbour map of ``groups`` (validated: :func:`~dpgp_gpflow.validation.validate_groups`) for
    ``num_data`` entries, or None when every person has one entry and every scale is 1 (the per-row
    relation, ``A = I``: the release is then exactly the per-row one). ``scales`` ([num_data] in (0, 1],
    default all 1): entry i moves by at most ``scales[i] d`` (a heterogeneous box: several outputs with
    their own sensitivities, module docstring); the map is ``diag(scales)`` times the homogeneous one.
    Loops over the distinct group sizes only. Without ``scales`` the map records its persons' path
    (:class:`~dpgp_gpflow.measurement.SensitivityPath` of the largest person); with them, the caller's. Public."""
    ids = validate_groups(groups, num_data)
    n = int(num_data)
    scale = None
    if scales is not None:
        scale = np.asarray(scales, dtype=np.float64).reshape(-1)
        if scale.shape != (n,) or not np.all((scale > 0.0) & (scale <= 1.0)):
            raise ValueError(f"scales must be {n} numbers in (0, 1], got shape {list(scale.shape)}")
        if np.all(scale == 1.0):
            scale = None
    order = np.argsort(ids, kind="stable") if ids is not None else np.zeros(0, np.int64)
    starts = np.flatnonzero(np.r_[True, ids[order][1:] != ids[order][:-1]]) if ids is not None and n \
        else np.zeros(0, np.int64)
    sizes = np.diff(np.r_[starts, n])
    if ids is None or n == 0 or sizes.max() == 1:  # one entry per person: A = diag(scales), or None
        if scale is None:
            return None
        index = np.arange(n, dtype=np.int64)
        return Neighbours(index, index, scale, n, n)  # scales: the caller's path (output_neighbours)
    rows, columns, values = [], [], []
    count = 0
    for g in np.unique(sizes):
        g = int(g)
        members = order[starts[sizes == g][:, None] + np.arange(g)[None, :]]  # [P, g] the rows of each person
        persons = members.shape[0]
        if g <= MAX_CORNER_ROWS:  # every corner: [P, 2^(g-1), g]
            signs = corner_signs(g)
            corners = signs.shape[0]
            rows.append(np.broadcast_to(members[:, None, :], (persons, corners, g)).ravel())
            values.append(np.broadcast_to(signs[None], (persons, corners, g)).ravel())
            index = count + np.arange(persons * corners).reshape(persons, corners)
            columns.append(np.broadcast_to(index[:, :, None], (persons, corners, g)).ravel())
            count += persons * corners
        else:  # the triangle-inequality bound: |G| e_i for each row i of the person
            rows.append(members.ravel())
            values.append(np.full(members.size, float(g)))
            columns.append(count + np.arange(members.size))
            count += members.size
    entries = np.concatenate(rows).astype(np.int64)
    weights = np.concatenate(values).astype(np.float64)
    if scale is not None:  # the heterogeneous box: D times the homogeneous map
        weights = weights * scale[entries]
    neighbours = Neighbours(entries, np.concatenate(columns).astype(np.int64), weights, int(count), n)
    return neighbours if scale is not None else _recording(neighbours, SensitivityPath(int(sizes.max())))


@check_shapes("M: [r, n]", "return: [r, c]")
def neighbour_columns(M: Any, neighbours: Optional[Neighbours]) -> tf.Tensor:
    """``M A`` ([r, N_c], a sparse product): the columns of ``M`` for every extreme change of the
    neighbouring relation; ``M`` itself for the per-row relation (``neighbours=None``). Public."""
    M = tf.convert_to_tensor(M, tf.float64)
    if neighbours is None:
        return M
    if int(M.shape[1]) != neighbours.size:
        raise ValueError(f"the neighbour map has {neighbours.size} rows but the matrix has {int(M.shape[1])} columns")
    return tf.transpose(tf.sparse.sparse_dense_matmul(neighbours.transposed_tensor(), M, adjoint_b=True))


def model_outputs(model: Any) -> int:
    """The number P of outputs per row of a model (its optional public ``num_outputs``; 1 without)."""
    P = getattr(model, "num_outputs", 1)
    if isinstance(P, bool) or not isinstance(P, (int, np.integer)) or P < 1:
        raise ValueError(f"num_outputs must be a positive integer, got {P!r}")
    return int(P)


def model_neighbours(model: Any, num_data: int) -> Optional[Neighbours]:
    """The neighbour map of a model's optional public ``groups`` member (None: one row per person) for its
    ``num_data`` released entries: its training rows or, for a model of P > 1 outputs
    (:func:`model_outputs`), the ``N P`` entries of the stacked outputs, a person holding every output
    of each of their rows, entry (i, p) scaled by ``d_p / max_q d_q`` (the model's public
    ``output_sensitivities``). The one place a release, an audit or a refusal reads a model's groups
    and outputs."""
    groups = getattr(model, "groups", None)
    P = model_outputs(model)
    if P == 1:
        return group_neighbours(groups, num_data)
    if int(num_data) % P:
        raise ValueError(f"{int(num_data)} released entries are not {P} outputs of whole rows")
    d = np.asarray(model.output_sensitivities, dtype=np.float64).reshape(-1)
    if d.shape != (P,):
        raise ValueError(f"the model has {P} outputs but {d.size} output sensitivities")
    return output_neighbours(groups, int(num_data) // P, d)


def output_neighbours(groups: Any, num_rows: int, sensitivities: Any) -> Optional[Neighbours]:
    """The neighbour map of the ``num_rows P`` stacked entries of P outputs per row (entry ``p num_rows + i``
    is row i's output p; P = the number of ``sensitivities``, output p's ``d_p``): a person holds every
    output of each of their rows (``groups``; None: each row its own person), entry (i, p) scaled by
    ``d_p / max_q d_q`` (module docstring). Public."""
    d = np.asarray(sensitivities, dtype=np.float64).reshape(-1)
    n = int(num_rows)
    ids = validate_groups(groups, n)
    path = SensitivityPath(largest_person(ids), int(d.size))  # persons of whole rows, every output
    ids = np.arange(n, dtype=np.int64) if ids is None else ids
    neighbours = group_neighbours(np.tile(ids, d.size), n * d.size, np.repeat(d / d.max(), n))
    return None if neighbours is None else _recording(neighbours, path)


def _recording(neighbours: Neighbours, path: SensitivityPath) -> Neighbours:
    """A copy of ``neighbours`` recording ``path``, the persons its entries were built for (this module's
    constructors only)."""
    out = dataclasses.replace(neighbours)  # path is not copied (init=False): set here alone
    object.__setattr__(out, "path", path)
    return out


def path_of(neighbours: Optional[Neighbours]) -> SensitivityPath:
    """The sensitivity path a release over ``neighbours`` protects: one row (None), or the persons the map
    records (:attr:`Neighbours.path`). ``ValueError`` for a map that records none (built by hand): its relation
    cannot be recorded, so it is refused before anything is reserved."""
    if neighbours is None:
        return SensitivityPath()
    if neighbours.path is None:
        raise ValueError("this neighbour map does not record the persons it protects, so no release can record its "
                         "relation: build it with dpgp_gpflow.neighbours.group_neighbours or output_neighbours "
                         "(nothing was reserved)")
    return neighbours.path


def relation(model: Any) -> str:
    """The neighbouring relation a model's releases protect, as a release records it
    (``PrivateRelease.neighbours``, the card's ``neighbours``): ``"row"`` (one output of one row),
    ``"row (P outputs)"`` (all outputs of one row) or ``"person (groups, up to G rows[ of P outputs])"``; whole
    rows and several classes as :func:`sensitivity_path` says."""
    return sensitivity_path(model).relation()


def sensitivity_path(model: Any) -> SensitivityPath:
    """What a model's releases' sensitivity is computed for (:class:`~dpgp_gpflow.measurement.SensitivityPath`):
    its persons' largest number of rows (its public ``groups``; 1 without) and its outputs per row; whole rows
    for a model of private inputs (``private_inputs``), label moves between classes for a one-vs-rest model
    of several classes (its ``problems`` and ``num_classes``). Public."""
    groups = getattr(model, "groups", None)
    ids = None if groups is None else validate_groups(groups, np.size(groups))
    rows = largest_person(ids)
    if getattr(model, "private_inputs", False) is True:
        return SensitivityPath(rows, inputs=True)
    if getattr(model, "problems", None) is not None and getattr(model, "num_classes", None) is not None:
        return SensitivityPath(rows, classes=True)
    return SensitivityPath(rows, model_outputs(model))


def refuse_groups(model: Any, what: str) -> None:
    """``NotImplementedError`` when ``model`` has ``groups`` or several outputs per row and ``what`` does not
    support them yet: nothing may silently protect rows (or single outputs) where persons were asked for."""
    P = model_outputs(model)
    if P > 1:
        raise NotImplementedError(f"{what} does not support several outputs (Y with {P} columns) yet; release "
                                  "with model.release (docs/guides/multi_output.md)")
    if getattr(model, "groups", None) is not None:
        raise NotImplementedError(f"{what} does not support groups= (person-level privacy) yet; release with "
                                  "model.release / model.release_function (docs/guides/groups.md)")
