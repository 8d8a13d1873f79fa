"""Publishing released objects: :func:`load` reads back what :meth:`~dpgp_gpflow.released.Released.save` wrote.

A release file (``docs/release_file.md``) names the kind of object it holds and, for a function or
classifier, the kind of its readout. :func:`load` verifies the file (:func:`dpgp_gpflow.io.format.read`:
limits, format version and SHA-256), rebuilds the readout from :data:`READOUT_KINDS` and the object from
:data:`RELEASED_KINDS`, checking its card and every release for meaning (:mod:`dpgp_gpflow.io.card`, the
same checks :func:`~dpgp_gpflow.io.card.read_card` and ``dpgp show`` run without TensorFlow), then checks
that the file holds exactly what the object writes (``docs/release_file.md#what-loading-checks``). Nothing
else is ever instantiated, and nothing from the file is executed.

A loaded object needs neither the model nor the private outputs: a function or classifier predicts
from the released values and the frozen public pieces in the file (for a full-GP Laplace classifier
these include the public training inputs, as ``k(X*, X)`` needs them; never the labels).

To make a new readout loadable, give it ``release_state()`` and the classmethod
``from_release_state(content, arrays)`` (as :class:`~dpgp_gpflow.models.fitc.FITCReadout` has) and add
its class to ``_READOUT_CLASSES``: one line.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Mapping, Type, Union

import numpy as np

from ..models.dp_laplace import PrivateLaplaceClassifier, PrivateSparseClassifier
from ..models.laplace import LaplaceReadout, SoRReadout
from ..models.fitc import FITCReadout
from ..models.multiclass_classifier import PrivateMulticlassClassifier
from ..models.sgpr import SGPRReadout
from .card import read_card
from .format import ReleaseDocument, ReleaseFileError, ReleaseFileKindError, as_read_back, read
from ..released import PrivateClassifier, PrivateFunction, Released, release_from_document

__all__ = ["READOUT_KINDS", "RELEASED_KINDS", "load", "read_card", "readout_of"]  # the file's errors: dpgp_gpflow.io

#: The readouts a release file may hold; each has ``release_state`` and ``from_release_state``.
_READOUT_CLASSES = (
    FITCReadout,
    LaplaceReadout,
    SGPRReadout,
    SoRReadout,
)
#: Readout kind (its class name, as written in the file) -> class (each has ``from_release_state``).
READOUT_KINDS: Dict[str, Any] = {cls.__name__: cls for cls in _READOUT_CLASSES}

#: The function and classifier classes a release file may hold (built by ``from_release_document``).
_FUNCTION_CLASSES = (PrivateFunction, PrivateClassifier, PrivateLaplaceClassifier, PrivateSparseClassifier)


def _load_function(cls: Type[PrivateFunction]) -> Callable[[ReleaseDocument], Released]:
    def load_function(document: ReleaseDocument) -> Released:
        return cls.from_release_document(document, _readout(document))

    return load_function


def _load_multiclass(document: ReleaseDocument) -> Released:
    return PrivateMulticlassClassifier.from_release_document(document, readout_of)


#: Object kind (its class name, as written in the file) -> loader of a verified document.
RELEASED_KINDS: Dict[str, Callable[[ReleaseDocument], Released]] = {
    "PrivateRelease": release_from_document,
    **{cls.__name__: _load_function(cls) for cls in _FUNCTION_CLASSES},
    PrivateMulticlassClassifier.__name__: _load_multiclass,
}

# Each loader runs its kind's card checks (io/card.py's CARD_KINDS, which lists exactly these kinds:
# tests/test_release_file_checks.py).


def readout_of(spec: Any, arrays: Mapping[str, np.ndarray], where: str) -> Any:
    """The readout of a file's ``{"kind", "state"}`` specification at ``where`` (e.g. ``content.readout``) with
    its arrays (names as the readout's ``release_state`` gives them): only the classes of
    :data:`READOUT_KINDS`, rebuilt by their ``from_release_state``; ``ReleaseFileError`` naming ``where``."""
    if not isinstance(spec, dict) or set(spec) != {"kind", "state"} or not isinstance(spec["state"], dict):
        raise ReleaseFileError(f"{where} must be an object with kind and state")
    kind = spec["kind"]
    if kind not in READOUT_KINDS:
        raise ReleaseFileKindError(
            f"unknown readout kind {kind!r}: this dpgp_gpflow loads {sorted(READOUT_KINDS)} (a newer version may "
            "know it)")
    try:
        return READOUT_KINDS[kind].from_release_state(spec["state"], arrays)
    except ReleaseFileError as exc:
        raise type(exc)(f"{where}: {exc}") from None


def _readout(document: ReleaseDocument) -> Any:
    prefix = "readout/"
    arrays = {name[len(prefix):]: a for name, a in document.arrays.items() if name.startswith(prefix)}
    return readout_of(document.content.get("readout"), arrays, "content.readout")


def _difference(found: Any, expected: Any, where: str) -> Any:
    """The first place (``where.key[i]``) at which two plain JSON values differ, or None."""
    if isinstance(found, dict) and isinstance(expected, dict):
        for key in sorted(set(found) | set(expected)):
            if key not in expected:
                return f"{where}.{key} (unknown field)"
            if key not in found:
                return f"{where}.{key} (missing)"
            place = _difference(found[key], expected[key], f"{where}.{key}")
            if place:
                return place
        return None
    if isinstance(found, list) and isinstance(expected, list) and len(found) == len(expected):
        return next(filter(None, (_difference(a, b, f"{where}[{i}]") for i, (a, b) in enumerate(zip(found, expected)))),
                    None)
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (found, expected))
    return None if found == expected and (numbers or type(found) is type(expected)) else where


def _check_exactly_written(document: ReleaseDocument, released: Released) -> None:
    """``ReleaseFileError`` unless the file's content and array names are what ``released`` writes
    (:meth:`~dpgp_gpflow.released.Released.file_content`, recomputed): nothing unknown is carried."""
    content, arrays = released.file_content()
    unknown = sorted(set(document.arrays) - set(arrays))
    if unknown:
        raise ReleaseFileError(f"arrays: unknown array(s) {unknown}; a {document.kind} file holds {sorted(arrays)}")
    place = _difference(document.content, as_read_back(content, "content"), "content")
    if place:
        raise ReleaseFileError(f"{place}: not what the loaded {document.kind} writes")


def load(path: Union[str, "os.PathLike[str]"]) -> Released:
    """The released object in the release file at ``path`` (written by ``save``).

    Raises :class:`~dpgp_gpflow.io.format.ReleaseFileVersionError` for an unknown format version,
    :class:`~dpgp_gpflow.io.format.ReleaseFileIntegrityError` when the content does not match the
    file's SHA-256 (damaged or edited; the hash does not stop a forger, who can recompute it),
    :class:`~dpgp_gpflow.io.format.ReleaseFileKindError` for an unknown kind of object, readout or
    kernel, and :class:`~dpgp_gpflow.io.format.ReleaseFileError` for any other malformed, meaningless
    or inconsistent content (one line naming the field; ``docs/release_file.md#what-loading-checks``).
    All are ``ValueError``. The privacy card is a claim of whoever wrote the file, not a proof.
    """
    document = read(path)
    if document.kind not in RELEASED_KINDS:
        raise ReleaseFileKindError(
            f"{path}: unknown kind of released object {document.kind!r}: this dpgp_gpflow loads "
            f"{sorted(RELEASED_KINDS)} (a newer version may know it)")
    try:
        released = RELEASED_KINDS[document.kind](document)
        _check_exactly_written(document, released)
    except ReleaseFileError as exc:
        raise type(exc)(f"{path}: {exc}") from None
    return released
