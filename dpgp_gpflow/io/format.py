"""The release file: one self-describing JSON document per released object (``docs/release_file.md``).

This module is the file format only: it writes and reads the document, encodes arrays, checks the
format version and the SHA-256 of the content; it needs neither TensorFlow nor GPflow (the public GPflow
pieces a readout holds, kernel and mean function, become specifications in :mod:`.gpflow_specs`; the
privacy card is checked by :mod:`.card`). What goes *in* a file is composed by :mod:`.writing` from
the released objects' public state and the readouts' ``release_state``; which class a file loads into is
decided by :func:`dpgp_gpflow.io.loading.load`.

Layout (format ``"dpgp_gpflow.release"``, ``format_version`` 1), a single JSON object::

    {
      "format": "dpgp_gpflow.release",
      "format_version": 1,
      "kind": "PrivateFunction",           # which released class (see dpgp_gpflow.io.loading)
      "card": {...},                       # the privacy card: plain JSON, readable as is
      "content": {...},                    # object-specific structure (readout spec, ...)
      "arrays": {"name": ARRAY, ...},      # every numerical array, by name
      "sha256": "<64 hex digits>"          # SHA-256 of the canonical form of everything above
    }

    ARRAY = {"dtype": "float64", "shape": [k, r], "data": "<base64 of the little-endian bytes, row-major>"}

* ``dtype`` is one of ``float64``, ``float32``, ``int64``, ``int32``; the bytes are always little-endian
  and in C (row-major) order, ``prod(shape) * itemsize`` of them.
* Floats in ``card`` and ``content`` are JSON numbers written as the shortest decimal that reads back
  to the same float64 (Python's ``repr``), so they round-trip exactly. A non-finite float is written
  as ``{"$float": "nan" | "inf" | "-inf"}`` (JSON has no such number).
* The canonical form is ``json.dumps(document without "sha256", sort_keys=True,
  separators=(",", ":"), ensure_ascii=True, allow_nan=False)`` encoded as ASCII; ``sha256`` is the
  hex SHA-256 of those bytes. A reader recomputes it from the parsed document, so whitespace and key
  order of the file do not matter, but any changed value does.

The hash detects accidental damage and naive edits. It is not a signature: anyone who edits a file
can recompute it. Whoever needs to know *who* published a file must sign it (or its hash) separately.

Reading never executes anything from the file: it is parsed as JSON, arrays are decoded with
``numpy.frombuffer`` of an allowed dtype, and kernels are rebuilt only from a fixed list of GPflow
classes (:data:`~dpgp_gpflow.io.gpflow_specs.KERNEL_CLASSES`) with a fixed list of parameters each. No
pickle anywhere. A hostile file fails fast with one :class:`ReleaseFileError`: at most
:data:`MAX_FILE_BYTES` bytes, JSON nested at most :data:`MAX_JSON_DEPTH` deep, no duplicate keys, at most
:data:`~dpgp_gpflow.io.gpflow_specs.MAX_KERNEL_TERMS` kernels.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import importlib.metadata
import json
import math
import os
import secrets
from pathlib import Path
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple, Union

import numpy as np

__all__ = ["ReleaseFileError", "ReleaseFileIntegrityError", "ReleaseFileKindError", "ReleaseFileVersionError"]

#: The ``"format"`` value of every release file.
FORMAT = "dpgp_gpflow.release"
#: The format version this module writes and the only one it reads.
FORMAT_VERSION = 1
#: Array dtypes a file may hold (always little-endian).
ARRAY_DTYPES: Tuple[str, ...] = ("float64", "float32", "int64", "int32")

_TOP_KEYS = frozenset({"format", "format_version", "kind", "card", "content", "arrays", "sha256"})
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}

#: Largest release file read (bytes): checked before reading. A full-GP Laplace classifier on 4,000
#: training points writes about 350 MB.
MAX_FILE_BYTES = 2**30
#: Deepest nesting of JSON objects and arrays in a release file (an honest file nests under 40 deep).
MAX_JSON_DEPTH = 64


class ReleaseFileError(ValueError):
    """The file is not a valid release file (malformed JSON, missing fields, bad arrays...)."""


class ReleaseFileVersionError(ReleaseFileError):
    """The file's ``format_version`` is not one this version of dpgp_gpflow reads."""


class ReleaseFileKindError(ReleaseFileError):
    """The file holds a kind of object (or of readout) this version of dpgp_gpflow does not know."""


class ReleaseFileIntegrityError(ReleaseFileError):
    """The file's content does not match its SHA-256: it was damaged or edited after it was written."""


class ReleaseDocument(NamedTuple):
    """A verified release file: its kind, privacy card, content and decoded arrays."""

    kind: str
    card: Dict[str, Any]
    content: Dict[str, Any]
    arrays: Dict[str, np.ndarray]


# ---------------------------------------------------------------------------------------------
# Arrays, floats and the canonical form.


def encode_array(value: Any) -> Dict[str, Any]:
    """``{"dtype", "shape", "data"}`` of an array: base64 of its little-endian, row-major bytes."""
    arr = np.asarray(value)
    if arr.dtype.name not in ARRAY_DTYPES:
        raise TypeError(f"arrays in a release file must have dtype in {ARRAY_DTYPES}, got {arr.dtype}")
    le = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
    return {"dtype": arr.dtype.name, "shape": [int(s) for s in arr.shape],
            "data": base64.b64encode(le.tobytes()).decode("ascii")}


def decode_array(name: str, entry: Any) -> np.ndarray:
    """The array of an :func:`encode_array` entry (a fresh, writable copy); ``ReleaseFileError`` if malformed."""
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data"}:
        raise ReleaseFileError(f"array {name!r} must be an object with exactly dtype, shape and data")
    dtype, shape, data = entry["dtype"], entry["shape"], entry["data"]
    if dtype not in ARRAY_DTYPES:
        raise ReleaseFileError(f"array {name!r} has dtype {dtype!r}; allowed: {ARRAY_DTYPES}")
    if not (isinstance(shape, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                            for s in shape)):
        raise ReleaseFileError(f"array {name!r} has an invalid shape {shape!r}")
    if not isinstance(data, str):
        raise ReleaseFileError(f"array {name!r}: data must be a base64 string")
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise ReleaseFileError(f"array {name!r}: data is not valid base64") from exc
    dt = np.dtype(dtype).newbyteorder("<")
    if len(raw) != math.prod(shape) * dt.itemsize:
        raise ReleaseFileError(f"array {name!r}: {len(raw)} bytes do not fit dtype {dtype} and shape {shape}")
    return np.frombuffer(raw, dtype=dt).reshape(shape).astype(np.dtype(dtype))  # native order, own copy


def _to_json(value: Any, where: str) -> Any:
    """Plain JSON values (numpy scalars converted, tuples as lists, non-finite floats tagged)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        if math.isfinite(x):
            return x
        return {"$float": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: keys must be strings, got {k!r}")
            out[k] = _to_json(v, f"{where}.{k}")
        return out
    if isinstance(value, (list, tuple)):
        return [_to_json(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, np.ndarray) and value.ndim <= 1:
        return _to_json(value.tolist(), where)
    raise TypeError(f"{where}: {type(value).__name__} is not a JSON value (put arrays under arrays=)")


def as_read_back(value: Any, where: str) -> Any:
    """``value`` as a file would give it back: converted to JSON values and the non-finite floats'
    tags undone (tuples become lists, numpy scalars Python numbers). Raises ``TypeError`` where
    ``value`` holds something a file cannot."""
    return _from_json(_to_json(value, where))


def _from_json(value: Any) -> Any:
    """Undo the tagging of non-finite floats."""
    if isinstance(value, dict):
        if set(value) == {"$float"} and value["$float"] in _NON_FINITE:
            return _NON_FINITE[value["$float"]]
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def canonical_bytes(document: Mapping[str, Any]) -> bytes:
    """The canonical form the SHA-256 is taken of: sorted keys, no whitespace, ASCII, strict JSON."""
    body = {k: v for k, v in document.items() if k != "sha256"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def document_sha256(document: Mapping[str, Any]) -> str:
    """The ``sha256`` of a document: hex SHA-256 of its :func:`canonical_bytes`."""
    return hashlib.sha256(canonical_bytes(document)).hexdigest()


def inputs_hash(X: Any) -> str:
    """SHA-256 (hex) of public inputs, as recorded in a card's ``inputs_hash``.

    The hash of ``b"float64[N,D]"`` (the shape, ASCII, no spaces) followed by the inputs' little-endian
    float64 bytes in row-major order; a 1-D array is taken as one column. Identical inputs give the
    identical hash on any machine.
    """
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"inputs must be a 2-D array [N, D], got shape {arr.shape}")
    header = f"float64[{arr.shape[0]},{arr.shape[1]}]".encode("ascii")
    return hashlib.sha256(header + np.ascontiguousarray(arr, dtype="<f8").tobytes()).hexdigest()


def provenance() -> Dict[str, Any]:
    """``{"software": {package: version}, "created": UTC ISO 8601}`` for a card."""
    software: Dict[str, Optional[str]] = {}
    for dist in ("dpgp_gpflow", "gpflow", "tensorflow", "numpy"):
        try:
            software[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            software[dist] = None
    created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"software": software, "created": created}


# ---------------------------------------------------------------------------------------------
# Writing and reading.


def write(path: Union[str, os.PathLike], kind: str, card: Mapping[str, Any], content: Mapping[str, Any],
          arrays: Mapping[str, Any]) -> Path:
    """Write a release file (atomically: a temporary file in the same folder, then renamed); ``ValueError``
    for a document :func:`read` would refuse (nested too deeply, too large)."""
    if not isinstance(kind, str) or not kind:
        raise TypeError("kind must be a non-empty string")
    document: Dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "card": _to_json(card, "card"),
        "content": _to_json(content, "content"),
        "arrays": {str(name): encode_array(a) for name, a in arrays.items()},
    }
    _check_depth(document)  # refuse to write what read() would refuse
    document["sha256"] = document_sha256(document)
    text = json.dumps(document, indent=1, allow_nan=False, ensure_ascii=True) + "\n"
    if len(text) > MAX_FILE_BYTES:
        raise ValueError(f"the release file would hold {len(text)} bytes, over the limit of {MAX_FILE_BYTES} "
                         "that loading accepts")
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        with open(tmp, "x", encoding="ascii") as f:  # the user's umask applies, as for the final file
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise
    return path


def write_card(path: Union[str, os.PathLike], kind: str, card: Mapping[str, Any]) -> Path:
    """Write a privacy card alone (no arrays, no hash): ``{"format": "dpgp_gpflow.card", "format_version",
    "kind", "card"}``, e.g. beside an exported SavedModel. Informational: :func:`read` does not load it."""
    document = {"format": FORMAT.replace(".release", ".card"), "format_version": FORMAT_VERSION, "kind": kind,
                "card": _to_json(card, "card")}
    path = Path(path)
    path.write_text(json.dumps(document, indent=1, allow_nan=False, ensure_ascii=True) + "\n", encoding="ascii")
    return path


def _no_duplicate_keys(pairs: Any) -> Dict[str, Any]:
    """``object_pairs_hook`` of :func:`read`: a JSON object as a dict; ``ReleaseFileError`` on a repeated key
    (JSON parsers differ on which one wins, so a reader could see another value than the hash covers)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]  # add's None is falsy: records and moves on
        raise ReleaseFileError(f"duplicate key {key!r} in a JSON object")
    return out


def _check_depth(document: Any) -> None:
    """``ReleaseFileError`` if JSON objects and arrays nest deeper than :data:`MAX_JSON_DEPTH` (iterative)."""
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise ReleaseFileError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        children = value.values() if isinstance(value, dict) else value
        stack.extend((v, depth + 1) for v in children if isinstance(v, (dict, list)))


#: Bytes read at a time beyond the size a file had when it was opened (it may grow while it is read).
_READ_CHUNK = 2**20


def _read_at_most(f: Any, size: int) -> bytes:
    """What the open file ``f`` holds, read up to ``MAX_FILE_BYTES + 1`` bytes: its ``size`` (as it was when
    opened) and one byte more in one read, then, only if it grew, chunks of :data:`_READ_CHUNK` bytes. Never
    allocates more than the file holds (``f.read(n)`` reserves ``n`` bytes whatever the file's size)."""
    chunks = [f.read(min(size, MAX_FILE_BYTES) + 1)]
    read = len(chunks[0])
    while read > size and read <= MAX_FILE_BYTES:  # the file grew since it was opened: the rest by chunks
        chunk = f.read(min(_READ_CHUNK, MAX_FILE_BYTES + 1 - read))
        if not chunk:
            break
        chunks.append(chunk)
        read += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read(path: Union[str, os.PathLike]) -> ReleaseDocument:
    """Read and verify a release file: size, JSON (no duplicate keys, bounded depth), format, version,
    SHA-256, then the arrays.

    Raises :class:`ReleaseFileVersionError` for a format version other than :data:`FORMAT_VERSION`,
    :class:`ReleaseFileIntegrityError` when the content does not match its SHA-256, and
    :class:`ReleaseFileError` for anything else that is not a valid release file, including a file over
    :data:`MAX_FILE_BYTES` or nested deeper than :data:`MAX_JSON_DEPTH`.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        raw = _read_at_most(f, size) if size <= MAX_FILE_BYTES else b""
    if size > MAX_FILE_BYTES or len(raw) > MAX_FILE_BYTES:
        raise ReleaseFileError(f"{path}: a release file may hold at most {MAX_FILE_BYTES} bytes, this one "
                               f"{max(size, len(raw))}")
    try:
        document = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
        _check_depth(document)
    except RecursionError:  # the parser's own limit, below ours for a deeper file
        raise ReleaseFileError(f"{path}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ReleaseFileError as exc:
        raise ReleaseFileError(f"{path}: {exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReleaseFileError(f"{path}: not a JSON release file ({exc})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ReleaseFileError(f"{path}: not a dpgp_gpflow release file (no \"format\": {FORMAT!r})")
    version = document.get("format_version")
    if type(version) is not int or version != FORMAT_VERSION:  # the integer 1: not 1.0, not true
        raise ReleaseFileVersionError(
            f"{path}: release file format version {version!r} is not supported; this dpgp_gpflow reads "
            f"version {FORMAT_VERSION} only")
    if set(document) != _TOP_KEYS:
        missing, extra = sorted(_TOP_KEYS - set(document)), sorted(set(document) - _TOP_KEYS)
        raise ReleaseFileError(f"{path}: malformed release file (missing {missing}, unexpected {extra})")
    try:
        digest = document_sha256(document)
    except ValueError as exc:  # a NaN / Infinity token: not strict JSON, never written by write()
        raise ReleaseFileIntegrityError(f"{path}: content is not strict JSON ({exc})") from exc
    if not isinstance(document["sha256"], str) or document["sha256"] != digest:
        raise ReleaseFileIntegrityError(
            f"{path}: the content does not match its SHA-256: the file was damaged or edited after it was written")
    kind, card, content, arrays = (document[k] for k in ("kind", "card", "content", "arrays"))
    if not isinstance(kind, str) or not all(isinstance(x, dict) for x in (card, content, arrays)):
        raise ReleaseFileError(f"{path}: malformed release file (kind must be a string; card, content and "
                               "arrays objects)")
    decoded = {name: decode_array(name, entry) for name, entry in arrays.items()}
    return ReleaseDocument(kind, _from_json(card), _from_json(content), decoded)


def take_arrays(owner: str, arrays: Mapping[str, np.ndarray], ndims: Mapping[str, int],
                prefix: str = "") -> Dict[str, np.ndarray]:
    """The float64 arrays ``prefix + name`` for each ``name`` in ``ndims``, checked for presence,
    dtype, number of dimensions and finiteness; ``ReleaseFileError`` (naming ``owner``) otherwise."""
    out = {}
    for name, ndim in ndims.items():
        arr = arrays.get(prefix + name)
        if arr is None:
            raise ReleaseFileError(f"{owner}: the file has no array {prefix + name!r}")
        if arr.dtype != np.float64 or arr.ndim != ndim:
            raise ReleaseFileError(f"{owner}: array {prefix + name!r} must be float64 with {ndim} dimensions, "
                                   f"got {arr.dtype} with shape {list(arr.shape)}")
        if not np.all(np.isfinite(arr)):
            raise ReleaseFileError(f"{owner}: array {prefix + name!r} has non-finite values")
        out[name] = arr
    return out


def take_factors(owner: str, content: Mapping[str, Any], arrays: Mapping[str, np.ndarray], points: str,
                 squares: Tuple[str, ...], vectors: Tuple[str, ...] = ()) -> Dict[str, np.ndarray]:
    """A readout's arrays (:func:`take_arrays`): ``points`` [m, D] with ``D`` the content's ``input_dim``,
    each of ``squares`` [m, m] (its factors) and each of ``vectors`` [m]; ``ReleaseFileError`` otherwise."""
    a = take_arrays(owner, arrays, {points: 2, **{name: 2 for name in squares}, **{name: 1 for name in vectors}})
    m, dim = a[points].shape
    if (content.get("input_dim") != dim or any(a[name].shape != (m, m) for name in squares)
            or any(a[name].shape != (m,) for name in vectors)):
        raise ReleaseFileError(f"{owner}: {points} [{m}, {dim}] does not match {', '.join(squares + vectors)} "
                               "or input_dim")
    return a
