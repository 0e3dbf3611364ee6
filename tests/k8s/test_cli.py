"""``kant k8s`` on user mistakes: one line naming the problem, exit 2, no traceback."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.cli import main
from kant.errors import InvalidConfigError

from .conftest import Cluster, wait_for


def test_a_bad_kubernetes_setting_in_the_config_is_one_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "kant.yaml"
    cfg.write_text("kubernetes:\n  evictionMode: kill\n")
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    assert main(["k8s", "run", "--kubeconfig", str(kc), "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "kubernetes.evictionMode" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_missing_kubeconfig_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("kubernetes")
    assert main(["k8s", "run", "--kubeconfig", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kant k8s run:") and "Traceback" not in err


def _kubeconfig(path: Path, server: str) -> Path:
    """A well-formed kubeconfig at ``path`` for ``server``, with a token."""
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    return path


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "does not exist"),
        ("a directory", "is a directory, not a kubeconfig file"),
        ("a: [1\n", "not valid YAML (line 2): expected ',' or ']', but got '<stream end>'"),
        ("", "is empty"),
        ("just words\n", "is a YAML str, not a kubeconfig"),
        ("apiVersion: v1\nclusters: 5\n", "clusters must be a list of entries, each named"),
        ("apiVersion: v1\nkind: Config\nclusters: []\n", "sets no current-context"),
        ("\udcff", "not UTF-8 text (byte 0)"),
        ("server: notaurl", "the server 'notaurl' is not an https:// or http:// URL"),
        ("context: nope", "has no context 'nope' (contexts: 'x')"),
        ("cluster: gone", "expected object with name gone in"),
    ],
    ids=["missing", "directory", "bad-yaml", "empty", "a-string", "clusters-5",
         "no-current-context", "binary", "server-not-a-url", "unknown-context",
         "context-naming-no-cluster"],
)  # fmt: skip
def test_a_kubeconfig_that_cannot_be_used_is_one_line_naming_the_file_and_the_mistake(
    content: str | None, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("kubernetes")
    kc = tmp_path / "kc.yaml"
    argv = ["k8s", "run", "--kubeconfig", str(kc)]
    if content == "a directory":
        kc.mkdir()
    elif content == "server: notaurl":
        _kubeconfig(kc, "notaurl")
    elif content == "context: nope":
        _kubeconfig(kc, "https://127.0.0.1:1")
        argv += ["--context", "nope"]
    elif content == "cluster: gone":
        _kubeconfig(kc, "https://127.0.0.1:1")
        kc.write_text(kc.read_text().replace("cluster: c,", "cluster: gone,"))
    elif content is not None:
        kc.write_bytes(content.encode("utf-8", "surrogateescape"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kant k8s run: kubeconfig {kc}: {said}"), err
    assert len(err.strip().splitlines()) == 1


def test_kubeconfig_files_of_the_environment_none_of_which_exists_are_named_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("kubernetes")
    import os

    env = os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")])
    monkeypatch.setenv("KUBECONFIG", env)
    assert main(["k8s", "run"]) == 2
    err = capsys.readouterr().err
    assert err == f"kant k8s run: kubeconfig {env} ($KUBECONFIG): none of these files exists\n"


@pytest.mark.parametrize(
    ("server", "said"),
    [
        ("https://127.0.0.1:{port}", "connection refused"),
        ("https://nosuchhost.invalid:6443", "its host name does not resolve"),
    ],
    ids=["refused", "no-such-host"],
)
@pytest.mark.parametrize("lease", [True, False], ids=["leader-elect", "no-leader-elect"])
def test_run_refuses_to_start_on_an_api_server_it_cannot_reach_in_one_line(
    server: str, said: str, lease: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("kubernetes")
    from kant.k8s.testenv import free_port

    server = server.format(port=free_port())
    kc = _kubeconfig(tmp_path / "kc.yaml", server)
    argv = ["k8s", "run", "--kubeconfig", str(kc)]
    assert main(argv if lease else [*argv, "--no-leader-elect"]) == 2
    err = capsys.readouterr().err
    assert err == f"kant k8s run: cannot reach the API server {server}: {said}\n"


def test_run_prints_each_log_record_once_with_its_time() -> None:
    """Before, ``kant k8s run`` gave the root logger a handler of its own while the ``kant``
    logger had kant's: every warning of the shim came twice on stderr."""
    import re
    import subprocess
    import sys

    code = (
        "import logging, sys\n"
        "import kant.cli.k8s as k\n"
        "from kant.errors import KantError\n"
        "def config(path):\n"
        "    logging.getLogger('kant.k8s.shim').warning('a warning of the shim')\n"
        "    logging.getLogger('kant.k8s.shim').info('a decision')\n"
        "    raise KantError('stopped here')\n"
        "k._config = config\n"
        "from kant.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    for verbose in (False, True):
        argv = [sys.executable, "-c", code, "k8s", "run", *(["-v"] if verbose else [])]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, p.stderr
        lines = p.stderr.splitlines()
        assert lines[-1] == "kant k8s run: stopped here", p.stderr
        stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} kant\.k8s\.shim"
        want = [f"{stamp} WARNING a warning of the shim"]
        if verbose:
            want.append(f"{stamp} INFO a decision")
        assert len(lines[:-1]) == len(want), p.stderr
        for line, pattern in zip(lines[:-1], want, strict=True):
            assert re.fullmatch(pattern, line), p.stderr


@pytest.mark.parametrize(
    ("sub", "content", "said"),
    [
        ("demo", b"\x1f\x8b\x08\x00\xff\xfe\x80junk", "not UTF-8 text"),
        ("demo", b"a: [1\n", "not valid YAML"),
        ("run", b"\x1f\x8b\x08\x00\xff\xfe\x80junk", "not UTF-8 text"),
    ],
    ids=["demo-binary", "demo-bad-yaml", "run-binary"],
)
def test_a_config_file_that_is_not_yaml_is_one_line_naming_the_file(
    sub: str, content: bytes, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "kant-config.bin"
    cfg.write_bytes(content)
    argv = ["k8s", sub, "--config", str(cfg)]
    if sub == "run":
        argv += ["--kubeconfig", str(tmp_path / "none")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert str(cfg) in err and said in err and "kubeconfig" not in err


@pytest.mark.parametrize(
    ("option", "value"),
    [("nodes", 0), ("nodes", 1.5), ("nodes", True), ("jobs", 0), ("jobs", -3), ("jobs", None)],
)
def test_a_demo_of_no_nodes_or_no_jobs_is_refused_before_starting(
    option: str, value: object
) -> None:
    from kant.k8s.demo import demo

    with pytest.raises(InvalidConfigError, match=option):
        demo(**{"nodes": 1, "jobs": 1, option: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("speed", [0.0, -1.0, math.inf, math.nan, 1e-9, 0.0009])
def test_a_demo_speed_below_its_least_is_refused_before_starting(
    speed: float,
) -> None:
    from kant.k8s.demo import demo

    with pytest.raises(InvalidConfigError, match="speed"):
        demo(nodes=1, jobs=1, speed=speed)


def test_a_demo_speed_too_slow_for_the_clock_is_one_line_from_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # (1e-9 passed "a finite number > 0", then time.sleep raised OverflowError: a traceback)
    assert main(["k8s", "demo", "--speed", "1e-9"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("kant k8s demo: ")
        and "'speed' = 1e-09: must be a finite number >= 0.001" in err
    )
    assert len(err.splitlines()) == 1


class _NoServer:
    """Stands for KubeTestEnv where nothing may start."""

    def __init__(self, *args: object, **kw: object) -> None:
        raise AssertionError("an API server was started")


@pytest.mark.parametrize(
    ("setting", "said"),
    [("schedulerNmae: kant", "kubernetes.schedulerNmae: unknown key"),
     ("gpuResource: not a resource", "kubernetes.gpuResource: has no domain"),
     ("leaseNamespace: Bad Namespace!", "kubernetes.leaseNamespace: a namespace must be")],
    ids=["misspelt-key", "gpu-resource", "lease-namespace"],
)  # fmt: skip
def test_a_demo_config_with_a_bad_kubernetes_setting_is_refused_naming_the_file_before_starting(
    setting: str,
    said: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kant.k8s.demo

    monkeypatch.setattr(kant.k8s.demo, "KubeTestEnv", _NoServer)
    cfg = tmp_path / "k1.yaml"
    cfg.write_text(f"kubernetes:\n  {setting}\n")
    assert main(["k8s", "demo", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kant k8s demo: {cfg}: {said}") and len(err.splitlines()) == 1


def test_a_benchmark_config_with_a_bad_kubernetes_setting_is_refused_before_starting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kant.k8s.demo
    from kant.errors import InvalidConfigFileError

    monkeypatch.setattr(kant.k8s.demo, "KubeTestEnv", _NoServer)
    with pytest.raises(InvalidConfigFileError, match=r"kubernetes\.gpuResource: has no domain"):
        kant.k8s.demo.bench_k8s(pods=1, nodes=1, config={"kubernetes": {"gpuResource": "cpu"}})


class _SilentServer:
    """Stands for KubeTestEnv: a server that takes every call and answers nothing."""

    class _Api:
        def post(self, path: str, body: object) -> None:
            pass

        def patch(self, path: str, body: object, **kw: object) -> None:
            pass

    def __enter__(self) -> _SilentServer:
        self.api = self._Api()
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def test_a_sigterm_before_the_fake_kubelet_thread_started_ends_the_demo_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A SIGTERM (or a failing ``Thread.start()``) between the moment a demo counts its fake
    kubelet among the threads to stop on the way out and the moment it starts it: the way
    out still ends in ``terminated`` and exit code 143. Before, it tried to join the thread
    never started, and ``RuntimeError: cannot join thread before it is started`` was a
    traceback."""
    import kant.cli
    import kant.k8s.demo
    from kant.k8s.kubelet import FakeKubelet

    def start(self: FakeKubelet) -> None:
        raise kant.cli._Terminated

    monkeypatch.setattr(kant.k8s.demo, "KubeTestEnv", _SilentServer)
    monkeypatch.setattr(FakeKubelet, "start", start)
    assert main(["k8s", "demo", "--nodes", "4", "--jobs", "2"]) == 143
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "kant k8s: terminated"


@pytest.mark.parametrize("sub", ["run", "demo"])
def test_a_config_naming_a_strategy_the_shim_cannot_build_is_one_line_before_connecting(
    sub: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (fgd is a valid strategy of a config file, for kant simulate; the shim has no workload
    # to give it: run failed with an error naming 'workload' and neither file nor key)
    cfg = tmp_path / "kant.yaml"
    cfg.write_text("placement: {strategy: fgd}\n")
    kc = tmp_path / "kubeconfig"
    kc.write_text("not read: the config is refused first\n")
    argv = ["k8s", sub, "--config", str(cfg)]
    assert main([*argv, "--kubeconfig", str(kc)] if sub == "run" else argv) == 2
    err = capsys.readouterr().err
    assert f"{cfg}: placement.strategy: the Kubernetes shim cannot build it" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


class _Terminated(BaseException):
    """What a SIGTERM raises (as under ``kant``'s own handler)."""


def test_a_sigterm_while_the_nodes_are_being_made_ends_create_nodes_at_once_and_starts_no_more() -> (
    None
):
    """``create_nodes`` (``kant bench k8s``, ``kant k8s demo``) makes its 2,500 nodes on 8
    threads; a SIGTERM while the API server is too loaded to answer them ends it at once: no
    creation starts after it, and the 8 running are not waited for (the caller then stops
    the server under them). Before, it waited for them: up to a call's 30 s timeout each,
    and the way out took minutes under load."""
    import os
    import signal
    import threading
    import time

    from kant.k8s import demo

    answer = threading.Event()  # (the server answers once set: never, here, until the end)
    started: list[str] = []
    lock = threading.Lock()

    class _Api:
        def post(self, path: str, body: dict[str, object]) -> None:
            with lock:
                started.append(str(body["metadata"]["name"]))  # type: ignore[index]
                if len(started) > 8:  # (started after the SIGTERM: counted, not waited for)
                    return
                if len(started) == 8:  # (all 8 threads wait for their answer)
                    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
            answer.wait(10)  # (bounded: a way out that waits for them fails, not hangs)

        def patch(self, path: str, body: object) -> None:
            pass

    def terminate(signum: int, frame: object) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    t = time.monotonic()
    try:
        with pytest.raises(_Terminated):
            demo.create_nodes(_Api(), 2500, workers=8)  # type: ignore[arg-type]
        took = time.monotonic() - t
    finally:
        signal.signal(signal.SIGTERM, previous)
        answer.set()  # (the calls left end)
    time.sleep(0.2)  # (a creation started after the SIGTERM would show by now)
    assert took < 5, f"it took {took:.1f} s to end"
    assert len(started) == 8, f"{len(started) - 8} creations started after the SIGTERM"


@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 60), workers=st.integers(1, 10), fails=st.none() | st.integers(0, 59))
def test_run_all_calls_each_number_once_or_raises_the_error_of_a_call(
    n: int, workers: int, fails: int | None
) -> None:
    import threading

    from kant.k8s.demo import run_all

    calls: list[int] = []
    lock = threading.Lock()

    def fn(i: int) -> None:
        with lock:
            calls.append(i)
        if i == fails:
            raise ValueError(i)

    if fails is not None and fails < n:
        with pytest.raises(ValueError, match=f"^{fails}$"):
            run_all(fn, n, workers)
        assert len(calls) == len(set(calls)) and fails in calls
    else:
        run_all(fn, n, workers)
        assert sorted(calls) == list(range(n))


def test_a_call_that_fails_ends_run_all_at_once_without_waiting_for_the_calls_running() -> None:
    """A node or pod creation that fails ends ``run_all`` at once, with its error: the
    other calls running (each up to a 30 s timeout against an API server too loaded to
    answer) are not waited for. Before, the error was raised once they all had ended."""
    import threading
    import time

    from kant.k8s.demo import run_all

    release = threading.Event()

    def fn(i: int) -> None:
        if i == 0:
            time.sleep(0.1)
            raise ValueError("the first call failed")
        release.wait(3)  # (a call that would take 3 s)

    t = time.monotonic()
    try:
        with pytest.raises(ValueError, match="the first call failed"):
            run_all(fn, 100, 8)
        took = time.monotonic() - t
    finally:
        release.set()
    assert took < 1.5, f"it took {took:.1f} s to raise"


def test_run_all_cut_short_leaves_its_calls_running_to_the_way_out_of_its_run() -> None:
    """``run_all`` cut short does not wait for the calls running, but given the ``helpers``
    of its run, their threads are among those the run's way out waits for once the API
    server is stopped (and their calls fail). Left running, a thread still in a TLS call as
    the process exited crashed it now and then (SIGSEGV, exit code -11 where SIGTERM's 143
    was due: ``test_a_terminated_bench_k8s_stops_its_api_server_and_etcd_within_seconds``
    while it made nodes)."""
    import threading

    from kant.k8s.demo import _Helpers, run_all

    helpers = _Helpers()
    gone = threading.Event()  # (set: the server is stopped, the calls left fail)

    def fn(i: int) -> None:
        if i == 0:
            raise ValueError("the first call failed")
        gone.wait(5)

    with pytest.raises(ValueError, match="the first call failed"):
        run_all(fn, 100, 8, helpers=helpers)
    threading.Timer(0.3, gone.set).start()
    # (a long deadline: the calls end 0.3 s from now, and a way out that did not wait would
    # leave them running whatever its deadline; 3 s once ran out on a loaded CI host)
    helpers.end(30)
    left = [t.name for t in threading.enumerate() if t.name.startswith("kant-run-all-")]
    assert not left, f"the way out did not wait for {left}"


def test_run_all_raises_the_error_that_came_first_in_time_not_in_call_order() -> None:
    import threading

    from kant.k8s.demo import run_all

    first = threading.Event()

    def fn(i: int) -> None:
        if i == 0:
            first.wait(5)  # (fails only once call 1 has failed)
            raise ValueError("call 0")
        if i == 1:
            first.set()
            raise ValueError("call 1")
        first.wait(5)

    with pytest.raises(ValueError, match=r"^call 1$"):
        run_all(fn, 2, 2)


@pytest.mark.parametrize("workers", [0, -1])
def test_run_all_and_create_nodes_on_no_threads_are_refused_instead_of_doing_nothing(
    workers: int,
) -> None:
    from kant.k8s.demo import create_nodes, run_all

    calls: list[int] = []
    with pytest.raises(InvalidConfigError, match="workers"):
        run_all(calls.append, 5, workers)
    with pytest.raises(InvalidConfigError, match="workers"):
        create_nodes(object(), 5, workers=workers)  # type: ignore[arg-type]
    assert not calls
    assert issubclass(InvalidConfigError, ValueError)  # (as the thread pool raised before)


def test_a_shim_made_quiet_logs_what_it_meets_once_its_run_is_abandoned_at_debug_level(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """(the shim of a bench or demo cut short: the server is stopped under it, and its
    bindings failing then are no news; at a normal stop, or with no ``quiet`` event, as for
    ``kant k8s run``'s shim, it still warns)"""
    import logging
    import threading

    from kant.k8s import shim as shim_mod
    from kant.k8s.shim import Shim

    quiet = threading.Event()

    def run(self: Shim, stop: threading.Event, ready: object) -> None:
        shim_mod.log.warning("before the stop")
        stop.set()
        shim_mod.log.warning("a normal stop: binding p failed")
        quiet.set()
        shim_mod.log.warning("cut short: binding p: connection refused")

    monkeypatch.setattr(Shim, "_run", run)
    caplog.set_level(logging.DEBUG, logger="kant.k8s.shim")
    for q in (quiet, None):
        quiet.clear()
        caplog.clear()
        shim = Shim.__new__(Shim)
        shim.quiet = q
        shim.run(threading.Event())
        last = "DEBUG" if q is not None else "WARNING"
        assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
            ("WARNING", "before the stop"),
            ("WARNING", "a normal stop: binding p failed"),
            (last, "cut short: binding p: connection refused"),
        ]
    shim_mod.log.warning("another thread, after")  # (only the shim's thread, while it runs)
    assert caplog.records[-1].levelname == "WARNING"


def _processes_of(where: Path) -> list[int]:
    """The processes whose command line names ``where``."""
    out = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(where) in (proc / "cmdline").read_bytes().decode(
                errors="replace"
            ):
                out.append(int(proc.name))
        except OSError:
            continue
    return out


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
@pytest.mark.parametrize(
    ("phase", "stalled"),
    [("nodes", False), ("nodes", True), ("pods", True)],
    ids=["making-nodes", "making-nodes-server-stalled", "binding-pods-server-stalled"],
)
def test_a_terminated_bench_k8s_stops_its_api_server_and_etcd_within_seconds(
    kube: object, tmp_path: Path, phase: str, stalled: bool
) -> None:
    """(the session's ``kube`` fixture skips, or fails under KANT_K8S_REQUIRED, without the
    binaries.) SIGTERM unwinds ``kant bench k8s`` like Ctrl-C, within seconds whatever it is
    doing: its local etcd and kube-apiserver are stopped and their directory removed,
    instead of outliving it. ``stalled``: its etcd is stopped (SIGSTOP) just before, so its
    API server answers nothing, as one too loaded to answer (CI on 2 cores): the way out
    used to wait for the calls running (a 30 s timeout each), the shim's bindings, then
    10 s for each process to exit on SIGTERM; 50 s making nodes, 100 s binding pods. The
    pods case stalls the server once 50 pods are bound, with the shim binding more: what its
    bindings meet then is logged at debug level (else about 20 warnings came first)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import yaml

    from kant.k8s.client import Api, ApiError

    sizes = ["--pods", "5000", "--nodes", "2500"] if phase == "nodes" else ["--pods", "2000",
             "--nodes", "500"]  # fmt: skip
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    p = subprocess.Popen(
        [sys.executable, "-m", "kant", "bench", "k8s", *sizes],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        (kc,) = wait_for(lambda: list(tmp_path.glob("kant-kube-*/kubeconfig")), timeout=60)
        doc = yaml.safe_load(kc.read_text())
        api = Api(doc["clusters"][0]["cluster"]["server"],
                  token=doc["users"][0]["user"]["token"], verify=False)  # fmt: skip
        path = "/api/v1/nodes" if phase == "nodes" else "/api/v1/namespaces/stream/pods"
        # the first node; or 50 pods bound, so that the shim is binding when the server stalls
        query = (
            {"limit": 1} if phase == "nodes" else {"limit": 50, "fieldSelector": "spec.nodeName!="}
        )

        def made() -> bool:
            assert p.poll() is None, "the bench ended before its run"
            try:
                return len(api.get(path, **query).get("items") or ()) == query["limit"]
            except (ApiError, OSError):
                return False  # (not ready yet)

        wait_for(made, timeout=120, what=f"the bench's first {phase}")
        if stalled:
            (etcd,) = [pid for pid in _processes_of(tmp_path)
                       if Path(f"/proc/{pid}/comm").read_text().strip() == "etcd"]  # fmt: skip
            os.kill(etcd, signal.SIGSTOP)
            if phase == "pods":
                time.sleep(1)  # (the shim's bindings pile up, unanswered)
        t = time.monotonic()
        p.send_signal(signal.SIGTERM)
        try:
            _, err = p.communicate(timeout=150)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        took = time.monotonic() - t
        left = _processes_of(tmp_path)
    finally:
        for pid in _processes_of(tmp_path):  # (the test's own failure leaves nothing behind)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
    assert took < 20, f"it took {took:.0f} s to exit after SIGTERM"
    assert p.returncode == 143, err
    # (one line: what fails once the server is stopped under the shim is no news)
    assert err.strip().splitlines() == ["kant bench k8s: terminated"], err
    assert not any(tmp_path.glob("kant-kube-*")), "its directory outlived it"
    assert not left, f"processes outlived it: {left}"


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_run_with_the_kubeconfig_of_a_real_server_schedules_and_stops_cleanly_on_sigterm(
    cluster: Cluster,
) -> None:
    # (the kubeconfig's checks and the first call to the server let a good one through)
    import signal
    import subprocess
    import sys

    cluster.node("n0")
    cluster.pod("p")
    argv = [sys.executable, "-m", "kant", "k8s", "run", "--kubeconfig", cluster.env.kubeconfig]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: cluster.node_of("p") == "n0" or p.poll() is not None, timeout=60)
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    assert p.returncode == 0 and cluster.node_of("p") == "n0", err


def test_a_demo_under_a_config_naming_other_resources_and_scheduler_runs_its_pods_under_them(
    kube: object,
) -> None:
    # (the demo's nodes and pods said nvidia.com/gpu and schedulerName kant whatever the
    # config: under these names it ran its workload to the end scheduling nothing)
    from kant.k8s.demo import demo

    config = {"kubernetes": {"schedulerName": "kant-2", "gpuResource": "example.com/gpu",
                             "nicResource": "example.com/hca",
                             "gpuModelLabel": "example.com/model"}}  # fmt: skip
    result = demo(nodes=4, jobs=3, speed=100, config=config)
    assert result["jobs"] == 3 and result["pods_finished"] >= 3


def test_a_token_file_ending_in_a_newline_is_read_without_it(tmp_path: Path) -> None:
    # (echo wrote it; the header "Bearer t\n" raised ValueError from http.client: a traceback)
    pytest.importorskip("kubernetes")
    from kant.k8s.client import Api

    (tmp_path / "token").write_text("  t0k3n\n")
    kc = _kubeconfig(tmp_path / "kc.yaml", "https://127.0.0.1:1")
    kc.write_text(kc.read_text().replace("{token: t}", f"{{tokenFile: '{tmp_path / 'token'}'}}"))
    assert Api.from_kubeconfig(str(kc), None)._headers["Authorization"] == "Bearer t0k3n"


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_a_token_file_rotated_under_a_running_client_is_read_again(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (the token was read once, at the start: a rotated tokenFile, or an exec plugin's
    # credential that expired (an EKS token lasts 15 min), got 401 for ever, and a leader
    # lost its Lease; client-go reads a token file again every minute)
    from kant.k8s import client as client_module
    from kant.k8s.client import Api, ApiError
    from kant.k8s.testenv import TOKEN

    token = tmp_path / "token"
    token.write_text("expired\n")
    kc = tmp_path / "kc.yaml"
    text = Path(cluster.env.kubeconfig).read_text()
    kc.write_text(text.replace(f"{{token: {TOKEN}}}", f"{{tokenFile: '{token}'}}"))
    monkeypatch.setattr(client_module, "TOKEN_REFRESH_SECONDS", 3600.0)
    api = Api.from_kubeconfig(str(kc), None)
    with pytest.raises(ApiError) as refused:
        api.get("/api/v1/nodes")
    assert refused.value.status == 401
    token.write_text(f"{TOKEN}\n")  # rotated: read again after the 401
    assert "items" in api.get("/api/v1/nodes")
    monkeypatch.setattr(client_module, "TOKEN_REFRESH_SECONDS", 0.0)
    api = Api.from_kubeconfig(str(kc), None)
    assert "items" in api.get("/api/v1/nodes")
    token.write_text("rotated-away\n")  # read again when due, without a 401 first
    with pytest.raises(ApiError) as refused:
        api.get("/api/v1/nodes")
    assert refused.value.status == 401
    token.unlink()  # (a token that cannot be read again: the one held is kept)
    token.write_text("")
    with pytest.raises(ApiError):
        api.get("/api/v1/nodes")
    assert api._headers["Authorization"] == "Bearer rotated-away"


@pytest.mark.parametrize("token", ["'a\\x01b'", "'tök'"], ids=["control", "not-ascii"])
def test_a_token_no_http_header_can_carry_is_one_line_naming_the_kubeconfig(
    token: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("kubernetes")
    kc = _kubeconfig(tmp_path / "kc.yaml", "https://127.0.0.1:1")
    kc.write_text(kc.read_text().replace("{token: t}", f'{{token: "{token[1:-1]}"}}'))
    assert main(["k8s", "run", "--kubeconfig", str(kc), "--no-leader-elect"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kant k8s run: kubeconfig {kc}: ") and "token" in err, err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "answer",
    [b'{"groups": null}', b'{"groups": "abc"}', b'{"groups": [5]}', b"<html>hello</html>"],
    ids=["null", "a-string", "not-objects", "html"],
)
def test_run_refuses_a_server_that_does_not_answer_as_an_api_server_in_one_line(
    answer: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (TypeError or AttributeError tracebacks; an HTML page was taken as a server serving no
    # group, and the shim ran on saying nothing)
    pytest.importorskip("kubernetes")
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        kc = _kubeconfig(tmp_path / "kc.yaml", url)
        assert main(["k8s", "run", "--kubeconfig", str(kc), "--no-leader-elect"]) == 2
    finally:
        server.shutdown()
    err = capsys.readouterr().err
    assert err.startswith(f"kant k8s run: {url} does not answer as a Kubernetes API server"), err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ("server: '{server}'", "server: 5", "clusters entry 'c': cluster.server must be a string"),
        ("context: {cluster: c, user: u}", "context: zz", "contexts entry 'x': context must be"),
        ("user: {token: t}", "user: {token: [t]}", "users entry 'u': user.token must be a string"),
    ],
    ids=["server-an-int", "context-a-string", "token-a-list"],
)
def test_a_kubeconfig_entry_of_the_wrong_shape_is_named_not_a_python_error(
    old: str, new: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (server: 5 said "'int' object has no attribute 'rstrip'", from inside the client)
    pytest.importorskip("kubernetes")
    server = "https://127.0.0.1:1"
    kc = _kubeconfig(tmp_path / "kc.yaml", server)
    kc.write_text(kc.read_text().replace(old.replace("{server}", server), new))
    assert main(["k8s", "run", "--kubeconfig", str(kc), "--no-leader-elect"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kant k8s run: kubeconfig {kc}: {said}"), err


def test_a_kubeconfig_whose_exec_plugin_fails_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (the client logged the failure on the root logger and went on without credentials:
    # a stray "ERROR:root:..." line, then one about the server, or its 401, not the plugin)
    pytest.importorskip("kubernetes")
    kc = _kubeconfig(tmp_path / "kc.yaml", "https://127.0.0.1:1")
    plugin = "{exec: {command: /nonexistent/kant-test-plugin, apiVersion: client.authentication.k8s.io/v1beta1}}"
    kc.write_text(kc.read_text().replace("{token: t}", plugin))
    assert main(["k8s", "run", "--kubeconfig", str(kc), "--no-leader-elect"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kant k8s run: kubeconfig {kc}: its user's exec plugin failed: "), err
    assert "kant-test-plugin" in err and len(err.splitlines()) == 1, err
