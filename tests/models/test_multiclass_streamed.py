"""DPSparseMulticlassLaplaceGPC.release_streamed: the sparse multi-class release from streamed rows (a chunk
source of ``(X, labels)``, or Dask arrays), each class through ``dp.streaming.release.cloak_function`` under the one
reservation of the whole release.

References: the in-memory release of the same model and seed (independently tested against NumPy in
test_multiclass.py), compared as the streaming tests compare a streamed release (noise covariance, noise std
and the mean before noise; the eigenvectors' signs may differ), and the whole audit.
"""

from __future__ import annotations

import gpflow
import numpy as np
import pytest

import dpgp_gpflow as dp
import dpgp_gpflow.models.multiclass as multiclass_module
from dpgp_gpflow import PrivacyAccountant, sampling
from dpgp_gpflow.calibration import gaussian_multiplier
from dpgp_gpflow.models import DPSparseMulticlassLaplaceGPC
from dpgp_gpflow.streaming import LocalChunks

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ReproducibleNoiseWarning")

EPS, DELTA = 1.0, 1e-3
K_CLASSES = 3


def kernel():
    return gpflow.kernels.SquaredExponential(variance=1.2, lengthscales=1.0)


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(0)
    n = 300
    X = rng.uniform(0.0, 6.0, (n, 2))
    labels = np.clip(np.floor(X[:, 0] / 2.0 + 0.3 * rng.standard_normal(n)), 0, K_CLASSES - 1).astype(np.int64)
    return X, labels, rng.uniform(0.0, 6.0, (10, 2))


def _persons(n, largest=3, seed=5):
    """Consecutive persons of 1..largest rows."""
    sizes = np.random.default_rng(seed).integers(1, largest + 1, n)
    return np.repeat(np.arange(n) * 3 + 1, sizes)[:n]


@pytest.fixture(scope="module")
def grouped(rows):
    """The model of ``rows`` with persons of up to 3 rows: m = min(K, 2 g) = 3 classes moved."""
    X, labels, Z = rows
    return DPSparseMulticlassLaplaceGPC((X, labels), kernel(), Z, num_classes=K_CLASSES, hyperparameters_public=True,
                                        groups=_persons(len(X)))


@pytest.fixture(scope="module")
def model(rows):
    X, labels, Z = rows
    return DPSparseMulticlassLaplaceGPC((X, labels), kernel(), Z, num_classes=K_CLASSES, hyperparameters_public=True)


def assert_same_release(a, b, seed, rtol=1e-9):
    """Two multi-class releases of ``seed`` equal class by class, up to the signs of the noise's eigenvectors:
    the noise covariance, the noise std and the mean before class c's seeded draw ``xi``."""
    assert a.num_classes == b.num_classes and (a.epsilon, a.delta, a.mu) == (b.epsilon, b.delta, b.mu)
    for c, (ca, cb) in enumerate(zip(a.classifiers, b.classifiers)):
        ra, rb = ca.release, cb.release
        assert ra.rank == rb.rank and rb.noise_multiplier == ra.noise_multiplier
        np.testing.assert_allclose(rb.noise_std, ra.noise_std, rtol=rtol)
        cov_a, cov_b = ra.noise_factor @ ra.noise_factor.T, rb.noise_factor @ rb.noise_factor.T
        np.testing.assert_allclose(cov_b, cov_a, rtol=0, atol=rtol * np.max(np.abs(cov_a)))
        xi, _ = sampling.standard_normal(ra.rank, multiclass_module.class_seed(seed, a.num_classes, c))
        np.testing.assert_allclose(rb.mean[:, 0] - rb.noise_factor @ xi, ra.mean[:, 0] - ra.noise_factor @ xi, rtol=0,
                                   atol=rtol * np.max(np.abs(ra.mean)))


@pytest.mark.parametrize("chunks", ["default", "local-70"])
def test_the_streamed_release_equals_the_in_memory_one(rows, model, chunks, tmp_path):
    X, labels, _ = rows
    source = None if chunks == "default" else LocalChunks(X, labels, 70)
    acc = PrivacyAccountant(epsilon=2.0, delta=1e-2, composition="gdp")
    streamed = model.release_streamed(epsilon=EPS, delta=DELTA, seed=4, source=source, chunk_size=110, accountant=acc)
    (event,) = acc.ledger  # one event for the whole release, as in memory
    assert (event.epsilon, event.delta) == (EPS, DELTA) and event.mu == pytest.approx(streamed.mu, rel=1e-12)
    assert_same_release(model.release(epsilon=EPS, delta=DELTA, seed=4), streamed, 4, rtol=1e-7)
    report = dp.audit(streamed, model)
    assert report.passed and report.epsilon <= EPS * (1 + 1e-6)
    loaded = dp.load(streamed.save(tmp_path / "streamed.json"))  # its release file, as any multi-class release's
    np.testing.assert_array_equal(loaded.predict_y(X[:5])[0], streamed.predict_y(X[:5])[0])


def test_a_model_of_dask_rows_releases_streamed_on_dask(rows, model):
    da = pytest.importorskip("dask.array")
    X, labels, Z = rows
    Xd, Ld = da.from_array(X, chunks=(100, 2)), da.from_array(labels, chunks=100)
    with pytest.raises(TypeError, match="minibatch_kmeans_inducing_inputs"):
        DPSparseMulticlassLaplaceGPC((Xd, Ld), kernel(), 10, num_classes=K_CLASSES)
    with pytest.raises(TypeError, match="in-memory array"):
        DPSparseMulticlassLaplaceGPC((Xd, Ld), kernel(), Z, num_classes=K_CLASSES,
                                     groups=da.from_array(np.arange(len(X)), chunks=100))
    dmodel = DPSparseMulticlassLaplaceGPC((Xd, Ld), kernel(), Z, num_classes=K_CLASSES, hyperparameters_public=True)
    with pytest.raises(TypeError, match="release_streamed"):
        dmodel.release(epsilon=EPS, delta=DELTA)
    on_dask = dmodel.release_streamed(epsilon=EPS, delta=DELTA, seed=4)
    assert_same_release(model.release(epsilon=EPS, delta=DELTA, seed=4), on_dask, 4, rtol=1e-7)
    assert dp.audit(on_dask, model).passed


@pytest.mark.parametrize("bad", [3, -1, 1.5, np.nan])
def test_a_bad_label_in_the_rows_is_refused_before_anything_is_reserved(rows, model, draws, bad):
    X, labels, _ = rows
    broken = labels.astype(np.float64)
    broken[123] = bad
    acc = PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with pytest.raises(ValueError, match=r"labels must be integers 0\.\.2 .*: a label outside that range was read"):
        model.release_streamed(epsilon=EPS, delta=DELTA, source=LocalChunks(X, broken, 50), accountant=acc)
    assert acc.ledger == () and acc.held == (0.0, 0.0) and draws == []


def test_what_the_streamed_release_does_not_support_is_refused_before_anything_is_reserved(rows, model, draws):
    X, labels, Z = rows
    acc = PrivacyAccountant(epsilon=2.0, delta=1e-2)
    shuffled = _persons(len(X))
    shuffled[[10, 200]] = shuffled[[200, 10]]  # two persons' rows no longer consecutive
    grouped = DPSparseMulticlassLaplaceGPC((X, labels), kernel(), Z, num_classes=K_CLASSES,
                                           hyperparameters_public=True, groups=shuffled)
    with pytest.raises(ValueError, match="consecutive"):
        grouped.release_streamed(epsilon=EPS, delta=DELTA, accountant=acc)
    with pytest.raises(ValueError, match="has 299 rows but the model's groups 300"):  # not the groups' rows
        grouped.release_streamed(epsilon=EPS, delta=DELTA, accountant=acc,
                                 source=LocalChunks(X[:-1], labels[:-1], groups=shuffled[:-1]))
    with pytest.raises(ValueError, match="pass groups= to the source"):  # a source that does not say whose rows
        grouped.release_streamed(epsilon=EPS, delta=DELTA, source=LocalChunks(X, labels), accountant=acc)
    with pytest.raises(NotImplementedError, match="analytic"):
        model.release_streamed(epsilon=EPS, delta=DELTA, calibration="classical", accountant=acc)
    with pytest.raises(ValueError, match="input columns"):
        model.release_streamed(epsilon=EPS, delta=DELTA, source=LocalChunks(X[:, :1], labels), accountant=acc)
    with pytest.raises(TypeError, match="ChunkSource"):
        model.release_streamed(epsilon=EPS, delta=DELTA, source=(X, labels), accountant=acc)
    assert acc.ledger == () and acc.held == (0.0, 0.0) and draws == []


def test_a_failure_after_a_draw_charges_the_whole_event_once(model, monkeypatch, draws):
    original, calls = multiclass_module.cloak_function, []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise FloatingPointError("refused midway (test)")
        return original(*args, **kwargs)

    monkeypatch.setattr(multiclass_module, "cloak_function", failing)
    acc = PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with pytest.raises(FloatingPointError, match="midway"):
        model.release_streamed(epsilon=EPS, delta=DELTA, accountant=acc)
    assert len(draws) == 1 and acc.spent == (EPS, DELTA) and len(acc.ledger) == 1 and acc.held == (0.0, 0.0)


@pytest.mark.parametrize("chunks", ["default", "local-70"])
def test_the_grouped_streamed_release_equals_the_in_memory_grouped_release(rows, model, grouped, chunks, tmp_path):
    """With groups= (persons of up to 3 rows, K = 3) the streamed release recuts its chunks between persons; each
    class's step is at sqrt(m) s with m = min(K, 2 g) = 3 and equals the in-memory grouped release class by class;
    one ledger event; the whole audit against the grouped model passes and catches the per-row streamed release."""
    X, labels, _ = rows
    # a given source carries the person ids of its rows (the model's own rows carry its groups)
    source = None if chunks == "default" else LocalChunks(X, labels, 70, groups=grouped.groups)
    acc = PrivacyAccountant(epsilon=2.0, delta=1e-2, composition="gdp")
    streamed = grouped.release_streamed(epsilon=EPS, delta=DELTA, seed=4, source=source, chunk_size=110,
                                        accountant=acc)
    s = gaussian_multiplier(EPS, DELTA, "analytic")
    (event,) = acc.ledger  # one event for the whole release
    assert (event.epsilon, event.delta) == (EPS, DELTA) and event.mu == pytest.approx(1.0 / s, rel=1e-12)
    assert (streamed.person_rows, streamed.classes_moved) == (3, 3)
    for rel in streamed.releases:
        assert rel.noise_multiplier == pytest.approx(np.sqrt(3.0) * s, rel=1e-12)
        assert rel.neighbours == "person (groups, up to 3 rows)"
    assert_same_release(grouped.release(epsilon=EPS, delta=DELTA, seed=4), streamed, 4, rtol=1e-6)
    report = dp.audit(streamed, grouped)
    assert report.passed and report.epsilon <= EPS * (1 + 1e-6)
    per_row = model.release_streamed(epsilon=EPS, delta=DELTA, seed=4, chunk_size=110,
                                     source=None if source is None else LocalChunks(X, labels, 70))
    assert dp.audit(per_row, model).passed
    caught = dp.audit(per_row, grouped)  # the audit reads the model's groups, never the release's
    assert not caught.passed and caught.epsilon > 1.5 * EPS
    loaded = dp.load(streamed.save(tmp_path / "grouped.json"))
    assert loaded.person_rows == 3
    np.testing.assert_array_equal(loaded.predict_y(X[:5])[0], streamed.predict_y(X[:5])[0])


def test_a_model_of_dask_rows_with_groups_streams_the_in_memory_grouped_release(rows, grouped):
    da = pytest.importorskip("dask.array")
    X, labels, Z = rows
    Xd, Ld = da.from_array(X, chunks=(100, 2)), da.from_array(labels, chunks=100)
    dmodel = DPSparseMulticlassLaplaceGPC((Xd, Ld), kernel(), Z, num_classes=K_CLASSES, hyperparameters_public=True,
                                          groups=grouped.groups)
    assert dmodel.classes_moved == 3
    on_dask = dmodel.release_streamed(epsilon=EPS, delta=DELTA, seed=4)
    assert_same_release(grouped.release(epsilon=EPS, delta=DELTA, seed=4), on_dask, 4, rtol=1e-6)
    assert dp.audit(on_dask, grouped).passed
