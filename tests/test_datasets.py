"""Tests for dpgp_gpflow.datasets: shapes, label sets, seeding, the documented sampling rules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpgp_gpflow import datasets as ds

REPO_ROOT = Path(__file__).resolve().parents[1]


def _block_average_by_upsampling(images: np.ndarray, size: int) -> np.ndarray:
    """Independent area averaging: repeat each pixel ``size`` times, then average 28-blocks."""
    n, h, w = images.shape
    out = np.empty((n, size, size))
    for start in range(0, n, 50):
        chunk = images[start : start + 50].astype(np.float64)
        up = np.repeat(np.repeat(chunk, size, axis=1), size, axis=2)  # [m, h*size, w*size]
        out[start : start + 50] = up.reshape(-1, size, h, size, w).mean(axis=(2, 4))
    return out


# ------------------------------------------------------------------------------------------
# data folder


def test_default_data_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("DPGP_SHARED_DATA", str(tmp_path))
    assert ds.default_data_dir() == tmp_path


def test_default_data_dir_fallback(monkeypatch):
    monkeypatch.delenv("DPGP_SHARED_DATA", raising=False)
    candidate = REPO_ROOT.parent / "shared" / "data"
    expected = candidate if candidate.is_dir() else None
    got = ds.default_data_dir()
    assert (got is None and expected is None) or Path(got).resolve() == expected.resolve()


@pytest.mark.parametrize(
    "loader", [ds.load_kung, ds.load_hmeq, ds.load_mnist_binary], ids=["kung", "hmeq", "mnist"]
)
def test_missing_data_names_env_var(loader, monkeypatch, tmp_path):
    with pytest.raises(FileNotFoundError, match="DPGP_SHARED_DATA"):
        loader(tmp_path)  # an empty folder
    monkeypatch.setenv("DPGP_SHARED_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="DPGP_SHARED_DATA"):
        loader()


# ------------------------------------------------------------------------------------------
# !Kung


def test_load_kung_matches_female_rows(data_dir):
    X, Y = ds.load_kung(data_dir)
    assert X.shape == (287, 1) and Y.shape == (287, 1)
    assert X.dtype == np.float64 and Y.dtype == np.float64
    raw = np.loadtxt(data_dir / "Howell1.csv", delimiter=";", skiprows=1)  # height weight age male
    female = raw[raw[:, 3] == 0]
    np.testing.assert_array_equal(X[:, 0], female[:, 2])
    np.testing.assert_array_equal(Y[:, 0], female[:, 0])
    # the file path itself works as well as its folder
    X2, _ = ds.load_kung(data_dir / "Howell1.csv", inputs=("weight", "age"))
    assert X2.shape == (287, 2)
    np.testing.assert_array_equal(X2, female[:, [1, 2]])


@pytest.mark.parametrize("inputs", [(), ("height",), ("age", "age")])
def test_load_kung_bad_inputs(inputs, data_dir):
    with pytest.raises(ValueError, match="inputs"):
        ds.load_kung(data_dir, inputs=inputs)


def test_kung_folds_partition_and_seed():
    folds = ds.kung_folds(287, 14, seed=0)
    assert len(folds) == 14
    tests = np.concatenate([te for _, te in folds])
    np.testing.assert_array_equal(np.sort(tests), np.arange(287))  # each index tested once
    for tr, te in folds:
        assert tr.size + te.size == 287
        assert np.intersect1d(tr, te).size == 0
        assert te.size in (20, 21)
    again = ds.kung_folds(287, 14, seed=0)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(folds, again))
    other = ds.kung_folds(287, 14, seed=1)
    assert not all(np.array_equal(a[1], b[1]) for a, b in zip(folds, other))


@pytest.mark.parametrize("n, k", [(5, 6), (10, 1), (0, 2)])
def test_kung_folds_bad(n, k):
    with pytest.raises(ValueError):
        ds.kung_folds(n, k)


# ------------------------------------------------------------------------------------------
# HMEQ


def _hmeq_cells(X: np.ndarray, Y: np.ndarray) -> list[int]:
    d, b = X[:, 0] > 0, Y[:, 0] > 0
    return [int(np.sum(~d & ~b)), int(np.sum(~d & b)), int(np.sum(d & ~b)), int(np.sum(d & b))]


def test_load_hmeq_balanced(data_dir):
    X, Y = ds.load_hmeq(data_dir, n=200, seed=0)
    assert X.shape == (200, 1) and Y.shape == (200, 1)
    assert X.dtype == np.float64 and Y.dtype == np.float64
    assert set(np.unique(Y)) == {-1.0, 1.0}
    assert np.all(X >= 0) and np.all(X == np.round(X))
    assert _hmeq_cells(X, Y) == [50, 50, 50, 50]
    # n not divisible by 4: the remainder goes to the first cells
    assert _hmeq_cells(*ds.load_hmeq(data_dir, n=202, seed=3)) == [51, 51, 50, 50]


def test_load_hmeq_rows_come_from_file(data_dir):
    import csv

    with open(data_dir / "hmeq.csv", newline="") as f:
        pairs = {
            (float(r["DELINQ"]), 1.0 if r["BAD"] == "1" else -1.0)
            for r in csv.DictReader(f)
            if r["DELINQ"].strip() and r["BAD"].strip()
        }
    X, Y = ds.load_hmeq(data_dir, n=200, seed=0)
    assert {(x, y) for x, y in zip(X[:, 0], Y[:, 0])} <= pairs
    assert X.max() >= 2  # DELINQ > 0 is not just 1s


def test_load_hmeq_seeding(data_dir):
    a = ds.load_hmeq(data_dir, seed=0)
    b = ds.load_hmeq(data_dir, seed=0)
    c = ds.load_hmeq(data_dir, seed=1)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    # same cell counts, different rows: the DELINQ > 0 draws differ
    assert not np.array_equal(a[0], c[0])


def test_water_fill_caps():
    assert ds._water_fill(10, [1, 100, 2, 100]) == [1, 4, 2, 3]
    assert sum(ds._water_fill(7, [3, 3, 3, 3])) == 7
    with pytest.raises(ValueError, match="exceeds"):
        ds._water_fill(13, [3, 3, 3, 3])


# ------------------------------------------------------------------------------------------
# MNIST


def test_area_downsample_against_independent():
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (7, 28, 28)).astype(np.uint8)
    np.testing.assert_allclose(
        ds.area_downsample(imgs, 15), _block_average_by_upsampling(imgs, 15), rtol=0, atol=1e-10
    )
    block = imgs.astype(float).reshape(7, 14, 2, 14, 2).mean(axis=(2, 4))
    np.testing.assert_allclose(ds.area_downsample(imgs, 14), block, rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="size"):
        ds.area_downsample(imgs, 29)


def test_load_mnist_binary(data_dir):
    Xtr, Ytr, Xte, Yte = ds.load_mnist_binary(data_dir, n_train=256, n_test=100, size=15, seed=0)
    assert Xtr.shape == (256, 225) and Ytr.shape == (256, 1)
    assert Xte.shape == (100, 225) and Yte.shape == (100, 1)
    assert all(a.dtype == np.float64 for a in (Xtr, Ytr, Xte, Yte))
    assert Xtr.min() >= 0.0 and Xtr.max() <= 1.0 and Xtr.max() > 0.9
    assert set(np.unique(Ytr)) == {-1.0, 1.0} and set(np.unique(Yte)) == {-1.0, 1.0}

    # the documented rule: indices from default_rng(seed).permutation(2400), 0-4 -> -1, 5-9 -> +1
    with np.load(data_dir / "mnist_2400.npz") as z:
        images, labels = z["images"], z["labels"]
    perm = np.random.default_rng(0).permutation(2400)
    tr, te = perm[:256], perm[256:356]
    expected = _block_average_by_upsampling(images[np.concatenate([tr, te])], 15) / 255.0
    np.testing.assert_allclose(Xtr, expected[:256].reshape(256, -1), atol=1e-10)
    np.testing.assert_allclose(Xte, expected[256:].reshape(100, -1), atol=1e-10)
    np.testing.assert_array_equal(Ytr[:, 0], np.where(labels[tr] >= 5, 1.0, -1.0))
    np.testing.assert_array_equal(Yte[:, 0], np.where(labels[te] >= 5, 1.0, -1.0))

    # train and test are disjoint: no test image equals a training image
    dists = ((Xte[:, None, :] - Xtr[None, :, :]) ** 2).sum(-1)
    assert dists.min() > 0


def test_load_mnist_binary_seeding_and_scale(data_dir):
    a = ds.load_mnist_binary(data_dir, n_train=20, n_test=10, seed=0)
    b = ds.load_mnist_binary(data_dir, n_train=20, n_test=10, seed=0)
    c = ds.load_mnist_binary(data_dir, n_train=20, n_test=10, seed=1)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    assert not np.array_equal(a[0], c[0])
    raw = ds.load_mnist_binary(data_dir, n_train=20, n_test=10, seed=0, pixel_max=255.0)
    np.testing.assert_allclose(raw[0], 255.0 * a[0], rtol=1e-12)
    with pytest.raises(ValueError, match="n_train"):
        ds.load_mnist_binary(data_dir, n_train=2400, n_test=1)


# ------------------------------------------------------------------------------------------
# stripes


def test_make_stripes():
    X, Y = ds.make_stripes(200, seed=0)
    assert X.shape == (200, 2) and Y.shape == (200, 1)
    assert X.dtype == np.float64 and Y.dtype == np.float64
    assert set(np.unique(Y)) == {-1.0, 1.0}
    assert X.min() >= 0.0 and X.max() <= 10.0
    # density gradient: most points in the lower half (expected fraction 0.78)
    assert np.mean(X[:, 1] < 5.0) > 0.68
    # labels follow the diagonal stripes, with noise near the boundaries only
    agree = np.mean(ds._stripe_label(X) == Y[:, 0])
    assert 0.75 < agree < 0.99
    clean = ds.make_stripes(200, seed=0, boundary_noise=0.0)
    np.testing.assert_array_equal(clean[1][:, 0], ds._stripe_label(clean[0]))
    # seeding
    np.testing.assert_array_equal(X, ds.make_stripes(200, seed=0)[0])
    assert not np.array_equal(X, ds.make_stripes(200, seed=1)[0])


def test_stripes_test_grid_balanced():
    X, Y = ds.stripes_test_grid()
    assert X.shape == (100, 2) and Y.shape == (100, 1)
    assert np.sum(Y == 1) == 50 and np.sum(Y == -1) == 50
    assert len({tuple(x) for x in X}) == 100
    np.testing.assert_array_equal(np.unique(X[:, 0]), np.arange(10) + 0.5)
    # no grid point on a stripe boundary x1 + x2 = 0.5 + 5k
    assert np.min(np.abs(((X.sum(1) - 0.5) / 5.0) - np.round((X.sum(1) - 0.5) / 5.0))) > 0.05
    # labels are constant along anti-diagonals and alternate across the boundaries
    t = X.sum(1)
    for lo, hi, sign in [(0, 5.5, 1.0), (5.5, 10.5, -1.0), (10.5, 15.5, 1.0), (15.5, 20, -1.0)]:
        assert np.all(Y[(t > lo) & (t < hi), 0] == sign)


# ------------------------------------------------------------------------------------------
# Citi Bike-like


def test_make_citibike_like():
    Xtr, Ytr, Xte, Yte = ds.make_citibike_like(490, 10, seed=0)
    assert Xtr.shape == (490, 4) and Ytr.shape == (490, 1)
    assert Xte.shape == (10, 4) and Yte.shape == (10, 1)
    assert all(a.dtype == np.float64 for a in (Xtr, Ytr, Xte, Yte))
    lat, lon = ds.CITIBIKE_LAT_RANGE, ds.CITIBIKE_LON_RANGE
    assert lat[1] - lat[0] == pytest.approx(0.11) and lon[1] - lon[0] == pytest.approx(0.09)
    assert abs(lat[0] - 40.70) < 0.05 and abs(lon[0] + 74.02) < 0.05
    X = np.vstack([Xtr, Xte])
    for c, (lo, hi) in enumerate([lat, lon, lat, lon]):
        assert np.all((X[:, c] >= lo) & (X[:, c] <= hi))
    Y = np.vstack([Ytr, Yte])
    assert ds.CITIBIKE_Y_BOUNDS == (0.0, 2000.0)
    assert Y.min() > 0.0 and Y.max() <= 2000.0
    # duration grows with distance
    dist = np.hypot(X[:, 0] - X[:, 2], X[:, 1] - X[:, 3])
    assert np.corrcoef(dist, Y[:, 0])[0, 1] > 0.5


def test_make_citibike_like_cap_and_seeding():
    a = ds.make_citibike_like(2000, 100, seed=0)
    assert 0.0 < np.mean(a[1] == 2000.0) < 0.15  # the threshold at 2000 s is active
    b = ds.make_citibike_like(2000, 100, seed=0)
    c = ds.make_citibike_like(2000, 100, seed=1)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    assert not np.array_equal(a[0], c[0])
    # the stations are public and fixed across folds (seeds)
    stations_a = {tuple(r) for r in a[0][:, :2]}
    stations_c = {tuple(r) for r in c[0][:, :2]}
    assert len(stations_a | stations_c) <= 300


# ------------------------------------------------------------------------------------------
# diabetes and synthetic 2-D


def test_load_diabetes_1d():
    X, Y = ds.load_diabetes_1d()
    assert X.shape == (442, 1) and Y.shape == (442, 1)
    assert X.dtype == np.float64 and Y.dtype == np.float64
    assert 17.0 < X.min() and X.max() < 43.0  # BMI in kg/m^2, unscaled
    lo, hi = ds.DIABETES_Y_BOUNDS
    assert (lo, hi) == (25.0, 346.0)
    assert Y.min() >= lo and Y.max() <= hi


def test_make_synthetic_2d():
    X, Y, bounds = ds.make_synthetic_2d(2000, seed=0)
    assert X.shape == (2000, 2) and Y.shape == (2000, 1)
    assert X.dtype == np.float64 and Y.dtype == np.float64
    assert bounds == ds.SYNTHETIC_2D_Y_BOUNDS == (0.0, 100.0)
    assert X.min() >= 0.0 and X.max() <= 100.0
    assert Y.min() >= bounds[0] and Y.max() <= bounds[1]
    # clustered: far more points near the four towns than uniform inputs would put there (0.18)
    near_town = np.min(np.linalg.norm(X[:, None, :] - ds._TOWNS[None], axis=-1), axis=1) < 12.0
    assert np.mean(near_town) > 0.36
    # the output follows the smooth function
    assert np.corrcoef(ds._synthetic_f(X), Y[:, 0])[0, 1] > 0.8
    np.testing.assert_array_equal(X, ds.make_synthetic_2d(2000, seed=0)[0])
    assert not np.array_equal(X, ds.make_synthetic_2d(2000, seed=1)[0])
    assert ds.make_synthetic_2d(7, seed=0)[0].shape == (7, 2)


@pytest.mark.parametrize(
    "call",
    [
        lambda: ds.make_stripes(0),
        lambda: ds.make_stripes(10, seed=-1),
        lambda: ds.make_citibike_like(0, 10),
        lambda: ds.make_synthetic_2d(10, seed=1.5),
        lambda: ds.make_synthetic_2d(10, noise_std=-1.0),
        lambda: ds.make_stripes(10, decay=0.0),
    ],
)
def test_bad_arguments_raise(call):
    with pytest.raises(ValueError):
        call()
