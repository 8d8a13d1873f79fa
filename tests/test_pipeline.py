"""The one release path: every entry point reserves the budget before anything is drawn, and what
it publishes is frozen."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest
import tensorflow as tf

import dpgp_gpflow as dp
from dpgp_gpflow.baselines import make_bins, release_bin_means
from dpgp_gpflow.models import DPGPR, DPGPRFITC, DPLaplaceGPC, DPSparseLaplaceGPC
from dpgp_gpflow.selection import select_hyperparameters

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")

LO, HI = -2.0, 2.0
#: every model here has hyperparameters chosen a priori (the leak guard refuses undeclared ones)
PUBLIC = dict(hyperparameters_public=True)


def se():
    return gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=1.2)


@pytest.fixture(scope="module")
def toy():
    rng = np.random.default_rng(5)
    X = rng.uniform(0.0, 6.0, (20, 1))
    Y = np.sin(X) + 0.2 * rng.standard_normal((20, 1))
    L = np.where(np.sin(X) > 0, 1.0, -1.0)
    return X, Y, L, np.linspace(0.0, 6.0, 5)[:, None], np.linspace(0.5, 5.5, 4)[:, None]


ENTRY_POINTS = {
    "cloaking": lambda t: DPGPR((t[0], t[1]), se(), y_bounds=(LO, HI), noise_variance=0.1, **PUBLIC).release(
        t[3], epsilon=1.0, delta=1e-3),
    "standard": lambda t: DPGPR((t[0], t[1]), se(), y_bounds=(LO, HI), noise_variance=0.1, **PUBLIC).release(
        t[3], epsilon=1.0, delta=1e-3, mechanism="standard"),
    "fitc-function": lambda t: DPGPRFITC((t[0], t[1]), se(), t[4], noise_variance=0.1, y_bounds=(LO, HI), **PUBLIC)
    .release_function(epsilon=1.0, delta=1e-3),
    "laplace-2-steps": lambda t: DPLaplaceGPC((t[0], t[2]), se(), **PUBLIC).release(epsilon=1.0, delta=1e-3, steps=2),
    "sparse-classifier": lambda t: DPSparseLaplaceGPC((t[0], t[2]), se(), t[4], **PUBLIC).release(epsilon=1.0,
                                                                                                    delta=1e-3),
    "pipeline-at-Xnew-classifier": lambda t: dp.pipeline.release(DPLaplaceGPC((t[0], t[2]), se(), **PUBLIC), t[3],
                                                                 epsilon=1.0, delta=1e-3),
    "selection": lambda t: select_hyperparameters(
        DPGPR((t[0], t[1]), se(), y_bounds=(LO, HI), noise_variance=0.1, **PUBLIC),
        [{".kernel.lengthscales": v} for v in (0.5, 2.0)], epsilon=1.0, folds=2),
    "laplace-bins": lambda t: release_bin_means(t[0], t[1], make_bins(edges=[np.linspace(0, 6, 4)]),
                                                y_bounds=(LO, HI), epsilon=1.0),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_a_refused_budget_draws_no_noise_and_spends_nothing(toy, entry, draws):
    # 0.5 of epsilon is left (and 1e-4 of delta): every entry point asks for epsilon = 1
    acc = dp.PrivacyAccountant(epsilon=1.5, delta=1.1e-3)
    acc.spend(1.0, 1e-3, description="earlier release")
    ledger = acc.ledger
    with acc:
        with pytest.raises(dp.BudgetExceededError):
            ENTRY_POINTS[entry](toy)
    assert draws == [] and acc.ledger == ledger


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_each_entry_point_charges_what_it_draws(toy, entry, draws):
    with dp.PrivacyAccountant(epsilon=10.0, delta=0.5) as acc:
        ENTRY_POINTS[entry](toy)
    steps = 2 if entry == "laplace-2-steps" else 1
    # one ledger event per release, a multi-step one too (its steps compose in Gaussian DP to (1.0, 1e-3))
    assert len(draws) == steps and len(acc.ledger) == 1
    assert acc.spent[0] == pytest.approx(1.0)


def test_a_released_function_does_not_follow_later_training(toy):
    X, Y, _, Xnew, Z = toy
    mean = gpflow.functions.Constant(np.array([0.0]))  # trainable, public at release time
    model = DPGPRFITC((X, Y), se(), Z, noise_variance=0.1, y_bounds=(LO, HI), mean_function=mean, **PUBLIC)
    pf = model.release_function(epsilon=1.0, delta=1e-3, seed=1)
    before = pf.predict(Xnew)
    model.mean_function.c.assign([5.0])
    model.kernel.lengthscales.assign(0.3)
    after = pf.predict(Xnew)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)


def test_released_classifier_does_not_follow_later_training(toy):
    X, _, L, Xnew, _ = toy
    model = DPLaplaceGPC((X, L), se(), **PUBLIC)
    pc = model.release(epsilon=1.0, delta=1e-3, seed=2)
    p_before = pc.predict_y(Xnew)[0]
    model.kernel.lengthscales.assign(0.2)
    np.testing.assert_array_equal(pc.predict_y(Xnew)[0], p_before)


def test_selection_respects_the_leak_guard(toy):
    X, Y, *_ = toy
    model = DPGPR((X, Y), se(), y_bounds=(LO, HI), noise_variance=0.1, **PUBLIC)
    model.training_loss()  # the marginal likelihood of the private outputs: variance and noise now leak
    grid = [{".kernel.lengthscales": v} for v in (0.5, 2.0)]
    with pytest.raises(dp.PrivacyLeakError):
        select_hyperparameters(model, grid, epsilon=1.0, folds=2)
    sel = select_hyperparameters(model, grid, epsilon=1.0, folds=2, hyperparameters_public=True, seed=0)
    assert sel.chosen in grid


def test_outputs_replaced_after_construction_are_clipped_at_release(toy):
    X, Y, _, Xnew, _ = toy
    model = DPGPR((X, Y), se(), y_bounds=(LO, HI), noise_variance=0.1, **PUBLIC)
    clipped = DPGPR((X, np.clip(np.full_like(Y, 1e4), LO, HI)), se(), y_bounds=(LO, HI), noise_variance=0.1, **PUBLIC)
    model.data = (model.data[0], tf.constant(np.full_like(Y, 1e4)))  # the GPflow idiom skips the constructor
    with pytest.warns(dp.ClippingWarning):
        a = model.release(Xnew, epsilon=1.0, delta=1e-3, seed=3)
    b = clipped.release(Xnew, epsilon=1.0, delta=1e-3, seed=3)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-12)  # exactly the release of the clipped outputs
    model.data = (model.data[0], tf.constant(np.full_like(Y, np.nan)))
    with pytest.raises(ValueError, match="not all finite") as info:
        model.release(Xnew, epsilon=1.0, delta=1e-3)
    assert not any(ch.isdigit() for ch in str(info.value))  # no count of the bad outputs


@pytest.mark.parametrize("make", [
    lambda t: DPGPR((t[0], t[1]), se(), y_bounds=(LO, HI), noise_variance=0.1, **PUBLIC),
    lambda t: DPGPRFITC((t[0], t[1]), se(), t[4], noise_variance=0.1, y_bounds=(LO, HI), **PUBLIC),
    lambda t: DPLaplaceGPC((t[0], t[2]), se(), **PUBLIC),
    lambda t: DPSparseLaplaceGPC((t[0], t[2]), se(), t[4], **PUBLIC),
])
def test_bounds_and_data_sensitivity_are_fixed_after_construction(toy, make):
    model = make(toy)
    bounds, d = model.y_bounds, model.data_sensitivity
    with pytest.raises(AttributeError, match="fixed"):
        model.data_sensitivity = 1e-3
    with pytest.raises(AttributeError, match="fixed"):
        model.y_bounds = (0.0, 1e-3)
    assert model.y_bounds == bounds and model.data_sensitivity == d


def test_float32_default_fails_closed_with_a_clear_message(toy):
    X, Y, *_ = toy
    model = DPGPR((X, Y), se(), y_bounds=(LO, HI), noise_variance=0.1, **PUBLIC)
    gpflow.config.set_default_float(np.float32)
    try:
        with pytest.raises(TypeError, match="set_default_float"):
            DPGPR((X, Y), se(), y_bounds=(LO, HI), noise_variance=0.1, **PUBLIC)
        with pytest.raises(TypeError, match="float64"):
            model.release(toy[3], epsilon=1.0, delta=1e-3)
    finally:
        gpflow.config.set_default_float(np.float64)


def test_noise_std_does_not_underflow_far_from_the_data(toy):
    X, Y, *_ = toy
    model = DPGPR((X, Y), se(), y_bounds=(LO, HI), noise_variance=0.1, **PUBLIC)
    far = np.array([[3.0], [3.0 + 1.2 * 30.0]])  # the second is 30 lengthscales from every input
    rel = model.release(far, epsilon=1.0, delta=1e-3, seed=1)
    F = rel.noise_factor.astype(np.longdouble)  # an independent norm in extended precision
    exact = np.sqrt(np.sum(F * F, axis=1)).astype(np.float64)
    assert np.all((rel.noise_std[:, 0] > 0) == (np.abs(rel.noise_factor).max(axis=1) > 0))
    np.testing.assert_allclose(rel.noise_std[:, 0], exact, rtol=1e-12)


AUDITED = {
    "cloaking": lambda t: (DPGPR((t[0], t[1]), se(), y_bounds=(LO, HI), noise_variance=0.1, **PUBLIC), "at"),
    "standard": lambda t: (DPGPR((t[0], t[1]), se(), y_bounds=(LO, HI), noise_variance=0.1, **PUBLIC), "standard"),
    "fitc-function": lambda t: (DPGPRFITC((t[0], t[1]), se(), t[4], noise_variance=0.1, y_bounds=(LO, HI),
                                          **PUBLIC), "fn"),
    "laplace-2-steps": lambda t: (DPLaplaceGPC((t[0], t[2]), se(), **PUBLIC), "steps"),
    "sparse-classifier": lambda t: (DPSparseLaplaceGPC((t[0], t[2]), se(), t[4], **PUBLIC), "cls"),
}


@pytest.mark.parametrize("entry", sorted(AUDITED))
def test_the_user_audit_recovers_the_claimed_privacy(toy, entry):
    model, how = AUDITED[entry](toy)
    kw = dict(epsilon=1.0, delta=1e-3, seed=2)
    released = {"at": lambda: model.release(toy[3], **kw),
                "standard": lambda: model.release(toy[3], mechanism="standard", **kw),
                "fn": lambda: model.release_function(**kw),
                "steps": lambda: model.release(steps=2, **kw),
                "cls": lambda: model.release(**kw)}[how]()
    report = dp.audit(released, model, toy[3] if how in ("at", "standard") else None)
    assert report.passed and report.epsilon <= released.epsilon * (1 + 1e-9)
    if how != "standard":  # cloaking is tight; Hall et al.'s RKHS bound is an upper bound over more than neighbours
        assert report.epsilon == pytest.approx(released.epsilon, rel=1e-5)
    assert report.delta == pytest.approx(released.delta)


def test_the_user_audit_catches_too_little_noise(toy):
    model = DPGPR((toy[0], toy[1]), se(), y_bounds=(LO, HI), noise_variance=0.1, **PUBLIC)
    rel = model.release(toy[3], epsilon=1.0, delta=1e-3, seed=2)
    from dataclasses import replace

    weak = replace(rel, noise_factor=0.5 * rel.noise_factor)  # half the noise it claims
    report = dp.audit(weak, model, toy[3])
    assert not report.passed and report.epsilon > 1.5
    C = dp.cloaking_matrix(model, toy[3]).numpy()
    terms = dict(data_sensitivity=model.data_sensitivity,
                 offset=model.release_terms(tf.constant(toy[3])).offset.numpy())
    assert dp.privacy_audit.audit_release(rel, C, **terms).passed
    assert not dp.privacy_audit.audit_release(rel, 1.1 * C, **terms).passed  # a map 10% larger than the noise covers


def test_non_finite_latent_terms_are_refused_before_any_budget_is_held(toy, draws, monkeypatch):
    """release_function reads and checks the public latent terms before reserving: a model whose map
    is not finite (here a kernel gone to inf) is refused with nothing drawn, held or spent."""
    X, Y, _, _, Z = toy
    model = DPGPRFITC((X, Y), se(), Z, noise_variance=0.1, y_bounds=(LO, HI), **PUBLIC)
    terms = model.latent_terms()
    bad = np.array(dp.contract.dense_map(terms.map))
    bad[0, 0] = np.inf
    readout = model.public_readout()
    monkeypatch.setattr(model, "latent_terms_and_readout", lambda: (terms._replace(map=tf.constant(bad)), readout))
    with dp.PrivacyAccountant(epsilon=5.0, delta=1e-2) as acc:
        with pytest.raises(ValueError, match="not finite"):
            model.release_function(epsilon=1.0, delta=1e-3)
    assert draws == [] and len(acc.ledger) == 0 and acc.spent == (0.0, 0.0)


def test_a_classifier_release_through_the_pipeline_is_marked_and_refuses_clipping(toy):
    """Every classifier release leaves the pipeline marked as a classifier's latent values, also one made by
    dp.pipeline.release at new inputs (not through DPLaplaceGPC.release): its y_bounds are the labels' and
    do not bound the latents, so clipped() is refused. A regression release is not marked and clips."""
    X, Y, L, Xnew, Z = toy
    rel = dp.pipeline.release(DPLaplaceGPC((X, L), se(), hyperparameters_public=True), Xnew, epsilon=1.0,
                              delta=1e-3, seed=1)
    assert rel.classifier_latent and rel.y_bounds == (-1.0, 1.0)
    with pytest.raises(ValueError, match="classifier's latent values"):
        rel.clipped()
    fn = dp.pipeline.release_function(DPSparseLaplaceGPC((X, L), se(), Z, hyperparameters_public=True),
                                      epsilon=1.0, delta=1e-3, seed=1)
    assert fn.release.classifier_latent  # a bare PrivateFunction, not a PrivateClassifier: the pipeline marked it
    with pytest.raises(ValueError, match="classifier's latent values"):
        fn.release.clipped()
    regression = DPGPR((X, Y), se(), y_bounds=(LO, HI), noise_variance=0.1, hyperparameters_public=True).release(
        Xnew, epsilon=1.0, delta=1e-3, seed=1)
    assert not regression.classifier_latent and regression.clipped().clip_to_bounds


def test_a_non_zero_latent_offset_is_refused_in_reference_coordinates(toy, draws, monkeypatch):
    """A release in reference coordinates publishes R B y plus the latents' offset unmapped, right only for
    a zero offset (every model's): a non-zero one is refused from the public terms, before any budget is
    held. Without reference inputs the offset is released as it is."""
    X, Y, _, Xnew, Z = toy
    model = DPGPRFITC((X, Y), se(), Z, noise_variance=0.1, y_bounds=(LO, HI), hyperparameters_public=True)
    terms, readout = model.latent_terms_and_readout()
    assert not np.any(terms.offset.numpy())  # the assumption holds for the models as they are
    offset = tf.constant(np.linspace(0.5, 1.5, int(terms.offset.shape[0])))
    zero = dp.pipeline.release_function(model, epsilon=1.0, delta=1e-3, seed=3)  # the latents themselves
    del draws[:]  # count from here
    monkeypatch.setattr(model, "latent_terms_and_readout", lambda: (terms._replace(offset=offset), readout))
    with dp.PrivacyAccountant(epsilon=5.0, delta=1e-2) as acc:
        with pytest.raises(ValueError, match="non-zero offset"):
            model.release_function(epsilon=1.0, delta=1e-3, reference_inputs=Xnew)
        with pytest.raises(ValueError, match="non-zero offset"):
            model.release_function(epsilon=1.0, delta=1e-3)  # the training inputs are the default reference
        assert draws == [] and len(acc.ledger) == 0 and acc.spent == (0.0, 0.0) and acc.held == (0.0, 0.0)
        shifted = dp.pipeline.release_function(model, epsilon=1.0, delta=1e-3, seed=3)  # no reference: offset as is
    np.testing.assert_allclose(shifted.release.mean, zero.release.mean + np.reshape(offset.numpy(), (-1, 1)), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(shifted.release.noise_factor, zero.release.noise_factor)
    assert len(acc.ledger) == 1 and len(draws) == 1


COUNTED = ("validate_epsilon", "validate_delta", "gaussian_multiplier", "reserve")


@pytest.mark.parametrize("how", ["at", "standard", "function", "reference"])
def test_one_validation_and_one_reservation_per_release(toy, monkeypatch, how):
    """issue 27 item 1: a warm model release validates (epsilon, delta), computes the multiplier and
    reserves the budget once; the mechanism receives the request and the reservation. Counted wherever
    the pipeline and the mechanisms look these names up, and every Reservation actually held."""
    from collections import Counter

    from dpgp_gpflow import accounting, measurement, pipeline
    from dpgp_gpflow.mechanisms import cloaking, request, standard

    X, Y, _, Xnew, Z = toy
    model = DPGPR((X, Y), se(), y_bounds=(LO, HI), noise_variance=0.1, hyperparameters_public=True) \
        if how in ("at", "standard") else DPGPRFITC((X, Y), se(), Z, noise_variance=0.1, y_bounds=(LO, HI),
                                                     hyperparameters_public=True)
    release = {"at": lambda: model.release(Xnew, epsilon=1.0, delta=1e-3, seed=2),
               "standard": lambda: model.release(Xnew, epsilon=1.0, delta=1e-3, seed=2, mechanism="standard"),
               "function": lambda: model.release_function(epsilon=1.0, delta=1e-3, seed=2),
               "reference": lambda: model.release_function(epsilon=1.0, delta=1e-3, seed=2, reference_inputs=Xnew)}[how]
    release()  # warm: compiled stages traced
    counts: Counter = Counter()

    def counting(module, name):
        original = getattr(module, name)

        def wrapper(*args, **kwargs):
            counts[name] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    for module in (pipeline, measurement, request, cloaking, standard):  # measure reserves (issue 35 item 1)
        for name in COUNTED:
            if hasattr(module, name):
                counting(module, name)
    held = accounting.Reservation.__init__

    def holding(self, *args, **kwargs):
        counts["held"] += 1
        held(self, *args, **kwargs)

    monkeypatch.setattr(accounting.Reservation, "__init__", holding)
    with dp.PrivacyAccountant(epsilon=2.0, delta=1e-2) as acc:
        release()
    assert dict(counts) == {name: 1 for name in (*COUNTED, "held")}
    assert len(acc.ledger) == 1 and acc.spent == pytest.approx((1.0, 1e-3))


# Every cloaking release path, called with extra options: an invalid rtol or tol is refused by the one
# validation (mechanisms.release_request) before anything is reserved.
OPTION_PATHS = {
    "cloaking": lambda t, **o: DPGPR((t[0], t[1]), se(), y_bounds=(LO, HI), noise_variance=0.1, **PUBLIC)
    .release(t[3], epsilon=1.0, delta=1e-3, **o),
    "fitc-function": lambda t, **o: DPGPRFITC((t[0], t[1]), se(), t[4], noise_variance=0.1, y_bounds=(LO, HI),
                                              **PUBLIC).release_function(epsilon=1.0, delta=1e-3, **o),
    "fitc-streamed": lambda t, **o: dp.streaming.release_function(
        DPGPRFITC((t[0], t[1]), se(), t[4], noise_variance=0.1, y_bounds=(LO, HI), **PUBLIC), epsilon=1.0,
        delta=1e-3, **o),
    "laplace-2-steps": lambda t, **o: DPLaplaceGPC((t[0], t[2]), se(), **PUBLIC).release(epsilon=1.0, delta=1e-3,
                                                                                         steps=2, **o),
    "sparse-classifier": lambda t, **o: DPSparseLaplaceGPC((t[0], t[2]), se(), t[4], **PUBLIC).release(
        epsilon=1.0, delta=1e-3, **o),
    "sparse-classifier-streamed": lambda t, **o: dp.streaming.release_function(
        DPSparseLaplaceGPC((t[0], t[2]), se(), t[4], **PUBLIC), epsilon=1.0, delta=1e-3, **o),
    "cloaking_release": lambda t, **o: dp.mechanisms.cloaking_release(
        tf.constant(np.eye(3)), tf.constant(np.array([0.5, -0.5, 1.0])), tf.zeros(3, tf.float64),
        tf.zeros(3, tf.float64), data_sensitivity=1.0, output_bound=1.0, epsilon=1.0, delta=1e-3, **o),
}
BAD_OPTIONS = [dict(rtol=-1.0), dict(rtol=-1.0, objective="entropy"), dict(rtol=float("nan"), objective="entropy"),
               dict(rtol=1.0, objective="entropy"), dict(rtol=True), dict(tol=float("nan")), dict(tol=-1.0),
               dict(tol=0.0), dict(tol=float("inf")), dict(tol=None), dict(tol="1e-3")]


@pytest.mark.parametrize("entry", sorted(OPTION_PATHS))
def test_a_meaningless_rtol_or_tol_is_refused_before_anything_is_reserved(toy, entry, draws):
    """rtol outside [0, 1) (or below the mse floor, or not a real number) and a tol that is not a finite
    number > 0: refused naming the option, with nothing drawn, held, cancelled or spent. A valid rtol and
    tol release, their tol in the certificate."""
    acc = dp.PrivacyAccountant(epsilon=50.0, delta=0.5)
    for options in BAD_OPTIONS:
        key = "rtol" if "rtol" in options else "tol"
        with pytest.raises((ValueError, TypeError), match=rf"^{key}[ =]"):
            OPTION_PATHS[entry](toy, accountant=acc, seed=1, **options)
    assert draws == [] and acc.history() == [] and acc.spent == (0.0, 0.0) and acc.held == (0.0, 0.0)
    released = OPTION_PATHS[entry](toy, accountant=acc, seed=1, rtol=1e-3, tol=1e-5)
    rel = getattr(released, "release", released)
    rel = rel[-1] if isinstance(rel, (list, tuple)) else rel
    assert rel.certificate.tol == 1e-5 and len(acc.history()) >= 1 and acc.spent[0] == pytest.approx(1.0)
