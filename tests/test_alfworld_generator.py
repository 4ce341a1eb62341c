"""ALFWorld game generation: format, object rules, and winnability in the upstream engine."""

from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from paw_gym.alfworld import pddl  # noqa: E402
from paw_gym.alfworld.generate import GenerationConfig, generate, split_dir  # noqa: E402
from paw_gym.alfworld.scenes import load_scene, scene_numbers  # noqa: E402
from paw_gym.alfworld.tasks import TASK_TYPES, NoTaskHere, sample_task  # noqa: E402
from tests.test_alfworld_fixtures import cache_env, shared_cache  # noqa: E402


def _games(root: Path) -> list[Path]:
    return sorted(split_dir(root, "train").rglob("game.tw-pddl"))


def test_every_task_type_written_in_alfworld_layout():
    _, root = shared_cache()
    games = _games(root)
    types = []
    for game_file in games:
        game = json.loads(game_file.read_text())
        traj = json.loads((game_file.parent / "traj_data.json").read_text())
        types.append(traj["task_type"])
        assert set(game) >= {"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}
        assert game["solvable"] is True and game["walkthrough"]
        assert pddl.GOAL_PLACEHOLDER not in game["grammar"]
        assert set(traj["pddl_params"]) == {"object_target", "parent_target", "toggle_target",
                                            "mrecep_target", "object_sliced"}
        problem = game["pddl_problem"]
        for constant in ("SinkBasinType - rtype", "MicrowaveType - rtype", "FridgeType - rtype",
                         "KnifeType - otype", "(atLocation agent1", "(canContain", "(:goal"):
            assert constant in problem, (game_file, constant)
        # the task directory names the goal the way ALFRED does
        assert game_file.parent.parent.name.startswith(traj["task_type"] + "-" +
                                                       traj["pddl_params"]["object_target"])
    assert sorted(types) == sorted(TASK_TYPES)


@pytest.mark.heavy
def test_walkthroughs_win_in_upstream_textworld_engine():
    """Replay in textworld's own PddlEnv + alfworld's demangler (the path AlfredTWEnv uses)."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
    from textworld.envs import PddlEnv

    _, root = shared_cache()
    env = AlfredDemangler(PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True)))
    for game_file in _games(root):
        env.load(str(game_file))
        state = env.reset()
        assert not state["won"], f"{game_file} is won before any step"
        for command in json.loads(game_file.read_text())["walkthrough"]:
            assert command in state["admissible_commands"], (game_file, command)
            state, _, _ = env.step(command)
        assert state["won"], game_file


@pytest.mark.heavy
def test_fast_engine_matches_upstream_engine_text_and_commands():
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
    from textworld.envs import PddlEnv

    from paw_gym.alfworld.engine import ALFWorldEngine

    _, root = shared_cache()
    reference = AlfredDemangler(PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True)))
    engine = ALFWorldEngine(cache_size=2)
    argv = list(sys.argv)
    for game_file in _games(root)[:3]:
        reference.load(str(game_file))
        state = reference.reset()
        sys.argv[:] = argv  # upstream's load and reset overwrite it
        for _ in range(2):  # the second reset comes from the engine's cache
            assert engine.reset(game_file) == state.feedback
        assert sys.argv == argv, "fast-downward's translator must not leave sys.argv changed"
        commands = json.loads(game_file.read_text())["walkthrough"]
        for command in ["look", "fly to the moon", *commands[:-1], "inventory", commands[-1]]:
            assert engine.admissible_commands == [c for c in state["admissible_commands"] if c != "help"]
            state, _, _ = reference.step(command)
            feedback, valid = engine.step(command)
            assert feedback == state.feedback
            assert valid == (command != "fly to the moon")
            assert engine.won == state["won"]
        assert engine.won
    assert engine._logics, "stock ALFWorld grammars should share one parsed grammar"
    engine.close()


def test_translations_cached_on_disk_replay_games_identically(tmp_path, monkeypatch):
    from paw_gym.alfworld import engine as engine_module

    _, root = shared_cache()
    games = _games(root)[:2]
    translations = []
    translate = engine_module._translate
    monkeypatch.setattr(engine_module, "_translate",
                        lambda *args: translations.append(1) or translate(*args))

    def play(game_file):
        engine = engine_module.ALFWorldEngine(cache_size=1)  # a fresh engine: nothing in memory
        texts = [engine.reset(game_file)]
        for command in json.loads(game_file.read_text())["walkthrough"]:
            texts.append(engine.step(command))
        won = engine.won
        engine.close()
        return texts, won

    with cache_env(tmp_path):
        first = [play(game) for game in games]
        entries = sorted(engine_module.translation_cache_dir().glob("*.sas.z"))
        assert len(translations) == 2 and len(entries) == 2
        assert [play(game) for game in games] == first  # from disk: no new translation
        assert len(translations) == 2 and all(won for _, won in first)
        entries[0].write_bytes(b"damaged")  # not zlib
        entries[1].write_bytes(zlib.compress(b"\xff\xfe not text"))  # not UTF-8
        assert [play(game) for game in games] == first  # both translated again
        assert len(translations) == 4
        assert not list(engine_module.translation_cache_dir().glob("*.tmp"))


class _Planted:
    """Unpickling this writes a marker file: what a planted cache entry could run."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "code ran"))


def test_a_planted_cache_entry_runs_nothing_and_a_shared_cache_dir_is_refused(tmp_path):
    import pickle

    from paw_gym.alfworld import engine as engine_module

    _, root = shared_cache()
    game = _games(root)[0]
    marker = tmp_path / "marker"
    with cache_env(tmp_path / "cache"):
        engine = engine_module.ALFWorldEngine(cache_size=1)
        engine.reset(game)
        engine.close()
        folder = engine_module.translation_cache_dir()
        (entry,) = folder.glob("*.sas.z")
        # An attacker's pickle, compressed like an entry: read as data, it is a cache miss.
        entry.write_bytes(zlib.compress(pickle.dumps(_Planted(marker))))
        engine = engine_module.ALFWorldEngine(cache_size=1)
        assert engine.reset(game)
        engine.close()
        assert not marker.exists()
        folder.chmod(0o777)  # others could plant entries that decide how games behave
        engine = engine_module.ALFWorldEngine(cache_size=1)
        with pytest.raises(PermissionError, match=r"mode 777; it must be yours with mode 700"):
            engine.reset(game)
        engine.close()
        folder.chmod(0o700)


def test_sampled_tasks_follow_object_rules_and_never_start_won():
    import alfworld.gen.constants as constants

    rng = np.random.default_rng(3)
    checked = 0
    for number in scene_numbers("train")[::6] + scene_numbers("eval_out_of_distribution")[::4]:
        scene = load_scene(number)
        receptacle_type = {r.id: r.rtype for r in scene.receptacles}
        for task_type in TASK_TYPES:
            try:
                task = sample_task(scene, task_type, rng)
            except NoTaskHere:
                continue
            checked += 1
            targets = [o for o in task.objects if o.otype == task.object_target]
            assert len(targets) >= (2 if task_type == "pick_two_obj_and_place" else 1)
            for obj in task.objects:
                rtype = receptacle_type[obj.receptacle]
                if obj.otype != task.toggle_target:
                    assert obj.otype in constants.VAL_RECEPTACLE_OBJECTS[rtype], (obj, rtype)
                if obj.otype == task.object_target and task.parent_target:
                    assert rtype != task.parent_target, "target starts in a goal receptacle"
            if task.parent_target:
                assert task.object_target in constants.VAL_RECEPTACLE_OBJECTS[task.parent_target]
    assert checked >= 20


def test_look_at_obj_in_light_needs_a_lamp():
    kitchen = load_scene(scene_numbers("train")[0])
    assert not kitchen.lamps
    with pytest.raises(NoTaskHere):
        sample_task(kitchen, "look_at_obj_in_light", np.random.default_rng(0))


def test_generation_is_deterministic_and_uses_held_out_scenes_for_ood(tmp_path):
    outs = []
    for name in ("a", "b"):
        config = GenerationConfig(out=tmp_path / name, per_type=1, seed=7, progress=False,
                                  splits=("eval_out_of_distribution",),
                                  task_types=("pick_and_place_simple",))
        report = generate(config)
        assert report.written == {"eval_out_of_distribution": 1}
        (game_file,) = split_dir(tmp_path / name, "eval_out_of_distribution").rglob("game.tw-pddl")
        outs.append((game_file.relative_to(tmp_path / name), game_file.read_text()))
        traj = json.loads((game_file.parent / "traj_data.json").read_text())
        assert traj["scene"]["scene_num"] in scene_numbers("eval_out_of_distribution")
        assert traj["scene"]["scene_num"] not in scene_numbers("train")
    assert outs[0] == outs[1]
    # a complete split is kept, not rebuilt
    assert generate(config).written == {}


def test_cli_gen_alfworld_writes_official_layout(tmp_path, capsys):
    from training.cli import main

    code = main(["gen-alfworld", "--output_dir", str(tmp_path), "--per-type", "1", "--no-progress",
                 "--splits", "eval_in_distribution", "--task-types", "pick_heat_then_place_in_recep"])
    assert code == 0
    games = list((tmp_path / "json_2.1.1" / "valid_seen").rglob("game.tw-pddl"))
    assert len(games) == 1 and "pick_heat_then_place_in_recep-" in str(games[0])
    assert "1 games written" in capsys.readouterr().out
    assert main(["gen-alfworld", "--output_dir", str(tmp_path), "--per-type", "0"]) == 2
    # Games paw-gym did not generate (the official data placed there) are never wiped.
    official = tmp_path / "json_2.1.1" / "valid_unseen" / "pick_and_place_simple-x" / "trial-1"
    official.mkdir(parents=True)
    (official / "game.tw-pddl").write_text("{}")
    capsys.readouterr()
    assert main(["gen-alfworld", "--output_dir", str(tmp_path), "--per-type", "1", "--no-progress",
                 "--splits", "eval_out_of_distribution", "--task-types",
                 "pick_heat_then_place_in_recep"]) == 2
    assert "valid_unseen holds games paw-gym did not generate" in capsys.readouterr().err
    assert (official / "game.tw-pddl").read_text() == "{}"
    # A split of paw-gym's own made with other settings is replaced: its games go, a user's
    # file beside them stays (and is named).
    mine = tmp_path / "json_2.1.1" / "valid_seen" / "my-notes.txt"
    mine.write_text("the user's")
    assert main(["gen-alfworld", "--output_dir", str(tmp_path), "--per-type", "1", "--seed", "1",
                 "--no-progress", "--splits", "eval_in_distribution", "--task-types",
                 "pick_heat_then_place_in_recep"]) == 0
    assert "kept 1 entries it did not write: my-notes.txt" in capsys.readouterr().err
    assert mine.read_text() == "the user's"
    assert [p.parent.name for p in (tmp_path / "json_2.1.1" / "valid_seen").rglob(
        "game.tw-pddl")] == ["trial_paw_s1_00000"]


def test_command_cache_keys_ignore_where_the_agent_stands():
    from paw_gym.alfworld.engine import _task_sentence_of, _template_variables

    goto = "go to [{r.name | receptacleatlocation(r:receptacle, lend:location)}]"
    assert _template_variables(goto) == {"r", "lend"}
    assert _template_variables("take {o} from {r}") == {"o", "r"}
    grammar = pddl.grammar_template().replace(pddl.GOAL_PLACEHOLDER, "put a mug in fridge")
    assert _task_sentence_of(grammar) == "put a mug in fridge"
    assert _task_sentence_of(grammar.replace("put a mug", "put #a# mug")) is None
