"""The streamed sparse release on a (small, local) Dask cluster equals the single-machine one."""

from __future__ import annotations

import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow import streaming

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
from dpgp_gpflow.distributed import DaskChunks  # noqa: E402

from test_streaming import _model  # noqa: E402
from dpgp_gpflow.models import DPGPRFITC, DPSGPR  # noqa: E402


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
    assert dp.audit(on_dask, model).passed
