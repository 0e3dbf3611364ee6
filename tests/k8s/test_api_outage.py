"""An API server that cannot be reached: ``kant k8s run`` refuses to start on it (one line,
exit 2), while a shim or a leader candidate already running rides the outage out, trying
again, and carries on once the server answers again."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kant.config import parse_config
from kant.k8s.client import Api, ApiUnreachableError
from kant.k8s.leader import LeaderElector
from kant.k8s.shim import Shim
from kant.k8s.testenv import free_port

from .conftest import Cluster

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")


class _Outage:
    """The cluster's Api while ``down`` is false; while it is true, every call goes to an
    address where no server listens (the connection is refused), as when the API server
    has gone away."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.gone = Api(f"https://127.0.0.1:{free_port()}", verify=False)
        self.down = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.gone if self.down else self.api, name)


def test_a_call_to_a_server_that_is_not_there_raises_a_typed_connection_error() -> None:
    api = Api(f"https://127.0.0.1:{free_port()}", verify=False)
    with pytest.raises(ApiUnreachableError) as e:
        api.get("/api/v1/nodes")
    assert isinstance(e.value, ConnectionError)  # (the shim's calls log and retry an OSError)
    assert str(e.value) == f"cannot reach the API server {api.host}: connection refused"
    with pytest.raises(ApiUnreachableError):
        next(api.watch("/api/v1/pods", "1"))


def test_a_leader_candidate_that_cannot_reach_the_server_keeps_trying_until_stopped() -> None:
    api = Api(f"https://127.0.0.1:{free_port()}", verify=False)
    e = LeaderElector(api, name="l", namespace="ns", identity="a", duration=0.5)
    stop, lost = threading.Event(), threading.Event()
    threading.Timer(0.5, stop.set).start()
    t0 = time.monotonic()
    e.hold(stop, lost)  # (raised the connection error at its first attempt)
    assert time.monotonic() - t0 >= 0.4 and not lost.is_set()


def test_a_shim_whose_api_server_goes_away_mid_cycle_keeps_going_and_binds_once_it_is_back(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    clock = [1000.0]
    shim = Shim(cluster.api, parse_config({}), clock=lambda: clock[0])
    try:
        shim.sync()
        api = _Outage(cluster.api)
        shim.api = api  # type: ignore[assignment]
        shim.handle("Pod", "ADDED", cluster.pod("p"))
        api.down = True
        # the binding, the pod's condition and event get no answer (each raised out of the
        # cycle, or out of reap, before): the binding failed, retried after its backoff
        shim.cycle()
        shim.reap(wait=True)
        assert cluster.node_of("p") is None
        for _ in range(3):  # (cycles while the server is away: nothing to answer)
            clock[0] += 1
            shim.cycle()
            shim.reap(wait=True)
        api.down = False
        clock[0] += 10  # (past the backoff of its first failure)
        shim.cycle()
        shim.reap(wait=True)
        assert cluster.node_of("p") == "n0"
        shim.scheduler.check_invariants()
    finally:
        shim._pool.shutdown()
