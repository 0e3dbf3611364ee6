"""The openb ``"A100|H100"`` syntax for ``gpu_models``: ``""`` means any model; a string with
an empty or space-padded name between the pipes is refused, not read as "any model" or as
the names that are left."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kant.errors import InvalidJobError, ValidationError
from kant.model import Resources, Role
from kant.placement.fragmentation import TaskClass

BAD = ["|", "||", " | ", "A100||H100", "|A100", "A100|", " A100", "A100 |H100"]


@pytest.mark.parametrize("text", BAD)
def test_a_gpu_models_string_with_an_empty_or_padded_name_is_refused_naming_it(
    text: str,
) -> None:
    with pytest.raises(InvalidJobError) as exc:
        Role(gpu_models=text)
    assert exc.value.field == "gpu_models" and exc.value.value == text
    assert repr(text) in str(exc.value)


def test_an_empty_string_still_means_any_model_and_names_still_split_on_pipes() -> None:
    assert Role(gpu_models="").gpu_models == frozenset()
    assert Role(gpu_models="A100").gpu_models == {"A100"}
    assert Role(gpu_models="A100|H100|A100").gpu_models == {"A100", "H100"}


@pytest.mark.parametrize("text", BAD)
def test_a_packing_task_class_refuses_the_same_strings(text: str) -> None:
    with pytest.raises(ValidationError, match="gpu_models"):
        TaskClass(resources=Resources(gpus=1), gpu_models=text)


NAMES = st.text(alphabet="AB1 |", max_size=8)


@given(text=NAMES)
def test_a_gpu_models_string_is_either_refused_or_names_exactly_its_nonempty_parts(
    text: str,
) -> None:
    try:
        models = Role(gpu_models=text).gpu_models
    except InvalidJobError as e:
        assert e.value == text
        assert text != ""
        parts = text.split("|")
        assert any(not p or p.strip() != p for p in parts)
        return
    assert models == (frozenset(text.split("|")) if text else frozenset())
    assert all(m and m.strip() == m for m in models)


@pytest.mark.parametrize(
    "models",
    [[["a"]], [{"A100": 1}], {"A100", " A100"}, [" A100"], ["A100 "], [""], ("A100", 7)],
)
def test_a_packing_task_class_refuses_a_collection_of_bad_names_as_role_does(
    models: object,
) -> None:
    # A list inside the list used to escape as a bare TypeError, and a padded name was kept.
    with pytest.raises(InvalidJobError):
        Role(gpu_models=models)  # type: ignore[arg-type]
    with pytest.raises(ValidationError) as exc:
        TaskClass(resources=Resources(gpus=1), gpu_models=models)  # type: ignore[arg-type]
    assert exc.value.field == "gpu_models"


def test_a_packing_task_class_keeps_good_model_collections() -> None:
    tc = TaskClass(resources=Resources(gpus=1), gpu_models=["A100", "H100", "A100"])
    assert tc.gpu_models == {"A100", "H100"}
    assert TaskClass(resources=Resources(gpus=1), gpu_models=()).gpu_models == frozenset()
