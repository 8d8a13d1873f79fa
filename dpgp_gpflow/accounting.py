"""Privacy budget accounting: a ledger of DP events with a hard ceiling, and the one place where
every mechanism's budget is checked before and charged after.

One neighbouring relation throughout: two datasets are neighbours when they differ in one private
output ``y_i``, replaced by another value within the public bounds (so ``|y_i - y'_i| <= d``).

Check -> compute -> spend. Every mechanism calls :func:`reserve` before it computes anything from
the private outputs: the budget of everything it is about to release is checked against every
accountant that applies (the one passed, or every enclosing ``with PrivacyAccountant(...)``) and
*held*, so that concurrent releases (threads, processes sharing a ledger) can never together
overspend. After each draw the mechanism commits its event (:meth:`Reservation.commit`); what is
still held when it finishes (an error, a refusal after the draw) is given back. An over-budget
release raises :class:`~dpgp_gpflow.BudgetExceededError` and draws nothing.

Events are kept as events (a Gaussian mechanism with its ``mu = sensitivity / noise std``, or a
pure-epsilon mechanism), so tighter composition can be computed from the same ledger
(:mod:`dpgp_gpflow.composition`, ``docs/composition.md``).

The events are stored in memory (default) or in a persistent SQLite ledger shared by processes
(``PrivacyAccountant(..., ledger="budget.sqlite")``, :mod:`dpgp_gpflow.ledger`): one storage
interface, so the checks, composition and reservations below are written once.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from .composition import COMPOSITIONS, PrivacyEvent, composed_epsilon
from .exceptions import BudgetExceededError
from .ledger import LedgerStore, LedgerTransaction, MemoryLedger, SQLiteLedger
from .tally import EventTally
from .validation import check_real, validate_budget_delta, validate_epsilon

__all__ = ["PrivacyAccountant", "PrivacyEvent"]

#: The enclosing ``with PrivacyAccountant(...)`` blocks of this context, innermost last.
_ACTIVE: contextvars.ContextVar[Tuple["PrivacyAccountant", ...]] = contextvars.ContextVar(
    "dpgp_gpflow_accountants", default=()
)
#: How many ``with`` blocks are open in the whole process (any thread); see :func:`resolve_accountant`.
_OPEN_BLOCKS = [0]
_OPEN_LOCK = threading.Lock()

#: What the measurement whose mechanism is running states (its sensitivity path; None: none runs). Set by
#: :func:`measuring` (:func:`~dpgp_gpflow.measurement.measure` only), read by every commit (:func:`running_measurement`).
_RUNNING: contextvars.ContextVar[Any] = contextvars.ContextVar("dpgp_gpflow_running_measurement", default=None)

#: Relative slack when comparing spent budget with the ceiling (floating-point rounding only).
_BUDGET_RTOL = 1e-12


class PrivacyAccountant:
    """A privacy budget ``(epsilon, delta)`` with a ledger of the releases charged to it.

    Usable as a context manager: inside ``with PrivacyAccountant(epsilon=1, delta=1e-2) as acc:``
    releases made without an explicit ``accountant=`` are charged to ``acc`` and to every enclosing
    accountant. The budget is enforced with basic composition (always valid) unless created with
    ``composition="gdp"`` (Gaussian releases compose exactly) or ``"pld"`` (privacy-loss
    distributions, Google's dp-accounting). Thread-safe: checking and holding budget is atomic.

    ``ledger=None`` (default): the events live in memory and die with the accountant.
    ``ledger="budget.sqlite"``: a persistent SQLite ledger (:mod:`dpgp_gpflow.ledger`), created
    with this budget only if nothing exists at that path, else opened (``ValueError`` if its stored
    budget differs: a ledger's budget is fixed at creation; :meth:`open` uses the stored one).
    Processes sharing the file can never together overspend, and every spend is on disk before its
    release is returned. The file is a hash-chained log checked on every open and every step:
    an existing file that is empty, not a ledger, or changed outside this package raises
    :class:`~dpgp_gpflow.exceptions.LedgerError`, and nothing is spent. ``dataset`` labels the rows
    this accountant writes (default: the label the ledger was created with). What the chain cannot
    detect (a file deleted, or rewritten with its chain recomputed): :mod:`dpgp_gpflow.ledger`.
    """

    def __init__(self, *, epsilon: float, delta: float = 0.0, composition: str = "basic",
                 ledger: Union[str, os.PathLike, None] = None, dataset: Optional[str] = None) -> None:
        epsilon = validate_epsilon(epsilon) if not (epsilon == math.inf) else math.inf
        delta = validate_budget_delta(delta)
        if composition not in COMPOSITIONS:
            raise ValueError(f"composition must be one of {COMPOSITIONS}, got {composition!r}")
        if dataset is not None and not isinstance(dataset, str):
            raise TypeError(f"dataset must be a string label, got {type(dataset).__name__}")
        if ledger is None:
            store: LedgerStore = MemoryLedger()
        else:
            store = SQLiteLedger.create_or_open(ledger, (float(epsilon), float(delta), composition), dataset)
            dataset = store.dataset if dataset is None else dataset
        self._setup(epsilon, delta, composition, store, dataset)

    @classmethod
    def open(cls, path: Union[str, os.PathLike], *, dataset: Optional[str] = None) -> "PrivacyAccountant":
        """The accountant of the existing ledger file ``path``, with the budget stored in it
        (``FileNotFoundError`` if there is none, :class:`~dpgp_gpflow.exceptions.LedgerError` if it
        is not an intact ledger). ``dataset``: as in the constructor."""
        store = SQLiteLedger.open(path)
        if dataset is not None and not isinstance(dataset, str):
            raise TypeError(f"dataset must be a string label, got {type(dataset).__name__}")
        acc = cls.__new__(cls)
        epsilon, delta, composition = store.budget
        acc._setup(epsilon, delta, composition, store, store.dataset if dataset is None else dataset)
        return acc

    def _setup(self, epsilon: float, delta: float, composition: str, store: LedgerStore,
               dataset: Optional[str]) -> None:
        self._epsilon, self._delta, self._composition = epsilon, delta, composition
        self._store = store
        self._dataset = dataset
        self._tokens: List[contextvars.Token] = []

    # -- budget ------------------------------------------------------------------------------
    @property
    def epsilon(self) -> float:
        """The total epsilon budget."""
        return self._epsilon

    @property
    def delta(self) -> float:
        """The total delta budget."""
        return self._delta

    @property
    def composition(self) -> str:
        """How the budget is enforced: "basic", "gdp" or "pld" (see :mod:`dpgp_gpflow.composition`)."""
        return self._composition

    @property
    def ledger_path(self) -> Optional[Path]:
        """The ledger file, or None for an accountant in memory."""
        return self._store.path

    @property
    def dataset(self) -> Optional[str]:
        """The label written into the rows this accountant records."""
        return self._dataset

    def epsilon_spent(self, composition: Optional[str] = None, delta: Optional[float] = None) -> float:
        """Epsilon spent (committed events) at ``delta`` (default: the budget's) under ``composition``
        (default: the budget's)."""
        return composed_epsilon(self.ledger, self._delta if delta is None else delta,
                                self._composition if composition is None else composition)

    @property
    def ledger(self) -> Tuple[PrivacyEvent, ...]:
        """Every event committed so far, in the order of commitment."""
        return tuple(self._store.events()[0])

    @property
    def spent(self) -> Tuple[float, float]:
        """``(epsilon, delta)`` committed so far under basic composition."""
        ledger = self.ledger
        return math.fsum(e.epsilon for e in ledger), math.fsum(e.delta for e in ledger)

    @property
    def held(self) -> Tuple[float, float]:
        """``(epsilon, delta)`` held under basic composition by releases under way, or by processes
        that died between their hold and their commit (these stay held: shown here, not in :attr:`spent`, and
        unavailable to later releases, as :attr:`remaining` says)."""
        held = self._store.events()[1]
        return math.fsum(e.epsilon for e in held), math.fsum(e.delta for e in held)

    @property
    def remaining(self) -> Tuple[float, float]:
        """``(epsilon, delta)`` left under basic composition (neither committed nor held)."""
        committed, held = self._store.events()
        eps = math.fsum(e.epsilon for e in [*committed, *held])
        delta = math.fsum(e.delta for e in [*committed, *held])
        return max(self._epsilon - eps, 0.0), max(self._delta - delta, 0.0)

    def history(self) -> List[Dict[str, Any]]:
        """Every row of the ledger, for display: dicts with ``id``, ``time`` (UTC ISO, when held),
        ``settled``, ``status`` ("held", "committed" or "cancelled"; held rows are not spent but not available either),
        ``kind``, ``epsilon``, ``delta``, ``mu``, ``description``, ``dataset``, ``pid`` and
        ``reservation``, in order. Rows are never deleted."""
        return self._store.history()

    def check(self, epsilon: float, delta: float = 0.0, *, kind: str = "approximate", mu: Optional[float] = None) -> None:
        """Raise :class:`BudgetExceededError` if spending ``(epsilon, delta)`` would exceed the budget
        (one event; :meth:`check_events` for several)."""
        self.check_events([_event(epsilon, delta, kind, mu)])

    def check_events(self, events: Sequence[PrivacyEvent]) -> None:
        """Raise :class:`BudgetExceededError` if recording all ``events`` would exceed the budget.

        The candidates are composed with the ledger and with the budget held by releases under way,
        under the budget's composition: basic sums the pairs; "gdp" and "pld" compose exactly and
        compare the epsilon at the budget's delta.
        """
        with self._store.transaction(write=False) as tx:
            self._check(tx, events)

    def _check(self, tx: LedgerTransaction, events: Sequence[PrivacyEvent]) -> None:
        _check_budget(tx.tally(), list(events), self._epsilon, self._delta, self._composition)

    def spend(
        self,
        epsilon: float,
        delta: float = 0.0,
        *,
        kind: str = "approximate",
        mu: Optional[float] = None,
        description: str = "",
    ) -> PrivacyEvent:
        """Check, then record one event at once; returns it. (Mechanisms use :func:`reserve`.)"""
        event = _event(epsilon, delta, kind, mu, description)
        with self._store.transaction() as tx:
            self._check(tx, [event])
            tx.record(event, self._dataset)
        return event

    # -- holding budget for releases under way (see Reservation) -------------------------------
    def _hold(self, events: Sequence[PrivacyEvent]) -> str:
        with self._store.transaction() as tx:  # read, check and hold in one atomic step
            self._check(tx, events)
            return tx.hold(events, self._dataset)

    def _commit(self, key: str, event: PrivacyEvent) -> None:
        with self._store.transaction() as tx:
            tx.commit(key, event)

    def _release(self, key: str) -> None:
        with self._store.transaction() as tx:
            tx.cancel(key)

    # -- context manager ------------------------------------------------------------------------
    def __enter__(self) -> "PrivacyAccountant":
        self._tokens.append(_ACTIVE.set((*_ACTIVE.get(), self)))
        with _OPEN_LOCK:
            _OPEN_BLOCKS[0] += 1
        return self

    def __exit__(self, *exc) -> None:
        _ACTIVE.reset(self._tokens.pop())
        with _OPEN_LOCK:
            _OPEN_BLOCKS[0] -= 1

    def __repr__(self) -> str:
        ledger = self.ledger
        eps, delta = math.fsum(e.epsilon for e in ledger), math.fsum(e.delta for e in ledger)
        where = "" if self._store.path is None else f", ledger={str(self._store.path)!r}"
        return (
            f"PrivacyAccountant(epsilon={self._epsilon}, delta={self._delta}, composition={self._composition!r}"
            f"{where}, spent=({eps:.6g}, {delta:.6g}), releases={len(ledger)})"
        )


def _check_budget(spent: EventTally, events: List[PrivacyEvent], epsilon: float, delta: float,
                  composition: str) -> None:
    """Raise :class:`BudgetExceededError` unless the events ``spent`` counts (committed and held) and
    ``events`` fit ``(epsilon, delta)`` (composed as the whole list would be: :mod:`dpgp_gpflow.tally`)."""
    if composition != "basic":
        eps_total = spent.epsilon(delta, composition, events)
        if eps_total > epsilon * (1.0 + _BUDGET_RTOL):
            raise BudgetExceededError(
                f"{_describe(events)} would bring the spend to epsilon={eps_total:.6g} at delta={delta} under "
                f"{composition} composition, over the budget epsilon={epsilon}"
            )
        return
    eps_total, delta_total = spent.basic(events)
    if eps_total > epsilon * (1.0 + _BUDGET_RTOL) or delta_total > delta * (1.0 + _BUDGET_RTOL):
        raise BudgetExceededError(
            f"{_describe(events)} would bring the spend to (epsilon={eps_total:.6g}, delta={delta_total:.6g}), "
            f"over the budget (epsilon={epsilon}, delta={delta})"
        )


class Reservation:
    """Budget held in every applicable accountant for events about to be released.

    :meth:`commit` records the next held event (after its draw); leaving the ``with`` block (or
    :meth:`close`) gives back whatever was not committed. An empty reservation (no accountant) does
    nothing.
    """

    #: True only on the reservations the package issues (:func:`reserve`, and the steps' draws of a multi-step
    #: release, :func:`~dpgp_gpflow.measurement.stepwise`) and their views: :meth:`expect` refuses any other (one
    #: built by hand commits into the accountants it names, or none, not into those a release must charge).
    _issued = False

    def __init__(self, accountants: Sequence[PrivacyAccountant], events: Sequence[PrivacyEvent]) -> None:
        self._events = list(events)
        self._held: List[Tuple[PrivacyAccountant, str]] = []
        self._owner = True
        self._drawn: List[PrivacyEvent] = []  # drawn through a deferred view, not recorded yet
        self._defer = False
        try:
            for acc in accountants:
                self._held.append((acc, acc._hold(self._events)))
        except BaseException:
            self.close()
            raise

    @property
    def accountants(self) -> Tuple[PrivacyAccountant, ...]:
        return tuple(acc for acc, _ in self._held)

    @property
    def uncommitted(self) -> int:
        """The number of held events not committed yet (shared with a borrowed view's owner)."""
        return len(self._events)

    def upcoming(self, count: int) -> Tuple[PrivacyEvent, ...]:
        """The next ``count`` held events the next commits will record (fewer if fewer are left)."""
        return tuple(self._events[:count])

    def expect(self, events: Sequence[PrivacyEvent]) -> None:
        """Refuse, before anything is drawn, a caller's reservation handed to a release that charges ``events``
        (its privacy map, computed from its request): ``TypeError`` unless the package issued it (:func:`reserve`:
        one built by hand charges the accountants it names, or none, not those the release must charge);
        ``ValueError`` unless its next uncommitted events are exactly ``events`` (the same epsilon, delta, kind
        and mu, in order), since each commit records the next *held* event, not the release's."""
        if not self._issued:
            raise TypeError("accountant= was given a Reservation built by hand, not one the package issued: it charges "
                            "the accountants it names (or none), not those this release must charge. Nothing was drawn "
                            "or charged: pass the PrivacyAccountant itself as accountant= (or None inside "
                            "`with PrivacyAccountant(...)`)")
        wanted = [(e.epsilon, e.delta, e.kind, e.mu) for e in events]
        held = [(e.epsilon, e.delta, e.kind, e.mu) for e in self.upcoming(len(wanted))]
        if held != wanted:
            raise ValueError(f"the reservation this draw commits into (one passed as accountant=, or a measurement's whose "
                             f"request is not this draw's) holds, as its next uncommitted event(s), {held} "
                             f"(epsilon, delta, kind, mu) but this release charges {wanted} (each commit records the "
                             "next held event, not the release's). Nothing was drawn or charged: pass the "
                             "PrivacyAccountant itself as accountant=, or a reservation of this release's own "
                             "events, in the order the releases run")

    def commit(self, description: str = "") -> PrivacyEvent:
        """Record the next held event (with ``description``) in every accountant; returns it. Every draw commits
        here, so this is where a draw outside :func:`~dpgp_gpflow.measurement.measure` is refused
        (:func:`running_measurement`: ``RuntimeError`` before anything is recorded or marked drawn)."""
        running_measurement()
        if not self._events:
            raise RuntimeError("nothing left to commit in this reservation")
        held = self._events.pop(0)
        event = PrivacyEvent(held.epsilon, held.delta, held.kind, held.mu, description or held.description)
        if self._defer:  # a deferred view: still held until the owner's commit_drawn()
            self._drawn.append(event)
            return event
        for acc, key in self._held:
            acc._commit(key, event)
        return event

    def deferred(self) -> "Reservation":
        """A borrowed view (:meth:`borrow`) whose :meth:`commit` marks the next held event drawn without
        recording it: the budget stays held until :meth:`commit_drawn` records it, or :meth:`close`
        gives it back. For a caller that must store a result before it is charged (the command line
        writes its file first, so that a failed write charges nothing for a result nobody saw)."""
        view = self.borrow()
        view._defer = True
        return view

    def commit_drawn(self) -> Tuple[PrivacyEvent, ...]:
        """Record, in every accountant, each event committed through a :meth:`deferred` view and not yet
        recorded (in the order drawn); returns them. (No check of a running measurement here: each was marked
        drawn by a :meth:`commit`, which checked; :func:`~dpgp_gpflow.measurement.measure` records them after its
        mechanism returns and its ``store`` step ran.)"""
        recorded = []
        while self._drawn:
            event = self._drawn[0]
            for acc, key in self._held:
                acc._commit(key, event)
            recorded.append(self._drawn.pop(0))
        return tuple(recorded)

    def close(self) -> None:
        """Give back every held event that was not committed (a borrowed view gives back nothing)."""
        if not self._owner:
            return
        for acc, key in self._held:
            acc._release(key)
        self._events.clear()
        self._drawn.clear()  # drawn but never recorded: given back with the rest

    def borrow(self) -> "Reservation":
        """A view that commits into this reservation but whose ``close`` leaves it held (for a
        mechanism called by a caller that reserved for several releases)."""
        view = object.__new__(Reservation)
        view._events, view._held, view._owner, view._issued = self._events, self._held, False, self._issued
        view._drawn, view._defer = self._drawn, self._defer  # a deferred view's borrowers defer too
        return view

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def running_measurement() -> Any:
    """What the measurement whose mechanism is running in this thread/context states (its
    :class:`~dpgp_gpflow.measurement.SensitivityPath`): ``RuntimeError`` when none runs. A draw belongs inside
    :func:`~dpgp_gpflow.measurement.measure` (its checks, its one reservation, its recorded relation): every
    :meth:`Reservation.commit` calls this first, so a drawing function called directly, into a caller's
    reservation, is refused before anything is recorded (its result never returned).

    The running measurement is a context variable (:func:`measuring`), as the ``with PrivacyAccountant(...)``
    blocks are: a thread or executor does not inherit it. The package's own draws commit on measure's thread; a
    mechanism that commits from a worker thread runs that work under a context copied inside measure
    (``ctx = contextvars.copy_context()`` in the mechanism, then ``executor.submit(ctx.run, work)``), which carries
    the running measurement, while a context copied outside every measurement carries none and is still refused
    (a copy keeps what it carried after measure returns: run it within the mechanism only)."""
    stated = _RUNNING.get()
    if stated is None:
        raise RuntimeError("a draw commits only inside dpgp_gpflow.measurement.measure (a model's release, "
                           "streaming.release_function, mechanisms.cloaking_release, ...): no measurement is running "
                           "in this thread/context, refused before anything is charged. A mechanism that commits "
                           "from another thread must run that work under contextvars.copy_context() taken inside "
                           "measure (ctx = contextvars.copy_context(); executor.submit(ctx.run, work)), or commit on "
                           "measure's thread")
    return stated


@contextlib.contextmanager
def measuring(stated: Any) -> Iterator[None]:
    """``stated`` (a measurement's sensitivity path) as the running measurement's, for a block: the mechanism of
    :func:`~dpgp_gpflow.measurement.measure` runs inside it (a block, not a call: the mechanism runs in measure's
    own frame, which a warning's ``stacklevel`` counts)."""
    token = _RUNNING.set(stated)
    try:
        yield
    finally:
        _RUNNING.reset(token)


def current_accountant() -> Optional[PrivacyAccountant]:
    """The accountant of the innermost active ``with PrivacyAccountant(...)`` block, if any."""
    active = _ACTIVE.get()
    return active[-1] if active else None


def resolve_accountant(accountant: Any = None) -> Tuple[PrivacyAccountant, ...]:
    """The accountants a release must charge: ``accountant`` itself when given, else every enclosing
    ``with PrivacyAccountant(...)`` block of this context (innermost last), else none.

    A release made with no accountant while a ``with`` block is open in another thread (a thread
    pool or ``run_in_executor`` inside the block, which does not inherit it) raises rather than go
    uncharged: pass ``accountant=`` explicitly there.
    """
    if accountant is not None:
        if not isinstance(accountant, PrivacyAccountant):
            raise TypeError(f"accountant must be a PrivacyAccountant, got {type(accountant).__name__}")
        return (accountant,)
    active = _ACTIVE.get()
    if not active:
        with _OPEN_LOCK:
            elsewhere = _OPEN_BLOCKS[0] > 0
        if elsewhere:
            raise RuntimeError(
                "a release with no accountant while a `with PrivacyAccountant(...)` block is open in another "
                "thread or context (threads and executors do not inherit it): pass accountant= explicitly"
            )
    return tuple({id(acc): acc for acc in active}.values())  # a re-entered accountant is charged once


def reserve(accountant: Any, events: Sequence[PrivacyEvent]) -> Reservation:
    """Check -> compute -> spend, first step: hold the budget of ``events`` (everything the caller is
    about to release, composed together) in every accountant that applies
    (:func:`resolve_accountant`), before anything private is computed.

    Raises :class:`BudgetExceededError` if they do not fit. Use the result as a context manager and
    :meth:`Reservation.commit` each event after its draw. A :class:`Reservation` passed as
    ``accountant`` (a caller that already reserved) is borrowed: committed into, closed by its owner; it must
    be one this function issued and hold ``events`` as its next uncommitted events
    (:meth:`Reservation.expect`: else ``TypeError`` / ``ValueError``, nothing drawn or charged), and it must charge
    some accountant when a ``with PrivacyAccountant(...)`` block of this context is active (one reserved outside
    every block, with no accountant, would leave that block's uncharged: ``ValueError``, nothing drawn or charged).
    Only this context's blocks count: a block another thread opened after the reservation was made is not this
    release's (its own release with no accountant is refused by :func:`resolve_accountant`, which reads them all).
    """
    if isinstance(accountant, Reservation):
        accountant.expect(events)
        if not accountant.accountants and _ACTIVE.get():  # this context's blocks only: another thread's are not ours
            raise ValueError("accountant= was given a reservation that charges no accountant (reserved outside every "
                             "`with PrivacyAccountant(...)` block) inside such a block: the release would go "
                             "uncharged. Nothing was drawn or charged: pass accountant=None (the enclosing blocks') "
                             "or the PrivacyAccountant itself")
        return accountant.borrow()
    reservation = Reservation(resolve_accountant(accountant), events)
    reservation._issued = True
    return reservation


def _event(epsilon: float, delta: float, kind: str, mu: Optional[float] = None, description: str = "") -> PrivacyEvent:
    if kind not in ("gaussian", "pure", "approximate"):
        raise ValueError(f"kind must be 'gaussian', 'pure' or 'approximate', got {kind!r}")
    epsilon = validate_epsilon(epsilon)
    delta = validate_budget_delta(delta)
    return PrivacyEvent(epsilon, delta, kind, None if mu is None else check_real("mu", mu), description)


def _describe(events: Sequence[PrivacyEvent]) -> str:
    if len(events) == 1:
        return f"a release at (epsilon={events[0].epsilon}, delta={events[0].delta})"
    return f"{len(events)} releases at (epsilon, delta) = {[(e.epsilon, e.delta) for e in events]}"
