"""A thin JSON client for the Kubernetes API: the official ``kubernetes`` package reads the
kubeconfig (server, TLS, token or client certificate); requests go through one thread-safe
``urllib3`` pool as plain JSON (no model objects: the shim reads a few fields of many pods).

:class:`Api` also chooses API versions through discovery (``policy/v1`` Eviction when the
server has it, else ``policy/v1beta1``), so the shim works from v1.20 to current clusters.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlencode

import urllib3

from kant.errors import InvalidKubeconfigError, KantError
from kant.k8s.kubeconfig import check_kubeconfig, one_line

Obj = dict[str, Any]

log = logging.getLogger(__name__)

TOKEN_REFRESH_SECONDS = 60.0
"""How often an :class:`Api` made from a kubeconfig reads its user's token again (a
``tokenFile`` rotated, an ``exec`` plugin's credential expired), as client-go re-reads a
token file every minute; and at once after a ``401`` answer."""


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


class ApiUnreachableError(KantError, ConnectionError):
    """The API server could not be reached, or did not answer: no connection (refused, a host
    name that does not resolve, a timeout, TLS refused), or one broken before the answer.
    ``server`` is the server's URL and ``reason`` says what failed, in a few words.

    It is a :class:`ConnectionError` (an :class:`OSError`), as a network failure of the
    standard library is: the shim's calls treat it as they treat any, logging it and trying
    again later, while ``kant k8s run`` refuses to start on it."""

    def __init__(self, server: str, reason: str) -> None:
        self.server = server
        self.reason = reason
        super().__init__(f"cannot reach the API server {server}: {reason}")


def _cut(r: urllib3.BaseHTTPResponse) -> None:
    """Shut down the socket a streamed answer ``r`` is read from, so that a read waiting on it
    in another thread returns (the stream then ends as broken). Needs urllib3 2.3 or later
    (``HTTPResponse.shutdown``); with an older one it does nothing, and the stream ends when
    the server ends it (``timeoutSeconds``)."""
    shutdown = getattr(r, "shutdown", None)
    if shutdown is not None:
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            shutdown()


class NotAnApiServerError(KantError):
    """The server answered, but not as a Kubernetes API server does (``/apis`` is no API group
    list: another web server, or a proxy's page)."""

    def __init__(self, server: str, answer: object) -> None:
        self.server = server
        shown = " ".join(str(answer).split())
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        super().__init__(
            f"{server} does not answer as a Kubernetes API server (GET /apis gave {shown})"
        )


def _unreachable(server: str, e: urllib3.exceptions.HTTPError) -> ApiUnreachableError:
    """``e``, a failure of urllib3 to get an answer from ``server``, said in a few words."""
    x = urllib3.exceptions
    cause = e.__cause__
    if isinstance(e, x.NameResolutionError):
        why = "its host name does not resolve"
    elif isinstance(e, x.NewConnectionError):  # (before ConnectTimeoutError, its base)
        why = (cause.strerror or str(cause)) if isinstance(cause, OSError) else str(e)
        why = why[:1].lower() + why[1:]  # "Connection refused" -> "connection refused"
    elif isinstance(e, x.ConnectTimeoutError):
        why = "the connection timed out"
    elif isinstance(e, x.ReadTimeoutError):
        why = "no answer in time"
    elif isinstance(e, x.SSLError):
        why = f"TLS failed: {e}"
    elif isinstance(e, x.ProtocolError):
        why = f"the connection broke: {e.args[-1] if e.args else e}"
    elif isinstance(e, x.LocationValueError):
        why = "not a valid URL"
    else:
        why = str(e)
    return ApiUnreachableError(server, " ".join(str(why).split()))


class _ClientErrors(logging.Filter):
    """What the ``kubernetes`` client logs on the root logger while it reads a kubeconfig,
    caught rather than printed: an ``exec`` credential plugin that failed (not there, an
    error, an output without a token), which it logs and goes on from without
    credentials."""

    def __init__(self) -> None:
        super().__init__()
        self.said: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or f"kubernetes{os.sep}config" not in record.pathname:
            return True
        self.said.append(record.getMessage())
        return False


class Api:
    """JSON requests to one API server. Thread-safe. A request that gets no answer raises
    :class:`ApiUnreachableError`; one answered with an error status, :class:`ApiError`."""

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
        token_source: Callable[[], str | None] | None = None,
    ) -> None:
        """``token_source``: reads the token again (None: none to send), called every
        :data:`TOKEN_REFRESH_SECONDS` and after a ``401`` answer, before the next request; a
        token it cannot read keeps the one held (logged once)."""
        self.host = host.rstrip("/")
        self._headers = {"Accept": "application/json", "User-Agent": "kant-k8s"}
        self._set_token(token)
        self._token_source = token_source
        self._token_due = time.monotonic() + TOKEN_REFRESH_SECONDS
        self._token_lock = threading.Lock()
        self._token_error: str | None = None
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

    def _set_token(self, token: str | None) -> None:
        headers = {k: v for k, v in self._headers.items() if k != "Authorization"}
        if token:
            headers["Authorization"] = token if token.startswith("Bearer ") else f"Bearer {token}"
        self._headers = headers  # (one assignment: a request reads one whole set)

    def _headers_now(self) -> dict[str, str]:
        """The headers of the next request, the token read again first when due."""
        if self._token_source is not None and time.monotonic() >= self._token_due:
            with self._token_lock:
                if time.monotonic() >= self._token_due:
                    try:
                        token = self._token_source()
                    except Exception as e:  # (the client's failures have no common type)
                        why = one_line(e)
                        if why != self._token_error:
                            log.warning("the kubeconfig's token was not read again (%s): the "
                                        "one read before is kept", why)  # fmt: skip
                        self._token_error = why
                    else:
                        self._token_error = None
                        self._set_token(token)
                    self._token_due = time.monotonic() + TOKEN_REFRESH_SECONDS
        return self._headers

    def _refused(self, status: int) -> None:
        """An answer ``status``: a ``401`` (the token expired, or was rotated) has the token
        read again before the next request."""
        if status == 401 and self._token_source is not None:
            self._token_due = time.monotonic()

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None) -> Api:
        """An Api for the kubeconfig at ``path`` (default ``$KUBECONFIG`` or ``~/.kube/config``);
        needs the ``kubernetes`` package (``pip install 'kant[k8s]'``). A kubeconfig that
        cannot be used (see :func:`~kant.k8s.kubeconfig.check_kubeconfig`; a server that is
        not an ``https://`` or ``http://`` URL) raises
        :class:`~kant.errors.InvalidKubeconfigError` naming the file; nothing is sent."""
        try:
            from kubernetes import client, config
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise KantError("the Kubernetes shim needs: pip install 'kant[k8s]'") from e
        name, where = check_kubeconfig(path, context)

        def load() -> Any:
            cfg = client.Configuration()
            caught = _ClientErrors()
            root = logging.root  # (where the client logs its exec plugin's failures)
            root.addFilter(caught)
            try:
                config.load_kube_config(  # type: ignore[no-untyped-call, unused-ignore]
                    config_file=where, context=context, client_configuration=cfg
                )
            finally:
                root.removeFilter(caught)
            if caught.said:
                raise KantError(f"its user's exec plugin failed: {one_line(caught.said[0])}")
            return cfg

        try:
            cfg = load()
        except Exception as e:  # (the client's failures have no common type: a missing
            # cluster entry, a certificate file that is not there, an exec plugin that failed)
            why = one_line(e)
            for noise in ("Invalid kube-config file. ", "Invalid kube-config. "):
                why = why.removeprefix(noise)
            raise InvalidKubeconfigError(name, why[:1].lower() + why[1:]) from None
        try:
            url = urllib3.util.parse_url(cfg.host or "")
        except urllib3.exceptions.LocationValueError:
            url = None
        if url is None or url.scheme not in ("https", "http") or not url.host:
            raise InvalidKubeconfigError(
                name, f"the server {cfg.host!r} is not an https:// or http:// URL"
            )

        def token_of(cfg: Any) -> str | None:
            keys = cfg.api_key or {}
            token: str | None = keys.get("authorization") or keys.get("BearerToken")
            if token:
                # (a token file written by echo ends in a newline, which kubectl drops too;
                # the official client gives the file's text behind "Bearer ")
                token = token.removeprefix("Bearer ").strip()
                if not all(" " <= c <= "~" for c in token):
                    raise InvalidKubeconfigError(
                        name, "its user's token holds a character an HTTP header cannot carry"
                    )
            return token

        def reread() -> str:
            again = token_of(load())
            if not again:  # (an exec plugin that failed: the client logs it, sets none)
                raise KantError("the kubeconfig gave no token")
            return again

        token = token_of(cfg)
        return cls(
            cfg.host,
            token=token,
            ca_file=cfg.ssl_ca_cert,
            cert_file=cfg.cert_file,
            key_file=cfg.key_file,
            verify=bool(cfg.verify_ssl),
            # (read again: a tokenFile rotated, an exec plugin's credential expired; a
            # kubeconfig with no token at first, client certificates alone, has none later)
            token_source=reread if token else None,
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
        """One request; the decoded JSON answer. Raises :class:`ApiError` for a status >= 400,
        :class:`ApiUnreachableError` when no answer came."""
        url = self.host + path + (f"?{urlencode(query)}" if query else "")
        headers = dict(self._headers_now())
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        try:
            r = self._pool.request(method, url, body=data, headers=headers, timeout=timeout)
        except urllib3.exceptions.HTTPError as e:
            raise _unreachable(self.host, e) from e
        text = r.data.decode("utf-8", "replace")
        if r.status >= 400:
            self._refused(r.status)
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

    def watch(
        self,
        path: str,
        resource_version: str,
        *,
        timeout: int = 300,
        opened: Callable[[Callable[[], None]], None] | None = None,
    ) -> Iterator[Obj]:
        """Stream watch events (``{"type", "object"}``) from ``resource_version`` until the
        server closes the stream. Raises :class:`ApiError` for an error status,
        :class:`ApiUnreachableError` when no answer came or the stream broke. ``opened``, if
        given, is called once the stream is open with a function that closes it from any
        thread (a read waiting on it then ends as a broken stream); a call after the stream
        ended does nothing."""
        q = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": timeout,
            "allowWatchBookmarks": "true",
        }
        url = f"{self.host}{path}?{urlencode(q)}"
        try:
            r = self._pool.request(
                "GET",
                url,
                # its own connection, closed when the stream ends: never back in the pool,
                # so the closer below can never cut a connection serving another request
                headers={**self._headers_now(), "Connection": "close"},
                preload_content=False,
                timeout=urllib3.Timeout(connect=10, read=timeout + 30),
            )
        except urllib3.exceptions.HTTPError as e:
            raise _unreachable(self.host, e) from e
        guard = threading.Lock()
        reading = True  # (once False, the stream has ended: nothing left to cut)

        def close() -> None:
            with guard:
                if reading:
                    _cut(r)

        try:
            if opened is not None:
                opened(close)
            if r.status >= 400:
                self._refused(r.status)
                raise ApiError(r.status, "GET", path, r.read().decode("utf-8", "replace"))
            buf = b""
            for chunk in r.stream(65536):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        except urllib3.exceptions.HTTPError as e:
            raise _unreachable(self.host, e) from e
        finally:
            with guard:
                reading = False
            r.release_conn()

    # ----------------------------------------------------------------- discovery

    def groups(self) -> set[str]:
        """Every ``group/version`` the server serves (cached). Raises
        :class:`NotAnApiServerError` when ``/apis`` is not a Kubernetes API group list (a
        kubeconfig naming another kind of server)."""
        with self._lock:
            if self._groups is None:
                doc = self.get("/apis")
                groups = doc.get("groups")
                if not isinstance(groups, list):
                    raise NotAnApiServerError(self.host, doc)
                out = {"v1"}
                for g in groups:
                    versions = g.get("versions") if isinstance(g, dict) else None
                    if not isinstance(versions, list):
                        raise NotAnApiServerError(self.host, doc)
                    for v in versions:
                        gv = v.get("groupVersion") if isinstance(v, dict) else None
                        if not isinstance(gv, str):
                            raise NotAnApiServerError(self.host, doc)
                        out.add(gv)
                self._groups = out
            return self._groups

    def has(self, group_version: str) -> bool:
        """Whether the server serves ``group_version`` (e.g. ``policy/v1``)."""
        return group_version in self.groups()

    def policy_version(self) -> str:
        """``policy/v1`` when served (Kubernetes >= 1.21), else ``policy/v1beta1``."""
        return "policy/v1" if self.has("policy/v1") else "policy/v1beta1"
