"""A real etcd + kube-apiserver on free loopback ports, for tests, benchmarks and the demo.

The kube-apiserver binary is the one ``scripts/kube-testenv build`` made (cached under
``$KANT_KUBE_CACHE``, default ``~/.cache/kant-kube``), or ``$KANT_KUBE_APISERVER``; etcd is
Debian's ``etcd-server`` (``/usr/bin/etcd``) or ``$KANT_ETCD``. :func:`find_binaries` says why
they are missing, so tests can skip with that reason.

``kant k8s server`` starts one and prints its kubeconfig path until interrupted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import urllib3

from kant.errors import KantError
from kant.k8s.client import Api, ApiError

TOKEN = "kant-testenv-token"


class TestEnvError(KantError):
    """The test API server could not be found or started."""


def _cache() -> Path:
    return Path(os.environ.get("KANT_KUBE_CACHE", Path.home() / ".cache" / "kant-kube"))


def find_binaries() -> tuple[str | None, str | None, str]:
    """``(kube-apiserver, etcd, why)``: the paths found, and why not when one is None."""
    api = os.environ.get("KANT_KUBE_APISERVER")
    if not api:
        found = sorted(_cache().glob("bin/*/kube-apiserver"), key=lambda p: p.stat().st_mtime)
        api = str(found[-1]) if found else None
    etcd = os.environ.get("KANT_ETCD") or shutil.which("etcd") or None
    why = []
    if not api or not os.access(api, os.X_OK):
        api = None
        why.append(
            f"no kube-apiserver (run scripts/kube-testenv provision; looked in {_cache()}/bin)"
        )
    if not etcd:
        why.append("no etcd (apt-get install etcd-server)")
    return api, etcd, "; ".join(why)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KubeTestEnv:
    """etcd + kube-apiserver in a temporary directory; ``start()`` waits for ``/readyz``,
    ``stop()`` (or leaving the ``with`` block) stops both and removes the directory.

    ``stop()`` gives each process ``grace`` seconds to exit on SIGTERM, then kills it;
    leaving the ``with`` block on an exception (Ctrl-C, SIGTERM), or a ``start()`` that
    fails, kills them at once: their data is thrown away, and a server too loaded to answer
    would otherwise hold the way out for its grace period. A ``stop()`` itself cut short (a
    signal while it waits) still kills both and removes the directory.

    ``api`` is an :class:`~kant.k8s.client.Api` with an admin token; ``kubeconfig`` a file
    for ``kant k8s run --kubeconfig``."""

    def __init__(self, *, ready_timeout: float = 60.0, grace: float = 10.0) -> None:
        self.ready_timeout = ready_timeout
        self.grace = grace
        self.dir: Path | None = None
        self._procs: list[subprocess.Popen[bytes]] = []
        self.port = 0
        self.kubeconfig = ""
        self._api: Api | None = None

    @property
    def api(self) -> Api:
        if self._api is None:
            raise TestEnvError("the test API server is not started")
        return self._api

    def __enter__(self) -> KubeTestEnv:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: Any) -> None:
        # (left on an exception, Ctrl-C or SIGTERM among them: what the run left running is
        # thrown away, so nothing is waited for: a server too loaded to answer would hold
        # the way out for its whole grace period)
        self.stop(grace=self.grace if exc_type is None else 0.0)

    def start(self) -> None:
        apiserver, etcd, why = find_binaries()
        if apiserver is None or etcd is None:
            raise TestEnvError(why)
        d = Path(tempfile.mkdtemp(prefix="kant-kube-"))
        self.dir = d
        try:
            self._start(apiserver, etcd, d)
        except BaseException:
            self.stop(grace=0.0)
            raise

    def _start(self, apiserver: str, etcd: str, d: Path) -> None:
        ec, ep = free_port(), free_port()
        etcd_log = open(d / "etcd.log", "wb")  # noqa: SIM115 - closed with the process
        self._procs.append(
            subprocess.Popen(
                [etcd, "--data-dir", str(d / "etcd"), "--name", "kant",
                 "--listen-client-urls", f"http://127.0.0.1:{ec}",
                 "--advertise-client-urls", f"http://127.0.0.1:{ec}",
                 "--listen-peer-urls", f"http://127.0.0.1:{ep}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{ep}",
                 "--initial-cluster", f"kant=http://127.0.0.1:{ep}",
                 "--log-level", "warn"],
                stdout=etcd_log, stderr=subprocess.STDOUT,
            )
        )  # fmt: skip
        (d / "tokens.csv").write_text(f'{TOKEN},kant-admin,1,"system:masters"\n')
        subprocess.run(
            ["openssl", "genrsa", "-out", str(d / "sa.key"), "2048"],
            check=True, capture_output=True,
        )  # fmt: skip
        subprocess.run(
            ["openssl", "rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub")],
            check=True, capture_output=True,
        )  # fmt: skip
        self.port = free_port()
        log = open(d / "apiserver.log", "wb")  # noqa: SIM115 - closed with the process
        self._procs.append(
            subprocess.Popen(
                [apiserver,
                 f"--etcd-servers=http://127.0.0.1:{ec}",
                 "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                 f"--secure-port={self.port}", f"--cert-dir={d / 'certs'}",
                 f"--token-auth-file={d / 'tokens.csv'}", "--authorization-mode=AlwaysAllow",
                 f"--service-account-key-file={d / 'sa.pub'}",
                 f"--service-account-signing-key-file={d / 'sa.key'}",
                 "--service-account-issuer=https://kubernetes.default.svc",
                 "--service-cluster-ip-range=10.0.0.0/24",
                 "--disable-admission-plugins=ServiceAccount",
                 "--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000",
                 "--logtostderr=true", "--v=0"],
                stdout=log, stderr=subprocess.STDOUT,
            )
        )  # fmt: skip
        host = f"https://127.0.0.1:{self.port}"
        self._api = Api(host, token=TOKEN, verify=False, pool_size=32)
        self.kubeconfig = str(d / "kubeconfig")
        Path(self.kubeconfig).write_text(
            "apiVersion: v1\nkind: Config\n"
            "clusters: [{name: kant, cluster: "
            f"{{server: '{host}', insecure-skip-tls-verify: true}}}}]\n"
            f"users: [{{name: admin, user: {{token: {TOKEN}}}}}]\n"
            "contexts: [{name: kant, context: {cluster: kant, user: admin}}]\n"
            "current-context: kant\n"
        )
        deadline = time.monotonic() + self.ready_timeout
        while True:
            for p in self._procs:
                if p.poll() is not None:
                    raise TestEnvError(f"{p.args!r} exited ({p.returncode}); logs in {d}")
            try:
                self._api.request("GET", "/readyz", timeout=2)
                break
            except (ApiError, OSError, urllib3.exceptions.HTTPError) as e:
                if time.monotonic() > deadline:
                    raise TestEnvError(
                        f"kube-apiserver not ready after {self.ready_timeout}s: {e}"
                    ) from None
                time.sleep(0.25)
        # The namespaces a cluster always has (no controller-manager creates them here).
        for ns in ("default", "kube-system"):
            try:
                self._api.post("/api/v1/namespaces", {"metadata": {"name": ns}})
            except ApiError as e:
                if e.status != 409:
                    raise

    def stop(self, *, grace: float | None = None) -> None:
        """Stop the API server, then etcd (SIGTERM, then SIGKILL after ``grace`` seconds,
        default :attr:`grace`; 0: SIGKILL at once), and remove the directory (unless
        ``$KANT_KUBE_KEEP`` is set). Whatever interrupts it (a signal raising while it waits)
        still kills the processes left and removes the directory before it propagates, and
        so does a second one while it waits for the processes killed."""
        wait = self.grace if grace is None else grace
        procs, self._procs = list(reversed(self._procs)), []
        self._api = None
        try:
            for p in procs:
                if wait > 0 and p.poll() is None:
                    p.terminate()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        p.wait(wait)
        finally:
            try:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                for p in procs:
                    p.wait()  # (killed: at once)
            finally:
                # (even when a second signal lands while it waits for the processes killed)
                if self.dir is not None and not os.environ.get("KANT_KUBE_KEEP"):
                    shutil.rmtree(self.dir, ignore_errors=True)
                self.dir = None
