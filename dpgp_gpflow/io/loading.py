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

To make a new readout loadable, give it ``release_state()``, ``release_spec()`` (what the state holds:
:class:`~dpgp_gpflow.io.readouts.ReadoutSpec`) and the classmethod ``from_file_pieces(pieces)`` (as
:class:`~dpgp_gpflow.readouts.FITCReadout` has) and add its class to ``_READOUT_CLASSES``: one line.
"""

from __future__ import annotations

import os
import dataclasses
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Type, TypeVar, Union, cast

import numpy as np
import tensorflow as tf

from ..models.dp_laplace import PrivateLaplaceClassifier, PrivateSparseClassifier
from ..models.multiclass_classifier import CLASS_KINDS, PrivateMulticlassClassifier
from ..readouts import FITCReadout, LaplaceReadout, SGPRReadout, SoRReadout
from ..whole_rows.features import FeatureMap
from ..whole_rows.lengthscales import choose
from ..whole_rows.mechanism import NoisedStatistics
from ..whole_rows.classification import WholeRowsClassifier
from ..whole_rows.histogram import NoisedHistogram, histogram_cells, histogram_centres
from ..whole_rows.histogram_release import HistogramResidualRelease
from ..whole_rows.released import WholeRowsRelease
from ..whole_rows.residual import radius_features, radius_points, replay
from ..whole_rows.residual_bounds import RESIDUAL_RADIUS_RTOL, radii_replayed
from ..whole_rows.residual_release import ResidualRelease, ResidualStage, residual_release
from ..mechanisms.request import release_request
from .card import (
    check_kind,
    clip_flag,
    histogram_card,
    laplace_releases,
    multiclass_releases,
    read_card,
    release_of_card,
    releases_of_card,
    residual_card,
    residual_first_stage,
    residual_multipliers,
    whole_rows_arrays,
    whole_rows_card,
    whole_rows_classifier_card,
)
from .gpflow_specs import kernel_from_spec
from .format import ReleaseDocument, ReleaseFileError, ReleaseFileKindError, as_read_back, read, take_arrays
from .readouts import readout_from_state
from .writing import WHOLE_ROWS_PIECES, file_content
from ..released import PrivateClassifier, PrivateFunction, PrivateRelease, Released

__all__ = ["load", "read_card"]

#: The readouts a release file may hold; each has ``release_state``, ``release_spec`` and ``from_file_pieces``.
_READOUT_CLASSES = (
    FITCReadout,
    LaplaceReadout,
    SGPRReadout,
    SoRReadout,
)
#: Readout kind (its class name, as written in the file) -> class (read by :func:`~dpgp_gpflow.io.readouts.readout_from_state`).
READOUT_KINDS: Dict[str, Any] = {cls.__name__: cls for cls in _READOUT_CLASSES}

#: The function and classifier classes a release file may hold (built by :func:`_load_function`).
_FUNCTION_CLASSES = (PrivateFunction, PrivateClassifier, PrivateLaplaceClassifier, PrivateSparseClassifier)


def _release(document: ReleaseDocument) -> PrivateRelease:
    """The :class:`~dpgp_gpflow.released.PrivateRelease` of a verified file of kind ``"PrivateRelease"``
    (:func:`~dpgp_gpflow.io.card.release_of_card`): clipped when the card's ``clip_to_bounds`` says its mean
    was (absent: false, as files written before the flag existed)."""
    release = PrivateRelease.from_entry(release_of_card(document)[0])
    if clip_flag(document.card):  # the file holds the clipped mean: no raw mean to keep (unclipped() refuses)
        return dataclasses.replace(release, clip_to_bounds=True)
    return release


_Function = TypeVar("_Function", bound=PrivateFunction)


def _function(cls: Type[_Function], releases: Tuple[PrivateRelease, ...], readout: Any,
              coordinates: Optional[np.ndarray]) -> _Function:
    """A ``cls`` of ``releases`` and a rebuilt readout, with the state the constructor sets (clipping off)."""
    function = cls.__new__(cls)
    PrivateFunction.__init__(function, releases[-1], readout, coordinates, releases=releases, clip_to_bounds=False)
    return function


def _load_function(cls: Type[PrivateFunction]) -> Callable[[ReleaseDocument], Released]:
    """The loader of a verified file of kind ``cls``: its releases (:func:`~dpgp_gpflow.io.card.releases_of_card`;
    for a :class:`~dpgp_gpflow.models.dp_laplace.PrivateLaplaceClassifier` :func:`~dpgp_gpflow.io.card.laplace_releases`,
    with the Gaussian-DP guarantee of its steps when the card states one), coordinates ``R`` [m, m], readout
    (:func:`readout_of`, checked to map the release's m latents of P outputs) and the card's ``clip_to_bounds``
    (absent: false, older files)."""
    def load_function(document: ReleaseDocument) -> Released:
        composed = None
        if cls is PrivateLaplaceClassifier:
            entries, composed = laplace_releases(document)
        else:
            entries = releases_of_card(document)
        releases = tuple(PrivateRelease.from_entry(e) for e in entries)
        P = releases[-1].num_outputs
        m = releases[-1].mean.shape[0] * P  # the latents, stacked output by output
        coordinates = None
        flag = document.content.get("coordinates")
        if not isinstance(flag, bool):
            raise ReleaseFileError("content.coordinates must be true or false")
        if flag:
            coordinates = take_arrays(cls.__name__, document.arrays, {"coordinates": 2})["coordinates"]
            if coordinates.shape != (m, m):
                raise ReleaseFileError(f"coordinates must be [{m}, {m}], got {list(coordinates.shape)}")
        readout = _readout(document)
        probe = readout.readout(tf.zeros([1, int(readout.input_dim)], dtype=tf.float64))
        if tuple(probe.shape) != (P, m) or int(getattr(readout, "num_outputs", 1)) != P:
            raise ReleaseFileError(f"the readout maps {int(probe.shape[1])} latent values of "
                                   f"{int(getattr(readout, 'num_outputs', 1))} output(s), the release has {m} of {P}")
        function = _function(cls, releases, readout, coordinates)
        if composed is not None:  # recomputed from the card's public counts (laplace_releases), never read
            function = cast(PrivateLaplaceClassifier, function).composed(*composed)
        if clip_flag(document.card):
            try:
                function = function.clipped()
            except (TypeError, ValueError) as exc:
                raise ReleaseFileError(f"card.clip_to_bounds: {exc}") from None
        return function

    return load_function


def _load_multiclass(document: ReleaseDocument) -> Released:
    """The :class:`~dpgp_gpflow.models.multiclass_classifier.PrivateMulticlassClassifier` of a verified file: its
    card and steps checked (:func:`~dpgp_gpflow.io.card.multiclass_releases`), then each class's classifier
    rebuilt from its steps, its coordinates and its readout (arrays by index into the shared pool
    ``readout/<j>``: docs/release_file.md#several-classes). ``ReleaseFileError`` naming the field otherwise."""
    step_entries, guarantee = multiclass_releases(document)
    releases = tuple(PrivateRelease.from_entry(e) for e in step_entries)
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
        if kind not in CLASS_KINDS or (kind == "PrivateSparseClassifier" and steps != 1):
            raise ReleaseFileError(f"{where}.kind must be one of {sorted(CLASS_KINDS)} (sparse: one step), "
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
        rebuilt = readout_of(entry["readout"], {name: document.arrays[f"readout/{j}"] for name, j in refs.items()},
                             f"{where}.readout")
        probe = rebuilt.readout(tf.zeros([1, int(rebuilt.input_dim)], dtype=tf.float64))
        if tuple(probe.shape) != (1, m):
            raise ReleaseFileError(f"{where}: the readout maps {int(probe.shape[1])} latent values, the release "
                                   f"has {m}")
        if a and int(rebuilt.input_dim) != classifiers[0].readout.input_dim:
            raise ReleaseFileError(f"{where}: the readout takes {int(rebuilt.input_dim)} input columns, class 0's "
                                   f"{classifiers[0].readout.input_dim}")
        classifiers.append(_function(CLASS_KINDS[kind], own, rebuilt, coordinates))  # as the constructors
    return PrivateMulticlassClassifier(classifiers, epsilon=guarantee.epsilon, delta=guarantee.delta, mu=guarantee.mu,
                                       steps=steps, person_rows=guarantee.person_rows)


def _feature_map(pieces: Mapping[str, Any], Z: np.ndarray, box: np.ndarray, where: str) -> FeatureMap:
    """The feature map of a whole-row file's public pieces at ``where`` (``content``, ``content.candidates[i]``):
    the kernel rebuilt from its specification, ``Z`` and the jitter, and ``k_max`` recomputed from the kernel and
    the card's box (:func:`~dpgp_gpflow.whole_rows.features.kernel_bound`, as every release computes it), never
    read: a file whose ``k_max`` is another number is refused (it scales every prediction's variance)."""
    features = FeatureMap(kernel_from_spec(pieces["kernel"], Z.shape[1]), Z, jitter=pieces["jitter"], x_bounds=box)
    if pieces["k_max"] != features.k_max or isinstance(pieces["k_max"], bool):
        raise ReleaseFileError(f"{where}.k_max {pieces['k_max']!r} is not the kernel's bound on k(x, x) over "
                               f"card.x_bounds, {features.k_max!r} (recomputed)")
    return features


_Loaded = TypeVar("_Loaded", WholeRowsRelease, WholeRowsClassifier, HistogramResidualRelease)


def _own_card(document: ReleaseDocument, released: _Loaded, where: str, recomputed: Tuple[str, ...] = ()) -> _Loaded:
    """``released`` unless the file's card (at ``where``) is not the loaded object's own card
    (``privacy_card()``, as read back) but its ``recomputed`` fields: every field a whole-row kind's card records
    (its kernel and noise variances, lengthscales, ``k_max`` as a classifier's kernel variance, ...) must be
    what the object predicts with. ``ReleaseFileError`` naming the first field that differs (and, for fitted
    variances, refitted on load, what likely happened)."""
    own = as_read_back(released.privacy_card(), "card")
    for name in recomputed:
        own.pop(name)
    place = _difference({k: document.card.get(k) for k in own}, own, where)
    if place:
        refitted = own.get("variances") == "fit" and place.rsplit(".", 1)[-1] in ("kernel_variance", "noise_variance")
        why = (": the variances refitted from the released statistics differ from the file's: a file written by "
               "a version of dpgp_gpflow from before the fit changed (still numbered 0.1.0: docs/release_file.md#fitted-variances), "
               "or edited") if refitted else ""
        raise ReleaseFileError(f"{place}: not what the loaded {type(released).__name__} records{why}")
    return released


def _load_whole_rows(document: ReleaseDocument, multiplier: Optional[float] = None) -> Released:
    """The :class:`~dpgp_gpflow.whole_rows.WholeRowsRelease` of a verified file: its card and released arrays
    checked (:func:`~dpgp_gpflow.io.card.whole_rows_card`, every public number recomputed), the feature map
    rebuilt from the kernel, ``Z``, ``k_max`` and the jitter, the variances given or refitted on the statistics,
    and with a grid every candidate rebuilt and the choice recomputed from their SGPR bounds (never read); ``k_max``
    recomputed (:func:`_feature_map`) and the card must be the loaded object's own (:func:`_own_card`: its
    variances and lengthscales those of the content). ``multiplier``: a residual release's first stage's,
    recomputed (:func:`~dpgp_gpflow.io.card.whole_rows_card`). ``ReleaseFileError`` naming the field otherwise."""
    checked = whole_rows_card(document, multiplier)
    card, content, m = document.card, document.content, checked.m
    card_name = "card" if multiplier is None else "content.first_stage"  # a residual release's first stage's card
    if not isinstance(content, dict) or set(content) != {*WHOLE_ROWS_PIECES, "candidates", "selection"}:
        raise ReleaseFileError(f"content must be an object with {sorted({*WHOLE_ROWS_PIECES, 'candidates', 'selection'})}")
    Z = take_arrays("WholeRowsRelease", document.arrays, {"inducing_inputs": 2})["inducing_inputs"]
    if Z.shape != (m, checked.box.shape[0]):
        raise ReleaseFileError(f"arrays.inducing_inputs must be [{m}, {checked.box.shape[0]}] (num_inducing, the "
                               f"box's columns), got {list(Z.shape)}")
    upper = np.triu_indices(m)

    def symmetric(v: np.ndarray) -> np.ndarray:
        S = np.zeros((m, m))
        S[upper] = v
        S[upper[1], upper[0]] = v
        return S

    noise_std = {"S": symmetric(checked.noise_std["S"]), "b": checked.noise_std["b"],
                 "q": np.asarray(checked.noise_std["q"][0])}

    def one(pieces: Any, prefix: str, where: str) -> WholeRowsRelease:
        if not isinstance(pieces, dict) or set(pieces) != set(WHOLE_ROWS_PIECES):
            raise ReleaseFileError(f"{where} must be an object with {sorted(WHOLE_ROWS_PIECES)}")
        st = whole_rows_arrays(document.arrays, prefix, m)
        noised = NoisedStatistics({"S": symmetric(st["S"]), "b": st["b"], "q": np.asarray(st["q"][0])}, noise_std,
                                  card["num_data"], card["sensitivity"], card["noise_multiplier"],
                                  tuple(card["shares"]), card["reproducible"], card["person_rows"],
                                  tuple(card["chunking"]))
        try:
            features = _feature_map(pieces, Z, checked.box, where)
            given = pieces["variances"] == "given"
            return WholeRowsRelease(noised, features, x_bounds=checked.box, y_bounds=checked.y_bounds,
                                    epsilon=card["epsilon"], delta=card["delta"], calibration=card["calibration"],
                                    kernel_variance=pieces["kernel_variance"] if given else None,
                                    noise_variance=pieces["noise_variance"] if given else None,
                                    variances=pieces["variances"], clip_to_bounds=card["clip_to_bounds"])
        except ReleaseFileError:
            raise
        except (TypeError, ValueError, FloatingPointError, NotImplementedError) as exc:
            raise ReleaseFileError(f"{where}: {exc}") from None

    top = {k: content[k] for k in WHOLE_ROWS_PIECES}
    released = one(top, "statistics/", "content")
    entries, selection = content["candidates"], content["selection"]
    if checked.candidates == 1:
        if entries != [] or selection is not None:
            raise ReleaseFileError("content.candidates must be [] and content.selection null without "
                                   "card.lengthscale_candidates")
        return _own_card(document, released, card_name)
    if not (isinstance(entries, list) and len(entries) == checked.candidates):
        raise ReleaseFileError(f"content.candidates must list the {checked.candidates} candidates of "
                               "card.lengthscale_candidates")
    candidates = tuple(one(e, f"candidates/{i}/", f"content.candidates[{i}]") for i, e in enumerate(entries))
    bounds = [c.bound() for c in candidates]  # recomputed on the released statistics, never read
    chosen = choose(bounds)
    for name, a in released.statistics.items():
        if not np.array_equal(a, candidates[chosen].statistics[name]):
            raise ReleaseFileError(f"arrays.statistics/{name} is not the chosen candidate's ({chosen}: the largest "
                                   "SGPR bound on the released statistics)")
    if any(content[k] != entries[chosen][k] for k in ("kernel", "k_max", "jitter")):  # what predictions read
        raise ReleaseFileError(f"content's kernel, k_max and jitter are not the chosen candidate's ({chosen}: the "
                               "largest SGPR bound on the released statistics)")
    lengthscales = selection.get("lengthscales") if isinstance(selection, dict) else None
    if (lengthscales != card["lengthscale_candidates"] or released.lengthscales is None
            or not all(np.allclose(c.lengthscales, v, rtol=1e-12, atol=0.0) for c, v in zip(candidates, lengthscales))):
        raise ReleaseFileError("content.selection.lengthscales must be card.lengthscale_candidates, the candidates' "
                               "kernels' lengthscales")
    return _own_card(document, released.with_selection(candidates, lengthscales, bounds, chosen), card_name)


def _load_residual(document: ReleaseDocument) -> Released:
    """The :class:`~dpgp_gpflow.whole_rows.residual_release.ResidualRelease` of a verified file: its card checked
    (:func:`~dpgp_gpflow.io.card.residual_card`), the first stage loaded as the whole-row release it is, every
    later stage's radius and estimate recomputed from the earlier stages (never read: a radius that differs from
    the recorded one is refused) and the noise's covariance propagated. ``ReleaseFileError`` naming the field."""
    residual_card(document)
    card = document.card
    head = cast(WholeRowsRelease, _load_whole_rows(residual_first_stage(document), residual_multipliers(card)[0]))
    b, stds = document.arrays["residual/b"], document.arrays["residual/noise_std"]
    P = head.regularised_S  # the preconditioner: the file's S~ regularised as the first stage's posterior reads it
    points = radius_features(head.features, radius_points(head.features.kernel, head.x_bounds))
    radii, estimates, posterior = replay(head.posterior, P, b, stds, points, head.y_bounds[1] - head.y_bounds[0])
    if not radii_replayed(card["radii"], radii, RESIDUAL_RADIUS_RTOL):
        raise ReleaseFileError("card.radii are not the radii the earlier stages give (recomputed; none may be below)")
    stages = [ResidualStage(b_j, float(s), float(r), float(m), float(d), bool(card["reproducible"]))
              for b_j, s, r, m, d in zip(b, stds, card["radii"], card["stage_multipliers"][1:],
                                         card["stage_sensitivities"][1:])]
    request = release_request(card["epsilon"], card["delta"], calibration=card["calibration"], objective=None)
    try:
        released = residual_release(head, P, stages, posterior, estimates, fractions=card["residual_fractions"],
                                    request=request)
    except ValueError as exc:  # e.g. estimates that overflowed
        raise ReleaseFileError(f"the stages: {exc}") from None
    return released.clipped() if card["clip_to_bounds"] else released.unclipped()


def _load_histogram(document: ReleaseDocument) -> Released:
    """The :class:`~dpgp_gpflow.whole_rows.histogram_release.HistogramResidualRelease` of a verified file: its card
    and arrays checked (:func:`~dpgp_gpflow.io.card.histogram_card`), the feature map rebuilt from the kernel,
    ``Z`` and the jitter (``k_max`` recomputed, :func:`_feature_map`), the grid recomputed from the kernel and the box
    (:func:`~dpgp_gpflow.whole_rows.histogram.histogram_cells`, its cap; the file's centres must be its centres),
    and the object built by its own constructor from the released values, which recomputes every radius and
    estimate (never read: a radius that differs from the recorded one is refused); the loaded object's card must
    be the file's. ``ReleaseFileError`` naming the field otherwise."""
    checked = histogram_card(document)
    card, content, a = document.card, document.content, checked.arrays
    if not isinstance(content, dict) or set(content) != {"kernel", "k_max", "jitter"}:
        raise ReleaseFileError("content must be an object with ['jitter', 'k_max', 'kernel']")
    try:
        features = _feature_map(content, a["inducing_inputs"], checked.box, "content")
        cells = histogram_cells(features.kernel, checked.box)  # the library's grid and cap, from public pieces
    except ReleaseFileError:
        raise
    except (TypeError, ValueError, FloatingPointError, NotImplementedError) as exc:
        raise ReleaseFileError(f"content: {exc}") from None
    if cells != checked.cells:
        raise ReleaseFileError(f"card.cells {checked.cells} is not the grid's {cells} cells per column (half a "
                               "lengthscale per cell over the box)")
    centres = histogram_centres(features.kernel, checked.box)
    if not np.array_equal(a["histogram/centres"], centres):
        raise ReleaseFileError("arrays.histogram/centres are not the centres of the grid of the kernel and the box")
    counts_std, b_std = (float(v) for v in a["histogram/noise_std"])
    reproducible = card["reproducible"]
    noised = NoisedHistogram(a["histogram/counts"], a["histogram/b"], counts_std, b_std, cells, card["num_data"],
                             card["stage_sensitivities"][0], card["stage_multipliers"][0], tuple(card["shares"]),
                             reproducible, card["person_rows"], tuple(card["chunking"]))
    stages = [ResidualStage(b_j, float(s), float(r), float(m), float(d), reproducible)
              for b_j, s, r, m, d in zip(a["residual/b"], a["residual/noise_std"], card["radii"],
                                         card["stage_multipliers"][1:], card["stage_sensitivities"][1:])]
    try:
        request = release_request(card["epsilon"], card["delta"], calibration=card["calibration"], objective=None)
        released = HistogramResidualRelease(noised, features, centres, stages, fractions=card["residual_fractions"],
                                            request=request, x_bounds=checked.box, y_bounds=checked.y_bounds,
                                            kernel_variance=card["kernel_variance"],
                                            noise_variance=card["noise_variance"],
                                            clip_to_bounds=card["clip_to_bounds"])
    except (TypeError, ValueError, FloatingPointError, np.linalg.LinAlgError, tf.errors.InvalidArgumentError) as exc:
        raise ReleaseFileError(f"the stages: {exc}") from None
    # radii: recomputed by the constructor, equal to the file's within its tolerance (it refused otherwise)
    return _own_card(document, released, "card", recomputed=("radii",))


def _symmetric(v: np.ndarray, m: int) -> np.ndarray:
    """The symmetric [M, M] matrix of its upper triangle ``v`` (row by row, as the file holds ``S``)."""
    upper = np.triu_indices(m)
    S = np.zeros((m, m))
    S[upper] = v
    S[upper[1], upper[0]] = v
    return S


def _load_whole_rows_classifier(document: ReleaseDocument) -> Released:
    """The :class:`~dpgp_gpflow.whole_rows.classification.WholeRowsClassifier` of a verified file: its card and
    released arrays checked (:func:`~dpgp_gpflow.io.card.whole_rows_classifier_card`, the whole-row card checks
    with the public counts), the feature map rebuilt from the kernel, ``Z`` and the jitter (``k_max`` recomputed,
    :func:`_feature_map`), each block's statistics with the recomputed noise std; the loaded object's own card must be the file's (e.g.
    ``kernel_variance`` is ``k_max``). ``ReleaseFileError`` naming the field otherwise."""
    checked = whole_rows_classifier_card(document)
    card, content, m = document.card, document.content, checked.m
    if not isinstance(content, dict) or set(content) != {"kernel", "k_max", "jitter"}:
        raise ReleaseFileError("content must be an object with ['jitter', 'k_max', 'kernel']")
    Z = take_arrays("WholeRowsClassifier", document.arrays, {"inducing_inputs": 2})["inducing_inputs"]
    if Z.shape != (m, checked.box.shape[0]):
        raise ReleaseFileError(f"arrays.inducing_inputs must be [{m}, {checked.box.shape[0]}] (num_inducing, the "
                               f"box's columns), got {list(Z.shape)}")
    noise_std = {"S": _symmetric(checked.noise_std["S"], m), "b": checked.noise_std["b"],
                 "q": np.asarray(checked.noise_std["q"][0])}
    blocks = []
    for a in range(checked.candidates):
        st = whole_rows_arrays(document.arrays, f"statistics/{a}/", m)
        blocks.append(NoisedStatistics({"S": _symmetric(st["S"], m), "b": st["b"], "q": np.asarray(st["q"][0])},
                                       noise_std, card["num_data"], card["sensitivity"], card["noise_multiplier"],
                                       tuple(card["shares"]), card["reproducible"], card["person_rows"],
                                       tuple(card["chunking"])))
    try:
        features = _feature_map(content, Z, checked.box, "content")
        released = WholeRowsClassifier(blocks, features, x_bounds=checked.box, num_classes=card["num_classes"],
                                       epsilon=card["epsilon"], delta=card["delta"], calibration=card["calibration"])
    except ReleaseFileError:
        raise
    except (TypeError, ValueError, FloatingPointError, NotImplementedError) as exc:
        raise ReleaseFileError(f"content: {exc}") from None
    return _own_card(document, released, "card")


#: Object kind (its class name, as written in the file) -> loader of a verified document.
RELEASED_KINDS: Dict[str, Callable[[ReleaseDocument], Released]] = {
    "PrivateRelease": _release,
    **{cls.__name__: _load_function(cls) for cls in _FUNCTION_CLASSES},
    PrivateMulticlassClassifier.__name__: _load_multiclass,
    WholeRowsRelease.__name__: _load_whole_rows,
    WholeRowsClassifier.__name__: _load_whole_rows_classifier,
    ResidualRelease.__name__: _load_residual,
    HistogramResidualRelease.__name__: _load_histogram,
}

# Each loader runs its kind's card checks (io/card.py's CARD_KINDS, which lists exactly these kinds:
# tests/test_release_file_checks.py).


def readout_of(spec: Any, arrays: Mapping[str, np.ndarray], where: str) -> Any:
    """The readout of a file's ``{"kind", "state"}`` specification at ``where`` (e.g. ``content.readout``) with
    its arrays (names as the readout's ``release_state`` gives them): only the classes of
    :data:`READOUT_KINDS`, rebuilt by :func:`~dpgp_gpflow.io.readouts.readout_from_state`; ``ReleaseFileError``
    naming ``where``."""
    if not isinstance(spec, dict) or set(spec) != {"kind", "state"} or not isinstance(spec["state"], dict):
        raise ReleaseFileError(f"{where} must be an object with kind and state")
    kind = spec["kind"]
    if kind not in READOUT_KINDS:
        raise ReleaseFileKindError(
            f"unknown readout kind {kind!r}: this dpgp_gpflow loads {sorted(READOUT_KINDS)} (a newer version may "
            "know it)")
    try:
        return readout_from_state(READOUT_KINDS[kind], spec["state"], arrays)
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
    (:func:`~dpgp_gpflow.io.writing.file_content`, recomputed): nothing unknown is carried."""
    content, arrays = file_content(released)
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
    try:
        check_kind(document.kind)
        released = RELEASED_KINDS[document.kind](document)
        _check_exactly_written(document, released)
    except ReleaseFileError as exc:
        raise type(exc)(f"{path}: {exc}") from None
    return released
