"""Every release of the package states its sensitivity path (issue 35 item 1, dpgp_gpflow.measurement).

For each release path, on a small problem: the relation its result (and card) records is the one written here, and
the relation comes from its measurement; and a measurement whose stated path disagrees with the relation it
records is refused before anything is reserved (the accountant holds and spends nothing)."""

from __future__ import annotations

import dataclasses
import warnings

import gpflow
import numpy as np
import pytest
import tensorflow as tf

import dpgp_gpflow as dp
from dpgp_gpflow import measurement
from dpgp_gpflow.measurement import SensitivityPath
from test_cli import _run

EPS, DELTA = 1.0, 1e-3
RNG = np.random.default_rng(5)
X = RNG.uniform(0.0, 6.0, (16, 1))
Y = np.clip(np.sin(X), -1.0, 1.0)
LABELS = np.where(np.sin(X) > 0, 1.0, -1.0)
CLASSES = np.floor(X[:, 0] / 2.0).astype(int).clip(0, 2)
Z = np.linspace(0.5, 5.5, 4)[:, None]
XNEW = np.linspace(0.0, 6.0, 3)[:, None]
PAIRS = np.repeat(np.arange(8), 2)  # eight persons of two rows
BOX = [(0.0, 6.0)]
ROW, PERSONS = "row", "person (groups, up to 2 rows)"
WHOLE = "row (inputs and outputs)"
CLASS = "row, labels moved between classes"
OPEN = dict(hyperparameters_public=True)


def se():
    return gpflow.kernels.SquaredExponential(lengthscales=1.2)


def gpr(groups=None, Y=Y):
    return dp.models.DPGPR((X, Y), se(), y_bounds=(-1.0, 1.0), noise_variance=0.1, groups=groups, **OPEN)


def sgpr(groups=None, **kw):
    return dp.models.DPSGPR((X, Y), se(), Z, y_bounds=(-1.0, 1.0), noise_variance=0.1, groups=groups, **OPEN, **kw)


def _engine(acc):
    from dpgp_gpflow import engine
    from dpgp_gpflow.calibration import gaussian_multiplier

    C = tf.constant(np.random.default_rng(0).standard_normal((3, 16)) / 10)
    plan = engine.noise_plan(C, noise_multiplier=gaussian_multiplier(EPS, DELTA, "analytic"), data_sensitivity=2.0,
                             output_bound=1.0, groups=PAIRS)
    return engine.publish(plan, Y[:, 0], np.zeros(3), np.zeros(3), epsilon=EPS, delta=DELTA, data_sensitivity=2.0,
                          output_bound=1.0, groups=PAIRS, accountant=acc)


def _standard(acc):
    from dpgp_gpflow.mechanisms import standard_release

    return standard_release(np.zeros(3), np.zeros(3), np.eye(3) + 0.5, sensitivity=0.3, data_sensitivity=2.0,
                            epsilon=EPS, delta=DELTA, accountant=acc)


def _cloaking(acc, neighbours=None):
    from dpgp_gpflow.mechanisms import cloaking_release
    from dpgp_gpflow.neighbours import group_neighbours

    C = tf.constant(np.random.default_rng(0).standard_normal((3, 16)) / 10)
    return cloaking_release(C, tf.constant(Y[:, 0]), np.zeros(3), np.zeros(3), data_sensitivity=2.0, output_bound=1.0,
                            epsilon=EPS, delta=DELTA, accountant=acc,
                            neighbours=group_neighbours(PAIRS, 16) if neighbours is None else neighbours)


def _bins(acc):
    from dpgp_gpflow.baselines import make_bins, release_bin_means

    return release_bin_means(X, Y, make_bins(edges=[np.linspace(0.0, 6.0, 4)]), y_bounds=(-1.0, 1.0), epsilon=EPS,
                             accountant=acc)


def _dpsgd(acc):
    from dpgp_gpflow.baselines import DPSGDSVGP

    model = DPSGDSVGP((X, Y), se(), inducing_variable=Z, noise_variance=0.1, x_bounds=BOX, y_bounds=(-1.0, 1.0))
    return model.release_function(epsilon=EPS, delta=DELTA, clip_norm=1.0, sampling_rate=0.5, steps=1,
                                  accountant=acc)


def _selection(acc):
    from dpgp_gpflow.selection import select_hyperparameters

    grid = [{".kernel.lengthscales": 0.5}, {".kernel.lengthscales": 2.0}]
    return select_hyperparameters(gpr(PAIRS), grid, epsilon=0.5, folds=2, epsilon_release=EPS, delta_release=DELTA,
                                  accountant=acc)


#: (the module whose ``measure`` runs the release, the release on an accountant, the relation it records)
PATHS = {
    "release": ("pipeline", lambda acc: gpr().release(XNEW, epsilon=EPS, delta=DELTA, accountant=acc), ROW),
    "release-persons": ("pipeline", lambda acc: gpr(PAIRS).release(XNEW, epsilon=EPS, delta=DELTA, accountant=acc),
                        PERSONS),
    "release-outputs": ("pipeline", lambda acc: gpr(Y=np.hstack([Y, -Y])).release(XNEW, epsilon=EPS, delta=DELTA,
                                                                                    accountant=acc), "row (2 outputs)"),
    "standard": ("pipeline", lambda acc: gpr().release(XNEW, epsilon=EPS, delta=DELTA, mechanism="standard",
                                                       accountant=acc), ROW),
    "release_function": ("pipeline", lambda acc: sgpr(PAIRS).release_function(epsilon=EPS, delta=DELTA,
                                                                              accountant=acc), PERSONS),
    "streamed": ("streaming.release", lambda acc: dp.streaming.release_function(
        sgpr(), epsilon=EPS, delta=DELTA, chunk_size=8, accountant=acc), ROW),
    "engine.publish": ("engine", _engine, PERSONS),
    "standard_release": ("mechanisms.standard", _standard, ROW),
    "cloaking_release": ("mechanisms.cloaking", _cloaking, PERSONS),
    "laplace": ("models.dp_laplace", lambda acc: dp.models.DPLaplaceGPC((X, LABELS), se(), groups=PAIRS,
                                                                        **OPEN).release(
        epsilon=EPS, delta=DELTA, accountant=acc), PERSONS),
    "laplace-steps": ("models.dp_laplace", lambda acc: dp.models.DPLaplaceGPC((X, LABELS), se(), **OPEN).release(
        epsilon=EPS, delta=DELTA, steps=2, accountant=acc), ROW),
    "sparse-laplace": ("pipeline", lambda acc: dp.models.DPSparseLaplaceGPC((X, LABELS), se(), Z, **OPEN).release(
        epsilon=EPS, delta=DELTA, accountant=acc), ROW),
    "multiclass": ("models.multiclass", lambda acc: dp.models.DPMulticlassLaplaceGPC(
        (X, CLASSES), se(), num_classes=3, **OPEN).release(epsilon=EPS, delta=DELTA, accountant=acc), CLASS),
    "sparse-multiclass-streamed": ("models.multiclass", lambda acc: dp.models.DPSparseMulticlassLaplaceGPC(
        (X, CLASSES), se(), Z, num_classes=3, groups=PAIRS, **OPEN).release_streamed(
        epsilon=EPS, delta=DELTA, accountant=acc), "person (groups, up to 2 rows), labels moved between classes"),
    "whole-rows": ("whole_rows.release", lambda acc: sgpr(x_bounds=BOX, private_inputs=True).release_function(
        epsilon=EPS, delta=DELTA, accountant=acc), WHOLE),
    "whole-rows-persons": ("whole_rows.release", lambda acc: sgpr(PAIRS, x_bounds=BOX, private_inputs=True)
                           .release_function(epsilon=EPS, delta=DELTA, accountant=acc),
                           "person (groups, up to 2 rows) (inputs and outputs)"),
    "whole-rows-classifier": ("whole_rows.classification", lambda acc: dp.models.DPSparseLaplaceGPC(
        (X, LABELS), se(), Z, x_bounds=BOX, private_inputs=True, **OPEN).release(epsilon=EPS, delta=DELTA,
                                                                                 accountant=acc), WHOLE),
    "bins": ("baselines.mechanism", _bins, None),
    "dpsgd": ("baselines.dpsgd_svgp", _dpsgd, None),  # its training is slow: recorded below
    "selection": ("selection.select", _selection, PERSONS),
}


def recorded(result) -> set:
    """Every relation ``result`` records: its own and its card's, else each of its releases' card entries (a
    multi-class card states the whole's; its entries, each class's binary problem's)."""
    found = {getattr(result, name) for name in ("neighbours", "relation")
             if isinstance(getattr(result, name, None), str)}
    card = result.privacy_card() if hasattr(result, "privacy_card") else {}
    if "neighbours" in card:
        return found | {card["neighbours"]}
    return found | {entry.get("neighbours") for entry in card.get("releases", [])}


def run(release, acc):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return release(acc)


@pytest.mark.parametrize("name", [n for n, (_, _, r) in PATHS.items() if r is not None])
def test_the_recorded_relation_is_the_paths(name):
    _, release, expected = PATHS[name]
    acc = dp.PrivacyAccountant(epsilon=10.0, delta=0.5)
    assert recorded(run(release, acc)) == {expected}


@pytest.mark.parametrize("name", list(PATHS))
def test_a_path_the_relation_disagrees_with_is_refused_before_anything_is_reserved(monkeypatch, name):
    module, release, _ = PATHS[name]
    import importlib

    real, stated = measurement.measure, []

    def wrong(m, accountant=None):  # the release's own measurement, its path moved to persons of one more row
        stated.append(m.path)
        assert m.path is not None, "this release states no sensitivity path"
        return real(dataclasses.replace(m, path=m.path._replace(person_rows=m.path.person_rows + 1)), accountant)

    monkeypatch.setattr(importlib.import_module(f"dpgp_gpflow.{module}"), "measure", wrong)
    if name == "dpsgd":  # its calibration (seconds) is public and beside the point: refused before any noise
        from dpgp_gpflow.baselines import dpsgd_svgp

        monkeypatch.setattr(dpsgd_svgp, "_noise_multiplier", lambda *args: 50.0)
        monkeypatch.setattr(dpsgd_svgp, "dpsgd_epsilon", lambda *args, **kw: 0.0)
    acc = dp.PrivacyAccountant(epsilon=10.0, delta=0.5)
    with pytest.raises(ValueError, match="sensitivity covers"):
        run(release, acc)
    assert stated and acc.history() == [] and acc.held == (0.0, 0.0) and acc.spent == (0.0, 0.0)


def test_a_dataclass_result_records_the_measurements_relation_in_its_relation_field():
    """DP-SGD's result records its relation in a ``relation`` field: the measurement's, in the package's format."""
    from dpgp_gpflow.baselines import DPSGDSVGPRelease
    from dpgp_gpflow.mechanisms import release_request

    @dataclasses.dataclass(frozen=True)
    class Result:
        relation: str = "row (inputs and outputs), replace one"  # what a mechanism might write

    def mechanism(reservation):
        reservation.commit("drawn")
        return Result()

    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    path = SensitivityPath(inputs=True)
    assert measurement.measure(measurement.Measurement(release_request(EPS, DELTA, objective=None), WHOLE, mechanism,
                                                       path=path), acc).relation == WHOLE
    assert {f.name: f.default for f in dataclasses.fields(DPSGDSVGPRelease)}["relation"] == WHOLE


@pytest.mark.parametrize("name", ["release_function", "laplace", "sparse-laplace"])
def test_a_released_functions_relation_is_its_measurements_not_the_mechanisms(monkeypatch, name):
    """The relation a model's mechanism writes on its releases (pipeline.shaped) is replaced by the
    measurement's: a function's releases record what was checked before the reservation."""
    from dpgp_gpflow import pipeline

    monkeypatch.setattr(pipeline, "relation", lambda model: "row (a stale relation)")
    _, release, expected = PATHS[name]
    assert recorded(run(release, dp.PrivacyAccountant(epsilon=10.0, delta=0.5))) == {expected}


def test_a_neighbour_map_built_by_hand_is_refused_before_anything_is_reserved():
    from dpgp_gpflow.neighbours import Neighbours

    n = 16
    acc = dp.PrivacyAccountant(epsilon=10.0, delta=0.5)
    with pytest.raises(ValueError, match="does not record the persons it protects"):
        _cloaking(acc, Neighbours(np.arange(n), np.arange(n), np.ones(n), n, n))
    assert acc.history() == [] and acc.held == (0.0, 0.0) and acc.spent == (0.0, 0.0)
    # nor can a hand-built map state persons: a per-row map claiming persons of 3 rows would have its card say more
    # than its noise protects (the path is set by group_neighbours / output_neighbours alone)
    with pytest.raises(TypeError):
        Neighbours(np.arange(n), np.arange(n), np.ones(n), n, n, SensitivityPath(3))
    with pytest.raises(ValueError):
        dataclasses.replace(Neighbours(np.arange(n), np.arange(n), np.ones(n), n, n), path=SensitivityPath(3))
    assert acc.history() == []
    # the persons' map records the persons it was built for, and is released as theirs
    from dpgp_gpflow.neighbours import group_neighbours

    assert _cloaking(acc, group_neighbours(np.arange(n) // 3, n)).neighbours == "person (groups, up to 3 rows)"


# -- the command line's releases (one measurement holding the selection, if any, and the release; its file) --

CLI = {
    "sparse-persons": (["--y", "y", "--bounds", "0", "20", "--sparse", "4", "--groups", "person", "--noise", "1"],
                       PERSONS),
    "classes-persons": (["--y", "kind", "--classes", "3", "--sparse", "4", "--groups", "person"],
                        "person (groups, up to 2 rows), labels moved between classes"),
    "whole-rows": (["--y", "y", "--bounds", "0", "20", "--private-inputs", "--x-bounds", "0", "10", "0", "10",
                    "--sparse", "4", "--inducing", "grid", "--noise", "1"], WHOLE),
}


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    import pandas as pd

    d = tmp_path_factory.mktemp("paths")
    rng = np.random.default_rng(4)
    A = np.round(rng.uniform(0.0, 10.0, (20, 2)), 3)
    pd.DataFrame({"a": A[:, 0], "b": A[:, 1], "y": A.sum(axis=1), "kind": np.minimum(A[:, 0] // 3.4, 2).astype(int),
                  "person": np.arange(20) // 2}).to_csv(d / "data.csv", index=False)
    return d


@pytest.mark.parametrize("mode", sorted(CLI))
def test_the_command_lines_release_records_its_path_and_a_wrong_path_reserves_nothing(monkeypatch, table, mode):
    options, expected = CLI[mode]
    ledger = table / f"{mode}.sqlite"
    assert _run(["budget", "init", ledger.name, "--epsilon", "5", "--delta", "0.1"], table)[0] == 0
    argv = ["release", "data.csv", "--x", "a", "b", *options, "--lengthscale", "3", "--variance", "2", "--epsilon",
            EPS, "--delta", DELTA, "--ledger", ledger.name, "--quiet"]
    real, stated = measurement.measure, []

    def wrong(m, accountant=None):  # the command's own measurement (the file's), its path moved
        stated.append(m.path)
        assert m.path is not None, "this release states no sensitivity path"
        return real(dataclasses.replace(m, path=m.path._replace(person_rows=m.path.person_rows + 1)), accountant)

    code, err = _run([*argv, "-o", f"{mode}.json"], table)  # first: the modules it imports are imported
    assert code == 0, err
    assert recorded(dp.load(table / f"{mode}.json")) == {expected}
    before = dp.PrivacyAccountant.open(ledger).history()
    assert len(before) == 1
    with monkeypatch.context() as patch:
        patch.setattr(measurement, "measure", wrong)  # the command imports it when it runs
        code, err = _run([*argv, "-o", "refused.json"], table)
    assert code != 0 and "sensitivity covers" in err and stated and not (table / "refused.json").exists()
    assert dp.PrivacyAccountant.open(ledger).history() == before  # nothing reserved, nothing spent
