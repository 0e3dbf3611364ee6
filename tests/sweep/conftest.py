"""One Ray instance for the whole session (starting one takes several seconds): two CPUs on
this machine, as the sweep's Ray tests ask. Skipped with a reason when Ray is not installed
(``pip install 'kant[ray]'``; the ``dev`` extra installs it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_instance() -> Iterator[Any]:
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'kant[ray]'")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
