"""The model contract: every model meets it, and a model defined only here gets release,
release_function, selection and the exact audit by meeting it (no change to the package)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import gpflow
import numpy as np
import pytest
import tensorflow as tf

import dpgp_gpflow as dp
from dpgp_gpflow import pipeline
from dpgp_gpflow.contract import FactoredPrivateModel, PrivateModel, PublicReadout, ReleaseTerms
from dpgp_gpflow.models import DPGPR, DPGPRFITC, DPLaplaceGPC, DPSparseLaplaceGPC, FactoredModelMixin, PrivateModelMixin
from dpgp_gpflow.models.base import prepare_private_data, public_constant_mean
from dpgp_gpflow.selection import select_hyperparameters

from reference import k_se

sys.path.insert(0, str(Path(__file__).resolve().parent / "audits"))
import auditing  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")

VAR, LS, LO, HI = 1.5, 1.3, -3.0, 3.0


def se():
    return gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=LS)


def data(n=25, k=7, seed=0, labels=False):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 6.0, (n, 1))
    Y = np.where(np.sin(X) > 0, 1.0, -1.0) if labels else np.sin(X) + 0.3 * rng.standard_normal((n, 1))
    return X, Y, rng.uniform(0.0, 6.0, (k, 1))


# ---------------------------------------------------------------------------------------------
# Independent NumPy references of each model's cloaking matrix


def ref_gpr(X, Xnew, noise):
    return np.linalg.solve(k_se(X, X, VAR, LS) + noise * np.eye(len(X)), k_se(X, Xnew, VAR, LS)).T


def ref_fitc(X, Z, Xnew, noise, jitter):
    Kuu = k_se(Z, Z, VAR, LS) + jitter * np.eye(len(Z))
    Kuf, Kus = k_se(Z, X, VAR, LS), k_se(Z, Xnew, VAR, LS)
    Qff_diag = np.sum(Kuf * np.linalg.solve(Kuu, Kuf), axis=0)
    lam = VAR - Qff_diag + noise  # FITC's diagonal
    Sigma = Kuu + (Kuf / lam) @ Kuf.T  # posterior precision of u times Kuu
    return Kus.T @ np.linalg.solve(Sigma, Kuf / lam)  # K_*u (Kuu + Kuf Lam^-1 Kfu)^-1 Kuf Lam^-1


def ref_sor_classifier(X, Z, Xnew, jitter):
    Lmm = np.linalg.cholesky(k_se(Z, Z, VAR, LS) + jitter * np.eye(len(Z)))
    Phi = np.linalg.solve(Lmm, k_se(Z, X, VAR, LS)).T
    Phi_new = np.linalg.solve(Lmm, k_se(Z, Xnew, VAR, LS)).T
    C_w = 0.5 * np.linalg.solve(np.eye(len(Z)) + Phi.T @ Phi / 4.0, Phi.T)
    return Phi_new @ C_w


def test_cloaking_matrix_of_every_model_kind_against_numpy():
    X, Y, Xnew = data()
    _, L, _ = data(labels=True)
    Z = np.linspace(0.5, 5.5, 6)[:, None]
    jitter = gpflow.config.default_jitter()
    cases = [
        (DPGPR((X, Y), se(), y_bounds=(LO, HI), noise_variance=0.2), ref_gpr(X, Xnew, 0.2)),
        (DPGPRFITC((X, Y), se(), Z, noise_variance=0.2, y_bounds=(LO, HI)), ref_fitc(X, Z, Xnew, 0.2, jitter)),
        # the classifiers: the latent mean at Xnew after the first Newton step from 0, 2 K_*f (K + 4 I)^-1
        (DPLaplaceGPC((X, L), se()), 2.0 * ref_gpr(X, Xnew, 4.0)),
        (DPSparseLaplaceGPC((X, L), se(), Z), ref_sor_classifier(X, Z, Xnew, jitter)),
    ]
    for model, ref in cases:
        assert isinstance(model, PrivateModel)
        C = dp.cloaking_matrix(model, Xnew).numpy()
        assert C.shape == (len(Xnew), len(X))
        np.testing.assert_allclose(C, ref, rtol=1e-7, atol=1e-10 * np.abs(ref).max(), err_msg=type(model).__name__)
    assert isinstance(cases[1][0], FactoredPrivateModel) and isinstance(cases[3][0], FactoredPrivateModel)
    assert not isinstance(cases[0][0], FactoredPrivateModel)


def test_split_terms_are_the_model_trained_on_the_split():
    X, Y, _ = data(n=20)
    model = DPGPR((X, Y), se(), y_bounds=(LO, HI), noise_variance=0.3)
    train, test = np.arange(0, 20, 2), np.arange(1, 20, 2)
    terms = model.split_terms(train, test)
    np.testing.assert_allclose(terms.map.numpy(), ref_gpr(X[train], X[test], 0.3), rtol=1e-8)
    np.testing.assert_array_equal(terms.offset.numpy(), 0.0)


# ---------------------------------------------------------------------------------------------
# A model defined only in this test: GPR with fixed, public per-point noise variances


class HeteroscedasticGPR(PrivateModelMixin, gpflow.Module):
    """``y_i = f(x_i) + e_i``, ``e_i ~ N(0, s_i)`` with public ``s_i``: ``C = K_*f (K + diag(s))^-1``."""

    def __init__(self, data, kernel, noise_variances, y_bounds):
        super().__init__()
        X, Y, bounds, d = prepare_private_data(data, y_bounds, None)
        self.data = (tf.constant(X), tf.constant(Y))
        self.kernel = kernel
        self.noise_variances = tf.constant(np.asarray(noise_variances, dtype=np.float64))
        self.mean_function = public_constant_mean(bounds)
        self.y_bounds, self.data_sensitivity = bounds, d

    def _solve(self, X, noise, Xnew):
        L = tf.linalg.cholesky(self.kernel(X) + tf.linalg.diag(noise))
        A = tf.linalg.triangular_solve(L, self.kernel(X, Xnew))
        C = tf.transpose(tf.linalg.triangular_solve(L, A, adjoint=True))
        return C, self.kernel(Xnew, full_cov=False) - tf.reduce_sum(A * A, axis=0)

    def release_terms(self, Xnew):
        C, variance = self._solve(self.data[0], self.noise_variances, Xnew)
        return ReleaseTerms(C, self.mean_function(Xnew)[:, 0], variance)

    def split_terms(self, train, test):
        X = self.data[0]
        C, _ = self._solve(tf.gather(X, train), tf.gather(self.noise_variances, train), tf.gather(X, test))
        return ReleaseTerms(C, tf.zeros([len(test)], dtype=tf.float64))


class WeightReadout:
    """Frozen readout of the representer weights: ``f(x) = m + k(x, X) alpha``."""

    def __init__(self, kernel, X, noise, mean):
        self._kernel, self._X, self._mean = gpflow.utilities.freeze(kernel), tf.constant(X), float(mean)
        self._L = tf.linalg.cholesky(self._kernel(self._X) + tf.linalg.diag(noise))
        self.input_dim = int(X.shape[1])

    def readout(self, Xnew):
        return self._kernel(Xnew, self._X)

    def offset(self, Xnew):
        return tf.fill([tf.shape(Xnew)[0]], tf.constant(self._mean, dtype=tf.float64))

    def variance(self, Xnew):
        A = tf.linalg.triangular_solve(self._L, self._kernel(self._X, Xnew))
        return self._kernel(Xnew, full_cov=False) - tf.reduce_sum(A * A, axis=0)


class FactoredHeteroscedasticGPR(FactoredModelMixin, HeteroscedasticGPR):
    """The same model releasing its n representer weights ``alpha = (K + diag(s))^-1 y_c`` once."""

    def latent_terms(self):
        X = self.data[0]
        L = tf.linalg.cholesky(self.kernel(X) + tf.linalg.diag(self.noise_variances))
        B = tf.linalg.cholesky_solve(L, tf.eye(int(X.shape[0]), dtype=tf.float64))
        return ReleaseTerms(B, tf.zeros([int(X.shape[0])], dtype=tf.float64))

    def public_readout(self):
        X = self.data[0]
        return WeightReadout(self.kernel, X, self.noise_variances, float(self.mean_function.c.numpy()[0]))


def hetero(cls=HeteroscedasticGPR, seed=0, Y=None):
    X, Y0, Xnew = data(n=18, seed=seed)
    noise = np.linspace(0.1, 0.6, len(X))
    return cls((X, Y0 if Y is None else Y), se(), noise, (LO, HI)), X, Y0, Xnew, noise


def test_user_model_meets_the_contract_and_releases():
    model, X, Y, Xnew, noise = hetero()
    assert isinstance(model, PrivateModel) and not isinstance(model, FactoredPrivateModel)
    ref = np.linalg.solve(k_se(X, X, VAR, LS) + np.diag(noise), k_se(X, Xnew, VAR, LS)).T
    np.testing.assert_allclose(dp.cloaking_matrix(model, Xnew).numpy(), ref, rtol=1e-8)
    rel = model.release(Xnew, epsilon=1.0, delta=1e-3, seed=3).unclipped()  # the raw DP mean (default: clipped)
    assert rel.mean.shape == (len(Xnew), 1) and rel.y_bounds == (LO, HI)
    # exact audit over every neighbour from the published noise factor and the independent C
    result = auditing.audit_exact(rel, np.zeros((0, len(Xnew))), C_ref=ref)
    assert result.passed, result.failures
    # and a measured neighbour (same seed: the released vectors differ by exactly the mean shift)
    Y2 = Y.copy()
    Y2[4, 0] = HI
    rel2 = hetero(Y=Y2)[0].release(Xnew, epsilon=1.0, delta=1e-3, seed=3).unclipped()
    shift = auditing.audit_exact(rel, (rel2.mean - rel.mean).T)  # [1, k]
    assert shift.passed, shift.failures
    # the same call through the function entry point gives the same release
    again = pipeline.release(model, Xnew, epsilon=1.0, delta=1e-3, seed=3)
    np.testing.assert_array_equal(again.unclipped().mean, rel.mean)


def test_user_model_release_function_where_it_factors():
    model, X, Y, Xnew, noise = hetero(FactoredHeteroscedasticGPR)
    assert isinstance(model, FactoredPrivateModel)
    # release_terms from the factors equals the dense map of the unfactored model
    dense = hetero()[0].release_terms(tf.constant(Xnew))
    terms = model.release_terms(tf.constant(Xnew))
    np.testing.assert_allclose((terms.map[0] @ terms.map[1]).numpy(), dense.map.numpy(), rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(terms.variance.numpy(), dense.variance.numpy(), rtol=1e-8)
    pf = model.release_function(epsilon=1.0, delta=1e-3, seed=4, reference_inputs=X).unclipped()  # raw predictions
    assert isinstance(pf, dp.PrivateFunction) and isinstance(pf.readout, PublicReadout)
    # predictions are the readout of the released weights (post-processing), anywhere
    R = pf.coordinates.numpy()
    alpha = np.linalg.solve(R, pf.release.mean)
    pred = pf.predict(Xnew)
    np.testing.assert_allclose(pred.mean, 0.0 + k_se(Xnew, X, VAR, LS) @ alpha, rtol=1e-7, atol=1e-9)
    # exact audit of the released coordinates R alpha (map R B)
    B = np.linalg.inv(k_se(X, X, VAR, LS) + np.diag(noise))
    result = auditing.audit_exact(pf.release, np.zeros((0, len(X))), C_ref=R @ B)
    assert result.passed, result.failures


def test_user_model_gets_selection():
    model, X, Y, Xnew, noise = hetero()
    grid = [{".kernel.lengthscales": ell} for ell in (0.3, 1.3, 4.0)]
    with dp.PrivacyAccountant(epsilon=1.0) as acc:
        sel, diag = select_hyperparameters(model, grid, epsilon=0.5, folds=3, seed=1, diagnostics=True)
    assert sel.chosen in grid and acc.spent == pytest.approx((0.5, 0.0))
    assert np.all(np.isfinite(diag.utilities)) and np.all(sel.config_sensitivities > 0)


def test_an_object_that_does_not_meet_the_contract_is_refused():
    class NotAModel:
        y_bounds, data_sensitivity = (0.0, 1.0), 1.0

    for entry in (lambda m: pipeline.release(m, np.zeros((1, 1)), epsilon=1.0, delta=1e-3),
                  lambda m: pipeline.release_function(m, epsilon=1.0, delta=1e-3),
                  lambda m: select_hyperparameters(m, [{}], epsilon=1.0)):
        with pytest.raises(TypeError, match="contract"):
            entry(NotAModel())
    # a regression model without factors has no release_function
    with pytest.raises(TypeError, match="FactoredPrivateModel"):
        pipeline.release_function(hetero()[0], epsilon=1.0, delta=1e-3)


def test_short_reprs_print_no_arrays():
    model, X, Y, Xnew, _ = hetero(FactoredHeteroscedasticGPR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = model.release(Xnew, epsilon=1.0, delta=1e-3, seed=1)
        pf = model.release_function(epsilon=1.0, delta=1e-3, seed=1)
    for obj, name in ((rel, "PrivateRelease"), (pf, "PrivateFunction")):
        text = repr(obj)
        assert text.startswith(name + "(mechanism='cloaking', epsilon=1, delta=0.001")
        assert "bounds=(-3.0, 3.0)" in text and "reproducible=True" in text
        assert "[" not in text and len(text) < 200
