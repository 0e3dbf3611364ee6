"""The local API server's way out (:class:`kant.k8s.testenv.KubeTestEnv`), with stand-ins for
etcd and kube-apiserver: processes that take their time to exit on SIGTERM, as a server too
loaded to answer does."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kant.k8s.testenv import KubeTestEnv

# (ignores SIGTERM: exits only when killed, or after a minute)
_DEAF = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); "
    "time.sleep(60)"
)


class _Terminated(BaseException):
    """What a SIGTERM raises (as under ``kant``'s own handler)."""


@pytest.fixture
def env(tmp_path: Path) -> Iterator[KubeTestEnv]:
    """A KubeTestEnv as started: two processes slow to stop, and its directory."""
    e = KubeTestEnv()
    e.dir = tmp_path / "kant-kube-x"
    e.dir.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", _DEAF], stdout=subprocess.PIPE)
             for _ in range(2)]  # fmt: skip
    for p in procs:
        assert p.stdout is not None
        p.stdout.readline()  # (its SIGTERM ignored from now on)
        p.stdout.close()
    e._procs.extend(procs)
    try:
        yield e
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def test_leaving_a_local_api_server_on_an_exception_kills_it_and_etcd_at_once(
    env: KubeTestEnv,
) -> None:
    # (Ctrl-C or SIGTERM inside ``with KubeTestEnv()``: its data is thrown away, nothing to
    # wait for; before, each process had 10 s to exit on SIGTERM)
    procs = list(env._procs)
    where = env.dir
    assert where is not None
    t = time.monotonic()
    env.__exit__(_Terminated, _Terminated(), None)  # (as leaving ``with env:`` on it)
    took = time.monotonic() - t
    assert took < 2, f"it took {took:.1f} s"
    assert all(p.poll() is not None for p in procs)
    assert not where.exists() and env.dir is None


def test_a_stop_cut_short_by_a_signal_still_kills_both_and_removes_the_directory(
    env: KubeTestEnv,
) -> None:
    # (a SIGTERM while stop() waits for the API server to exit on its own)
    procs = list(env._procs)
    where = env.dir
    assert where is not None

    def terminate(signum: int, frame: object) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGALRM, terminate)
    try:
        with pytest.raises(_Terminated):
            signal.setitimer(signal.ITIMER_REAL, 0.3)  # (while stop() waits)
            env.stop()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert all(p.poll() is not None for p in procs), "a process outlived it"
    assert not where.exists() and env.dir is None


def test_a_second_signal_while_stop_waits_for_the_processes_killed_still_removes_the_directory(
    env: KubeTestEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (Ctrl-C pressed twice: the second lands while stop(), cleaning up after the first,
    # waits for the killed processes; before, the directory was left behind)
    procs = list(env._procs)
    where = env.dir
    assert where is not None
    wait = subprocess.Popen.wait
    raised: list[bool] = []

    def wait_once_interrupted(self: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        if not raised:
            raised.append(True)
            raise KeyboardInterrupt
        return wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", wait_once_interrupted)
    with pytest.raises(KeyboardInterrupt):
        env.stop(grace=0.0)
    assert raised
    assert not where.exists() and env.dir is None
    monkeypatch.undo()
    for p in procs:
        assert p.wait(5) is not None, "a process outlived it"


def test_a_normal_stop_gives_each_process_its_grace_period_then_kills_it(
    env: KubeTestEnv,
) -> None:
    procs = list(env._procs)
    t = time.monotonic()
    env.stop(grace=0.3)
    took = time.monotonic() - t
    assert 0.5 <= took < 3, f"it took {took:.1f} s"
    assert all(p.poll() is not None for p in procs)
