"""The privacy card of a release file, read and checked for meaning without TensorFlow (``docs/release_file.md``).

One place for every check of a card and of its releases' arrays: :func:`dpgp_gpflow.io.loading.load`
runs them (then builds the object and its readout, which needs TensorFlow), and so do
:func:`read_card` and ``dpgp show``, which stop here. NumPy only; no model, kernel or readout is built.

What is checked here (``docs/release_file.md#what-loading-checks``), after :func:`~dpgp_gpflow.io.format.read`
(size, JSON, format, ``format_version`` the integer 1, SHA-256, arrays):

* the kind of object is one this package loads (:data:`CARD_KINDS`);
* every release's card entry (:func:`release_entry`): its fields and their types, no unknown field; valid
  epsilon, delta, mechanism, calibration and objective; bounds; data sensitivity within the bounds'
  width; the sensitivity positive (at least ``d`` for cloaking); the noise multiplier recomputed from
  (epsilon, delta, calibration); ``neighbours`` a relation of the release's number of outputs
  (:func:`~dpgp_gpflow.relations.check_relation`); its arrays' shapes against ``k`` and ``outputs``; a
  posterior variance >= 0; some noise; the rank and ``noise_std`` recomputed from ``noise_factor``;
* the card's totals (basic composition; a multi-class file's, or a binary classifier's of several Newton steps,
  Gaussian-DP guarantee recomputed from its public counts, :func:`multiclass_releases`,
  :func:`laplace_releases`), ``reproducible`` against every release's (one seed seeds them all),
  ``clip_to_bounds`` (a release file of one release: only with bounds).

What only :func:`~dpgp_gpflow.io.loading.load` checks: the readout (kernel, mean function, inducing inputs
and factors rebuilt and evaluated), the coordinates, a multi-class file's classes, and that the file holds
exactly what the loaded object writes. Privacy assumption: the card is a claim of whoever wrote the file;
these checks make it consistent with itself and its arrays, not a proof (the hash is not a signature).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from ..calibration import gaussian_multiplier
from ..composition import gdp_fraction_multipliers, gdp_step_multiplier
from ..relations import (
    check_relation,
    class_relation,
    classes_moved,
    multiclass_step_multiplier,
    rows_relation,
    whole_rows_relation,
)
from ..validation import (
    RELEASE_MECHANISMS,
    check_real,
    per_output,
    validate_calibration,
    validate_data_sensitivity,
    validate_delta,
    validate_epsilon,
    validate_objective,
    validate_output_bounds,
)
from ..whole_rows.bounds import entry_noise_std, released_sensitivity, statistic_scales, validate_shares
from ..whole_rows.design import validate_box
from ..whole_rows.residual_bounds import (
    MAX_HISTOGRAM_CELLS,
    histogram_noise_stds,
    histogram_sensitivity,
    residual_sensitivity,
    validate_residual_fractions,
)
from .format import ReleaseDocument, ReleaseFileError, ReleaseFileKindError, read, take_arrays

__all__ = ["read_card"]

#: The arrays of each release in a release file, under ``releases/<i>/``.
RELEASE_ARRAYS = ("mean", "variance", "noise_std", "noise_factor")
#: The scalar fields of a release's card entry and their JSON types.
RELEASE_FIELD_TYPES: Dict[str, str] = {
    "mechanism": "str", "calibration": "str", "objective": "str?", "epsilon": "float", "delta": "float",
    "data_sensitivity": "float", "sensitivity": "float", "noise_multiplier": "float", "rank": "int",
    "rtol": "float?", "bias_bound": "float", "reproducible": "bool",
}
RELEASE_FIELDS = tuple(RELEASE_FIELD_TYPES)
#: The fields of a release's ``certificate`` (those of :class:`~dpgp_gpflow.noise_planning.OptimiserCertificate`,
#: which tests/test_release_file_checks.py compares) and their JSON types.
CERTIFICATE_FIELD_TYPES: Dict[str, str] = {
    "objective": "str", "gap": "float", "relative_gap": "float", "tol": "float", "iterations": "int",
    "converged": "bool", "support": "int",
}
#: Relative tolerance of the recomputed noise multiplier, noise std and ``mu`` against the recorded ones.
RECOMPUTED_RTOL = 1e-9


@dataclass(frozen=True)
class ReleaseEntry:
    """One release of a file, its card entry and arrays checked (:func:`release_entry`): ``fields`` are the
    keyword arguments of :class:`~dpgp_gpflow.released.PrivateRelease` but its arrays (``certificate`` a dict
    of :data:`CERTIFICATE_FIELD_TYPES` or None), ``arrays`` its :data:`RELEASE_ARRAYS` as the file holds them
    ([k] for one output, [k, P] for P)."""

    fields: Dict[str, Any]
    arrays: Dict[str, np.ndarray]

    def __getitem__(self, name: str) -> Any:
        return self.fields[name]


class MulticlassGuarantee(NamedTuple):
    """The whole guarantee of a multi-class release file, as checked by :func:`multiclass_releases`."""

    epsilon: float
    delta: float
    mu: float  #: ``1 / s(epsilon, delta)``, recomputed
    num_classes: int
    steps: int
    person_rows: int


class CheckedCard(NamedTuple):
    """A release file's kind, its privacy card (as written, extras included) and its releases, all checked."""

    kind: str
    card: Dict[str, Any]
    releases: Tuple[ReleaseEntry, ...]


# ---------------------------------------------------------------------------------------------
# One release's entry.


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _entry_name(prefix: str) -> str:
    """``card.releases[i]`` for the arrays' ``prefix`` ``releases/i/`` (the name in error messages)."""
    match = re.fullmatch(r"releases/(\d+)/", prefix)
    return f"card.releases[{match.group(1)}]" if match else f"release {prefix!r}"


def _card_field(card: Mapping[str, Any], name: str, kind: str, where: str) -> Any:
    if name not in card:
        raise ReleaseFileError(f"{where}.{name} is missing")
    value = card[name]
    if kind.endswith("?"):
        if value is None:
            return None
        kind = kind[:-1]
    ok = {"str": isinstance(value, str), "bool": isinstance(value, bool), "float": _is_number(value),
          "int": isinstance(value, int) and not isinstance(value, bool)}[kind]
    if not ok:
        raise ReleaseFileError(f"{where}.{name} must be {'an' if kind == 'int' else 'a'} {kind}, got {value!r}")
    return float(value) if kind == "float" else value


def _certificate(value: Any, where: str) -> Optional[Dict[str, Any]]:
    if value is None:
        return None
    if not (isinstance(value, Mapping) and set(value) == set(CERTIFICATE_FIELD_TYPES)):
        raise ReleaseFileError(f"{where}.certificate must be null or an object with {tuple(CERTIFICATE_FIELD_TYPES)}")
    return {name: _card_field(value, name, kind, f"{where}.certificate") for name, kind in CERTIFICATE_FIELD_TYPES.items()}


def _checked(where: str, name: str, check: Any, *args: Any) -> Any:
    """``check(*args)`` (a :mod:`dpgp_gpflow.validation` function), its error as a ``ReleaseFileError``
    naming the card field."""
    try:
        return check(*args)
    except (TypeError, ValueError) as exc:
        raise ReleaseFileError(f"{where}.{name}: {exc}") from None


def _card_bounds(bounds: Any, num_outputs: int, where: str) -> Any:
    """A card's ``y_bounds`` for ``num_outputs`` outputs: null, ``[lo, hi]`` (every output) or, for P > 1,
    ``[[lo, hi], ...]`` (one ordered, finite pair per output); ``ReleaseFileError`` otherwise."""
    if bounds is None:
        return None
    pair = isinstance(bounds, list) and len(bounds) == 2 and all(_is_number(b) for b in bounds)
    pairs = (num_outputs > 1 and isinstance(bounds, list) and len(bounds) == num_outputs
             and all(isinstance(b, list) and len(b) == 2 and all(_is_number(v) for v in b) for b in bounds))
    if not (pair or pairs):
        raise ReleaseFileError(f"{where}.y_bounds must be null"
                               + (f", [lo, hi] or {num_outputs} pairs [lo, hi]" if num_outputs > 1 else " or [lo, hi]")
                               + f", got {bounds!r}")
    return _checked(where, "y_bounds", validate_output_bounds, bounds, num_outputs)


def _positive(name: str, value: float) -> float:
    value = check_real(name, value)
    if not value > 0.0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def _row_norms(F: np.ndarray) -> np.ndarray:
    """Euclidean norm of each row of ``F``, scaled by its largest entry so that tiny rows do not underflow
    (as :func:`~dpgp_gpflow.noise_planning.row_norms` computes a release's ``noise_std``)."""
    scale = np.max(np.abs(F), axis=1, keepdims=True)  # [k, 1]
    safe = np.where(scale > 0.0, scale, 1.0)
    return scale[:, 0] * np.linalg.norm(F / safe, axis=1)


def _check_meaning(where: str, fields: Mapping[str, Any], a: Mapping[str, np.ndarray]) -> None:
    """``ReleaseFileError`` naming the field unless a release's card entry and arrays make sense together:
    valid privacy parameters, bounds and sensitivities, the noise multiplier recomputed from (epsilon,
    delta, calibration), the rank and ``noise_std`` (stacked output by output) recomputed from ``noise_factor``."""
    epsilon = _checked(where, "epsilon", validate_epsilon, fields["epsilon"])
    delta = _checked(where, "delta", validate_delta, fields["delta"])
    # RELEASE_MECHANISMS: both Gaussian, so every release has 0 < delta < 1

    mechanism = fields["mechanism"]
    if mechanism not in RELEASE_MECHANISMS:
        raise ReleaseFileError(f"{where}.mechanism must be one of {RELEASE_MECHANISMS}, got {mechanism!r}")
    calibration = _checked(where, "calibration", validate_calibration, fields["calibration"])
    if mechanism == "standard":
        if fields["objective"] is not None or fields["certificate"] is not None:
            raise ReleaseFileError(f"{where}.objective: a standard release has no objective or certificate")
    else:
        _checked(where, "objective", validate_objective, fields["objective"])
    bounds = fields["y_bounds"]  # without bounds, only finite and > 0: no width to compare with
    if bounds is not None and per_output(bounds):  # d is the largest output's: at most the widest bounds
        widths = [hi - lo for lo, hi in bounds]
        bounds = bounds[int(np.argmax(widths))]
    _checked(where, "data_sensitivity", validate_data_sensitivity, fields["data_sensitivity"],
             bounds if bounds is not None else (-math.inf, math.inf))
    sensitivity = _checked(where, "sensitivity", _positive, "sensitivity", fields["sensitivity"])
    if mechanism == "cloaking" and sensitivity < fields["data_sensitivity"] * (1.0 - RECOMPUTED_RTOL):
        # the feasible noise covariance has max_i v_i^T M^-1 v_i = 1: Delta = d sqrt(1) (inflated), never less
        raise ReleaseFileError(f"{where}.sensitivity {sensitivity!r} is below the data sensitivity "
                               f"{fields['data_sensitivity']!r}: a cloaking release's sensitivity is at least d")
    multiplier = _checked(where, "noise_multiplier", _positive, "noise_multiplier", fields["noise_multiplier"])
    expected = _checked(where, "calibration", gaussian_multiplier, epsilon, delta, calibration)
    if not math.isclose(multiplier, expected, rel_tol=RECOMPUTED_RTOL):
        raise ReleaseFileError(f"{where}.noise_multiplier {multiplier!r} is not the {calibration} multiplier "
                               f"{expected!r} of epsilon {epsilon!r} and delta {delta!r}")
    if fields["rtol"] is not None:
        _checked(where, "rtol", _positive, "rtol", fields["rtol"])
    bias = _checked(where, "bias_bound", check_real, "bias_bound", fields["bias_bound"])
    if bias < 0.0:
        raise ReleaseFileError(f"{where}.bias_bound must be >= 0, got {bias}")
    if np.any(a["variance"] < 0.0):  # a posterior variance: the mechanisms publish it clamped at 0
        raise ReleaseFileError(f"{where}: variance has negative values (a posterior variance is >= 0)")
    factor = a["noise_factor"]
    if factor.shape[1] < 1 or not np.any(factor):
        raise ReleaseFileError(f"{where}: noise_factor {list(factor.shape)} has no non-zero column: no noise")
    if fields["rank"] != factor.shape[1]:
        raise ReleaseFileError(f"{where}.rank {fields['rank']} is not the noise_factor's {factor.shape[1]} columns")
    # noise_std [k] or [k, P] stacked output by output (contract.stacked's order), as noise_factor's rows
    stacked_std = a["noise_std"].reshape(a["noise_std"].shape[0], -1).T.reshape(-1)
    if not np.allclose(stacked_std, _row_norms(factor), rtol=RECOMPUTED_RTOL, atol=0.0):
        raise ReleaseFileError(f"{where}: noise_std is not the row norms of noise_factor")


def release_entry(card: Any, arrays: Mapping[str, np.ndarray], prefix: str = "releases/0/") -> ReleaseEntry:
    """One release's card entry (as :meth:`~dpgp_gpflow.released.PrivateRelease.release_card` writes it) and
    its arrays (``prefix + "mean"``, ...), checked for meaning (``docs/release_file.md#what-loading-checks``);
    ``ReleaseFileError`` naming the field when one is missing, malformed or inconsistent."""
    where = _entry_name(prefix)
    if not isinstance(card, Mapping):
        raise ReleaseFileError(f"{where} must be an object")
    unknown = sorted(set(card) - set(RELEASE_FIELDS) - {"y_bounds", "certificate", "k", "outputs", "neighbours"})
    if unknown:
        raise ReleaseFileError(f"{where}: unknown field(s) {unknown}")
    fields = {name: _card_field(card, name, kind, where) for name, kind in RELEASE_FIELD_TYPES.items()}
    P = card.get("outputs", 1)
    if "outputs" in card and not (isinstance(P, int) and not isinstance(P, bool) and P >= 2):
        raise ReleaseFileError(f"{where}.outputs must be an integer >= 2 (absent for one output), got {P!r}")
    fields["y_bounds"] = _card_bounds(card.get("y_bounds"), P, where)
    fields["certificate"] = _certificate(card.get("certificate", "missing"), where)
    neighbours = card.get("neighbours")
    if neighbours is not None:  # a relation a release of P outputs records (None: not recorded)
        _checked(where, "neighbours", check_relation, neighbours, P)
    fields["neighbours"] = neighbours
    ndim = 1 if P == 1 else 2
    a: Dict[str, np.ndarray] = take_arrays("PrivateRelease", arrays, {"mean": ndim, "variance": ndim,
                                                                      "noise_std": ndim, "noise_factor": 2}, prefix)
    shape = a["mean"].shape
    k = shape[0]
    if (a["variance"].shape != shape or a["noise_std"].shape != shape or shape[1:] not in ((), (P,))
            or a["noise_factor"].shape[0] != k * P or card.get("k") != k):
        raise ReleaseFileError(f"{where}: mean {list(shape)} does not match variance, noise_std, noise_factor "
                               f"[k P, r], k or outputs")
    _check_meaning(where, fields, a)
    return ReleaseEntry(fields, a)


# ---------------------------------------------------------------------------------------------
# A file's releases together.


def check_reproducible(card: Mapping[str, Any], releases: Sequence[ReleaseEntry]) -> None:
    """``ReleaseFileError`` unless every release of one file has the card's ``reproducible``: one object's
    releases are seeded together or not at all (one ``seed`` seeds every step and class), so a release
    flipped to false beside a seeded one is a forgery."""
    flags = [r["reproducible"] for r in releases]
    reproducible = any(flags)
    if len(set(flags)) > 1:
        first = next(i for i, flag in enumerate(flags) if flag != flags[0])
        raise ReleaseFileError(f"card.releases[{first}].reproducible {flags[first]!r} is not that of "
                               f"card.releases[0] ({flags[0]!r}): one seed makes every release of a "
                               "file reproducible")
    if card.get("reproducible") is not reproducible:
        raise ReleaseFileError(f"card.reproducible {card.get('reproducible')!r} is not that of the releases "
                               f"({reproducible!r})")


def clip_flag(card: Mapping[str, Any]) -> bool:
    """The card's ``clip_to_bounds`` (false when absent: files written before it existed)."""
    flag = card.get("clip_to_bounds", False)
    if not isinstance(flag, bool):
        raise ReleaseFileError(f"card.clip_to_bounds must be true or false, got {flag!r}")
    return flag


def _entries(card: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> Tuple[ReleaseEntry, ...]:
    entries = card.get("releases")
    if not isinstance(entries, list) or not entries:
        raise ReleaseFileError("card.releases must be a non-empty list")
    return tuple(release_entry(e, arrays, f"releases/{i}/") for i, e in enumerate(entries))


def releases_of_card(document: ReleaseDocument) -> Tuple[ReleaseEntry, ...]:
    """Every release of a verified release file whose releases compose by basic composition, each checked for
    meaning and all against the card's totals, ``reproducible`` and ``clip_to_bounds``."""
    releases = _entries(document.card, document.arrays)
    for name in ("epsilon", "delta"):
        total = math.fsum(r[name] for r in releases)
        if document.card.get(name) != total:
            raise ReleaseFileError(f"card.{name} {document.card.get(name)!r} is not the total of the releases ({total!r})")
    check_reproducible(document.card, releases)
    clip_flag(document.card)
    return releases


def release_of_card(document: ReleaseDocument) -> Tuple[ReleaseEntry, ...]:
    """The release of a ``PrivateRelease`` file: exactly one; clipped (``clip_to_bounds``) only with bounds."""
    releases = releases_of_card(document)
    if len(releases) != 1:
        raise ReleaseFileError(f"a PrivateRelease file holds one release, this one {len(releases)}")
    if clip_flag(document.card) and releases[0]["y_bounds"] is None:
        raise ReleaseFileError("card.clip_to_bounds is true but the release has no y_bounds")
    return releases


def laplace_releases(document: ReleaseDocument) -> Tuple[Tuple[ReleaseEntry, ...], Optional[Tuple[float, float, float]]]:
    """The releases of a verified ``PrivateLaplaceClassifier`` file and, for Newton steps composed in Gaussian DP
    (``composition: "gaussian-dp"``), the whole's ``(epsilon, delta, mu)`` recomputed from the card's ``epsilon``,
    ``delta`` and the count of steps T, never read: ``mu = 1 / s(epsilon, delta)`` (analytic), every step an
    analytic cloaking release at ``delta`` with multiplier ``sqrt(T) s``, so the T steps compose to ``mu``
    (docs/mechanisms.md#laplace-classification). Without ``composition`` (one step, or a file written before the
    step rule: each step at ``(epsilon / T, delta / T)``): basic composition (:func:`releases_of_card`), None."""
    card = document.card
    if "composition" not in card:
        return releases_of_card(document), None
    if card["composition"] != "gaussian-dp":
        raise ReleaseFileError(f"card.composition must be 'gaussian-dp' or absent, got {card['composition']!r}")
    releases = _entries(card, document.arrays)
    steps = _card_int(card, "steps", 2)
    if len(releases) != steps:
        raise ReleaseFileError(f"card.releases must be a list of steps = {steps} releases, got {len(releases)}")
    epsilon, delta, s = _gaussian_dp_whole(card)
    step = gdp_step_multiplier(s, steps)
    _gaussian_dp_steps(card, releases, delta, step, "a Newton step", f"sqrt({steps})")
    return releases, (epsilon, delta, 1.0 / s)  # recomputed, never read


def _gaussian_dp_whole(card: Mapping[str, Any]) -> Tuple[float, float, float]:
    """``(epsilon, delta, s)`` of a release whose steps compose in Gaussian DP: the card's epsilon and delta
    validated, ``s`` their analytic multiplier and the card's ``mu`` checked to be ``1 / s`` (never used)."""
    try:
        epsilon, delta = validate_epsilon(card.get("epsilon")), validate_delta(card.get("delta"))
        s = gaussian_multiplier(epsilon, delta, "analytic")
    except (TypeError, ValueError) as exc:
        raise ReleaseFileError(f"card.epsilon / card.delta: {exc}") from None
    mu = card.get("mu")
    if not (isinstance(mu, float) and math.isclose(mu, 1.0 / s, rel_tol=RECOMPUTED_RTOL)):
        raise ReleaseFileError(f"card.mu {mu!r} is not 1 / s(epsilon, delta) = {1.0 / s!r} (analytic)")
    return epsilon, delta, s


def _gaussian_dp_steps(card: Mapping[str, Any], releases: Sequence[ReleaseEntry], delta: float, step: float,
                       what: str, count: str, relation: Optional[str] = None) -> None:
    """Every step of a Gaussian-DP multi-step release: an analytic cloaking release at the whole's ``delta`` with
    the recomputed multiplier ``step`` (``count`` s, as its message says) and, if given, the rows' ``relation``;
    then the card's reproducibility flag and ``clip_to_bounds`` false (a classifier's latents)."""
    for i, r in enumerate(releases):
        where = f"card.releases[{i}]"
        if (r["mechanism"], r["calibration"]) != ("cloaking", "analytic"):
            raise ReleaseFileError(f"{where}: {what} is an analytic cloaking release, got "
                                   f"{r['mechanism']!r} and {r['calibration']!r}")
        if r["delta"] != delta:
            raise ReleaseFileError(f"{where}.delta {r['delta']!r} is not the release's delta {delta!r}")
        if not math.isclose(r["noise_multiplier"], step, rel_tol=RECOMPUTED_RTOL):
            raise ReleaseFileError(f"{where}.noise_multiplier {r['noise_multiplier']!r} is not {count} "
                                   f"s(epsilon, delta) = {step!r}")
        if relation is not None and r["neighbours"] != relation:
            raise ReleaseFileError(f"{where}.neighbours {r['neighbours']!r} is not {relation!r}")
    check_reproducible(card, releases)
    if card.get("clip_to_bounds", False) is not False:
        raise ReleaseFileError("card.clip_to_bounds must be false: a classifier's latents are never clipped")


def _card_int(card: Mapping[str, Any], name: str, least: int) -> int:
    value = card.get(name)
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= least):
        raise ReleaseFileError(f"card.{name} must be an integer >= {least}, got {value!r}")
    return value


def multiclass_releases(document: ReleaseDocument) -> Tuple[Tuple[ReleaseEntry, ...], MulticlassGuarantee]:
    """Every release of a verified ``PrivateMulticlassClassifier`` file, each checked for meaning
    (:func:`release_entry`), and the whole guarantee recomputed from the card's ``epsilon``, ``delta``,
    ``num_classes`` K, ``steps`` T and ``person_rows`` g, never read: ``mu = 1 / s(epsilon, delta)``
    (analytic), ``classes_moved = min(K, 2g)``, the relation, and every release a cloaking step at
    ``delta`` with multiplier ``sqrt(m T) s`` and the problems' relation; so the K T steps compose to
    ``mu`` (docs/mechanisms.md#several-classes). ``ReleaseFileError`` naming the field."""
    card = document.card
    if card.get("composition") != "gaussian-dp":
        raise ReleaseFileError(f"card.composition must be 'gaussian-dp', got {card.get('composition')!r}")
    K, steps, g = _card_int(card, "num_classes", 2), _card_int(card, "steps", 1), _card_int(card, "person_rows", 1)
    entries = card.get("releases")
    if not isinstance(entries, list) or len(entries) != K * steps:
        raise ReleaseFileError(f"card.releases must be a list of num_classes x steps = {K * steps} releases")
    releases = _entries(card, document.arrays)
    epsilon, delta, s = _gaussian_dp_whole(card)
    moved = classes_moved(K, g)
    if card.get("classes_moved") != moved:
        raise ReleaseFileError(f"card.classes_moved {card.get('classes_moved')!r} is not min(num_classes, 2 person_rows) "
                               f"= {moved}")
    if card.get("neighbours") != class_relation(g):
        raise ReleaseFileError(f"card.neighbours {card.get('neighbours')!r} is not {class_relation(g)!r} (person_rows {g})")
    step = multiclass_step_multiplier(s, steps, moved)
    _gaussian_dp_steps(card, releases, delta, step, "a multi-class step", f"sqrt({moved} x {steps})",
                       rows_relation(g))
    return releases, MulticlassGuarantee(epsilon, delta, 1.0 / s, K, steps, g)  # mu recomputed


# ---------------------------------------------------------------------------------------------
# A whole-row release (docs/release_file.md#whole-row-releases).

#: The card's fields of a whole-row release (:meth:`~dpgp_gpflow.whole_rows.WholeRowsRelease.privacy_card`).
WHOLE_ROWS_CARD = ("epsilon", "delta", "reproducible", "clip_to_bounds", "neighbours", "mechanism", "calibration",
                   "noise_multiplier", "sensitivity", "shares", "x_bounds", "y_bounds", "num_data", "num_inducing",
                   "person_rows", "chunking", "variances", "kernel_variance", "noise_variance", "lengthscales",
                   "lengthscale_candidates")
#: Relative tolerance of a whole-row release's recomputed sensitivity and noise std: the same formula on the same
#: public numbers gives the same floats up to a few roundings, and the sums' rounding slack it includes (a function
#: of n and the chunking) moves the sensitivity by about 1e-12 of itself, which a coarser tolerance would miss.
WHOLE_ROWS_RTOL = 1e-14
#: The mechanism a whole-row card records.
WHOLE_ROWS_MECHANISM = "gaussian (whole-row statistics)"


class WholeRowsCard(NamedTuple):
    """A whole-row release file's card checked (:func:`whole_rows_card`): the recomputed public numbers."""

    m: int  #: M, the inducing inputs
    candidates: int  #: B, the statistics released together (1 without a grid of lengthscales)
    box: np.ndarray  #: x_bounds [D, 2]
    y_bounds: Tuple[float, float]
    noise_std: Dict[str, np.ndarray]  #: each released entry's noise std, recomputed, ``S`` as its upper triangle


def whole_rows_arrays(arrays: Mapping[str, np.ndarray], prefix: str, m: int) -> Dict[str, np.ndarray]:
    """``{"S", "b", "q"}`` at ``prefix`` (``S`` the upper triangle [M (M + 1) / 2], ``b`` [M], ``q`` [1])."""
    shapes = {"S": (m * (m + 1) // 2,), "b": (m,), "q": (1,)}
    out = take_arrays(f"{prefix}", arrays, {f"{prefix}{k}": 1 for k in shapes})
    for k, shape in shapes.items():
        a = out[f"{prefix}{k}"]
        if a.shape != shape:
            raise ReleaseFileError(f"arrays.{prefix}{k} must be {list(shape)} for M = {m}, got {list(a.shape)}")
    return {k: out[f"{prefix}{k}"] for k in shapes}


def whole_rows_card(document: ReleaseDocument, multiplier: Optional[float] = None) -> WholeRowsCard:
    """The card and released arrays of a ``WholeRowsRelease`` file checked, every number recomputed that can be
    (docs/release_file.md#what-loading-checks): the multiplier from (epsilon, delta, calibration); the shares
    normalised; the relation from ``person_rows``; the sensitivity with the release's own public formula
    (:func:`~dpgp_gpflow.whole_rows.bounds.released_sensitivity`: shares, M, n, chunking, persons, candidates);
    each released entry's noise std from ``multiplier x sensitivity`` and the parts' scales; the box, the bounds,
    the statistics' shapes. ``multiplier``: the recomputed multiplier the stds are checked at when the card's is a
    stage's (a residual release's first stage, :func:`residual_card`; None: the one of (epsilon, delta,
    calibration)). ``ReleaseFileError`` naming the field. TensorFlow-free."""
    card = document.card
    missing = [k for k in WHOLE_ROWS_CARD if k not in card]
    if missing:
        raise ReleaseFileError(f"card: missing field(s) {missing}")
    candidates = card["lengthscale_candidates"]
    if candidates is not None and not (isinstance(candidates, list) and len(candidates) >= 2):
        raise ReleaseFileError(f"card.lengthscale_candidates must be null or a list of at least 2, got {candidates!r}")
    B = 1 if candidates is None else len(candidates)
    checked = _whole_rows_statistics(document, WHOLE_ROWS_MECHANISM, B, f"{B} block(s)",
                                     lambda: _card_bounds(card["y_bounds"], 1, "card"), multiplier)
    whole_rows_arrays(document.arrays, "statistics/", checked.m)
    for i in range(B if B > 1 else 0):
        whole_rows_arrays(document.arrays, f"candidates/{i}/", checked.m)
    return checked


def _whole_row_bounds_and_flags(card: Mapping[str, Any], bounds: Any) -> Tuple[float, float]:
    """The checked ``bounds`` of a whole-row card (a whole-row release always has them) after its ``reproducible``
    and ``clip_to_bounds`` flags are checked to be booleans."""
    if bounds is None:
        raise ReleaseFileError("card.y_bounds: a whole-row release always has bounds")
    for name in ("reproducible", "clip_to_bounds"):
        if not isinstance(card[name], bool):
            raise ReleaseFileError(f"card.{name} must be true or false, got {card[name]!r}")
    return bounds


def _card_chunking(card: Mapping[str, Any], n: int) -> list:
    """The card's ``chunking``: ``[longest chunk's rows, chunks]``, positive integers covering ``n`` rows."""
    chunking = card["chunking"]
    if not (isinstance(chunking, list) and len(chunking) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in chunking)
            and chunking[0] <= n and chunking[1] <= n and chunking[0] * chunking[1] >= n):
        raise ReleaseFileError(f"card.chunking must be [longest chunk's rows, chunks] covering num_data {n}, "
                               f"got {chunking!r}")
    return chunking


def _whole_rows_statistics(document: ReleaseDocument, mechanism: str, B: int, blocks: str,
                           y_bounds: Callable[[], Any], stage_multiplier: Optional[float] = None) -> WholeRowsCard:
    """The checks every whole-row card shares (regression and classifiers): privacy parameters, mechanism,
    multiplier, shares, relation, chunking, the sensitivity of ``B`` blocks recomputed (``blocks`` names them in
    the error), the box, the bounds (``y_bounds()``), the booleans and the noise std arrays recomputed, all at the
    recomputed multiplier (``stage_multiplier`` when given, :func:`whole_rows_card`), never the card's."""
    card, where = document.card, "card"
    epsilon = _checked(where, "epsilon", validate_epsilon, card["epsilon"])
    delta = _checked(where, "delta", validate_delta, card["delta"])
    calibration = _checked(where, "calibration", validate_calibration, card["calibration"])
    if card["mechanism"] != mechanism:
        raise ReleaseFileError(f"card.mechanism must be {mechanism!r}, got {card['mechanism']!r}")
    multiplier = _card_field(card, "noise_multiplier", "float", where)
    expected = _checked(where, "calibration", gaussian_multiplier, epsilon, delta, calibration)
    if not math.isclose(multiplier, expected, rel_tol=RECOMPUTED_RTOL):
        raise ReleaseFileError(f"card.noise_multiplier {multiplier!r} is not the {calibration} multiplier "
                               f"{expected!r} of epsilon {epsilon!r} and delta {delta!r}")
    shares = card["shares"]
    if not (isinstance(shares, list) and len(shares) == 3 and all(_is_number(v) for v in shares)):
        raise ReleaseFileError(f"card.shares must be three numbers, got {shares!r}")
    normalised = _checked(where, "shares", validate_shares, shares)
    if not np.allclose(normalised, shares, rtol=RECOMPUTED_RTOL, atol=0.0):
        raise ReleaseFileError(f"card.shares {shares!r} are not normalised (squares summing to 1)")
    multiplier = expected if stage_multiplier is None else stage_multiplier  # the card's only checked
    n, m, g = _card_int(card, "num_data", 1), _card_int(card, "num_inducing", 1), _card_int(card, "person_rows", 1)
    if card["neighbours"] != whole_rows_relation(g):
        raise ReleaseFileError(f"card.neighbours {card['neighbours']!r} is not {whole_rows_relation(g)!r} "
                               f"(person_rows {g})")
    chunking = _card_chunking(card, n)
    try:
        sensitivity = released_sensitivity(shares, m=m, multiplier=multiplier, num_rows=n, chunk_rows=chunking[0],
                                           num_chunks=chunking[1], person_rows=g, blocks=B)
    except (ValueError, FloatingPointError) as exc:
        raise ReleaseFileError(f"card.sensitivity: {exc}") from None
    recorded = _card_field(card, "sensitivity", "float", where)
    if not math.isclose(recorded, sensitivity, rel_tol=WHOLE_ROWS_RTOL):
        raise ReleaseFileError(f"card.sensitivity {recorded!r} is not the whole-row sensitivity {sensitivity!r} of "
                               f"its shares, M = {m}, n = {n}, chunking {chunking}, person_rows {g} and {blocks}")
    box = _checked(where, "x_bounds", validate_box, card["x_bounds"])
    bounds = _whole_row_bounds_and_flags(card, y_bounds())
    std = entry_noise_std(multiplier * sensitivity, statistic_scales(bounds[1] - bounds[0], shares), m)
    upper = np.triu_indices(m)
    recomputed = {"S": std["S"][upper], "b": std["b"], "q": np.reshape(std["q"], [1])}
    written = whole_rows_arrays(document.arrays, "noise_std/", m)
    for k, a in recomputed.items():
        if not np.allclose(written[k], a, rtol=WHOLE_ROWS_RTOL, atol=0.0):
            raise ReleaseFileError(f"arrays.noise_std/{k} is not the noise std of the multiplier recomputed from "
                                   f"epsilon and delta x the sensitivity recomputed, for its shares and bounds")
    return WholeRowsCard(m, B, box, bounds, written)


#: The card's fields of a whole-row classifier (:meth:`~dpgp_gpflow.whole_rows.classification.WholeRowsClassifier.privacy_card`).
WHOLE_ROWS_CLASSIFIER_CARD = ("epsilon", "delta", "reproducible", "clip_to_bounds", "neighbours", "mechanism",
                              "calibration", "noise_multiplier", "sensitivity", "shares", "x_bounds", "num_data",
                              "num_inducing", "num_classes", "person_rows", "chunking", "kernel_variance",
                              "newton_steps")
#: The mechanism a whole-row classifier's card records.
WHOLE_ROWS_CLASSIFIER_MECHANISM = "gaussian (whole-row statistics, labels)"
#: The public bounds of a binary classifier's labels ``t in {-1, +1}`` (centred at the public constant 0): every
#: classifier's (:mod:`dpgp_gpflow.models.dp_laplace`, the whole-row classifier) and its file's.
LABEL_BOUNDS = (-1.0, 1.0)


def whole_rows_classifier_card(document: ReleaseDocument) -> WholeRowsCard:
    """The card and released arrays of a ``WholeRowsClassifier`` file checked as :func:`whole_rows_card` (the same
    checks), with the classifier's public counts: ``num_classes`` (null: binary, one block; K >= 2: K blocks, the
    sensitivity recomputed for K blocks), one Newton step, the label bounds ``(-1, +1)``, latents never clipped,
    ``kernel_variance`` > 0 and the blocks' statistics ``statistics/<a>/`` of the card's M. TensorFlow-free."""
    card = document.card
    missing = [k for k in WHOLE_ROWS_CLASSIFIER_CARD if k not in card]
    if missing:
        raise ReleaseFileError(f"card: missing field(s) {missing}")
    K = card["num_classes"]
    if K is not None and not (isinstance(K, int) and not isinstance(K, bool) and K >= 2):
        raise ReleaseFileError(f"card.num_classes must be null (binary) or an integer >= 2, got {K!r}")
    if card["newton_steps"] != 1 or isinstance(card["newton_steps"], bool):
        raise ReleaseFileError(f"card.newton_steps must be 1 (one Newton step from the statistics), got "
                               f"{card['newton_steps']!r}")
    if card["clip_to_bounds"] is not False:
        raise ReleaseFileError("card.clip_to_bounds must be false: a classifier's latents are never clipped")
    _checked("card", "kernel_variance", _positive, "kernel_variance", card["kernel_variance"])
    B = 1 if K is None else K
    checked = _whole_rows_statistics(document, WHOLE_ROWS_CLASSIFIER_MECHANISM, B,
                                     "binary labels" if K is None else f"{K} classes", lambda: LABEL_BOUNDS)
    for a in range(B):
        whole_rows_arrays(document.arrays, f"statistics/{a}/", checked.m)
    return checked


def whole_rows_summary(card: Mapping[str, Any]) -> str:
    """The one-line description of a whole-row release, residual or histogram residual release or classifier from its
    (checked) card:
    the loaded object's ``repr`` and ``dpgp show``'s first line."""
    if card.get("mechanism") == RESIDUAL_MECHANISM:
        return (f"ResidualRelease(mechanism='whole-row statistics + {len(card['radii'])} residual release(s)', "
                f"epsilon={card['epsilon']:.6g}, delta={card['delta']:.6g}, m={card['num_inducing']}, "
                f"n={card['num_data']}, fractions={card['residual_fractions']}, bounds={tuple(card['y_bounds'])}, "
                f"neighbours={card['neighbours']!r}" + (", clip_to_bounds=True" if card["clip_to_bounds"] else "")
                + (", reproducible=True)" if card["reproducible"] else ")"))
    if card.get("mechanism") == HISTOGRAM_MECHANISM:
        return (f"HistogramResidualRelease(mechanism='whole-row histogram + {len(card['radii'])} residual release(s)', "
                f"epsilon={card['epsilon']:.6g}, delta={card['delta']:.6g}, m={card['num_inducing']}, "
                f"num_cells={card['num_cells']}, n={card['num_data']}, fractions={card['residual_fractions']}, "
                f"bounds={tuple(card['y_bounds'])}, neighbours={card['neighbours']!r}"
                + (", clip_to_bounds=True" if card["clip_to_bounds"] else "")
                + (", reproducible=True)" if card["reproducible"] else ")"))
    if card.get("mechanism") == WHOLE_ROWS_CLASSIFIER_MECHANISM:
        K = card["num_classes"]
        kind = "binary" if K is None else f"{K} classes (one-vs-rest)"
        return (f"WholeRowsClassifier({kind}, n={card['num_data']}, M={card['num_inducing']}, "
                f"epsilon={card['epsilon']:g}, delta={card['delta']:g}, neighbours={card['neighbours']!r}"
                + (", reproducible=True)" if card["reproducible"] else ")"))
    return (f"WholeRowsRelease(mechanism='whole-row statistics', epsilon={card['epsilon']:.6g}, "
            f"delta={card['delta']:.6g}, m={card['num_inducing']}, n={card['num_data']}, "
            f"bounds={tuple(card['y_bounds'])}, x_bounds={card['x_bounds']}, neighbours={card['neighbours']!r}"
            + (", clip_to_bounds=True" if card["clip_to_bounds"] else "")
            + (", reproducible=True)" if card["reproducible"] else ")"))


#: The mechanism a residual release's card records (:mod:`dpgp_gpflow.whole_rows.residual_release`).
RESIDUAL_MECHANISM = "gaussian (whole-row statistics, then clipped residual sums)"
#: The card's fields of a residual release beyond a whole-row release's.
RESIDUAL_CARD = ("residual_fractions", "stage_multipliers", "stage_sensitivities", "radii")
#: The card fields a residual release's first stage shares with the whole release's card.
_FIRST_STAGE_SHARED = ("delta", "neighbours", "calibration", "shares", "x_bounds",
                       "y_bounds", "num_data", "num_inducing", "person_rows", "chunking", "variances",
                       "kernel_variance", "noise_variance", "lengthscales", "lengthscale_candidates")


def residual_first_stage(document: ReleaseDocument) -> ReleaseDocument:
    """The first stage of a ``ResidualRelease`` file as the ``WholeRowsRelease`` document it is: its card
    (``content.first_stage``), the content without it and the arrays but the residual stages'."""
    first = document.content.get("first_stage") if isinstance(document.content, dict) else None
    if not isinstance(first, dict):
        raise ReleaseFileError("content.first_stage must be the first stage's card (an object)")
    content = {k: v for k, v in document.content.items() if k != "first_stage"}
    arrays = {k: v for k, v in document.arrays.items() if not k.startswith("residual/")}
    return ReleaseDocument("WholeRowsRelease", first, content, arrays)


def residual_card(document: ReleaseDocument) -> WholeRowsCard:
    """The card and released arrays of a ``ResidualRelease`` file checked (docs/release_file.md#residual-releases),
    every number recomputed that can be without TensorFlow: the whole's multiplier from (epsilon, delta,
    calibration), the stages' multipliers from it and the fractions (Gaussian-DP composition), the first stage as a
    whole-row release (:func:`whole_rows_card`) at the first multiplier, sharing the whole card's public pieces,
    every residual stage's sensitivity (:func:`~dpgp_gpflow.whole_rows.residual_bounds.residual_sensitivity`) and
    its noise std ``s_j Delta_j 2 R_j`` from the recorded radius (the loader recomputes the radii from the earlier
    stages). ``ReleaseFileError`` naming the field."""
    card = document.card
    multipliers = residual_multipliers(card)
    J = len(multipliers)
    first = residual_first_stage(document)
    if first.card.get("noise_multiplier") != card["stage_multipliers"][0] or first.card.get("mechanism") != \
            WHOLE_ROWS_MECHANISM or any(first.card.get(k) != card[k] for k in _FIRST_STAGE_SHARED):
        raise ReleaseFileError("content.first_stage is not the whole-row release of the first stage (its multiplier "
                               "card.stage_multipliers[0], the same public pieces as the card)")
    checked = whole_rows_card(first, multipliers[0])
    whole_rows_arrays(first.arrays, "statistics/", checked.m)
    if card["sensitivity"] != first.card["sensitivity"] or card["stage_sensitivities"][0] != card["sensitivity"]:
        raise ReleaseFileError("card.sensitivity and card.stage_sensitivities[0] must be the first stage's")
    _residual_stages(document, multipliers, checked.m, checked.y_bounds)
    return checked


def residual_multipliers(card: Mapping[str, Any]) -> Tuple[float, ...]:
    """The stages' multipliers of a ``ResidualRelease`` file's card recomputed from (epsilon, delta, calibration)
    and the fractions (:func:`_staged_multipliers`): the first stage's noise is checked at the first (the loader's
    too), never at the card's."""
    return _staged_multipliers(card, (*WHOLE_ROWS_CARD, *RESIDUAL_CARD), RESIDUAL_MECHANISM)


def _staged_multipliers(card: Mapping[str, Any], fields: Sequence[str], mechanism: str) -> Tuple[float, ...]:
    """The checks a release of stages composed in Gaussian DP shares (residual and histogram releases): its
    ``fields`` present, its ``mechanism``, epsilon, delta and calibration valid, the whole's multiplier recomputed
    from them, the fractions by the library's rule
    (:func:`~dpgp_gpflow.whole_rows.residual_bounds.validate_residual_fractions`), ``stage_multipliers``,
    ``stage_sensitivities`` (J positive numbers) and ``radii`` (J - 1); returns the stages' multipliers
    ``s / sqrt(f_j)`` recomputed (:func:`~dpgp_gpflow.composition.gdp_fraction_multipliers`), which the card's
    must be (recomputed from the recomputed multiplier: the card's is only checked)."""
    where = "card"
    missing = [k for k in fields if k not in card]
    if missing:
        raise ReleaseFileError(f"card: missing field(s) {missing}")
    if card["mechanism"] != mechanism:
        raise ReleaseFileError(f"card.mechanism must be {mechanism!r}, got {card['mechanism']!r}")
    epsilon = _checked(where, "epsilon", validate_epsilon, card["epsilon"])
    delta = _checked(where, "delta", validate_delta, card["delta"])
    calibration = _checked(where, "calibration", validate_calibration, card["calibration"])
    multiplier = _card_field(card, "noise_multiplier", "float", where)
    expected = _checked(where, "calibration", gaussian_multiplier, epsilon, delta, calibration)
    if not math.isclose(multiplier, expected, rel_tol=RECOMPUTED_RTOL):
        raise ReleaseFileError(f"card.noise_multiplier {multiplier!r} is not the {calibration} multiplier "
                               f"{expected!r} of epsilon {epsilon!r} and delta {delta!r}")
    fractions = _checked(where, "residual_fractions", validate_residual_fractions, card["residual_fractions"])
    if fractions is None:
        raise ReleaseFileError("card.residual_fractions must list the stages' fractions")
    multipliers = gdp_fraction_multipliers(expected, fractions)  # the recomputed multiplier's, never the card's
    J = len(multipliers)
    for name in ("stage_multipliers", "stage_sensitivities", "radii"):
        values = card[name]
        if not (isinstance(values, list) and len(values) == (J if name != "radii" else J - 1)
                and all(_is_number(v) and math.isfinite(v) and v > 0.0 for v in values)):
            raise ReleaseFileError(f"card.{name} must be {J if name != 'radii' else J - 1} positive numbers, got "
                                   f"{values!r}")
    if not np.allclose(card["stage_multipliers"], multipliers, rtol=RECOMPUTED_RTOL, atol=0.0):
        raise ReleaseFileError("card.stage_multipliers are not the noise multiplier over the square roots of the "
                               "fractions (Gaussian-DP composition)")
    return multipliers


def _residual_stages(document: ReleaseDocument, multipliers: Sequence[float], m: int,
                     y_bounds: Tuple[float, float]) -> Dict[str, np.ndarray]:
    """The residual stages of a residual or histogram release file: every stage's sensitivity recomputed
    (:func:`~dpgp_gpflow.whole_rows.residual_bounds.residual_sensitivity` of M, n, chunking and persons at its
    multiplier), each radius at most the bounds' width, the arrays ``residual/b`` [J - 1, M] and
    ``residual/noise_std`` [J - 1], each std ``s_j Delta_j 2 R_j`` from the recorded radius (the loader recomputes
    the radii from the earlier stages). Returns the two arrays."""
    card = document.card
    J = len(multipliers)
    n, g, chunking = card["num_data"], card["person_rows"], card["chunking"]
    try:
        sensitivities = [residual_sensitivity(m=m, multiplier=s, num_rows=n, chunk_rows=chunking[0],
                                              num_chunks=chunking[1], person_rows=g) for s in multipliers[1:]]
    except (ValueError, FloatingPointError) as exc:
        raise ReleaseFileError(f"card.stage_sensitivities: {exc}") from None
    if not np.allclose(card["stage_sensitivities"][1:], sensitivities, rtol=WHOLE_ROWS_RTOL, atol=0.0):
        raise ReleaseFileError("card.stage_sensitivities are not the residual sensitivities of M, n, chunking and "
                               "person_rows at the stages' multipliers")
    radii = np.asarray(card["radii"], dtype=np.float64)
    lo, hi = y_bounds
    if np.any(radii > hi - lo):
        raise ReleaseFileError("card.radii must be at most the bounds' width")
    arrays = take_arrays(document.kind, document.arrays, {"residual/b": 2, "residual/noise_std": 1})
    if arrays["residual/b"].shape != (J - 1, m) or arrays["residual/noise_std"].shape != (J - 1,):
        raise ReleaseFileError(f"arrays.residual/b and residual/noise_std must be [{J - 1}, {m}] and [{J - 1}]")
    expected_std = np.asarray(multipliers[1:]) * np.asarray(sensitivities) * 2.0 * radii
    if not np.allclose(arrays["residual/noise_std"], expected_std, rtol=WHOLE_ROWS_RTOL, atol=0.0):
        raise ReleaseFileError("arrays.residual/noise_std is not each stage's multiplier x sensitivity x 2 radius")
    return arrays


#: The mechanism a histogram residual release's card records (:mod:`dpgp_gpflow.whole_rows.histogram_release`).
HISTOGRAM_MECHANISM = "gaussian (whole-row histogram and residual sums, Gaussian-DP composition)"
#: The card's fields of a histogram residual release
#: (:meth:`~dpgp_gpflow.whole_rows.histogram_release.HistogramResidualRelease.privacy_card`).
HISTOGRAM_CARD = ("epsilon", "delta", "reproducible", "clip_to_bounds", "neighbours", "mechanism", "calibration",
                  "noise_multiplier", "shares", "x_bounds", "y_bounds", "num_data", "num_inducing", "cells",
                  "num_cells", "person_rows", "chunking", "kernel_variance", "noise_variance", *RESIDUAL_CARD,
                  "radius_z", "preconditioner_floor")
#: The arrays of a histogram residual release's file beyond the residual stages' (docs/release_file.md).
HISTOGRAM_ARRAYS = {"inducing_inputs": 2, "histogram/centres": 2, "histogram/counts": 1, "histogram/b": 1,
                    "histogram/noise_std": 1}


class HistogramCard(NamedTuple):
    """A histogram residual release file's card checked (:func:`histogram_card`): the recomputed public numbers."""

    m: int  #: M, the inducing inputs
    cells: int  #: G, the grid's cells per input column (``C = G^D`` counts)
    box: np.ndarray  #: x_bounds [D, 2]
    y_bounds: Tuple[float, float]
    arrays: Dict[str, np.ndarray]  #: :data:`HISTOGRAM_ARRAYS` and the residual stages', shapes checked


def histogram_card(document: ReleaseDocument) -> HistogramCard:
    """The card and released arrays of a ``HistogramResidualRelease`` file checked
    (docs/release_file.md#histogram-residual-releases), every number that can be recomputed without TensorFlow: the
    whole's multiplier from (epsilon, delta, calibration) and the stages' from the fractions (as
    :func:`residual_card`); the relation from ``person_rows``; the chunking; the grid's ``C = G^D`` cells at most
    :data:`~dpgp_gpflow.whole_rows.residual_bounds.MAX_HISTOGRAM_CELLS`; the counts-and-``b`` stage's sensitivity
    (:func:`~dpgp_gpflow.whole_rows.residual_bounds.histogram_sensitivity` of M, C, n, chunking and persons) and its
    two noise stds ``s_1 Delta_1 sqrt(2) / w_n`` (counts) and ``s_1 Delta_1 d / w_b`` (``b``; the parts' bounds of
    :func:`~dpgp_gpflow.whole_rows.bounds.part_bounds`, the shares normalised: the release's own rule,
    :func:`~dpgp_gpflow.whole_rows.residual_bounds.histogram_noise_stds`); every residual stage as
    :func:`residual_card` checks it; the arrays' shapes. The loader recomputes the grid from the kernel and the
    box, and every radius and estimate from the released values. ``ReleaseFileError`` naming the field."""
    card, where = document.card, "card"
    multipliers = _staged_multipliers(card, HISTOGRAM_CARD, HISTOGRAM_MECHANISM)
    n, m, g = _card_int(card, "num_data", 1), _card_int(card, "num_inducing", 1), _card_int(card, "person_rows", 1)
    if card["neighbours"] != whole_rows_relation(g):
        raise ReleaseFileError(f"card.neighbours {card['neighbours']!r} is not {whole_rows_relation(g)!r} "
                               f"(person_rows {g})")
    chunking = _card_chunking(card, n)
    box = _checked(where, "x_bounds", validate_box, card["x_bounds"])
    bounds = _whole_row_bounds_and_flags(card, _card_bounds(card["y_bounds"], 1, where))
    for name in ("kernel_variance", "noise_variance", "radius_z", "preconditioner_floor"):
        _checked(where, name, _positive, name, card[name])
    G, C, D = _card_int(card, "cells", 1), _card_int(card, "num_cells", 1), box.shape[0]
    if C != G ** D or C > MAX_HISTOGRAM_CELLS:
        raise ReleaseFileError(f"card.num_cells {C} must be cells^{D} = {G}^{D} (the box's columns) and at most "
                               f"{MAX_HISTOGRAM_CELLS}")
    shares = card["shares"]
    if not (isinstance(shares, list) and len(shares) == 2
            and all(_is_number(v) and math.isfinite(v) and v > 0.0 for v in shares)
            and math.isclose(math.fsum(shares), 1.0, rel_tol=RECOMPUTED_RTOL)):
        raise ReleaseFileError(f"card.shares must be the counts' and b's squared shares, two numbers > 0 summing to "
                               f"1, got {shares!r}")
    try:
        sensitivity = histogram_sensitivity(m=m, num_cells=C, multiplier=multipliers[0], num_rows=n,
                                            chunk_rows=chunking[0], num_chunks=chunking[1], person_rows=g)
    except (ValueError, FloatingPointError) as exc:
        raise ReleaseFileError(f"card.stage_sensitivities: {exc}") from None
    if not math.isclose(card["stage_sensitivities"][0], sensitivity, rel_tol=WHOLE_ROWS_RTOL):
        raise ReleaseFileError(f"card.stage_sensitivities[0] {card['stage_sensitivities'][0]!r} is not the histogram "
                               f"stage's sensitivity {sensitivity!r} of M = {m}, {C} cells, n = {n}, chunking "
                               f"{chunking} and person_rows {g}")
    arrays = take_arrays(document.kind, document.arrays, HISTOGRAM_ARRAYS)
    shapes = {"inducing_inputs": (m, D), "histogram/centres": (C, D), "histogram/counts": (C,), "histogram/b": (m,),
              "histogram/noise_std": (2,)}
    for name, shape in shapes.items():
        if arrays[name].shape != shape:
            raise ReleaseFileError(f"arrays.{name} must be {list(shape)}, got {list(arrays[name].shape)}")
    # the released vector [w_n / sqrt(2) counts, w_b / d b] got noise of std s_1 Delta_1 on every entry: the
    # release's own rule, the shares normalised, at the recomputed multiplier and sensitivity
    noise = histogram_noise_stds(multipliers[0], sensitivity, shares, bounds[1] - bounds[0])
    expected = [noise.counts_std, noise.b_std]
    if not np.allclose(arrays["histogram/noise_std"], expected, rtol=WHOLE_ROWS_RTOL, atol=0.0):
        raise ReleaseFileError("arrays.histogram/noise_std is not the counts' and b's noise std of the first "
                               "stage's multiplier recomputed from epsilon, delta and the fractions x its "
                               "sensitivity recomputed, for the shares (normalised) and bounds")
    arrays.update(_residual_stages(document, multipliers, m, bounds))
    return HistogramCard(m, G, box, bounds, arrays)


#: The kinds of whole-row objects: no PrivateRelease parts, their one line from :func:`whole_rows_summary`.
WHOLE_ROWS_KINDS = ("WholeRowsRelease", "WholeRowsClassifier", "ResidualRelease", "HistogramResidualRelease")


#: Object kind (its class name, as written in the file) -> the check of its card and releases. The kinds
#: :func:`~dpgp_gpflow.io.loading.load` builds are exactly these (it checks so when it is imported).
CARD_KINDS: Dict[str, Callable[[ReleaseDocument], Tuple[ReleaseEntry, ...]]] = {
    "PrivateRelease": release_of_card,
    "PrivateFunction": releases_of_card,
    "PrivateClassifier": releases_of_card,
    "PrivateLaplaceClassifier": lambda document: laplace_releases(document)[0],
    "PrivateSparseClassifier": releases_of_card,
    "PrivateMulticlassClassifier": lambda document: multiclass_releases(document)[0],
    "WholeRowsRelease": lambda document: (whole_rows_card(document), ())[1],  # no PrivateRelease parts
    "WholeRowsClassifier": lambda document: (whole_rows_classifier_card(document), ())[1],
    "ResidualRelease": lambda document: (residual_card(document), ())[1],
    "HistogramResidualRelease": lambda document: (histogram_card(document), ())[1],
}


def check_card(document: ReleaseDocument) -> Tuple[ReleaseEntry, ...]:
    """The releases of a verified release file (:func:`~dpgp_gpflow.io.format.read`), its kind known and its card
    checked for meaning as :data:`CARD_KINDS` says; ``ReleaseFileKindError`` for an unknown kind,
    ``ReleaseFileError`` naming the field otherwise."""
    check_kind(document.kind)
    return CARD_KINDS[document.kind](document)


def check_kind(kind: Any) -> None:
    """``ReleaseFileKindError`` unless ``kind`` is a kind of released object this package reads
    (:data:`CARD_KINDS`, the same kinds :func:`~dpgp_gpflow.io.loading.load` builds)."""
    if kind not in CARD_KINDS:
        raise ReleaseFileKindError(f"unknown kind of released object {kind!r}: this dpgp_gpflow loads "
                                   f"{sorted(CARD_KINDS)} (a newer version may know it)")


def read_checked_card(path: Union[str, "os.PathLike[str]"]) -> CheckedCard:
    """The kind, privacy card and releases of the release file at ``path``: read and verified
    (:func:`~dpgp_gpflow.io.format.read`) and its card checked (:func:`check_card`), without building the
    object (no readout, no kernel, no TensorFlow). Errors as :func:`check_card`'s, naming ``path``."""
    document = read(path)
    try:
        releases = check_card(document)
    except ReleaseFileError as exc:
        raise type(exc)(f"{path}: {exc}") from None
    return CheckedCard(document.kind, document.card, releases)


def read_card(path: Union[str, "os.PathLike[str]"]) -> Dict[str, Any]:
    """The privacy card of the (verified) release file at ``path``, its releases checked for meaning as
    :func:`~dpgp_gpflow.io.loading.load` checks them (:func:`read_checked_card`), without building the object
    (no readout, no kernel, no TensorFlow)."""
    return read_checked_card(path).card
