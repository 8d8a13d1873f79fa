"""The persistent privacy ledger: PrivacyAccountant(..., ledger="budget.sqlite").

Created by the same call that opens it, budget fixed at creation, append-only rows (held ->
committed | cancelled), processes racing for one budget never overspend, a process killed between
its hold and its commit leaves its budget counted as spent and the file sound, and the three
compositions give the same answers on disk as in memory. Tampering and accidents (issue 29): hand
edits through sqlite3 (INSERT OR REPLACE, a raised budget, a hold cancelled, rows deleted or
reordered, triggers dropped) and files that are not ledgers (0 bytes, a CSV, random bytes, an old
format) are refused with LedgerError and nothing spent; the limits the docs state are pinned too.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest

from dpgp_gpflow import BudgetExceededError, PrivacyAccountant
from dpgp_gpflow.accounting import measuring, reserve
from dpgp_gpflow.calibration import gaussian_multiplier
from dpgp_gpflow.composition import PrivacyEvent
from dpgp_gpflow.exceptions import LedgerError
from dpgp_gpflow.ledger import _TRIGGERS, COLUMNS, LOG_COLUMNS, SQLiteLedger, _statements

# No TensorFlow at import (gpflow, the models and the mechanisms are imported by the tests that use
# them): the race's workers import this module, and the ledger needs none of it.

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")

#: One release at (1, 0.01); a budget (3, 0.03) admits exactly three.
ONE = PrivacyEvent(1.0, 0.01, "gaussian", 0.5, "")


def _commit(reservation, description):
    """Commit the next held event as a release's mechanism does: inside a running measurement (every commit is, or
    is refused; measurement.measure sets it, which would import TensorFlow here)."""
    with measuring("a release of this test"):
        return reservation.commit(description)


def _context():
    """Fresh worker processes (not forks of this one): a fork server that imports this module (the
    ledger and the accountant, no TensorFlow) and the exact sampler's OpenDP (about 2 s to import, which
    each winner of the race paid after the barrier, three at once on two cores) once, so that eight
    workers do not each pay for it."""
    ctx = multiprocessing.get_context("forkserver")
    # the workers below live here
    ctx.set_forkserver_preload(["dpgp_gpflow", "dpgp_gpflow.sampling", "opendp.prelude", __name__])
    return ctx


def _log(path: Path):
    """The rows of the file as dicts, read with plain sqlite3."""
    con = sqlite3.connect(path)
    try:
        return [dict(zip(LOG_COLUMNS, r)) for r in con.execute(
            f"SELECT {', '.join(LOG_COLUMNS)} FROM dpgp_events ORDER BY id").fetchall()]
    finally:
        con.close()


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
            _commit(reservation, "race")
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
        _commit(r, "first")
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
        _commit(r, "release 1")
    rows = acc.history()
    assert [(row["id"], row["status"], row["description"]) for row in rows] == [
        (1, "committed", "release 1"), (2, "cancelled", "")]
    assert all(tuple(row) == COLUMNS for row in rows)
    assert all(row["pid"] == os.getpid() and row["dataset"] == "d" and row["settled"] for row in rows)
    assert rows[0]["reservation"] == rows[1]["reservation"] and rows[0]["time"].endswith("+00:00")
    assert acc.held == (0.0, 0.0) and acc.ledger == (PrivacyEvent(1.0, 0.01, "gaussian", 0.5, "release 1"),)
    # in the file, each transition is a new row: hold, hold, commit of row 1, cancel of row 2
    assert [(r["id"], r["op"], r["ref"]) for r in _log(path)] == [
        (1, "hold", None), (2, "hold", None), (3, "commit", 1), (4, "cancel", 2)]
    # and the file refuses deletes, changes and replacements of rows
    con = sqlite3.connect(path)
    try:
        for sql in ("DELETE FROM dpgp_events", "UPDATE dpgp_events SET epsilon = 0",
                    "UPDATE dpgp_events SET op = 'cancel'", "UPDATE dpgp_meta SET value = '99'",
                    "INSERT OR REPLACE INTO dpgp_meta (key, value) VALUES ('epsilon', '100.0')",
                    "DELETE FROM dpgp_meta", "INSERT INTO dpgp_events (op, time, pid, prev, hash) "
                    "VALUES ('cancel', 'now', 1, '', '')"):
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
    import gpflow

    import dpgp_gpflow.mechanisms.cloaking as release_module
    from dpgp_gpflow.models import DPGPR

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
    model = DPGPR((X, np.sin(X)), gpflow.kernels.SquaredExponential(), y_bounds=(-1.0, 1.0), noise_variance=0.1,
                  hyperparameters_public=True)
    model.release(X[:3], epsilon=1.0, delta=0.01, accountant=acc)
    assert seen == [(1, (0.0, 0.0))]
    with pytest.raises(BudgetExceededError):
        model.release(X[:3], epsilon=0.1, delta=0.001, accountant=acc)
    assert len(seen) == 1 and [r["status"] for r in acc.history()] == ["committed"]


# ---------------------------------------------------------------------------------------------
# Composition on disk


def _gaussian_releases(acc: PrivacyAccountant, count: int, epsilon: float = 1.0, delta: float = 1e-3) -> int:
    """Gaussian releases at (epsilon, delta) until ``count`` or the first refusal; how many were made."""
    from dpgp_gpflow.mechanisms import gaussian_event

    event = gaussian_event(epsilon, delta, gaussian_multiplier(epsilon, delta, "analytic"))
    done = 0
    for _ in range(count):
        try:
            with reserve(acc, [event]) as r:
                _commit(r, "gaussian")
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
        _commit(r, "after the crash")
    assert time.monotonic() - start < 5  # the dead process's lock is gone
    with pytest.raises(BudgetExceededError):
        acc.check(1.0, 0.01)
    assert [r["status"] for r in acc.history()] == ["held", "committed"]
    assert SQLiteLedger.open(path).integrity_check() == "ok"


# ---------------------------------------------------------------------------------------------
# Tampering and accidents (issue 29): each refused with LedgerError, nothing spent

TRIGGERS = ("dpgp_events_append", "dpgp_events_no_update", "dpgp_events_no_delete", "dpgp_meta_no_insert",
            "dpgp_meta_no_update", "dpgp_meta_no_delete")


def _used_ledger(tmp_path: Path) -> Path:
    """A (3, 0.03) ledger with one committed release (row 1 hold, 2 commit) and one held (row 3)."""
    path = tmp_path / "budget.sqlite"
    acc = PrivacyAccountant(epsilon=3.0, delta=0.03, ledger=path)
    with reserve(acc, [ONE]) as r:
        _commit(r, "first")
    reserve(acc, [ONE])  # never committed nor closed: a process that died after its hold
    assert acc.spent == (1.0, 0.01) and acc.held == (1.0, 0.01)
    return path


def _edit(path: Path, *statements: str, drop_triggers: bool = False, recursive: bool = False) -> None:
    """Hand edits through sqlite3, as someone with the file and no dpgp_gpflow would make them."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        if recursive:
            con.execute("PRAGMA recursive_triggers = ON")
        if drop_triggers:
            for name in TRIGGERS:
                con.execute(f"DROP TRIGGER {name}")
        for sql in statements:
            con.execute(sql)
    finally:
        con.close()


def _snapshot(path: Path):
    con = sqlite3.connect(path)
    try:
        return (con.execute("SELECT * FROM dpgp_meta ORDER BY key").fetchall(),
                con.execute("SELECT * FROM dpgp_events ORDER BY id").fetchall())
    finally:
        con.close()


def _refused(path: Path, match: str, accountant=None) -> None:
    """Every way in raises LedgerError matching ``match``, and the file's rows stay as they are."""
    before = path.read_bytes()
    with pytest.raises(LedgerError, match=match):
        PrivacyAccountant(epsilon=3.0, delta=0.03, ledger=path)
    with pytest.raises(LedgerError, match=match):
        PrivacyAccountant.open(path)
    if accountant is not None:  # one opened before the edit: checked again on every step
        for step in (lambda: reserve(accountant, [ONE]), lambda: accountant.spend(0.1), accountant.history,
                     lambda: accountant.check(0.1), lambda: accountant.remaining):
            with pytest.raises(LedgerError, match=match):
                step()
    assert path.read_bytes() == before  # nothing written, nothing spent


@pytest.mark.parametrize("recursive", [False, True])
def test_insert_or_replace_cannot_zero_epsilons_or_raise_the_budget(tmp_path, recursive):
    path = _used_ledger(tmp_path)
    before = _snapshot(path)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute(f"PRAGMA recursive_triggers = {'ON' if recursive else 'OFF'}")  # the editor's choice
        for sql in ("INSERT OR REPLACE INTO dpgp_events SELECT id, op, time, kind, 0.0, 0.0, mu, description, "
                    "dataset, pid, reservation, ref, prev, hash FROM dpgp_events",
                    "REPLACE INTO dpgp_meta (key, value) VALUES ('epsilon', '100.0')",
                    "INSERT OR REPLACE INTO dpgp_meta (key, value) VALUES ('epsilon', '100.0')",
                    "UPDATE OR REPLACE dpgp_events SET epsilon = 0.0",
                    "UPDATE dpgp_events SET op = 'cancel', ref = 3 WHERE id = 3"):
            with pytest.raises(sqlite3.IntegrityError):
                con.execute(sql)
    finally:
        con.close()
    assert _snapshot(path) == before
    assert PrivacyAccountant.open(path).remaining == pytest.approx((1.0, 0.01))


def test_zeroed_epsilons_are_detected_when_the_triggers_are_dropped(tmp_path):
    path = _used_ledger(tmp_path)
    acc = PrivacyAccountant.open(path)
    _edit(path, "INSERT OR REPLACE INTO dpgp_events SELECT id, op, time, kind, CASE WHEN epsilon IS NULL THEN NULL "
                "ELSE 0.0 END, delta, mu, description, dataset, pid, reservation, ref, prev, hash FROM dpgp_events",
          drop_triggers=True)
    _refused(path, "row 1 \\('hold'\\) was changed after it was written", acc)


def test_a_raised_budget_is_detected(tmp_path):
    path = _used_ledger(tmp_path)
    acc = PrivacyAccountant.open(path)
    _edit(path, "UPDATE dpgp_meta SET value = '100.0' WHERE key = 'epsilon'", drop_triggers=True)
    with pytest.raises(LedgerError, match="row 0 \\(the budget\\) was changed"):
        PrivacyAccountant(epsilon=100.0, delta=0.03, ledger=path)  # even asked for with the new budget
    _refused(path, "row 0 \\(the budget\\) was changed", acc)


def test_a_hold_cancelled_by_hand_is_detected(tmp_path):
    path = _used_ledger(tmp_path)
    acc = PrivacyAccountant.open(path)
    # the only row SQLite admits is the next one; a cancel of the dead process's hold, without the chain
    _edit(path, "INSERT INTO dpgp_events (id, op, time, pid, ref, prev, hash) "
                "SELECT 4, 'cancel', time, pid, 3, hash, hash FROM dpgp_events WHERE id = 3")
    _refused(path, "row 4 \\('cancel'\\) was changed after it was written", acc)


def test_the_old_attack_held_to_cancelled_by_update_is_detected(tmp_path):
    path = _used_ledger(tmp_path)
    _edit(path, "UPDATE dpgp_events SET op = 'cancel', ref = 1, kind = NULL, epsilon = NULL, delta = NULL, mu = NULL, "
                "reservation = NULL WHERE id = 3", drop_triggers=True)
    _refused(path, "row 3 \\('cancel'\\) was changed")


def test_only_the_holder_can_commit_or_cancel_a_hold(tmp_path):
    """Another process (here: another ledger object) sees a reservation's public id, not its key."""
    path = _used_ledger(tmp_path)
    other = SQLiteLedger.open(path)
    public = [r["reservation"] for r in other.history() if r["status"] == "held"]
    assert len(public) == 1
    with other.transaction() as tx:
        tx.cancel(public[0])  # cancels nothing
        with pytest.raises(RuntimeError, match="holds nothing to commit"):
            tx.commit(public[0], ONE)
    assert PrivacyAccountant.open(path).held == (1.0, 0.01)


@pytest.mark.parametrize("which", ["middle", "last"])
def test_a_deleted_row_is_detected(tmp_path, which):
    path = _used_ledger(tmp_path)
    acc = PrivacyAccountant.open(path)
    if which == "middle":  # the commit of row 1: the release would look held (counted) ... or freed
        _edit(path, "DELETE FROM dpgp_events WHERE id = 2", drop_triggers=True)
        _refused(path, "row 2 is missing", acc)
    else:  # the dead process's hold, the last row: nothing after it to break, but SQLite's counter
        _edit(path, "DELETE FROM dpgp_events WHERE id = 3", drop_triggers=True)
        _refused(path, "row 3 onwards are missing", acc)


def test_a_deleted_last_row_with_its_counter_fixed_is_caught_only_by_a_process_that_saw_it(tmp_path):
    """The documented limit: the tail has nothing after it to vouch for it."""
    path = _used_ledger(tmp_path)
    acc = PrivacyAccountant.open(path)
    _edit(path, "DELETE FROM dpgp_events WHERE id = 3", "UPDATE sqlite_sequence SET seq = 2", drop_triggers=True)
    _edit(path, *_statements(_TRIGGERS))  # and the triggers put back
    with pytest.raises(LedgerError, match="row 3 was removed or rewritten since this process read it"):
        reserve(acc, [ONE])
    fresh = PrivacyAccountant.open(path)  # a process that never saw row 3 believes the file
    assert fresh.held == (0.0, 0.0) and fresh.remaining == pytest.approx((2.0, 0.02))


def test_reordered_rows_are_detected(tmp_path):
    path = _used_ledger(tmp_path)
    _edit(path, "UPDATE dpgp_events SET id = 100 WHERE id = 1", "UPDATE dpgp_events SET id = 1 WHERE id = 2",
          "UPDATE dpgp_events SET id = 2 WHERE id = 100", drop_triggers=True)
    _refused(path, "row 1 \\('commit'\\) does not follow row 0")


def test_dropped_triggers_alone_are_detected(tmp_path):
    path = _used_ledger(tmp_path)
    _edit(path, "DROP TRIGGER dpgp_events_no_update")
    _refused(path, "triggers, which refuse edits, were dropped or changed")


def test_a_consistent_rewrite_of_the_chain_is_not_detected(tmp_path):
    """The documented limit: no secret key, so whoever recomputes every hash is believed."""
    from dpgp_gpflow.ledger import _digest, _settings_digest

    path = _used_ledger(tmp_path)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        for name in TRIGGERS:
            con.execute(f"DROP TRIGGER {name}")
        meta = dict(con.execute("SELECT key, value FROM dpgp_meta").fetchall())
        meta["epsilon"] = "100.0"
        con.execute("UPDATE dpgp_meta SET value = ? WHERE key = 'epsilon'", (meta["epsilon"],))
        prev = _settings_digest(meta)
        con.execute("UPDATE dpgp_meta SET value = ? WHERE key = 'hash'", (prev,))
        for row in [dict(zip(LOG_COLUMNS, r)) for r in con.execute("SELECT * FROM dpgp_events ORDER BY id")]:
            row["prev"], row["hash"] = prev, _digest(prev, [row[c] for c in LOG_COLUMNS[:-2]])
            con.execute("UPDATE dpgp_events SET prev = ?, hash = ? WHERE id = ?", (row["prev"], row["hash"], row["id"]))
            prev = row["hash"]
        for sql in _statements(_TRIGGERS):
            con.execute(sql)
    finally:
        con.close()
    assert PrivacyAccountant.open(path).epsilon == 100.0


# -- files that are not (intact) ledgers: never re-created -----------------------------------------

@pytest.mark.parametrize("content, match", [
    (b"", "an empty file, not a privacy ledger"),
    (b"x,y\n1,2\n3,4\n", "not an SQLite database"),
    (bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)), "not an SQLite database"),
    (b"SQLite format 3\x00" + bytes(200), "not a readable privacy ledger"),
])
def test_a_file_that_is_not_a_ledger_is_never_replaced(tmp_path, content, match):
    path = tmp_path / "budget.sqlite"
    path.write_bytes(content)
    with pytest.raises(LedgerError, match=match) as info:
        PrivacyAccountant(epsilon=3.0, delta=0.03, ledger=path)
    assert "\n" not in str(info.value) and "path that does not exist" in str(info.value)
    with pytest.raises(LedgerError, match=match):
        PrivacyAccountant.open(path)
    with pytest.raises(LedgerError, match=match):
        SQLiteLedger.create_or_open(path, (3.0, 0.03, "basic"))
    assert path.read_bytes() == content and sorted(p.name for p in tmp_path.iterdir()) == ["budget.sqlite"]


def test_a_ledger_truncated_to_zero_bytes_is_refused_not_recreated(tmp_path):
    path = _used_ledger(tmp_path)
    acc = PrivacyAccountant.open(path)
    path.write_bytes(b"")  # truncated (the WAL was checkpointed when the last connection closed)
    for open_it in (lambda: PrivacyAccountant(epsilon=3.0, delta=0.03, ledger=path),
                    lambda: PrivacyAccountant.open(path),
                    lambda: PrivacyAccountant(epsilon=100.0, ledger=path)):
        with pytest.raises(LedgerError, match="an empty file"):
            open_it()
    with pytest.raises(LedgerError):
        reserve(acc, [ONE])
    assert path.read_bytes() == b""


def test_an_empty_or_foreign_sqlite_database_is_refused(tmp_path):
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).execute("PRAGMA user_version = 1").connection.close()  # a header, no tables
    assert empty.read_bytes().startswith(b"SQLite format 3")
    _refused(empty, "an SQLite database that is not a privacy ledger \\(no tables\\)")
    meta_only = tmp_path / "meta.sqlite"
    con = sqlite3.connect(meta_only)
    con.execute("CREATE TABLE dpgp_meta (name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(LedgerError, match="not a privacy ledger"):
        PrivacyAccountant.open(meta_only)


def test_an_old_format_ledger_is_refused_with_a_hint_and_left_unchanged(tmp_path):
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE dpgp_meta (key TEXT PRIMARY KEY, value TEXT);
        CREATE TABLE dpgp_events (id INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL, settled TEXT,
            status TEXT NOT NULL, kind TEXT NOT NULL, epsilon REAL NOT NULL, delta REAL NOT NULL, mu REAL,
            description TEXT NOT NULL DEFAULT '', dataset TEXT, pid INTEGER NOT NULL, reservation TEXT NOT NULL);
        INSERT INTO dpgp_meta VALUES ('format', 'dpgp-ledger-1'), ('epsilon', '3.0'), ('delta', '0.03'),
            ('composition', 'basic');
        INSERT INTO dpgp_events (time, status, kind, epsilon, delta, pid, reservation) VALUES
            ('t', 'committed', 'approximate', 1.0, 0.01, 1, 'a'), ('t', 'held', 'approximate', 0.5, 0.0, 1, 'b'),
            ('t', 'cancelled', 'approximate', 9.0, 0.0, 1, 'c');
    """)
    con.close()
    before = path.read_bytes()
    for open_it in (lambda: PrivacyAccountant(epsilon=3.0, delta=0.03, ledger=path),
                    lambda: PrivacyAccountant.open(path)):
        with pytest.raises(LedgerError, match="older format 'dpgp-ledger-1'.*epsilon=1.5, delta=0.01 spent or held"
                                              ".*path that does not exist"):
            open_it()
    assert path.read_bytes() == before


def test_a_leftover_wal_is_not_read_into_a_new_ledger(tmp_path):
    path = tmp_path / "budget.sqlite"
    Path(f"{path}-wal").write_bytes(b"stale")
    with pytest.raises(LedgerError, match="-wal: left over"):
        PrivacyAccountant(epsilon=1.0, ledger=path)
    assert not path.exists()


# -- legal use by several threads at once ---------------------------------------------------------

def test_threads_creating_and_spending_on_one_new_ledger(tmp_path):
    import threading

    path = tmp_path / "budget.sqlite"
    barrier, outcomes, errors = threading.Barrier(6), [], []

    def work():
        try:
            barrier.wait()
            acc = PrivacyAccountant(epsilon=3.0, delta=0.03, ledger=path)  # all at once: one creates
            for _ in range(2):
                try:
                    with reserve(acc, [ONE]) as r:
                        _commit(r, "thread")
                    outcomes.append("released")
                except BudgetExceededError:
                    outcomes.append("refused")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(outcomes) == ["refused"] * 9 + ["released"] * 3
    acc = PrivacyAccountant.open(path)
    assert acc.spent == pytest.approx((3.0, 0.03)) and acc.held == (0.0, 0.0)
    assert sorted(r["op"] for r in _log(path)) == ["commit"] * 3 + ["hold"] * 3  # a refusal writes nothing
    assert SQLiteLedger.open(path).verify() == 6
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("budget.sqlite")) == []


def test_values_sqlite_would_store_differently_still_verify(tmp_path):
    """-0.0 (stored as 0.0) and a non-string description (stored as text) are written as they read back."""
    path = tmp_path / "budget.sqlite"
    acc = PrivacyAccountant(epsilon=3.0, delta=0.03, ledger=path)
    acc.spend(0.5, -0.0, description=5)
    with reserve(acc, [PrivacyEvent(0.5, -0.0, "gaussian", 0.25, "")]) as r:
        _commit(r, 7)
    assert SQLiteLedger.open(path).verify() == 3
    assert [(r["delta"], r["description"]) for r in PrivacyAccountant.open(path).history()] == [(0.0, "5"), (0.0, "7")]


# ---------------------------------------------------------------------------------------------
# Incremental verification (issue 34 item 7): a transaction reads what changed since this process verified
# the file, and still finds every edit the chain and the triggers can show


def _counting(monkeypatch):
    """Counts of full replays (_load) and of rows checked (_State.apply) from now on."""
    import dpgp_gpflow.ledger as ledger_module

    counts = {"replays": 0, "rows": 0}
    load, apply = ledger_module._load, ledger_module._State.apply

    def counted_load(*args, **kwargs):
        counts["replays"] += 1
        return load(*args, **kwargs)

    def counted_apply(self, row):
        counts["rows"] += 1
        return apply(self, row)

    monkeypatch.setattr(ledger_module, "_load", counted_load)
    monkeypatch.setattr(ledger_module._State, "apply", counted_apply)
    return counts


def test_a_transaction_checks_only_the_rows_written_since(tmp_path, monkeypatch):
    path = tmp_path / "budget.sqlite"
    writer = SQLiteLedger.create_or_open(path, (1e6, 0.5, "basic"))
    small = PrivacyEvent(1.0, 1e-5, "gaussian", 0.5, "")
    with writer.transaction() as tx:
        for _ in range(200):
            tx.commit(tx.hold([small], "bulk"), small)
    acc, other = PrivacyAccountant.open(path), PrivacyAccountant.open(path)
    counts = _counting(monkeypatch)
    acc.spend(1.0, 1e-5)
    assert counts == {"replays": 0, "rows": 1}  # its own row only (was: the 400 rows replayed and re-hashed)
    other.spend(1.0, 1e-5)
    other.spend(1.0, 1e-5)
    counts.update(replays=0, rows=0)
    with reserve(acc, [small]) as r:  # first reads the other process's two rows, then writes its hold and commit
        _commit(r, "after the other")
    assert counts == {"replays": 0, "rows": 4}
    assert len(acc.ledger) == 204 and acc.spent == pytest.approx((204.0, 204e-5))
    assert SQLiteLedger.open(path).verify() == 405 and counts["replays"] == 2  # open and verify replay it all


def test_a_failed_transaction_leaves_nothing_behind_in_the_verified_state(tmp_path):
    """Rows written in a transaction that rolls back were applied to the state: the next transaction replays."""
    path = tmp_path / "budget.sqlite"
    acc = PrivacyAccountant(epsilon=3.0, delta=0.03, ledger=path)
    with pytest.raises(RuntimeError, match="after the hold"):
        with acc._store.transaction() as tx:
            tx.hold([ONE], None)
            raise RuntimeError("after the hold")
    assert acc.held == (0.0, 0.0) and acc.history() == [] and acc.remaining == pytest.approx((3.0, 0.03))
    acc.spend(1.0, 0.01)
    assert SQLiteLedger.open(path).verify() == 1


def _rows_edited_after_verification(path: Path, edit) -> None:
    """The tamperer's way through SQLite: drop the triggers, edit, put the same triggers back (the schema then
    reads exactly as before)."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        for name in TRIGGERS:
            con.execute(f"DROP TRIGGER {name}")
        edit(con)
        for sql in _statements(_TRIGGERS):
            con.execute(sql)
    finally:
        con.close()


@pytest.mark.parametrize("what, match", [
    ("UPDATE dpgp_events SET epsilon = 0.0 WHERE id = 1", "row 1 \\('hold'\\) was changed after it was written"),
    ("UPDATE dpgp_events SET op = 'cancel' WHERE id = 2", "row 2 \\('cancel'\\) was changed after it was written"),
    ("DELETE FROM dpgp_events WHERE id = 2", "row 2 is missing"),
])
def test_an_early_row_edited_after_this_process_verified_it_is_found_at_its_next_transaction(tmp_path, what, match):
    path = _used_ledger(tmp_path)
    acc = PrivacyAccountant.open(path)
    acc.spend(0.1)  # verified (rows 1-4), and a transaction since
    _rows_edited_after_verification(path, lambda con: con.execute(what))
    _refused(path, match, acc)


def _edit_in_another_process(path: str, ready: str) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    for name in TRIGGERS:
        con.execute(f"DROP TRIGGER {name}")
    con.execute("UPDATE dpgp_events SET epsilon = 0.0 WHERE id = 1")
    for sql in _statements(_TRIGGERS):
        con.execute(sql)
    con.close()
    Path(ready).write_text("edited")


def test_an_edit_by_another_process_is_found_by_this_one(tmp_path):
    path, ready = _used_ledger(tmp_path), tmp_path / "edited"
    acc = PrivacyAccountant.open(path)
    acc.spend(0.1)
    proc = multiprocessing.get_context("spawn").Process(target=_edit_in_another_process, args=(str(path), str(ready)))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0 and ready.exists()
    _refused(path, "row 1 \\('hold'\\) was changed after it was written", acc)


def test_a_chain_rewritten_after_this_process_verified_it_is_found(tmp_path):
    """A consistent rewrite (every hash recomputed, budget untouched) is believed by a fresh open (the documented
    limit) but not by a process that verified the old chain: the hash at its verified length changed."""
    from dpgp_gpflow.ledger import _digest

    path = _used_ledger(tmp_path)
    acc = PrivacyAccountant.open(path)

    def rewrite(con):
        con.execute("UPDATE dpgp_events SET epsilon = 0.0 WHERE id = 1")
        prev = con.execute("SELECT value FROM dpgp_meta WHERE key = 'hash'").fetchone()[0]
        for row in [dict(zip(LOG_COLUMNS, r)) for r in con.execute("SELECT * FROM dpgp_events ORDER BY id")]:
            digest = _digest(prev, [row[c] for c in LOG_COLUMNS[:-2]])
            con.execute("UPDATE dpgp_events SET prev = ?, hash = ? WHERE id = ?", (prev, digest, row["id"]))
            prev = digest

    _rows_edited_after_verification(path, rewrite)
    with pytest.raises(LedgerError, match="row 3 was removed or rewritten since this process read it"):
        acc.spend(0.1)
    assert PrivacyAccountant.open(path).spent == (0.0, 0.01)  # what a fresh process believes


def test_a_verified_row_changed_beneath_sqlite_is_found_by_every_open_not_by_the_process_that_verified_it(tmp_path):
    """The documented limit of incremental checks: bytes changed without SQLite's schema noticing (here
    incremental blob I/O: 'commit' -> 'cancel', no trigger fires). The process that verified row 2 keeps counting
    it as verified (its checks stay right); every open and verify() replays the file and refuses it."""
    path = _used_ledger(tmp_path)
    acc = PrivacyAccountant.open(path)
    con = sqlite3.connect(path)
    try:
        with con.blobopen("dpgp_events", "op", 2) as blob:
            assert blob.read() == b"commit"
            blob.seek(0)
            blob.write(b"cancel")
        con.commit()
    finally:
        con.close()
    assert acc.spent == (1.0, 0.01) and acc.remaining == pytest.approx((1.0, 0.01))  # as verified
    acc.spend(0.5)
    assert acc.remaining == pytest.approx((0.5, 0.01))
    with pytest.raises(LedgerError, match="row 2 \\('cancel'\\) was changed after it was written"):
        acc._store.verify()
    with pytest.raises(LedgerError, match="row 2 \\('cancel'\\) was changed after it was written"):
        PrivacyAccountant.open(path)


# ---------------------------------------------------------------------------------------------
# Composition over many events: the tally gives what recomposing the whole list gives


def test_the_tally_composes_bit_for_bit_as_the_whole_list():
    """Random ledgers of Gaussian, pure and approximate events, held ones cancelled on the way: the tally's basic and
    GDP epsilons (with candidates) equal composition's over the explicit list, exactly; its PLD epsilons equal
    composition's too, exactly, and dp_accounting's own PLDAccountant's over the explicit list
    (reference.reference_pld_epsilon, built without the package) within the discretisation; the sums equal
    math.fsum's."""
    import math

    from reference import reference_pld_epsilon

    from dpgp_gpflow.composition import composed_epsilon
    from dpgp_gpflow.tally import EventTally

    rng = np.random.default_rng(7)
    for trial in range(30):
        tally, kept = EventTally(), []
        for _ in range(int(rng.integers(1, 60))):
            kind = rng.choice(["gaussian", "pure", "approximate"], p=[0.6, 0.2, 0.2])
            eps = float(rng.choice([0.1, 1.0 / 3.0, 1e-3, float(rng.uniform(0.01, 2))]))
            event = PrivacyEvent(eps, 0.0 if kind == "pure" else float(rng.choice([1e-9, 1e-5 / 3.0])), str(kind),
                                 float(rng.uniform(0.01, 1.5)) if kind == "gaussian" else None)
            tally.add(event)
            kept.append(event)
            if kept and rng.uniform() < 0.3:  # a cancelled hold
                gone = kept.pop(int(rng.integers(len(kept))))
                tally.remove(gone)
        candidates = [PrivacyEvent(0.5, 1e-6, "gaussian", 0.3)] if trial % 2 else [PrivacyEvent(0.2, 0.0, "pure")]
        everything = [*kept, *candidates]
        assert tally.basic(candidates) == (math.fsum(e.epsilon for e in everything),
                                           math.fsum(e.delta for e in everything))
        for method in ("basic", "gdp"):
            for delta in (1e-3, 1e-8):
                assert tally.epsilon(delta, method, candidates) == composed_epsilon(everything, delta, method)
        if trial < 3:
            pld = [tally.epsilon(delta, "pld", candidates) for delta in (1e-3, 1e-8)]
            assert pld == [composed_epsilon(everything, delta, "pld") for delta in (1e-3, 1e-8)]
            # both upper bounds, each within (number of discretised PLDs) x step of the exact epsilon; the reference at
            # a coarser step (quicker: it composes every event one by one)
            for got, ref in zip(pld, reference_pld_epsilon(everything, (1e-3, 1e-8), discretization=3e-3)):
                assert ref - len(everything) * 3e-3 - 1e-9 <= got <= ref + len(everything) * 1e-4 + 1e-9
        assert len(tally) == len(kept)
    with pytest.raises(KeyError):
        EventTally().remove(ONE)
    with pytest.raises(ValueError, match="finite mu"):
        EventTally([PrivacyEvent(1.0, 0.01, "gaussian", None)])


# ---------------------------------------------------------------------------------------------
# A ledger SQLite cannot write (issue 34 item 5): LedgerError in one line, nothing spent


def _immutable(path: Path, on: bool) -> bool:
    """chattr +i / -i: read-only even for root (the tests run as root, where chmod stops nothing)."""
    import shutil
    import subprocess

    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True).returncode == 0


def test_a_read_only_ledger_file_is_refused_with_one_line(tmp_path):
    """The file made immutable by the OS (chattr +i, which binds root too): reading still works, every write is
    refused with LedgerError naming the cause, and the file is unchanged."""
    path = _used_ledger(tmp_path)
    acc = PrivacyAccountant.open(path)
    if not _immutable(path, True):
        pytest.skip("chattr +i is not available here (needs ext2/3/4 or similar and CAP_LINUX_IMMUTABLE)")
    try:
        before = path.read_bytes()
        assert acc.remaining == pytest.approx((1.0, 0.01)) and PrivacyAccountant.open(path).spent == (1.0, 0.01)
        for write in (lambda: acc.spend(0.1), lambda: reserve(acc, [ONE]),
                      lambda: PrivacyAccountant.open(path).spend(0.1)):
            with pytest.raises(LedgerError, match="the privacy ledger is not writable \\(SQLite: attempt to write a "
                                                  "readonly database\\); nothing was spent") as info:
                write()
            assert "\n" not in str(info.value) and str(path) in str(info.value)
        assert path.read_bytes() == before
    finally:
        assert _immutable(path, False)
    acc.spend(0.1)  # writable again: the same accountant goes on
    assert acc.spent == pytest.approx((1.1, 0.01))


def test_a_read_only_connection_is_refused_with_one_line(tmp_path, monkeypatch):
    """Where chattr is not available: SQLite's own read-only mode (the ledger's connections opened with
    ?mode=ro instead of ?mode=rw), so the error is SQLite's real one, not a simulated exception."""
    import dpgp_gpflow.ledger as ledger_module

    path = _used_ledger(tmp_path)
    acc = PrivacyAccountant.open(path)
    connect = sqlite3.connect

    def read_only(database, *args, **kwargs):
        return connect(database.replace("?mode=rw", "?mode=ro"), *args, **kwargs)

    monkeypatch.setattr(ledger_module.sqlite3, "connect", read_only)
    before = path.read_bytes()
    assert acc.held == (1.0, 0.01)
    with pytest.raises(LedgerError, match="not writable \\(SQLite: attempt to write a readonly database\\)") as info:
        acc.spend(0.1)
    assert "\n" not in str(info.value)
    monkeypatch.undo()
    assert path.read_bytes() == before and PrivacyAccountant.open(path).spent == (1.0, 0.01)
