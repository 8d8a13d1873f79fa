"""The persistent privacy ledger: PrivacyAccountant(..., ledger="budget.sqlite").

Created by the same call that opens it, budget fixed at creation, append-only rows (held ->
committed | cancelled), processes racing for one budget never overspend, a process killed between
its hold and its commit leaves its budget counted as spent and the file sound, and the three
compositions give the same answers on disk as in memory.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import time
from pathlib import Path

import gpflow
import numpy as np
import pytest

from dpgp_gpflow import BudgetExceededError, PrivacyAccountant
from dpgp_gpflow.accounting import reserve
from dpgp_gpflow.calibration import gaussian_multiplier
from dpgp_gpflow.composition import PrivacyEvent
from dpgp_gpflow.ledger import COLUMNS, SQLiteLedger
from dpgp_gpflow.models import DPGPR
from dpgp_gpflow.release import gaussian_event

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")

#: One release at (1, 0.01); a budget (3, 0.03) admits exactly three.
ONE = PrivacyEvent(1.0, 0.01, "gaussian", 0.5, "")


def _context():
    """Fresh worker processes (not forks of this one): a fork server that imports the package once,
    so that eight workers do not each pay TensorFlow's import."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["dpgp_gpflow", __name__])  # the workers below live here
    return ctx


def _integrity(path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# Workers (run in other processes)


def _race_worker(path: str, out: str, barrier) -> None:
    from dpgp_gpflow import sampling

    draws = []
    acc = PrivacyAccountant.open(path, dataset=f"worker {os.getpid()}")
    barrier.wait()
    try:
        with reserve(acc, [ONE]) as reservation:
            time.sleep(0.3)  # every winner holds its budget while the others check theirs
            draws.append(sampling.standard_normal(3)[0])
            reservation.commit("race")
        outcome = "released"
    except BudgetExceededError:
        outcome = "refused"
    Path(out).write_text(json.dumps({"outcome": outcome, "draws": len(draws)}))


def _hold_then_hang(path: str, ready: str) -> None:
    acc = PrivacyAccountant.open(path)
    reserve(acc, [ONE])  # held, committed to disk, never committed as spent
    tx = acc._store.transaction()  # and a second hold whose transaction is still open
    tx.__enter__().hold([ONE], "never committed")
    Path(ready).write_text("holding")
    time.sleep(120)


def _read_ledger(path: str, out: str) -> None:
    acc = PrivacyAccountant.open(path)
    Path(out).write_text(json.dumps({"held": acc.held, "spent": acc.spent, "rows": acc.history()}))


# ---------------------------------------------------------------------------------------------
# Creating, opening, refusing


def test_memory_stays_the_default():
    acc = PrivacyAccountant(epsilon=2.0, delta=0.02)
    assert acc.ledger_path is None and acc.dataset is None
    with reserve(acc, [ONE, ONE]) as r:
        assert acc.held == (2.0, 0.02) and acc.remaining == pytest.approx((0.0, 0.0))
        r.commit("first")
    assert acc.held == (0.0, 0.0) and acc.spent == (1.0, 0.01) and acc.remaining == pytest.approx((1.0, 0.01))
    assert [(r["status"], r["description"]) for r in acc.history()] == [("committed", "first"), ("cancelled", "")]


def test_the_same_call_creates_then_opens(tmp_path):
    path = tmp_path / "budget.sqlite"
    acc = PrivacyAccountant(epsilon=3.0, delta=0.03, ledger=path, dataset="heights v1")
    assert path.is_file() and acc.ledger_path == path and acc.dataset == "heights v1"
    acc.spend(1.0, 0.01, kind="gaussian", mu=0.5, description="by hand")
    again = PrivacyAccountant(epsilon=3.0, delta=0.03, ledger=str(path))  # same budget: opened
    assert again.ledger == acc.ledger == (PrivacyEvent(1.0, 0.01, "gaussian", 0.5, "by hand"),)
    assert again.dataset == "heights v1"  # the label the ledger was created with
    opened = PrivacyAccountant.open(path)
    assert (opened.epsilon, opened.delta, opened.composition) == (3.0, 0.03, "basic")
    assert opened.spent == (1.0, 0.01) and opened.remaining == pytest.approx((2.0, 0.02))
    with pytest.raises(FileNotFoundError):
        PrivacyAccountant.open(tmp_path / "missing.sqlite")
    assert not (tmp_path / "missing.sqlite").exists()


@pytest.mark.parametrize("budget", [dict(epsilon=2.0, delta=0.03), dict(epsilon=3.0, delta=0.01),
                                    dict(epsilon=3.0, delta=0.03, composition="gdp")])
def test_reopening_with_another_budget_is_refused(tmp_path, budget):
    path = tmp_path / "budget.sqlite"
    PrivacyAccountant(epsilon=3.0, delta=0.03, ledger=path).spend(1.0, 0.01)
    with pytest.raises(ValueError, match="budget is fixed when it is created"):
        PrivacyAccountant(ledger=path, **budget)
    assert PrivacyAccountant.open(path).spent == (1.0, 0.01)  # untouched


def test_a_file_that_is_not_a_ledger_is_refused(tmp_path):
    text = tmp_path / "notes.sqlite"
    text.write_text("not a database, " * 100)
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    for path in (text, other):
        with pytest.raises(ValueError, match="not a"):
            PrivacyAccountant(epsilon=1.0, delta=0.01, ledger=path)
        with pytest.raises(ValueError, match="not a"):
            PrivacyAccountant.open(path)


# ---------------------------------------------------------------------------------------------
# Rows: append-only history


def test_history_is_append_only_held_then_committed_or_cancelled(tmp_path):
    path = tmp_path / "budget.sqlite"
    acc = PrivacyAccountant(epsilon=3.0, delta=0.03, ledger=path, dataset="d")
    with reserve(acc, [ONE, ONE]) as r:
        rows = acc.history()
        assert [row["status"] for row in rows] == ["held", "held"] and acc.held == (2.0, 0.02)
        assert acc.remaining == pytest.approx((1.0, 0.01)) and acc.spent == (0.0, 0.0)
        with pytest.raises(BudgetExceededError):
            acc.check(1.5, 0.0)  # held budget counts
        r.commit("release 1")
    rows = acc.history()
    assert [(row["id"], row["status"], row["description"]) for row in rows] == [
        (1, "committed", "release 1"), (2, "cancelled", "")]
    assert all(tuple(row) == COLUMNS for row in rows)
    assert all(row["pid"] == os.getpid() and row["dataset"] == "d" and row["settled"] for row in rows)
    assert rows[0]["reservation"] == rows[1]["reservation"] and rows[0]["time"].endswith("+00:00")
    assert acc.held == (0.0, 0.0) and acc.ledger == (PrivacyEvent(1.0, 0.01, "gaussian", 0.5, "release 1"),)
    # the file refuses deletes and edits other than held -> committed | cancelled
    con = sqlite3.connect(path)
    try:
        for sql in ("DELETE FROM dpgp_events", "UPDATE dpgp_events SET epsilon = 0",
                    "UPDATE dpgp_events SET status = 'held'", "UPDATE dpgp_meta SET value = '99'"):
            with pytest.raises(sqlite3.IntegrityError):
                con.execute(sql)
    finally:
        con.close()
    assert len(acc.history()) == 2 and _integrity(path) == "ok"
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        con.close()


def test_a_model_release_is_on_disk_before_it_is_returned(tmp_path, monkeypatch):
    import dpgp_gpflow.release as release_module

    path = tmp_path / "budget.sqlite"
    acc = PrivacyAccountant(epsilon=1.0, delta=0.01, ledger=path)
    seen = []
    original = release_module.PrivateRelease

    def spy(**kwargs):  # runs when the release is built, before it is returned
        other = PrivacyAccountant.open(path)  # what another process would read now
        seen.append((len(other.ledger), other.held))
        return original(**kwargs)

    monkeypatch.setattr(release_module, "PrivateRelease", spy)
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 3.0, (6, 1))
    model = DPGPR((X, np.sin(X)), gpflow.kernels.SquaredExponential(), y_bounds=(-1.0, 1.0), noise_variance=0.1)
    model.release(X[:3], epsilon=1.0, delta=0.01, accountant=acc)
    assert seen == [(1, (0.0, 0.0))]
    with pytest.raises(BudgetExceededError):
        model.release(X[:3], epsilon=0.1, delta=0.001, accountant=acc)
    assert len(seen) == 1 and [r["status"] for r in acc.history()] == ["committed"]


# ---------------------------------------------------------------------------------------------
# Composition on disk


def _gaussian_releases(acc: PrivacyAccountant, count: int, epsilon: float = 1.0, delta: float = 1e-3) -> int:
    """Gaussian releases at (epsilon, delta) until ``count`` or the first refusal; how many were made."""
    event = gaussian_event(epsilon, delta, gaussian_multiplier(epsilon, delta, "analytic"))
    done = 0
    for _ in range(count):
        try:
            with reserve(acc, [event]) as r:
                r.commit("gaussian")
        except BudgetExceededError:
            break
        done += 1
    return done


@pytest.mark.parametrize("composition", ["basic", "gdp", "pld"])
def test_compositions_agree_in_memory_and_on_disk(tmp_path, composition):
    memory = PrivacyAccountant(epsilon=2.0, delta=1e-2, composition=composition)
    disk = PrivacyAccountant(epsilon=2.0, delta=1e-2, composition=composition, ledger=tmp_path / "l.sqlite")
    n_memory, n_disk = _gaussian_releases(memory, 8), _gaussian_releases(disk, 8)
    assert n_memory == n_disk and 2 <= n_memory < 8  # both stopped at the same release
    assert disk.ledger == memory.ledger
    for method in ("basic", "gdp", "pld"):
        assert disk.epsilon_spent(method) == memory.epsilon_spent(method)
    assert PrivacyAccountant.open(tmp_path / "l.sqlite").epsilon_spent() == memory.epsilon_spent()


def test_a_gdp_ledger_admits_more_gaussian_releases_than_basic(tmp_path):
    counts = {c: _gaussian_releases(PrivacyAccountant(epsilon=2.0, delta=1e-2, composition=c,
                                                      ledger=tmp_path / f"{c}.sqlite"), 20)
              for c in ("basic", "gdp")}
    assert counts["basic"] == 2 and counts["gdp"] > counts["basic"]


# ---------------------------------------------------------------------------------------------
# Processes


def test_eight_processes_racing_for_three_releases_never_overspend(tmp_path):
    path = tmp_path / "budget.sqlite"
    PrivacyAccountant(epsilon=3.0, delta=0.03, ledger=path)  # admits exactly three releases of ONE
    ctx = _context()
    barrier = ctx.Barrier(8)
    outs = [tmp_path / f"worker{i}.json" for i in range(8)]
    procs = [ctx.Process(target=_race_worker, args=(str(path), str(out), barrier)) for out in outs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 8
    results = [json.loads(out.read_text()) for out in outs]
    assert sorted(r["outcome"] for r in results) == ["refused"] * 5 + ["released"] * 3
    assert all(r["draws"] == (1 if r["outcome"] == "released" else 0) for r in results)  # refused: drew nothing
    acc = PrivacyAccountant.open(path)
    assert len(acc.ledger) == 3 and acc.spent == pytest.approx((3.0, 0.03)) and acc.held == (0.0, 0.0)
    rows = acc.history()
    assert [r["status"] for r in rows] == ["committed"] * 3  # a refused hold writes nothing
    assert len({r["pid"] for r in rows}) == 3 and all(r["dataset"].startswith("worker") for r in rows)
    assert _integrity(path) == "ok"


def test_a_process_killed_between_hold_and_commit_leaves_its_budget_spent(tmp_path):
    path, ready = tmp_path / "budget.sqlite", tmp_path / "ready"
    PrivacyAccountant(epsilon=2.0, delta=0.02, ledger=path)
    ctx = _context()
    proc = ctx.Process(target=_hold_then_hang, args=(str(path), str(ready)))
    proc.start()
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.is_alive() and time.monotonic() < deadline
        time.sleep(0.05)
    proc.kill()  # SIGKILL: no finally, no close
    proc.join(10)
    assert proc.exitcode == -9
    assert _integrity(path) == "ok"
    # a new process sees the dead one's hold (and not its unfinished transaction)
    out = tmp_path / "seen.json"
    reader = ctx.Process(target=_read_ledger, args=(str(path), str(out)))
    reader.start()
    reader.join(60)
    seen = json.loads(out.read_text())
    assert seen["held"] == [1.0, 0.01] and seen["spent"] == [0.0, 0.0]
    assert [(r["status"], r["pid"]) for r in seen["rows"]] == [("held", proc.pid)]
    # and counts it as spent: of (2, 0.02) only one more release fits, and it can be made at once
    acc = PrivacyAccountant.open(path)
    assert acc.remaining == pytest.approx((1.0, 0.01))
    start = time.monotonic()
    with reserve(acc, [ONE]) as r:
        r.commit("after the crash")
    assert time.monotonic() - start < 5  # the dead process's lock is gone
    with pytest.raises(BudgetExceededError):
        acc.check(1.0, 0.01)
    assert [r["status"] for r in acc.history()] == ["held", "committed"]
    assert SQLiteLedger.open(path).integrity_check() == "ok"
