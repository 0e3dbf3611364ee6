"""``kant k8s`` on user mistakes: one line naming the problem, exit 2, no traceback."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("speed", [0.0, -1.0, math.inf, math.nan])
def test_a_demo_speed_that_is_not_a_finite_number_above_0_is_refused_before_starting(
    speed: float,
) -> None:
    from kant.k8s.demo import demo

    with pytest.raises(InvalidConfigError, match="speed"):
        demo(nodes=1, jobs=1, speed=speed)


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


def test_a_sigterm_while_the_nodes_are_being_queued_stops_their_creation_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``create_nodes`` (``kant bench k8s``, ``kant k8s demo``) queues its 2,500 nodes to a
    thread pool; a SIGTERM raised while it is still queueing them (not while it waits for
    their answers) ends it with only the creations already running finished, not every one
    queued (a pool's own exit runs them all first: minutes under load). Here the SIGTERM
    comes when 500 nodes are queued: before, all 500 were made."""
    import os
    import signal
    import threading
    import time

    from kant.k8s import demo

    made: list[str] = []
    lock = threading.Lock()

    class _Api:
        def post(self, path: str, body: dict[str, object]) -> None:
            time.sleep(0.001)  # (a call to the API server)
            with lock:
                made.append(str(body["metadata"]["name"]))  # type: ignore[index]

        def patch(self, path: str, body: object) -> None:
            pass

    queued: list[int] = []

    def queueing(n: int) -> object:
        # the node numbers create_nodes queues; SIGTERM arrives once 500 are queued
        for i in range(n):
            if i == 500:
                with lock:
                    queued.append(len(made))
                os.kill(os.getpid(), signal.SIGTERM)
            yield i

    def terminate(signum: int, frame: object) -> None:
        raise _Terminated

    monkeypatch.setattr(demo, "range", queueing, raising=False)
    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        with pytest.raises(_Terminated):
            demo.create_nodes(_Api(), 2500, workers=8)  # type: ignore[arg-type]
    finally:
        signal.signal(signal.SIGTERM, previous)
    time.sleep(0.05)  # (a creation left running would show by now)
    # (8 running when it came, and a few more taken up before the pool is told to stop:
    # not the hundreds still queued)
    assert queued and len(made) < 250, (
        f"{len(made)} of the 500 queued nodes made, {queued[0]} of them before the SIGTERM"
    )


def test_a_terminated_bench_k8s_stops_its_api_server_and_etcd_on_the_way_out(
    kube: object, tmp_path: Path
) -> None:
    # (the session's ``kube`` fixture skips, or fails under KANT_K8S_REQUIRED, without the
    # binaries.) SIGTERM unwinds the command like Ctrl-C: its local etcd and kube-apiserver
    # are stopped and their directory removed, instead of outliving it
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    p = subprocess.Popen(
        [sys.executable, "-m", "kant", "bench", "k8s", "--pods", "5000", "--nodes", "2500"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not any(tmp_path.glob("kant-kube-*/apiserver.log")):
        assert p.poll() is None and time.monotonic() < deadline, "the API server never started"
        time.sleep(0.1)
    time.sleep(2)  # (well into its run)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    assert err.strip().splitlines()[-1] == "kant bench k8s: terminated"
    assert not any(tmp_path.glob("kant-kube-*")), "its directory outlived it"
    left = []
    for proc in Path("/proc").iterdir():
        try:
            if str(tmp_path) in (proc / "cmdline").read_bytes().decode(errors="replace"):
                left.append(proc.name)
        except OSError:
            continue
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
