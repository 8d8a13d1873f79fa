"""Red-team: a streamed release with persons must not rest on the source's row order (issue 34, item 1).

The attack: a model built on rows sorted by person with ``groups=ids``, then streamed from a chunk source holding
the same rows in another order. The release used to take the model's ids for the source's rows (so the persons it
protected were runs of unrelated rows) and charged it as a person-level release. Now a source carries the person
ids of its own rows (``LocalChunks(X, Y, groups=ids)``, ``DaskChunks(X, Y, groups=ids)``); a release with persons
takes them from there, checked against the model's groups row for row, and refuses (one line, nothing reserved)
when the source carries none or other ones.

References are written here in NumPy from the definitions, never from the package's maths: FITC's latent map
``B = (I + V diag(1/nu) V^T)^{-1} V diag(1/nu)`` (``V = L_uu^{-1} K_uf``, ``nu = diag(K_ff - V^T V) + s2``) and
the SoR classifier's first step ``1/2 (I + Phi^T Phi / 4)^{-1} Phi^T`` (``Phi = K_NM L_MM^{-T}``), every corner
of each real person's box (regression) and every reassignment of each real person's labels (several classes),
the Balle-Wang multiplier by root-finding. Every release below either refuses with nothing spent or has noise
that covers every real person; the honest sources release what the in-memory grouped release does.
"""

from __future__ import annotations

import itertools
import math

import gpflow
import numpy as np
import pytest
from scipy import optimize

from dpgp_gpflow import PrivacyAccountant, sampling, streaming
from dpgp_gpflow.models import DPGPRFITC, DPSparseMulticlassLaplaceGPC
from dpgp_gpflow.streaming import LocalChunks

from reference import analytic_delta, gaussian_delta_at_shift, k_se, quiet

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

JITTER = 1e-6  # GPflow's default jitter on K_uu
NOISE = 0.1
BOUNDS = (-2.0, 2.0)
D = 4.0  # hi - lo
EPS, DELTA = 1.0, 1e-3
K_CLASSES = 3
Z = np.linspace(0.0, 10.0, 6)[:, None]
#: 8 persons of 3 rows, each at nearly one input (repeated visits: a person's columns nearly parallel), arbitrary ids
IDS = np.repeat(np.arange(8) * 5 + 2, 3)
N = IDS.size


def multiplier(epsilon, delta):
    """The analytic Gaussian multiplier (Balle & Wang), by root-finding on its delta."""
    return optimize.brentq(lambda s: analytic_delta(epsilon, s) - delta, 1e-3, 1e3, xtol=1e-15, rtol=1e-15)


def true_epsilon(mu, delta):
    """The epsilon at ``delta`` of a Gaussian mechanism whose worst whitened shift is ``mu``."""
    return optimize.brentq(lambda e: gaussian_delta_at_shift(e, mu) - delta, 1e-9, 100.0, xtol=1e-12)


def fitc_latent_map(X):
    """FITC's inducing values of the centred outputs, ``B`` [m, n] (GPflow's GPRFITC, unit SE kernel)."""
    Luu = np.linalg.cholesky(k_se(Z, Z) + JITTER * np.eye(len(Z)))
    V = np.linalg.solve(Luu, k_se(Z, X))  # [m, n]
    nu = 1.0 - np.sum(V**2, axis=0) + NOISE
    return np.linalg.solve(np.eye(len(Z)) + (V / nu) @ V.T, V / nu)


def sor_weight_map(X, Zc):
    """The SoR classifier's first Newton step of its weights, 1/2 (I + Phi^T Phi / 4)^-1 Phi^T."""
    L = np.linalg.cholesky(k_se(Zc, Zc) + JITTER * np.eye(len(Zc)))
    Phi = np.linalg.solve(L, k_se(Zc, X)).T  # [n, m]
    return 0.5 * np.linalg.solve(np.eye(len(Zc)) + Phi.T @ Phi / 4.0, Phi.T)


def worst_person_shift(noise_factor, C, ids):
    """max over every person of ``ids`` (the rows' true persons) and every corner of their box [-d, d]^g of the
    whitened shift ``||F^+ C delta||``."""
    W = np.linalg.pinv(noise_factor) @ C
    worst = 0.0
    for person in np.unique(ids):
        rows = np.flatnonzero(ids == person)
        corners = D * np.array(list(itertools.product((-1.0, 1.0), repeat=rows.size)))  # [2^g, g]
        worst = max(worst, float(np.max(np.linalg.norm(W[:, rows] @ corners.T, axis=0))))
    return worst


def worst_reassignment_shift(whitened, ids):
    """max over every person of ``ids`` and every (old, new) class of each of their rows of the stacked whitened
    shift ``sqrt(sum_c ||W_c delta_c||^2)``, ``delta_c,i = 2 (1[new_i = c] - 1[old_i = c])`` (``whitened``: the K
    ``F_c^+ C``)."""
    pairs = [(0, 0)] + [(a, b) for a in range(K_CLASSES) for b in range(K_CLASSES) if a != b]
    coef = np.array([[2.0 * ((b == c) - (a == c)) for c in range(K_CLASSES)] for a, b in pairs])  # [pairs, K]
    worst = 0.0
    for person in np.unique(ids):
        rows = np.flatnonzero(ids == person)
        choice = np.array(list(itertools.product(range(len(pairs)), repeat=rows.size)))  # [choices, g]
        total = sum(np.sum((coef[choice, c] @ whitened[c][:, rows].T) ** 2, axis=1) for c in range(K_CLASSES))
        worst = max(worst, float(np.sqrt(np.max(total))))
    return worst


@pytest.fixture(scope="module")
def rows():
    """Rows sorted by person, and a permutation that scatters every person's rows."""
    rng = np.random.default_rng(0)
    centres = np.linspace(0.5, 9.5, 8)
    X = (centres[np.repeat(np.arange(8), 3)] + 0.05 * rng.standard_normal(N))[:, None]
    Y = np.sin(X) + 0.1 * rng.standard_normal((N, 1))
    labels = np.clip(np.floor((np.sin(X[:, 0]) + 1.2) / 2.4 * K_CLASSES), 0, K_CLASSES - 1).astype(np.int64)
    perm = rng.permutation(N)
    assert all(np.any(np.diff(np.flatnonzero(IDS[perm] == p)) > 1) for p in np.unique(IDS))  # every person scattered
    return X, Y, labels, perm


def _fitc(X, Y, groups):
    return DPGPRFITC((X, Y), gpflow.kernels.SquaredExponential(), Z, noise_variance=NOISE, y_bounds=BOUNDS,
                     groups=groups, hyperparameters_public=True)


def _multiclass(X, labels, groups):
    return DPSparseMulticlassLaplaceGPC((X, labels), gpflow.kernels.SquaredExponential(), Z, num_classes=K_CLASSES,
                                        hyperparameters_public=True, groups=groups)


def _source(where, X, Y, groups=None):
    """``LocalChunks`` of 5 rows, or ``DaskChunks`` of 7 (``where``: "local", "dask", or "dask-ids" for the ids as
    a Dask array too), carrying ``groups`` (None: built without the keyword, as a user would)."""
    ids = {} if groups is None else {"groups": groups}
    if where == "local":
        return LocalChunks(X, Y, 5, **ids)
    da = pytest.importorskip("dask.array")
    from dpgp_gpflow.distributed import DaskChunks

    if groups is not None and where == "dask-ids":
        ids = {"groups": da.from_array(groups, chunks=7)}
    return DaskChunks(da.from_array(X, chunks=(7, 1)), da.from_array(Y, chunks=7 if Y.ndim == 1 else (7, 1)), **ids)


def _nothing_spent(accountant):
    assert accountant.history() == [] and accountant.held == (0.0, 0.0) and accountant.spent == (0.0, 0.0)


# ---------------------------------------------------------------------------------------------
# The attack, regression: DPGPRFITC on sorted rows, the source in another order


def test_the_order_the_release_used_to_trust_leaves_the_real_persons_uncovered(rows):
    """Why a source without its own ids must be refused: the release the old code made from the scattered rows
    (the model's ids read as the ids of the source's rows, i.e. "persons" that are runs of scattered rows) leaves
    the real persons' boxes far outside its noise: true epsilon well above the one charged."""
    X, Y, _, perm = rows
    s = multiplier(EPS, DELTA)
    wrong = quiet(streaming.release_function, _fitc(X[perm], Y[perm], IDS), epsilon=EPS, delta=DELTA, seed=1,
                  reference_inputs=False, chunk_size=5)
    worst = worst_person_shift(wrong.release.noise_factor, fitc_latent_map(X[perm]), IDS[perm])  # real persons
    print(f"worst shift x s = {worst * s:.3f}, true epsilon = {true_epsilon(worst, DELTA):.3f}")
    assert worst > 1.5 / s and true_epsilon(worst, DELTA) > 1.5 * EPS, (worst * s, true_epsilon(worst, DELTA))


@pytest.mark.parametrize("where", ["local", "dask", "dask-ids"])
@pytest.mark.parametrize("source_ids", ["none", "their own"])
def test_a_source_in_another_order_is_refused_or_covers_every_real_person(rows, where, source_ids):
    """The model's rows sorted by person (``groups=IDS``); the source holds them scattered, with no ids or with
    their own true ids (which are not the model's row for row). Refused in one line naming the fix (or the first
    row whose ids differ) before anything is reserved; an accepted release would have to cover every corner of
    every real person (the failure before the fix: the source without ids was accepted, charged as a
    person-level release, and its noise did not cover them)."""
    X, Y, _, perm = rows
    ids = None if source_ids == "none" else IDS[perm]
    source = _source(where, X[perm], Y[perm], ids)
    accountant = PrivacyAccountant(epsilon=10.0, delta=0.5)
    try:
        f = quiet(streaming.release_function, _fitc(X, Y, IDS), epsilon=EPS, delta=DELTA, seed=1,
                  reference_inputs=False, accountant=accountant, source=source)
    except ValueError as exc:
        _nothing_spent(accountant)
        message = str(exc)
        assert "\n" not in message
        assert ("pass groups= to the source" if ids is None else "differ from the model's groups at row 0") in message
    else:  # accepted: the noise must cover every corner of every real person of the source's rows
        worst = worst_person_shift(f.release.noise_factor, fitc_latent_map(X[perm]), IDS[perm])
        assert worst <= (1.0 / multiplier(EPS, DELTA)) * (1 + 1e-9), worst * multiplier(EPS, DELTA)
        pytest.fail("accepted a source whose ids are not the model's row for row")


@pytest.mark.parametrize("where", ["local", "dask"])
def test_a_source_without_ids_for_a_grouped_model_is_refused_even_in_the_models_order(rows, where):
    """The release cannot see the source's order: the same rows in the model's order but without ids are refused
    too (one line, naming the fix), nothing reserved; the public streamed_map refuses the same."""
    X, Y, _, _ = rows
    source = _source(where, X, Y)
    model = _fitc(X, Y, IDS)
    accountant = PrivacyAccountant(epsilon=10.0, delta=0.5)
    with pytest.raises(ValueError, match=r"carries no person ids.*pass groups= to the source"):
        quiet(streaming.release_function, model, epsilon=EPS, delta=DELTA, accountant=accountant, source=source)
    _nothing_spent(accountant)
    with pytest.raises(ValueError, match="pass groups= to the source"):
        streaming.streamed_map(model, source)


def test_ids_on_the_source_for_a_model_without_groups_and_other_lengths_are_refused(rows):
    """A source that says the rows are persons for a model built without groups (the release would protect rows
    only), and ids of another number of rows: refused before anything is reserved."""
    X, Y, _, _ = rows
    accountant = PrivacyAccountant(epsilon=10.0, delta=0.5)
    with pytest.raises(ValueError, match="the model has none"):
        quiet(streaming.release_function, _fitc(X, Y, None), epsilon=EPS, delta=DELTA, accountant=accountant,
              source=LocalChunks(X, Y, 5, groups=IDS))
    with pytest.raises(ValueError, match=r"has 23 rows but the model's groups 24"):
        quiet(streaming.release_function, _fitc(X, Y, IDS), epsilon=EPS, delta=DELTA, accountant=accountant,
              source=LocalChunks(X[:-1], Y[:-1], 5, groups=IDS[:-1]))
    with pytest.raises(ValueError, match="groups"):  # the source's own ids are checked against its rows
        LocalChunks(X, Y, 5, groups=IDS[:-1])
    _nothing_spent(accountant)


def test_a_per_row_release_ignores_the_order_of_a_source_without_ids(rows):
    """No groups: a per-row release of the scattered rows is accepted as before and covers every row."""
    X, Y, _, perm = rows
    f = quiet(streaming.release_function, _fitc(X, Y, None), epsilon=EPS, delta=DELTA, seed=1, reference_inputs=False,
              source=LocalChunks(X[perm], Y[perm], 5))
    assert not (f.release.neighbours or "row").startswith("person")
    worst = worst_person_shift(f.release.noise_factor, fitc_latent_map(X[perm]), np.arange(N))
    assert 0.5 / multiplier(EPS, DELTA) <= worst <= (1.0 / multiplier(EPS, DELTA)) * (1 + 1e-9)


@pytest.mark.parametrize("where", ["local", "dask", "dask-ids"])
def test_a_source_carrying_the_models_ids_releases_as_the_in_memory_grouped_release(rows, where):
    """The honest path: the model's rows with their ids (in memory, a Dask array of rows with in-memory or Dask
    ids) release what the in-memory grouped release does (noise std and covariance, the mean before the seeded
    draw), charged once; its noise covers every person's corners (brute force, nearly tight)."""
    X, Y, _, _ = rows
    model = _fitc(X, Y, IDS)
    source = _source(where, X, Y, IDS)
    accountant = PrivacyAccountant(epsilon=10.0, delta=0.5)
    f_str = quiet(streaming.release_function, model, epsilon=EPS, delta=DELTA, seed=3, source=source,
                  accountant=accountant)
    assert len(accountant.history()) == 1
    f_mem = quiet(model.release_function, epsilon=EPS, delta=DELTA, seed=3)
    a, b = f_mem.release, f_str.release
    assert b.neighbours == a.neighbours == "person (groups, up to 3 rows)"
    np.testing.assert_allclose(b.noise_std, a.noise_std, rtol=1e-6)
    np.testing.assert_allclose(b.noise_factor @ b.noise_factor.T, a.noise_factor @ a.noise_factor.T, rtol=0,
                               atol=1e-6 * np.max(np.abs(a.noise_factor @ a.noise_factor.T)))
    xi, _ = sampling.standard_normal(a.rank, 3)
    np.testing.assert_allclose(b.mean[:, 0] - b.noise_factor @ xi, a.mean[:, 0] - a.noise_factor @ xi, rtol=0,
                               atol=1e-6 * np.max(np.abs(a.mean)))
    latents = quiet(streaming.release_function, model, epsilon=EPS, delta=DELTA, seed=3, source=source,
                    reference_inputs=False)
    s = multiplier(EPS, DELTA)
    worst = worst_person_shift(latents.release.noise_factor, fitc_latent_map(X), IDS)
    assert 0.5 / s <= worst <= (1.0 / s) * (1 + 1e-9), worst * s


# ---------------------------------------------------------------------------------------------
# The attack, several classes: DPSparseMulticlassLaplaceGPC.release_streamed


def test_the_multiclass_order_the_release_used_to_trust_leaves_the_real_persons_uncovered(rows):
    """The multi-class release the old code made from the scattered rows (the model's ids read as the rows'
    ids): some real person's reassignment moves the K classes' release far beyond 1/s."""
    X, _, labels, perm = rows
    wrong = quiet(_multiclass(X[perm], labels[perm], IDS).release, epsilon=EPS, delta=DELTA, seed=2)
    C = sor_weight_map(X[perm], Z)
    whitened = [np.linalg.pinv(np.asarray(c.releases[0].noise_factor)) @ C for c in wrong.classifiers]
    worst = worst_reassignment_shift(whitened, IDS[perm])
    print(f"worst shift x s = {worst * multiplier(EPS, DELTA):.3f}, true epsilon = {true_epsilon(worst, DELTA):.3f}")
    assert worst > 1.3 / multiplier(EPS, DELTA) and true_epsilon(worst, DELTA) > 1.3 * EPS


@pytest.mark.parametrize("where", ["local", "dask"])
@pytest.mark.parametrize("source_ids", ["none", "their own"])
def test_a_multiclass_source_in_another_order_is_refused_with_nothing_drawn(rows, where, source_ids, draws):
    """release_streamed from the scattered rows, without ids or with their own ids (not the model's row for row):
    refused in one line before anything is reserved or drawn; were it accepted, its noise would have to cover
    every real person's reassignment (the failure before the fix: accepted, true epsilon above 1.3)."""
    X, _, labels, perm = rows
    ids = None if source_ids == "none" else IDS[perm]
    source = _source(where, X[perm], labels[perm], ids)
    accountant = PrivacyAccountant(epsilon=10.0, delta=0.5)
    try:
        released = quiet(_multiclass(X, labels, IDS).release_streamed, epsilon=EPS, delta=DELTA, seed=2,
                         source=source, accountant=accountant)
    except ValueError as exc:
        _nothing_spent(accountant)
        assert draws == []
        assert ("pass groups= to the source" if ids is None else "differ from the model's groups") in str(exc)
    else:
        C = sor_weight_map(X[perm], Z)
        whitened = [np.linalg.pinv(np.asarray(c.releases[0].noise_factor)) @ C for c in released.classifiers]
        worst = worst_reassignment_shift(whitened, IDS[perm])
        assert worst <= (1.0 / multiplier(EPS, DELTA)) * (1 + 1e-6), worst
        pytest.fail("accepted a source whose ids are not the model's row for row")


@pytest.mark.parametrize("where", ["local", "dask"])
def test_a_multiclass_source_carrying_the_models_ids_releases_as_the_in_memory_grouped_release(rows, where):
    """The honest path: the model's rows with its ids release, class by class, what the in-memory grouped release
    does, at step multiplier sqrt(min(K, 2g)) s = sqrt(3) s, one ledger event; the noise covers every
    reassignment of every person (brute force)."""
    X, _, labels, _ = rows
    model = _multiclass(X, labels, IDS)
    source = _source(where, X, labels, IDS)
    accountant = PrivacyAccountant(epsilon=10.0, delta=0.5)
    streamed = quiet(model.release_streamed, epsilon=EPS, delta=DELTA, seed=2, source=source, accountant=accountant)
    assert len(accountant.history()) == 1
    in_memory = quiet(model.release, epsilon=EPS, delta=DELTA, seed=2)
    s = multiplier(EPS, DELTA)
    for c, (a, b) in enumerate(zip(in_memory.classifiers, streamed.classifiers)):
        ra, rb = a.releases[0], b.releases[0]
        assert rb.noise_multiplier == pytest.approx(math.sqrt(3.0) * s, rel=1e-9)
        assert rb.neighbours == ra.neighbours == "person (groups, up to 3 rows)"
        np.testing.assert_allclose(rb.noise_std, ra.noise_std, rtol=1e-6)
        xi, _ = sampling.standard_normal(ra.rank, _class_seed(2, c))
        np.testing.assert_allclose(rb.mean[:, 0] - rb.noise_factor @ xi, ra.mean[:, 0] - ra.noise_factor @ xi, rtol=0,
                                   atol=1e-6 * np.max(np.abs(ra.mean)))
    C = sor_weight_map(X, Z)
    whitened = [np.linalg.pinv(np.asarray(c.releases[0].noise_factor)) @ C for c in streamed.classifiers]
    worst = worst_reassignment_shift(whitened, IDS)
    assert 0.3 / s <= worst <= (1.0 / s) * (1 + 1e-6), worst * s


def _class_seed(seed, c):
    from dpgp_gpflow.models.multiclass import class_seed

    return class_seed(seed, K_CLASSES, c)


@pytest.mark.parametrize("where", ["local", "dask"])
@pytest.mark.parametrize("kind", ["regression", "multiclass"])
def test_a_source_in_another_order_carrying_the_models_ids_is_refused(rows, where, kind):
    """The naive fix of the attack: the scattered rows given the model's ids (``groups=model.groups``), which then
    pass the ids' row-for-row check but name the wrong rows. The model holds its public inputs, so the source's
    inputs are checked against them row for row: refused in one line, nothing reserved. (Accepted, the noise would
    not cover the real persons: test_the_order_the_release_used_to_trust_leaves_the_real_persons_uncovered.)"""
    X, Y, labels, perm = rows
    accountant = PrivacyAccountant(epsilon=10.0, delta=0.5)
    if kind == "regression":
        source = _source(where, X[perm], Y[perm], IDS)
        release = lambda: streaming.release_function(_fitc(X, Y, IDS), epsilon=EPS, delta=DELTA, seed=1,  # noqa: E731
                                                     accountant=accountant, source=source)
    else:
        source = _source(where, X[perm], labels[perm], IDS)
        release = lambda: _multiclass(X, labels, IDS).release_streamed(epsilon=EPS, delta=DELTA, seed=1,  # noqa: E731
                                                                       accountant=accountant, source=source)
    first = int(np.flatnonzero(np.any(X[perm] != X, axis=1))[0])
    with pytest.raises(ValueError, match=rf"inputs differ from the model's at row {first}\b"):
        quiet(release)
    _nothing_spent(accountant)
