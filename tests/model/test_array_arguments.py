"""A NumPy array (or another value whose comparisons give arrays or raise) where a model
field wants a name is the field's typed error, not NumPy's "truth value of an array is
ambiguous" ValueError or an unhashable TypeError."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kant.errors import InvalidJobError, InvalidNodeError, ValidationError
from kant.model import Taint, Toleration

ARRAY = np.array(["a", "b"])


@pytest.mark.parametrize(
    ("make", "err", "field"),
    [
        (lambda: Toleration(key=ARRAY), InvalidJobError, "key"),
        (lambda: Toleration(key=np.array([""]), operator="Exists"), InvalidJobError, "key"),
        (lambda: Toleration(key="k", value=np.array([""])), InvalidJobError, "value"),
        (lambda: Taint(key=np.array(["k"]), effect="NoSchedule"), InvalidNodeError, "key"),
        (lambda: Toleration(key="k", operator=ARRAY), InvalidJobError, "operator"),
        (lambda: Toleration(key="k", operator=["Equal"]), InvalidJobError, "operator"),
        (lambda: Toleration(key="k", operator=np.array(["Exists"])), InvalidJobError, "operator"),
        (lambda: Toleration(key="k", value=ARRAY), InvalidJobError, "value"),
        (lambda: Taint(key=ARRAY, effect="NoSchedule"), InvalidNodeError, "key"),
        (lambda: Taint(key="k", value=ARRAY, effect="NoSchedule"), InvalidNodeError, "value"),
    ],
)
def test_an_array_where_a_name_is_wanted_is_the_fields_typed_error(
    make: Callable[[], Any], err: type[ValidationError], field: str
) -> None:
    with pytest.raises(err) as e:
        make()
    assert e.value.field == field
