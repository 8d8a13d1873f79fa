"""Red-team cases of issue 34: an audit that sees whether noise was drawn (item 6), a ledger that stays fast
without losing its tamper detection (item 7), and a ledger SQLite cannot write (item 5).

Each attack is what a careless or hostile publisher, a broken sampler or another process could do; every
reference is NumPy written here (the cloaking matrix from the kernel formula, the noiseless value by least
squares against the published noise factor)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import sqlite3
import sys
from pathlib import Path

import gpflow
import numpy as np
import pandas as pd
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow import PrivacyAccountant, sampling
from dpgp_gpflow.accounting import reserve
from dpgp_gpflow.composition import PrivacyEvent
from dpgp_gpflow.exceptions import LedgerError
from dpgp_gpflow.io.format import encode_array
from dpgp_gpflow.ledger import _TRIGGERS, SQLiteLedger, _statements
from dpgp_gpflow.models import DPGPR

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forgery import forged  # noqa: E402
from reference import k_se  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ReproducibleNoiseWarning"),
              pytest.mark.filterwarnings("ignore::dpgp_gpflow.exceptions.ClippingWarning")]

VAR, ELL, NOISE = 4.0, 1.0, 0.5
OPTIONS = dict(epsilon=1.0, delta=1e-3)
TRIGGERS = ("dpgp_events_append", "dpgp_events_no_update", "dpgp_events_no_delete", "dpgp_meta_no_insert",
            "dpgp_meta_no_update", "dpgp_meta_no_delete")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    X = rng.uniform(0.0, 10.0, (30, 1))
    Y = 50.0 + 20.0 * np.sin(X) + 3.0 * rng.standard_normal((30, 1))
    return X, Y


def model(X, Y, **kw):
    return DPGPR((X, Y), gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=ELL), y_bounds=(0.0, 100.0),
                 noise_variance=NOISE, hyperparameters_public=True, **kw)


def numpy_posterior_mean(X, Y, Xnew):
    """NumPy, non-private: 50 + K_*f (K + s2 I)^{-1} (clip(y) - 50)."""
    C = np.linalg.solve(k_se(X, X, VAR, ELL) + NOISE * np.eye(len(X)), k_se(X, Xnew, VAR, ELL)).T
    return 50.0 + C @ (np.clip(Y[:, 0], 0.0, 100.0) - 50.0)


# ---------------------------------------------------------------------------------------------
# Item 6: the audit sees whether noise was drawn


def test_the_findings_forgery_a_loaded_full_rank_release_whose_mean_is_the_posterior_mean(data, tmp_path):
    """The finding: a release whose noise has full rank, saved, its mean replaced by the non-private
    posterior mean and its hash recomputed. dp.load accepts it; the span check cannot see it (the span is
    everything); the noise test can."""
    X, Y = data
    Xnew = np.linspace(1.0, 9.0, 5)[:, None]
    m = model(X, Y)
    rel = m.release(Xnew, seed=1, **OPTIONS).unclipped()
    assert rel.rank == len(Xnew)  # full rank
    path = rel.save(tmp_path / "release.json", inputs=Xnew)
    posterior = numpy_posterior_mean(X, Y, Xnew)
    np.testing.assert_allclose(posterior, m.predict_f(Xnew)[0].numpy()[:, 0], rtol=1e-8)

    def replace_mean(raw):
        raw["arrays"]["releases/0/mean"] = encode_array(posterior)

    loaded = dp.load(forged(path, tmp_path, replace_mean))
    report = dp.audit(loaded, m, Xnew)
    assert report.releases[0].mean_outside <= 1e-8  # in the span: what let it pass before
    assert not report.passed and report.releases[0].noise.outcome == "too little noise"
    assert report.noise_test.startswith("failed: release 0: too little noise")
    assert dp.audit(dp.load(path), m, Xnew).passed  # the honest file


def test_the_standard_mechanism_published_without_noise_fails(data):
    X, Y = data
    Xnew = np.linspace(1.0, 9.0, 8)[:, None]
    m = model(X, Y)
    rel = m.release(Xnew, mechanism="standard", seed=2, **OPTIONS).unclipped()
    assert rel.rank == len(Xnew)  # the prior's full-rank noise
    forged_rel = dataclasses.replace(rel, mean=numpy_posterior_mean(X, Y, Xnew))
    assert dp.audit(rel, m, Xnew).passed
    assert dp.audit(forged_rel, m, Xnew).releases[0].noise.outcome == "too little noise"


@pytest.mark.parametrize("scale", [0.0, 0.1])
def test_a_broken_sampler_that_draws_less_noise_is_caught(data, monkeypatch, scale):
    """The package's own release path with a sampler bug injected (the noise scaled by 0.1, or none): every
    description the release carries is right, only the draw is wrong; the audit with the data fails it."""
    X, Y = data
    Xnew = np.linspace(0.0, 10.0, 20)[:, None]
    m = model(X, Y)
    original = sampling.add_whitened_noise

    def broken(z, seed=None):
        noisy, reproducible = original(z, seed)
        z = np.asarray(z, dtype=np.float64).reshape(-1)
        return z + scale * (noisy - z), reproducible

    monkeypatch.setattr(sampling, "add_whitened_noise", broken)
    rel = m.release(Xnew, **OPTIONS)  # the exact sampler (OS entropy)
    assert rel.rank >= 16
    report = dp.audit(rel, m, Xnew)
    assert report.releases[0].epsilon == pytest.approx(1.0, rel=1e-5)  # the description is a valid mechanism
    assert not report.passed and report.releases[0].noise.outcome == "too little noise"
    monkeypatch.undo()
    assert dp.audit(m.release(Xnew, **OPTIONS), m, Xnew).passed  # the real sampler


def test_a_release_of_other_data_is_not_vouched_for(data):
    """A publisher who ran the release on another data set (outputs shifted by 2 units) and hands in the model
    of this one: the privacy recomputed from this model is not the release's; the noise test says so."""
    X, Y = data
    Xnew = np.linspace(0.0, 10.0, 20)[:, None]
    m = model(X, Y, data_sensitivity=1.0)
    other = model(X, Y + 2.0, data_sensitivity=1.0).release(Xnew, seed=9, **OPTIONS)
    report = dp.audit(other, m, Xnew)
    assert report.releases[0].epsilon == pytest.approx(1.0, rel=1e-5)
    assert not report.passed and report.releases[0].noise.outcome == "too much noise"


def test_the_noise_test_says_so_when_it_is_not_run(data):
    """A model whose outputs cannot be read (a wrapper that hides them): not run, said, never passed silently."""
    X, Y = data
    Xnew = np.linspace(0.0, 10.0, 6)[:, None]
    m = model(X, Y)
    rel = m.release(Xnew, seed=3, **OPTIONS)

    class NoOutputs:
        def __init__(self, inner):
            self._inner = inner

        def __getattr__(self, name):
            if name == "centred_outputs":
                raise AttributeError(name)
            return getattr(self._inner, name)

    report = dp.audit(rel, NoOutputs(m), Xnew)
    assert report.noise_test.startswith("not run: NoOutputs does not give its outputs")
    assert report.passed and not report.releases[0].noise.ran


# ---------------------------------------------------------------------------------------------
# Item 7: incremental checks lose nothing a process can see


def _bulk_ledger(path: Path, events: int) -> None:
    small = PrivacyEvent(0.01, 1e-8, "gaussian", 0.2, "")
    store = SQLiteLedger.create_or_open(path, (1e6, 0.5, "gdp"))
    with store.transaction() as tx:
        for _ in range(events):
            tx.commit(tx.hold([small], "bulk"), small)


def _edit_with_triggers_put_back(path: Path, *statements: str) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    try:
        for name in TRIGGERS:
            con.execute(f"DROP TRIGGER {name}")
        for sql in statements:
            con.execute(sql)
        for sql in _statements(_TRIGGERS):
            con.execute(sql)
    finally:
        con.close()


def test_a_long_ledger_still_refuses_an_edit_of_its_first_row(tmp_path):
    """1,000 events (2,000 rows): an accountant that has verified them spends reading one row, yet an epsilon
    zeroed in row 1 (triggers dropped and put back, so the schema reads as before) stops it at its next step."""
    import dpgp_gpflow.ledger as ledger_module

    path = tmp_path / "long.sqlite"
    _bulk_ledger(path, 1000)
    acc = PrivacyAccountant.open(path)
    applied = []
    original = ledger_module._State.apply
    ledger_module._State.apply = lambda self, row: (applied.append(row["id"]), original(self, row))[1]
    try:
        acc.spend(0.01, 1e-8, kind="gaussian", mu=0.2)
    finally:
        ledger_module._State.apply = original
    assert applied == [2001]
    _edit_with_triggers_put_back(path, "UPDATE dpgp_events SET epsilon = 0.0, mu = 0.0001 WHERE id = 1")
    for step in (lambda: acc.spend(0.01), lambda: reserve(acc, [PrivacyEvent(0.01, 0.0, "pure")]), acc.history):
        with pytest.raises(LedgerError, match="row 1 \\('hold'\\) was changed after it was written"):
            step()


def test_an_older_copy_put_back_under_a_running_process_is_refused(tmp_path):
    path = tmp_path / "budget.sqlite"
    _bulk_ledger(path, 3)
    old = path.read_bytes()
    acc = PrivacyAccountant.open(path)
    acc.spend(0.5)
    path.write_bytes(old)  # the copy from before the spend (same schema version, same budget row)
    with pytest.raises(LedgerError, match="row 7 was removed or rewritten since this process read it"):
        acc.spend(0.1)


# ---------------------------------------------------------------------------------------------
# Item 5: a ledger SQLite cannot write


def test_a_read_only_ledger_is_one_line_in_the_command_line(tmp_path, monkeypatch):
    """dpgp release with a ledger SQLite opens read-only (its own mode=ro: the error is SQLite's real one):
    exit code 2, one 'dpgp: error:' line saying the ledger is not writable, nothing written or spent."""
    import dpgp_gpflow.cli
    import dpgp_gpflow.ledger as ledger_module

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"age": rng.uniform(0, 80, 40)})
    frame["height"] = 100 + 0.8 * frame["age"].clip(upper=20) + rng.normal(0, 3, 40)
    frame.to_csv(tmp_path / "data.csv", index=False)
    pd.DataFrame({"age": [5.0, 30.0]}).to_csv(tmp_path / "at.csv", index=False)
    ledger = tmp_path / "ledger.sqlite"
    PrivacyAccountant(epsilon=2.0, delta=0.02, ledger=ledger)
    before = ledger.read_bytes()
    connect = sqlite3.connect
    monkeypatch.setattr(ledger_module.sqlite3, "connect",
                        lambda database, *a, **k: connect(database.replace("?mode=rw", "?mode=ro"), *a, **k))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = dpgp_gpflow.cli.main(["release", str(tmp_path / "data.csv"), "--x", "age", "--y", "height",
                                     "--bounds", "60", "180", "--lengthscale", "20", "--variance", "100",
                                     "--noise", "10", "--epsilon", "1", "--delta", "0.01",
                                     "--at", str(tmp_path / "at.csv"), "--ledger", str(ledger),
                                     "-o", str(tmp_path / "out.json"), "--quiet"])
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err.getvalue()
    assert lines[0].startswith("dpgp: error: ") and "the privacy ledger is not writable" in lines[0]
    assert "Traceback" not in err.getvalue() and not (tmp_path / "out.json").exists()
    monkeypatch.undo()
    assert ledger.read_bytes() == before and PrivacyAccountant.open(ledger).spent == (0.0, 0.0)
