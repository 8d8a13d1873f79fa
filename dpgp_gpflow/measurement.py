"""A measurement: one release described once, and the one routine that runs it.

A :class:`Measurement` is a frozen description of a release: its validated request
(:func:`~dpgp_gpflow.mechanisms.release_request`), the public neighbour relation it protects, the public
checks that must pass before any budget is held (the leak guard, the terms' finiteness, the shape of a
source), its privacy map (the ledger events it charges, computed from the request, never handed in from
outside) and the mechanism that reads the private data, draws the noise and commits the events.
:func:`measure` runs it in the one order every release keeps (docs/privacy_model.md#invariants):
checks -> reserve -> mechanism (draw, then commit) -> result. A release that must be stored before it is
charged (the command line writes its file first: a failed write charges nothing for a result nobody saw)
states a ``store`` step: its mechanism's commits then only mark the events drawn, ``store`` runs on the
result, and :func:`measure` records what was drawn once it is stored. A mechanism that returns without
committing every event it reserved is a defect: :func:`measure` raises rather than publish a result
that was not charged.

Every release states its :class:`SensitivityPath` (what its sensitivity is computed for): :func:`measure`
refuses a relation that path does not protect before anything is reserved, and the released object records
the measurement's relation (:func:`_recording`). The path is a claim until the mechanism fixes its sensitivity:
while the mechanism runs, the measurement's path is the running one, and the code that checks a draw's
sensitivity (the cloaking releases' :func:`~dpgp_gpflow.mechanisms.cloaking.publish_cloaking`) states the
persons and outputs that sensitivity was computed over (:func:`check_covered`): a mismatch is refused before
the draw, nothing charged. Every draw commits inside a running measurement: a commit with none running is refused
(:meth:`~dpgp_gpflow.accounting.Reservation.commit`, :meth:`StepDraws.commit`: ``RuntimeError`` before anything is
recorded, the result never returned; the running measurement is this thread's/context's, so a mechanism's worker
thread commits under a context copied inside :func:`measure`), and a cloaking draw is refused before it is drawn
(:func:`check_covered`).

Privacy assumption: the privacy map and the checks read public values, but for a check that validates the
form of private data before it is used (a classifier's labels in their set, as a model's constructor checks
them): its refusal says only that some value is malformed, never a count or a value. The mechanism is the
only part that reads the private data to release it, and it does so inside the reservation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Generic, NamedTuple, Optional, Sequence, Tuple, TypeVar, cast

from .accounting import PrivacyEvent, Reservation, measuring, reserve, running_measurement
from .io.gpflow_specs import check_file_pieces
from .relations import class_relation, relation_of, whole_rows_relation

if TYPE_CHECKING:  # a type only: the mechanisms themselves run through measure (no import cycle at run time)
    from .mechanisms.request import ReleaseRequest

__all__ = ["Measurement", "measure"]

R = TypeVar("R")


class SensitivityPath(NamedTuple):
    """What a mechanism's sensitivity is computed for (public): persons of at most ``person_rows`` rows, each
    row of ``num_outputs`` outputs, (``inputs``) the rows' inputs private too (whole rows), and (``classes``)
    each row's label moved between the one-vs-rest problems of several classes. A :class:`Measurement` that
    states it must protect exactly :meth:`relation`."""

    person_rows: int = 1
    num_outputs: int = 1
    inputs: bool = False
    classes: bool = False

    def relation(self) -> str:
        """The one relation a release of this sensitivity path protects, as its card records it
        (:func:`~dpgp_gpflow.relations.relation_of`, :func:`~dpgp_gpflow.relations.whole_rows_relation`,
        :func:`~dpgp_gpflow.relations.class_relation`)."""
        if (self.inputs or self.classes) and int(self.num_outputs) != 1:
            raise ValueError("a whole-row or several-class release has one output (label) per row")
        if self.inputs:  # a whole row's label moves with it: the whole-row relation, classes or not
            return whole_rows_relation(self.person_rows)
        if self.classes:
            return class_relation(self.person_rows)
        return relation_of(self.num_outputs, self.person_rows)


@dataclass(frozen=True)
class Measurement(Generic[R]):
    """One release: what it charges, what it protects, what must hold first and what draws it.

    ``mechanism(reservation)`` reads the private data, draws and commits every event of
    :meth:`privacy_map` into ``reservation`` (after its draw), then returns the released object. It commits in
    :func:`measure`'s thread/context (the running measurement is a context variable, which a thread does not
    inherit): work that commits from a worker thread runs under ``contextvars.copy_context()`` taken inside the
    mechanism (:func:`~dpgp_gpflow.accounting.running_measurement`), else its commit is refused.
    ``checks`` run in order before anything is reserved and raise to refuse. ``events`` overrides the
    default privacy map (the request's one Gaussian event) for a multi-step release or a non-Gaussian one
    (``request`` None: a pure-epsilon selection or Laplace release, or several events held together); it
    must be computed from public parameters by the caller (a composition rule of
    :mod:`dpgp_gpflow.composition`).

    ``store(result)``, when given, keeps the result before it is charged (writes it where it will be
    read): the mechanism is then handed a :meth:`~dpgp_gpflow.accounting.Reservation.deferred` view,
    whose commits mark events drawn and still held, and :func:`measure` records them after ``store``
    returns. If ``store`` raises, what was drawn is given back (the result was never seen). If the
    mechanism raises after a draw whose refusal could tell something private (a refusal that depends on
    a private selection's choice), it records that draw itself first
    (:meth:`~dpgp_gpflow.accounting.Reservation.commit_drawn` on the view it was handed), as a mechanism
    without ``store`` commits before it raises.

    ``path`` (required, by keyword: a new release cannot forget it) is the :class:`SensitivityPath` the
    mechanism's sensitivity is computed for: :func:`measure` refuses (``ValueError``, before anything is
    reserved) a ``relation`` that is not that path's, and the released object records the measurement's
    relation (:func:`_recording`).

    ``file_pieces`` (by keyword) are the public kernels and mean functions the result's release file will
    hold (a released function's or classifier's readout, a whole-row release's kernel): :func:`measure`
    refuses (``NotImplementedError``, before anything is reserved) one the file format cannot save
    (:func:`~dpgp_gpflow.io.gpflow_specs.check_file_pieces`), so nothing is charged for a result ``save``
    would then refuse.
    """

    request: Optional[ReleaseRequest]  #: the validated Gaussian request; None for a release charged by ``events``
    relation: str  #: the public neighbour relation protected, as the release card states it
    mechanism: Callable[[Reservation], R]
    checks: Tuple[Callable[[], Any], ...] = ()
    events: Optional[Tuple[PrivacyEvent, ...]] = None
    description: str = field(default="")
    store: Optional[Callable[[R], Any]] = None
    path: SensitivityPath = field(kw_only=True)  #: what the mechanism's sensitivity is computed for
    #: the GPflow kernels and mean functions the result's release file will hold (None entries skipped)
    file_pieces: Tuple[Any, ...] = field(default=(), kw_only=True)

    def check_relation(self) -> None:
        """``ValueError`` unless ``relation`` is the one its ``path`` protects. (The sites that state
        ``path.relation()`` pass it trivially; the path itself is checked against the sensitivity the mechanism
        computes by :func:`check_covered`, while it runs.)"""
        if not isinstance(self.path, SensitivityPath):
            raise TypeError(f"a measurement states its SensitivityPath, got {type(self.path).__name__}")
        if self.relation != self.path.relation():
            raise ValueError(f"this release states the relation {self.relation!r} but its mechanism's sensitivity "
                             f"covers {self.path.relation()!r}: refused before anything is reserved")

    def privacy_map(self) -> Tuple[PrivacyEvent, ...]:
        """The ledger events this release charges (default: the request's one Gaussian event)."""
        if self.events is not None:
            return tuple(self.events)
        if self.request is None:
            raise ValueError("a measurement without a Gaussian request must state its events")
        return (self.request.event(self.description),)


def running_path() -> SensitivityPath:
    """The path of the measurement whose mechanism is running: ``RuntimeError`` when none runs
    (:func:`~dpgp_gpflow.accounting.running_measurement`, which every commit calls: a draw belongs inside
    :func:`measure`)."""
    return cast(SensitivityPath, running_measurement())


def check_covered(covered: SensitivityPath) -> None:
    """``ValueError`` unless the persons and outputs a draw's sensitivity was computed over, ``covered`` (the
    neighbour map its shift is bounded over), are those of the running measurement's path: the relation the
    release records and is charged as. Called before the draw (a refusal charges nothing). No measurement
    running: ``RuntimeError`` (:func:`running_path`). Whole rows (``inputs``) must match too: a draw whose
    sensitivity covers the outputs only cannot be recorded as protecting the inputs. (``classes`` is not compared:
    a several-class release states the label moves between classes, and each class's step draws over its own
    problem's persons; the classes' composition is its privacy map.) Public: counts."""
    stated = running_path()
    if (int(covered.person_rows), int(covered.num_outputs), bool(covered.inputs)) != \
            (int(stated.person_rows), int(stated.num_outputs), bool(stated.inputs)):
        raise ValueError(f"this release states the relation {stated.relation()!r} but its draw's sensitivity was "
                         f"computed over {covered.relation()!r}: refused before the draw (nothing charged)")


def measure(measurement: Measurement[R], accountant: Any = None) -> R:
    """Run ``measurement``: its public checks (its relation, its ``file_pieces``, its ``checks``), then one
    reservation of its privacy map in ``accountant`` (a :class:`~dpgp_gpflow.accounting.PrivacyAccountant`, a caller's
    :class:`~dpgp_gpflow.accounting.Reservation` to commit into, or None: every enclosing accountant),
    then its mechanism, then its ``store`` step if it has one. Once the result exists (and is stored),
    every event drawn through a deferred view of this reservation is recorded; whatever was not recorded
    is given back when the mechanism or ``store`` raises. A mechanism that returns with events neither
    committed nor drawn raises ``RuntimeError`` (the result is not returned, what it drew is given back: a
    release is never published uncharged). A measurement with ``store`` must own its reservation
    (``accountant`` not a Reservation: its caller would record the draws, not this routine)."""
    owned = not isinstance(accountant, Reservation)
    if measurement.store is not None and not owned:
        raise TypeError("a measurement with a store step records its own draws: pass an accountant (or None), "
                        "not a caller's Reservation")
    measurement.check_relation()
    if measurement.file_pieces:
        check_file_pieces(*measurement.file_pieces)
    for check in measurement.checks:
        check()
    events: Sequence[PrivacyEvent] = measurement.privacy_map()
    with reserve(accountant, events) as reservation:
        before = reservation.uncommitted
        with measuring(measurement.path):
            result = measurement.mechanism(reservation if measurement.store is None else reservation.deferred())
        result = _recording(result, measurement)
        if measurement.store is not None:  # its commits: drawn, still held
            measurement.store(result)  # raises: the drawn events are given back (never seen)
        if owned:
            if reservation.uncommitted:  # refused before anything is recorded: what was drawn is given back
                raise RuntimeError(f"the mechanism returned with {reservation.uncommitted} of {before} reserved "
                                   "event(s) uncommitted: the result is not published (a release is never "
                                   "uncharged)")
            reservation.commit_drawn()  # the result exists (and is stored): everything drawn is charged
        return result


#: The fields in which a released dataclass records its relation (a release's card's ``neighbours``).
RELATION_FIELDS = ("neighbours", "relation")


def _recording(result: R, measurement: Measurement[R]) -> R:
    """``result`` recording the relation of its measurement (checked against its path): the card's relation
    comes from the measurement. A dataclass with a field of :data:`RELATION_FIELDS` gets it there; an object with
    ``recorded_as(relation)`` (a released function: each of its releases) is recorded by it; any other result
    whose ``neighbours`` says another relation is a defect, refused (``RuntimeError``: what its mechanism
    committed stays charged, a drawn result never published)."""
    relation = measurement.relation
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        for name in RELATION_FIELDS:
            if any(f.name == name for f in dataclasses.fields(result)):
                if getattr(result, name) == relation:
                    return result
                return dataclasses.replace(result, **{name: relation})  # type: ignore[type-var]
    recorded_as = getattr(result, "recorded_as", None)
    if callable(recorded_as):
        return cast(R, recorded_as(relation))
    own = getattr(result, "neighbours", None)
    if isinstance(own, str) and own != relation:
        raise RuntimeError(f"the release records the relation {own!r} but its measurement protects {relation!r}: "
                           "not published")
    return result


class StepDraws(Reservation):
    """A reservation holding nothing, into which the steps of a multi-step release commit (each after its draw):
    it counts them (``drawn``). The release's one reservation commits its one event (:func:`stepwise`)."""

    def __init__(self, event: PrivacyEvent) -> None:
        super().__init__((), [])
        self.drawn = 0
        self._event = event

    def upcoming(self, count: int) -> Tuple[PrivacyEvent, ...]:
        """``count`` copies of the step's event (every step's commit counts it). Not bounded by the number of steps
        the release's composition covers: :func:`stepwise` is not told it (its callers compose T steps, K x T, or
        the whole-row stages, which draw at their own multipliers under the first stage's event), so
        :meth:`~dpgp_gpflow.accounting.Reservation.expect` here checks each step's event, never how many are drawn."""
        return (self._event,) * count

    def commit(self, description: str = "") -> PrivacyEvent:
        running_measurement()  # a step's draw too: refused with no measurement running, before it is counted
        self.drawn += 1
        return self._event

    def borrow(self) -> "StepDraws":
        return self  # its commits only count: a borrower counts into it


def stepwise(steps: Callable[[StepDraws], R], step_event: PrivacyEvent, description: str) -> Callable[[Reservation], R]:
    """The mechanism of a release of several Gaussian steps charged as one event (the steps' requests from
    :func:`~dpgp_gpflow.composition.gdp_step_request`): ``steps(draws)`` runs every step, each committing into
    ``draws`` (a :class:`StepDraws` of ``step_event``); the release's one event is committed after the last
    draw, or when a step fails after some draw (what was drawn is charged: the whole event bounds any part of
    it); a failure before any draw charges nothing."""

    def mechanism(reservation: Reservation) -> R:
        draws = StepDraws(step_event)
        draws._issued = True  # the package's own (Reservation.expect): the steps' reservation, issued here only
        try:
            result = steps(draws)
        except BaseException:
            if draws.drawn:
                reservation.commit(description)
            raise
        reservation.commit(description)
        return result

    return mechanism
