"""Leader election through a ``coordination.k8s.io/v1`` Lease, as kube-scheduler does: one
shim schedules; the others wait and take over when the leader stops renewing.

The leader renews every ``duration / 3``, and after a renewal that failed tries again every
``duration * 2 / 15`` (client-go's retryPeriod, 2 s of a 15 s Lease); it stops leading once
no renewal has succeeded for ``duration * 2 / 3`` (client-go's renewDeadline, 10 s of 15),
timed from when the last one that succeeded was answered. A candidate takes the Lease when
it has seen no change of the Lease's record (holder, renew time) for
``leaseDurationSeconds`` on its own clock, as client-go's leader election does: the
``renewTime`` written by another machine is never compared with this machine's clock, so a
clock running ahead cannot take a Lease renewed a moment ago. Every write carries the
``resourceVersion`` it read, so two candidates never both win (the loser gets a 409)."""

from __future__ import annotations

import logging
import math
import threading
import time
from datetime import UTC, datetime
from typing import Any

from kant.k8s.client import Api, ApiError

log = logging.getLogger(__name__)


_INT32_MAX = 2**31 - 1


def _micro(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquire and keep the Lease ``namespace/name`` for ``identity``."""

    def __init__(
        self, api: Api, *, name: str, namespace: str, identity: str, duration: float = 15.0
    ) -> None:
        self.api = api
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.duration = duration
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        # another holder's record as last seen, and when it was first seen so (local clock)
        self._observed: tuple[Any, Any, Any] | None = None
        self._observed_at = 0.0
        self.done = threading.Event()
        """Set by :meth:`release` or :meth:`abandon`: the renewals :meth:`hold` started end."""
        self._lock = threading.Lock()  # (a renewal and the release, one at a time)
        # when the last take or renewal that succeeded began, and when it was answered
        # (one tuple: read in one go by the thread that watches the renew deadline)
        self._renewed: tuple[float, float] = (-math.inf, -math.inf)

    def try_acquire(self, now: float | None = None) -> bool:
        """One attempt to take or renew the Lease; True when this identity holds it.
        ``now`` (tests): this machine's clock, for the times written and for how long the
        record has been seen unchanged (default: the wall clock and a monotonic one)."""
        t = time.time() if now is None else now
        local = time.monotonic() if now is None else now
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.duration)),
            "renewTime": _micro(t),
        }
        try:
            lease = self.api.get(f"{self.path}/{self.name}")
        except ApiError as e:
            if e.status != 404:
                raise
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {**spec, "acquireTime": _micro(t), "leaseTransitions": 0}}  # fmt: skip
            try:
                self.api.post(self.path, body)
                return True
            except ApiError as e2:
                if e2.status == 409:
                    return False
                raise
        cur = lease.get("spec") or {}
        holder = cur.get("holderIdentity")
        if holder and holder != self.identity:
            record = (holder, cur.get("renewTime"), cur.get("leaseDurationSeconds"))
            if record != self._observed:
                self._observed, self._observed_at = record, local
            if local < self._observed_at + float(cur.get("leaseDurationSeconds") or 0):
                return False
        new = dict(cur, **spec)
        if holder != self.identity:
            new["acquireTime"] = _micro(t)
            # (an int32 on the server: one set to its limit by hand stays there, or the
            # write is refused for ever and the Lease can never be taken)
            new["leaseTransitions"] = min(int(cur.get("leaseTransitions") or 0) + 1, _INT32_MAX)
        lease["spec"] = new
        try:
            self.api.put(f"{self.path}/{self.name}", lease)
            return True
        except ApiError as e:
            if e.status == 409:
                return False
            raise

    def release(self, *, timeout: float = 30.0) -> bool:
        """Give the Lease up (an orderly stop lets another shim take over at once), its two
        calls (read, write) given ``timeout`` seconds each to be answered; True once it is
        released, False when it was not or that is not known (not held by this identity, a
        call refused; or a call without an answer or with a server error, the release then
        said not confirmed: it may have landed; if not, the Lease expires after
        ``leaseDurationSeconds``). The renewals end first
        (:attr:`done`): none can take the Lease again after."""
        self.done.set()
        if not self._lock.acquire(timeout=max(timeout, 0.0)):  # (a renewal gets no answer)
            log.warning("the Lease was not released: its renewal gets no answer")
            return False
        path = f"{self.path}/{self.name}"
        try:
            lease = self.api.request("GET", path, timeout=timeout)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                log.info("the Lease is not held by %s: not released", self.identity)
                return False
            lease["spec"]["holderIdentity"] = None
            self.api.request("PUT", path, lease, timeout=timeout)
            return True
        except (ApiError, OSError) as e:
            if isinstance(e, ApiError) and e.status < 500:
                log.warning("the Lease was not released: %s", e)
            else:  # (no answer, or a server error: the write may have been applied)
                log.warning(
                    "the Lease's release not confirmed: %s (unless it landed, the Lease "
                    "expires after leaseDurationSeconds)",
                    e,
                )
            return False
        finally:
            self._lock.release()

    def abandon(self) -> None:
        """End the renewals without releasing the Lease (it expires after
        ``leaseDurationSeconds``, as after a crash)."""
        self.done.set()

    @property
    def expires(self) -> float:
        """When (``time.monotonic``) a candidate may take the Lease unless it is renewed
        again: the start of the last take or renewal that succeeded (it cannot have been
        written before), plus ``leaseDurationSeconds``; -inf before the first."""
        return self._renewed[0] + self.duration

    def hold(self, stop: threading.Event, lost: threading.Event) -> None:
        """Block until the Lease is held (or ``stop``), then renew it in a thread until
        :attr:`done` (:meth:`release`, :meth:`abandon`): not at ``stop``, as
        controller-runtime ends its leader election only once its runnables have stopped,
        for no successor to lead while this shim's last bindings may still land. Set
        ``lost`` (and ``stop``), and end the renewals, once no renewal has succeeded for two
        thirds of the lease duration (client-go's renew deadline, 10 s of 15), checked by a
        thread of its own: a renewal call that hangs (the API timeout is longer than a
        lease) cannot keep this shim scheduling while a candidate, a lease duration after
        the last renewal it saw, takes over (:attr:`expires` says when).

        The renewals come every ``duration / 3`` from the start of the last one; after one
        that failed, every :attr:`retry_period`. The renew deadline is timed, as client-go
        times it, from when the last renewal that succeeded was answered (renewals that all
        succeed, however slowly, or one that fails and is tried again, do not lose the
        Lease), and comes no later than :attr:`expires` (a renewal slower than a third of
        the duration: a candidate may take the Lease then)."""
        said = ""
        while not stop.is_set():
            t = time.monotonic()
            try:
                if self.try_acquire():
                    self._renewed = (t, time.monotonic())
                    break
            except (ApiError, OSError) as e:
                # a refusal that is no outage (a namespace that does not exist, a Lease the
                # credentials may not write) is most likely a mistake: said once, where
                # `kant k8s run` shows it, and tried again (it may be put right)
                if (
                    isinstance(e, ApiError)
                    and 400 <= e.status < 500
                    and e.status not in (408, 429)  # (a timeout, too many requests: later)
                    and str(e) != said
                ):
                    said = str(e)
                    log.warning(
                        "cannot take Lease %s/%s, trying again: %s",
                        self.namespace, self.name, e,
                    )  # fmt: skip
                else:
                    log.info("lease: %s", e)
            stop.wait(self.duration / 5)
        if stop.is_set():
            return
        log.info("%s leads through Lease %s/%s", self.identity, self.namespace, self.name)

        def renew() -> None:
            start, ok = self._renewed[0], True
            while True:
                period = self.duration / 3 if ok else self.retry_period
                if self.done.wait(max(0.0, start + period - time.monotonic())):
                    return
                if lost.is_set():
                    return
                with self._lock:
                    if self.done.is_set():
                        return  # (released meanwhile: never taken again)
                    start = time.monotonic()
                    try:
                        ok = self.try_acquire()
                    except (ApiError, OSError) as e:
                        log.info("lease renewal: %s", e)
                        ok = False
                    if ok:
                        self._renewed = (start, time.monotonic())

        def watch() -> None:
            while not self.done.wait(self.duration / 15):
                began, answered = self._renewed
                now = time.monotonic()
                if now >= min(answered + self.renew_deadline, began + self.duration):
                    log.warning("lost the lease; stopping")
                    lost.set()
                    stop.set()
                    return

        threading.Thread(target=renew, daemon=True, name="kant-lease").start()
        threading.Thread(target=watch, daemon=True, name="kant-lease-deadline").start()

    @property
    def renew_deadline(self) -> float:
        """Seconds without a successful renewal (from when the last one was answered) after
        which the leader stops: two thirds of the lease duration."""
        return self.duration * 2 / 3

    @property
    def retry_period(self) -> float:
        """Seconds between tries after a renewal that failed: two fifteenths of the lease
        duration (client-go's retryPeriod, 2 s of 15), five tries before the deadline."""
        return self.duration * 2 / 15
