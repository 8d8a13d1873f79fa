"""Streamed releases with groups= (persons) equal the in-memory grouped releases (same seed), locally and on
Dask, for the sparse regression models and the sparse classifier; groups=None is unchanged; persons whose rows
are not consecutive are refused."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow import sampling, streaming
from dpgp_gpflow.accounting import PrivacyAccountant
from dpgp_gpflow.models import DPGPRFITC, DPSGPR, DPSparseLaplaceGPC, PrivateSparseClassifier
from dpgp_gpflow.neighbours import MAX_CORNER_ROWS, group_neighbours
from dpgp_gpflow.streaming import LocalChunks
from dpgp_gpflow.streaming.chunks import person_bounds, person_starts
from dpgp_gpflow.streaming.persons import ChunkPersons

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _persons(n, seed=1, largest=6):
    """Consecutive persons of 1..largest rows (some above MAX_CORNER_ROWS: the bound's columns)."""
    sizes = np.random.default_rng(seed).integers(1, largest + 1, n)
    return np.repeat(np.arange(n) * 7 + 3, sizes)[:n]  # identifiers need not be 0..P-1


def _model(cls, n, m, groups, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, (n, 1))
    Y = np.sin(X) + 0.3 * rng.standard_normal((n, 1))
    Z = np.linspace(0, 10, m)[:, None]
    return cls((X, Y), gpflow.kernels.SquaredExponential(lengthscales=1.0), Z, noise_variance=0.1, y_bounds=(-2, 2),
               groups=groups, hyperparameters_public=True)


def _same_release(a, b, rtol=1e-6):
    assert a.rank == b.rank
    np.testing.assert_allclose(b.noise_std, a.noise_std, rtol=rtol)
    xi, _ = sampling.standard_normal(a.rank, 3)  # compare the mean before noise (eigenvector signs may differ)
    before_a, before_b = a.mean[:, 0] - a.noise_factor @ xi, b.mean[:, 0] - b.noise_factor @ xi
    np.testing.assert_allclose(before_b, before_a, rtol=0, atol=rtol * np.max(np.abs(a.mean)))
    cov_a, cov_b = a.noise_factor @ a.noise_factor.T, b.noise_factor @ b.noise_factor.T
    np.testing.assert_allclose(cov_b, cov_a, rtol=0, atol=rtol * np.max(np.abs(cov_a)))
    assert b.sensitivity == pytest.approx(a.sensitivity, rel=1e-9)
    assert b.neighbours == a.neighbours


def test_chunk_boundaries_fall_between_persons_and_the_chunks_corners_are_the_neighbour_map():
    ids = _persons(300)
    starts = person_starts(ids, ids.size)
    np.testing.assert_array_equal(starts[:-1], np.flatnonzero(np.r_[True, np.diff(ids) != 0]))
    bounds = person_bounds(starts, 10)
    assert bounds[0][0] == 0 and bounds[-1][1] == ids.size
    assert all(a < b == c for (a, b), (c, _) in zip(bounds, bounds[1:] + [(ids.size, 0)]))
    assert all(ids[b - 1] != ids[b] for _, b in bounds[:-1])  # never inside a person
    assert max(b - a for a, b in bounds) <= 10
    assert person_bounds(person_starts([0, 0, 0, 0, 0, 1], 6), 2) == [(0, 5), (5, 6)]  # a person longer than a chunk
    # the chunks' blocks of A, side by side, hold exactly the columns of the in-memory map (in another order)
    persons = ChunkPersons(ids, bounds)
    whole = group_neighbours(ids, ids.size).matrix().toarray()
    blocks = np.zeros((ids.size, persons.count))
    for a, b in bounds:
        block = persons.block(a, b)
        dense = np.eye(b - a) if block is None else block.matrix().toarray()
        blocks[a:b, persons.offset(a):persons.offset(a) + dense.shape[1]] = dense
    assert persons.count == whole.shape[1]
    np.testing.assert_array_equal(np.unique(blocks.T, axis=0), np.unique(whole.T, axis=0))
    assert np.unique(ids, return_counts=True)[1].max() > MAX_CORNER_ROWS  # the bound's columns are exercised


@pytest.mark.parametrize("cls, objective", [(DPGPRFITC, "mse"), (DPSGPR, "mse"), (DPSGPR, "entropy")])
def test_streamed_grouped_release_equals_the_in_memory_grouped_release(cls, objective):
    model = _model(cls, 600, 16, _persons(600))
    f_mem = model.release_function(epsilon=1.0, delta=1e-3, seed=3, objective=objective)
    f_str = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=3, objective=objective, chunk_size=97)
    _same_release(f_mem.release, f_str.release)
    assert f_str.release.neighbours.startswith("person")
    # a streamed release that ignored the persons (the per-row one) adds far less noise: it would be wrong
    per_row = streaming.release_function(_model(cls, 600, 16, None), epsilon=1.0, delta=1e-3, seed=3,
                                         objective=objective, chunk_size=97)
    assert np.all(f_str.release.noise_std > 2.0 * per_row.release.noise_std)
    assert dp.audit(f_str, model).passed and not dp.audit(per_row, model).passed  # the audit reads the groups


def _classifier(n, m, groups, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, (n, 1))
    Y = np.where(np.sin(X) + 0.5 * rng.standard_normal((n, 1)) > 0.0, 1.0, -1.0)
    return DPSparseLaplaceGPC((X, Y), gpflow.kernels.SquaredExponential(lengthscales=1.0), np.linspace(0, 10, m)[:, None],
                              groups=groups)


@pytest.mark.parametrize("reference", [None, "training"])
def test_the_streamed_grouped_classifier_equals_the_in_memory_one(reference):
    """DPSparseLaplaceGPC with groups= (a person's labels all flip, d = 2 each): the streamed release of its
    first Newton step's SoR weights is the in-memory release (persons of up to 6 rows: corners and the bound)."""
    model = _classifier(600, 12, _persons(600, seed=6))
    ref = None if reference is None else model.data[0].numpy()
    f_mem = model.release(epsilon=1.0, delta=1e-3, seed=3, reference_inputs=ref)
    f_str = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=3, reference_inputs=ref, chunk_size=97)
    assert isinstance(f_str, PrivateSparseClassifier) and f_str.release.classifier_latent
    _same_release(f_mem.release, f_str.release)
    assert f_str.release.neighbours == "person (groups, up to 6 rows)"
    Xq = np.linspace(-1, 11, 30)[:, None]
    # the latent variance with the DP noise (the draws themselves may differ: eigenvector signs)
    np.testing.assert_allclose(f_str.predict_f(Xq)[1], f_mem.predict_f(Xq)[1], rtol=1e-6)
    per_row = streaming.release_function(_classifier(600, 12, None), epsilon=1.0, delta=1e-3, seed=3,
                                         reference_inputs=ref, chunk_size=97)
    assert dp.audit(f_str, model).passed and not dp.audit(per_row, model).passed  # the audit reads the groups


def test_groups_none_and_one_row_per_person_stream_the_per_row_release_bit_for_bit():
    per_row = _model(DPSGPR, 500, 12, None)
    singletons = _model(DPSGPR, 500, 12, np.arange(500)[::-1])
    a = streaming.release_function(per_row, epsilon=1.0, delta=1e-3, seed=3, chunk_size=120).release
    b = streaming.release_function(singletons, epsilon=1.0, delta=1e-3, seed=3, chunk_size=120).release
    for field in ("mean", "noise_std", "noise_factor"):
        np.testing.assert_array_equal(getattr(b, field), getattr(a, field))
    assert a.sensitivity == b.sensitivity and a.neighbours == b.neighbours == "row"  # the measurement's relation


def test_persons_whose_rows_are_not_consecutive_are_refused_in_one_line_before_anything_is_spent():
    ids = _persons(200)
    ids[[10, 150]] = ids[[150, 10]]
    model = _model(DPSGPR, 200, 8, ids)
    accountant = PrivacyAccountant(epsilon=5.0, delta=1e-2)
    with pytest.raises(ValueError, match=r"consecutive.*sort the rows by groups") as info:
        streaming.release_function(model, epsilon=1.0, delta=1e-3, accountant=accountant, chunk_size=50)
    assert "\n" not in str(info.value)
    assert accountant.spent[0] == 0.0


def test_a_given_local_source_is_recut_between_persons():
    ids = _persons(400, seed=4)
    model = _model(DPGPRFITC, 400, 12, ids)
    X, Y = (t.numpy() for t in model.data)
    f_mem = model.release_function(epsilon=1.0, delta=1e-3, seed=3)
    f_str = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=3,
                                       source=LocalChunks(X, Y, 33, groups=ids))  # the source carries its rows' ids
    _same_release(f_mem.release, f_str.release)
    accountant = PrivacyAccountant(epsilon=5.0, delta=1e-2)
    with pytest.raises(ValueError, match="pass groups= to the source"):  # a source without them: refused
        streaming.release_function(model, epsilon=1.0, delta=1e-3, source=LocalChunks(X, Y, 33), accountant=accountant)
    assert accountant.history() == [] and accountant.held == (0.0, 0.0)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [DPGPRFITC, DPSGPR])
def test_the_dask_release_with_groups_equals_the_in_memory_grouped_release(cls):
    da = pytest.importorskip("dask.array")
    distributed = pytest.importorskip("distributed")
    from dpgp_gpflow.distributed import DaskChunks

    model = _model(cls, 800, 16, _persons(800, seed=2))
    X, Y = (t.numpy() for t in model.data)
    f_mem = model.release_function(epsilon=1.0, delta=1e-3, seed=3)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        ids = da.from_array(model.groups, chunks=150)  # the rows' own ids, here as a Dask array
        source = DaskChunks(da.from_array(X, chunks=(150, 1)), da.from_array(Y, chunks=(150, 1)), client=client,
                            groups=ids)
        recut = source.between_persons(person_starts(model.groups, 800))
        assert all(model.groups[b - 1] != model.groups[b] for _, b in recut.chunk_bounds()[:-1])
        f_str = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=3, source=source)
    _same_release(f_mem.release, f_str.release)


def test_many_corner_columns_start_cold_over_all_of_them_and_pass_the_audit(monkeypatch):
    """Above the subsample threshold a row subsample would not give the persons' corner columns: the
    grouped loop starts cold over every corner column and still equals the in-memory release."""
    from dpgp_gpflow.streaming import solver

    monkeypatch.setattr(solver, "COARSE_ROWS", 100)  # 600 rows, ~1000 corner columns: above 3 x 100
    model = _model(DPSGPR, 600, 16, _persons(600, seed=5, largest=4))
    f_mem = model.release_function(epsilon=1.0, delta=1e-3, seed=3)
    stats = {}
    f_str = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=3, chunk_size=64, stats=stats)
    assert "coarse" not in stats and stats["distinct"] > 600
    _same_release(f_mem.release, f_str.release)
    assert dp.audit(f_str, model).passed


def test_a_classifier_built_from_dask_rows_with_groups_streams_the_in_memory_grouped_release():
    """DPSparseLaplaceGPC((X_dask, Y_dask), ..., groups=ids) takes the persons as an in-memory array beside the
    Dask rows (a Dask array of ids is refused before anything else); its streamed release (chunks recut between
    persons) equals the in-memory grouped release, and dp.audit of the grouped model catches the per-row one."""
    da = pytest.importorskip("dask.array")
    model = _classifier(400, 10, _persons(400, seed=7, largest=5))
    X, Y = (t.numpy() for t in model.data)
    Z = model.inducing_variable.Z.numpy()
    Xd, Yd = da.from_array(X, chunks=(90, 1)), da.from_array(Y, chunks=(90, 1))

    def dask_model(groups):
        return DPSparseLaplaceGPC((Xd, Yd), gpflow.kernels.SquaredExponential(lengthscales=1.0), Z, groups=groups)

    with pytest.raises(TypeError, match="in-memory array"):
        dask_model(da.from_array(model.groups, chunks=90))
    dmodel = dask_model(model.groups)
    np.testing.assert_array_equal(dmodel.groups, model.groups)
    accountant = PrivacyAccountant(epsilon=5.0, delta=1e-2)
    f_dask = streaming.release_function(dmodel, epsilon=1.0, delta=1e-3, seed=3, accountant=accountant)
    assert len(accountant.ledger) == 1 and isinstance(f_dask, PrivateSparseClassifier)
    f_mem = model.release(epsilon=1.0, delta=1e-3, seed=3)
    _same_release(f_mem.release, f_dask.release)
    largest = np.unique(model.groups, return_counts=True)[1].max()
    assert largest > 1 and f_dask.release.neighbours == f"person (groups, up to {largest} rows)"
    per_row = streaming.release_function(dask_model(None), epsilon=1.0, delta=1e-3, seed=3)
    assert dp.audit(f_dask, model).passed and not dp.audit(per_row, model).passed  # the audit reads the groups
