"""The checks of a kubeconfig before the official ``kubernetes`` client reads it, so that
each mistake is one line naming the file (:class:`~kant.errors.InvalidKubeconfigError`):
the client says "No configuration found." for a file that does not exist, raises a bare
``IsADirectoryError`` for a folder and a ``TypeError`` for a list that is a number, and
prints the several lines of a YAML error for a malformed file."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

from kant.errors import InvalidKubeconfigError

MAX_KUBECONFIG_BYTES: Final = 16 << 20
"""The longest kubeconfig read (``--kubeconfig /dev/zero`` is refused, not read forever)."""

LISTS: Final = ("clusters", "contexts", "users")
"""The kubeconfig's lists of named entries."""


def check_kubeconfig(path: str | None, context: str | None) -> tuple[str, str]:
    """Find and check the kubeconfig: ``path`` (``--kubeconfig``), else ``$KUBECONFIG`` (files
    joined by ``os.pathsep``, those that exist merged, as kubectl does), else
    ``~/.kube/config``. Each file must be a readable UTF-8 YAML mapping whose ``clusters``,
    ``contexts`` and ``users`` are lists of named entries; ``context`` (else the
    ``current-context`` a file sets) must be one of the contexts. Returns the name to give in
    errors and what to pass to the client as its ``config_file``. Raises
    :class:`~kant.errors.InvalidKubeconfigError` naming the file."""
    env = os.environ.get("KUBECONFIG")
    where = path if path is not None else env or "~/.kube/config"
    if path is not None:
        name = path
    elif env:
        name = f"{env} ($KUBECONFIG)"
    else:
        name = "~/.kube/config (the default; --kubeconfig names another)"
    paths = [os.path.expanduser(p) for p in where.split(os.pathsep) if p]
    if path is not None:  # (a file named on the command line must be there, as for kubectl)
        for p in paths:
            if not os.path.exists(p):
                raise InvalidKubeconfigError(p, "does not exist")
    there = [p for p in paths if os.path.exists(p)]
    if not there:
        raise InvalidKubeconfigError(
            name, "does not exist" if len(paths) <= 1 else "none of these files exists"
        )
    docs = [_read(p) for p in there]
    if any(d is None for d in docs):
        return name, where  # (a pipe, --kubeconfig <(...): read once, by the client)
    known = sorted({str(c["name"]) for d in docs for c in (d or {}).get("contexts") or ()})
    listed = ", ".join(repr(c) for c in known) or "none"
    if context is None:
        current = None
        for d in docs:  # (the client keeps the last file's)
            if d is not None and "current-context" in d:
                current = d["current-context"]
        if not current:
            raise InvalidKubeconfigError(
                name, f"sets no current-context; --context names one (contexts: {listed})"
            )
        context = str(current)
    if context not in known:
        raise InvalidKubeconfigError(name, f"has no context {context!r} (contexts: {listed})")
    return name, where


def _read(path: str) -> Mapping[str, Any] | None:
    """The kubeconfig file at ``path``, checked (see :func:`check_kubeconfig`); None for a
    file that is not a regular one (a pipe: read by the client alone)."""
    if os.path.isdir(path):
        raise InvalidKubeconfigError(path, "is a directory, not a kubeconfig file")
    if not os.path.isfile(path):
        return None
    import yaml

    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_KUBECONFIG_BYTES + 1)
    except OSError as e:
        raise InvalidKubeconfigError(path, f"cannot read: {e.strerror or e}") from None
    if len(raw) > MAX_KUBECONFIG_BYTES:
        raise InvalidKubeconfigError(
            path, f"longer than {MAX_KUBECONFIG_BYTES >> 20} MiB: not a kubeconfig"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidKubeconfigError(path, f"not UTF-8 text (byte {e.start})") from None
    try:
        doc = yaml.safe_load(text)
    except RecursionError:
        raise InvalidKubeconfigError(path, "nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or e
        raise InvalidKubeconfigError(path, f"not valid YAML{at}: {one_line(problem)}") from None
    if doc is None:
        raise InvalidKubeconfigError(path, "is empty")
    if not isinstance(doc, Mapping):
        raise InvalidKubeconfigError(path, f"is a YAML {type(doc).__name__}, not a kubeconfig")
    for key in LISTS:
        entries = doc.get(key)
        if entries is not None and not (
            isinstance(entries, list)
            and all(isinstance(e, Mapping) and isinstance(e.get("name"), str) for e in entries)
        ):
            raise InvalidKubeconfigError(path, f"{key} must be a list of entries, each named")
    # each entry's body as the client reads it (a server of 5 raised "'int' object has no
    # attribute 'rstrip'" from inside it; a context of "zz", "'str' object has no
    # attribute 'safe_get'")
    for key, body, texts in _BODIES:
        for entry in doc.get(key) or ():
            inner = entry.get(body)
            where = f"{key} entry {entry['name']!r}"
            if inner is None:
                continue
            if not isinstance(inner, Mapping):
                raise InvalidKubeconfigError(path, f"{where}: {body} must be a mapping")
            for field in texts:
                if field in inner and not isinstance(inner[field], str):
                    raise InvalidKubeconfigError(path, f"{where}: {body}.{field} must be a string")
    return doc


_BODIES: Final = (
    ("clusters", "cluster", ("server", "certificate-authority", "certificate-authority-data")),
    ("contexts", "context", ("cluster", "user", "namespace")),
    ("users", "user", ("token", "tokenFile", "client-certificate", "client-key",
                       "client-certificate-data", "client-key-data")),
)  # fmt: skip
"""Per list of a kubeconfig, the body of its entries and the fields of the body that are
strings."""


def one_line(text: object) -> str:
    """``text`` with each run of whitespace (newlines among them) made one space."""
    return " ".join(str(text).split())
