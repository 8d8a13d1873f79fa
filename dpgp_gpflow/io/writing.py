"""Writing a release file: what each kind of released object writes (``docs/release_file.md``), composed here.

A released object hands over its public state (its releases, its readout and coordinates, its classes, its
released statistics and public pieces); it never assembles the file. Each kind registers the writer of its
content (:func:`register`, one line beside its class, as a readout registers ``release_spec()`` for reading);
:func:`file_content` finds it along the class's MRO, and :func:`save` adds the privacy card and writes the
document through :mod:`.format`. :func:`dpgp_gpflow.io.loading.load` reads it back and checks that a file holds
exactly what its loaded object writes (:func:`file_content` again). Saving is post-processing: nothing here
draws or charges. Privacy assumption: every piece written is a released (noised) value or public.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Tuple, Union

import numpy as np

from .card import RELEASE_ARRAYS
from .format import inputs_hash, provenance, write
from .gpflow_specs import kernel_spec

__all__: list[str] = []  # internal: the package imports these names by name

#: A release file's ``(content, arrays)``.
Content = Tuple[Dict[str, Any], Dict[str, np.ndarray]]
#: The writer of a kind's content from a released object's public state.
Writer = Callable[[Any], Content]

_WRITERS: Dict[type, Writer] = {}

#: The per-value arrays of a release: [k, P] in memory; in a file [k, P] for P > 1 and [k] for one output.
VALUE_ARRAYS = ("mean", "variance", "noise_std")


def register(cls: type, writer: Writer) -> None:
    """Register ``writer`` as what a release file of ``cls`` (and of its subclasses without their own) holds."""
    _WRITERS[cls] = writer


def file_content(released: Any) -> Content:
    """``(content, arrays)`` of ``released``'s release file (the card is added by :func:`write_released`): the writer
    registered for its class or its nearest registered base; ``NotImplementedError`` when none is."""
    for cls in type(released).__mro__:
        if cls in _WRITERS:
            return _WRITERS[cls](released)
    raise NotImplementedError(f"no release file form is registered for {type(released).__qualname__}")


def write_released(released: Any, path: Union[str, "os.PathLike[str]"], *, inputs: Any = None, **card_extras: Any) -> Path:
    """Write ``released`` to a release file at ``path`` (:meth:`dpgp_gpflow.released.Released.save` says what the
    card records): its class's name as the kind, its ``privacy_card()``, the software versions, the creation time,
    ``inputs_hash`` and ``card_extras``; the content and arrays of :func:`file_content`."""
    cls = type(released)
    if not cls.__module__.startswith("dpgp_gpflow."):
        raise NotImplementedError(
            f"cannot save a {cls.__module__}.{cls.__qualname__}: release files hold dpgp_gpflow's own released "
            "classes only (a subclass would load as a class without its own behaviour)")
    content, arrays = file_content(released)
    card = released.privacy_card()
    reserved = set(card) | {"software", "created"}
    clash = sorted(reserved & set(card_extras))
    if clash:
        raise ValueError(f"card_extras may not set the card's own keys {clash}")
    recorded = card_extras.pop("inputs_hash", None)
    if recorded is not None and not (isinstance(recorded, str) and re.fullmatch(r"[0-9a-f]{64}", recorded)):
        raise ValueError(f"inputs_hash must be 64 lower-case hex digits (a SHA-256), got {recorded!r}")
    if inputs is not None:
        computed = inputs_hash(inputs)
        if recorded is not None and recorded != computed:
            raise ValueError("inputs_hash does not match the SHA-256 of the inputs given")
        recorded = computed
    card.update(provenance())
    card["inputs_hash"] = recorded
    card.update(card_extras)
    return write(path, cls.__name__, card, content, arrays)


# ---------------------------------------------------------------------------------------------
# The writers (docs/release_file.md).


def releases_content(released: Any) -> Content:
    """Every release's arrays under ``releases/<i>/`` (one output's values [k], the file format's shape); no
    content. What a :class:`~dpgp_gpflow.released.PrivateRelease` file holds."""
    arrays: Dict[str, np.ndarray] = {}
    for i, r in enumerate(released.releases):
        for name in RELEASE_ARRAYS:
            a = np.asarray(getattr(r, name), dtype=np.float64)
            arrays[f"releases/{i}/{name}"] = a[:, 0] if name in VALUE_ARRAYS and r.num_outputs == 1 else a
    return {}, arrays


def function_content(function: Any) -> Content:
    """The releases' arrays, ``R`` (``coordinates``) and the readout's frozen public state (``readout/...``, from
    its ``release_state()``): ``docs/release_file.md#functions-and-classifiers``. Nothing here needs the private
    outputs or, except for a Laplace readout (``k(X*, X)``), the training inputs."""
    content, arrays = releases_content(function)
    readout = function.readout
    state = getattr(readout, "release_state", None)
    readout_cls = type(readout)
    if state is None or not readout_cls.__module__.startswith("dpgp_gpflow."):
        raise NotImplementedError(
            f"cannot save the readout {readout_cls.__qualname__}: a release file holds dpgp_gpflow's readouts that "
            "define release_state() (export_saved_model needs no file form)")
    readout_content, readout_arrays = state()
    coordinates = function.coordinates
    content = {**content, "readout": {"kind": readout_cls.__name__, "state": readout_content},
               "coordinates": coordinates is not None}
    if coordinates is not None:
        arrays["coordinates"] = coordinates.numpy()
    arrays.update({f"readout/{name}": np.asarray(a) for name, a in readout_arrays.items()})
    return content, arrays


def classes_writer(class_kinds: Mapping[str, type]) -> Writer:
    """The writer of a multi-class release whose classes are of ``class_kinds`` (kind -> class): every release
    under ``releases/<i>/`` (class by class), and per class its classifier's kind, readout (``kind``, ``state``)
    and coordinates flag (``content.classes``), each readout's arrays by index into a pool ``readout/<j>`` in
    which identical arrays are stored once (every class shares ``X`` and, for one step or the sparse variant,
    every factor): docs/release_file.md#several-classes."""

    def classes_content(released: Any) -> Content:
        content, arrays = releases_content(released)
        pool: Dict[Tuple[str, Tuple[int, ...], str], int] = {}
        classes = []
        for a, classifier in enumerate(released.classifiers):
            kind = type(classifier).__name__
            if class_kinds.get(kind) is not type(classifier):
                raise NotImplementedError(f"cannot save a multi-class release of {kind}s: a release file holds "
                                          f"{sorted(class_kinds)}")
            own, own_arrays = file_content(classifier)
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

    return classes_content


def _statistics_arrays(prefix: str, statistics: Mapping[str, np.ndarray], upper: Any) -> Dict[str, np.ndarray]:
    """``(S, b, q)`` as a file holds them: ``S`` through its upper triangle (row by row), ``q`` as [1]."""
    return {f"{prefix}/S": statistics["S"][upper], f"{prefix}/b": statistics["b"],
            f"{prefix}/q": np.reshape(statistics["q"], [1])}


#: The public pieces of a whole-row release's content (and of each candidate's), in the order written.
WHOLE_ROWS_PIECES = ("kernel", "k_max", "jitter", "variances", "kernel_variance", "noise_variance")


def _whole_rows_pieces(released: Any) -> Dict[str, Any]:
    """The :data:`WHOLE_ROWS_PIECES` of a whole-row release: kernel, ``k_max``, jitter, variances."""
    features = released.features
    values = (kernel_spec(features.kernel), features.k_max, features.jitter, released.variances,
              released.kernel_variance, released.noise_variance)
    return dict(zip(WHOLE_ROWS_PIECES, values))


def whole_rows_content(released: Any) -> Content:
    """``(content, arrays)`` of a whole-row release (docs/release_file.md#whole-row-releases): the released
    statistics as released (``S`` through its upper triangle, row by row), their noise std, ``Z``, and the public
    pieces (kernel, ``k_max``, jitter, variances; every candidate's statistics and kernel when a grid of
    lengthscales was released). Nothing of the rows but the released statistics."""
    upper = np.triu_indices(released.features.m)
    arrays = {"inducing_inputs": released.features.Z}
    arrays.update(_statistics_arrays("statistics", released.statistics, upper))
    arrays.update(_statistics_arrays("noise_std", released.statistics_noise_std, upper))
    candidates = []
    for i, c in enumerate(released.candidates):
        arrays.update(_statistics_arrays(f"candidates/{i}", c.statistics, upper))
        candidates.append(_whole_rows_pieces(c))
    content = {**_whole_rows_pieces(released), "candidates": candidates,
               "selection": None if released.selection is None else dict(released.selection)}
    return content, {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()}


def whole_rows_classifier_content(released: Any) -> Content:
    """``(content, arrays)`` of a whole-row classifier (docs/release_file.md#whole-row-classifiers): each block's
    statistics as released (``statistics/<a>/S`` the upper triangle row by row, ``b``, ``q``; one block binary, K
    one-vs-rest), their noise std once (every block's is the same), ``Z`` and the public pieces (kernel,
    ``k_max``, jitter). Nothing of the rows but the released statistics."""
    features = released.features
    m = features.m
    upper = np.triu_indices(m)
    blocks = 1 if released.num_classes is None else released.num_classes
    statistics = released.statistics
    S = np.reshape(statistics["S"], (blocks, m, m))
    b = np.reshape(statistics["b"], (blocks, m))
    q = np.reshape(statistics["q"], (blocks,))
    std = {k: np.reshape(v, (blocks, -1))[0] for k, v in released.statistics_noise_std.items()}
    arrays = {"inducing_inputs": features.Z, "noise_std/S": np.reshape(std["S"], (m, m))[upper],
              "noise_std/b": std["b"], "noise_std/q": std["q"]}
    for a in range(blocks):
        arrays.update({f"statistics/{a}/S": S[a][upper], f"statistics/{a}/b": b[a],
                       f"statistics/{a}/q": q[a:a + 1]})
    content = {"kernel": kernel_spec(features.kernel), "k_max": features.k_max, "jitter": features.jitter}
    return content, {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()}


def histogram_content(released: Any) -> Content:
    """``(content, arrays)`` of a histogram residual release (docs/release_file.md#histogram-residual-releases): the
    counts-and-``b`` stage as released (``histogram/counts`` [C], ``histogram/b`` [M], their two noise stds
    ``histogram/noise_std`` [2]), the public grid's centres (``histogram/centres`` [C, D]), every residual stage's
    released sum (``residual/b`` [J - 1, M]) and noise std (``residual/noise_std`` [J - 1]), ``Z`` and the public
    pieces (kernel, ``k_max``, jitter). Nothing of the rows but the released values."""
    features = released.features
    statistics, std = released.statistics, released.statistics_noise_std
    arrays = {"inducing_inputs": features.Z, "histogram/centres": released.centres,
              "histogram/counts": statistics["counts"], "histogram/b": statistics["b"],
              "histogram/noise_std": [std["counts"][0], std["b"][0]], "residual/b": statistics["residual_b"],
              "residual/noise_std": std["residual_b"][:, 0]}
    content = {"kernel": kernel_spec(features.kernel), "k_max": features.k_max, "jitter": features.jitter}
    return content, {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()}
