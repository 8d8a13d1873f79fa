"""Streamed releases of several outputs per row (``Y`` [N, P], docs/guides/multi_output.md) equal the in-memory
ones (same seed), locally and on Dask, with and without groups; a model built from Dask rows takes in-memory
``groups`` (public person ids beside the rows).

Why the equality is checked at a tight optimiser tolerance (``TOL``): flipping the sign of one output's
entries maps every person's box of changes onto itself, so the noise optimiser's problem is symmetric and
its (unique) optimum has no covariance between outputs. Its columns then come in exact ties (a corner and
its mirror image), which the in-memory and the streamed sums break by rounding; each solve is certified
within its tolerance of the one optimum, and they differ (chiefly in the small cross-output covariance) by
about that tolerance: at the default ``tol`` by up to 1e-3 relative, at ``TOL`` below 1e-6. The default
is checked as the single-output streaming test of another path does: both within their certified gaps of
the same optimum, the mean before noise equal."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import gpflow
import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow import sampling, streaming
from dpgp_gpflow.accounting import PrivacyAccountant
from dpgp_gpflow.models import DPGPRFITC, DPSGPR
from dpgp_gpflow.streaming import LocalChunks

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from sparse_cases import fitc_reference, sgpr_reference  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

#: outputs on different scales: d_p = 4, 20, 1
BOUNDS = np.array([[-2.0, 2.0], [-10.0, 10.0], [0.0, 1.0]])
#: the optimiser's tolerance (relative duality gap) of the releases compared at 1e-6 (module docstring)
TOL = 1e-9


def _rows(n, P, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, (n, 1))
    lo, hi = BOUNDS[:P, 0], BOUNDS[:P, 1]
    Y = (lo + hi) / 2 + 0.5 * (hi - lo) * np.sin(X + np.arange(P)) + 0.1 * (hi - lo) * rng.standard_normal((n, P))
    return X, Y


def _model(cls, X, Y, m=12, groups=None):
    P = Y.shape[1]
    return cls((X, Y), gpflow.kernels.SquaredExponential(lengthscales=1.0), np.linspace(0, 10, m)[:, None],
               noise_variance=0.1, y_bounds=BOUNDS[:P], groups=groups, hyperparameters_public=True)


def _persons(n, seed=1, largest=3):
    """Consecutive persons of 1..largest rows (with P = 2 outputs: up to 6 entries, above MAX_CORNER_ROWS)."""
    sizes = np.random.default_rng(seed).integers(1, largest + 1, n)
    return np.repeat(np.arange(n) * 5 + 2, sizes)[:n]


def _same_release(a, b, rtol=1e-6):
    """The in-memory release ``a`` and the streamed ``b``: the noise (std and covariance), the mean before
    noise (the seeded draws are equal; the noise's eigenvectors may differ in sign), the sensitivity."""
    assert a.rank == b.rank and a.mean.shape == b.mean.shape and a.noise_factor.shape == b.noise_factor.shape
    np.testing.assert_allclose(b.noise_std, a.noise_std, rtol=rtol)
    cov_a, cov_b = a.noise_factor @ a.noise_factor.T, b.noise_factor @ b.noise_factor.T
    np.testing.assert_allclose(cov_b, cov_a, rtol=0, atol=rtol * np.max(np.abs(cov_a)))
    xi, _ = sampling.standard_normal(a.rank, 3)
    stacked = lambda r: r.mean.T.reshape(-1) - r.noise_factor @ xi  # noqa: E731 - output by output
    np.testing.assert_allclose(stacked(b), stacked(a), rtol=0, atol=rtol * np.max(np.abs(a.mean)))
    assert b.sensitivity == pytest.approx(a.sensitivity, rel=1e-9)
    assert b.neighbours == a.neighbours and b.y_bounds == a.y_bounds


def _cross_outputs(release, P):
    """The largest covariance between two outputs' noise, relative to the largest covariance."""
    cov = release.noise_factor @ release.noise_factor.T
    m = cov.shape[0] // P
    return max(np.abs(cov[p * m:(p + 1) * m, q * m:(q + 1) * m]).max() for p in range(P) for q in range(P)
               if p != q) / np.abs(cov).max()


@pytest.mark.parametrize("cls, P, objective", [
    (DPGPRFITC, 2, "mse"), (DPGPRFITC, 3, "entropy"), (DPSGPR, 2, "entropy"), (DPSGPR, 3, "mse")])
def test_the_streamed_release_of_several_outputs_equals_the_in_memory_one(cls, P, objective):
    X, Y = _rows(300, P)
    model = _model(cls, X, Y)
    f_mem = model.release_function(epsilon=1.0, delta=1e-3, seed=3, objective=objective, tol=TOL)
    f_str = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=3, objective=objective, chunk_size=90,
                                       tol=TOL)
    assert f_str.release.mean.shape == (12, P) and f_str.release.neighbours == f"row ({P} outputs)"
    _same_release(f_mem.release, f_str.release)
    assert _cross_outputs(f_mem.release, P) < 1e-5 and _cross_outputs(f_str.release, P) < 1e-5  # the symmetry
    np.testing.assert_allclose(f_str.coordinates.numpy(), f_mem.coordinates.numpy(), rtol=1e-9, atol=1e-12)
    Xq = np.linspace(-1, 11, 20)[:, None]
    p_mem, p_str = f_mem.predict(Xq), streaming.predict(f_str, Xq, chunk_size=7)
    assert p_str.mean.shape == (20, P)
    np.testing.assert_allclose(p_str.noise_std, p_mem.noise_std, rtol=1e-6)
    assert dp.audit(f_str, model).passed


@pytest.mark.parametrize("reference", ["latents", "inputs"])
def test_reference_coordinates_of_several_outputs_stream_as_in_memory(reference):
    X, Y = _rows(300, 2, seed=2)
    model = _model(DPSGPR, X, Y, m=8)
    ref = False if reference == "latents" else np.linspace(0, 10, 15)[:, None]
    if ref is False:  # the in-memory release of the latents themselves
        f_mem = dp.pipeline.release_function(model, epsilon=1.0, delta=1e-3, seed=3, tol=TOL)
    else:
        f_mem = model.release_function(epsilon=1.0, delta=1e-3, seed=3, reference_inputs=ref, tol=TOL)
    f_str = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=3, reference_inputs=ref, chunk_size=70,
                                       tol=TOL)
    assert (f_str.coordinates is None) == (ref is False)
    _same_release(f_mem.release, f_str.release)
    assert dp.audit(f_str, model).passed


def test_the_chunks_columns_are_the_stacked_reference_map():
    """Against NumPy: a chunk's columns of the released map are ``I_P kron (R B[:, chunk])``, output by
    output, with ``B`` the FITC / SGPR reference's and ``R`` the one reference coordinates of every output."""
    X, Y = _rows(90, 2, seed=4)
    for cls, reference in ((DPGPRFITC, fitc_reference), (DPSGPR, sgpr_reference)):
        model = _model(cls, X, Y, m=6)
        Z = model.inducing_variable.Z.numpy()
        B = reference(lambda A, C: np.exp(-0.5 * (A - C.T) ** 2), X, Z, 0.1, kdiag=1.0).B
        cmap = streaming.streamed_map(model, chunk_size=40)
        R = cmap.factors.R.numpy()
        R1 = R[:6, :6]
        np.testing.assert_allclose(R, np.kron(np.eye(2), R1), rtol=0, atol=0)
        for start in (0, 40, 80):
            stop = min(start + 40, 90)
            got = cmap.terms.columns(X[start:stop], cmap.factors).numpy()
            want = np.kron(np.eye(2), R1 @ B[:, start:stop])
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8 * np.abs(want).max())
        y = cmap.terms.centred_outputs(X[:40], Y[:40])  # clipped per output, minus each output's midpoint
        mid = BOUNDS[:2].mean(axis=1)
        np.testing.assert_allclose(y, (np.clip(Y[:40], BOUNDS[:2, 0], BOUNDS[:2, 1]) - mid).T.reshape(-1))


def test_a_chunk_of_another_number_of_output_columns_is_refused_where_it_is_read():
    """The chunk's outputs must hold exactly the model's P columns: one column (or a vector) for P = 2, or three,
    is refused (never broadcast against the per-output bounds); one output takes [c] and [c, 1] alike."""
    X, Y = _rows(30, 2, seed=3)
    terms = _model(DPSGPR, X, Y, m=5).chunk_terms()
    for bad in (Y[:10, :1], Y[:10, 0], np.c_[Y[:10], Y[:10, 0]], Y[:9]):
        with pytest.raises(ValueError, match="output column"):
            terms.centred_outputs(X[:10], bad)
    one = _model(DPSGPR, X, Y[:, :1], m=5).chunk_terms()
    want = np.clip(Y[:10, 0], BOUNDS[0, 0], BOUNDS[0, 1]) - BOUNDS[0].mean()  # NumPy, the one output's bounds
    for good in (Y[:10, :1], Y[:10, 0]):
        np.testing.assert_allclose(one.centred_outputs(X[:10], good), want, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="output column"):
        one.centred_outputs(X[:10], Y[:10])


@pytest.mark.parametrize("cls", [DPGPRFITC, DPSGPR])
def test_several_outputs_of_persons_stream_as_in_memory(cls):
    X, Y = _rows(300, 2, seed=5)
    model = _model(cls, X, Y, m=10, groups=_persons(300))
    f_mem = model.release_function(epsilon=1.0, delta=1e-3, seed=3, tol=TOL)
    f_str = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=3, tol=TOL,
                                       source=LocalChunks(X, Y, 37, groups=model.groups))  # the rows' own ids
    assert f_str.release.neighbours == "person (groups, up to 3 rows of 2 outputs)"
    _same_release(f_mem.release, f_str.release)
    assert dp.audit(f_str, model).passed


def test_at_the_default_tolerance_both_are_certified_within_their_gaps_of_the_same_optimum():
    """The default ``tol``: the symmetric ties may send the two solves along other paths (module docstring);
    both are certified, their objectives (the summed noise variances) agree within the two certified gaps,
    and the mean before noise (the projection onto the same column space) agrees to rounding."""
    X, Y = _rows(400, 3)
    model = _model(DPGPRFITC, X, Y)
    a = model.release_function(epsilon=1.0, delta=1e-3, seed=3).release
    b = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=3, chunk_size=90).release
    assert a.rank == b.rank and a.certificate.converged and b.certificate.converged
    gaps = a.certificate.relative_gap + b.certificate.relative_gap
    assert np.sum(b.noise_std**2) == pytest.approx(np.sum(a.noise_std**2), rel=gaps)
    xi, _ = sampling.standard_normal(a.rank, 3)
    before_a, before_b = (r.mean.T.reshape(-1) - r.noise_factor @ xi for r in (a, b))
    np.testing.assert_allclose(before_b, before_a, rtol=0, atol=1e-9 * np.max(np.abs(before_a)))
    assert dp.audit(streaming.release_function(model, epsilon=1.0, delta=1e-3, chunk_size=90), model).passed


# ---------------------------------------------------------------------------------------------
# Dask rows: several outputs, and groups beside them


def _dask_model(cls, X, Y, chunk, **kw):
    da = pytest.importorskip("dask.array")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _model(cls, da.from_array(X, chunks=(chunk, 1)), da.from_array(Y, chunks=(chunk, Y.shape[1])), **kw)


def test_a_model_of_several_outputs_built_from_dask_rows_releases_as_in_memory():
    X, Y = _rows(300, 3, seed=6)
    model = _model(DPGPRFITC, X, Y)
    dmodel = _dask_model(DPGPRFITC, X, Y, 70)
    assert dmodel.num_outputs == 3 and dmodel.dask_rows[1].shape == (300, 3)
    f_mem = model.release_function(epsilon=1.0, delta=1e-3, seed=3, tol=TOL)
    f_dask = streaming.release_function(dmodel, epsilon=1.0, delta=1e-3, seed=3, tol=TOL)  # Dask's local scheduler
    _same_release(f_mem.release, f_dask.release)
    assert dp.audit(f_dask, model).passed


def test_a_model_built_from_dask_rows_takes_in_memory_groups_and_releases_as_in_memory():
    da = pytest.importorskip("dask.array")
    X, Y = _rows(300, 2, seed=7)
    groups = _persons(300, seed=3)
    model = _model(DPSGPR, X, Y, m=10, groups=groups)
    dmodel = _dask_model(DPSGPR, X, Y, 64, m=10, groups=groups)
    np.testing.assert_array_equal(dmodel.groups, groups)
    f_mem = model.release_function(epsilon=1.0, delta=1e-3, seed=3, tol=TOL)
    f_dask = streaming.release_function(dmodel, epsilon=1.0, delta=1e-3, seed=3, tol=TOL)  # recut between persons
    _same_release(f_mem.release, f_dask.release)
    assert dp.audit(f_dask, model).passed
    with pytest.raises(TypeError, match="in-memory array"):
        _dask_model(DPSGPR, X, Y, 64, groups=da.from_array(groups))
    with pytest.raises(ValueError, match="groups"):
        _dask_model(DPSGPR, X, Y, 64, groups=groups[:-1])
    scattered = groups.copy()
    scattered[[0, -1]] = scattered[[-1, 0]]  # two persons' rows no longer consecutive
    accountant = PrivacyAccountant(epsilon=10.0, delta=0.5)
    with pytest.raises(ValueError, match="consecutive"):
        streaming.release_function(_dask_model(DPSGPR, X, Y, 64, groups=scattered), epsilon=1.0, delta=1e-3,
                                   accountant=accountant)
    assert accountant.spent == (0.0, 0.0) and accountant.held == (0.0, 0.0)


def test_every_source_knows_its_output_columns_and_one_of_another_shape_is_refused_before_reserving():
    """LocalChunks, DaskChunks and OneVsRestChunks carry the outputs' columns per row ([n] and [n, 1]: 1); a source
    of other output or input columns than the model's is refused by streaming.release_function with nothing
    reserved (no ledger entry), in memory and on Dask; Y of three dimensions is refused when the source is built."""
    da = pytest.importorskip("dask.array")
    from dpgp_gpflow.distributed import DaskChunks

    X, Y = _rows(30, 3, seed=8)
    for Ys, P in ((Y[:, 0], 1), (Y[:, :1], 1), (Y[:, :2], 2), (Y, 3)):
        assert LocalChunks(X, Ys, 7).num_outputs == P
        assert DaskChunks(da.from_array(X, chunks=(7, 1)), da.from_array(Ys, chunks=7)).num_outputs == P
        assert streaming.OneVsRestChunks(LocalChunks(X, Ys, 7), 0, 3).num_outputs == P
    with pytest.raises(ValueError, match=r"\[n\] or \[n, P\]"):
        LocalChunks(X, Y[:, :, None], 7)
    model = _model(DPSGPR, X, Y[:, :2], m=5)
    accountant = PrivacyAccountant(epsilon=10.0, delta=0.5)
    sources = [LocalChunks(X, Y[:, :1], 7), LocalChunks(X, Y, 7), LocalChunks(np.c_[X, X], Y[:, :2], 7),
               DaskChunks(da.from_array(X, chunks=(7, 1)), da.from_array(Y[:, 0], chunks=7))]
    for source, match in zip(sources, ["1 output column", "3 output column", "2 input columns", "1 output column"]):
        with pytest.raises(ValueError, match=match):
            streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=1, accountant=accountant,
                                       hyperparameters_public=True, source=source)
    assert accountant.history() == [] and accountant.held == (0.0, 0.0)
