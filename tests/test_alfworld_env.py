"""PaW/ALFWorld-v0: the env contract, data sources, expert, and several envs at once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

import paw_gym  # noqa: E402,F401
from paw_gym.alfworld.env import ALFWorldEnv, task_sentence  # noqa: E402
from paw_gym.alfworld.tasks import TASK_TYPES  # noqa: E402
from tests.test_alfworld_fixtures import PER_TYPE, SEED, cache_env, shared_cache  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def root() -> Path:
    return shared_cache()[1]


def _play_expert(env, max_steps: int = 50) -> tuple[bool, int]:
    for step in range(max_steps):
        _, reward, terminated, truncated, info = env.step(env.unwrapped.expert_action())
        if terminated or truncated:
            return info["won"] and reward == 10.0, step + 1
    return False, max_steps


def test_check_env_and_registration(root):
    from gymnasium.utils.env_checker import check_env

    env = gym.make("PaW/ALFWorld-v0", data_dir=root)
    assert env.spec.max_episode_steps == 50
    check_env(env.unwrapped)
    env.close()


def test_reset_info_contract_and_determinism(root):
    env = ALFWorldEnv(data_dir=root)
    obs, info = env.reset(seed=3)
    assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert f"Your task is to: {info['task_description']}." in obs
    assert info["task_type"] in TASK_TYPES
    assert info["task_id"] == next(g.task_id for g in env.games if g.game_file == info["game_file"])
    assert info["task_id"].startswith(info["task_type"] + "-")
    assert info["won"] is False and info["invalid_action"] is False
    assert info["data_source"] == "data_dir"
    assert "help" not in info["admissible_actions"] and "look" in info["admissible_actions"]
    assert any(a.startswith("go to ") for a in info["admissible_actions"])
    assert env.reset(seed=3) == (obs, info)
    seen = {env.reset(seed=s)[1]["task_id"] for s in range(30)}
    assert len(seen) == len(env.games) == len(TASK_TYPES) * PER_TYPE
    assert "source='data_dir'" in repr(env)
    env.close()


def test_invalid_actions_are_no_ops(root):
    env = ALFWorldEnv(data_dir=root)
    _, info = env.reset(seed=0)
    before = list(info["admissible_actions"])
    for bad in ["fly to the moon", "help", "", "go to the moon", "<action>look</action>"]:
        obs, reward, terminated, truncated, info = env.step(bad)
        assert obs == "Nothing happens."
        assert (reward, terminated, truncated) == (0.0, False, False)
        assert info["invalid_action"] is True and info["admissible_actions"] == before
    obs, _, _, _, info = env.step("  look ")  # surrounding spaces are not a mistake
    assert info["invalid_action"] is False and obs != "Nothing happens."
    env.close()


def test_expert_wins_every_generated_game(root):
    env = gym.make("PaW/ALFWorld-v0", data_dir=root)
    results = {}
    for index in range(len(env.unwrapped.games)):
        _, info = env.reset(seed=index, options={"game_index": index})
        results[info["task_type"]] = _play_expert(env)[0]
    assert results == {t: True for t in TASK_TYPES}
    env.close()


def test_expert_recovers_after_leaving_the_walkthrough(root):
    """Off the walkthrough, the (fixed) handcoded expert takes over and still wins."""
    env = ALFWorldEnv(data_dir=root)
    task_id = next(g.task_id for g in env.games if g.task_type == "pick_two_obj_and_place")
    _, info = env.reset(seed=0, options={"task_id": task_id})
    first = env.expert_action()
    detour = next(a for a in info["admissible_actions"] if a.startswith("go to ") and a != first)
    env.step(detour)
    assert _play_expert(env, 49)[0]
    env.close()


def test_official_layout_without_walkthrough_uses_handcoded_expert(root, tmp_path):
    """The official download has no walkthroughs: ALFWORLD_DATA is read as is."""
    official = tmp_path / "alfworld_data"
    shutil.copytree(root, official)
    for game_file in official.rglob("game.tw-pddl"):
        game = json.loads(game_file.read_text())
        del game["walkthrough"]
        game_file.write_text(json.dumps(game))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ALFWORLD_DATA", str(official))
        env = ALFWorldEnv(split="train", task_types=["pick_two_obj_and_place", "pick_and_place_simple"])
    assert env.source == "ALFWORLD_DATA" and len(env.games) == 2 * PER_TYPE
    for index in range(len(env.games)):
        _, info = env.reset(seed=index, options={"game_index": index})
        assert info["data_source"] == "ALFWORLD_DATA"
        assert env.expert_action() == "look"  # alfworld's expert first reads the room
        assert _play_expert(env)[0], info["task_id"]
    env.close()


def test_source_order_and_missing_data_messages(root, tmp_path):
    cache, _ = shared_cache()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ALFWORLD_DATA", str(tmp_path / "nowhere"))
        assert ALFWorldEnv(data_dir=root).source == "data_dir"  # data_dir wins
        with pytest.raises(FileNotFoundError, match="valid_unseen"):
            ALFWorldEnv(split="eval_out_of_distribution", data_dir=root)
        mp.delenv("ALFWORLD_DATA")
        with cache_env(cache):  # already built for this session: no generation here
            env = ALFWorldEnv(generated_per_type=PER_TYPE, generated_seed=SEED)
            assert env.source == "generated" and len(env.games) == len(TASK_TYPES) * PER_TYPE
    with pytest.raises(ValueError, match="split='dev'"):
        ALFWorldEnv(split="dev", data_dir=root)
    with pytest.raises(ValueError, match="pick_banana"):
        ALFWorldEnv(data_dir=root, task_types=["pick_banana"])


def test_alfworlds_own_default_data_dir_does_not_hide_the_generated_cache(tmp_path):
    """``import alfworld`` sets $ALFWORLD_DATA to ~/.cache/alfworld when unset; without games
    there, the env must still fall back to the generated cache (a second env in the process)."""
    import alfworld.info  # noqa: F401  (the import that sets the variable)

    from paw_gym.alfworld.data import ALFWORLD_DEFAULT_DATA

    cache, _ = shared_cache()
    with pytest.MonkeyPatch.context() as mp, cache_env(cache):
        mp.setenv("HOME", str(tmp_path))  # an empty ~/.cache/alfworld
        mp.setattr("paw_gym.alfworld.data.ALFWORLD_DEFAULT_DATA", tmp_path / ".cache" / "alfworld")
        mp.setenv("ALFWORLD_DATA", str(tmp_path / ".cache" / "alfworld"))
        (tmp_path / ".cache" / "alfworld").mkdir(parents=True)
        for _ in range(2):
            env = ALFWorldEnv(generated_per_type=PER_TYPE, generated_seed=SEED)
            assert env.source == "generated"
            env.close()
    assert ALFWORLD_DEFAULT_DATA == Path("~/.cache/alfworld").expanduser()


def test_time_limit_truncates_at_50_steps(root):
    env = gym.make("PaW/ALFWorld-v0", data_dir=root)
    env.reset(seed=0)
    for step in range(50):
        _, _, terminated, truncated, _ = env.step("look")
        assert not terminated and truncated == (step == 49)
    env.close()


def test_envs_in_one_process_keep_separate_states(root):
    envs = [ALFWorldEnv(data_dir=root, num_games=2) for _ in range(3)]
    for env in envs:
        env.reset(seed=0, options={"game_index": 0})
    plays = [_play_expert(envs[0])[0]]
    # the other two are still at the start of the same game, untouched by env 0's moves
    for env in envs[1:]:
        assert env.expert_action() == envs[0]._expert.walkthrough[0]
        plays.append(_play_expert(env)[0])
    assert plays == [True, True, True]
    for env in envs:
        env.close()


def test_task_sentence():
    assert task_sentence("-= Welcome =-\n\nYou see a mug.\n\nYour task is to: put a mug in fridge.") \
        == "put a mug in fridge"


def test_async_vector_env_with_expert(root):
    # Text observations cannot go through shared memory (gymnasium encodes them by charset).
    envs = gym.make_vec("PaW/ALFWorld-v0", num_envs=2, vectorization_mode="async",
                        vector_kwargs={"shared_memory": False}, data_dir=str(root))
    _, infos = envs.reset(seed=[0, 1])
    assert len(infos["task_id"]) == 2
    won = [False, False]
    for _ in range(20):
        actions = envs.call("expert_action")
        _, rewards, terminated, _, infos = envs.step(list(actions))
        for i in range(2):
            won[i] = won[i] or bool(terminated[i] and rewards[i] == 10.0)
        if all(won):
            break
    envs.close()
    assert won == [True, True]


def test_core_import_loads_no_engine_and_env_never_imports_torch(root):
    code = ("import sys, paw_gym, gymnasium as gym\n"
            "assert not {'alfworld', 'textworld', 'fast_downward'} & set(sys.modules)\n"
            f"env = gym.make('PaW/ALFWorld-v0', data_dir={str(root)!r})\n"
            "env.reset(seed=0); env.step(env.unwrapped.expert_action())\n"
            "assert 'torch' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO,
                   env={**os.environ, "PYTHONPATH": str(REPO)})


def test_data_dir_may_point_inside_the_official_layout(root):
    for folder in (root, root / "json_2.1.1", root / "json_2.1.1" / "train"):
        env = ALFWorldEnv(data_dir=folder, task_types=["look_at_obj_in_light"])
        assert [g.task_type for g in env.games] == ["look_at_obj_in_light"] * PER_TYPE
        assert env.split_dir == root / "json_2.1.1" / "train"


def test_closing_and_reopening_envs_reuses_planner_libraries(root):
    """Unloading fast-downward's library and loading another copy crashes the process, and
    never freeing them would leak one library per env: closed envs hand theirs on."""
    from paw_gym.alfworld import engine as engine_module

    libraries = set()
    for seed in range(4):
        env = ALFWorldEnv(data_dir=root, num_games=1)
        env.reset(seed=seed)
        libraries.add(id(env.engine._lib))
        env.close()
    assert len(libraries) == 1
    assert len(engine_module._FREE_LIBRARIES) >= 1


def test_a_game_with_bad_pddl_fails_when_the_games_are_listed(tmp_path):
    game = {"pddl_domain": "(define (domain x) (:predicates (p ?x)", "pddl_problem": "(x)",
            "grammar": "{}", "walkthrough": [], "solvable": True}
    trial = tmp_path / "json_2.1.1" / "train" / "pick_and_place_simple-x" / "trial-1"
    trial.mkdir(parents=True)
    (trial / "game.tw-pddl").write_text(json.dumps(game))
    (trial / "traj_data.json").write_text(json.dumps({"task_type": "pick_and_place_simple",
                                                       "pddl_params": {}}))
    with pytest.raises(ValueError, match=r"game.tw-pddl: 'pddl_domain' is not valid PDDL "
                                         r"\(unbalanced parentheses\)"):
        gym.make("PaW/ALFWorld-v0", data_dir=str(tmp_path), progress=False)


@pytest.mark.heavy
def test_an_unwritable_cache_falls_back_to_a_scratch_copy(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    monkeypatch.setenv("PAW_GYM_CACHE", str(blocker / "cache"))  # can never be created
    with pytest.warns(RuntimeWarning, match=r"ALFWorld cache .* is not writable .*generating "
                                            r"the games into"):
        env = gym.make("PaW/ALFWorld-v0", generated_per_type=1, progress=False)
    observation, info = env.reset(seed=0)
    assert observation.startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert not str(env.unwrapped.split_dir).startswith(str(blocker))
    assert blocker.read_text() == "in the way"


@pytest.mark.parametrize("plant", ["task", "rule"])
def test_a_game_whose_grammar_carries_code_is_refused_and_runs_nothing(tmp_path, root, plant):
    from paw_gym.alfworld.engine import ALFWorldEngine

    source = next(root.rglob("game.tw-pddl"))
    trial = tmp_path / "json_2.1.1" / "train" / source.parent.parent.name / "trial-1"
    shutil.copytree(source.parent, trial)
    game = json.loads((trial / "game.tw-pddl").read_text())
    marker = tmp_path / "planted"
    code = f"{{open({str(marker)!r}, 'w').write('x')}}"
    game["grammar"] = (game["grammar"].replace("Your task is to: ", f"Your task is to: {code} ")
                       if plant == "task" else game["grammar"].replace(
                           '"task"', f'"planted": [{{"rhs": "{code}"}}], "task"', 1))
    (trial / "game.tw-pddl").write_text(json.dumps(game))
    with pytest.raises(ValueError, match="'grammar' is not ALFWorld's stock alfred.twl2"):
        gym.make("PaW/ALFWorld-v0", data_dir=str(tmp_path), progress=False)
    with pytest.raises(ValueError, match="grammar is not ALFWorld's stock"):
        ALFWorldEngine(cache_size=1).load(trial / "game.tw-pddl")
    assert not marker.exists()
