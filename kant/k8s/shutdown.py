"""``kant k8s run``'s way out, bounded in time: :func:`serve`.

Told to stop (SIGTERM, Ctrl-C, or the Lease lost), the shim closes its watches at once, then
takes the answers of the bindings it sent and writes the failure histories due; the Lease is
released after (never before: a successor must not list the cluster while this shim may still
bind), and renewed until then (:meth:`~kant.k8s.leader.LeaderElector.hold`). All of that gets
``grace`` seconds from the stop (``shutdownGraceSeconds``, 10 s by default), as
controller-runtime's manager gives its runnables ``GracefulShutdownTimeout``: with an API
server that answers nothing each call would otherwise wait for its timeout (30 s), and a
Deployment's kubelet kills the process 30 s after its SIGTERM (its default
``terminationGracePeriodSeconds``), the Lease held. Once the grace has run out, what is still
pending is abandoned: :class:`Stopped` says what, in one line; so it is, whatever is left of
the grace, once the Lease has expired (lost: its renewals unanswered; a successor may lead).
A shim started again reconciles it as after a crash: a binding the API server applied is
taken back from the pod's annotations, one it did not leaves the pod waiting (a gang bound in
part is started again whole), and the Lease, left held, expires after
``leaseDurationSeconds``."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

import attrs

from kant.errors import InvalidConfigError
from kant.k8s.shim import Shim
from kant.model import is_finite_number

__all__ = ["SignalRelay", "Stopped", "check_grace", "serve"]


@attrs.frozen(kw_only=True)
class Stopped:
    """How a shim served by :func:`serve` ended."""

    in_time: bool
    """Whether its way out (bindings answered, histories written, then the Lease's release
    tried, when there is a Lease) ended before it was given up."""
    grace: float
    """The grace it had, in seconds."""
    bindings_pending: int = 0
    """Binding calls not dealt with when the way out was given up: without an answer, or
    answered and not yet acted on (a failure's pod being looked up: did it land?; its gang
    released, its pods deleted; a bound pod counted)."""
    histories_unwritten: int = 0
    """Failure histories (``kant.io/failures``) not written when the way out was given up."""
    lease_released: bool | None = None
    """Whether the Lease was released (None: no Lease was held; False: not released, it
    expires after leaseDurationSeconds)."""
    lease_release_unanswered: bool = False
    """Whether the Lease's release was tried and still had no answer when the way out was
    given up: it may land yet (not confirmed); if it does not, the Lease expires after
    leaseDurationSeconds."""
    lease_expired: bool = False
    """Whether the way out was given up because the Lease expired (lost: no renewal for
    leaseDurationSeconds, a successor may lead from then on) before the grace ran out."""

    def abandoned(self) -> str:
        """What it abandoned, one line (for a stop not :attr:`in_time`)."""
        if self.lease_expired:
            why = (
                f"the Lease expired before the shutdown grace of {self.grace:g} s ran out "
                "(lost: a successor may lead from now on)"
            )
        else:
            why = f"the shutdown grace of {self.grace:g} s ran out"
        lease = ""
        if self.lease_release_unanswered and not self.lease_expired:
            lease = (
                ", the Lease's release not confirmed (unless it landed, the Lease expires after "
                "leaseDurationSeconds)"
            )
        elif self.lease_released is False and not self.lease_expired:
            lease = ", the Lease not released (it expires after leaseDurationSeconds)"
        return (
            f"{why}: exiting with {self.bindings_pending} bindings not dealt with (no answer "
            "yet, or an answer not yet acted on: a failed one's pod looked up, its gang "
            "released), "
            f"{self.histories_unwritten} failure histories not written{lease}; a shim started "
            "again takes each pod as the API server has it (a binding it applied is taken back, "
            "a pod it did not bind is scheduled again), as after a crash"
        )


class SignalRelay:
    """A signal handler that sets ``stop`` (and ``hurry``, from the second signal on: what is
    left of the way out is given up at once) without taking a lock in the handler.

    A handler runs in the main thread between two of its instructions, which may be inside
    ``stop.wait()`` with the event's lock held: an ``Event.set()`` in the handler would then
    wait for that lock for ever (it cannot be taken twice). So :meth:`handler` only puts the
    signal on a :class:`queue.SimpleQueue` (whose ``put`` is safe in a handler), and a daemon
    thread of its own takes it off and sets the events. :attr:`signals`: the signals
    received, in order, each appended before ``stop`` is set."""

    def __init__(self, stop: threading.Event, hurry: threading.Event) -> None:
        self.stop = stop
        self.hurry = hurry
        self.signals: list[int] = []
        self._received: queue.SimpleQueue[int] = queue.SimpleQueue()
        threading.Thread(target=self._relay, daemon=True, name="kant-signals").start()

    def handler(self, signum: int, frame: object) -> None:
        """The handler to install (``signal.signal(SIGTERM, relay.handler)``)."""
        self._received.put(signum)

    def _relay(self) -> None:
        while True:
            signum = self._received.get()
            if self.stop.is_set():
                self.hurry.set()  # (a second signal, or one after the shim stopped)
            self.signals.append(signum)
            self.stop.set()


def check_grace(value: object, *, field: str = "shutdown_grace") -> float:
    """``value`` as a grace in seconds: a finite number >= 0, else
    :class:`~kant.errors.InvalidConfigError`."""
    if not is_finite_number(value) or not value >= 0:  # type: ignore[operator]
        raise InvalidConfigError(field, value, "must be a finite number of seconds >= 0")
    return float(value)  # type: ignore[arg-type]


def serve(
    shim: Shim,
    stop: threading.Event,
    *,
    grace: float,
    release: Callable[[float], bool] | None = None,
    hurry: threading.Event | None = None,
    lease_expires: Callable[[], float] | None = None,
) -> Stopped:
    """Run ``shim`` (in a thread of its own) until ``stop`` is set or it ends, then give its
    way out and ``release`` (the Lease's, called with how long its calls may wait, once the
    shim has ended; it says whether the Lease was released) ``grace`` seconds in all;
    ``hurry`` set gives up what is left at once (a second signal). ``lease_expires`` (the
    Lease held, renewed meanwhile): when (``time.monotonic``) a successor may take it; the
    way out is given up then at the latest, the grace notwithstanding (the Lease lost). An
    exception the shim raised is raised again, after the release. Once the way out is given
    up the shim's thread is left running (a daemon, as are its binding calls': the process
    may exit), its ``quiet`` event set, if it has one: what it meets from then on is no
    news. ``grace`` not a finite number >= 0 raises :class:`~kant.errors.InvalidConfigError`
    before the shim starts."""
    grace = check_grace(grace)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            shim.run(stop)
        except BaseException as e:  # (raised again by serve, in its caller's thread)
            failed.append(e)

    thread = threading.Thread(target=run, daemon=True, name="kant-shim")
    thread.start()
    while thread.is_alive() and not stop.is_set():
        stop.wait(0.1)  # (the caller's thread: a signal's handler runs there)
    stop.set()  # (the shim ended on its own)
    deadline = time.monotonic() + grace

    def left() -> float:
        if hurry is not None and hurry.is_set():
            return 0.0
        end = deadline if lease_expires is None else min(deadline, lease_expires())
        return end - time.monotonic()

    _join(thread, left)
    # (the time left read first: a shim that ends as the grace runs out, or at once with a
    # grace of 0, is not in time; read after, it would be, the release skipped for want of
    # time all the same)
    timely = left() > 0
    ended = not thread.is_alive()
    in_time = ended and timely
    released: bool | None = None
    unanswered = False
    if release is not None:
        released = False
        if in_time:
            answer: list[bool] = []
            call = threading.Thread(
                target=lambda: answer.append(release(max(left(), 0.1))),
                daemon=True,
                name="kant-release",
            )
            call.start()
            _join(call, left)
            # (in time only once the release was tried and answered within the bound)
            in_time = not call.is_alive()
            unanswered = not in_time
            released = bool(answer and answer[0])
    expired = (
        not in_time
        and lease_expires is not None
        and lease_expires() < deadline
        and time.monotonic() >= lease_expires()
    )
    if ended:
        if failed:
            raise failed[0]
        if in_time:
            return Stopped(in_time=True, grace=grace, lease_released=released)
    elif shim.quiet is not None:
        shim.quiet.set()
    return Stopped(
        in_time=False,
        grace=grace,
        bindings_pending=shim.bindings_in_flight,
        histories_unwritten=shim.histories_due,
        lease_released=released,
        lease_release_unanswered=unanswered,
        lease_expired=expired,
    )


def _join(thread: threading.Thread, left: Callable[[], float]) -> None:
    """Wait for ``thread`` while ``left()`` is above 0, looking every 0.1 s."""
    while thread.is_alive():
        t = left()
        if t <= 0:
            return
        thread.join(min(t, 0.1))
