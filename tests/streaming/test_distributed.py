"""The streamed sparse release on a (small, local) Dask cluster equals the single-machine one."""

from __future__ import annotations

import os

import gpflow
import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow import sampling, streaming

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
from dpgp_gpflow.distributed import DaskChunks  # noqa: E402

from test_streaming import _classifier, _model  # noqa: E402
from dpgp_gpflow.models import DPGPRFITC, DPSGPR, DPSparseLaplaceGPC  # noqa: E402


def _same_released_mean(on_dask, reference, seed, rtol=1e-6):
    """The released mean, the one part that reads the private outputs through the workers, equals the
    reference release's (same seed): the mean before noise ``mean - F xi`` (xi the seeded draw, F's
    columns may differ in sign between runs) to ``rtol`` of its scale, and the released mean itself
    to ``rtol`` of its scale plus the noise's scale when F's signs agree."""
    a, b = reference.release, on_dask.release
    assert a.rank == b.rank
    xi, _ = sampling.standard_normal(a.rank, seed)
    before_a, before_b = a.mean[:, 0] - a.noise_factor @ xi, b.mean[:, 0] - b.noise_factor @ xi
    scale = np.max(np.abs(before_a))
    assert scale > 0.0
    np.testing.assert_allclose(before_b, before_a, rtol=0, atol=rtol * scale)
    signs = np.sign(np.sum(a.noise_factor * b.noise_factor, axis=0))
    if np.all(signs > 0):  # the same noise added: the released means agree
        np.testing.assert_allclose(b.mean, a.mean, rtol=0, atol=rtol * np.max(np.abs(a.mean)))


@pytest.mark.slow
@pytest.mark.parametrize("cls", [DPGPRFITC, DPSGPR])
def test_dask_release_equals_single_machine_and_passes_the_audit(cls):
    model = _model(cls, 2000, 16)
    X, Y = (t.numpy() for t in model.data)
    local = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=3, chunk_size=500)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        source = DaskChunks(da.from_array(X, chunks=(500, 1)), da.from_array(Y, chunks=(500, 1)), client=client)
        on_dask = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=3, source=source)
    a, b = local.release, on_dask.release
    np.testing.assert_allclose(b.noise_std, a.noise_std, rtol=1e-6)
    np.testing.assert_allclose(b.noise_factor @ b.noise_factor.T, a.noise_factor @ a.noise_factor.T, rtol=0,
                               atol=1e-6 * np.max(np.abs(a.noise_factor @ a.noise_factor.T)))
    _same_released_mean(on_dask, local, 3)
    _same_released_mean(on_dask, model.release_function(epsilon=1.0, delta=1e-3, seed=3), 3, rtol=1e-5)  # in memory
    assert dp.audit(on_dask, model).passed


def _dask_model(cls, model, chunk):
    X, Y = (t.numpy() for t in model.data)
    return cls((da.from_array(X, chunks=(chunk, 1)), da.from_array(Y, chunks=(chunk, 1))),
               gpflow.kernels.SquaredExponential(lengthscales=1.0), model.inducing_variable.Z.numpy(),
               noise_variance=0.1, y_bounds=(-2, 2), hyperparameters_public=True)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [DPGPRFITC, DPSGPR])
def test_a_model_built_from_dask_arrays_releases_on_the_active_cluster(cls):
    model = _model(cls, 2000, 16)
    local = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=3, chunk_size=500)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client, distributed.get_task_stream(client) as tasks:
        on_dask = streaming.release_function(_dask_model(cls, model, 400), epsilon=1.0, delta=1e-3, seed=3)
    assert len({task["worker"] for task in tasks.data}) == 2  # the per-chunk work ran on both workers
    a, b = local.release, on_dask.release
    np.testing.assert_allclose(b.noise_std, a.noise_std, rtol=1e-6)
    _same_released_mean(on_dask, local, 3)
    assert dp.audit(on_dask, model).passed


def test_a_dask_backed_model_refuses_every_in_memory_path():
    model = _dask_model(DPSGPR, _model(DPSGPR, 300, 8), 100)
    assert model.input_dim == 1 and model.dask_rows[0].shape == (300, 1)
    for call in (lambda: model.data, lambda: model.predict_f(np.zeros((2, 1))), model.training_loss,
                 lambda: model.release(np.zeros((2, 1)), epsilon=1.0, delta=1e-3),
                 lambda: model.release_function(epsilon=1.0, delta=1e-3)):
        with pytest.raises(TypeError, match="Dask arrays"):
            call()
    with pytest.raises(TypeError, match="Dask arrays"):
        model.data = (np.zeros((3, 1)), np.zeros((3, 1)))


def test_dask_rows_are_validated_at_construction():
    X, Y = da.zeros((10, 2), chunks=5), da.zeros((10, 1), chunks=5)
    kernel, Z = gpflow.kernels.SquaredExponential(), np.zeros((2, 2))
    with pytest.raises(TypeError, match="both as dask arrays"):
        DPSGPR((X, np.zeros((10, 1))), kernel, Z, noise_variance=0.1, y_bounds=(-1, 1))
    with pytest.raises(ValueError, match="rows but the inputs have"):
        DPSGPR((X, da.zeros((9, 1), chunks=5)), kernel, Z, noise_variance=0.1, y_bounds=(-1, 1))
    with pytest.raises(ValueError, match=r"one output\) or \[N, P\]"):  # [N, P]: several outputs per row
        DPSGPR((X, da.zeros((10, 2, 1), chunks=5)), kernel, Z, noise_variance=0.1, y_bounds=(-1, 1))
    assert DPSGPR((X, da.zeros((10, 2), chunks=5)), kernel, Z, noise_variance=0.1, y_bounds=(-1, 1)).num_outputs == 2
    with pytest.raises(TypeError, match="real numbers"):
        DPSGPR((X, da.zeros((10, 1), chunks=5, dtype=bool)), kernel, Z, noise_variance=0.1, y_bounds=(-1, 1))
    with pytest.raises(ValueError, match="2 columns like the training inputs"):
        DPSGPR((X, Y), kernel, np.zeros((2, 3)), noise_variance=0.1, y_bounds=(-1, 1))


@pytest.mark.slow
def test_a_scheduler_address_with_worker_processes_gives_the_same_release():
    """A real cluster: a worker in its own process reached through the scheduler's address (the
    per-chunk functions and the model's public terms travel by pickling). One worker process: each one
    starts TensorFlow and traces the per-chunk functions itself (~15 s of CPU on this 2-core machine);
    the work spread over two workers is the threaded tests' (tasks on both workers asserted)."""
    model = _model(DPSGPR, 1500, 12)
    local = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=5, chunk_size=500)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster.scheduler_address) as client, distributed.get_task_stream(client) as tasks:
        remote = streaming.release_function(_dask_model(DPSGPR, model, 500), epsilon=1.0, delta=1e-3, seed=5)
        pids = client.run(os.getpid)  # {the worker's address: its process id}
    # the per-chunk work (chunks of 500 of the 1,500 rows) ran in that one worker, in another process than this one
    assert len(pids) == 1 and next(iter(pids.values())) != os.getpid()
    assert len(tasks.data) >= 3 and {task["worker"] for task in tasks.data} == set(pids)
    np.testing.assert_allclose(remote.release.noise_std, local.release.noise_std, rtol=1e-6)
    _same_released_mean(remote, local, 5)
    assert dp.audit(remote, model).passed


def test_a_sparse_classifier_built_from_dask_arrays_releases_on_the_cluster():
    model = _classifier(1500, 12)
    X, Y = (t.numpy() for t in model.data)
    Z = model.inducing_variable.Z.numpy()
    local = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=4, chunk_size=500)
    Xd, Yd = da.from_array(X, chunks=(500, 1)), da.from_array(Y, chunks=(500, 1))
    with pytest.raises(TypeError, match="minibatch_kmeans_inducing_inputs"):
        DPSparseLaplaceGPC((Xd, Yd), gpflow.kernels.SquaredExponential(lengthscales=1.0), 12)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        dmodel = DPSparseLaplaceGPC((Xd, Yd), gpflow.kernels.SquaredExponential(lengthscales=1.0), Z)
        with pytest.raises(TypeError, match="Dask arrays"):
            dmodel.release(epsilon=1.0, delta=1e-3)
        on_dask = streaming.release_function(dmodel, epsilon=1.0, delta=1e-3, seed=4)
    np.testing.assert_allclose(on_dask.release.noise_std, local.release.noise_std, rtol=1e-6)
    _same_released_mean(on_dask, local, 4)
    _same_released_mean(on_dask, model.release(epsilon=1.0, delta=1e-3, seed=4), 4, rtol=1e-5)  # in memory
    assert dp.audit(on_dask, model).passed


def test_the_subsample_start_runs_on_dask_and_equals_the_local_one(monkeypatch):
    from dpgp_gpflow.streaming import solver

    monkeypatch.setattr(solver, "COARSE_ROWS", 300)
    model = _model(DPSGPR, 2000, 16)
    local_stats, dask_stats = {}, {}
    local = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=3, chunk_size=500, stats=local_stats)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        on_dask = streaming.release_function(_dask_model(DPSGPR, model, 500), epsilon=1.0, delta=1e-3, seed=3,
                                             stats=dask_stats)
    assert "coarse" in local_stats and "coarse" in dask_stats
    np.testing.assert_allclose(on_dask.release.noise_std, local.release.noise_std, rtol=1e-6)
    _same_released_mean(on_dask, local, 3)
    assert dp.audit(on_dask, model).passed
