"""Property-based tests (hypothesis) over TrainConfig's fields: any value of any field is either
accepted or refused with one ValueError naming the field, before any model, data or env work."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from training.config import TrainConfig

FIELDS = [f.name for f in dataclasses.fields(TrainConfig)]
#: What a YAML file or a flag can hold, edge cases included.
VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["cuda:0", "cpu", "bfloat16", "fsdp", "bf16", "vllm", "ppo", "$HOME/x"]),
    st.lists(st.integers(-3, 3), max_size=3), st.dictionaries(st.text(max_size=4),
                                                             st.integers(), max_size=2))


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(FIELDS), value=VALUES)
def test_any_value_of_a_field_is_accepted_or_refused_naming_the_field(name, value):
    try:
        config = TrainConfig(**{name: value})
    except ValueError as error:
        message = str(error)
        assert name in message and "\n" not in message, message
    else:
        assert getattr(config, name) is not None or value is None


@settings(max_examples=200, deadline=None)
@given(changes=st.dictionaries(st.sampled_from(FIELDS), VALUES, min_size=2, max_size=4))
def test_several_bad_values_are_refused_with_one_of_their_names(changes):
    try:
        TrainConfig(**changes)
    except ValueError as error:
        assert any(name in str(error) for name in changes), (changes, str(error))
