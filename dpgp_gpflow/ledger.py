"""Storage of a :class:`~dpgp_gpflow.accounting.PrivacyAccountant`'s events: in memory, or a
persistent SQLite ledger shared by processes.

One interface (:class:`LedgerStore`, whose :meth:`~LedgerStore.transaction` yields a
:class:`LedgerTransaction`), two implementations: :class:`MemoryLedger` (the default, one process)
and :class:`SQLiteLedger` (a file, standard library :mod:`sqlite3`). The accountant holds all the
logic (checks, composition, reservations); a store only keeps rows and makes a
read-check-write sequence atomic: a lock in memory, ``BEGIN IMMEDIATE`` on disk, so concurrent
threads and processes sharing one ledger can never together overspend.

Every event is a row, never deleted: ``held`` when a release reserves its budget, then
``committed`` (after its draw, before its value is returned) or ``cancelled`` (given back unused).
Held rows count as spent. A process killed between its hold and its commit leaves its rows held,
so they stay counted (conservative: a crash can lose a result, never a spend). Rows carry ``id``,
``time`` (UTC ISO, when held), ``settled`` (when committed or cancelled), ``kind``, ``epsilon``,
``delta``, ``mu``, ``description``, ``dataset``, ``status``, ``pid`` and ``reservation``.

Privacy assumption: the ledger file is trusted storage of the data owner, on a local file system
(SQLite's WAL mode needs shared memory: not a network share). The guarantee covers every release
charged to it while it is intact; a ledger deleted, replaced, restored from an older copy or edited
by hand (triggers refuse deletes and edits through SQLite, but not someone who drops them) is
outside the guarantee. Its ``-wal`` and ``-shm`` side files are part of it while it is in use.
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import threading
import uuid
from abc import ABC, abstractmethod
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from .composition import PrivacyEvent

__all__ = [
    "BUSY_TIMEOUT_S",
    "LEDGER_FORMAT",
    "LedgerStore",
    "LedgerTransaction",
    "MemoryLedger",
    "SQLiteLedger",
]

#: How long an operation waits for another process's transaction on the ledger before failing.
BUSY_TIMEOUT_S = 60.0
#: Written into a new ledger; a file with another format is refused.
LEDGER_FORMAT = "dpgp-ledger-1"
#: The columns of a history row, in order.
COLUMNS = ("id", "time", "settled", "status", "kind", "epsilon", "delta", "mu", "description", "dataset",
           "pid", "reservation")

Budget = Tuple[float, float, str]  # (epsilon, delta, composition)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _key() -> str:
    return uuid.uuid4().hex


class LedgerTransaction(ABC):
    """Reads and writes of one atomic step (see :meth:`LedgerStore.transaction`)."""

    @abstractmethod
    def events(self) -> Tuple[List[PrivacyEvent], List[PrivacyEvent]]:
        """``(committed, held)`` events; committed ones in the order they were committed."""

    @abstractmethod
    def hold(self, events: Sequence[PrivacyEvent], dataset: Optional[str]) -> str:
        """Add ``events`` as held rows of a new reservation; returns its key."""

    @abstractmethod
    def commit(self, key: str, event: PrivacyEvent) -> None:
        """Turn the first held row of reservation ``key`` into committed ``event`` (same budget)."""

    @abstractmethod
    def cancel(self, key: str) -> None:
        """Mark every row still held by reservation ``key`` cancelled."""

    @abstractmethod
    def record(self, event: PrivacyEvent, dataset: Optional[str]) -> None:
        """Add ``event`` directly as committed."""


class LedgerStore(ABC):
    """Where an accountant's events live. ``path`` is None in memory."""

    path: Optional[Path] = None

    @abstractmethod
    def transaction(self, write: bool = True) -> contextlib.AbstractContextManager:
        """A context manager yielding a :class:`LedgerTransaction`: everything done in it is atomic
        and isolated from every other transaction on the same ledger (any thread or process). An
        exception inside undoes its writes."""

    @abstractmethod
    def history(self) -> List[Dict[str, Any]]:
        """Every row (held, committed, cancelled) as a dict of :data:`COLUMNS`, in ``id`` order."""

    def events(self) -> Tuple[List[PrivacyEvent], List[PrivacyEvent]]:
        """``(committed, held)``, read consistently."""
        with self.transaction(write=False) as tx:
            return tx.events()


def _event_of(row: Dict[str, Any]) -> PrivacyEvent:
    return PrivacyEvent(row["epsilon"], row["delta"], row["kind"], row["mu"], row["description"] or "")


def _check_same_budget(row: Dict[str, Any], event: PrivacyEvent) -> None:
    if (row["epsilon"], row["delta"], row["kind"], row["mu"]) != (event.epsilon, event.delta, event.kind, event.mu):
        raise ValueError(f"committing {event} into a reservation that holds a different event {_event_of(row)}")


# ---------------------------------------------------------------------------------------------
# In memory


class MemoryLedger(LedgerStore):
    """Rows in a list, one lock (re-entrant) for atomicity: one process only, lost when it exits."""

    def __init__(self) -> None:
        self._rows: List[Dict[str, Any]] = []
        self._committed: List[PrivacyEvent] = []  # in the order of commitment
        self._held: Dict[str, List[int]] = {}  # reservation -> indices of its held rows, in order
        self._lock = threading.RLock()

    @contextlib.contextmanager
    def transaction(self, write: bool = True) -> Iterator["_MemoryTransaction"]:
        with self._lock:
            yield _MemoryTransaction(self)

    def history(self) -> List[Dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self._rows]


class _MemoryTransaction(LedgerTransaction):
    # Writes validate before changing anything, so an exception leaves the store as it was.
    def __init__(self, store: MemoryLedger) -> None:
        self._s = store

    def events(self) -> Tuple[List[PrivacyEvent], List[PrivacyEvent]]:
        rows = self._s._rows
        held = [_event_of(rows[i]) for ids in self._s._held.values() for i in ids]
        return list(self._s._committed), held

    def _append(self, event: PrivacyEvent, dataset: Optional[str], status: str, key: str) -> int:
        now = _now()
        row = dict(id=len(self._s._rows) + 1, time=now, settled=now if status == "committed" else None,
                   status=status, kind=event.kind, epsilon=event.epsilon, delta=event.delta, mu=event.mu,
                   description=event.description, dataset=dataset, pid=os.getpid(), reservation=key)
        self._s._rows.append(row)
        return len(self._s._rows) - 1

    def hold(self, events: Sequence[PrivacyEvent], dataset: Optional[str]) -> str:
        key = _key()
        self._s._held[key] = [self._append(e, dataset, "held", key) for e in events]
        return key

    def commit(self, key: str, event: PrivacyEvent) -> None:
        ids = self._s._held.get(key)
        if not ids:
            raise RuntimeError(f"reservation {key} holds nothing to commit")
        row = self._s._rows[ids[0]]
        _check_same_budget(row, event)
        ids.pop(0)
        row.update(status="committed", settled=_now(), description=event.description)
        self._s._committed.append(event)

    def cancel(self, key: str) -> None:
        now = _now()
        for i in self._s._held.pop(key, []):
            self._s._rows[i].update(status="cancelled", settled=now)

    def record(self, event: PrivacyEvent, dataset: Optional[str]) -> None:
        self._append(event, dataset, "committed", _key())
        self._s._committed.append(event)


# ---------------------------------------------------------------------------------------------
# SQLite

_SCHEMA = """
CREATE TABLE IF NOT EXISTS dpgp_meta (
    key TEXT PRIMARY KEY,
    value TEXT
);
CREATE TABLE IF NOT EXISTS dpgp_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time TEXT NOT NULL,
    settled TEXT,
    status TEXT NOT NULL CHECK (status IN ('held', 'committed', 'cancelled')),
    kind TEXT NOT NULL CHECK (kind IN ('gaussian', 'pure', 'approximate')),
    epsilon REAL NOT NULL CHECK (epsilon >= 0),
    delta REAL NOT NULL CHECK (delta >= 0 AND delta <= 1),
    mu REAL,
    description TEXT NOT NULL DEFAULT '',
    dataset TEXT,
    pid INTEGER NOT NULL,
    reservation TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS dpgp_events_status ON dpgp_events (status);
CREATE INDEX IF NOT EXISTS dpgp_events_reservation ON dpgp_events (reservation);
CREATE TRIGGER IF NOT EXISTS dpgp_events_no_delete BEFORE DELETE ON dpgp_events
BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only: rows are never deleted'); END;
CREATE TRIGGER IF NOT EXISTS dpgp_events_insert BEFORE INSERT ON dpgp_events
WHEN NEW.status NOT IN ('held', 'committed')
BEGIN SELECT RAISE(ABORT, 'a new ledger row is held or committed'); END;
CREATE TRIGGER IF NOT EXISTS dpgp_events_transitions BEFORE UPDATE ON dpgp_events
WHEN OLD.status != 'held' OR NEW.status NOT IN ('committed', 'cancelled')
  OR NEW.id IS NOT OLD.id OR NEW.time IS NOT OLD.time OR NEW.kind IS NOT OLD.kind
  OR NEW.epsilon IS NOT OLD.epsilon OR NEW.delta IS NOT OLD.delta OR NEW.mu IS NOT OLD.mu
  OR NEW.dataset IS NOT OLD.dataset OR NEW.pid IS NOT OLD.pid OR NEW.reservation IS NOT OLD.reservation
BEGIN SELECT RAISE(ABORT, 'a ledger row only changes status, from held to committed or cancelled'); END;
CREATE TRIGGER IF NOT EXISTS dpgp_meta_no_update BEFORE UPDATE ON dpgp_meta
BEGIN SELECT RAISE(ABORT, 'the budget of a privacy ledger is fixed when it is created'); END;
CREATE TRIGGER IF NOT EXISTS dpgp_meta_no_delete BEFORE DELETE ON dpgp_meta
BEGIN SELECT RAISE(ABORT, 'the budget of a privacy ledger is fixed when it is created'); END;
"""


def _describe_budget(budget: Budget) -> str:
    return f"(epsilon={budget[0]!r}, delta={budget[1]!r}, composition={budget[2]!r})"


class SQLiteLedger(LedgerStore):
    """A ledger file shared by threads and processes (WAL mode, a busy timeout, a connection per
    operation). Use :meth:`create_or_open` or :meth:`open`; the budget is stored in the file."""

    def __init__(self, path: Union[str, os.PathLike], *, _budget: Budget, _dataset: Optional[str]) -> None:
        self.path = Path(path)
        self.budget = _budget
        self.dataset = _dataset  #: the label given when the ledger was created

    # -- opening -------------------------------------------------------------------------------
    @classmethod
    def create_or_open(cls, path: Union[str, os.PathLike], budget: Budget,
                       dataset: Optional[str] = None) -> "SQLiteLedger":
        """Create the ledger at ``path`` with ``budget`` (and ``dataset`` as its default label) if it
        does not exist, else open it; ``ValueError`` if it exists with a different budget."""
        path = Path(path)
        if not path.parent.is_dir():
            raise FileNotFoundError(f"{path.parent}: no such folder for the privacy ledger {path.name}")
        try:
            with _connection(path, create=True) as con:
                con.execute("PRAGMA journal_mode=WAL")  # persistent: readers never block the writer
                con.execute("BEGIN IMMEDIATE")  # two processes creating the same file: one creates
                try:
                    stored = _read_meta(con, path)
                    if stored is None:
                        for statement in _statements(_SCHEMA):  # (executescript would COMMIT)
                            con.execute(statement)
                        meta = dict(format=LEDGER_FORMAT, epsilon=repr(float(budget[0])),
                                    delta=repr(float(budget[1])), composition=budget[2], dataset=dataset,
                                    created=_now())
                        con.executemany("INSERT INTO dpgp_meta (key, value) VALUES (?, ?)", meta.items())
                        stored = (budget, dataset)
                    con.execute("COMMIT")
                except BaseException:
                    con.execute("ROLLBACK")
                    raise
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"{path}: not a readable privacy ledger ({exc})") from None
        (stored_budget, stored_dataset) = stored
        if stored_budget != (float(budget[0]), float(budget[1]), budget[2]):
            raise ValueError(
                f"{path} is a privacy ledger with budget {_describe_budget(stored_budget)}, not "
                f"{_describe_budget(budget)}: a ledger's budget is fixed when it is created (open it with "
                "PrivacyAccountant.open(path) to use its own budget)")
        return cls(path, _budget=stored_budget, _dataset=stored_dataset)

    @classmethod
    def open(cls, path: Union[str, os.PathLike]) -> "SQLiteLedger":
        """Open an existing ledger with its stored budget; ``FileNotFoundError`` if there is none."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no privacy ledger there")
        try:
            with _connection(path, create=False) as con:
                stored = _read_meta(con, path)
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"{path}: not a readable privacy ledger ({exc})") from None
        if stored is None:
            raise ValueError(f"{path}: not a privacy ledger (it has no budget)")
        return cls(path, _budget=stored[0], _dataset=stored[1])

    # -- the store -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self, write: bool = True) -> Iterator["_SQLiteTransaction"]:
        with _connection(self.path, create=False) as con:
            con.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield _SQLiteTransaction(con)
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    def history(self) -> List[Dict[str, Any]]:
        with _connection(self.path, create=False) as con:
            cur = con.execute(f"SELECT {', '.join(COLUMNS)} FROM dpgp_events ORDER BY id")
            return [dict(zip(COLUMNS, r)) for r in cur.fetchall()]

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check``: ``"ok"`` for a sound file."""
        with _connection(self.path, create=False) as con:
            return "; ".join(r[0] for r in con.execute("PRAGMA integrity_check").fetchall())


class _SQLiteTransaction(LedgerTransaction):
    def __init__(self, con: sqlite3.Connection) -> None:
        self._con = con

    def events(self) -> Tuple[List[PrivacyEvent], List[PrivacyEvent]]:
        rows = self._con.execute(
            "SELECT status, kind, epsilon, delta, mu, description FROM dpgp_events "
            "WHERE status IN ('committed', 'held') ORDER BY settled, id").fetchall()
        committed, held = [], []
        for status, kind, eps, delta, mu, description in rows:
            (committed if status == "committed" else held).append(PrivacyEvent(eps, delta, kind, mu, description))
        return committed, held

    def _insert(self, event: PrivacyEvent, dataset: Optional[str], status: str, key: str) -> None:
        now = _now()
        self._con.execute(
            "INSERT INTO dpgp_events (time, settled, status, kind, epsilon, delta, mu, description, dataset, pid, "
            "reservation) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (now, now if status == "committed" else None, status, event.kind, float(event.epsilon),
             float(event.delta), None if event.mu is None else float(event.mu), event.description, dataset,
             os.getpid(), key))

    def hold(self, events: Sequence[PrivacyEvent], dataset: Optional[str]) -> str:
        key = _key()
        for e in events:
            self._insert(e, dataset, "held", key)
        return key

    def commit(self, key: str, event: PrivacyEvent) -> None:
        row = self._con.execute(
            "SELECT id, kind, epsilon, delta, mu, description FROM dpgp_events "
            "WHERE reservation = ? AND status = 'held' ORDER BY id LIMIT 1", (key,)).fetchone()
        if row is None:
            raise RuntimeError(f"reservation {key} holds nothing to commit")
        _check_same_budget(dict(zip(("id", "kind", "epsilon", "delta", "mu", "description"), row)), event)
        self._con.execute("UPDATE dpgp_events SET status = 'committed', settled = ?, description = ? WHERE id = ?",
                          (_now(), event.description, row[0]))

    def cancel(self, key: str) -> None:
        self._con.execute("UPDATE dpgp_events SET status = 'cancelled', settled = ? "
                          "WHERE reservation = ? AND status = 'held'", (_now(), key))

    def record(self, event: PrivacyEvent, dataset: Optional[str]) -> None:
        self._insert(event, dataset, "committed", _key())


@contextlib.contextmanager
def _connection(path: Path, *, create: bool) -> Iterator[sqlite3.Connection]:
    """A connection in autocommit mode (transactions are explicit), waiting up to
    :data:`BUSY_TIMEOUT_S` for other writers, with full fsync on commit; always closed."""
    if create:
        con = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
    else:
        if not path.is_file():
            raise FileNotFoundError(f"{path}: the privacy ledger has gone")
        con = sqlite3.connect(path.resolve().as_uri() + "?mode=rw", uri=True, timeout=BUSY_TIMEOUT_S,
                              isolation_level=None)
    try:
        con.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        con.execute("PRAGMA synchronous = FULL")  # a committed spend survives a power cut
        yield con
    finally:
        con.close()


def _read_meta(con: sqlite3.Connection, path: Path) -> Optional[Tuple[Budget, Optional[str]]]:
    """The stored ``(budget, dataset)``, None for an empty database; ``ValueError`` for another one."""
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
    if "dpgp_meta" not in tables:
        if tables - {"sqlite_sequence"}:
            raise ValueError(f"{path}: an SQLite database that is not a privacy ledger (tables {sorted(tables)})")
        return None
    meta = dict(con.execute("SELECT key, value FROM dpgp_meta").fetchall())
    if meta.get("format") != LEDGER_FORMAT:
        raise ValueError(f"{path}: ledger format {meta.get('format')!r}, expected {LEDGER_FORMAT!r}")
    try:
        budget = (float(meta["epsilon"]), float(meta["delta"]), str(meta["composition"]))
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{path}: the ledger's budget is unreadable") from None
    if not (budget[0] > 0.0 and 0.0 <= budget[1] < 1.0) or math.isnan(budget[0]):
        raise ValueError(f"{path}: the ledger's budget {_describe_budget(budget)} is invalid")
    return budget, meta.get("dataset")


def _statements(script: str) -> List[str]:
    """Split the schema into statements (triggers contain ``;`` inside BEGIN ... END)."""
    out, current = [], []
    for line in script.strip().splitlines():
        current.append(line)
        text = "\n".join(current).strip()
        if text.endswith(";") and sqlite3.complete_statement(text):
            out.append(text)
            current = []
    return out
