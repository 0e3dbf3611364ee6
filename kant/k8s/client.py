"""A thin JSON client for the Kubernetes API: the official ``kubernetes`` package reads the
kubeconfig (server, TLS, token or client certificate); requests go through one thread-safe
``urllib3`` pool as plain JSON (no model objects: the shim reads a few fields of many pods).

:class:`Api` also chooses API versions through discovery (``policy/v1`` Eviction when the
server has it, else ``policy/v1beta1``), so the shim works from v1.20 to current clusters.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlencode

import urllib3

from kant.errors import KantError

Obj = dict[str, Any]


class ApiError(KantError):
    """The API server answered with an error status (``status``, ``reason``, ``message``)."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        try:
            doc = json.loads(body)
        except ValueError:
            doc = {}
        self.status = status
        self.reason = str(doc.get("reason", "")) if isinstance(doc, dict) else ""
        self.message = str(doc.get("message", body[:200])) if isinstance(doc, dict) else body[:200]
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}")


class Api:
    """JSON requests to one API server. Thread-safe."""

    def __init__(
        self,
        host: str,
        *,
        token: str | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        verify: bool = True,
        pool_size: int = 16,
    ) -> None:
        self.host = host.rstrip("/")
        self._headers = {"Accept": "application/json", "User-Agent": "kant-k8s"}
        if token:
            self._headers["Authorization"] = (
                token if token.startswith("Bearer ") else f"Bearer {token}"
            )
        kw: dict[str, Any] = {"maxsize": pool_size, "block": True, "retries": False}
        if self.host.startswith("https"):
            kw["cert_reqs"] = "CERT_REQUIRED" if verify else "CERT_NONE"
            if ca_file:
                kw["ca_certs"] = ca_file
            if cert_file:
                kw["cert_file"] = cert_file
                kw["key_file"] = key_file
            if not verify:
                urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self._pool = urllib3.PoolManager(**kw)
        self._lock = threading.Lock()
        self._groups: set[str] | None = None

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None) -> Api:
        """An Api for the kubeconfig at ``path`` (default ``$KUBECONFIG`` or ``~/.kube/config``);
        needs the ``kubernetes`` package (``pip install 'kant[k8s]'``)."""
        try:
            from kubernetes import client, config
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise KantError("the Kubernetes shim needs: pip install 'kant[k8s]'") from e
        cfg = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call, unused-ignore]
            config_file=path, context=context, client_configuration=cfg
        )
        token = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
        return cls(
            cfg.host,
            token=token,
            ca_file=cfg.ssl_ca_cert,
            cert_file=cfg.cert_file,
            key_file=cfg.key_file,
            verify=bool(cfg.verify_ssl),
        )

    # ----------------------------------------------------------------- requests

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> Obj:
        """One request; the decoded JSON answer. Raises :class:`ApiError` for a status >= 400."""
        url = self.host + path + (f"?{urlencode(query)}" if query else "")
        headers = dict(self._headers)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        r = self._pool.request(method, url, body=data, headers=headers, timeout=timeout)
        text = r.data.decode("utf-8", "replace")
        if r.status >= 400:
            raise ApiError(r.status, method, path, text)
        if not text:
            return {}
        try:
            doc = json.loads(text)
        except ValueError:
            return {"text": text}  # /readyz, /healthz answer plain text
        return doc if isinstance(doc, dict) else {"items": doc}

    def get(self, path: str, **query: Any) -> Obj:
        return self.request("GET", path, query=query or None)

    def post(self, path: str, body: Any) -> Obj:
        return self.request("POST", path, body)

    def put(self, path: str, body: Any) -> Obj:
        return self.request("PUT", path, body)

    def delete(self, path: str, body: Any = None) -> Obj:
        return self.request("DELETE", path, body)

    def patch(self, path: str, body: Any, *, kind: str = "merge") -> Obj:
        ct = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }[kind]
        return self.request("PATCH", path, body, content_type=ct)

    def watch(self, path: str, resource_version: str, *, timeout: int = 300) -> Iterator[Obj]:
        """Stream watch events (``{"type", "object"}``) from ``resource_version`` until the
        server closes the stream. Raises :class:`ApiError` for an error status."""
        q = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": timeout,
            "allowWatchBookmarks": "true",
        }
        url = f"{self.host}{path}?{urlencode(q)}"
        r = self._pool.request(
            "GET",
            url,
            headers=self._headers,
            preload_content=False,
            timeout=urllib3.Timeout(connect=10, read=timeout + 30),
        )
        try:
            if r.status >= 400:
                raise ApiError(r.status, "GET", path, r.read().decode("utf-8", "replace"))
            buf = b""
            for chunk in r.stream(65536):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            r.release_conn()

    # ----------------------------------------------------------------- discovery

    def groups(self) -> set[str]:
        """Every ``group/version`` the server serves (cached)."""
        with self._lock:
            if self._groups is None:
                out = {"v1"}
                for g in self.get("/apis").get("groups", ()):
                    for v in g.get("versions", ()):
                        out.add(v["groupVersion"])
                self._groups = out
            return self._groups

    def has(self, group_version: str) -> bool:
        """Whether the server serves ``group_version`` (e.g. ``policy/v1``)."""
        return group_version in self.groups()

    def policy_version(self) -> str:
        """``policy/v1`` when served (Kubernetes >= 1.21), else ``policy/v1beta1``."""
        return "policy/v1" if self.has("policy/v1") else "policy/v1beta1"
