"""Streamed sparse releases equal the in-memory ones (same seed) and pass the exact audit."""

from __future__ import annotations

import pickle

import gpflow
import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow import sampling, streaming
from dpgp_gpflow.models import DPGPRFITC, DPSGPR, DPSparseLaplaceGPC, PrivateSparseClassifier



def _model(cls, n, m, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, (n, 1))
    Y = np.sin(X) + 0.3 * rng.standard_normal((n, 1))
    Z = np.linspace(0, 10, m)[:, None]
    return cls((X, Y), gpflow.kernels.SquaredExponential(lengthscales=1.0), Z, noise_variance=0.1, y_bounds=(-2, 2),
               hyperparameters_public=True)  # chosen a priori


def _close(f_mem, f_str, rtol):
    a, b = f_mem.release, f_str.release
    assert a.rank == b.rank
    np.testing.assert_allclose(b.noise_std, a.noise_std, rtol=rtol)
    cov_a, cov_b = a.noise_factor @ a.noise_factor.T, b.noise_factor @ b.noise_factor.T
    np.testing.assert_allclose(cov_b, cov_a, rtol=0, atol=rtol * np.max(np.abs(cov_a)))
    scale = np.max(np.abs(a.mean))
    # the seeded draws xi are equal, but the eigenvectors of the noise covariance (the columns of F)
    # may come out with other signs (LAPACK's convention on a matrix equal up to rounding): compare the
    # mean before noise, and the noise covariance above, which determine the release's distribution
    xi, _ = sampling.standard_normal(a.rank, 3)
    np.testing.assert_allclose(b.mean[:, 0] - b.noise_factor @ xi, a.mean[:, 0] - a.noise_factor @ xi, rtol=0, atol=rtol * scale)
    assert b.sensitivity == pytest.approx(a.sensitivity, rel=1e-9)
    Xq = np.linspace(-1, 11, 50)[:, None]
    p_mem, p_str = f_mem.predict(Xq), streaming.predict(f_str, Xq, chunk_size=7)
    np.testing.assert_allclose(p_str.noise_std, p_mem.noise_std, rtol=rtol)
    np.testing.assert_allclose(p_str.variance, p_mem.variance, rtol=1e-9)


@pytest.mark.parametrize("cls, n, objective", [
    (DPGPRFITC, 1000, "entropy"), (DPGPRFITC, 1000, "mse"), (DPSGPR, 1000, "entropy"), (DPSGPR, 1000, "mse"),
    (DPSGPR, 3000, "mse")])
def test_streamed_release_equals_in_memory_and_passes_the_audit(cls, n, objective):
    model = _model(cls, n, 24)
    f_mem = model.release_function(epsilon=1.0, delta=1e-3, seed=3, objective=objective)
    stats = {}
    f_str = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=3, objective=objective, chunk_size=700,
                                       stats=stats)
    assert stats.get("pivots_exact", True)
    # entropy's noise has (nearly) repeated eigenvalues, whose eigenvectors any rounding may rotate
    # (typically 1e-9 or better; up to 2e-6 seen where rounding of the optimiser path differs)
    _close(f_mem, f_str, 1e-5)
    assert f_str.release.certificate.converged
    assert dp.audit(f_str, model).passed


def test_where_rounding_turns_the_optimiser_onto_another_path_it_reaches_the_same_optimum():
    """FITC at n = 3,000: the in-memory and streamed restricted solves start from inputs equal to
    1e-14, but their inexact (CG) Newton steps amplify that to 1e-4 in the first round's weights, and
    the next rounds spread their violators differently. Both are then certified within tol of the same
    optimum: their objectives (sum of noise variances) agree within the certified gaps; the mean
    before noise (the projection onto the same column space) agrees to rounding; the audit passes."""
    model = _model(DPGPRFITC, 3000, 24)
    f_mem = model.release_function(epsilon=1.0, delta=1e-3, seed=3)
    f_str = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=3, chunk_size=700)
    a, b = f_mem.release, f_str.release
    assert a.rank == b.rank and a.certificate.converged and b.certificate.converged
    gaps = a.certificate.relative_gap + b.certificate.relative_gap
    assert np.sum(b.noise_std**2) == pytest.approx(np.sum(a.noise_std**2), rel=gaps)
    xi, _ = sampling.standard_normal(a.rank, 3)
    before_a, before_b = a.mean[:, 0] - a.noise_factor @ xi, b.mean[:, 0] - b.noise_factor @ xi
    np.testing.assert_allclose(before_b, before_a, rtol=0, atol=1e-9 * np.max(np.abs(before_a)))
    assert dp.audit(f_str, model).passed


def test_streamed_release_is_charged_once_and_refuses_trained_hyperparameters():
    model = _model(DPSGPR, 500, 10)
    with dp.PrivacyAccountant(epsilon=1.5, delta=1e-2) as acc:
        streaming.release_function(model, epsilon=1.0, delta=1e-3, chunk_size=128)
        assert acc.spent[0] == pytest.approx(1.0)
    model.kernel.lengthscales.assign(2.0)
    with pytest.raises(dp.PrivacyLeakError):
        streaming.release_function(model, epsilon=1.0, delta=1e-3)


def test_minibatch_kmeans_inducing_inputs_reads_inputs_only():
    X = np.random.default_rng(1).uniform(0, 1, (5000, 2))
    Z = streaming.minibatch_kmeans_inducing_inputs(X, 20, chunk_size=1000)
    assert Z.shape == (20, 2) and np.all((Z >= 0) & (Z <= 1))
    np.testing.assert_array_equal(Z, streaming.minibatch_kmeans_inducing_inputs(X, 20, chunk_size=1000))


def _classifier(n, m, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, (n, 1))
    Y = np.where(np.sin(X) + 0.5 * rng.standard_normal((n, 1)) > 0.0, 1.0, -1.0)
    return DPSparseLaplaceGPC((X, Y), gpflow.kernels.SquaredExponential(lengthscales=1.0), np.linspace(0, 10, m)[:, None])


@pytest.mark.slow
@pytest.mark.parametrize("reference", [None, "training"])
def test_streamed_sparse_classifier_equals_in_memory_and_passes_the_audit(reference):
    model = _classifier(2000, 15)
    ref = None if reference is None else model.data[0].numpy()
    f_mem = model.release(epsilon=1.0, delta=1e-3, seed=3, reference_inputs=ref)
    f_str = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=3, chunk_size=300, reference_inputs=ref)
    assert isinstance(f_str, PrivateSparseClassifier)
    _close(f_mem, f_str, 1e-6)
    assert dp.audit(f_str, model).passed


def test_streamed_sparse_classifier_columns_are_the_first_newton_step():
    """Against numpy: ``C_w = 1/2 (I + Phi^T Phi / 4)^{-1} Phi^T``, ``Phi = K_XZ L^{-T}`` (GPML / SoR)."""
    model = _classifier(700, 9)
    X, Z = model.data[0].numpy(), model.inducing_variable.Z.numpy()
    k = lambda A, B: np.exp(-0.5 * (A - B.T) ** 2)  # noqa: E731 - unit variance, lengthscale 1
    L = np.linalg.cholesky(k(Z, Z) + gpflow.config.default_jitter() * np.eye(9))
    Phi = np.linalg.solve(L, k(Z, X)).T
    Cw = 0.5 * np.linalg.solve(np.eye(9) + Phi.T @ Phi / 4.0, Phi.T)
    cmap = streaming.streamed_map(model, chunk_size=200)
    got = np.concatenate([cmap.terms.columns(X[i:i + 200], cmap.factors).numpy() for i in range(0, 700, 200)], axis=1)
    np.testing.assert_allclose(got, Cw, rtol=1e-9, atol=1e-12 * np.abs(Cw).max())


def test_streamed_labels_that_are_not_plus_or_minus_one_raise_on_their_chunk_and_spend_nothing():
    model = _classifier(600, 8)
    X, Y = (t.numpy() for t in model.data)
    bad = Y.copy()
    bad[450] = 0.0
    with dp.PrivacyAccountant(epsilon=2.0, delta=1e-2) as acc:
        with pytest.raises(ValueError, match="labels must be -1 or \\+1"):
            streaming.release_function(model, epsilon=1.0, delta=1e-3, source=streaming.LocalChunks(X, bad, 100))
        assert acc.spent[0] == 0.0


@pytest.mark.parametrize("cls", [DPGPRFITC, DPSGPR, DPSparseLaplaceGPC])
def test_chunk_terms_pickle_through_their_specifications(cls):
    """Dask workers in other processes rebuild exactly the same public pieces."""
    model = _classifier(300, 8) if cls is DPSparseLaplaceGPC else _model(cls, 300, 8)
    cmap = streaming.streamed_map(model, chunk_size=100)
    again = pickle.loads(pickle.dumps(cmap.terms))
    X = model.data[0].numpy()[:50]
    np.testing.assert_array_equal(again.columns(X, cmap.factors).numpy(), cmap.terms.columns(X, cmap.factors).numpy())


def test_a_large_stream_grows_its_working_set_on_a_subsample_and_certifies_over_every_row(monkeypatch):
    """Above COARSE_FACTOR * COARSE_ROWS rows the optimiser starts from a public subsample's solution;
    the certificate is still over every row (its gap bounds the excess over the optimum), so the noise
    is within tol of the in-memory optimum's."""
    from dpgp_gpflow.streaming import solver

    monkeypatch.setattr(solver, "COARSE_ROWS", 400)
    model = _model(DPSGPR, 3000, 24)
    f_mem = model.release_function(epsilon=1.0, delta=1e-3, seed=3)
    stats = {}
    f_str = streaming.release_function(model, epsilon=1.0, delta=1e-3, seed=3, chunk_size=700, stats=stats)
    assert stats["coarse"]["rounds"] >= 1  # the subsample was solved first
    cert = f_str.release.certificate
    assert cert.converged and cert.relative_gap <= cert.tol
    a, b = f_mem.release, f_str.release
    assert a.rank == b.rank
    # both within tol (relative duality gap) of the same optimum: the traces agree to about 2 tol
    assert np.sum(b.noise_std**2) == pytest.approx(np.sum(a.noise_std**2), rel=2 * cert.tol)
    assert dp.audit(f_str, model).passed


@pytest.mark.parametrize("dtype", [bool, complex, str, object])
def test_a_local_chunk_source_refuses_outputs_that_are_not_real_numbers_before_anything_is_spent(dtype):
    """issue 29: LocalChunks took bool, complex (imaginary part dropped) and string outputs and the
    streamed release charged them; the in-memory models refuse them. Same rule, same refusal, nothing spent."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 1.0, (40, 1))
    Y = np.ones((40, 1)).astype(dtype)
    with pytest.raises(TypeError, match="Y must hold real numbers"):
        streaming.LocalChunks(X, Y, chunk_size=10)
    with pytest.raises(TypeError, match="X must hold real numbers"):
        streaming.LocalChunks(X.astype(complex), np.zeros((40, 1)), chunk_size=10)
