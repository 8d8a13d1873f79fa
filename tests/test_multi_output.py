"""Several outputs per row (issue 28 item 2, docs/guides/multi_output.md): ``DPGPR`` with ``Y`` [N, P] releases
all P outputs at once, and a neighbour changes all P outputs of one row (with ``groups``: of one person's
rows), output p by at most ``d_p``.

References are independent of the package: P separate GPflow ``GPR`` posterior means and cloaking
matrices from an explicit NumPy LU solve (:func:`reference.gpr_reference`), stacked output by output in
NumPy. The privacy check is a brute force from the definition of the relation: every corner (both signs)
and interior points of every row's (person's) heterogeneous box ``prod_p [-d_p, d_p]``, the stacked
release's shift ``P_F (I kron C) delta`` measured against its published noise factor
(:func:`auditing.audit_exact`). Releasing each output as if alone fails it.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from functools import partial
from pathlib import Path

import gpflow
import numpy as np
import pytest
import scipy.linalg
from reference import gpr_reference, k_se, range_projector

sys.path.insert(0, str(Path(__file__).resolve().parent / "audits"))
import auditing  # noqa: E402

import dpgp_gpflow as dp  # noqa: E402
from forgery import forged  # noqa: E402
from dpgp_gpflow.io import format as release_file  # noqa: E402
from dpgp_gpflow.io.format import ReleaseFileError  # noqa: E402
from dpgp_gpflow.models import DPGPR  # noqa: E402
from dpgp_gpflow.neighbours import model_neighbours  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ReproducibleNoiseWarning")

VAR, LENGTHSCALE, NOISE = 4.0, 1.5, 0.5
EPS, DELTA = 1.0, 0.01
#: per-output bounds of very different scales (P = 3): d_p = 10, 100, 1
BOUNDS = np.array([[0.0, 10.0], [-50.0, 50.0], [2.0, 3.0]])


def kernel():
    return gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=LENGTHSCALE)


def outputs_data(n=20, P=3, seed=0):
    """Inputs on [0, 10], P outputs on their bounds' scales (some outside: clipped), 9 test inputs."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 10.0, (n, 1))
    lo, hi = BOUNDS[:P, 0], BOUNDS[:P, 1]
    shape = np.stack([np.sin(X[:, 0] + p) for p in range(P)], axis=1)  # [n, P] in [-1, 1]
    Y = (lo + hi) / 2 + 0.55 * (hi - lo) * shape + 0.05 * (hi - lo) * rng.standard_normal((n, P))
    return X, Y, np.linspace(-0.5, 10.5, 9)[:, None]


def model(X, Y, bounds, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ClippingWarning)
        return DPGPR((X, Y), kernel(), y_bounds=bounds, noise_variance=NOISE, hyperparameters_public=True, **kw)


def C_numpy(X, Xs):
    return gpr_reference(partial(k_se, variance=VAR, lengthscale=LENGTHSCALE), X, np.zeros(len(X)), Xs, NOISE)[2]


def stacked_audit(release, C, P, d, groups=None, interior=20):
    """Brute force over every row's (person's) heterogeneous box: the entries of row i are ``p n + i``
    (stacked output by output), output p moves within ``[-d_p, d_p]``; the shifts ``(I kron C)_G delta``
    (built here from ``C`` in NumPy) projected onto the published noise span, against the release's claim."""
    n = C.shape[1]
    big = np.kron(np.eye(P), C)  # [kP, nP], rows and columns output by output
    rows = np.arange(n) if groups is None else np.asarray(groups)
    scaled = big * np.repeat(np.asarray(d) / np.max(d), n)[None, :]  # entry (i, p) moves by d_p = scale * max d
    shifts, _ = auditing.person_shifts(scaled, np.tile(rows, P), float(np.max(d)), interior=interior)
    return auditing.audit_exact(release, shifts @ range_projector(release.noise_factor).T)


# ---------------------------------------------------------------------------------------------
# The means and the map against P separate single-output GPs


@pytest.mark.parametrize("P", [2, 3])
def test_the_stacked_map_and_offset_give_the_separate_gpr_posterior_means(P):
    X, Y, Xs = outputs_data(P=P)
    m = model(X, Y, BOUNDS[:P])
    Yc = np.clip(Y, BOUNDS[:P, 0], BOUNDS[:P, 1])
    mid = BOUNDS[:P].mean(axis=1)
    C = C_numpy(X, Xs)
    np.testing.assert_allclose(dp.cloaking_matrix(m, Xs).numpy(), np.kron(np.eye(P), C), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(m.cloaking_matrix(Xs).numpy(), np.kron(np.eye(P), C), rtol=1e-8, atol=1e-12)
    terms = m.release_terms(Xs)
    mean = terms.offset.numpy() + dp.cloaking_matrix(m, Xs).numpy() @ m.centred_outputs().numpy()
    for p in range(P):  # output p is rows p k .. (p + 1) k of the stacked release
        gpr = gpflow.models.GPR((X, Yc[:, p:p + 1]), kernel(), mean_function=gpflow.functions.Constant(mid[p:p + 1]),
                                noise_variance=NOISE)
        f_mean, f_var = gpr.predict_f(Xs)
        k = len(Xs)
        np.testing.assert_allclose(mean[p * k:(p + 1) * k], f_mean.numpy()[:, 0], rtol=1e-8, atol=1e-9)
        np.testing.assert_allclose(terms.variance.numpy()[p * k:(p + 1) * k], f_var.numpy()[:, 0], rtol=1e-8, atol=1e-12)
        ref = gpr_reference(partial(k_se, variance=VAR, lengthscale=LENGTHSCALE), X, Yc[:, p], Xs, NOISE, mean=mid[p])[0]
        np.testing.assert_allclose(mean[p * k:(p + 1) * k], ref, rtol=1e-8, atol=1e-9)


def test_the_release_puts_each_output_in_its_column_with_little_noise_at_a_large_budget():
    X, Y, Xs = outputs_data(n=30, P=3)
    m = model(X, Y, BOUNDS)
    rel = m.release(Xs, epsilon=200.0, delta=0.01, seed=3).unclipped()  # the raw DP mean (default: clipped)
    assert rel.mean.shape == rel.variance.shape == rel.noise_std.shape == (len(Xs), 3)
    assert rel.noise_factor.shape[0] == 3 * len(Xs) and rel.num_outputs == 3
    f_mean = m.predict_f(Xs)[0].numpy()  # GPflow's own multi-output GPR mean (non-private): [k, 3]
    assert np.all(np.abs(rel.mean - f_mean) <= 6.0 * rel.noise_std + rel.bias_bound + 1e-9)
    np.testing.assert_allclose(rel.noise_std, np.linalg.norm(rel.noise_factor, axis=1).reshape(3, -1).T, rtol=1e-12)
    np.testing.assert_array_equal(rel.variance, np.tile(m.predict_f(Xs)[1].numpy()[:, :1], (1, 3)))


def test_the_measured_shift_of_a_rows_change_is_the_projected_stacked_shift():
    """Black box: same seed, one row's outputs moved to a corner of its box; the released [k, P] means
    differ by exactly ``P_F (I kron C) delta`` reshaped output by output."""
    P = 3
    X, Y, Xs = outputs_data(P=P)
    Yc = np.clip(Y, BOUNDS[:, 0], BOUNDS[:, 1])
    C = C_numpy(X, Xs)
    base = Yc.copy()
    base[4] = BOUNDS[:, 0]
    moved = base.copy()
    moved[4] = [BOUNDS[0, 1], BOUNDS[1, 0], BOUNDS[2, 1]]  # delta = (+10, 0, +1)
    moved[4, 1] = BOUNDS[1, 1]  # (+10, +100, +1)
    r0 = model(X, base, BOUNDS).release(Xs, epsilon=EPS, delta=DELTA, seed=5).unclipped()  # the raw DP means
    r1 = model(X, moved, BOUNDS).release(Xs, epsilon=EPS, delta=DELTA, seed=5).unclipped()
    np.testing.assert_array_equal(r0.noise_factor, r1.noise_factor)
    delta = np.zeros((len(X), P))
    delta[4] = moved[4] - base[4]
    expected = range_projector(r0.noise_factor) @ np.kron(np.eye(P), C) @ delta.T.reshape(-1)
    got = (r1.mean - r0.mean).T.reshape(-1)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())
    assert auditing.audit_exact(r0, got[None, :]).passed


# ---------------------------------------------------------------------------------------------
# Privacy: every corner of every row's (person's) heterogeneous box


@pytest.mark.parametrize("P, objective", [(2, "mse"), (3, "mse"), (3, "entropy")])
def test_every_corner_and_interior_point_of_every_rows_box_is_protected(P, objective):
    X, Y, Xs = outputs_data(P=P)
    m = model(X, Y, BOUNDS[:P])
    rel = m.release(Xs, epsilon=EPS, delta=DELTA, objective=objective)
    d = BOUNDS[:P, 1] - BOUNDS[:P, 0]
    assert m.output_sensitivities == tuple(d) and m.data_sensitivity == d.max()
    audit = stacked_audit(rel, C_numpy(X, Xs), P, d)
    assert audit.passed, audit.failures
    assert audit.mu_ratio > 0.98  # tight: the worst corner is what the noise was fitted to
    assert dp.audit(rel, m, Xs).passed


def test_with_groups_a_person_is_every_output_of_every_one_of_their_rows():
    """Persons of 1, 2 and 3 rows with P = 2 outputs: 2, 4 (every corner) and 6 entries (the bound)."""
    P = 2
    X, Y, Xs = outputs_data(n=18, P=P, seed=1)
    groups = np.array([0, 0, 1, 2, 2, 2, 3, 4, 4, 5, 6, 6, 7, 8, 8, 8, 9, 9]) * 5 + 1
    m = model(X, Y, BOUNDS[:P], groups=groups)
    rel = m.release(Xs, epsilon=EPS, delta=DELTA)
    d = BOUNDS[:P, 1] - BOUNDS[:P, 0]
    audit = stacked_audit(rel, C_numpy(X, Xs), P, d, groups=groups)
    assert audit.passed, audit.failures
    assert dp.audit(rel, m, Xs).passed
    assert rel.neighbours == "person (groups, up to 3 rows of 2 outputs)"
    # the release for rows (each row its own person) does not protect these persons
    per_row = model(X, Y, BOUNDS[:P]).release(Xs, epsilon=EPS, delta=DELTA)
    assert stacked_audit(per_row, C_numpy(X, Xs), P, d).passed
    caught = stacked_audit(per_row, C_numpy(X, Xs), P, d, groups=groups, interior=0)
    assert not caught.passed and caught.mu_ratio > 1.3


def test_more_outputs_than_corners_are_protected_by_the_bound():
    """P = 5 > MAX_CORNER_ROWS entries per row: the ``|G| scale_i e_i`` bound, checked against all 32 corners."""
    P = 5
    X, Y, Xs = outputs_data(n=12, P=3, seed=2)
    Y = np.hstack([Y, Y[:, :2] * 0.5])
    bounds = np.vstack([BOUNDS, [[0.0, 5.0], [-25.0, 25.0]]])
    m = model(X, Y, bounds)
    rel = m.release(Xs, epsilon=EPS, delta=DELTA)
    audit = stacked_audit(rel, C_numpy(X, Xs), P, bounds[:, 1] - bounds[:, 0], interior=10)
    assert audit.passed, audit.failures


def test_each_output_released_as_if_alone_fails_the_audit():
    """The broken variant: each output released separately at the full budget (per-entry neighbours). Its
    stacked noise factor ``diag(F_1, F_2)`` is a valid release of each output, not of a row's change."""
    P = 2
    X, Y, Xs = outputs_data(P=P)
    m = model(X, Y, BOUNDS[:P])
    alone = [model(X, Y[:, p:p + 1], BOUNDS[p]).release(Xs, epsilon=EPS, delta=DELTA).unclipped() for p in range(P)]
    C = C_numpy(X, Xs)
    for p, r in enumerate(alone):  # each is a valid single-output release
        assert auditing.audit_exact(r, (BOUNDS[p, 1] - BOUNDS[p, 0]) * C.T @ range_projector(r.noise_factor).T).passed
    joined = dataclasses.replace(
        m.release(Xs, epsilon=EPS, delta=DELTA).unclipped(), mean=np.hstack([r.mean for r in alone]),
        noise_factor=scipy.linalg.block_diag(*[r.noise_factor for r in alone]),
        noise_std=np.hstack([r.noise_std for r in alone]))  # [k, 1] each -> [k, P]
    audit = stacked_audit(joined, C, P, BOUNDS[:P, 1] - BOUNDS[:P, 0], interior=0)
    assert not audit.passed and audit.mu_ratio > 1.3  # about sqrt(2): both outputs of a row move
    assert not dp.audit(joined, m, Xs).passed


def test_the_neighbour_map_scales_each_outputs_entries():
    X, Y, Xs = outputs_data(n=4, P=3)
    nb = model_neighbours(model(X, Y, BOUNDS), 12)
    A = nb.matrix().toarray()
    assert A.shape == (12, 4 * 4)  # 4 rows, 2^(3-1) corners each
    scale = np.repeat([0.1, 1.0, 0.01], 4)
    for i in range(4):
        entries = i + 4 * np.arange(3)  # row i's outputs, stacked output by output
        mine = A[:, np.any(A[entries] != 0, axis=0)]
        assert mine.shape[1] == 4 and np.all(mine[np.setdiff1d(np.arange(12), entries)] == 0)
        signs = mine[entries] / scale[entries][:, None]
        assert {tuple(s) for s in signs.T} == {(1, a, b) for a in (-1, 1) for b in (-1, 1)}


# ---------------------------------------------------------------------------------------------
# One output: bit for bit as before


#: a seeded release of this problem computed before several outputs existed (HEAD a0f09ea, float.hex)
_BEFORE = {
    "rows": (
        ['0x1.5692eb4dc2fb7p+3', '0x1.4db9d77cf638ep+3', '-0x1.36fad04d218e2p+3', '0x1.202d798202bf0p-2'],
        [
            '-0x1.6bba7badc28d2p-3', '-0x1.24d8153bc100fp-7', '-0x1.b79402fa62880p-10', '0x1.07df91ab5347dp+4',
            '-0x1.841c2c9aaf6a6p+2', '-0x1.6aa758c77d136p+0', '-0x1.7f7145a3f1578p-3', '-0x1.e9958ca7595acp-2',
            '-0x1.5d30acd15eac4p-1', '0x1.8ded16372bcb9p+3', '-0x1.013bbf226393ap+0', '-0x1.58e5a49248cd0p-5',
            '-0x1.07a7bb8024a4ap-3', '0x1.baae6973ea6fep-1', '0x1.c4a31b622c7c1p+3', '-0x1.e29db239d80bap-8',
        ]),
    "groups": (
        ['0x1.9615db061de50p+4', '-0x1.544f79918a7acp+2', '0x1.195ed76ebe13ep+3', '-0x1.ebd7b85f996b0p+1'],
        [
            '0x1.903d3ce7f3720p-2', '-0x1.0a6c2fb7d5763p+4', '0x1.4e68e37b4293dp-6', '0x1.20eea60c2dc29p-4',
            '0x1.41330fe08072bp+3', '0x1.4967a51293b67p-1', '0x1.09a51419c89eap+1', '0x1.36d6109e4b529p-1',
            '0x1.2c3e94806fa2ep+0', '0x1.a56608f616f76p-5', '-0x1.20d34e9a9c22fp+4', '-0x1.8df6037486217p+0',
            '0x1.c3e74816f104fp-3', '-0x1.6b58fc70ab4b6p-5', '0x1.8160b148d0a0ep+0', '-0x1.37a9adee4163bp+4',
        ]),
}


def _p1_problem():
    rng = np.random.default_rng(7)
    X = rng.uniform(0.0, 10.0, (12, 1))
    Y = np.clip(5.0 + 3.0 * np.sin(X) + rng.standard_normal(X.shape), 0.0, 10.0)
    return X, Y, np.linspace(0.0, 10.0, 4)[:, None]


@pytest.mark.parametrize("name", ["rows", "groups"])
def test_one_output_is_bit_identical_to_the_release_before_several_outputs(name):
    X, Y, Xs = _p1_problem()
    kw = {"groups": np.repeat(np.arange(6), 2)} if name == "groups" else {}
    mean, factor = _BEFORE[name]
    for bounds in ((0.0, 10.0), [[0.0, 10.0]]):  # a pair, or [1, 2]: the same
        m = DPGPR((X, Y), kernel(), y_bounds=bounds, noise_variance=NOISE, hyperparameters_public=True, **kw)
        assert m.num_outputs == 1 and m.y_bounds == (0.0, 10.0)
        rel = m.release(Xs, epsilon=EPS, delta=DELTA, seed=5).unclipped()  # the raw DP mean, as recorded
        assert rel.mean.shape == (4, 1)
        np.testing.assert_array_equal(rel.mean[:, 0], np.array([float.fromhex(v) for v in mean]))
        np.testing.assert_array_equal(rel.noise_factor.ravel(), np.array([float.fromhex(v) for v in factor]))
        assert rel.neighbours == ("row" if name == "rows" else "person (groups, up to 2 rows)")
        # the pin above is a regression pin; the NumPy reference: the mean before the seeded noise is the
        # projection of 5 + C (y - 5) onto span(F), and every person's (row's) corner shift whitens to <= 1/s
        C = np.linalg.solve(k_se(X, X, VAR, LENGTHSCALE) + NOISE * np.eye(len(X)), k_se(X, Xs, VAR, LENGTHSCALE)).T
        F = rel.noise_factor
        xi, _ = dp.sampling.standard_normal(rel.rank, 5)
        target = C @ (Y[:, 0] - 5.0)
        Q = np.linalg.qr(F)[0]
        np.testing.assert_allclose(rel.mean[:, 0] - 5.0 - F @ xi, Q @ (Q.T @ target), rtol=0,
                                   atol=1e-9 * np.max(np.abs(target)))
        persons = np.arange(12)[:, None] if name == "rows" else np.arange(12).reshape(6, 2)
        corners = [10.0 * C[:, g] @ np.array(signs) for g in persons for signs in
                   ([(1.0,)] if len(g) == 1 else [(1.0, 1.0), (1.0, -1.0)])]
        shift = np.max(np.linalg.norm(np.linalg.lstsq(F, np.array(corners).T, rcond=None)[0], axis=0))
        assert 0.5 <= shift * rel.noise_multiplier <= 1.0 + 1e-9


# ---------------------------------------------------------------------------------------------
# Refusals: bad shapes and bounds, and what does not support several outputs yet


@pytest.mark.parametrize("bounds, kw, error, match", [
    (BOUNDS[:2], {}, ValueError, r"shape \[3, 2\]"),  # two pairs for three outputs
    (np.vstack([BOUNDS, BOUNDS[:1]]), {}, ValueError, r"shape \[3, 2\]"),
    ([[0.0, 10.0], [50.0, -50.0], [2.0, 3.0]], {}, ValueError, r"y_bounds\[1\].*lo < hi"),
    ([[0.0, 10.0], [-50.0, np.inf], [2.0, 3.0]], {}, ValueError, r"y_bounds\[1\].*finite"),
    ([[0.0, 10.0], [-50.0, np.nan], [2.0, 3.0]], {}, ValueError, r"y_bounds\[1\].*finite"),
    ([[0.0, 10.0], [-50.0, 50.0], [2.0, "3"]], {}, TypeError, r"y_bounds\[2\].*real numbers"),
    (BOUNDS, {"data_sensitivity": 5.0}, ValueError, r"exceeds the width"),  # 5 > output 3's width 1
    (BOUNDS, {"data_sensitivity": [5.0, 50.0]}, ValueError, "one per output"),
    (BOUNDS, {"data_sensitivity": [5.0, 50.0, 2.0]}, ValueError, "exceeds the width"),
    (BOUNDS, {"data_sensitivity": [5.0, -1.0, 0.5]}, ValueError, "> 0"),
    (BOUNDS, {"groups": np.arange(5)}, ValueError, r"groups must be .* shape \[20\]"),
])
def test_bad_bounds_sensitivities_and_groups_are_refused(bounds, kw, error, match):
    X, Y, _ = outputs_data(P=3)
    with pytest.raises(error, match=match):
        model(X, Y, bounds, **kw)


def test_declared_sensitivities_per_output_scale_the_box():
    X, Y, Xs = outputs_data(P=3)
    m = model(X, Y, BOUNDS, data_sensitivity=[5.0, 50.0, 0.5])
    assert m.output_sensitivities == (5.0, 50.0, 0.5) and m.data_sensitivity == 50.0
    rel = m.release(Xs, epsilon=EPS, delta=DELTA)
    assert stacked_audit(rel, C_numpy(X, Xs), 3, [5.0, 50.0, 0.5]).passed
    assert not stacked_audit(rel, C_numpy(X, Xs), 3, BOUNDS[:, 1] - BOUNDS[:, 0], interior=0).passed
    assert model(X, Y, BOUNDS, data_sensitivity=0.5).output_sensitivities == (0.5, 0.5, 0.5)


def test_a_shared_pair_of_bounds_clips_and_centres_every_output_alike():
    X, Y, Xs = outputs_data(P=2)
    m = model(X, Y, (-50.0, 50.0))
    assert m.y_bounds == (-50.0, 50.0) and m.output_sensitivities == (100.0, 100.0)
    np.testing.assert_array_equal(m.mean_function(Xs).numpy(), np.zeros((len(Xs), 1)))
    rel = m.release(Xs, epsilon=EPS, delta=DELTA)
    assert rel.y_bounds == (-50.0, 50.0) and rel.mean.shape == (len(Xs), 2)
    assert stacked_audit(rel, C_numpy(X, Xs), 2, [100.0, 100.0]).passed


def test_outputs_are_clipped_and_centred_per_output():
    X, Y, Xs = outputs_data(P=3)
    with pytest.warns(dp.ClippingWarning, match="outside the public bounds"):
        m = DPGPR((X, Y), kernel(), y_bounds=BOUNDS, noise_variance=NOISE, hyperparameters_public=True)
    clipped = np.clip(Y, BOUNDS[:, 0], BOUNDS[:, 1])
    assert not np.array_equal(clipped, Y)  # the problem has values outside some output's bounds
    np.testing.assert_array_equal(m.data[1].numpy(), clipped)
    centred = m.centred_outputs().numpy()
    np.testing.assert_allclose(centred, (clipped - BOUNDS.mean(axis=1)).T.reshape(-1), rtol=0, atol=1e-12)
    assert m.output_bound == pytest.approx(50.0)
    rel = m.release(Xs, epsilon=EPS, delta=DELTA).clipped()
    assert np.all((rel.mean >= BOUNDS[:, 0]) & (rel.mean <= BOUNDS[:, 1]))
    assert np.any(rel.mean[:, 2] == BOUNDS[2, 1]) or np.any(rel.mean[:, 2] == BOUNDS[2, 0])  # output 3: noisy
    assert dp.audit(rel, m, Xs).passed


def test_what_does_not_support_several_outputs_refuses_them():
    X, Y, Xs = outputs_data(P=2)
    m = model(X, Y, BOUNDS[:2])
    with pytest.raises(NotImplementedError, match="standard mechanism does not support several outputs"):
        m.release(Xs, epsilon=EPS, delta=DELTA, mechanism="standard")
    # selection and cross-validation accept several outputs (tests/test_selection_multi_output.py)
    with pytest.raises(ValueError, match=r"\[N, 1\]"):  # labels: one column
        dp.models.DPLaplaceGPC((X, np.sign(Y)), kernel())
    assert m.num_outputs == 2  # the refusals spent nothing and changed nothing


# ---------------------------------------------------------------------------------------------
# The release file


def _card(raw):
    return raw["card"]["releases"][0]


def _put(raw, name, values):
    raw["arrays"][name] = release_file.encode_array(np.asarray(values, dtype=np.float64))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    X, Y, Xs = outputs_data(P=3)
    m = model(X, Y, BOUNDS)
    rel = m.release(Xs, epsilon=EPS, delta=DELTA, seed=2).unclipped()  # the raw file; the clipped one below
    folder = tmp_path_factory.mktemp("outputs")
    return rel, rel.save(folder / "release.json", inputs=Xs), m, Xs


def test_a_release_of_several_outputs_round_trips_through_its_file(saved, tmp_path):
    rel, path, m, Xs = saved
    loaded = dp.load(path)
    for name in ("mean", "variance", "noise_std", "noise_factor"):
        a, b = getattr(rel, name), getattr(loaded, name)
        assert a.shape == b.shape and np.array_equal(a, b), name
    assert loaded.y_bounds == rel.y_bounds == tuple(map(tuple, BOUNDS))
    assert loaded.neighbours == rel.neighbours == "row (3 outputs)" and repr(loaded) == repr(rel)
    card = dp.io.read_card(path)["releases"][0]
    assert card["outputs"] == 3 and card["k"] == len(Xs) and card["y_bounds"] == BOUNDS.tolist()
    assert dp.audit(loaded, m, Xs).passed
    clipped = dp.load(rel.clipped().save(tmp_path / "clipped.json"))
    np.testing.assert_array_equal(clipped.mean, rel.clipped().mean)
    shared = model(*outputs_data(P=2)[:2], (-50.0, 50.0)).release(Xs, epsilon=EPS, delta=DELTA)
    again = dp.load(shared.save(tmp_path / "shared.json"))
    assert again.y_bounds == (-50.0, 50.0) and again.mean.shape == (len(Xs), 2)


def _set(field, value):
    def edit(raw):
        _card(raw)[field] = value
    return edit


def _drop(field):
    def edit(raw):
        del _card(raw)[field]
    return edit


def _array(name, change):
    def edit(raw):
        entry = raw["arrays"][f"releases/0/{name}"]
        import base64
        values = np.frombuffer(base64.b64decode(entry["data"]), dtype="<f8").reshape(entry["shape"]).copy()
        _put(raw, f"releases/0/{name}", change(values))
    return edit


@pytest.mark.parametrize("edit, match", [
    (_set("outputs", 1), r"outputs must be an integer >= 2"),
    (_set("outputs", True), r"outputs must be an integer >= 2"),
    (_set("outputs", 2), r"y_bounds must be null, \[lo, hi\] or 2 pairs"),  # 3 pairs recorded
    (_drop("outputs"), r"y_bounds must be null or \[lo, hi\]|1 dimensions"),
    (_set("y_bounds", [[0.0, 10.0], [50.0, -50.0], [2.0, 3.0]]), r"y_bounds: y_bounds\[1\].*lo < hi"),
    (_set("y_bounds", [[0.0, 10.0], [-50.0, 50.0]]), r"y_bounds must be null"),
    (_set("y_bounds", [[0.0, 10.0], [-50.0, 50.0], [2.0, "3"]]), r"y_bounds must be null"),
    (_set("y_bounds", [[0.0, 10.0], [-5.0, 5.0], [2.0, 3.0]]), r"data_sensitivity .* exceeds the width"),
    (_set("neighbours", 3), r"neighbours: 3 is not a neighbouring relation"),
    (_set("neighbours", "row (2 outputs)"), r"'row \(2 outputs\)' is not a neighbouring relation of a release of 3"),
    (_array("mean", lambda v: v[:, :2]), r"does not match"),
    (_array("noise_std", lambda v: v.T), r"does not match"),
    (_array("noise_factor", lambda v: v[:-1]), r"does not match"),
    (_array("noise_std", lambda v: v[:, ::-1]), r"noise_std is not the row norms"),  # outputs swapped
    (_array("mean", lambda v: v.reshape(-1)), r"2 dimensions"),
])
def test_forged_files_of_several_outputs_are_refused(saved, tmp_path, edit, match):
    _, path, _, _ = saved
    with pytest.raises(ReleaseFileError, match=match):
        dp.load(forged(path, tmp_path, edit))


def test_the_card_records_the_neighbouring_relation(saved):
    X, Y, Xs = _p1_problem()
    plain = DPGPR((X, Y), kernel(), y_bounds=(0.0, 10.0), noise_variance=NOISE, hyperparameters_public=True)
    assert plain.release(Xs, epsilon=EPS, delta=DELTA).release_card()["neighbours"] == "row"
    assert "outputs" not in plain.release(Xs, epsilon=EPS, delta=DELTA).release_card()
    assert saved[0].release_card()["neighbours"] == "row (3 outputs)"


def test_coregionalisation_on_stacked_inputs_with_groups_protects_every_rows_outputs():
    """GPflow's Coregion kernel on inputs stacked with an output-index column (P = 1 for the model), with
    ``groups`` the original row: brute force over both outputs of every original row against a NumPy
    cloaking matrix of the stacked problem; the same release without groups fails it."""
    P, n = 2, 15
    rng = np.random.default_rng(4)
    x = rng.uniform(0.0, 10.0, (n, 1))
    Y = np.hstack([np.sin(x), 0.8 * np.sin(x) + 0.2 * np.cos(x)]) * 0.5 + 0.5  # both on [0, 1]
    X_aug = np.vstack([np.hstack([x, np.full((n, 1), p)]) for p in range(P)])
    Xs_aug = np.vstack([np.hstack([np.linspace(0, 10, 6)[:, None], np.full((6, 1), p)]) for p in range(P)])
    row = np.tile(np.arange(n), P)

    def coregionalised(**kw):
        coregion = gpflow.kernels.Coregion(output_dim=P, rank=1, active_dims=[1])
        coregion.W.assign([[1.0], [0.8]])
        kern = gpflow.kernels.SquaredExponential(variance=0.2, lengthscales=1.5, active_dims=[0]) * coregion
        return DPGPR((X_aug, Y.T.reshape(-1, 1)), kern, y_bounds=(0.0, 1.0), noise_variance=0.01,
                     hyperparameters_public=True, **kw), kern

    grouped, kern = coregionalised(groups=row)
    C = gpr_reference(lambda A, B: kern(A, B).numpy(), X_aug, np.zeros(2 * n), Xs_aug, 0.01)[2]
    rel = grouped.release(Xs_aug, epsilon=EPS, delta=DELTA)
    shifts, _ = auditing.person_shifts(C, row, 1.0, interior=20)
    audit = auditing.audit_exact(rel, shifts @ range_projector(rel.noise_factor).T)
    assert audit.passed and audit.mu_ratio > 0.98, audit.failures
    assert dp.audit(rel, grouped, Xs_aug).passed
    per_entry = coregionalised()[0].release(Xs_aug, epsilon=EPS, delta=DELTA)
    assert not auditing.audit_exact(per_entry, shifts @ range_projector(per_entry.noise_factor).T).passed
