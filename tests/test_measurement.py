"""The one routine that runs a release (dpgp_gpflow.measurement): order, refusals, and no release uncharged."""

import functools

import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow.mechanisms import release_request
from dpgp_gpflow.measurement import Measurement, SensitivityPath, measure

#: A measurement of one output of one row (every measurement states its path)
RowMeasurement = functools.partial(Measurement, path=SensitivityPath())


def _request():
    return release_request(1.0, 1e-3, objective=None)


def test_checks_run_before_anything_is_reserved():
    order = []

    def refuse():
        order.append("check")
        raise ValueError("refused")

    def mechanism(reservation):  # pragma: no cover - must not run
        order.append("mechanism")

    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with pytest.raises(ValueError, match="refused"):
        measure(RowMeasurement(_request(), "row", mechanism, checks=(refuse,)), acc)
    assert order == ["check"]
    assert acc.history() == [] and acc.held == (0.0, 0.0)


def test_the_mechanism_runs_inside_one_reservation_and_its_commit_is_charged():
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    seen = {}

    def mechanism(reservation):
        seen["held"] = acc.held
        reservation.commit("drawn")
        return "result"

    assert measure(RowMeasurement(_request(), "row", mechanism), acc) == "result"
    assert seen["held"][0] == pytest.approx(1.0)
    assert acc.spent[0] == pytest.approx(1.0) and acc.held == (0.0, 0.0)
    assert [e["description"] for e in acc.history()] == ["drawn"]


def test_a_mechanism_that_fails_charges_nothing():
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)

    def mechanism(reservation):
        raise FloatingPointError("no draw")

    with pytest.raises(FloatingPointError):
        measure(RowMeasurement(_request(), "row", mechanism), acc)
    assert acc.spent == (0.0, 0.0) and acc.held == (0.0, 0.0)


def test_a_mechanism_that_returns_uncharged_is_refused():
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with pytest.raises(RuntimeError, match="uncommitted"):
        measure(RowMeasurement(_request(), "row", lambda reservation: "published?"), acc)
    assert acc.spent == (0.0, 0.0) and acc.held == (0.0, 0.0)


def test_over_budget_is_refused_before_the_mechanism():
    acc = dp.PrivacyAccountant(epsilon=0.5, delta=1e-2)
    ran = []
    with pytest.raises(dp.BudgetExceededError):
        measure(RowMeasurement(_request(), "row", lambda r: ran.append(1)), acc)
    assert ran == [] and acc.spent == (0.0, 0.0)


def test_only_measure_reserves_budget():
    """Every function of the package that calls ``reserve(`` (the accountant's own module aside), by its syntax:
    measure alone (the command line's release and select included, through a store step). A new door fails here."""
    import ast
    from pathlib import Path

    package = Path(dp.__file__).resolve().parent
    sites = set()
    for path in package.rglob("*.py"):
        rel = path.relative_to(package).as_posix()
        if rel == "accounting.py":
            continue
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for call in ast.walk(fn):
                    if isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", "")) == "reserve":
                        sites.add(f"{rel}:{fn.name}")
    assert sites == {"measurement.py:measure"}


def test_a_draw_deferred_by_the_mechanism_is_charged_when_the_result_is_returned():
    # a mechanism that draws through a deferred view and returns: the result exists, so it is charged (before,
    # the draw left nothing "uncommitted" and the reservation gave it back: a result published uncharged)
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)

    def mechanism(reservation):
        reservation.deferred().commit("drawn, not recorded")
        return "result"

    assert measure(RowMeasurement(_request(), "row", mechanism), acc) == "result"
    assert acc.spent[0] == pytest.approx(1.0) and acc.held == (0.0, 0.0)
    assert [e["description"] for e in acc.history()] == ["drawn, not recorded"]


def _two_events():
    from dpgp_gpflow.accounting import PrivacyEvent
    return (PrivacyEvent(0.25, 0.0, "pure", None, "selection"), PrivacyEvent(1.0, 1e-3, "approximate", None, "release"))


def test_a_stored_result_is_charged_after_its_store_step_and_not_before():
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    seen = []

    def mechanism(reservation):
        reservation.commit()  # the selection, drawn
        seen.append(("drawn", acc.spent, acc.held))
        reservation.commit()  # the release, drawn
        return "result"

    def store(result):
        seen.append((result, acc.spent, acc.held))

    assert measure(RowMeasurement(None, "row", mechanism, events=_two_events(), store=store), acc) == "result"
    held = (pytest.approx(1.25), pytest.approx(1e-3))
    assert seen == [("drawn", (0.0, 0.0), held), ("result", (0.0, 0.0), held)]  # held, not spent, until stored
    assert acc.spent == held and acc.held == (0.0, 0.0)
    assert [e["description"] for e in acc.history()] == ["selection", "release"]


def test_a_store_step_that_fails_charges_nothing():
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)

    def mechanism(reservation):
        reservation.commit()
        reservation.commit()
        return "result"

    def full(result):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        measure(RowMeasurement(None, "row", mechanism, events=_two_events(), store=full), acc)
    assert acc.spent == (0.0, 0.0) and acc.held == (0.0, 0.0)
    assert [e["status"] for e in acc.history()] in ([], ["cancelled"] * len(acc.history()))


@pytest.mark.parametrize("records_the_selection", [True, False])
def test_a_stored_release_failing_after_a_draw_charges_what_its_mechanism_records(records_the_selection):
    # the command line's rule: a release refused after a private selection is charged for the selection (the
    # refusal may depend on its choice); a refusal of public values charges nothing. The store never runs.
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    stored = []

    def mechanism(reservation):
        reservation.commit()  # the selection, drawn
        if records_the_selection:
            reservation.commit_drawn()
        raise ValueError("the release is refused")

    with pytest.raises(ValueError, match="refused"):
        measure(RowMeasurement(None, "row", mechanism, events=_two_events(), store=stored.append), acc)
    assert stored == [] and acc.held == (0.0, 0.0)
    assert acc.spent == ((pytest.approx(0.25), 0.0) if records_the_selection else (0.0, 0.0))


def test_a_stored_release_that_returns_with_events_held_is_refused():
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)

    def mechanism(reservation):
        reservation.commit()  # the release never drawn
        return "result"

    with pytest.raises(RuntimeError, match="uncommitted"):
        measure(RowMeasurement(None, "row", mechanism, events=_two_events(), store=lambda result: None), acc)
    assert acc.spent == (0.0, 0.0) and acc.held == (0.0, 0.0)


def test_a_store_step_needs_its_own_reservation():
    from dpgp_gpflow.accounting import reserve

    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    ran = []
    with reserve(acc, _two_events()) as reservation:
        with pytest.raises(TypeError, match="store"):
            measure(RowMeasurement(None, "row", lambda r: ran.append(1), events=_two_events(),
                                store=lambda result: None), reservation)
    assert ran == [] and acc.spent == (0.0, 0.0)


# Step composition (composition.gdp_step_request + measurement.stepwise): the one rule of multi-step releases.

def _gdp_delta(epsilon, mu):
    """Closed-form privacy profile of mu-GDP (Dong, Roth & Su 2022, Cor. 2.13), written here with SciPy."""
    from scipy.stats import norm
    return norm.cdf(-epsilon / mu + mu / 2) - np.exp(epsilon) * norm.cdf(-epsilon / mu - mu / 2)


@pytest.mark.parametrize("count", [2, 3, 10])
def test_steps_compose_in_gdp_to_the_whole_request(count):
    from dpgp_gpflow.calibration import gaussian_multiplier
    from dpgp_gpflow.composition import gdp_step_multiplier, gdp_step_request

    request = release_request(1.0, 1e-3, objective=None)
    step = gdp_step_request(request, gdp_step_multiplier(request.multiplier, count))
    assert step.multiplier == pytest.approx(np.sqrt(count) * request.multiplier, rel=1e-15)
    composed_mu = np.sqrt(count * (1.0 / step.multiplier) ** 2)  # exact GDP composition of the count steps
    assert _gdp_delta(1.0, composed_mu) == pytest.approx(1e-3, rel=1e-6)  # the whole is (1, 1e-3)-DP, tightly
    assert _gdp_delta(step.epsilon, 1.0 / step.multiplier) == pytest.approx(1e-3, rel=1e-6)  # what a step records
    assert (step.delta, step.calibration, step.seed) == (request.delta, request.calibration, request.seed)
    # tighter than basic composition's (epsilon / count, delta / count) per step: less noise for the same budget
    assert step.multiplier < gaussian_multiplier(1.0 / count, 1e-3 / count, "analytic")


def test_one_step_is_the_request_and_classical_steps_are_refused():
    from dpgp_gpflow.composition import gdp_step_multiplier, gdp_step_request

    request = release_request(1.0, 1e-3, objective=None)
    assert gdp_step_request(request, gdp_step_multiplier(request.multiplier, 1)) is request
    classical = release_request(0.5, 1e-3, objective=None, calibration="classical")
    assert gdp_step_request(classical, classical.multiplier) is classical
    with pytest.raises(NotImplementedError, match="analytic"):
        gdp_step_request(classical, gdp_step_multiplier(classical.multiplier, 2))
    with pytest.raises(ValueError, match="count"):
        gdp_step_multiplier(1.0, 0)


@pytest.mark.parametrize("fail_after", [None, 0, 2])
def test_stepwise_charges_the_whole_once_after_a_draw_and_nothing_before(fail_after):
    from dpgp_gpflow.measurement import stepwise

    request = release_request(1.0, 1e-3, objective=None)
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2, composition="gdp")

    def steps(draws):
        for t in range(3):
            if t == fail_after:
                raise FloatingPointError("step failed")
            draws.commit()
        return draws.drawn

    mechanism = stepwise(steps, request.event("a step"), "the whole")
    if fail_after is None:
        assert measure(RowMeasurement(request, "row", mechanism), acc) == 3
    else:
        with pytest.raises(FloatingPointError):
            measure(RowMeasurement(request, "row", mechanism), acc)
    charged = [] if fail_after == 0 else ["the whole"]
    assert [e["description"] for e in acc.history() if e["status"] != "cancelled"] == charged
    assert acc.held == (0.0, 0.0)
    assert acc.spent[0] == pytest.approx(1.0 if charged else 0.0)


# -- the relation a measurement protects (issue 35 item 1): checked against its sensitivity path, recorded by it --

@pytest.mark.parametrize("stated, path", [
    ("row", dict(inputs=True)),  # a whole-row sensitivity must protect whole rows
    ("row (inputs and outputs)", dict()),  # and an outputs-only one must not claim them
    ("row", dict(person_rows=3)),  # a persons sensitivity protects persons
    ("person (groups, up to 2 rows)", dict(person_rows=3)),
    ("row", dict(num_outputs=2)),  # all outputs of a row
])
def test_a_relation_its_sensitivity_does_not_cover_is_refused_before_anything_is_reserved(stated, path):
    from dpgp_gpflow.measurement import SensitivityPath

    def mechanism(reservation):  # pragma: no cover - must not run
        raise AssertionError("the mechanism ran")

    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with pytest.raises(ValueError, match="sensitivity covers"):
        measure(Measurement(_request(), stated, mechanism, path=SensitivityPath(**path)), acc)
    assert acc.history() == [] and acc.held == (0.0, 0.0)


def test_the_recorded_relation_is_the_measurements():
    import dataclasses

    from dpgp_gpflow.measurement import SensitivityPath

    @dataclasses.dataclass(frozen=True)
    class Result:
        neighbours: object = None

    def mechanism(reservation):
        reservation.commit("drawn")
        return Result(neighbours="row")  # what the mechanism wrote is replaced by the measurement's relation

    acc = dp.PrivacyAccountant(epsilon=4.0, delta=1e-2)
    for path, text in [(SensitivityPath(3), "person (groups, up to 3 rows)"),
                       (SensitivityPath(1, 2), "row (2 outputs)"),
                       (SensitivityPath(2, 1, True), "person (groups, up to 2 rows) (inputs and outputs)")]:
        assert measure(Measurement(_request(), text, mechanism, path=path), acc).neighbours == text
    assert len(acc.history()) == 3


def test_a_model_release_records_its_measurements_relation(monkeypatch):
    import gpflow

    from dpgp_gpflow import pipeline

    seen = []
    monkeypatch.setattr(pipeline, "measure", lambda m, acc=None: seen.append(m) or measure(m, acc))
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 5.0, (12, 1))
    Y = rng.uniform(0.0, 1.0, (12, 1))
    groups = np.repeat(np.arange(4), 3)  # four persons of three rows
    model = dp.models.DPGPR((X, Y), gpflow.kernels.SquaredExponential(), y_bounds=(0.0, 1.0), noise_variance=0.5,
                            hyperparameters_public=True, groups=groups)
    rel = model.release(np.linspace(0.0, 5.0, 4)[:, None], epsilon=1.0, delta=1e-3, seed=1)
    assert seen[0].path == (3, 1, False, False) and seen[0].relation == "person (groups, up to 3 rows)"
    assert rel.neighbours == "person (groups, up to 3 rows)"


def test_a_measurement_must_state_its_sensitivity_path():
    """``path`` is required (by keyword): a new release cannot forget what its sensitivity covers."""
    with pytest.raises(TypeError, match="path"):
        Measurement(_request(), "row", lambda reservation: None)  # type: ignore[call-arg]
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with pytest.raises(TypeError, match="SensitivityPath"):  # nor state something else
        measure(Measurement(_request(), "row", lambda reservation: None, path=None), acc)  # type: ignore[arg-type]
    assert acc.history() == [] and acc.held == (0.0, 0.0)


def test_a_result_recording_another_relation_than_its_measurement_is_not_published():
    """A result that records its relation itself (a property, not a field) must record the measurement's: one that
    says another is a defect, refused after its draw (what was drawn stays charged; nothing is returned)."""

    class Result:
        neighbours = "row"  # not what the measurement protects

    def mechanism(reservation):
        reservation.commit("drawn")
        return Result()

    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with pytest.raises(RuntimeError, match="records the relation 'row'"):
        measure(Measurement(_request(), "person (groups, up to 2 rows)", mechanism, path=SensitivityPath(2)), acc)
    assert [e["status"] for e in acc.history()] == ["committed"] and acc.held == (0.0, 0.0)
    Result.neighbours = "person (groups, up to 2 rows)"
    assert isinstance(measure(Measurement(_request(), Result.neighbours, mechanism, path=SensitivityPath(2)), acc),
                      Result)


@pytest.mark.parametrize("piece", ["kernel", "mean function"])
def test_a_file_piece_no_release_file_holds_is_refused_before_the_checks_and_the_reservation(piece):
    """A measurement names the kernels and mean functions its result's file will hold: measure refuses one the file
    format cannot save (a subclass of a GPflow kernel, a Linear mean function) before its checks, its reservation
    and its mechanism; the same measurement with pieces a file holds runs and is charged once."""
    import gpflow

    class MySE(gpflow.kernels.SquaredExponential):  # its maths may differ: no file holds it
        pass

    bad = MySE() if piece == "kernel" else gpflow.functions.Linear(A=[[0.5]], b=0.1)
    order = []

    def check():
        order.append("check")

    def mechanism(reservation):
        order.append("mechanism")
        reservation.commit("drawn")
        return "released"

    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with pytest.raises(NotImplementedError, match=rf"cannot save a .*(MySE kernel|Linear mean function).*nothing was "
                                                  r"reserved"):
        measure(RowMeasurement(_request(), "row", mechanism, checks=(check,),
                               file_pieces=(gpflow.kernels.Matern32(), None, bad)), acc)
    assert order == [] and acc.history() == [] and acc.held == (0.0, 0.0) and acc.spent == (0.0, 0.0)
    good = (gpflow.kernels.Matern32() + gpflow.kernels.Constant(), gpflow.functions.Constant(0.3), None)
    assert measure(RowMeasurement(_request(), "row", mechanism, checks=(check,), file_pieces=good), acc) == "released"
    assert order == ["check", "mechanism"] and [e["status"] for e in acc.history()] == ["committed"]


def test_only_measure_checks_the_file_pieces():
    """The file-form check of a release's kernels is stated by its measurement (``file_pieces``) and run by measure
    alone: no release path calls ``check_file_pieces`` itself (by syntax, as for ``reserve(``)."""
    import ast
    from pathlib import Path

    package = Path(dp.__file__).resolve().parent
    sites = set()
    for path in package.rglob("*.py"):
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for call in ast.walk(fn):
                    name = getattr(call.func, "id", getattr(call.func, "attr", "")) if isinstance(call, ast.Call) else ""
                    if name == "check_file_pieces":
                        sites.add(f"{path.relative_to(package).as_posix()}:{fn.name}")
    assert sites == {"measurement.py:measure"}


# -- the stated path against the sensitivity the draw is computed over (check_covered, in publish_cloaking) --

def _cloaked(neighbours, seed=1, sampler="exact", epsilon=1.0):
    """A cloaking mechanism over a small public C (k = 3, n = 6) whose sensitivity is bounded over ``neighbours``."""
    import tensorflow as tf

    from dpgp_gpflow.mechanisms.cloaking import cloak

    C = np.array([[0.5, 0.3, 0.1, 0.0, 0.0, 0.1], [0.1, 0.4, 0.4, 0.1, 0.0, 0.0], [0.0, 0.0, 0.1, 0.3, 0.5, 0.2]])
    request = release_request(epsilon, 1e-3, seed=seed, sampler=sampler)

    def mechanism(reservation):
        return cloak(request, reservation, tf.constant(C), np.linspace(-0.5, 0.5, 6), np.zeros(3), np.ones(3),
                     data_sensitivity=2.0, output_bound=1.0, neighbours=neighbours)
    return request, mechanism


@pytest.mark.parametrize("stated, persons", [
    (SensitivityPath(3), None),  # persons of three rows stated, a per-row sensitivity drawn
    (SensitivityPath(), np.repeat(np.arange(3), 2)),  # one row stated, persons of two rows drawn
    (SensitivityPath(2), np.repeat(np.arange(2), 3)),  # persons of two rows stated, of three drawn
    (SensitivityPath(inputs=True), None),  # whole rows stated, the outputs only drawn (was recorded as whole rows)
    (SensitivityPath(2, inputs=True), np.repeat(np.arange(3), 2)),  # whole persons stated, their outputs drawn
])
def test_a_draw_whose_sensitivity_covers_other_persons_than_stated_is_refused_before_the_draw(stated, persons):
    """The path a measurement states is what its release records and is charged as; the draw's sensitivity is bounded
    over the neighbour map it is handed. A mismatch is refused before the draw: nothing charged, nothing returned
    (before, the release was published recording the stated persons over the other sensitivity)."""
    import warnings

    from dpgp_gpflow.neighbours import group_neighbours

    neighbours = None if persons is None else group_neighbours(persons, 6)
    request, mechanism = _cloaked(neighbours)
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with warnings.catch_warnings(record=True) as seen, pytest.raises(ValueError, match="sensitivity was computed over"):
        warnings.simplefilter("always")
        measure(Measurement(request, stated.relation(), mechanism, path=stated), acc)
    assert not [w for w in seen if issubclass(w.category, dp.ReproducibleNoiseWarning)]  # nothing was drawn
    assert acc.spent == (0.0, 0.0) and acc.held == (0.0, 0.0)
    assert all(e["status"] == "cancelled" for e in acc.history())


def _streamed(seed=1):
    """The streamed release (its internal body) of a DPSGPR of 60 rows, one per person, as release_function runs it."""
    import gpflow

    from dpgp_gpflow.models import DPSGPR
    from dpgp_gpflow.streaming.release import cloak_function

    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 10.0, (60, 1))
    model = DPSGPR((X, np.sin(X)), gpflow.kernels.SquaredExponential(lengthscales=2.0), np.linspace(0, 10, 4)[:, None],
                   noise_variance=0.1, y_bounds=(-2.0, 2.0), hyperparameters_public=True)
    request = release_request(1.0, 1e-3, seed=seed)
    return request, lambda reservation: cloak_function(model, request, reservation, chunk_size=60)


def _refused_before_the_draw(measurement, match, epsilon=2.0):
    """``measure`` refuses ``measurement`` (ValueError matching ``match``) before anything is drawn (no noise
    warning) or charged (its one reservation cancelled)."""
    import warnings

    acc = dp.PrivacyAccountant(epsilon=epsilon, delta=1e-2)
    with warnings.catch_warnings(record=True) as seen, pytest.raises(ValueError, match=match):
        warnings.simplefilter("always")
        measure(measurement, acc)
    assert not [w for w in seen if issubclass(w.category, (dp.ReproducibleNoiseWarning, dp.PrivacyLeakWarning))]
    assert acc.spent == (0.0, 0.0) and acc.held == (0.0, 0.0)
    assert [e["status"] for e in acc.history()] == ["cancelled"]


@pytest.mark.parametrize("kind", ["float", "streamed"])
def test_a_float_or_streamed_draw_over_other_persons_than_stated_is_refused_before_the_draw(kind):
    """check_covered in the float sampler's branch and for the streamed query (its persons: the chunks' own): persons
    of 3 rows stated, a per-row sensitivity drawn. Refused before the draw, nothing charged (without the check both
    were published, recording persons of 3 rows)."""
    request, mechanism = _cloaked(None, sampler="float") if kind == "float" else _streamed()
    stated = SensitivityPath(3)
    _refused_before_the_draw(Measurement(request, stated.relation(), mechanism, path=stated),
                             "sensitivity was computed over")


def test_a_draw_over_the_stated_persons_is_published_and_charged_once():
    from dpgp_gpflow.neighbours import group_neighbours

    request, mechanism = _cloaked(group_neighbours(np.repeat(np.arange(3), 2), 6))
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with pytest.warns(dp.ReproducibleNoiseWarning):
        rel = measure(Measurement(request, SensitivityPath(2).relation(), mechanism, path=SensitivityPath(2)), acc)
    assert rel.neighbours == "person (groups, up to 2 rows)" and acc.spent[0] == pytest.approx(1.0)


def test_a_class_step_drawn_over_its_problems_rows_is_published_under_the_label_moves_stated():
    """A several-class release states its rows' labels moved between classes (``classes``); each class's step draws
    over its one-vs-rest problem's rows: the same persons and outputs, so it is published, recorded as stated."""
    request, mechanism = _cloaked(None)
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    stated = SensitivityPath(classes=True)
    with pytest.warns(dp.ReproducibleNoiseWarning):
        rel = measure(Measurement(request, stated.relation(), mechanism, path=stated), acc)
    assert rel.neighbours == stated.relation() == "row, labels moved between classes"
    assert acc.spent[0] == pytest.approx(1.0)


@pytest.mark.parametrize("sampler", ["exact", "float"])
def test_a_draw_with_no_measurement_running_is_refused_before_anything_is_drawn(sampler):
    """The cloaking draw called directly, into a package-issued reservation holding its event (as
    streaming.cloak_function was publicly): nothing compared its sensitivity with a stated path and no release
    check ran (it published and charged). Every draw runs inside measure: RuntimeError, nothing drawn or charged."""
    import warnings

    from dpgp_gpflow.accounting import reserve

    request, mechanism = _cloaked(None, sampler=sampler)
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with warnings.catch_warnings(record=True) as seen, pytest.raises(RuntimeError, match="only inside"):
        warnings.simplefilter("always")
        with reserve(acc, [request.event()]) as reservation:
            mechanism(reservation)
    assert not [w for w in seen if issubclass(w.category, (dp.ReproducibleNoiseWarning, dp.PrivacyLeakWarning))]
    assert acc.spent == (0.0, 0.0) and acc.held == (0.0, 0.0)
    assert [e["status"] for e in acc.history()] == ["cancelled"]


# -- every commit inside a running measurement (the rule at Reservation.commit and StepDraws.commit) --

def test_a_commit_with_no_measurement_running_is_refused_before_anything_is_recorded():
    """A package-issued reservation (and its deferred view, and a multi-step release's StepDraws) committed with no
    measurement running: RuntimeError before anything is recorded or marked drawn; the hold is given back."""
    from dpgp_gpflow.accounting import reserve
    from dpgp_gpflow.measurement import StepDraws

    event = _request().event()
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with reserve(acc, [event, event]) as reservation:
        for commit in (reservation.commit, reservation.deferred().commit):
            with pytest.raises(RuntimeError, match="no measurement is running"):
                commit("drawn outside measure")
        assert reservation.uncommitted == 2 and reservation.commit_drawn() == ()
    assert acc.spent == (0.0, 0.0) and acc.held == (0.0, 0.0)
    assert [e["status"] for e in acc.history()] == ["cancelled", "cancelled"]
    draws = StepDraws(event)
    with pytest.raises(RuntimeError, match="no measurement is running"):
        draws.commit("a step outside measure")
    assert draws.drawn == 0


def test_a_commit_from_a_worker_thread_inside_measure_runs_under_a_context_copied_there():
    """The running measurement is a context variable: a user's mechanism committing from a worker thread is
    refused even inside measure. The message used to claim no measurement was running at all; it now says
    this thread/context and names the way: contextvars.copy_context() taken inside measure, which is accepted
    (one event recorded), while a context copied outside every measurement is still refused."""
    import concurrent.futures
    import contextvars

    request = _request()
    outside = contextvars.copy_context()  # taken with no measurement running

    def committing(context):  # "bare": the worker's own (empty) context; None: one copied inside measure
        def mechanism(reservation):
            ctx = contextvars.copy_context() if context is None else context
            work = functools.partial(reservation.commit, "a worker's draw")
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                pool.submit(work if ctx == "bare" else functools.partial(ctx.run, work)).result()
            return 0.5
        return mechanism

    for context, spent in (("bare", 0.0), (outside, 0.0), (None, 1.0)):
        acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
        measurement = Measurement(request, "row", committing(context), path=SensitivityPath())
        if spent:
            assert measure(measurement, acc) == 0.5
        else:
            with pytest.raises(RuntimeError, match=r"no measurement is running in this thread/context(.|\n)*"
                                                   r"contextvars\.copy_context\(\) taken inside measure"):
                measure(measurement, acc)
        assert acc.spent[0] == pytest.approx(spent) and acc.held == (0.0, 0.0)


def _whole_rows_pieces():
    """A small source (40 rows, 1 input) and the public pieces of its pass (3 features)."""
    import gpflow

    from dpgp_gpflow import whole_rows as wr
    from dpgp_gpflow.streaming import LocalChunks
    from dpgp_gpflow.whole_rows.features import feature_map
    from dpgp_gpflow.whole_rows.statistics import RowStatistics

    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 10.0, (40, 1))
    box = [(0.0, 10.0)]
    kernel = gpflow.kernels.SquaredExponential(lengthscales=4.0)
    rows = RowStatistics(feature_map(kernel, wr.inducing_grid(box, 3), box), box, (-2.0, 2.0))
    return LocalChunks(X, np.sin(X), 20), rows


def _direct_standard(request, reservation):
    from dpgp_gpflow.mechanisms.standard import standard

    return standard(request, reservation, np.zeros(3), np.ones(3), np.eye(3) + 0.5, sensitivity=1.0,
                    data_sensitivity=1.0)


def _direct_statistics(request, reservation):
    from dpgp_gpflow.whole_rows.mechanism import release_statistics

    source, rows = _whole_rows_pieces()
    return release_statistics(request, reservation, source, rows, shares=(0.3, 0.68, 0.02), sensitivity=1.0)


def _direct_histogram(request, reservation):
    from dpgp_gpflow.whole_rows.histogram import CellCounts, release_histogram

    source, rows = _whole_rows_pieces()
    return release_histogram(request, reservation, source, CellCounts(rows, 4), shares=(0.3, 0.68, 0.02),
                             sensitivity=1.0)


def _direct_residual(request, reservation):
    from dpgp_gpflow.measurement import StepDraws
    from dpgp_gpflow.whole_rows.residual_release import draw_residual_stage

    source, rows = _whole_rows_pieces()
    draws = StepDraws(request.event())
    try:
        return draw_residual_stage(draws, source, rows, np.zeros(rows.features.m), 1.0, request, 1.0, "a stage")
    finally:
        assert draws.drawn == 0  # nothing counted as drawn (the release's one event is never committed)


@pytest.mark.parametrize("mechanism", [_direct_standard, _direct_statistics, _direct_histogram, _direct_residual])
def test_a_mechanism_called_directly_with_no_measurement_running_records_nothing(mechanism):
    """The internal drawing functions (mechanisms.standard, the whole-row statistics, histogram and residual stage)
    called directly, into a package-issued reservation holding their event: before, each drew and committed (the
    ledger recorded a release no measurement ran: no checks, no recorded relation). Now their commit refuses:
    RuntimeError, nothing recorded, the result never returned."""
    import warnings

    from dpgp_gpflow.accounting import reserve

    request = release_request(1.0, 1e-3, objective=None, seed=3)
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with warnings.catch_warnings(), pytest.raises(RuntimeError, match="no measurement is running"):
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        with reserve(acc, [request.event()]) as reservation:
            mechanism(request, reservation)
    assert acc.spent == (0.0, 0.0) and acc.held == (0.0, 0.0)
    assert [e["status"] for e in acc.history()] == ["cancelled"]


# -- the event committed is the event drawn (Reservation.expect in publish_cloaking and standard) --

@pytest.mark.parametrize("kind", ["exact", "float", "standard", "whole-row statistics"])
def test_a_mechanism_drawing_at_another_request_than_its_measurements_is_refused_before_the_draw(kind):
    """A hand-written Measurement of a request at epsilon 0.5 whose mechanism draws at epsilon 4 (less noise): before,
    the draw committed the measurement's held event (epsilon 0.5 recorded for an epsilon-4 release). Each of these
    drawing functions (publish_cloaking, standard, the whole-row statistics) now expects its own request's event
    next: ValueError before the draw, nothing charged."""
    path = SensitivityPath(inputs=kind == "whole-row statistics")
    if kind in ("standard", "whole-row statistics"):
        drawn = release_request(4.0, 1e-3, objective=None, seed=3)
        mechanism = functools.partial(_direct_standard if kind == "standard" else _direct_statistics, drawn)
    else:
        drawn, mechanism = _cloaked(None, sampler=kind, epsilon=4.0)
    stated = release_request(0.5, 1e-3, objective=None)
    _refused_before_the_draw(Measurement(stated, path.relation(), mechanism, path=path), "this release charges",
                             epsilon=8.0)
