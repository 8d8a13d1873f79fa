"""Release files and SavedModel export: every released object saves to one verified JSON file and loads
back into an object that predicts exactly as the original, without the model or the private outputs."""

from __future__ import annotations

import base64
import gc
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import weakref

import gpflow
import numpy as np
import pytest
import tensorflow as tf

import dpgp_gpflow as dp
from dpgp_gpflow.io import card as card_checks, format as release_file, gpflow_specs, loading as publishing
from dpgp_gpflow.models import DPGPR, DPGPRFITC, DPSGPR, DPLaplaceGPC, DPSparseLaplaceGPC
from dpgp_gpflow.released import PrivateClassifier, PrivateFunction, PrivateRelease, Released

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")

LO, HI = -2.0, 2.0
#: every model here has hyperparameters chosen a priori (the leak guard refuses undeclared ones)
PUBLIC = dict(hyperparameters_public=True)


def se():
    return gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=1.2)


def sum_kernel():  # a combination with an active_dims, to exercise the kernel specification
    return se() + gpflow.kernels.Matern32(variance=0.3, lengthscales=2.0, active_dims=[0])


@pytest.fixture(scope="module")
def toy():
    rng = np.random.default_rng(5)
    X = rng.uniform(0.0, 6.0, (20, 1))
    Y = np.sin(X) + 0.2 * rng.standard_normal((20, 1))
    L = np.where(np.sin(X) > 0, 1.0, -1.0)
    return X, Y, L, np.linspace(0.0, 6.0, 5)[:, None], np.linspace(0.5, 5.5, 4)[:, None]


# Each builds its model inside and returns only the released object: the model is gone before any load.
KINDS = {
    "cloaking": lambda t: DPGPR((t[0], t[1]), se(), y_bounds=(LO, HI), noise_variance=0.1, **PUBLIC).release(
        t[3], epsilon=1.0, delta=1e-3, seed=1),
    "standard": lambda t: DPGPR((t[0], t[1]), se(), y_bounds=(LO, HI), noise_variance=0.1, **PUBLIC).release(
        t[3], epsilon=1.0, delta=1e-3, mechanism="standard", seed=2),
    "fitc-function": lambda t: DPGPRFITC((t[0], t[1]), sum_kernel(), t[4], noise_variance=0.1, y_bounds=(LO, HI),
                                         **PUBLIC)
    .release_function(epsilon=1.0, delta=1e-3, seed=3),
    "sgpr-function": lambda t: DPSGPR((t[0], t[1]), se(), t[4], noise_variance=0.1, y_bounds=(LO, HI), **PUBLIC)
    .release_function(epsilon=1.0, delta=1e-3, seed=6),
    "laplace-2-steps": lambda t: DPLaplaceGPC((t[0], t[2]), se(), **PUBLIC).release(epsilon=1.0, delta=1e-3, steps=2,
                                                                                    seed=4),
    "sparse-classifier": lambda t: DPSparseLaplaceGPC((t[0], t[2]), se(), t[4], **PUBLIC).release(
        epsilon=1.0, delta=1e-3, seed=5),
}
EXPECTED = {  # (loaded class, the readout's arrays): nothing else is written
    "cloaking": (PrivateRelease, set()),
    "standard": (PrivateRelease, set()),
    "fitc-function": (PrivateFunction, {"Z", "Luu", "LB"}),
    "sgpr-function": (PrivateFunction, {"Z", "L", "LB"}),
    "laplace-2-steps": (dp.models.PrivateLaplaceClassifier, {"X", "W_diag", "Lk", "LB"}),
    "sparse-classifier": (dp.models.PrivateSparseClassifier, {"Z", "Lmm", "La"}),
}
RELEASE_ARRAYS = ("mean", "variance", "noise_std", "noise_factor")


@pytest.fixture(scope="module")
def released(toy):
    objects = {name: build(toy) for name, build in KINDS.items()}
    gc.collect()  # no model survives: whatever loads below loads without one
    return objects


@pytest.fixture(scope="module")
def saved(released, toy, tmp_path_factory):
    folder = tmp_path_factory.mktemp("releases")
    paths = {}
    for name, obj in released.items():
        paths[name] = obj.save(folder / f"{name}.json", inputs=toy[3] if isinstance(obj, PrivateRelease) else toy[0],
                               dataset="toy")
    return paths


def query_inputs():
    return np.linspace(-2.0, 8.0, 11)[:, None]  # inside and far outside the data


def assert_same_release(a: PrivateRelease, b: PrivateRelease) -> None:
    for name in RELEASE_ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), name
    for name in ("epsilon", "delta", "data_sensitivity", "sensitivity", "noise_multiplier", "calibration",
                 "objective", "certificate", "mechanism", "rank", "rtol", "bias_bound", "reproducible", "y_bounds"):
        assert getattr(a, name) == getattr(b, name), name


@pytest.mark.parametrize("name", sorted(KINDS))
def test_round_trip_gives_identical_arrays_card_and_predictions(name, released, saved, toy):
    original = released[name]
    loaded = dp.load(saved[name])
    cls, readout_arrays = EXPECTED[name]
    assert type(loaded) is cls and repr(loaded) == repr(original)
    assert len(loaded.releases) == len(original.releases) == (2 if name == "laplace-2-steps" else 1)
    for a, b in zip(original.releases, loaded.releases):
        assert_same_release(a, b)
    assert loaded.privacy_card() == original.privacy_card()
    assert (loaded.epsilon, loaded.delta, loaded.reproducible) == (original.epsilon, original.delta, True)

    document = release_file.read(saved[name])
    assert document.kind == cls.__name__
    names = {f"releases/{i}/{a}" for i in range(len(original.releases)) for a in RELEASE_ARRAYS}
    names |= {f"readout/{a}" for a in readout_arrays}
    if isinstance(original, PrivateFunction) and original.coordinates is not None:
        names.add("coordinates")
    assert set(document.arrays) == names  # the documented layout, and nothing else (no outputs, no labels)

    if not isinstance(original, PrivateFunction):
        return
    assert (original.coordinates is None) == (loaded.coordinates is None)
    if original.coordinates is not None:
        np.testing.assert_array_equal(loaded.coordinates.numpy(), original.coordinates.numpy())
    Xq = query_inputs()
    for a, b in zip(original.predict(Xq), loaded.predict(Xq)):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=0.0)
    for a, b in zip(original.predict_f(Xq), loaded.predict_f(Xq)):  # NumPy [k, P], as GPflow's shapes
        assert isinstance(b, np.ndarray) and b.shape == (Xq.shape[0], 1)
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=0.0)
    if isinstance(original, PrivateClassifier):
        for a, b in zip(original.predict_y(Xq), loaded.predict_y(Xq)):
            assert isinstance(b, np.ndarray) and b.shape == (Xq.shape[0], 1)
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=0.0)
        np.testing.assert_array_equal(loaded.predict_class(Xq), original.predict_class(Xq))
    if name == "laplace-2-steps":
        np.testing.assert_array_equal(loaded.W_diag, original.W_diag)
        np.testing.assert_array_equal(loaded.latent, original.latent)
        np.testing.assert_array_equal(document.arrays["readout/X"], toy[0])  # public inputs, said in the docs
    if name == "sparse-classifier":
        np.testing.assert_array_equal(loaded.weights, original.weights)
        np.testing.assert_array_equal(loaded.inducing_inputs, original.inducing_inputs)


def test_loading_never_needs_the_model(toy, tmp_path):
    X, Y, _, _, Z = toy
    model = DPGPRFITC((X, Y), se(), Z, noise_variance=0.1, y_bounds=(LO, HI), **PUBLIC)
    pf = model.release_function(epsilon=1.0, delta=1e-3, seed=7)
    expected = pf.predict(query_inputs())
    path = pf.save(tmp_path / "function.json")
    gone = weakref.ref(model)
    del model, pf
    gc.collect()
    assert gone() is None  # the model and the original function are gone: only the file is left
    for a, b in zip(expected, dp.load(path).predict(query_inputs())):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=0.0)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_the_card_is_the_privacy_card_with_provenance(name, released, saved, toy):
    card = publishing.read_card(saved[name])
    original = released[name]
    expected = json.loads(json.dumps(original.privacy_card()))  # plain JSON values
    assert {k: card[k] for k in expected} == expected
    entry = card["releases"][-1]
    last = original.releases[-1]
    assert entry["noise_multiplier"] == last.noise_multiplier and entry["sensitivity"] == last.sensitivity
    assert entry["k"] == last.mean.size and entry["y_bounds"] == list(last.y_bounds)
    if last.mechanism == "standard":
        assert entry["certificate"] is None and entry["objective"] is None
    else:
        assert entry["certificate"]["converged"] == last.certificate.converged
    assert card["software"]["dpgp_gpflow"] == dp.__version__
    assert card["software"]["gpflow"] == gpflow.__version__ and card["software"]["tensorflow"] == tf.__version__
    assert card["created"].endswith("Z") and card["dataset"] == "toy"
    inputs = toy[3] if isinstance(original, PrivateRelease) else toy[0]
    assert card["inputs_hash"] == release_file.inputs_hash(inputs)
    header = f"float64[{inputs.shape[0]},{inputs.shape[1]}]".encode()
    assert card["inputs_hash"] == hashlib.sha256(header + inputs.astype("<f8").tobytes()).hexdigest()


def test_arrays_follow_the_documented_layout(saved, released):
    raw = json.loads(saved["fitc-function"].read_text())
    assert raw["format"] == "dpgp_gpflow.release" and raw["format_version"] == 1 and raw["kind"] == "PrivateFunction"
    entry = raw["arrays"]["releases/0/noise_factor"]
    expected = released["fitc-function"].release.noise_factor
    assert entry["dtype"] == "float64" and entry["shape"] == list(expected.shape)
    decoded = np.frombuffer(base64.b64decode(entry["data"]), dtype="<f8").reshape(entry["shape"])
    np.testing.assert_array_equal(decoded, expected)
    body = {k: v for k, v in raw.items() if k != "sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    assert raw["sha256"] == hashlib.sha256(canonical.encode("ascii")).hexdigest()
    state = raw["content"]["readout"]["state"]
    assert raw["content"]["readout"]["kind"] == "FITCReadout"
    assert state["kernel"]["class"] == "Sum" and state["mean_function"] == {"class": "Constant", "c": [0.0]}
    matern = state["kernel"]["kernels"][1]  # values as GPflow holds them (0.3 through softplus: 0.30000000000000004)
    assert matern["class"] == "Matern32" and matern["active_dims"] == [0]
    assert matern["parameters"] == {"variance": pytest.approx(0.3, rel=1e-15), "lengthscales": pytest.approx(2.0)}


def test_reindenting_keeps_the_file_valid(saved, tmp_path):
    raw = json.loads(saved["standard"].read_text())
    path = tmp_path / "compact.json"
    path.write_text(json.dumps(dict(reversed(list(raw.items())))))  # other whitespace and key order
    assert_same_release(dp.load(path), dp.load(saved["standard"]))


def _edited(source, tmp_path, edit, rehash=False):
    raw = json.loads(source.read_text())
    edit(raw)
    if rehash:  # a forger's (or a future version's) consistent file
        raw["sha256"] = hashlib.sha256(release_file.canonical_bytes(raw)).hexdigest()
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(raw, indent=1))
    return path


def test_a_tampered_file_is_refused(saved, tmp_path):
    text = saved["cloaking"].read_text()
    assert text.count('"epsilon": 1.0') >= 2
    path = tmp_path / "tampered.json"
    path.write_text(text.replace('"epsilon": 1.0', '"epsilon": 0.1', 1))  # one number changed
    with pytest.raises(release_file.ReleaseFileIntegrityError, match="damaged or edited"):
        dp.load(path)

    def flip_a_released_value(raw):
        entry = raw["arrays"]["releases/0/mean"]
        values = np.frombuffer(base64.b64decode(entry["data"]), dtype="<f8").copy()
        values[0] += 1.0
        entry["data"] = base64.b64encode(values.tobytes()).decode()

    with pytest.raises(release_file.ReleaseFileIntegrityError):
        dp.load(_edited(saved["fitc-function"], tmp_path, flip_a_released_value))
    assert issubclass(release_file.ReleaseFileIntegrityError, ValueError)


def test_a_wrong_version_or_unknown_kind_is_refused(saved, tmp_path):
    def version(raw):
        raw["format_version"] = 2

    with pytest.raises(release_file.ReleaseFileVersionError, match="version 2 is not supported"):
        dp.load(_edited(saved["cloaking"], tmp_path, version, rehash=True))

    def kind(raw):
        raw["kind"] = "PrivateOracle"

    with pytest.raises(release_file.ReleaseFileKindError, match="unknown kind of released object 'PrivateOracle'"):
        dp.load(_edited(saved["cloaking"], tmp_path, kind, rehash=True))

    def readout(raw):
        raw["content"]["readout"]["kind"] = "MysteryReadout"

    with pytest.raises(release_file.ReleaseFileKindError, match="unknown readout kind 'MysteryReadout'"):
        dp.load(_edited(saved["fitc-function"], tmp_path, readout, rehash=True))

    def kernel(raw):
        raw["content"]["readout"]["state"]["kernel"]["class"] = "ArcCosine"

    with pytest.raises(release_file.ReleaseFileKindError, match="unknown kernel class 'ArcCosine'"):
        dp.load(_edited(saved["sparse-classifier"], tmp_path, kernel, rehash=True))

    def totals(raw):  # consistent hash, inconsistent card: the whole's mu is recomputed from (epsilon, delta)
        raw["card"]["epsilon"] = 0.5

    with pytest.raises(release_file.ReleaseFileError, match=r"card\.mu .* is not 1 / s\(epsilon, delta\)"):
        dp.load(_edited(saved["laplace-2-steps"], tmp_path, totals, rehash=True))

    bad = tmp_path / "not_a_release.json"
    bad.write_text('{"hello": "world"}')
    with pytest.raises(release_file.ReleaseFileError, match="not a dpgp_gpflow release file"):
        dp.load(bad)
    bad.write_text("\x80 not json")
    with pytest.raises(release_file.ReleaseFileError):
        dp.load(bad)


def test_a_kernel_no_file_holds_is_refused_before_the_release_and_a_values_release_takes_it(toy, tmp_path):
    """A function's file holds its kernel: Periodic (once refused at save, after the release was charged) saves
    and loads predicting as the original; a kernel no file holds (ArcCosine) is refused before anything is
    reserved; a release of values at given inputs holds no kernel and takes it."""
    X, Y, _, Xs, Z = toy
    pf = DPGPRFITC((X, Y), gpflow.kernels.Periodic(se(), period=3.0), Z, noise_variance=0.1, y_bounds=(LO, HI),
                   **PUBLIC).release_function(epsilon=1.0, delta=1e-3, seed=6)
    loaded = dp.load(pf.save(tmp_path / "periodic.json"))
    np.testing.assert_allclose(loaded.predict(Xs).mean, pf.predict(Xs).mean, rtol=1e-12)
    model = DPGPRFITC((X, Y), gpflow.kernels.ArcCosine(), Z, noise_variance=0.1, y_bounds=(LO, HI), **PUBLIC)
    accountant = dp.PrivacyAccountant(epsilon=5.0, delta=1e-2)
    with pytest.raises(NotImplementedError, match="cannot save a .*ArcCosine kernel.*nothing was reserved"):
        model.release_function(epsilon=1.0, delta=1e-3, accountant=accountant)
    assert accountant.history() == [] and accountant.held == (0.0, 0.0) and accountant.spent == (0.0, 0.0)
    values = model.release(Xs, epsilon=1.0, delta=1e-3, seed=6, accountant=accountant)
    np.testing.assert_array_equal(dp.load(values.save(tmp_path / "values.json")).mean, values.mean)


def test_card_extras_and_inputs_hash_are_checked(released, toy, tmp_path):
    rel = released["cloaking"]
    with pytest.raises(ValueError, match="card's own keys"):
        rel.save(tmp_path / "a.json", epsilon=0.1)
    with pytest.raises(ValueError, match="does not match"):
        rel.save(tmp_path / "a.json", inputs=toy[3], inputs_hash="0" * 64)
    with pytest.raises(ValueError, match="64 lower-case hex"):
        rel.save(tmp_path / "a.json", inputs_hash="abc")
    rel.save(tmp_path / "a.json", inputs_hash=release_file.inputs_hash(toy[3]))
    assert publishing.read_card(tmp_path / "a.json")["inputs_hash"] == release_file.inputs_hash(toy[3])
    rel.save(tmp_path / "b.json")
    assert publishing.read_card(tmp_path / "b.json")["inputs_hash"] is None


@pytest.mark.parametrize("kernel", [
    gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=[0.5, 3.0]),
    gpflow.kernels.Matern12(active_dims=slice(1, 2)) * gpflow.kernels.Linear(variance=[0.2, 0.7]),
    gpflow.kernels.RationalQuadratic(alpha=0.3, active_dims=[1]) + gpflow.kernels.White(0.01)
    + gpflow.kernels.Constant(0.5) + gpflow.kernels.Exponential() + gpflow.kernels.Matern52(lengthscales=0.1),
], ids=["ard", "product", "sum"])
def test_kernel_specifications_round_trip_exactly(kernel):
    spec = gpflow_specs.kernel_spec(kernel)
    rebuilt = gpflow_specs.kernel_from_spec(json.loads(json.dumps(spec)))
    assert gpflow_specs.kernel_spec(rebuilt) == spec and not rebuilt.trainable_variables and not rebuilt.variables
    X = np.random.default_rng(0).normal(size=(6, 2))
    np.testing.assert_array_equal(rebuilt(X).numpy(), kernel(X).numpy())
    np.testing.assert_array_equal(rebuilt(X, full_cov=False).numpy(), kernel(X, full_cov=False).numpy())


def test_every_released_class_and_readout_is_registered():
    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    import dpgp_gpflow.whole_rows.released  # noqa: F401  (loaded on first use: its class must be registered too)

    import dpgp_gpflow.whole_rows.histogram_release  # noqa: F401  (the same, whichever tests ran before)

    ours = {c for c in subclasses(Released) if c.__module__.startswith("dpgp_gpflow.")}
    assert {"PrivateMulticlassClassifier", "WholeRowsRelease"} <= {c.__name__ for c in ours}
    # StagedRelease is a base only (of the residual and histogram releases); every other one loads
    bases = {c.__name__ for c in ours if any(sub in ours for sub in c.__subclasses__())}
    assert "StagedRelease" in bases and "StagedRelease" not in publishing.RELEASED_KINDS
    assert "HistogramResidualRelease" in publishing.RELEASED_KINDS
    assert not {c.__name__ for c in ours if c.__name__ not in publishing.RELEASED_KINDS} - {"StagedRelease"}
    assert set(publishing.RELEASED_KINDS) == set(card_checks.CARD_KINDS)  # and dpgp show checks every one
    for cls in publishing.READOUT_KINDS.values():
        assert callable(cls.release_state) and callable(cls.release_spec) and callable(cls.from_file_pieces)


SERVE = textwrap.dedent("""
    import json, sys
    for blocked in ("dpgp_gpflow", "gpflow", "check_shapes", "tensorflow_probability"):
        sys.modules[blocked] = None  # import fails: the SavedModel must not need them
    try:
        import dpgp_gpflow
    except ImportError:
        pass
    else:
        raise SystemExit("dpgp_gpflow was importable")
    import numpy as np
    import tensorflow as tf
    X = np.load(sys.argv[1])
    out = {}
    for path in sys.argv[2:]:
        serve = tf.saved_model.load(path).signatures["serving_default"]
        out[path] = {k: v.numpy().tolist() for k, v in serve(X=tf.constant(X, dtype=tf.float64)).items()}
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_saved_model_serves_without_the_package(released, tmp_path):
    Xq = query_inputs()
    np.save(tmp_path / "X.npy", Xq)
    expected = {}
    for name in ("fitc-function", "sgpr-function", "laplace-2-steps", "sparse-classifier"):
        obj = released[name]
        path = obj.export_saved_model(tmp_path / name)
        card = json.loads((path / "assets.extra" / "privacy_card.json").read_text())
        assert card["kind"] == type(obj).__name__ and card["card"]["epsilon"] == obj.epsilon
        if isinstance(obj, PrivateClassifier):
            p, _ = obj.predict_y(Xq)
            mean, var = obj.predict_f(Xq)
            expected[str(path)] = {"probability": p, "latent_mean": mean, "latent_variance": var}  # [k, 1] each
        else:
            expected[str(path)] = obj.predict(Xq)._asdict()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-c", SERVE, str(tmp_path / "X.npy"), *expected], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    served = json.loads(proc.stdout.strip().splitlines()[-1])
    for path, outputs in expected.items():
        assert set(served[path]) == set(outputs)
        for key, value in outputs.items():
            np.testing.assert_allclose(served[path][key], value, rtol=1e-10, atol=1e-14, err_msg=f"{path} {key}")


@pytest.mark.parametrize("name, factor", [("fitc-function", "LB"), ("sgpr-function", "L"),
                                          ("laplace-2-steps", "Lk"), ("sparse-classifier", "La")])
def test_a_readout_factor_of_the_wrong_shape_is_refused(saved, tmp_path, name, factor):
    def drop_a_row(raw):
        entry = raw["arrays"][f"readout/{factor}"]
        rows, cols = entry["shape"]
        values = np.frombuffer(base64.b64decode(entry["data"]), dtype="<f8").reshape(rows, cols)[:-1]
        entry["shape"], entry["data"] = [rows - 1, cols], base64.b64encode(values.tobytes()).decode()

    with pytest.raises(release_file.ReleaseFileError, match="does not match"):
        dp.load(_edited(saved[name], tmp_path, drop_a_row, rehash=True))
