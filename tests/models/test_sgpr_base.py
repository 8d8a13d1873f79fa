"""The sparse regression models' shared contract (:class:`~dpgp_gpflow.models.sgpr_base.DPSGPRBase`),
each test run on both :class:`~dpgp_gpflow.models.DPGPRFITC` and :class:`~dpgp_gpflow.models.DPSGPR`
against their independent NumPy references and GPflow's ``GPRFITC`` / ``SGPR`` (``sparse_cases.py``):
the cloaking map, release once / query anywhere, exact privacy audits recomputed from the releases'
public noise factors, the chunked terms of the streamed release, the leak guard, private selection,
clipping and input checks. What only one model has is in ``test_fitc.py`` and ``test_sgpr.py``.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import gpflow
import numpy as np
import pytest
from reference import mahalanobis_shifts, range_projector

import dpgp_gpflow
from dpgp_gpflow import (
    BudgetExceededError,
    FactoredPrivateModel,
    PrivacyAccountant,
    PrivacyLeakError,
    PrivateRelease,
    PublicReadout,
    streaming,
)
from dpgp_gpflow.models import DPGPR, DPSGPRBase, PrivateFunction, kmeans_inducing_inputs
from dpgp_gpflow.streaming.terms import ChunkTerms

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audits"))
import auditing  # noqa: E402
from sparse_cases import (  # noqa: E402
    DELTA,
    EPS,
    FITC,
    HI,
    K_TEST,
    LO,
    M_INDUCING,
    MID,
    NOISE,
    SGPR,
    VAR,
    VARIANTS,
    D,
    J,
    N,
    checked_R,
    cloaking,
    exact_mu,
    kernel,
    kref,
    make_data,
    make_model,
    neighbour,
    readout,
    seeded_noise,
    shared_problem,
    variance,
)

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")

CASES = [(v, dim) for v in VARIANTS for dim in (1, 2)]


@pytest.fixture(scope="module", params=CASES, ids=[f"{v.name}-{dim}d" for v, dim in CASES])
def problem(request):
    return shared_problem(*request.param)


@pytest.fixture(scope="module", params=VARIANTS, ids=[v.name for v in VARIANTS])
def problem2d(request):
    """One problem per model for the tests that do not depend on the input dimension."""
    return shared_problem(request.param, 2)


@pytest.fixture(params=VARIANTS, ids=[v.name for v in VARIANTS])
def variant(request):
    return request.param


def close_to_reference(got, want, variant, **kw):
    """``got`` equals the reference ``want`` within the model's stated tolerance."""
    np.testing.assert_allclose(got, want, rtol=variant.rtol, atol=variant.atol * np.abs(want).max(), **kw)


# ---------------------------------------------------------------------------------------------
# The cloaking map: the model's identity against GPflow and the NumPy reference


def test_is_the_sparse_base(variant):
    assert issubclass(variant.cls, DPSGPRBase) and issubclass(variant.cls, variant.gpflow_cls)


def test_identity_against_gpflow_and_numpy(problem):
    p, v = problem, problem.variant
    mean_fn = gpflow.functions.Constant(np.array([MID]))
    plain = v.gpflow_cls((p.X, p.Y), kernel(p.dim), p.Z, mean_function=mean_fn, noise_variance=NOISE)
    gp_mean, gp_var = (t.numpy()[:, 0] for t in plain.predict_f(p.Xnew))
    terms = p.model.release_terms(gpflow.utilities.to_default_float(p.Xnew))
    A, B = (t.numpy() for t in terms.map)
    assert A.shape == (K_TEST, M_INDUCING) and B.shape == (M_INDUCING, N) and B.dtype == np.float64
    C = A @ B
    yc = p.model.centred_outputs().numpy()
    np.testing.assert_allclose(yc, p.Y[:, 0] - MID, rtol=0, atol=0)
    # the cloaking map applied to the centred outputs, plus m(Xnew), is GPflow's mean ...
    np.testing.assert_allclose(terms.offset.numpy(), np.full(K_TEST, MID))
    np.testing.assert_allclose(terms.offset.numpy() + C @ yc, gp_mean, rtol=1e-8, atol=1e-12)
    # ... the public variance is GPflow's ...
    np.testing.assert_allclose(terms.variance.numpy(), gp_var, rtol=1e-8, atol=1e-12)
    # ... and both agree with the NumPy formulas (jitter 1e-6 on K_MM as GPflow adds it)
    close_to_reference(C, p.C, v)
    np.testing.assert_allclose(gp_mean, p.C @ (p.Y[:, 0] - MID) + MID, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(gp_var, variance(p.ref, p.Xnew), rtol=1e-7, atol=1e-10)
    # the factors themselves: the latent map B and the readout
    close_to_reference(B, p.ref.B, v)
    close_to_reference(A, readout(p.ref, p.Xnew), v)
    # the DP model predicts exactly as GPflow's model (non-private, for comparison only)
    np.testing.assert_allclose(p.model.predict_f(p.Xnew)[0].numpy()[:, 0], gp_mean, rtol=1e-12)


def test_cloaking_matrix_functions_agree_with_the_reference(problem):
    p = problem
    for C in (dpgp_gpflow.cloaking_matrix(p.model, p.Xnew), dpgp_gpflow.contract.cloaking_matrix(p.model, p.Xnew),
              p.model.cloaking_matrix(p.Xnew)):
        C = C.numpy()
        assert C.shape == (K_TEST, N) and C.dtype == np.float64
        close_to_reference(C, p.C, p.variant)


def test_meets_the_factored_contract(problem2d):
    p = problem2d
    assert isinstance(p.model, FactoredPrivateModel)
    r = p.model.public_readout()
    assert isinstance(r, p.variant.readout_cls) and isinstance(r, PublicReadout) and r.input_dim == 2
    latent = p.model.latent_terms()
    assert latent.map.shape == (M_INDUCING, N)
    np.testing.assert_array_equal(latent.offset.numpy(), np.zeros(M_INDUCING))
    assert p.model.input_dim == 2 and p.model.y_bounds == (LO, HI)
    assert p.model.output_bound == pytest.approx(max(HI - MID, MID - LO))


def test_reference_is_neither_the_other_sparse_model_nor_the_full_gp(problem):
    """Guard against a vacuous reference: with 6 inducing inputs the model's map differs from the full
    GP's and from the other sparse model's, and ``Lambda = diag(K - Q_NN)`` is not negligible."""
    p = problem
    full = DPGPR((p.X, p.Y), kernel(p.dim), y_bounds=(LO, HI), noise_variance=NOISE, hyperparameters_public=True)
    Cf = full.cloaking_matrix(p.Xnew).numpy()
    assert np.abs(Cf - p.C).max() > 1e-2 * np.abs(Cf).max()
    other = make_model(SGPR if p.variant is FITC else FITC, p.X, p.Y, p.Z, p.dim)
    Co = other.cloaking_matrix(p.Xnew).numpy()
    assert np.abs(Co - p.C).max() > 1e-2 * np.abs(p.C).max()
    assert np.max(p.ref.Lam) > 1e-3  # the approximation matters here


def test_split_terms_are_the_model_on_the_training_subset(problem2d):
    """What cross-validation reads: the centred predictions of the model trained on ``train`` at ``test``."""
    p, v = problem2d, problem2d.variant
    rng = np.random.default_rng(0)
    perm = rng.permutation(N)
    train, test = np.sort(perm[:27]), np.sort(perm[27:])
    terms = p.model.split_terms(train, test)
    A, B = (t.numpy() for t in terms.map)
    assert A.shape == (len(test), M_INDUCING) and B.shape == (M_INDUCING, len(train))
    np.testing.assert_array_equal(terms.offset.numpy(), np.zeros(len(test)))
    sub = v.reference(kref(2), p.X[train], p.Z, NOISE)
    close_to_reference(A @ B, cloaking(sub, p.X[test]), v)
    plain = v.gpflow_cls((p.X[train], p.Y[train]), kernel(2), p.Z,
                         mean_function=gpflow.functions.Constant(np.array([MID])), noise_variance=NOISE)
    np.testing.assert_allclose(A @ B @ (p.Y[train, 0] - MID) + MID, plain.predict_f(p.X[test])[0].numpy()[:, 0],
                               rtol=1e-8, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# The chunked terms (what a streamed release computes chunk by chunk)


def test_chunk_terms_give_the_latent_map_by_columns(problem):
    """``chunk_terms()`` is the model's own kind; with the factors from the chunk sums, its columns are
    the reference latent map ``B`` (no reference coordinates) and ``R B`` with the checked ``R`` at the
    training inputs; ``transformed_columns`` is ``T R B``; the readout predicts as the model's."""
    p, v = problem, problem.variant
    terms = p.model.chunk_terms()
    assert type(terms) is v.chunk_terms_cls and ChunkTerms.from_model(p.model).Z.shape == (M_INDUCING, p.dim)
    chunks = [slice(i, i + 15) for i in range(0, N, 15)]
    latent = streaming.streamed_map(p.model, chunk_size=15, reference_inputs=False)
    assert latent.factors.R is None
    close_to_reference(np.hstack([latent.terms.columns(p.X[c], latent.factors).numpy() for c in chunks]), p.ref.B, v)
    cmap = streaming.streamed_map(p.model, chunk_size=15)
    R = checked_R(SimpleNamespace(coordinates=cmap.factors.R), p.ref, p.X)
    RB = R @ p.ref.B
    cols = np.hstack([cmap.terms.columns(p.X[c], cmap.factors).numpy() for c in chunks])
    close_to_reference(cols, RB, v)
    T = np.random.default_rng(0).standard_normal((3, M_INDUCING))
    got = np.hstack([cmap.terms.transformed_columns(p.X[c], cmap.factors, T).numpy() for c in chunks])
    np.testing.assert_allclose(got, T @ cols, rtol=1e-8, atol=1e-10 * np.abs(T @ cols).max())
    ours, streamed = p.model.public_readout(), cmap.terms.readout(cmap.factors)
    assert type(streamed) is v.readout_cls
    np.testing.assert_allclose(streamed.readout(p.Xnew).numpy(), ours.readout(p.Xnew).numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(streamed.variance(p.Xnew).numpy(), variance(p.ref, p.Xnew), rtol=1e-7, atol=1e-10)


def test_models_without_chunk_terms_are_refused_by_streaming():
    X, Y, _ = make_data(12, 1, seed=8)
    full = DPGPR((X, Y), kernel(1), y_bounds=(LO, HI), noise_variance=NOISE, hyperparameters_public=True)
    with pytest.raises(TypeError, match="chunk_terms.*DPGPR"):
        ChunkTerms.from_model(full)


# ---------------------------------------------------------------------------------------------
# Release once, query anywhere


def test_release_function_noise_equals_release_at_known_points(problem):
    """Entropy is invariant under the readout (log det of A M A^T on range(A)), so with k >= m the
    released function's noise at Xnew equals that of a release made for Xnew."""
    p = problem
    kw = dict(epsilon=EPS, delta=DELTA, objective="entropy", rtol=0.0, seed=5)
    pf = p.model.release_function(**kw)
    rel = p.model.release(p.Xnew, **kw)
    assert isinstance(pf, PrivateFunction) and isinstance(pf.release, PrivateRelease)
    assert pf.release.rank == rel.rank == M_INDUCING
    pred = pf.predict(p.Xnew)
    np.testing.assert_allclose(pred.noise_std, rel.noise_std, rtol=1e-8)
    assert (pf.epsilon, pf.delta) == (EPS, DELTA)


def test_predictions_spend_nothing(problem):
    p = problem
    acc = PrivacyAccountant(epsilon=2 * EPS, delta=2 * DELTA)
    pf = p.model.release_function(epsilon=EPS, delta=DELTA, seed=1, accountant=acc)
    assert len(acc.ledger) == 1 and acc.spent == (EPS, DELTA)
    event = acc.ledger[0]
    assert event.kind == "gaussian" and event.mu == pytest.approx(1.0 / pf.release.noise_multiplier)
    rng = np.random.default_rng(0)
    with acc:  # even inside the accountant's context, predictions are post-processing
        for k in (1, 3, 50, 200):
            for _ in range(5):
                pred = pf.predict(rng.uniform(-5.0, 15.0, (k, p.dim)))
                assert pred.mean.shape == pred.variance.shape == pred.noise_std.shape == (k, 1)
                assert np.all(np.isfinite(pred.mean)) and np.all(pred.noise_std >= 0)
    assert len(acc.ledger) == 1 and acc.spent == (EPS, DELTA)
    # the release itself is charged and budget-checked like any other
    p.model.release_function(epsilon=EPS, delta=DELTA, seed=2, accountant=acc)
    assert len(acc.ledger) == 2
    with pytest.raises(BudgetExceededError):
        p.model.release_function(epsilon=EPS, delta=DELTA, seed=3, accountant=acc)
    assert len(acc.ledger) == 2


def test_predict_variance_equals_gpflow(problem):
    p = problem
    pf = p.model.release_function(epsilon=EPS, delta=DELTA, seed=1)
    Xq = np.random.default_rng(1).uniform(-3.0, 13.0, (40, p.dim))
    pred = pf.predict(Xq)
    np.testing.assert_allclose(pred.variance, p.model.predict_f(Xq)[1].numpy(), rtol=1e-9, atol=1e-12)  # [k, 1]
    np.testing.assert_allclose(pred.variance[:, 0], variance(p.ref, Xq), rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("objective", ["mse", "entropy"])
def test_predict_mean_is_readout_of_released_values_and_neighbour_shift_is_audited(problem, objective):
    """predict's mean = m(x) + A(x) R^{-1} v~ (v~: the released latent coordinates). Two
    neighbouring datasets, same seed: the predictions move by A R^{-1} P_F R B d e_j, a vector in the
    span of the noise factor mapped through the readout, whose Mahalanobis size is within the
    release's claim: the exact audit applies to every prediction."""
    p = problem
    kw = dict(epsilon=EPS, delta=DELTA, objective=objective, seed=11)
    pf1 = p.model.release_function(**kw).unclipped()  # the raw DP predictions (default: clipped)
    pf2 = make_model(p.variant, p.X, neighbour(p.Y), p.Z, p.dim).release_function(**kw).unclipped()
    np.testing.assert_array_equal(pf1.release.noise_factor, pf2.release.noise_factor)  # public only
    R = checked_R(pf1, p.ref, p.X)
    Xq = np.random.default_rng(2).uniform(-2.0, 12.0, (30, p.dim))
    A = readout(p.ref, Xq) @ np.linalg.inv(R)  # [k, m]: released coordinates -> predictions
    pred1, pred2 = pf1.predict(Xq), pf2.predict(Xq)
    np.testing.assert_allclose(pred1.mean, MID + A @ pf1.release.mean, rtol=1e-9, atol=1e-10)
    G = A @ pf1.release.noise_factor  # the noise factor of the predictions
    np.testing.assert_allclose(pred1.noise_std[:, 0], np.linalg.norm(G, axis=1), rtol=1e-9)
    shift = (pred2.mean - pred1.mean)[:, 0]
    F = pf1.release.noise_factor
    expected = A @ range_projector(F) @ (R @ p.ref.B[:, J]) * D
    np.testing.assert_allclose(shift, expected, rtol=1e-6, atol=1e-9 * np.abs(expected).max())
    if pf1.release.rank == M_INDUCING:  # nothing projected away: the model's full shift
        np.testing.assert_allclose(shift, D * cloaking(p.ref, Xq)[:, J], rtol=1e-6, atol=1e-9 * np.abs(shift).max())
    P_G = range_projector(G)
    assert np.linalg.norm(shift - P_G @ shift) <= 1e-8 * np.linalg.norm(shift)
    mu = float(mahalanobis_shifts(G, shift[:, None])[0])
    assert mu <= (1.0 / pf1.release.noise_multiplier) * (1 + 1e-6)


def test_training_after_a_release_changes_nothing_published(problem):
    p = problem
    model = make_model(p.variant, p.X, p.Y, p.Z, p.dim)
    pf = model.release_function(epsilon=EPS, delta=DELTA, seed=11)
    Xq = np.random.default_rng(2).uniform(-2.0, 12.0, (30, p.dim))
    before = pf.predict(Xq)
    gpflow.optimizers.Scipy().minimize(model.training_loss, model.trainable_variables, options=dict(maxiter=5))
    assert np.abs(model.kernel.variance.numpy() - VAR) > 1e-6  # the hyperparameters did move
    after = pf.predict(Xq)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)


def test_mse_reference_inputs_minimise_the_error_there(problem):
    """objective="mse" with public reference inputs Xq minimises the total noise variance at Xq
    (at full rank m): no other feasible covariance does better there, e.g. entropy's or the
    default mse release (reference = training inputs)."""
    p = problem
    Xq = np.random.default_rng(3).uniform(0.0, 10.0, (30, p.dim))
    kw = dict(epsilon=EPS, delta=DELTA, rtol=1e-7, seed=0)  # the smallest rtol "mse" accepts
    at_q = p.model.release_function(objective="mse", reference_inputs=Xq, **kw)
    at_x = p.model.release_function(objective="mse", **kw)
    ent = p.model.release_function(objective="entropy", **kw)
    assert at_q.release.certificate.converged
    assert at_q.release.rank == at_x.release.rank == ent.release.rank == M_INDUCING
    total = {name: np.sum(f.predict(Xq).noise_std ** 2) for name, f in
             dict(at_q=at_q, at_x=at_x, ent=ent).items()}
    assert total["at_q"] <= total["at_x"] * (1 + 1e-5)
    assert total["at_q"] <= total["ent"] * (1 + 1e-5)
    # ... and entropy's noise does not depend on the reference inputs (invariance)
    ent_q = p.model.release_function(objective="entropy", reference_inputs=Xq, **kw)
    np.testing.assert_allclose(ent_q.predict(Xq).noise_std, ent.predict(Xq).noise_std, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Exact audits (docs/privacy_model.md#audits)


@pytest.mark.parametrize("objective", ["mse", "entropy"])
def test_exact_audit_release_at_known_points(problem, objective):
    p = problem
    rel = p.model.release(p.Xnew, epsilon=EPS, delta=DELTA, objective=objective, seed=4).unclipped()  # raw DP mean
    mu = exact_mu(rel.noise_factor, p.C, D, rel.noise_multiplier, EPS, DELTA)
    assert mu == pytest.approx(1.0 / rel.noise_multiplier, rel=1e-5)  # tight: a neighbour on the boundary
    result = auditing.audit_exact(rel, D * p.C.T, C_ref=p.C)
    assert result.passed, result.failures
    # the released mean lies in range(F): nothing is published without noise
    P = range_projector(rel.noise_factor)
    centred = rel.mean - MID
    assert np.linalg.norm(centred - P @ centred) <= 1e-9 * np.linalg.norm(centred)
    np.testing.assert_allclose(rel.variance[:, 0], variance(p.ref, p.Xnew), rtol=1e-7, atol=1e-10)
    # the noise-free part of the release is the projected mean of the model
    clean = rel.mean[:, 0] - seeded_noise(rel, 4)
    np.testing.assert_allclose(clean, P @ p.C @ (p.Y[:, 0] - MID) + MID, rtol=0, atol=1e-8 * D)


def test_exact_audit_release_with_measured_shifts(problem):
    """Black-box shifts (same seed, one output moved from LO to HI) through the shared audit."""
    p = problem

    def release_mean(y):
        model = make_model(p.variant, p.X, y[:, None], p.Z, p.dim)
        return model.release(p.Xnew, epsilon=EPS, delta=DELTA, objective="entropy", seed=21).unclipped().mean

    shifts, base = auditing.measured_shifts(release_mean, p.Y[:, 0], [J, 17, 30], (LO, HI))
    rel = make_model(p.variant, p.X, base[:, None], p.Z, p.dim).release(
        p.Xnew, epsilon=EPS, delta=DELTA, objective="entropy", seed=21).unclipped()
    result = auditing.audit_exact(rel, shifts, C_ref=p.C)
    assert result.passed, result.failures
    assert result.mu == pytest.approx(1.0 / rel.noise_multiplier, rel=1e-5)


@pytest.mark.parametrize("objective", ["mse", "entropy"])
def test_exact_audit_release_function(problem, objective):
    """In released coordinates (C = R B) and through the readout at k >= m query points (the same mu:
    an injective linear map preserves Mahalanobis norms on its range); at k < m points the
    predictions (post-processing) can only be more private."""
    p = problem
    pf = p.model.release_function(epsilon=EPS, delta=DELTA, objective=objective, seed=6)
    assert isinstance(pf, PrivateFunction) and isinstance(pf.release, PrivateRelease)
    rel = pf.release
    R = checked_R(pf, p.ref, p.X)  # default reference inputs: the training inputs
    mu = exact_mu(rel.noise_factor, R @ p.ref.B, D, rel.noise_multiplier, EPS, DELTA)
    assert mu == pytest.approx(1.0 / rel.noise_multiplier, rel=1e-5)
    result = auditing.audit_exact(rel, np.zeros((0, M_INDUCING)), C_ref=R @ p.ref.B)
    assert result.passed, result.failures
    Rinv = np.linalg.inv(R)
    for k, expect_equal in ((40, True), (3, False)):
        Xq = np.random.default_rng(k).uniform(0.0, 10.0, (k, p.dim))
        G = readout(p.ref, Xq) @ Rinv @ rel.noise_factor
        mu_q = exact_mu(G, cloaking(p.ref, Xq), D, rel.noise_multiplier, EPS, DELTA)
        if expect_equal:
            assert mu_q == pytest.approx(mu, rel=1e-6)
        else:
            assert mu_q <= mu * (1 + 1e-9)
        # the shared audit module agrees
        result = auditing.audit_exact(SimpleNamespace(noise_factor=G, noise_multiplier=rel.noise_multiplier,
                                                      epsilon=EPS, delta=DELTA, data_sensitivity=D),
                                      np.zeros((0, k)), C_ref=cloaking(p.ref, Xq))
        assert result.passed, result.failures


# ---------------------------------------------------------------------------------------------
# Public inducing inputs and the leak guard


def test_inducing_inputs_are_not_trainable(problem2d):
    p = problem2d
    model = make_model(p.variant, p.X, p.Y, p.Z, p.dim)
    assert not model.inducing_variable.Z.trainable
    Zvar_ids = {id(v) for v in model.inducing_variable.trainable_variables}
    assert not Zvar_ids and all(id(v) not in Zvar_ids for v in model.trainable_variables)
    # also when a trainable GPflow InducingPoints object is passed in
    iv = gpflow.inducing_variables.InducingPoints(p.Z.copy())
    assert iv.Z.trainable
    model2 = make_model(p.variant, p.X, p.Y, iv, p.dim)
    assert not model2.inducing_variable.Z.trainable
    np.testing.assert_array_equal(model2.inducing_variable.Z.numpy(), p.Z)
    names = [v.name for v in model2.trainable_variables]
    assert len(model2.trainable_variables) == 3, names  # kernel variance, lengthscales, noise


def test_kmeans_inducing_inputs_read_only_public_inputs(variant):
    params = list(inspect.signature(kmeans_inducing_inputs).parameters)
    assert params[:2] == ["X", "num_inducing"] and not any(n.lower().startswith("y") for n in params)
    X, Y, _ = make_data(N, 2, seed=4)
    Z1 = kmeans_inducing_inputs(X, 5, seed=3)
    Z2 = kmeans_inducing_inputs(X.copy(), 5, seed=3)
    np.testing.assert_array_equal(Z1, Z2)  # deterministic for a seed
    assert Z1.shape == (5, 2) and Z1.dtype == np.float64
    # models on different outputs get the same inducing inputs (they come from X only)
    a = make_model(variant, X, Y, kmeans_inducing_inputs(X, 5, seed=3), 2)
    b = make_model(variant, X, neighbour(Y), kmeans_inducing_inputs(X, 5, seed=3), 2)
    np.testing.assert_array_equal(a.inducing_variable.Z.numpy(), b.inducing_variable.Z.numpy())
    # a k-means fixed point (independent check): every centre is the mean of its points
    label = np.argmin(((X[:, None, :] - Z1[None]) ** 2).sum(-1), axis=1)
    for c in range(5):
        np.testing.assert_allclose(Z1[c], X[label == c].mean(0), rtol=1e-6, atol=1e-8)
    assert len(np.unique(label)) == 5
    # bad numbers of inducing inputs
    X12 = X[:12]
    for bad in (0, 13, -1, 2.5, "3"):
        with pytest.raises(ValueError, match="num_inducing"):
            kmeans_inducing_inputs(X12, bad)
    assert kmeans_inducing_inputs(X12, 12).shape == (12, 2)  # num_inducing = n is allowed


def test_leak_guard_fires_after_training(problem2d):
    p = problem2d
    model = make_model(p.variant, p.X, p.Y, p.Z, p.dim)
    assert not model.private_objective_evaluated
    pf = model.release_function(epsilon=EPS, delta=DELTA, seed=0)  # fine before training
    model.release(p.Xnew, epsilon=EPS, delta=DELTA, seed=0)
    gpflow.optimizers.Scipy().minimize(model.training_loss, model.trainable_variables, options=dict(maxiter=3))
    assert model.private_objective_evaluated
    np.testing.assert_array_equal(model.inducing_variable.Z.numpy(), p.Z)  # Z never fitted
    with pytest.raises(PrivacyLeakError, match="hyperparameters"):
        model.release(p.Xnew, epsilon=EPS, delta=DELTA)
    with pytest.raises(PrivacyLeakError, match="hyperparameters"):
        model.release_function(epsilon=EPS, delta=DELTA)
    # the user may state that the hyperparameters are public
    assert model.release(p.Xnew, epsilon=EPS, delta=DELTA, seed=0, hyperparameters_public=True).rank >= 1
    assert model.release_function(epsilon=EPS, delta=DELTA, seed=0, hyperparameters_public=True).release.rank >= 1
    # the released function made before training is unaffected (it holds only public pieces)
    assert np.all(np.isfinite(pf.predict(p.Xnew).mean))


@pytest.mark.parametrize("variant, objective", [(v, o) for v in VARIANTS for o in v.objectives],
                         ids=[f"{v.name}-{o}" for v in VARIANTS for o in v.objectives])
def test_every_objective_that_reads_the_outputs_arms_the_guard(variant, objective):
    p = shared_problem(variant, 2)
    model = make_model(variant, p.X, p.Y, p.Z, p.dim)
    getattr(model, objective)()  # eagerly, without changing any parameter
    assert model.private_objective_evaluated
    with pytest.raises(PrivacyLeakError):
        model.release(p.Xnew, epsilon=EPS, delta=DELTA)


def test_training_inducing_inputs_on_the_outputs_is_refused(problem2d):
    """A user who re-enables Z and fits it on the private outputs cannot release by default."""
    p = problem2d
    model = make_model(p.variant, p.X, p.Y, p.Z, p.dim)
    gpflow.set_trainable(model.inducing_variable, True)
    # eagerly this time (compile=False): the guard must fire whether or not the loss is traced
    gpflow.optimizers.Scipy().minimize(model.training_loss, model.trainable_variables, compile=False,
                                       options=dict(maxiter=2))
    assert np.abs(model.inducing_variable.Z.numpy() - p.Z).max() > 0  # Z was fitted on y
    for call in (lambda: model.release(p.Xnew, epsilon=EPS, delta=DELTA),
                 lambda: model.release_function(epsilon=EPS, delta=DELTA)):
        with pytest.raises(PrivacyLeakError):
            call()


# ---------------------------------------------------------------------------------------------
# Private selection works unchanged on the contract


def test_select_hyperparameters(problem2d):
    p = problem2d
    model = make_model(p.variant, p.X, p.Y, p.Z, p.dim)
    grid = [{".kernel.lengthscales": [ls, 1.5 * ls]} for ls in (0.5, 1.7, 4.0)]  # ARD: two lengthscales
    before = model.kernel.lengthscales.numpy().copy()
    sel, diag = dpgp_gpflow.selection.select_hyperparameters(model, grid, epsilon=1.0, folds=3, seed=0,
                                                             diagnostics=True)
    assert sel.chosen in grid and 0 <= sel.index < len(grid)
    assert diag.probabilities.sum() == pytest.approx(1.0) and np.all(np.isfinite(diag.utilities))
    np.testing.assert_array_equal(model.kernel.lengthscales.numpy(), before)  # the model is not changed
    sel.apply(model)
    np.testing.assert_allclose(model.kernel.lengthscales.numpy(), sel.chosen[".kernel.lengthscales"])
    assert model.release(p.Xnew, epsilon=EPS, delta=DELTA, seed=0).rank >= 1  # declared public by apply


# ---------------------------------------------------------------------------------------------
# Clipping, sensitivity and bad inputs


def test_outputs_are_clipped_and_sensitivity_defaults_to_the_range(variant):
    X, Y, Xnew = make_data(20, 1, seed=3)
    Y[0, 0], Y[1, 0] = HI + 5.0, LO - 3.0
    Z = X[:4]
    with pytest.warns(dpgp_gpflow.ClippingWarning):
        model = variant.cls((X, Y), kernel(1), Z, noise_variance=NOISE, y_bounds=(LO, HI), hyperparameters_public=True)
    Yc = np.clip(Y, LO, HI)
    np.testing.assert_array_equal(model.data[1].numpy(), Yc)
    np.testing.assert_array_equal(model.centred_outputs().numpy(), Yc[:, 0] - MID)
    assert model.data_sensitivity == D and model.y_bounds == (LO, HI)
    small = variant.cls((X, Yc), kernel(1), Z, noise_variance=NOISE, y_bounds=(LO, HI), data_sensitivity=1.0,
                        hyperparameters_public=True)
    assert small.data_sensitivity == 1.0
    # releases read clipped outputs even after model.data is overwritten with unclipped ones
    model.data = (model.data[0], gpflow.utilities.to_default_float(Y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgp_gpflow.ClippingWarning)
        np.testing.assert_array_equal(model.centred_outputs().numpy(), Yc[:, 0] - MID)


def test_bad_inputs_raise_clear_errors(variant):
    X, Y, Xnew = make_data(12, 2, seed=8)
    Z = X[:4]
    cls = variant.cls
    with pytest.raises(TypeError, match="y_bounds"):
        cls((X, Y), kernel(2), Z, noise_variance=NOISE)
    with pytest.raises(ValueError, match="2 columns"):
        cls((X, Y), kernel(2), Z[:, :1], noise_variance=NOISE, y_bounds=(LO, HI))
    with pytest.raises(ValueError, match="inducing_variable"):
        cls((X, Y), kernel(2), np.full((3, 2), np.nan), noise_variance=NOISE, y_bounds=(LO, HI))
    with pytest.raises(ValueError):
        cls((X, Y), kernel(2), Z, noise_variance=NOISE, y_bounds=(LO, HI), data_sensitivity=2 * D)
    model = cls((X, Y), kernel(2), Z, noise_variance=NOISE, y_bounds=(LO, HI), hyperparameters_public=True)
    pf = model.release_function(epsilon=EPS, delta=DELTA, seed=0)
    with pytest.raises(ValueError, match="2 columns"):
        pf.predict(Xnew[:, :1])
    with pytest.raises(ValueError, match="2 columns"):
        model.release(Xnew[:, :1], epsilon=EPS, delta=DELTA)
    with pytest.raises(ValueError, match="epsilon"):
        model.release_function(epsilon=0.0, delta=DELTA)
    with pytest.raises(ValueError, match="objective"):
        model.release_function(epsilon=EPS, delta=DELTA, objective="logdet")
