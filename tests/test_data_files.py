"""Every data file a command reads goes through its kind's one schema
(run_files.data_files; the trainer's kinds in training.infra.data_files): JSON Lines logs
(replay records, metrics.jsonl) skip a bad record with one warning giving the count and the
first file:line; files written whole (wm_config.json, state.json, rollouts-ahead.json, a
predictions file) are refused with file:line naming the key and what is accepted. Never a
traceback, never a bad value used."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from run_files import data_files
from run_files.data_files import DataFileError, DataFileWarning
from training.infra.data_files import read_checkpoint_state, read_wm_config
from tests.envs import GuessNumberEnv
from training.cli import main
from training.world_model.config import WorldModelConfig
from wrappers import HistoryPrompt, ParseAction, RecordTransitions, WMReplay
from wrappers.replay import REQUIRED_FIELDS

#: What a wm_config.json's ``config`` may hold (eval-wm passes the same).
WM_FIELDS = [f.name for f in fields(WorldModelConfig)]


def record_replay(folder: Path, episodes: int = 2) -> Path:
    """GuessNumber episodes (target 3, guesses 1, 2, 3) recorded into a replay at ``folder``."""
    env = RecordTransitions(ParseAction(HistoryPrompt(GuessNumberEnv())), WMReplay(folder))
    for seed in range(episodes):
        env.reset(seed=seed, options={"target": 3})
        for guess in (1, 2, 3):
            env.step(f"<action>guess {guess}</action>")
    env.close()
    return folder


def append_lines(replay: Path, *lines: str) -> tuple[Path, int]:
    """Append ``lines`` to the replay's shard; returns the shard and the first new line's
    number."""
    shard = next(replay.glob("*.jsonl"))
    first = len(shard.read_text(encoding="utf-8").splitlines()) + 1
    with open(shard, "a", encoding="utf-8") as handle:
        handle.write("".join(lines))
    return shard, first


def good_record(replay: Path) -> dict:
    return WMReplay.load(replay, strict=True).to_list()[0]


BAD_RECORDS = [  # (change to a good record, the reason named)
    ({"reward": math.nan}, "field 'reward' is nan, expected a finite number"),
    ({"reward": math.inf}, "field 'reward' is inf, expected a finite number"),
    ({"episode_id": [1]}, "field 'episode_id' is [1], expected a string"),
    ({"step": "0"}, "field 'step' is '0', expected an integer >= 0"),
    ({"step": -1}, "field 'step' is -1, expected an integer >= 0"),
    ({"terminated": "false"}, "field 'terminated' is 'false', expected true or false"),
    ({"action_entropy": math.nan}, "field 'action_entropy' is nan, expected a finite number"),
    ({"response_ids": [1, "2"]}, "field 'response_ids[1]' is '2', expected an integer"),
    ({"schema_version": 2}, "field 'schema_version' is 2, expected 1"),
]


# -- replay records: skipped with a count and the first file:line ------------------------------

def test_bad_replay_records_are_skipped_with_the_count_and_the_first_file_line(tmp_path):
    replay = record_replay(tmp_path / "replay")
    good = good_record(replay)
    lines = [json.dumps({**good, **change}) + "\n" for change, _ in BAD_RECORDS]
    lines += ["[1, 2]\n", "{not json}\n", json.dumps({**good, "my_note": [1]}) + "\n",
              '{"h": "cut off mid-wri']
    shard, first = append_lines(replay, *lines)
    with pytest.warns(DataFileWarning) as caught:
        loaded = WMReplay.load(replay)
    message = str(caught[0].message)
    bad = len(BAD_RECORDS) + 3
    assert message.startswith(f"{bad} malformed record(s) in {replay} skipped (not used), "
                              f"first at {shard}:{first}: field 'reward' is nan")
    assert len(caught) == 1  # one warning for the whole replay
    assert [e.reason for e in loaded.errors[:len(BAD_RECORDS)]] == [r for _, r in BAD_RECORDS]
    assert [e.line for e in loaded.errors] == [first + i for i in range(len(BAD_RECORDS) + 2)] \
        + [first + len(lines) - 1]
    assert loaded.errors[len(BAD_RECORDS)].reason == "record is [1, 2], not a JSON object"
    assert loaded.errors[-2].reason.startswith("not valid JSON")
    assert loaded.errors[-1].reason == "truncated record (incomplete last line)"
    # The good records and the one with an extra field of its own (the record schema is open:
    # transition_record takes any caller's fields) are loaded, and nothing non-finite.
    assert len(loaded) == 7 and loaded.to_list()[-1]["my_note"] == [1]
    assert all(math.isfinite(r["reward"]) and isinstance(r["episode_id"], str)
               for r in loaded)
    assert sorted(len(steps) for steps in loaded.episodes().values()) == [3, 4]


def test_strict_load_refuses_at_the_first_bad_line(tmp_path):
    replay = record_replay(tmp_path / "replay")
    shard, first = append_lines(replay, json.dumps({**good_record(replay),
                                                    "episode_id": [1]}) + "\n")
    with pytest.raises(DataFileError, match="1 malformed record") as error:
        WMReplay.load(replay, strict=True)
    assert (error.value.file, error.value.line) == (str(shard), first)
    assert f"{shard}:{first}: field 'episode_id' is [1], expected a string" in str(error.value)
    assert isinstance(error.value, ValueError)


def test_the_record_schema_declares_every_field_a_transition_record_has():
    from agents.types import PolicyOutput, Trajectory, Transition

    required = {f.name for f in data_files.REPLAY_RECORD.fields if f.required}
    assert required == {*REQUIRED_FIELDS, "schema_version"}
    output = PolicyOutput("<action>guess 1</action>", [1, 2], [3], [-0.5], [0.1])
    trajectory = Trajectory("t", "guess", 0, [Transition("h", output, "guess 1", "Go higher.",
                                                          0.0, False, False, False)])
    record = {"schema_version": 1, **trajectory.to_records(
        "e", [{"wm_selected": True, "advantage": 0.5}], source="train", update=1, group=0,
        lambda_g=0.5)[0]}
    assert set(record) <= set(data_files.REPLAY_RECORD.names)  # every field typed
    assert data_files.check(record, data_files.REPLAY_RECORD) is None


# -- metrics.jsonl ---------------------------------------------------------------------------

def test_metrics_lines_that_are_no_step_are_skipped_with_a_warning(tmp_path):
    from training.infra.metrics_log import read_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "reward": 0.5, "grad_norm": NaN, "env": "x"}\n'
                    '{"step": "2", "reward": 1}\n[3]\n{"step": 3, "reward": [1]}\n'
                    '{"step": -4}\n{"step": 5, "reward": 2}\n{"step": 6, "rew')
    with pytest.warns(DataFileWarning) as caught:
        records = read_metrics(path)
    assert [r["step"] for r in records] == [1, 5]  # NaN is the writer's "no reading"
    assert str(caught[0].message).startswith(
        f"5 malformed record(s) in {path} skipped (not used), first at {path}:2: "
        "field 'step' is '2', expected an integer >= 0")


def test_plot_skips_a_bad_metrics_line_and_names_it(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"step": step, "reward": step / 4}) + "\n" for step in range(1, 5))
        + '{"step": 5, "reward": "high"\n{"step": [6]}\n')
    with pytest.warns(DataFileWarning, match=rf"2 malformed record\(s\) in .*first at "
                                             rf"{run / 'metrics.jsonl'}:5: not valid JSON"):
        assert main(["plot", str(run), "--metrics", "reward", "--out",
                     str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").is_file() and "Traceback" not in capsys.readouterr().err


# -- wm_config.json --------------------------------------------------------------------------

def wm_config_text(**changes) -> str:
    from training.world_model import SPLIT_KEY
    from training.world_model.config import WorldModelConfig

    saved = {"config": asdict(WorldModelConfig()), "replay": "runs/replay",
             "split_key": SPLIT_KEY, "train_examples": 9, "val_examples": 1}
    for key, value in changes.items():
        if key.startswith("config."):
            saved["config"][key.removeprefix("config.")] = value
        else:
            saved[key] = value
    return json.dumps(saved, indent=2)


def line_of(text: str, marker: str | None) -> int:
    """The line of ``marker``'s first occurrence in ``text`` (its last line when None)."""
    return text[:text.index(marker) if marker else len(text)].count("\n") + 1


@pytest.mark.parametrize("text, marker, reason", [
    (wm_config_text()[:50], None, "not valid JSON"),
    ("", None, "the file is empty"),
    ("[1, 2]", None, "wm_config.json is [1, 2], not a JSON object"),
    (wm_config_text(**{"config.seed": "0"}), '"seed"',
     "field 'config.seed' is '0', expected an integer >= 0"),
    (wm_config_text(**{"config.val_fraction": math.nan}), '"val_fraction"',
     "field 'config.val_fraction' is nan, expected a finite number in [0, 1)"),
    (wm_config_text(**{"config.method": "ppo"}), '"method"',
     "field 'config.method' is 'ppo', expected 'rwml' or 'sft' or 'cmae'"),
    (wm_config_text(**{"config.sede": 1}), '"sede"',
     "unknown field 'config.sede' (a train-wm config accepts: method, seed"),
    (wm_config_text(colour="red"), '"colour"',
     "unknown field 'colour' (a wm_config.json accepts: config, replay"),
    (wm_config_text(replay=5), '"replay": 5', "field 'replay' is 5, expected a string"),
    (wm_config_text(config=[1]), '"config"', "field 'config' is [1], expected a JSON object"),
    ('{"replay": "r",\n "replay": "s"}', '"replay": "s"', "key 'replay' is given twice"),
])
def test_a_broken_wm_config_is_refused_with_file_line(tmp_path, text, marker, reason):
    path = tmp_path / "wm_config.json"
    path.write_text(text)
    with pytest.raises(DataFileError) as error:
        read_wm_config(path, WM_FIELDS)
    assert str(error.value).startswith(f"{path}:{line_of(text, marker)}: {reason}"), \
        str(error.value)


def test_the_wm_config_train_wm_writes_is_read(tmp_path):
    path = tmp_path / "wm_config.json"
    path.write_text(wm_config_text(easy_fraction=0.5, kept=3, examples=9))
    assert read_wm_config(path, WM_FIELDS)["config"]["method"] == "rwml"


@pytest.mark.parametrize("text, phrase", [
    ('{"config": {"seed": 0', "wm_config.json:1: not valid JSON"),
    (wm_config_text(**{"config.seed": "0"}), "field 'config.seed' is '0'"),
    (wm_config_text(**{"config.val_fraction": math.inf}), "field 'config.val_fraction' is inf"),
])
def test_eval_wm_refuses_a_broken_wm_config_in_one_line(tmp_path, capsys, text, phrase):
    checkpoint = tmp_path / "wm"
    checkpoint.mkdir()
    (checkpoint / "wm_config.json").write_text(text)
    assert main(["eval-wm", "--checkpoint", str(checkpoint), "--output_dir",
                 str(tmp_path / "eval")]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and error.startswith("paw-gym eval-wm: error: --checkpoint")
    assert phrase in error and "Traceback" not in error, error
    assert not (tmp_path / "eval").exists()


# -- state.json ------------------------------------------------------------------------------

def state_text(**changes) -> str:
    state = {"step": 2, "skipped_updates": 0, "scheduler": {"last_epoch": 2},
             "rng": {"python": [3, [1, 2], None], "numpy": ["MT19937", [1, 2], 0, 0, 0.0]},
             "world_size": 1, "rank_rng": [], "config": {"wm_context": "next_turn", "lr": 0.1},
             "rollouts_ahead": {"max_staleness": 1, "steps": [3]}}
    state.update(changes)
    return json.dumps({k: v for k, v in state.items() if v is not ...}, indent=1)


@pytest.mark.parametrize("text, marker, reason", [
    (state_text()[:40], None, "not valid JSON"),
    (state_text(step="2"), '"step"', "field 'step' is '2', expected an integer >= 0"),
    (state_text(step=math.nan), '"step"', "field 'step' is nan, expected an integer >= 0"),
    (state_text(step=...), "{", "missing field(s) ['step']"),
    (state_text(rng={"python": []}), '"rng"', "missing field(s) ['rng.numpy']"),
    (state_text(rank_rng=[[1]]), "[\n   1", "field 'rank_rng[0]' is [1], expected a JSON object"),
    (state_text(config={"wm_context": 3}), '"wm_context"',
     "field 'config.wm_context' is 3, expected 'next_turn'"),
    (state_text(rollouts_ahead={"max_staleness": 1, "steps": ["3"]}), '"3"',
     "field 'rollouts_ahead.steps[0]' is '3', expected an integer"),
    (state_text(manifest={}), '"manifest"',
     "unknown field 'manifest' (a checkpoint state accepts: step"),
])
def test_a_damaged_state_json_is_refused_with_file_line_and_the_key(tmp_path, text, marker,
                                                                    reason):
    (tmp_path / "state.json").write_text(text)
    with pytest.raises(DataFileError) as error:
        read_checkpoint_state(tmp_path)  # the checkpoint folder, or the file
    line = line_of(text, marker)
    assert str(error.value).startswith(f"{tmp_path / 'state.json'}:{line}: {reason}"), \
        str(error.value)


def test_the_state_json_the_trainer_writes_is_read(tmp_path):
    (tmp_path / "state.json").write_text(state_text())
    assert read_checkpoint_state(tmp_path / "state.json")["step"] == 2


# -- rollouts-ahead.json ---------------------------------------------------------------------

def rollouts_text(**changes) -> str:
    from agents.types import PolicyOutput, Trajectory, Transition
    from training.rl.async_rollout import Rollout, rollouts_to_json

    output = PolicyOutput("<action>guess 1</action>", [1, 2], [3, 4], [-0.5, -math.inf],
                          [0.1, 0.2])
    step = Transition("h", output, "guess 1", "Go higher.", 0.0, False, False, False,
                      {"task_id": "t"})
    rollouts = json.loads(rollouts_to_json([Rollout(3, 2, [Trajectory("t", "guess", 0, [step])],
                                                    0.25)]))
    transition = rollouts[0]["trajectories"][0]["transitions"][0]
    for key, value in changes.items():
        target = transition["output"] if key in asdict(output) else transition
        target[key] = value
    return json.dumps(rollouts, indent=1)


def test_rollouts_ahead_round_trip_and_refusals(tmp_path):
    from training.rl.async_rollout import read_rollouts_ahead

    path = tmp_path / "rollouts-ahead.json"
    path.write_text(rollouts_text())
    (rollout,) = read_rollouts_ahead(path)
    assert rollout.step == 3 and rollout.trajectories[0].transitions[0].output.logprobs[1] == \
        -math.inf  # a token's log-probability can underflow; NaN cannot pass
    for change, reason in [
            ({"reward": math.nan}, "field '[0].trajectories[0].transitions[0].reward' is nan, "
                                   "expected a finite number"),
            ({"logprobs": [math.nan]}, "field '[0].trajectories[0].transitions[0].output."
                                       "logprobs[0]' is nan, expected a number (not NaN)"),
            ({"terminated": "no"}, "'no', expected true or false"),
            ({"extra": 1}, "unknown field '[0].trajectories[0].transitions[0].extra'")]:
        path.write_text(rollouts_text(**change))
        with pytest.raises(DataFileError, match=r"rollouts-ahead\.json:\d+: ") as error:
            read_rollouts_ahead(path)
        assert reason in str(error.value)
    path.write_text('[{"step": 3')
    with pytest.raises(DataFileError, match=rf"^{path}:1: not valid JSON"):
        read_rollouts_ahead(path)


# -- eval-wm predictions file: refused at the first bad line ---------------------------------

def test_eval_wm_refuses_a_bad_predictions_line_in_one_line(tmp_path, capsys):
    path = tmp_path / "p.predictions.jsonl"
    good = {"h": "h", "a": "a", "target": "Go higher.", "task_type": "guess",
            "predictions": ["Go higher."]}
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "predictions": [None]}) + "\n")
    assert main(["eval-wm", "--from_predictions", str(path), "--output_dir",
                 str(tmp_path / "eval")]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and f"{path}:2: field 'predictions[0]' is None, expected a " \
        "string" in error, error


# -- the commands, end to end ----------------------------------------------------------------

@pytest.mark.usefixtures("one_torch_thread")
def test_sft_skips_bad_replay_records_and_names_them(tiny_model_dir, tmp_path, capsys):
    replay = record_replay(tmp_path / "replay")
    good = good_record(replay)
    shard, first = append_lines(replay, *(json.dumps({**good, **change}) + "\n" for change in (
        {"reward": math.nan}, {"episode_id": [1]}, {"step": "0"})))
    with pytest.warns(DataFileWarning, match=rf"^3 malformed record\(s\) in {replay} skipped "
                                             rf"\(not used\), first at {shard}:{first}: "
                                             "field 'reward' is nan"):
        assert main(["sft", "--model", str(tiny_model_dir), "--replay", str(replay),
                     "--output_dir", str(tmp_path / "sft"), "--epochs", "1", "--device", "cpu",
                     "--progress", "false"]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "saved to" in captured.out


def test_train_wm_names_the_bad_records_when_none_is_left(tiny_model_dir, tmp_path, capsys):
    replay = record_replay(tmp_path / "replay", episodes=1)
    shard = next(replay.glob("*.jsonl"))
    records = [json.loads(line) for line in shard.read_text().splitlines()]
    shard.write_text("".join(json.dumps({**r, "step": str(r["step"])}) + "\n" for r in records))
    with pytest.warns(DataFileWarning, match="3 malformed record"):
        assert main(["train-wm", "--model", str(tiny_model_dir), "--replay", str(replay),
                     "--output_dir", str(tmp_path / "wm"), "--method", "sft", "--steps", "1",
                     "--device", "cpu", "--progress", "false"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("paw-gym train-wm: error: replay") and \
        f"3 malformed record(s) skipped, the first at {shard}:1: field 'step' is '0'" in error
