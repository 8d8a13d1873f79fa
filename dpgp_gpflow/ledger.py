"""Storage of a :class:`~dpgp_gpflow.accounting.PrivacyAccountant`'s events: in memory, or a
persistent SQLite ledger shared by processes, which detects tampering.

One interface (:class:`LedgerStore`, whose :meth:`~LedgerStore.transaction` yields a
:class:`LedgerTransaction`), two implementations: :class:`MemoryLedger` (the default, one process)
and :class:`SQLiteLedger` (a file, standard library :mod:`sqlite3`). The accountant holds all the
logic (checks, composition, reservations); a store only keeps rows and makes a
read-check-write sequence atomic: a lock in memory, ``BEGIN IMMEDIATE`` on disk, so concurrent
threads and processes sharing one ledger can never together overspend.

Every event is ``held`` when a release reserves its budget, then ``committed`` (after its draw,
before its value is returned) or ``cancelled`` (given back unused). Held events count against the
budget (every check subtracts them) but are not committed: the accountant shows them in ``held``, not
``spent``. A process killed between its hold and its commit leaves its events held, so they stay counted
against the budget (conservative: a crash can lose a result, never a spend). :meth:`LedgerStore.history` gives one
row per event with ``id``, ``time`` (UTC ISO, when held), ``settled`` (when committed or
cancelled), ``kind``, ``epsilon``, ``delta``, ``mu``, ``description``, ``dataset``, ``status``,
``pid`` and ``reservation``.

**The file (format** ``dpgp-ledger-2`` **) is an append-only, hash-chained log.** Row 0 is the
budget (table ``dpgp_meta``: format, epsilon, delta, composition, dataset label, creation time and
its SHA-256 ``hash``). Every later row (table ``dpgp_events``, :data:`LOG_COLUMNS`) is one step:
``hold``, ``record`` (committed at once), ``commit`` or ``cancel`` (of the held row ``ref``); no row
is ever changed or deleted, so a transition is a new row, and each row stores ``prev`` (the hash of
the row before it, row 0's for row 1) and ``hash`` (SHA-256 of its own columns and ``prev``). Triggers
refuse ``UPDATE``, ``DELETE`` and ``INSERT OR REPLACE`` through SQLite (a ``BEFORE INSERT`` trigger
admits only the next id, so it holds whatever the editing connection's ``recursive_triggers``).

**Checks.** Every open (and :meth:`SQLiteLedger.verify`) replays the whole file: format, tables,
budget row, every row's link, hash and meaning, SQLite's row counter and the schema, triggers included.
Every transaction (check, hold, commit, cancel, spend, history) then checks what may have changed since
its object last verified the file, in time independent of the file's length: the budget row and the
schema as verified, SQLite's schema cookie (``PRAGMA schema_version``) unchanged, the row at the verified
length still carrying the hash verified there, every later row (written by another process) chained
to it and checked as a replay checks it, and SQLite's row counter. Anything else replays the whole file.
A mismatch raises :class:`~dpgp_gpflow.exceptions.LedgerError` naming the first bad row, and nothing is
spent. Every way to change a written row through SQLite must drop the triggers first, which changes the
schema cookie (even when they are put back), so such an edit is found at the next transaction of every
process. A reservation's key stays in the memory of the process that
holds it (the file has only its hash), so only that process's :class:`Reservation` commits or
cancels it: another process cannot free a dead process's hold through the API.

What is detected: accidents (a wrong file, a truncated or damaged one, a CSV, a 0-byte file: an
existing path is never (re)created, only a path that does not exist is), and edits through SQLite by
someone without the means to recompute the chain: a changed epsilon, budget or status, a deleted,
inserted or reordered row, a held row cancelled by hand, dropped triggers, deleted trailing rows
while SQLite's counter still remembers them, and, within a process that already read the file, rows
that disappear (an older copy put back) or a chain rewritten since. Not found by a process that already
verified the rows (it keeps counting them as it verified them, so its own checks are unaffected), but by
every open and :meth:`SQLiteLedger.verify`: a verified row's bytes changed beneath SQLite's schema (a
hex editor, SQLite's incremental blob I/O, or ``PRAGMA schema_version`` written back by hand). What is
not found at all: whoever can rewrite the file and recompute the
chain consistently, since the chain has no secret key; trailing rows deleted together with a rewind
of SQLite's counter (``sqlite_sequence``) and the triggers put back, which leaves a shorter chain
that is valid; a file deleted, or replaced by an older copy before a process opens it. Back the file up, or sign or store a hash of it elsewhere, against
that. Files of the older format ``dpgp-ledger-1`` (no chain) are refused with a hint and left
unchanged, not migrated: nothing in them could be verified.

Privacy assumption: the ledger file is storage of the data owner, on a local file system (SQLite's
WAL mode needs shared memory: not a network share). Its ``-wal`` and ``-shm`` side files are part of
it while it is in use.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import sqlite3
import threading
import uuid
from abc import ABC, abstractmethod
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from .composition import COMPOSITIONS, PrivacyEvent
from .exceptions import LedgerError
from .tally import EventTally

__all__ = ["LedgerError", "LedgerStore", "MemoryLedger", "SQLiteLedger"]

#: How long an operation waits for another process's transaction on the ledger before failing.
BUSY_TIMEOUT_S = 60.0
#: Written into a new ledger; a file with another format is refused.
LEDGER_FORMAT = "dpgp-ledger-2"
#: The columns of a history row (one per event), in order.
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
    def tally(self) -> EventTally:
        """The committed and held events as an :class:`~dpgp_gpflow.tally.EventTally` (what a budget check
        composes, in time independent of the ledger's length); read it, never change it."""

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
        self._tally = EventTally()  # committed and held
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

    def tally(self) -> EventTally:
        return self._s._tally

    def _append(self, event: PrivacyEvent, dataset: Optional[str], status: str, key: str) -> int:
        now = _now()
        row = dict(id=len(self._s._rows) + 1, time=now, settled=now if status == "committed" else None,
                   status=status, kind=event.kind, epsilon=event.epsilon, delta=event.delta, mu=event.mu,
                   description=event.description, dataset=dataset, pid=os.getpid(), reservation=key)
        self._s._rows.append(row)
        return len(self._s._rows) - 1

    def hold(self, events: Sequence[PrivacyEvent], dataset: Optional[str]) -> str:
        key = _key()
        EventTally(events)  # refused before anything changes
        for e in events:
            self._s._tally.add(e)
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
            self._s._tally.remove(_event_of(self._s._rows[i]))

    def record(self, event: PrivacyEvent, dataset: Optional[str]) -> None:
        self._s._tally.add(event)
        self._append(event, dataset, "committed", _key())
        self._s._committed.append(event)


# ---------------------------------------------------------------------------------------------
# SQLite: an append-only log of rows, each chained to the one before by SHA-256

#: The first bytes of every SQLite 3 database.
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: Earlier formats, recognised and refused with a hint (no migration: see the module docstring).
_OLD_FORMATS = ("dpgp-ledger-1",)
#: The ``prev`` of the budget row, the first link of the chain.
_GENESIS = "0" * 64
#: The columns of a row of the file, in order (``hash`` covers all the others).
LOG_COLUMNS = ("id", "op", "time", "kind", "epsilon", "delta", "mu", "description", "dataset", "pid",
               "reservation", "ref", "prev", "hash")
_INSERT = f"INSERT INTO dpgp_events ({', '.join(LOG_COLUMNS)}) VALUES ({', '.join('?' * len(LOG_COLUMNS))})"

_NEW_HINT = ("nothing was spent. To start a new ledger, give a path that does not exist (an existing file is "
             "never replaced)")
_TAMPER_HINT = ("it was changed outside dpgp_gpflow (or damaged) and is refused; nothing was spent. Restore "
                "it from a backup, or start a new ledger at a path that does not exist with only the budget "
                "that is left")

_TABLES = """
CREATE TABLE dpgp_meta (
    key TEXT PRIMARY KEY,
    value TEXT
);
CREATE TABLE dpgp_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    op TEXT NOT NULL CHECK (op IN ('hold', 'record', 'commit', 'cancel')),
    time TEXT NOT NULL,
    kind TEXT CHECK (kind IN ('gaussian', 'pure', 'approximate')),
    epsilon REAL CHECK (epsilon >= 0),
    delta REAL CHECK (delta >= 0 AND delta <= 1),
    mu REAL,
    description TEXT,
    dataset TEXT,
    pid INTEGER NOT NULL,
    reservation TEXT,
    ref INTEGER,
    prev TEXT NOT NULL,
    hash TEXT NOT NULL
);
"""
# BEFORE INSERT triggers fire before any conflict resolution, so INSERT OR REPLACE over an existing
# row is refused whatever the connection's recursive_triggers setting (which a hand edit controls).
_TRIGGERS = """
CREATE TRIGGER dpgp_events_append BEFORE INSERT ON dpgp_events
WHEN NEW.id IS NULL OR NEW.id IS NOT (SELECT COALESCE(MAX(id), 0) + 1 FROM dpgp_events)
BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only: a row is added at the end, never replaced'); END;
CREATE TRIGGER dpgp_events_no_update BEFORE UPDATE ON dpgp_events
BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only: rows never change (a commit is a new row)'); END;
CREATE TRIGGER dpgp_events_no_delete BEFORE DELETE ON dpgp_events
BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only: rows are never deleted'); END;
CREATE TRIGGER dpgp_meta_no_insert BEFORE INSERT ON dpgp_meta
BEGIN SELECT RAISE(ABORT, 'the budget of a privacy ledger is fixed when it is created'); END;
CREATE TRIGGER dpgp_meta_no_update BEFORE UPDATE ON dpgp_meta
BEGIN SELECT RAISE(ABORT, 'the budget of a privacy ledger is fixed when it is created'); END;
CREATE TRIGGER dpgp_meta_no_delete BEFORE DELETE ON dpgp_meta
BEGIN SELECT RAISE(ABORT, 'the budget of a privacy ledger is fixed when it is created'); END;
"""


def _describe_budget(budget: Budget) -> str:
    return f"(epsilon={budget[0]!r}, delta={budget[1]!r}, composition={budget[2]!r})"


def _digest(prev: str, values: Sequence[Any]) -> str:
    """SHA-256 of ``prev`` and ``values`` as canonical JSON (types included: 1.0 and "1.0" differ)."""
    text = json.dumps([prev, *values], separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _settings_digest(meta: Dict[str, Any]) -> str:
    return _digest(_GENESIS, sorted([k, v] for k, v in meta.items() if k != "hash"))


def _public(key: str) -> str:
    """The reservation id written to the file: a hash of the key only its holder knows."""
    return hashlib.sha256(key.encode("ascii")).hexdigest()[:32]


class _State:
    """What a verified log says: the budget, every event row (history), what is committed and
    held. :meth:`apply` is the one place rows are interpreted, when replayed and when written."""

    def __init__(self, path: Path, budget: Budget, dataset: Optional[str], settings_hash: str) -> None:
        self.path, self.budget, self.dataset, self.settings_hash = path, budget, dataset, settings_hash
        self.events: Dict[int, Dict[str, Any]] = {}  # hold/record rows as history rows, by id
        self.committed: List[PrivacyEvent] = []  # in the order of commitment
        self.held: Dict[str, List[int]] = {}  # public reservation id -> its held row ids, in order
        self.hashes: List[str] = []  # hashes[i] is the hash of row i + 1
        self.last_hash = settings_hash
        self.meta: Dict[str, Any] = {}  # row 0 as read (dpgp_meta)
        self.tally = EventTally()  # committed and held events, for the budget checks

    @property
    def last_id(self) -> int:
        return len(self.hashes)

    def _bad(self, row: Dict[str, Any], why: str) -> LedgerError:
        return LedgerError(f"{self.path}: row {row['id']} ({row['op']!r}) {why}; {_TAMPER_HINT}")

    def apply(self, row: Dict[str, Any]) -> None:
        """Check row ``last_id + 1`` (its place, link, hash and meaning) and account for it."""
        if row["id"] != self.last_id + 1:
            raise LedgerError(f"{self.path}: row {self.last_id + 1} is missing (the next row is {row['id']}); "
                              f"{_TAMPER_HINT}")
        if row["prev"] != self.last_hash:
            raise self._bad(row, f"does not follow row {self.last_id} (a row before it was changed, deleted, "
                                 "inserted or reordered)")
        if row["hash"] != _digest(row["prev"], [row[c] for c in LOG_COLUMNS[:-2]]):
            raise self._bad(row, "was changed after it was written (its hash does not match)")
        op, ref = row["op"], row["ref"]
        if op in ("hold", "record"):
            event = _event_of(row)
            if not (type(row["epsilon"]) is float and type(row["delta"]) is float and 0.0 <= row["epsilon"] < math.inf
                    and 0.0 <= row["delta"] <= 1.0 and ref is None and isinstance(row["reservation"], str)
                    and row["kind"] in ("gaussian", "pure", "approximate")
                    and (row["mu"] is None or type(row["mu"]) is float)):
                raise self._bad(row, "is not an event dpgp_gpflow writes")
            try:
                self.tally.add(event)
            except (TypeError, ValueError):
                raise self._bad(row, "is not an event dpgp_gpflow writes") from None
            status = "held" if op == "hold" else "committed"
            self.events[row["id"]] = dict(
                id=row["id"], time=row["time"], settled=None if op == "hold" else row["time"], status=status,
                kind=row["kind"], epsilon=row["epsilon"], delta=row["delta"], mu=row["mu"],
                description=row["description"] or "", dataset=row["dataset"], pid=row["pid"],
                reservation=row["reservation"])
            if op == "hold":
                self.held.setdefault(row["reservation"], []).append(row["id"])
            else:
                self.committed.append(event)
        elif op in ("commit", "cancel"):
            held = self.events.get(ref) if type(ref) is int else None
            if held is None or held["status"] != "held" or any(
                    row[c] is not None for c in ("kind", "epsilon", "delta", "mu", "reservation")):
                raise self._bad(row, f"settles row {ref!r}, which is not held")
            ids = self.held[held["reservation"]]
            ids.remove(ref)
            if not ids:
                del self.held[held["reservation"]]
            held.update(status="committed" if op == "commit" else "cancelled", settled=row["time"])
            if op == "commit":
                held["description"] = row["description"] or ""
                self.committed.append(_event_of(held))
            else:
                self.tally.remove(_event_of(held))
        else:
            raise self._bad(row, "is of no known kind")
        self.hashes.append(row["hash"])
        self.last_hash = row["hash"]


class SQLiteLedger(LedgerStore):
    """A ledger file shared by threads and processes (WAL mode, a busy timeout, a connection per
    operation), verified on every open and transaction. Use :meth:`create_or_open` or
    :meth:`open`; the budget is stored in the file.

    An object keeps the state it verified (its rows, what is committed and held, their
    :class:`~dpgp_gpflow.tally.EventTally`) and its transactions verify only what changed since (the
    module docstring: what each check covers): a transaction costs the same at 10 rows as at 10,000.
    :meth:`verify` and every open replay the whole file. Its transactions are serialised (one lock per
    object, beside SQLite's between processes)."""

    path: Path  #: the file (always set, unlike the in-memory store's)

    def __init__(self, path: Union[str, os.PathLike], *, _state: _State, _version: Optional[int] = None) -> None:
        self.path = Path(path)
        self.budget: Budget = _state.budget
        self.dataset = _state.dataset  #: the label given when the ledger was created
        self._lock = threading.Lock()
        self._seen = (_state.last_id, _state.last_hash, _state.settings_hash)  # the newest verified head
        self._tx_lock = threading.RLock()  # one transaction of this object at a time: they share the state
        self._state: Optional[_State] = _state  # verified; None: replay the whole file at the next transaction
        self._version = _version  # SQLite's schema_version when it was verified

    # -- opening -------------------------------------------------------------------------------
    @classmethod
    def create_or_open(cls, path: Union[str, os.PathLike], budget: Budget,
                       dataset: Optional[str] = None) -> "SQLiteLedger":
        """Create the ledger at ``path`` with ``budget`` (and ``dataset`` as its default label) if
        nothing is there, else open it: :class:`LedgerError` if the file is not an intact ledger,
        ``ValueError`` if its budget differs. An existing file is never overwritten."""
        path = Path(path)
        if not path.parent.is_dir():
            raise FileNotFoundError(f"{path.parent}: no such folder for the privacy ledger {path.name}")
        if not os.path.lexists(path):
            _create(path, budget, dataset)  # another process may win the race: then its file is opened
        ledger = cls.open(path)
        if ledger.budget != (float(budget[0]), float(budget[1]), budget[2]):
            raise ValueError(
                f"{path} is a privacy ledger with budget {_describe_budget(ledger.budget)}, not "
                f"{_describe_budget(budget)}: a ledger's budget is fixed when it is created (open it with "
                "PrivacyAccountant.open(path) to use its own budget)")
        return ledger

    @classmethod
    def open(cls, path: Union[str, os.PathLike]) -> "SQLiteLedger":
        """Open and verify an existing ledger with its stored budget: ``FileNotFoundError`` if there
        is none, :class:`LedgerError` if the file is not an intact ledger."""
        path = Path(path)
        if not os.path.lexists(path):
            raise FileNotFoundError(f"{path}: no privacy ledger there")
        if path.is_dir():
            raise LedgerError(f"{path}: a folder, not a privacy ledger; {_NEW_HINT}")
        try:
            with open(path, "rb") as f:
                head = f.read(len(_SQLITE_MAGIC))
        except OSError as exc:
            raise LedgerError(f"{path}: cannot read the privacy ledger ({exc.strerror or exc})") from None
        if not head:
            raise LedgerError(f"{path}: an empty file, not a privacy ledger (a truncated one?); {_NEW_HINT}")
        if head != _SQLITE_MAGIC:
            raise LedgerError(f"{path}: not an SQLite database, so not a privacy ledger; {_NEW_HINT}")
        with _writable(path), _connection(path) as con:
            con.execute("BEGIN")
            try:
                version = _schema_version(con)
                state = _load(con, path)
            finally:
                con.execute("ROLLBACK")
        return cls(path, _state=state, _version=version)

    # -- the store -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self, write: bool = True, *, full: bool = False) -> Iterator["_SQLiteTransaction"]:
        """As :meth:`LedgerStore.transaction`; ``full``: replay and re-hash the whole file first (as
        :meth:`verify`), not only what changed since this object last verified it."""
        with self._tx_lock, _writable(self.path), _connection(self.path) as con:
            con.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            state: Optional[_State] = None
            try:
                state = self._verified(con, full)
                yield _SQLiteTransaction(con, state)
                con.execute("COMMIT")
            except BaseException:
                self._state = None  # rows it applied were not committed: replay the file next time
                with contextlib.suppress(sqlite3.Error):
                    con.execute("ROLLBACK")
                raise
            self._state = state
            self._saw(state)

    def _verified(self, con: sqlite3.Connection, full: bool = False) -> _State:
        """The file's state, checked against its chain and against what this object last saw: the whole
        file when ``full``, when this object holds no verified state or when SQLite's schema changed since
        (every edit of a written row must drop the triggers first), else only what changed since
        (:func:`_refresh`). The object's state is handed to the transaction (None until it commits)."""
        version = _schema_version(con)
        cached, self._state = self._state, None
        if full or cached is None or version is None or version != self._version:
            state = _load(con, self.path)
        else:
            state = _refresh(con, self.path, cached)
        with self._lock:
            last_id, last_hash, settings_hash = self._seen
        if state.settings_hash != settings_hash or state.budget != self.budget:
            raise LedgerError(f"{self.path}: its budget row was rewritten since it was opened; {_TAMPER_HINT}")
        if state.last_id < last_id or (last_id and state.hashes[last_id - 1] != last_hash):
            raise LedgerError(f"{self.path}: row {min(last_id, state.last_id + 1)} was removed or rewritten since this "
                              f"process read it (a file replaced by an older copy?); {_TAMPER_HINT}")
        self._version = version
        self._saw(state)
        return state

    def _saw(self, state: _State) -> None:
        with self._lock:
            if state.last_id > self._seen[0]:
                self._seen = (state.last_id, state.last_hash, state.settings_hash)

    def history(self) -> List[Dict[str, Any]]:
        with self.transaction(write=False) as tx:
            return [dict(row) for row in tx._state.events.values()]

    def verify(self) -> int:
        """Check the whole file (format, schema, every row's link and hash); returns its number of event
        rows, or raises :class:`LedgerError` naming the first bad row."""
        with self.transaction(write=False, full=True) as tx:
            return tx._state.last_id

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check``: ``"ok"`` for a sound file."""
        with _writable(self.path), _connection(self.path) as con:
            return "; ".join(r[0] for r in con.execute("PRAGMA integrity_check").fetchall())


class _SQLiteTransaction(LedgerTransaction):
    # Every write is a new row chained to the last one; the state is updated by the same code that
    # replays the file, so what is written is what the next reader will accept.
    def __init__(self, con: sqlite3.Connection, state: _State) -> None:
        self._con, self._state = con, state

    def events(self) -> Tuple[List[PrivacyEvent], List[PrivacyEvent]]:
        st = self._state
        return list(st.committed), [_event_of(st.events[i]) for ids in st.held.values() for i in ids]

    def tally(self) -> EventTally:
        return self._state.tally

    def _append(self, op: str, event: Optional[PrivacyEvent] = None, *, dataset: Optional[str] = None,
                reservation: Optional[str] = None, ref: Optional[int] = None, description: str = "") -> None:
        st = self._state
        fields: Tuple[Any, ...] = (None, None, None, None)
        if event is not None:  # as SQLite returns them (+ 0.0: it stores -0.0 as 0.0)
            fields = (str(event.kind), float(event.epsilon) + 0.0, float(event.delta) + 0.0,
                      None if event.mu is None else float(event.mu) + 0.0)
            description = event.description
        values = (st.last_id + 1, op, _now(), *fields, str(description or ""),
                  None if dataset is None else str(dataset), os.getpid(), reservation, ref)
        row = dict(zip(LOG_COLUMNS, (*values, st.last_hash, _digest(st.last_hash, values))))
        st.apply(row)
        self._con.execute(_INSERT, tuple(row[c] for c in LOG_COLUMNS))
        stored = self._con.execute(f"SELECT {', '.join(LOG_COLUMNS)} FROM dpgp_events WHERE id = ?", (row["id"],))
        if stored.fetchone() != tuple(row[c] for c in LOG_COLUMNS):  # would not verify: write nothing
            raise RuntimeError(f"ledger row {row['id']} would not read back as written; nothing was recorded")

    def hold(self, events: Sequence[PrivacyEvent], dataset: Optional[str]) -> str:
        key = _key()
        for e in events:
            self._append("hold", e, dataset=dataset, reservation=_public(key))
        return key

    def commit(self, key: str, event: PrivacyEvent) -> None:
        ids = self._state.held.get(_public(key))
        if not ids:
            raise RuntimeError(f"reservation {_public(key)} holds nothing to commit")
        _check_same_budget(self._state.events[ids[0]], event)
        self._append("commit", ref=ids[0], description=event.description)

    def cancel(self, key: str) -> None:
        for i in list(self._state.held.get(_public(key), [])):
            self._append("cancel", ref=i)

    def record(self, event: PrivacyEvent, dataset: Optional[str]) -> None:
        self._append("record", event, dataset=dataset, reservation=_public(_key()))


def _create(path: Path, budget: Budget, dataset: Optional[str]) -> None:
    """Build a complete ledger in a temporary file next to ``path``, then link it there (atomic, and
    never over an existing file: if another process linked first, its ledger stays)."""
    for side in ("-wal", "-journal"):
        if os.path.lexists(f"{path}{side}"):
            raise LedgerError(f"{path}{side}: left over from an earlier database at this path, and would be read as "
                              f"part of a new ledger there; move it away, or give another path")
    tmp = path.with_name(f".{path.name}.{_key()}.creating")
    try:
        try:
            con = sqlite3.connect(str(tmp), isolation_level=None)
            con.execute("PRAGMA synchronous = FULL")
        except sqlite3.OperationalError as exc:  # a folder we cannot write to
            raise PermissionError(f"{path}: cannot create a privacy ledger there ({exc})") from None
        try:
            con.execute("BEGIN")
            for statement in _statements(_TABLES):
                con.execute(statement)
            meta = dict(format=LEDGER_FORMAT, epsilon=repr(float(budget[0])), delta=repr(float(budget[1])),
                        composition=str(budget[2]), dataset=None if dataset is None else str(dataset),
                        created=_now())
            meta["hash"] = _settings_digest(meta)
            con.executemany("INSERT INTO dpgp_meta (key, value) VALUES (?, ?)", meta.items())
            for statement in _statements(_TRIGGERS):
                con.execute(statement)
            con.execute("COMMIT")
            con.execute("PRAGMA journal_mode = WAL")  # persistent: readers never block the writer
            _load(con, tmp)  # it verifies, before it is given its name
        finally:
            con.close()
        if os.path.exists(f"{tmp}-wal"):
            raise OSError(f"{tmp}: SQLite left its write-ahead log behind; the ledger was not created")
        _fsync(tmp)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return
        except OSError:  # a file system without hard links: claim the name, then copy
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return
            with os.fdopen(fd, "wb") as out:
                out.write(tmp.read_bytes())
                out.flush()
                os.fsync(out.fileno())
        _fsync(path.parent)
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


def _fsync(path: Path) -> None:
    """Flush a file (or a folder's entries) to disk, where the platform allows it."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _connection(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection to an existing file (never creates one) in autocommit mode (transactions are
    explicit), waiting up to :data:`BUSY_TIMEOUT_S` for other writers, with full fsync on commit;
    always closed."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the privacy ledger has gone")
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=rw", uri=True, timeout=BUSY_TIMEOUT_S,
                          isolation_level=None)
    try:
        try:
            con.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            con.execute("PRAGMA synchronous = FULL")  # a committed spend survives a power cut
            con.execute("PRAGMA recursive_triggers = ON")  # (the triggers do not rely on it)
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as exc:  # a damaged header
            raise LedgerError(f"{path}: not a readable privacy ledger ({exc}); {_NEW_HINT}") from None
        yield con
    finally:
        con.close()


@contextlib.contextmanager
def _writable(path: Path) -> Iterator[None]:
    """:class:`LedgerError` in one line for a ledger SQLite cannot write (a read-only file or folder:
    SQLite also writes the ``-wal`` and ``-shm`` files beside it), instead of ``sqlite3.OperationalError``."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        text = str(exc)
        if "readonly" not in text and "read-only" not in text and "unable to open" not in text:
            raise
        raise LedgerError(f"{path}: the privacy ledger is not writable (SQLite: {text}); nothing was spent. Make the "
                          "file and its folder writable (SQLite writes its -wal and -shm files beside it)") from None


def _schema_version(con: sqlite3.Connection) -> Optional[int]:
    """SQLite's schema cookie, which every change of the schema (a trigger dropped or created) increments;
    None when the file cannot tell (the full check then says why)."""
    try:
        return int(con.execute("PRAGMA schema_version").fetchone()[0])
    except sqlite3.OperationalError:
        raise
    except sqlite3.DatabaseError:
        return None


_SCHEMA_QUERY = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"


@functools.lru_cache(maxsize=1)
def _expected_schema() -> Tuple[Tuple[Any, ...], ...]:
    con = sqlite3.connect(":memory:")
    try:
        for statement in _statements(_TABLES + _TRIGGERS):
            con.execute(statement)
        return tuple(con.execute(_SCHEMA_QUERY).fetchall())
    finally:
        con.close()


def _load(con: sqlite3.Connection, path: Path) -> _State:
    """Read and verify the whole ledger inside the caller's transaction: its format, tables, budget
    row, every row's link and hash, the tail counter and the triggers. :class:`LedgerError` for the
    first thing wrong."""
    try:
        schema = tuple(con.execute(_SCHEMA_QUERY).fetchall())
        tables = {row[1] for row in schema if row[0] == "table"}
        if "dpgp_meta" not in tables:
            what = f"tables {sorted(tables)}" if tables else "no tables"
            raise LedgerError(f"{path}: an SQLite database that is not a privacy ledger ({what}); {_NEW_HINT}")
        meta = dict(con.execute("SELECT key, value FROM dpgp_meta").fetchall())
        fmt = meta.get("format")
        if fmt in _OLD_FORMATS:
            raise _old_format(con, path, fmt, meta)
        if fmt != LEDGER_FORMAT:
            raise LedgerError(f"{path}: ledger format {fmt!r}, this version reads {LEDGER_FORMAT!r}; {_NEW_HINT}")
        expected = _expected_schema()
        if [s for s in schema if s[0] == "table"] != [s for s in expected if s[0] == "table"]:
            raise LedgerError(f"{path}: the ledger's tables were altered; {_TAMPER_HINT}")
        if meta.get("hash") != _settings_digest(meta):
            raise LedgerError(f"{path}: row 0 (the budget) was changed after the ledger was created; {_TAMPER_HINT}")
        try:
            budget = (float(meta["epsilon"]), float(meta["delta"]), meta["composition"])
        except (KeyError, TypeError, ValueError):
            raise LedgerError(f"{path}: row 0 (the budget) is unreadable; {_TAMPER_HINT}") from None
        if not (budget[0] > 0.0 and 0.0 <= budget[1] < 1.0 and budget[2] in COMPOSITIONS):
            raise LedgerError(f"{path}: row 0 (the budget) {_describe_budget(budget)} is invalid; {_TAMPER_HINT}")
        state = _State(path, budget, meta.get("dataset"), meta["hash"])
        state.meta = meta
        for values in con.execute(f"SELECT {', '.join(LOG_COLUMNS)} FROM dpgp_events ORDER BY id"):
            state.apply(dict(zip(LOG_COLUMNS, values)))
        counter = con.execute("SELECT seq FROM sqlite_sequence WHERE name = 'dpgp_events'").fetchone()
        if (counter[0] if counter else 0) != state.last_id:
            raise LedgerError(f"{path}: row {state.last_id + 1} onwards are missing (the file counted "
                              f"{counter[0] if counter else 0} rows); {_TAMPER_HINT}")
        if schema != expected:
            raise LedgerError(f"{path}: the ledger's triggers, which refuse edits, were dropped or changed; "
                              f"{_TAMPER_HINT}")
        return state
    except sqlite3.OperationalError as exc:  # busy, locked, unreadable, or a table without our columns
        if "no such" not in str(exc):
            raise
        raise LedgerError(f"{path}: not a privacy ledger ({exc}); {_NEW_HINT}") from None
    except sqlite3.DatabaseError as exc:  # not a database, or a damaged one
        raise LedgerError(f"{path}: not a readable privacy ledger ({exc}); {_NEW_HINT}") from None


def _refresh(con: sqlite3.Connection, path: Path, state: _State) -> _State:
    """``state`` (verified by this process, at the same schema version) brought up to date inside the
    caller's transaction, reading only what may have changed: the budget row and the schema must be as
    verified, the row at ``state.last_id`` must still have the hash verified there (so no row up to it was
    removed, and no rewrite with a recomputed chain went unseen), every later row is checked (link, hash,
    meaning) and applied, and SQLite's row counter must match. Anything else replays the whole file
    (:func:`_load`, which names what is wrong). ``state`` is changed in place."""
    try:
        meta = dict(con.execute("SELECT key, value FROM dpgp_meta").fetchall())
        schema = tuple(con.execute(_SCHEMA_QUERY).fetchall())
        head = con.execute("SELECT hash FROM dpgp_events WHERE id = ?", (state.last_id,)).fetchone()
        rows = con.execute(f"SELECT {', '.join(LOG_COLUMNS)} FROM dpgp_events WHERE id > ? ORDER BY id",
                           (state.last_id,)).fetchall()
        counter = con.execute("SELECT seq FROM sqlite_sequence WHERE name = 'dpgp_events'").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such" not in str(exc):
            raise
        return _load(con, path)
    except sqlite3.DatabaseError:
        return _load(con, path)
    if (meta != state.meta or schema != _expected_schema() or head != ((state.last_hash,) if state.last_id else None)
            or (counter[0] if counter else 0) != state.last_id + len(rows)):
        return _load(con, path)
    try:
        for values in rows:
            state.apply(dict(zip(LOG_COLUMNS, values)))
    except LedgerError:
        return _load(con, path)  # the first bad row, named as a full check names it
    return state


def _old_format(con: sqlite3.Connection, path: Path, fmt: str, meta: Dict[str, Any]) -> LedgerError:
    try:
        eps, delta = con.execute("SELECT TOTAL(epsilon), TOTAL(delta) FROM dpgp_events "
                                 "WHERE status IN ('held', 'committed')").fetchone()
        spent = (f" It records epsilon={eps:.6g}, delta={delta:.6g} spent or held (basic composition) of its budget "
                 f"(epsilon={meta.get('epsilon')}, delta={meta.get('delta')}).")
    except sqlite3.DatabaseError:
        spent = ""
    return LedgerError(f"{path}: a ledger of the older format {fmt!r}, without the hash chain that detects "
                       f"tampering; this version refuses it (left unchanged).{spent} Start a new ledger at a path "
                       "that does not exist, with only the budget that is left")


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
