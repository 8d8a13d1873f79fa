"""Several outputs per row on the sparse models (issue 28 item 2, docs/guides/multi_output.md): ``DPSGPR`` and
``DPGPRFITC`` with ``Y`` [N, P] release all P outputs at once, at inputs (``release``) or as latents
(``release_function``), and a neighbour changes all P outputs of one row (with ``groups``: of one person's
rows), output p by at most ``d_p``.

References are independent of the package: the single-output NumPy references of ``sparse_cases`` (LU
solves, one Cholesky factor of ``Q``), stacked output by output here with ``np.kron``, and P separate
single-output GPflow models. The privacy check is a brute force from the definition of the relation: every
corner (both signs) and interior points of every row's (person's) heterogeneous box ``prod_p [-d_p, d_p]``,
measured against the published noise factor (:func:`auditing.audit_exact`).
"""

from __future__ import annotations

import hashlib
import json
import sys
import warnings
from pathlib import Path

import gpflow
import numpy as np
import pytest
from reference import range_projector

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audits"))
import auditing  # noqa: E402
from sparse_cases import (  # noqa: E402
    DELTA,
    EPS,
    FITC,
    HI,
    LO,
    NOISE,
    SGPR,
    VARIANTS,
    cloaking,
    kernel,
    kref,
    readout,
    variance,
)

import dpgp_gpflow as dp  # noqa: E402
from forgery import forged  # noqa: E402
from dpgp_gpflow import streaming  # noqa: E402
from dpgp_gpflow.io.format import ReleaseFileError  # noqa: E402
from dpgp_gpflow.models import kmeans_inducing_inputs  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ReproducibleNoiseWarning")

#: per-output bounds of different scales: d_p = 4, 40, 1
BOUNDS = np.array([[LO, HI], [-20.0, 20.0], [0.0, 1.0]])
M = 5


def outputs_problem(variant, P, n=24, seed=0):
    """Inputs on [0, 10], P outputs on their bounds' scales (some outside: clipped), 7 test inputs, the
    single-output NumPy reference."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 10.0, (n, 1))
    lo, hi = BOUNDS[:P, 0], BOUNDS[:P, 1]
    shape = np.stack([np.sin(X[:, 0] + p) for p in range(P)], axis=1)
    Y = (lo + hi) / 2 + 0.55 * (hi - lo) * shape + 0.05 * (hi - lo) * rng.standard_normal((n, P))
    Z = kmeans_inducing_inputs(X, M, seed=0)
    return X, Y, Z, np.linspace(-0.5, 10.5, 7)[:, None], variant.reference(kref(1), X, Z, NOISE)


def model(variant, X, Y, Z, bounds, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ClippingWarning)
        return variant.cls((X, Y), kernel(1), Z, noise_variance=NOISE, y_bounds=bounds, hyperparameters_public=True,
                           **kw)


def close(got, want, variant):
    np.testing.assert_allclose(got, want, rtol=variant.rtol, atol=variant.atol * np.abs(want).max())


def stacked_audit(release, C, P, d, groups=None, interior=20):
    """Brute force over every row's (person's) heterogeneous box: the entries of row i are ``p n + i``
    (stacked output by output), output p moves within ``[-d_p, d_p]``; the shifts ``(I kron C)_G delta``
    (built here from ``C`` in NumPy) projected onto the published noise span, against the release's claim."""
    n = C.shape[1]
    big = np.kron(np.eye(P), C)
    rows = np.arange(n) if groups is None else np.asarray(groups)
    scaled = big * np.repeat(np.asarray(d) / np.max(d), n)[None, :]  # entry (i, p) moves by d_p
    shifts, _ = auditing.person_shifts(scaled, np.tile(rows, P), float(np.max(d)), interior=interior)
    return auditing.audit_exact(release, shifts @ range_projector(release.noise_factor).T)


def block_coordinates(function, ref, X, P):
    """The released coordinates ``R`` of a P-output function, checked independently: ``I_P kron R_1`` with
    ``R_1`` upper triangular and ``R_1^T R_1 = A^T A + ridge I`` for one output's readout ``A`` at the
    reference inputs ``X`` (the documented ridge ``1e-8 tr(A^T A) / m``). Returns ``R_1``."""
    R = function.coordinates.numpy()
    R1 = R[:M, :M]
    np.testing.assert_allclose(R, np.kron(np.eye(P), R1), rtol=1e-10, atol=1e-12 * np.abs(R1).max())
    A = readout(ref, X)
    G = A.T @ A
    G = G + 1e-8 * np.trace(G) / M * np.eye(M)
    assert np.allclose(np.tril(R1, -1), 0.0)
    np.testing.assert_allclose(R1.T @ R1, G, rtol=1e-8, atol=1e-10 * np.abs(G).max())
    return R1


# ---------------------------------------------------------------------------------------------
# The maps and means against the single-output references, output by output


@pytest.mark.parametrize("P", [2, 3])
@pytest.mark.parametrize("variant", VARIANTS, ids=[v.name for v in VARIANTS])
def test_the_maps_are_the_stacked_single_output_maps_and_give_each_outputs_gpflow_mean(variant, P):
    X, Y, Z, Xs, ref = outputs_problem(variant, P)
    m = model(variant, X, Y, Z, BOUNDS[:P])
    assert m.num_outputs == P and m.output_sensitivities == tuple(BOUNDS[:P, 1] - BOUNDS[:P, 0])
    eye = np.eye(P)
    close(dp.cloaking_matrix(m, Xs).numpy(), np.kron(eye, cloaking(ref, Xs)), variant)
    latent = m.latent_terms()
    close(latent.map.numpy(), np.kron(eye, ref.B), variant)
    np.testing.assert_array_equal(latent.offset.numpy(), np.zeros(M * P))
    readout_ = m.public_readout()
    assert readout_.num_outputs == P
    close(readout_.readout(Xs).numpy(), np.kron(eye, readout(ref, Xs)), variant)
    np.testing.assert_allclose(readout_.variance(Xs).numpy(), np.tile(variance(ref, Xs), P), rtol=1e-7, atol=1e-10)
    mid = BOUNDS[:P].mean(axis=1)
    np.testing.assert_array_equal(readout_.offset(Xs).numpy(), np.repeat(mid, len(Xs)))
    clipped = np.clip(Y, BOUNDS[:P, 0], BOUNDS[:P, 1])
    np.testing.assert_allclose(m.centred_outputs().numpy(), (clipped - mid).T.reshape(-1), rtol=0, atol=1e-12)
    terms = m.release_terms(tf_inputs(Xs))
    mean = terms.offset.numpy() + dp.cloaking_matrix(m, Xs).numpy() @ m.centred_outputs().numpy()
    k = len(Xs)
    for p in range(P):  # output p is rows p k .. (p + 1) k of the stacked release
        alone = variant.gpflow_cls((X, clipped[:, p:p + 1]), kernel(1), Z, noise_variance=NOISE,
                                   mean_function=gpflow.functions.Constant(mid[p:p + 1]))
        f_mean, f_var = (t.numpy()[:, 0] for t in alone.predict_f(Xs))
        np.testing.assert_allclose(mean[p * k:(p + 1) * k], f_mean, rtol=1e-8, atol=1e-9 * np.abs(f_mean).max())
        np.testing.assert_allclose(terms.variance.numpy()[p * k:(p + 1) * k], f_var, rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(f_mean, mid[p] + cloaking(ref, Xs) @ (clipped[:, p] - mid[p]), rtol=1e-6,
                                   atol=1e-8 * np.abs(f_mean).max())


def tf_inputs(X):
    return gpflow.utilities.to_default_float(X)


def test_a_mean_function_of_the_users_is_each_outputs():
    """A public ``Constant`` of P values centres output p with value p, as P single-output models do."""
    P, variant = 2, FITC
    X, Y, Z, Xs, ref = outputs_problem(variant, P, seed=1)
    c = np.array([0.25, -3.0])
    m = model(variant, X, Y, Z, BOUNDS[:P], mean_function=gpflow.functions.Constant(c))
    clipped = np.clip(Y, BOUNDS[:P, 0], BOUNDS[:P, 1])
    np.testing.assert_allclose(m.centred_outputs().numpy(), (clipped - c).T.reshape(-1), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(m.public_readout().offset(Xs).numpy(), np.repeat(c, len(Xs)))
    assert m.output_bound == pytest.approx(np.max(np.maximum(BOUNDS[:P, 1] - c, c - BOUNDS[:P, 0])))
    rel = m.release(Xs, epsilon=200.0, delta=DELTA, seed=1).unclipped()  # the raw DP mean (default: clipped)
    expected = c + cloaking(ref, Xs) @ (clipped - c)  # [k, P]
    assert np.all(np.abs(rel.mean - expected) <= 6.0 * rel.noise_std + rel.bias_bound + 1e-9)


# ---------------------------------------------------------------------------------------------
# Privacy: every corner of every row's (person's) heterogeneous box, at inputs and for the latents


@pytest.mark.parametrize("grouped", [False, True], ids=["rows", "groups"])
@pytest.mark.parametrize("variant", VARIANTS, ids=[v.name for v in VARIANTS])
def test_release_and_release_function_protect_every_corner_of_every_rows_box(variant, grouped):
    """Without groups P = 3 (every row a person of 3 entries); with groups P = 2 and persons of 1 and 2 rows
    (2 and 4 entries: every corner, so the noise is fitted to the worst corner and the audit is tight)."""
    P = 2 if grouped else 3
    X, Y, Z, Xs, ref = outputs_problem(variant, P, seed=2)
    groups = np.repeat(np.arange(24) * 3 + 1, 2)[:24] if grouped else None
    if grouped:
        groups[5] = 1000  # a person of one row among persons of two
    d = BOUNDS[:P, 1] - BOUNDS[:P, 0]
    m = model(variant, X, Y, Z, BOUNDS[:P], groups=groups)
    rel = m.release(Xs, epsilon=EPS, delta=DELTA)
    assert rel.mean.shape == rel.noise_std.shape == (len(Xs), P) and rel.noise_factor.shape[0] == len(Xs) * P
    audit = stacked_audit(rel, cloaking(ref, Xs), P, d, groups)
    assert audit.passed, audit.failures
    assert audit.mu_ratio > 0.98
    assert dp.audit(rel, m, Xs).passed
    f = m.release_function(epsilon=EPS, delta=DELTA)
    assert f.release.mean.shape == (M, P) and f.release.noise_factor.shape[0] == M * P
    R1 = block_coordinates(f, ref, X, P)  # default reference inputs: the training inputs
    audit = stacked_audit(f.release, R1 @ ref.B, P, d, groups)
    assert audit.passed, audit.failures
    assert audit.mu_ratio > 0.98
    assert dp.audit(f, m).passed
    relation = "person (groups, up to 2 rows of 2 outputs)" if grouped else "row (3 outputs)"
    assert rel.neighbours == f.release.neighbours == relation
    if grouped:  # the broken variant: the release for rows does not protect these persons
        per_row = model(variant, X, Y, Z, BOUNDS[:P]).release_function(epsilon=EPS, delta=DELTA)
        caught = stacked_audit(per_row.release, R1 @ ref.B, P, d, groups, interior=0)
        assert not caught.passed and caught.mu_ratio > 1.2


def test_each_output_released_alone_fails_the_audit_of_the_rows_box():
    """The broken variant without groups: each output's latents released as if alone (per-entry neighbours)
    are valid releases of each output but not of a row's change of both."""
    P, variant = 2, SGPR
    X, Y, Z, Xs, ref = outputs_problem(variant, P, seed=3)
    d = BOUNDS[:P, 1] - BOUNDS[:P, 0]
    joint = model(variant, X, Y, Z, BOUNDS[:P]).release_function(epsilon=EPS, delta=DELTA, reference_inputs=None)
    alone = [model(variant, X, Y[:, p:p + 1], Z, BOUNDS[p]).release_function(epsilon=EPS, delta=DELTA)
             for p in range(P)]
    R1 = alone[0].coordinates.numpy()
    for p, f in enumerate(alone):
        assert stacked_audit(f.release, R1 @ ref.B, 1, d[p:p + 1]).passed
    F = np.zeros((M * P, sum(f.release.rank for f in alone)))
    F[:M, :alone[0].release.rank] = alone[0].release.noise_factor
    F[M:, alone[0].release.rank:] = alone[1].release.noise_factor
    joined = joint.release.__class__(**{**joint.release.__dict__, "noise_factor": F})
    caught = stacked_audit(joined, R1 @ ref.B, P, d, interior=0)
    assert not caught.passed and caught.mu_ratio > 1.2


# ---------------------------------------------------------------------------------------------
# Predictions of a released function, and its file


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.name for v in VARIANTS])
def test_the_function_predicts_each_output_from_its_own_latents(variant):
    P = 2
    X, Y, Z, Xs, ref = outputs_problem(variant, P, seed=4)
    m = model(variant, X, Y, Z, BOUNDS[:P])
    f = m.release_function(epsilon=EPS, delta=DELTA, seed=4).unclipped()  # the raw DP predictions
    R1 = block_coordinates(f, ref, X, P)
    Xq = np.linspace(-1.0, 11.0, 11)[:, None]
    a = readout(ref, Xq)  # [k, m]
    latents = np.linalg.solve(R1, f.release.mean)  # [m, P]: u = R^{-1} v, output by output
    mid = BOUNDS[:P].mean(axis=1)
    F = f.release.noise_factor
    noise = np.stack([np.linalg.norm(a @ np.linalg.solve(R1, F[p * M:(p + 1) * M]), axis=1) for p in range(P)], axis=1)
    pred = f.predict(Xq)
    assert pred.mean.shape == pred.variance.shape == pred.noise_std.shape == (len(Xq), P)
    np.testing.assert_allclose(pred.mean, mid + a @ latents, rtol=1e-7, atol=1e-9 * np.abs(pred.mean).max())
    np.testing.assert_allclose(pred.noise_std, noise, rtol=1e-6)
    np.testing.assert_allclose(pred.variance, np.tile(variance(ref, Xq)[:, None], (1, P)), rtol=1e-7, atol=1e-10)
    mean_f, var_f = f.predict_f(Xq)
    np.testing.assert_array_equal(mean_f, pred.mean)
    np.testing.assert_allclose(var_f, pred.variance + pred.noise_std**2, rtol=1e-12)
    np.testing.assert_allclose(f.dp_noise_variance(Xq), pred.noise_std**2, rtol=1e-12)
    clipped = f.clipped().predict(Xq).mean
    np.testing.assert_array_equal(clipped, np.clip(pred.mean, BOUNDS[:P, 0], BOUNDS[:P, 1]))
    chunked = streaming.predict(f, Xq, chunk_size=4)
    assert chunked.mean.shape == (len(Xq), P)
    np.testing.assert_allclose(chunked.mean, pred.mean, rtol=1e-12, atol=1e-13 * np.abs(pred.mean).max())


def _readout_state(key, value):
    def edit(raw):
        raw["content"]["readout"]["state"][key] = value
    return edit


def _both(first, second):
    def edit(raw):
        first(raw)
        second(raw)
    return edit


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    X, Y, Z, Xs, _ = outputs_problem(FITC, 2, seed=5)
    m = model(FITC, X, Y, Z, BOUNDS[:2])
    f = m.release_function(epsilon=EPS, delta=DELTA, seed=5)
    return f, f.save(tmp_path_factory.mktemp("sparse_outputs") / "function.json"), m


def test_a_function_of_several_outputs_round_trips_through_its_file(saved, tmp_path):
    f, path, m = saved
    loaded = dp.load(path)
    Xq = np.linspace(-1.0, 11.0, 9)[:, None]
    for name in ("mean", "variance", "noise_std"):
        np.testing.assert_array_equal(getattr(loaded.predict(Xq), name), getattr(f.predict(Xq), name))
    np.testing.assert_array_equal(loaded.release.noise_factor, f.release.noise_factor)
    assert loaded.release.y_bounds == tuple(map(tuple, BOUNDS[:2])) and repr(loaded) == repr(f)
    assert loaded.readout.num_outputs == 2
    assert json.loads(path.read_text())["content"]["readout"]["state"]["outputs"] == 2
    card = dp.io.read_card(path)["releases"][0]
    assert card["outputs"] == 2 and card["k"] == M and card["neighbours"] == "row (2 outputs)"
    assert dp.audit(loaded, m).passed
    again = dp.load(f.clipped().save(tmp_path / "clipped.json"))
    np.testing.assert_array_equal(again.predict(Xq).mean, f.clipped().predict(Xq).mean)


def test_a_function_of_several_outputs_exports_a_savedmodel_of_its_predictions(saved, tmp_path):
    import tensorflow as tf

    f, _, _ = saved
    served = tf.saved_model.load(str(f.export_saved_model(tmp_path / "model"))).signatures["serving_default"]
    Xq = np.linspace(-1.0, 11.0, 6)[:, None]
    out, pred = served(X=tf.constant(Xq)), f.predict(Xq)
    for name in ("mean", "variance", "noise_std"):
        assert out[name].shape == (6, 2)
        np.testing.assert_allclose(out[name].numpy(), getattr(pred, name), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("edit, match", [
    (_readout_state("outputs", 1), r"outputs must be an integer >= 2"),
    (_readout_state("outputs", True), r"outputs must be an integer >= 2"),
    (_readout_state("outputs", "2"), r"outputs must be an integer >= 2"),
    (_readout_state("outputs", 3), r"the mean function gives 2 outputs, the readout 3"),
    (_both(_readout_state("outputs", 3), _readout_state("mean_function", {"class": "Constant", "c": [0.5]})),
     r"latent values of 3 output\(s\), the release has 10 of 2"),
    (_readout_state("mean_function", {"class": "Constant", "c": [0.5, 0.0, 1.0]}),
     r"mean function gives 3 outputs, the readout 2"),
])
def test_forged_readouts_of_several_outputs_are_refused(saved, tmp_path, edit, match):
    _, path, _ = saved
    with pytest.raises(ReleaseFileError, match=match):
        dp.load(forged(path, tmp_path, edit))


def test_a_readout_without_outputs_is_refused_for_latents_of_several(saved, tmp_path):
    _, path, _ = saved

    def drop(raw):
        del raw["content"]["readout"]["state"]["outputs"]

    with pytest.raises(ReleaseFileError, match=r"the mean function gives 2 outputs, the readout 1"):
        dp.load(forged(path, tmp_path, drop))
    with pytest.raises(ReleaseFileError, match=r"latent values of 1 output\(s\), the release has 10 of 2"):
        dp.load(forged(path, tmp_path, _both(drop, _readout_state("mean_function", {"class": "Constant", "c": [0.5]}))))


# ---------------------------------------------------------------------------------------------
# One output: bit for bit as before


def _digest(*arrays):
    return hashlib.sha256(b"".join(np.ascontiguousarray(a, dtype=np.float64).tobytes() for a in arrays)).hexdigest()


#: SHA-256 of seeded P = 1 releases (mean and noise factor, at inputs then of the latents), computed at
#: eb392ff, before the sparse models took several outputs
_BEFORE = {
    ("fitc", False): "5f85af6e4876ad7bcd73f0d0dd9caa318800edd7151f7ca0a7fb2424dff53d7e",
    ("fitc", True): "9872699035b1d7b0116c8a26b7530c0cec0f6828f108363893f9c40c4db2f33d",
    ("sgpr", False): "b323ffdc44f75762a3ea1abe5cd5dc22b3005455bd52c761fb5754c6eadfdbb6",
    ("sgpr", True): "442306935ff153302f20786e1af4d618229b80322f2ea63040287504c761654f",
}


def one_output_releases(variant, grouped):
    X, Y, Z, Xs, ref = outputs_problem(variant, 1, n=20, seed=6)
    groups = np.repeat(np.arange(10), 2) if grouped else None
    m = variant.cls((X, Y), kernel(1), Z, noise_variance=NOISE, y_bounds=(LO, HI), hyperparameters_public=True,
                    groups=groups)
    rel = m.release(Xs, epsilon=EPS, delta=DELTA, seed=7).unclipped()  # the raw DP values, as recorded
    f = m.release_function(epsilon=EPS, delta=DELTA, seed=7).unclipped()
    return X, Y, Xs, ref, rel, f


def _seeded_noise(release, seed):
    """``F xi``: the published noise factor times the seed's standard normal draw (numpy's PCG64)."""
    return release.noise_factor @ np.random.default_rng(seed).standard_normal(release.rank)


@pytest.mark.parametrize("grouped", [False, True], ids=["rows", "groups"])
@pytest.mark.parametrize("variant", VARIANTS, ids=[v.name for v in VARIANTS])
def test_one_output_is_bit_identical_to_the_release_before_several_outputs(variant, grouped):
    """The SHA-256 pin (unchanged since eb392ff) and, beside it, the same releases against NumPy: at inputs
    ``m + P_F C (y - m) + F xi``, the latents ``P_F R B (y - m) + F xi`` (``R`` checked independently by
    :func:`block_coordinates`) and their prediction ``m + A(x) R^{-1} w``, y clipped to the bounds, m their
    midpoint, ``xi`` the seed's draw."""
    X, Y, Xs, ref, rel, f = one_output_releases(variant, grouped)
    assert _digest(rel.mean, rel.noise_factor, f.release.mean, f.release.noise_factor,
                   f.predict(Xs).mean) == _BEFORE[(variant.name, grouped)]
    mid = 0.5 * (LO + HI)
    centred = np.clip(Y[:, 0], LO, HI) - mid
    want = mid + range_projector(rel.noise_factor) @ cloaking(ref, Xs) @ centred + _seeded_noise(rel, 7)
    close(np.ravel(rel.mean), want, variant)
    R = block_coordinates(f, ref, X, 1)
    latents = range_projector(f.release.noise_factor) @ R @ ref.B @ centred + _seeded_noise(f.release, 7)
    close(np.ravel(f.release.mean), latents, variant)
    close(np.ravel(f.predict(Xs).mean), mid + readout(ref, Xs) @ np.linalg.solve(R, latents), variant)
