"""A readout's state in a release file, read here from the spec its class registers (``docs/release_file.md#readouts``).

A readout (:class:`~dpgp_gpflow.readouts.SparseReadout`, :class:`~dpgp_gpflow.readouts.LaplaceReadout`,
:class:`~dpgp_gpflow.readouts.SoRReadout`) writes ``release_state()``: ``content`` with ``input_dim``, its
kernel's specification (and a mean function's, and ``outputs`` P > 1) and its arrays. It registers what that
state holds with ``release_spec()`` (a :class:`ReadoutSpec`) and builds itself from the parsed pieces with
``from_file_pieces(pieces)`` (a :class:`ReadoutPieces`); it never parses the file itself. :func:`readout_from_state`
does: the arrays' presence, dtype, shapes and finiteness, the kernel and mean function rebuilt
(:mod:`.gpflow_specs`), ``outputs`` checked. Privacy assumption: everything in a readout is public.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, NamedTuple, Tuple

import numpy as np
import tensorflow as tf

from .format import ReleaseFileError, take_factors
from .gpflow_specs import kernel_from_spec, mean_function_from_spec

__all__: list[str] = []  # internal: the package imports these names by name


class ReadoutSpec(NamedTuple):
    """What a readout's state in a release file holds (``release_spec()`` of its class)."""

    points: str  #: the array of its inputs [m, D] (D: the content's ``input_dim``)
    squares: Tuple[str, ...]  #: its [m, m] factors
    vectors: Tuple[str, ...] = ()  #: its [m] vectors
    nonnegative: Tuple[str, ...] = ()  #: the vectors whose entries are >= 0
    mean_function: bool = False  #: the content holds a ``mean_function`` specification
    outputs: bool = False  #: the content may hold ``outputs``: P >= 2 (absent for one output)


class ReadoutPieces(NamedTuple):
    """A readout's state parsed and checked (:func:`readout_from_state`): what ``from_file_pieces`` builds from."""

    kernel: Any  #: the frozen GPflow kernel, exactly the saved values
    arrays: Dict[str, np.ndarray]  #: the spec's arrays by name, float64 and finite
    mean_function: Any = None  #: the frozen mean function (None when the spec has none)
    outputs: int = 1  #: P


def readout_from_state(cls: Any, content: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> Any:
    """The readout of class ``cls`` from its state in a release file (``content``, and ``arrays`` named as its
    ``release_state`` names them), parsed as ``cls.release_spec()`` says and built by ``cls.from_file_pieces``;
    ``ReleaseFileError`` (naming the class) for anything missing, malformed or inconsistent."""
    name, spec = cls.__name__, cls.release_spec()
    a = take_factors(name, content, arrays, spec.points, spec.squares, spec.vectors)
    for vector in spec.nonnegative:
        if np.any(a[vector] < 0):
            raise ReleaseFileError(f"{name}: {vector} has negative values")
    P = content.get("outputs", 1) if spec.outputs else 1
    if spec.outputs and "outputs" in content and not (isinstance(P, int) and not isinstance(P, bool) and P >= 2):
        raise ReleaseFileError(f"{name}: outputs must be an integer >= 2 (absent for one output), got {P!r}")
    dim = int(a[spec.points].shape[1])
    kernel = kernel_from_spec(content.get("kernel"), dim)
    mean_function = None
    if spec.mean_function:
        mean_function = mean_function_from_spec(content.get("mean_function"))
        columns = int(mean_function(tf.zeros([1, dim], tf.float64)).shape[-1])
        if columns not in (1, P):
            raise ReleaseFileError(f"{name}: the mean function gives {columns} outputs, the readout {P}")
    return cls.from_file_pieces(ReadoutPieces(kernel, a, mean_function, P))
