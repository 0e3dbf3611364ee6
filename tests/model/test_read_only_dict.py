"""ReadOnlyDict: what a kept cycle result shares between the callers it is answered to."""

from __future__ import annotations

import copy
import pickle

import pytest

from kant.model import ReadOnlyDict


def test_a_read_only_dict_refuses_every_change_and_reads_as_a_dict() -> None:
    d = ReadOnlyDict({"a": 1, "b": 2})
    for change in (
        lambda: d.__setitem__("c", 3),
        lambda: d.__delitem__("a"),
        lambda: d.update(c=3),
        lambda: d.setdefault("c", 3),
        lambda: d.pop("a"),
        lambda: d.popitem(),
        lambda: d.clear(),
    ):
        with pytest.raises(TypeError, match="read-only"):
            change()
    with pytest.raises(TypeError):
        d |= {"c": 3}
    d.__init__(c=3)  # (made once: initialising it again changes nothing)
    assert d == {"a": 1, "b": 2} and list(d.items()) == [("a", 1), ("b", 2)]
    mine = dict(d)
    mine["c"] = 3
    assert "c" not in d


def test_a_read_only_dict_copies_and_pickles_as_itself() -> None:
    d = ReadOnlyDict({"a": (1, 2)})
    for twin in (copy.copy(d), copy.deepcopy(d), pickle.loads(pickle.dumps(d))):
        assert type(twin) is ReadOnlyDict and twin == d
        with pytest.raises(TypeError):
            twin["b"] = (3, 4)
