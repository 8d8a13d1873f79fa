"""Data sets for tests, notebooks and benchmarks (numpy in, numpy out, float64).

Three loaders read the papers' data from a folder (``$DPGP_SHARED_DATA`` or ``../shared/data``
beside the repository); nothing is copied into the repository and nothing is downloaded:

- :func:`load_kung` -- !Kung San heights (``Howell1.csv``, the 287 rows with ``male == 0``);
- :func:`load_hmeq` -- Home Equity Loans (``hmeq.csv``), BAD from DELINQ;
- :func:`load_mnist_binary` -- MNIST digits 0-4 vs 5-9 (``mnist_2400.npz``), downsampled.

The rest are generated or ship with a dependency: :func:`make_stripes` and
:func:`stripes_test_grid` (JMLR Figure 7), :func:`make_citibike_like` (a synthetic stand-in for
the AISTATS Citi Bike table), :func:`load_diabetes_1d` (scikit-learn's bundled copy) and
:func:`make_synthetic_2d` (scaling benchmarks).

All randomness is drawn from ``np.random.default_rng(seed)`` with an explicit ``seed``; the
same seed gives the same arrays. Outputs are always ``[N, 1]``; classification labels are in
``{-1, +1}``.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Sequence

import numpy as np

__all__ = [
    "DIABETES_Y_BOUNDS", "default_data_dir", "kung_folds", "load_diabetes_1d", "load_hmeq", "load_kung",
    "load_mnist_binary", "make_stripes", "make_synthetic_2d", "stripes_test_grid",
]

_ENV_VAR = "DPGP_SHARED_DATA"

#: Public output bounds of :func:`make_citibike_like`: durations are clipped to [0, 2000] s.
CITIBIKE_Y_BOUNDS: tuple[float, float] = (0.0, 2000.0)
#: Latitude range of the synthetic station box (0.11 degrees; AISTATS: 40.6794..40.7872).
CITIBIKE_LAT_RANGE: tuple[float, float] = (40.68, 40.79)
#: Longitude range of the synthetic station box (0.09 degrees; AISTATS: -74.0171..-73.9299).
CITIBIKE_LON_RANGE: tuple[float, float] = (-74.02, -73.93)
#: Public bounds on the diabetes target, stated a priori: the documented range (25..346) of the
#: disease-progression score in scikit-learn's description of the data set.
DIABETES_Y_BOUNDS: tuple[float, float] = (25.0, 346.0)
#: Public output bounds of :func:`make_synthetic_2d` (outputs are clipped to them).
SYNTHETIC_2D_Y_BOUNDS: tuple[float, float] = (0.0, 100.0)


# --------------------------------------------------------------------------------------------
# locating the papers' data


def default_data_dir() -> Path | None:
    """``$DPGP_SHARED_DATA`` if set, else ``<repo root>/../shared/data`` if it exists, else None."""
    env = os.environ.get(_ENV_VAR)
    if env:
        return Path(env)
    candidate = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


def _resolve(path: str | os.PathLike[str] | None, filename: str) -> Path:
    """The data file: ``path`` itself, ``path/filename`` for a folder, or the default folder's."""
    if path is None:
        folder = default_data_dir()
        if folder is None:
            raise FileNotFoundError(
                f"{filename} not found: no data folder. Set the environment variable {_ENV_VAR} "
                f"to the folder holding {filename} (the papers' data, ../shared/data beside the "
                "repository), or pass its path."
            )
        p = folder / filename
    else:
        p = Path(path)
        if p.is_dir():
            p = p / filename
    if not p.is_file():
        raise FileNotFoundError(
            f"{filename} not found at {str(p)!r}. Set the environment variable {_ENV_VAR} to the "
            f"folder holding {filename} (the papers' data), or pass its path."
        )
    return p


def _check_seed(seed: object) -> None:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")


def _check_count(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


# --------------------------------------------------------------------------------------------
# !Kung


_KUNG_COLUMNS = ("age", "weight")


def load_kung(
    path: str | os.PathLike[str] | None = None, *, inputs: Sequence[str] = ("age",)
) -> tuple[np.ndarray, np.ndarray]:
    """!Kung San women: ``X [287, D]`` (``inputs`` in the order given), ``Y [287, 1]`` height (cm).

    Reads ``Howell1.csv`` (semicolon-separated, header ``"height";"weight";"age";"male"``) and
    keeps the 287 rows with ``male == 0``, in file order. ``inputs`` are any of ``"age"`` (years)
    and ``"weight"`` (kg). ``path`` is the file or its folder (default :func:`default_data_dir`).
    """
    if isinstance(inputs, str):
        inputs = (inputs,)
    inputs = tuple(inputs)
    if not inputs or any(c not in _KUNG_COLUMNS for c in inputs) or len(set(inputs)) != len(inputs):
        raise ValueError(f"inputs must be distinct names from {_KUNG_COLUMNS}, got {inputs!r}")
    p = _resolve(path, "Howell1.csv")
    with p.open(newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter=";") if float(r["male"]) == 0.0]
    X = np.array([[float(r[c]) for c in inputs] for r in rows], dtype=np.float64)
    Y = np.array([[float(r["height"])] for r in rows], dtype=np.float64)
    return X.reshape(len(rows), len(inputs)), Y.reshape(len(rows), 1)


def kung_folds(n: int, n_folds: int = 14, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Seeded K-fold splits of ``range(n)``: a list of ``(train_idx, test_idx)`` int arrays.

    The indices are permuted with ``default_rng(seed)`` and cut into ``n_folds`` near-equal
    consecutive blocks (``np.array_split``); each block is a test set once. The split depends
    only on ``n`` and the seed, never on the outputs, so it is public.
    """
    n = _check_count("n", n)
    n_folds = _check_count("n_folds", n_folds, 2)
    if n_folds > n:
        raise ValueError(f"n_folds must be <= n ({n}), got {n_folds}")
    _check_seed(seed)
    perm = np.random.default_rng(seed).permutation(n)
    folds = []
    for test in np.array_split(perm, n_folds):
        train = np.setdiff1d(perm, test)  # sorted
        folds.append((train, np.sort(test)))
    return folds


# --------------------------------------------------------------------------------------------
# HMEQ


def load_hmeq(
    path: str | os.PathLike[str] | None = None, *, n: int = 200, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Home Equity Loans: ``X [n, 1]`` DELINQ, ``Y [n, 1]`` in ``{-1, +1}`` (BAD 1 -> +1, 0 -> -1).

    Rows with DELINQ or BAD missing are dropped (5,380 remain). The ``n`` rows are then sampled
    "biased to balance" DELINQ and BAD (JMLR section 6.4) by this public rule:

    1. four cells, in this order: (DELINQ == 0, BAD 0), (DELINQ == 0, BAD 1),
       (DELINQ > 0, BAD 0), (DELINQ > 0, BAD 1);
    2. quotas are equal, ``n // 4`` each, the remainder going one each to the first cells; a cell
       with fewer rows than its quota gives all its rows and its shortfall is shared the same way
       among the cells that still have rows (water-filling);
    3. within each cell, rows are drawn uniformly without replacement with ``default_rng(seed)``;
       the result is in file order.

    The sampling reads the labels: that is the papers' *benchmark protocol*, a public design
    choice of the experiment made before any release, not part of a DP release.
    """
    n = _check_count("n", n)
    _check_seed(seed)
    p = _resolve(path, "hmeq.csv")
    delinq, bad = [], []
    with p.open(newline="") as f:
        for r in csv.DictReader(f):
            d, b = r["DELINQ"].strip(), r["BAD"].strip()
            if d and b:
                delinq.append(float(d))
                bad.append(float(b))
    delinq_a, bad_a = np.asarray(delinq), np.asarray(bad)
    if n > delinq_a.size:
        raise ValueError(f"n must be <= {delinq_a.size} (complete rows), got {n}")
    cells = [
        np.flatnonzero((delinq_a == 0) & (bad_a == 0)),
        np.flatnonzero((delinq_a == 0) & (bad_a == 1)),
        np.flatnonzero((delinq_a > 0) & (bad_a == 0)),
        np.flatnonzero((delinq_a > 0) & (bad_a == 1)),
    ]
    quotas = _water_fill(n, [c.size for c in cells])
    rng = np.random.default_rng(seed)
    chosen = np.sort(
        np.concatenate([rng.choice(c, size=q, replace=False) for c, q in zip(cells, quotas)])
    )
    X = delinq_a[chosen].reshape(-1, 1).astype(np.float64)
    Y = np.where(bad_a[chosen] == 1, 1.0, -1.0).reshape(-1, 1)
    return X, Y


def _water_fill(n: int, capacities: Sequence[int]) -> list[int]:
    """Equal shares of ``n`` over cells, capped by capacity; remainders go to the first cells."""
    quotas = [0] * len(capacities)
    left = n
    while left > 0:
        open_cells = [i for i, c in enumerate(capacities) if quotas[i] < c]
        if not open_cells:
            raise ValueError(f"n={n} exceeds the rows available ({sum(capacities)})")
        share, extra = divmod(left, len(open_cells))
        for j, i in enumerate(open_cells):
            add = min(share + (1 if j < extra else 0), capacities[i] - quotas[i])
            quotas[i] += add
            left -= add
    return quotas


# --------------------------------------------------------------------------------------------
# MNIST


def _area_matrix(n_in: int, n_out: int) -> np.ndarray:
    """``[n_out, n_in]`` weights: output i averages the input over [i, i + 1) * n_in / n_out."""
    edges = np.arange(n_out + 1) * (n_in / n_out)
    lo, hi = edges[:-1, None], edges[1:, None]
    j = np.arange(n_in)[None, :]
    overlap = np.clip(np.minimum(hi, j + 1) - np.maximum(lo, j), 0.0, None)
    return overlap / (n_in / n_out)


def area_downsample(images: np.ndarray, size: int) -> np.ndarray:
    """Area-average ``[..., H, W]`` images to ``[..., size, size]`` (float64).

    Each output pixel is the mean of the input over the square it covers, input pixels that it
    covers in part weighted by the overlapping area (as PIL's BOX filter or OpenCV's INTER_AREA);
    for ``H = W = k * size`` this is plain ``k x k`` block averaging.
    """
    images = np.asarray(images, dtype=np.float64)
    if images.ndim < 2:
        raise ValueError(f"images must have shape [..., H, W], got shape {images.shape}")
    h, w = images.shape[-2:]
    size = _check_count("size", size)
    if size > min(h, w):
        raise ValueError(f"size must be <= the image side ({min(h, w)}), got {size}")
    return _area_matrix(h, size) @ images @ _area_matrix(w, size).T


def load_mnist_binary(
    path: str | os.PathLike[str] | None = None,
    *,
    n_train: int = 256,
    n_test: int = 100,
    size: int = 15,
    seed: int = 0,
    pixel_max: float = 1.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """MNIST 0-4 vs 5-9: ``Xtrain [n_train, size**2], Ytrain [n_train, 1], Xtest, Ytest``.

    Reads ``mnist_2400.npz`` (``images`` uint8 [2400, 28, 28], ``labels``). Images are
    area-averaged to ``size x size`` (:func:`area_downsample`), scaled from 0..255 to
    ``0..pixel_max`` (default [0, 1]; ``pixel_max=255`` keeps the raw scale in which the JMLR
    paper states its lengthscales, e.g. 380) and flattened row-major. Labels: digits 0-4 -> -1,
    5-9 -> +1. Train and test are disjoint: the first ``n_train`` and next ``n_test`` indices
    of ``default_rng(seed).permutation(2400)``.
    """
    n_train = _check_count("n_train", n_train)
    n_test = _check_count("n_test", n_test)
    _check_seed(seed)
    if not (np.isfinite(pixel_max) and pixel_max > 0):
        raise ValueError(f"pixel_max must be finite and > 0, got {pixel_max!r}")
    p = _resolve(path, "mnist_2400.npz")
    with np.load(p) as data:
        images, labels = data["images"], data["labels"]
    total = images.shape[0]
    if n_train + n_test > total:
        raise ValueError(f"n_train + n_test must be <= {total}, got {n_train} + {n_test}")
    perm = np.random.default_rng(seed).permutation(total)
    X = np.clip(area_downsample(images, size).reshape(total, -1) / 255.0, 0.0, 1.0) * pixel_max
    Y = np.where(labels.astype(np.int64) >= 5, 1.0, -1.0).reshape(-1, 1)
    tr, te = perm[:n_train], perm[n_train : n_train + n_test]
    return X[tr], Y[tr], X[te], Y[te]


# --------------------------------------------------------------------------------------------
# stripes (JMLR Figure 7)

_STRIPE_WIDTH = 5.0
_STRIPE_OFFSET = 0.5
_STRIPES_BOX = 10.0


def _stripe_label(X: np.ndarray) -> np.ndarray:
    """+1 on bands ``floor((x1 + x2 - 0.5) / 5)`` even, -1 on odd bands (diagonal stripes)."""
    band = np.floor((X[:, 0] + X[:, 1] - _STRIPE_OFFSET) / _STRIPE_WIDTH)
    return np.where(band % 2 == 0, 1.0, -1.0)


def make_stripes(
    n: int = 200, *, seed: int = 0, boundary_noise: float = 0.75, decay: float = 4.0
) -> tuple[np.ndarray, np.ndarray]:
    """Noisy diagonal stripes with a density gradient: ``X [n, 2]`` in [0, 10]^2, ``Y [n, 1]``.

    The classes alternate in diagonal bands of width 5 along ``x1 + x2`` (boundaries at
    ``x1 + x2 = 0.5 + 5 k``; the band 0.5 <= x1 + x2 < 5.5 is +1). ``x1`` is uniform on [0, 10];
    ``x2`` has density proportional to ``exp(-x2 / decay)`` on [0, 10], so points are dense at
    the bottom and scarce at the top. Labels are noisy near the boundaries: a point's label is the
    band of ``x1 + x2 + e`` with ``e ~ N(0, boundary_noise**2)``.
    """
    n = _check_count("n", n)
    _check_seed(seed)
    if not (np.isfinite(boundary_noise) and boundary_noise >= 0):
        raise ValueError(f"boundary_noise must be finite and >= 0, got {boundary_noise!r}")
    if not (np.isfinite(decay) and decay > 0):
        raise ValueError(f"decay must be finite and > 0, got {decay!r}")
    rng = np.random.default_rng(seed)
    x1 = rng.uniform(0.0, _STRIPES_BOX, n)
    u = rng.uniform(0.0, 1.0, n)
    x2 = -decay * np.log1p(-u * -np.expm1(-_STRIPES_BOX / decay))  # inverse CDF, truncated exp
    X = np.column_stack([x1, x2])
    jitter = boundary_noise * rng.standard_normal(n)
    Y = _stripe_label(X + np.column_stack([jitter, np.zeros(n)]))
    return X, Y.reshape(-1, 1)


def stripes_test_grid() -> tuple[np.ndarray, np.ndarray]:
    """The 10 x 10 test grid for :func:`make_stripes`: ``X [100, 2]``, ``Y [100, 1]``, 50 per class.

    Points are the cell centres ``0.5, 1.5, ..., 9.5`` on each axis (x1 varying fastest),
    labelled by the noise-free stripe rule. With boundaries at ``x1 + x2 = 5.5, 10.5, 15.5`` no
    point lies on a boundary and the bands hold 15, 40, 35 and 10 points, so +1 has 15 + 35 = 50
    and -1 has 40 + 10 = 50.
    """
    c = np.arange(10) + 0.5
    x1, x2 = np.meshgrid(c, c)
    X = np.column_stack([x1.ravel(), x2.ravel()])
    return X, _stripe_label(X).reshape(-1, 1)


# --------------------------------------------------------------------------------------------
# Citi Bike-like journeys (AISTATS Table 1 stand-in)

_KM_PER_DEG_LAT = 111.0
_KM_PER_DEG_LON = 111.0 * np.cos(np.deg2rad(40.73))


def make_citibike_like(
    n_train: int = 4900,
    n_test: int = 100,
    *,
    seed: int = 0,
    n_stations: int = 300,
    station_seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Synthetic bike journeys: ``Xtrain [n_train, 4], Ytrain [n_train, 1], Xtest, Ytest``.

    Columns of X: start lat, start lon, end lat, end lon (degrees). ``n_stations`` stations are
    uniform in the box :data:`CITIBIKE_LAT_RANGE` x :data:`CITIBIKE_LON_RANGE` (fixed by
    ``station_seed``). Each journey (drawn with ``seed``, one seed per cross-validation fold)
    starts at a uniform station and ends at a station with probability proportional to
    ``exp(-distance / 1.5 km)`` (a return to the start included). Duration (s) is
    ``(60 + 240 * manhattan_km) * exp(N(0, 0.35**2))`` (15 km/h along the street grid plus a
    minute to dock; multiplicative noise for detours and rider speed; median about 620 s,
    about 5% at the cap), clipped to :data:`CITIBIKE_Y_BOUNDS`
    = (0, 2000) s as in the paper. The public bounds for a release are (0, 2000), d = 2000.
    """
    n_train = _check_count("n_train", n_train)
    n_test = _check_count("n_test", n_test)
    n_stations = _check_count("n_stations", n_stations, 2)
    _check_seed(seed)
    _check_seed(station_seed)
    srng = np.random.default_rng(station_seed)
    lat = srng.uniform(*CITIBIKE_LAT_RANGE, n_stations)
    lon = srng.uniform(*CITIBIKE_LON_RANGE, n_stations)
    stations = np.column_stack([lat, lon])
    dlat = (stations[:, None, 0] - stations[None, :, 0]) * _KM_PER_DEG_LAT
    dlon = (stations[:, None, 1] - stations[None, :, 1]) * _KM_PER_DEG_LON
    weights = np.exp(-np.hypot(dlat, dlon) / 1.5)
    cdf = np.cumsum(weights / weights.sum(axis=1, keepdims=True), axis=1)

    rng = np.random.default_rng(seed)
    n = n_train + n_test
    start = rng.integers(0, n_stations, n)
    end = np.minimum((cdf[start] < rng.uniform(0.0, 1.0, n)[:, None]).sum(axis=1), n_stations - 1)
    manhattan = np.abs(dlat[start, end]) + np.abs(dlon[start, end])
    duration = (60.0 + 240.0 * manhattan) * np.exp(0.35 * rng.standard_normal(n))
    X = np.column_stack([stations[start], stations[end]])
    Y = np.clip(duration, *CITIBIKE_Y_BOUNDS).reshape(-1, 1)
    return X[:n_train], Y[:n_train], X[n_train:], Y[n_train:]


# --------------------------------------------------------------------------------------------
# diabetes (ships with scikit-learn)


def load_diabetes_1d() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's diabetes data: ``X [442, 1]`` BMI (kg/m^2, unscaled), ``Y [442, 1]`` target.

    The target is the disease-progression score one year after baseline; use the a-priori
    public bounds :data:`DIABETES_Y_BOUNDS` = (25, 346), its documented range. The data ship in
    the scikit-learn wheel (no download).
    """
    from sklearn.datasets import load_diabetes

    data = load_diabetes(scaled=False)
    bmi = list(data.feature_names).index("bmi")
    X = np.asarray(data.data[:, bmi], dtype=np.float64).reshape(-1, 1)
    Y = np.asarray(data.target, dtype=np.float64).reshape(-1, 1)
    return X, Y


# --------------------------------------------------------------------------------------------
# synthetic 2-D (scaling)

_TOWNS = np.array([[22.0, 25.0], [78.0, 22.0], [25.0, 76.0], [80.0, 78.0]])


def _synthetic_f(X: np.ndarray) -> np.ndarray:
    x1, x2 = X[:, 0], X[:, 1]
    return (
        50.0
        + 20.0 * np.sin(2 * np.pi * x1 / 60.0) * np.cos(2 * np.pi * x2 / 80.0)
        + 10.0 * np.exp(-((x1 - 50.0) ** 2 + (x2 - 50.0) ** 2) / (2 * 15.0**2))
        + 0.1 * (x2 - 50.0)
    )


def make_synthetic_2d(
    n: int, *, seed: int = 0, noise_std: float = 5.0
) -> tuple[np.ndarray, np.ndarray, tuple[float, float]]:
    """Clustered 2-D regression data: ``X [n, 2]`` in [0, 100]^2, ``Y [n, 1]``, public bounds.

    Inputs (shuffled): ``round(0.45 n)`` from a broad centre, N((50, 50), 20^2 I); ``round(0.2 n)``
    uniform on the box; the rest split evenly over four "towns", N(town, 4^2 I) at (22, 25),
    (78, 22), (25, 76), (80, 78). Gaussian points outside the box are redrawn. Output: a smooth
    function (range about 20..80) plus N(0, ``noise_std``^2), clipped to the returned public
    bounds :data:`SYNTHETIC_2D_Y_BOUNDS` = (0, 100).
    """
    n = _check_count("n", n)
    _check_seed(seed)
    if not (np.isfinite(noise_std) and noise_std >= 0):
        raise ValueError(f"noise_std must be finite and >= 0, got {noise_std!r}")
    rng = np.random.default_rng(seed)
    n_centre = int(round(0.45 * n))
    n_uniform = min(int(round(0.2 * n)), n - n_centre)
    n_towns = n - n_centre - n_uniform
    per_town = [n_towns // 4 + (1 if t < n_towns % 4 else 0) for t in range(4)]

    def in_box(mean: np.ndarray, sd: float, m: int) -> np.ndarray:
        out = np.empty((0, 2))
        while out.shape[0] < m:
            draw = mean + sd * rng.standard_normal((2 * (m - out.shape[0]) + 4, 2))
            draw = draw[np.all((draw >= 0.0) & (draw <= 100.0), axis=1)]
            out = np.vstack([out, draw])
        return out[:m]

    parts = [in_box(np.array([50.0, 50.0]), 20.0, n_centre)]
    parts += [in_box(_TOWNS[t], 4.0, per_town[t]) for t in range(4)]
    parts.append(rng.uniform(0.0, 100.0, (n_uniform, 2)))
    X = np.vstack(parts)[rng.permutation(n)]
    Y = np.clip(_synthetic_f(X) + noise_std * rng.standard_normal(n), *SYNTHETIC_2D_Y_BOUNDS)
    return X, Y.reshape(-1, 1), SYNTHETIC_2D_Y_BOUNDS
