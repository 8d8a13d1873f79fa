"""Release files are checked for meaning, not only integrity (issue 29, item 4): each case below is an
honest file edited as a forger would, its SHA-256 recomputed with the module's own function, and must be
refused with one ReleaseFileError naming the field. Honest files of every kind still load, and hostile
files (deep nesting, thousands of kernels, duplicate keys, oversize) fail fast."""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys
import time

import gpflow
import numpy as np
import pytest

import dpgp_gpflow as dp
from forgery import forged
from reference import reference_multiplier
from dpgp_gpflow.io import format as release_file, gpflow_specs, loading as publishing
from dpgp_gpflow.models import (
    DPGPR,
    DPGPRFITC,
    DPLaplaceGPC,
    DPMulticlassLaplaceGPC,
    DPSparseLaplaceGPC,
    DPSparseMulticlassLaplaceGPC,
)
from dpgp_gpflow.io.format import ReleaseFileError

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")

LO, HI = -2.0, 2.0
#: Generous limit for "fails fast" / "loads fast" on a busy shared machine (measured: well under 1 s).
FAST = 5.0


def se():
    return gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=1.2)


def basic_steps(model, epsilon, delta, steps, seed):
    """A binary release of ``steps`` Newton steps as written before the one step rule: each step at
    ``(epsilon / steps, delta / steps)`` with its own multiplier, one ledger event each (basic composition)."""
    from dpgp_gpflow.mechanisms import release_request
    from dpgp_gpflow.measurement import Measurement, measure
    from dpgp_gpflow.neighbours import relation, sensitivity_path

    step = release_request(epsilon / steps, delta / steps, seed=seed)
    first = model.first_step()
    return measure(Measurement(step, relation(model), lambda r: model.release_steps(step, r, steps, first),
                               events=(step.event(),) * steps, path=sensitivity_path(model)))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Honest files of every kind: {name: path}."""
    rng = np.random.default_rng(3)
    X = rng.uniform(0.0, 6.0, (20, 1))
    Y = np.sin(X) + 0.2 * rng.standard_normal((20, 1))
    labels = np.where(np.sin(X) > 0, 1.0, -1.0)
    classes = np.clip(np.floor(X[:, 0] / 2.0), 0, 2).astype(int)
    Xs, Z = np.linspace(0.0, 6.0, 5)[:, None], np.linspace(0.5, 5.5, 4)[:, None]
    gpr = DPGPR((X, Y), se(), y_bounds=(LO, HI), noise_variance=0.1, hyperparameters_public=True)
    # the raw files (releases are clipped by default: .unclipped() is the raw DP mean) and the clipped ones
    cloaking = gpr.release(Xs, epsilon=1.0, delta=1e-3, seed=1).unclipped()
    function = DPGPRFITC((X, Y), se() + gpflow.kernels.Matern32(variance=0.3, active_dims=[0]), Z, noise_variance=0.1,
                         y_bounds=(LO, HI), hyperparameters_public=True).release_function(epsilon=1.0, delta=1e-3,
                                                                                          seed=3).unclipped()
    objects = {
        "cloaking": cloaking,
        "cloaking-clipped": cloaking.clipped(),
        "classical": gpr.release(Xs, epsilon=0.5, delta=1e-3, calibration="classical", seed=8).unclipped(),
        "standard": gpr.release(Xs, epsilon=1.0, delta=1e-3, mechanism="standard", seed=2).unclipped(),
        "function": function,
        "function-clipped": function.clipped(),
        "laplace-2-steps": DPLaplaceGPC((X, labels), se(), hyperparameters_public=True).release(
            epsilon=1.0, delta=1e-3, steps=2, seed=4),
        "laplace-2-steps-basic": basic_steps(DPLaplaceGPC((X, labels), se(), hyperparameters_public=True), 1.0, 1e-3,
                                             2, seed=4),
        "sparse-classifier": DPSparseLaplaceGPC((X, labels), se(), Z, hyperparameters_public=True).release(
            epsilon=1.0, delta=1e-3, seed=5),
        # three classes, two Newton steps, persons of two rows (m = min(3, 4) = 3): six releases
        "multiclass": DPMulticlassLaplaceGPC((X, classes), se(), num_classes=3, hyperparameters_public=True,
                                             groups=np.arange(20) // 2).release(epsilon=1.0, delta=1e-3, steps=2,
                                                                               seed=6),
        "sparse-multiclass": DPSparseMulticlassLaplaceGPC((X, classes), se(), Z, num_classes=3,
                                                          hyperparameters_public=True).release(epsilon=1.0, delta=1e-3,
                                                                                               seed=7),
    }
    folder = tmp_path_factory.mktemp("honest")
    return {name: obj.save(folder / f"{name}.json") for name, obj in objects.items()}


def array(raw, name):
    entry = raw["arrays"][name]
    return np.frombuffer(base64.b64decode(entry["data"]), dtype="<f8").reshape(entry["shape"]).copy()


def put(raw, name, values):
    raw["arrays"][name] = release_file.encode_array(np.asarray(values, dtype=np.float64))


def entry(raw, i=0):
    return raw["card"]["releases"][i]


def setter(field, value, i=0, total=True):
    """Set a release's card field (and the card's total epsilon / delta with it, so that only the field is wrong)."""
    def edit(raw):
        entry(raw, i)[field] = value
        if total and field in ("epsilon", "delta") and isinstance(value, (int, float)):
            raw["card"][field] = sum(e[field] for e in raw["card"]["releases"])
    return edit


def scale_noise_std(raw):
    put(raw, "releases/0/noise_std", 1000.0 * array(raw, "releases/0/noise_std"))


def no_noise_columns(raw):
    k = entry(raw)["k"]
    put(raw, "releases/0/noise_factor", np.zeros((k, 0)))
    put(raw, "releases/0/noise_std", np.zeros(k))


def zero_noise(raw):
    put(raw, "releases/0/noise_factor", np.zeros_like(array(raw, "releases/0/noise_factor")))
    put(raw, "releases/0/noise_std", np.zeros(entry(raw)["k"]))


def halve_everything_but_the_multiplier(raw):  # a smaller epsilon claimed for the same noise
    entry(raw)["epsilon"] = raw["card"]["epsilon"] = 0.5


def card_set(**fields):
    """Set fields of the card itself (a multi-class file's whole guarantee)."""
    return lambda raw: raw["card"].update(fields)


def every_release(field, value):
    def edit(raw):
        for e in raw["card"]["releases"]:
            e[field] = value
    return edit


def both(*edits):
    def edit(raw):
        for e in edits:
            e(raw)
    return edit


def smaller_claim_with_its_mu(raw):  # epsilon 0.5 with the mu that goes with it: the steps' noise is too small
    from dpgp_gpflow.calibration import gaussian_multiplier

    raw["card"].update(epsilon=0.5, mu=1.0 / gaussian_multiplier(0.5, 1e-3, "analytic"))


def duplicated_pool_array(raw):  # class 1 reads X from a copy of the shared array: not what the object writes
    j = raw["content"]["classes"][1]["readout_arrays"]["X"]
    raw["arrays"]["readout/99"] = raw["arrays"][f"readout/{j}"]
    raw["content"]["classes"][1]["readout_arrays"]["X"] = 99


NAN, INF = {"$float": "nan"}, {"$float": "inf"}

MEANINGLESS = [  # (honest file, edit, the error must match)
    ("cloaking", setter("epsilon", -1.0), r"card\.releases\[0\]\.epsilon: epsilon must be > 0"),
    ("cloaking", setter("epsilon", 0.0), r"card\.releases\[0\]\.epsilon: epsilon must be > 0"),
    ("cloaking", setter("epsilon", INF, total=False), r"card\.releases\[0\]\.epsilon: epsilon must be finite"),
    ("standard", setter("delta", 5.0), r"card\.releases\[0\]\.delta: delta must be in the open interval \(0, 1\)"),
    ("standard", setter("delta", 0.0), r"card\.releases\[0\]\.delta: delta must be in the open interval"),
    ("cloaking", setter("data_sensitivity", NAN), r"card\.releases\[0\]\.data_sensitivity: .*finite"),
    ("cloaking", setter("data_sensitivity", -4.0), r"card\.releases\[0\]\.data_sensitivity: .*> 0"),
    ("cloaking", setter("sensitivity", NAN), r"card\.releases\[0\]\.sensitivity: sensitivity must be finite"),
    ("cloaking", setter("sensitivity", 0.0), r"card\.releases\[0\]\.sensitivity: sensitivity must be > 0"),
    ("cloaking", setter("sensitivity", 0.5), r"card\.releases\[0\]\.sensitivity 0\.5 is below the data sensitivity"),
    ("cloaking", setter("noise_multiplier", -1.8), r"card\.releases\[0\]\.noise_multiplier: noise_multiplier must be > 0"),
    ("cloaking", setter("noise_multiplier", 18.0), r"card\.releases\[0\]\.noise_multiplier 18\.0 is not the analytic"),
    ("cloaking", halve_everything_but_the_multiplier, r"card\.releases\[0\]\.noise_multiplier .* is not the analytic "
                                                      r"multiplier .* of epsilon 0\.5"),
    ("classical", setter("calibration", "analytic"), r"card\.releases\[0\]\.noise_multiplier .* is not the analytic"),
    ("cloaking", setter("calibration", "classical"), r"card\.releases\[0\]\.noise_multiplier .* is not the classical"),
    ("cloaking", setter("calibration", "magic"), r"card\.releases\[0\]\.calibration: calibration must be one of"),
    ("standard", setter("epsilon", 2.0), r"card\.releases\[0\]\.noise_multiplier"),
    ("cloaking", setter("mechanism", "laplace"), r"card\.releases\[0\]\.mechanism must be one of"),
    ("cloaking", setter("objective", "fastest"), r"card\.releases\[0\]\.objective: objective must be one of"),
    ("standard", setter("objective", "mse"), r"card\.releases\[0\]\.objective: a standard release has no objective"),
    ("cloaking", setter("y_bounds", [2.0, -2.0]), r"card\.releases\[0\]\.y_bounds: y_bounds must satisfy lo < hi"),
    ("cloaking", setter("y_bounds", [-2.0, INF]), r"card\.releases\[0\]\.y_bounds: y_bounds must be finite"),
    ("cloaking", setter("y_bounds", [-0.5, 0.5]), r"card\.releases\[0\]\.data_sensitivity: .*exceeds the width"),
    ("cloaking", setter("rank", 999), r"card\.releases\[0\]\.rank 999 is not the noise_factor's 5 columns"),
    ("cloaking", setter("rank", 0), r"card\.releases\[0\]\.rank 0 is not the noise_factor's"),
    ("cloaking", setter("rtol", -0.01), r"card\.releases\[0\]\.rtol: rtol must be > 0"),
    ("cloaking", setter("bias_bound", -1.0), r"card\.releases\[0\]\.bias_bound must be >= 0"),
    ("cloaking", setter("bias_bound", NAN), r"card\.releases\[0\]\.bias_bound: bias_bound must be finite"),
    ("cloaking", scale_noise_std, r"card\.releases\[0\]: noise_std is not the row norms of noise_factor"),
    ("standard", no_noise_columns, r"card\.releases\[0\]: noise_factor \[5, 0\] has no non-zero column: no noise"),
    ("cloaking", zero_noise, r"card\.releases\[0\]: noise_factor \[5, 5\] has no non-zero column"),
    ("cloaking", setter("rank", "5"), r"card\.releases\[0\]\.rank must be an int"),
    ("cloaking", setter("leak", 1.0), r"card\.releases\[0\]: unknown field\(s\) \['leak'\]"),
    ("cloaking", lambda raw: raw["card"].update(reproducible=False), r"card\.reproducible False is not that of the"),
    ("laplace-2-steps", setter("delta", 0.5, i=1), r"card\.releases\[1\]\.noise_multiplier"),
    ("laplace-2-steps", setter("epsilon", -0.5, i=1), r"card\.releases\[1\]\.epsilon: epsilon must be > 0"),
    # a binary classifier's Newton steps: the whole guarantee recomputed from epsilon, delta and the count of steps
    ("laplace-2-steps", card_set(mu=0.1), r"card\.mu 0\.1 is not 1 / s\(epsilon, delta\)"),
    ("laplace-2-steps", card_set(epsilon=0.5), r"card\.mu .* is not 1 / s\(epsilon, delta\)"),
    ("laplace-2-steps", smaller_claim_with_its_mu, r"card\.releases\[0\]\.noise_multiplier .* is not sqrt\(2\) s"),
    ("laplace-2-steps", card_set(steps=3), r"card\.releases must be a list of steps = 3 releases"),
    ("laplace-2-steps", card_set(steps=1), r"card\.steps must be an integer >= 2"),
    ("laplace-2-steps", card_set(composition="basic"), r"card\.composition must be 'gaussian-dp' or absent"),
    ("laplace-2-steps", card_set(clip_to_bounds=True), r"card\.clip_to_bounds must be false"),
    ("laplace-2-steps", setter("delta", 5e-4, i=0, total=False), r"card\.releases\[0\]\.(noise_multiplier|delta)"),
    ("laplace-2-steps", lambda raw: [raw["card"].pop(k) for k in ("composition", "mu", "steps")],
     r"card\.epsilon 1\.0 is not the total of the releases"),  # the steps' own claims do not sum to it
    ("laplace-2-steps-basic", lambda raw: (smaller_claim_with_its_mu(raw), raw["card"].update(
        epsilon=1.0, composition="gaussian-dp", mu=1.0 / reference_multiplier(1.0, 1e-3), steps=2)),
     r"card\.releases\[0\]\.(noise_multiplier|delta)"),  # an old file cannot claim the tighter rule
    ("function", lambda raw: put(raw, "releases/0/noise_std", 2.0 * array(raw, "releases/0/noise_std")),
     r"card\.releases\[0\]: noise_std is not the row norms"),
    ("sparse-classifier", setter("noise_multiplier", 1.0), r"card\.releases\[0\]\.noise_multiplier 1\.0 is not"),
    # several classes: the whole guarantee is recomputed from epsilon, delta, num_classes, steps, person_rows
    ("multiclass", card_set(mu=0.1), r"card\.mu 0\.1 is not 1 / s\(epsilon, delta\)"),
    ("multiclass", card_set(epsilon=0.5), r"card\.mu .* is not 1 / s\(epsilon, delta\)"),
    ("multiclass", smaller_claim_with_its_mu, r"card\.releases\[0\]\.noise_multiplier .* is not sqrt\(3 x 2\)"),
    ("multiclass", card_set(delta=0.5), r"card\.mu .* is not 1 / s"),
    ("multiclass", card_set(composition="basic"), r"card\.composition must be 'gaussian-dp'"),
    ("multiclass", card_set(num_classes=4), r"card\.releases must be a list of num_classes x steps = 8"),
    ("multiclass", card_set(steps=1), r"card\.releases must be a list of num_classes x steps = 3"),
    ("multiclass", card_set(num_classes=True), r"card\.num_classes must be an integer >= 2"),
    ("multiclass", card_set(classes_moved=2), r"card\.classes_moved 2 is not min\(num_classes, 2 person_rows\) = 3"),
    ("multiclass", card_set(person_rows=1, classes_moved=2, neighbours="row, labels moved between classes"),
     r"card\.releases\[0\]\.noise_multiplier .* is not sqrt\(2 x 2\)"),  # a per-row claim: the noise says persons
    ("multiclass", card_set(neighbours="row"), r"card\.neighbours 'row' is not"),
    ("multiclass", both(card_set(person_rows=5, neighbours="person (groups, up to 5 rows), labels moved between "
                                                              "classes")),
     r"card\.releases\[0\]\.neighbours 'person \(groups, up to 2 rows\)' is not 'person \(groups, up to 5 rows\)'"),
    ("multiclass", setter("delta", 0.5, i=4, total=False), r"card\.releases\[4\]\.noise_multiplier"),
    ("multiclass", card_set(clip_to_bounds=True), r"card\.clip_to_bounds must be false"),
    ("multiclass", card_set(reproducible=False), r"card\.reproducible False is not that of the releases"),
    ("multiclass", every_release("calibration", "classical"), r"card\.releases\[0\]\.noise_multiplier .* is not the "
                                                              r"classical"),
    ("sparse-multiclass", setter("noise_multiplier", 1.0, total=False), r"card\.releases\[0\]\.noise_multiplier 1\.0"),
    ("sparse-multiclass", lambda raw: raw["card"]["releases"].pop(), r"card\.releases must be a list of num_classes x"),
    ("multiclass", lambda raw: raw["content"]["classes"].pop(), r"content\.classes must be a list of 3 classes"),
    ("multiclass", lambda raw: raw["content"]["classes"][2].update(kind="PrivateSparseClassifier"),
     r"content\.classes\[2\]\.kind must be one of"),
    ("multiclass", lambda raw: raw["content"]["classes"][1]["readout_arrays"].update(X=42),
     r"content\.classes\[1\]\.readout_arrays: the file has no array\(s\) \['readout/42'\]"),
    ("multiclass", duplicated_pool_array, r"unknown array\(s\) \['readout/99'\]"),  # stored once, or refused
    ("multiclass", lambda raw: put(raw, "readout/17", np.ones(3)), r"unknown array\(s\) \['readout/17'\]"),
    ("sparse-multiclass", lambda raw: raw["content"]["classes"][0].update(coordinates=True),
     r"content\.classes\[0\]: the file has no array 'classes/0/coordinates'"),
    # nothing unknown is carried
    ("cloaking", lambda raw: put(raw, "releases/0/outputs", np.ones(20)), r"arrays: unknown array\(s\) "
                                                                          r"\['releases/0/outputs'\]"),
    ("function", lambda raw: put(raw, "readout/Y", np.ones(20)), r"unknown array\(s\) \['readout/Y'\]"),
    ("laplace-2-steps", lambda raw: put(raw, "coordinates", np.eye(20)), r"unknown array\(s\) \['coordinates'\]"),
    ("cloaking", lambda raw: raw["content"].update(outputs=[1.0, 2.0]), r"content\.outputs \(unknown field\): not "
                                                                        r"what the loaded PrivateRelease writes"),
    ("function", lambda raw: raw["content"]["readout"]["state"].update(y_mean=0.1),
     r"content\.readout\.state\.y_mean \(unknown field\)"),
]


@pytest.mark.parametrize("name, edit, message", MEANINGLESS, ids=[f"{i}-{c[0]}" for i, c in enumerate(MEANINGLESS)])
def test_a_consistent_forgery_without_meaning_is_refused(files, tmp_path, name, edit, message):
    path = forged(files[name], tmp_path, edit)
    release_file.read(path)  # the hash is right: only the meaning is wrong
    with pytest.raises(ReleaseFileError, match=message) as info:
        dp.load(path)
    assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value)
    if "unknown array" not in message and "content" not in message:  # the card alone is refused as well
        with pytest.raises(ReleaseFileError, match=message):
            publishing.read_card(path)


@pytest.mark.parametrize("name", ["cloaking", "cloaking-clipped", "classical", "standard", "function",
                                  "function-clipped", "laplace-2-steps", "laplace-2-steps-basic", "sparse-classifier",
                                  "multiclass",
                                  "sparse-multiclass"])
def test_honest_files_of_every_kind_still_load(files, tmp_path, name):
    loaded = dp.load(files[name])
    card = publishing.read_card(files[name])
    assert card["epsilon"] == loaded.epsilon and card["clip_to_bounds"] == name.endswith("clipped")
    assert loaded.clip_to_bounds == name.endswith("clipped")
    again = loaded.save(tmp_path / "again.json")
    assert release_file.read(again).arrays.keys() == release_file.read(files[name]).arrays.keys()
    assert dp.load(again).privacy_card() == loaded.privacy_card()


def test_an_old_binary_file_of_basic_steps_still_loads(files):
    """A binary classifier of two Newton steps written before the one step rule (each step at (epsilon / 2,
    delta / 2), no ``composition`` on the card) loads with its basic-composition totals; a new one states the
    Gaussian-DP composition of steps at sqrt(2) s(epsilon, delta)."""
    old, new = dp.load(files["laplace-2-steps-basic"]), dp.load(files["laplace-2-steps"])
    assert "composition" not in old.privacy_card() and (old.epsilon, old.delta) == (1.0, 1e-3)
    for r in old.releases:
        assert (r.epsilon, r.delta) == (0.5, 5e-4)
        assert r.noise_multiplier == pytest.approx(reference_multiplier(0.5, 5e-4), rel=1e-9)
    card = new.privacy_card()
    assert (card["composition"], card["steps"], new.epsilon, new.delta) == ("gaussian-dp", 2, 1.0, 1e-3)
    assert card["mu"] == pytest.approx(1.0 / reference_multiplier(1.0, 1e-3), rel=1e-9)
    for r in new.releases:
        assert r.noise_multiplier == pytest.approx(np.sqrt(2.0) * reference_multiplier(1.0, 1e-3), rel=1e-9)


def test_duplicate_keys_are_refused(files, tmp_path):
    # a parser keeping the first "epsilon" would read 100.0; Python's keeps the last, which the hash covers
    text = files["cloaking"].read_text()
    marker = '\n "card": {\n'
    assert text.count(marker) == 1
    path = tmp_path / "duplicate.json"
    path.write_text(text.replace(marker, marker + '  "epsilon": 100.0,\n'))
    with pytest.raises(ReleaseFileError, match=r"duplicate key 'epsilon' in a JSON object"):
        dp.load(path)
    with pytest.raises(ReleaseFileError, match=r"duplicate key"):
        publishing.read_card(path)


def test_deep_nesting_fails_fast_with_one_line(files, tmp_path):
    def nest(raw):
        deep = {}
        for _ in range(600):
            deep = {"a": deep}
        raw["card"]["note"] = deep

    path = forged(files["cloaking"], tmp_path, nest)
    deeper = tmp_path / "deeper.json"  # beyond the JSON parser's own recursion limit
    deeper.write_text("[" * 100_000 + "]" * 100_000)
    for p in (path, deeper):
        start = time.perf_counter()
        with pytest.raises(ReleaseFileError, match=rf"^{p}: JSON nested deeper than 64 levels$"):
            dp.load(p)
        assert time.perf_counter() - start < FAST


def test_thousands_of_kernels_fail_fast(files, tmp_path):
    raw = json.loads(files["function"].read_text())
    leaf = raw["content"]["readout"]["state"]["kernel"]["kernels"][0]
    for count in (3000, 1_000_000 // len(json.dumps(leaf))):  # 3,000 kernels; a 1 MB file
        def many(raw):
            raw["content"]["readout"]["state"]["kernel"] = {"class": "Sum", "kernels": [copy.deepcopy(leaf)] * count}

        path = forged(files["function"], tmp_path, many)
        start = time.perf_counter()
        with pytest.raises(ReleaseFileError, match=r"content\.readout: a kernel specification may hold at most 64 "
                                                   r"kernels"):
            dp.load(path)
        assert time.perf_counter() - start < FAST, count
    assert path.stat().st_size > 1_000_000


def test_a_honest_megabyte_loads_fast(files, tmp_path):
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 6.0, (20, 1))
    release = DPGPR((X, np.sin(X)), se(), y_bounds=(LO, HI), noise_variance=0.1, hyperparameters_public=True).release(
        np.linspace(0.0, 6.0, 320)[:, None], epsilon=1.0, delta=1e-3, mechanism="standard", seed=1)
    path = release.save(tmp_path / "megabyte.json")
    assert path.stat().st_size > 1_000_000
    dp.load(files["cloaking"])  # TensorFlow's first op is not the file's cost
    start = time.perf_counter()
    loaded = dp.load(path)
    assert time.perf_counter() - start < FAST
    np.testing.assert_array_equal(loaded.noise_factor, release.noise_factor)


def test_an_oversize_file_is_refused_before_it_is_read(files, monkeypatch):
    size = files["cloaking"].stat().st_size
    monkeypatch.setattr(release_file, "MAX_FILE_BYTES", size - 1)
    with pytest.raises(ReleaseFileError, match=rf"may hold at most {size - 1} bytes, this one {size}"):
        dp.load(files["cloaking"])


def test_what_loading_refuses_is_not_written(files, tmp_path):
    release = dp.load(files["cloaking"])
    deep = []
    for _ in range(70):
        deep = [deep]
    with pytest.raises(ValueError, match="nested deeper than 64"):
        release.save(tmp_path / "deep.json", note=deep)
    kernel = gpflow.kernels.Sum([se() for _ in range(65)])
    with pytest.raises(NotImplementedError, match="at most 64 kernels"):
        gpflow_specs.kernel_spec(kernel)
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_dpgp_show_prints_one_line(files, tmp_path):
    path = forged(files["standard"], tmp_path, setter("delta", 5.0))
    code = "import sys, dpgp_gpflow.cli; sys.exit(dpgp_gpflow.cli.main())"
    proc = subprocess.run([sys.executable, "-c", code, "show", str(path)], capture_output=True, text=True,
                          timeout=240, env={"PYTHONWARNINGS": "ignore", "TF_CPP_MIN_LOG_LEVEL": "3",
                                            "PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "card.releases[0].delta: delta must be in the open interval" in lines[0], proc.stderr


def test_the_card_checks_know_exactly_the_kinds_and_fields_loading_builds():
    """io/card.py (no TensorFlow) names the kinds and the certificate's fields; loading builds exactly those."""
    from dpgp_gpflow.noise_planning import OptimiserCertificate
    from dpgp_gpflow.io import card

    assert set(card.CARD_KINDS) == set(publishing.RELEASED_KINDS)
    assert tuple(card.CERTIFICATE_FIELD_TYPES) == OptimiserCertificate._fields


@pytest.mark.parametrize("name", ["cloaking", "function", "multiclass"])
def test_the_card_alone_is_read_without_building_the_object(files, name):
    """read_checked_card: the kind, the card as written and every release's arrays as the file holds them
    (against the file's JSON decoded here)."""
    from dpgp_gpflow.io.card import read_checked_card

    raw = json.loads(files[name].read_text())
    checked = read_checked_card(files[name])
    assert checked.kind == raw["kind"] and checked.card == raw["card"]
    assert len(checked.releases) == len(raw["card"]["releases"]) > 0
    for i, (got, written) in enumerate(zip(checked.releases, raw["card"]["releases"])):
        for array_name in ("mean", "variance", "noise_std", "noise_factor"):
            np.testing.assert_array_equal(got.arrays[array_name], array(raw, f"releases/{i}/{array_name}"))
        assert all(got[field] == written[field] for field in ("epsilon", "delta", "noise_multiplier", "rank",
                                                              "reproducible"))
