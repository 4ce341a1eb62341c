"""Property-based fuzzing: ParseAction never crashes and classifies any text consistently."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.envs import GuessNumberEnv
from wrappers import ParseAction, extract_action

TAGS = ["<action>", "</action>", "<search>", "</search>", "<answer>", "</answer>", "<think>", "</think>"]
# Text made of tag fragments, unicode, control characters and binary-looking junk.
fragments = st.one_of(st.sampled_from(TAGS), st.text(max_size=30),
                      st.binary(max_size=30).map(lambda b: b.decode("latin-1")),
                      st.sampled_from(["guess 3", " ", "\x00", "\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace")]))
model_outputs = st.lists(fragments, max_size=12).map("".join)


@settings(max_examples=400, deadline=None)
@given(model_outputs, st.sampled_from(["action", "search"]))
def test_extract_action_is_total_and_consistent(text, action_format):
    action, error = extract_action(text, action_format)
    assert (action is None) != (error is None)
    if action is not None:
        assert action.strip() == action and action
        if action_format == "action":
            assert text.count("<action>") == 1 and action in text
        else:
            assert action.startswith(("<search>", "<answer>"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(model_outputs, st.binary(max_size=200), st.integers(), st.none()))
def test_parse_action_step_never_raises(output):
    env = ParseAction(GuessNumberEnv())
    observation, _ = env.reset(seed=0, options={"target": 5})
    after, reward, terminated, truncated, info = env.step(output)
    if info["invalid_action"]:
        assert reward == -0.1 and after == observation and not terminated
    else:
        assert info["parsed_action"] in {f"guess {n}" for n in range(1, 9)}


def test_megabytes_of_junk_are_parsed_in_linear_time():
    junk = ("<action" + "x" * 1000 + "</act") * 2000  # ~2 MB of near-tags
    assert extract_action(junk)[0] is None
    big = "<think>" + "y" * 3_000_000 + "</think><action>guess 5</action>"
    assert extract_action(big) == ("guess 5", None)
