"""Per-task evaluation tables, the SFT warm start, and the train/eval/sft commands."""

import csv
import json
import shutil

import pytest

torch = pytest.importorskip("torch")

from agents.types import PolicyOutput, Trajectory, Transition  # noqa: E402
from training.cli import main  # noqa: E402
from training.evaluate import evaluate, load_policy, summarize, write_tables  # noqa: E402
from training.warmstart.sft import SFTConfig, record_expert_demos, run_sft  # noqa: E402

ENV = "Test/GuessNumber-v0"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _trajectory(task_type, won, rewards, final_info=None, invalid=()):
    out = PolicyOutput("x", [1], [2], [0.0], [0.0])
    steps = [Transition("h", out, "a", "o", r, i == len(rewards) - 1, False, i in invalid,
                        dict(final_info or {}) if i == len(rewards) - 1 else {})
             for i, r in enumerate(rewards)]
    return Trajectory("t", task_type, 0, steps, won=won)


def test_summarize_per_task_type_and_overall():
    result = summarize([
        _trajectory("pick", True, [0.0, 10.0]),
        _trajectory("pick", False, [-0.1, 0.0, 0.0], invalid=(0,)),
        _trajectory("clean", False, [0.0], final_info={"score": 0.5}),
    ])
    pick, clean, overall = result.row("pick"), result.row("clean"), result.row()
    assert [r.task_type for r in result.rows] == ["clean", "pick", "overall"]
    assert (pick.episodes, pick.success, pick.score) == (2, 50.0, 50.0)
    assert pick.mean_return == pytest.approx((10.0 - 0.1) / 2)
    assert pick.invalid == pytest.approx(100 / 5)
    assert (clean.success, clean.score) == (0.0, 50.0)  # WebShop-style partial score
    assert overall.episodes == 3 and overall.success == pytest.approx(100 / 3)
    assert overall.score == pytest.approx(100 * 1.5 / 3)


def test_write_tables_markdown_json_csv(tmp_path):
    result = summarize([_trajectory("a", True, [10.0]), _trajectory("b", False, [0.0])],
                       {"env_id": "X"})
    paths = write_tables(result, tmp_path, "before")
    assert "| **overall** | 2 | 50.0 |" in paths["md"].read_text()
    data = json.loads(paths["json"].read_text())
    assert data["meta"]["env_id"] == "X" and data["rows"][-1]["success"] == 50.0
    rows = list(csv.DictReader(paths["csv"].open()))
    assert [r["task_type"] for r in rows] == ["a", "b", "overall"]


def test_expert_eval_through_the_cli(tmp_path, capsys):
    assert main(["eval", "--env", ENV, "--agent", "expert", "--limit", "6",
                 "--output_dir", str(tmp_path), "--name", "expert"]) == 0
    data = json.loads((tmp_path / "expert.json").read_text())
    assert data["rows"][-1]["success"] == 100.0 and data["rows"][-1]["episodes"] == 6
    assert data["meta"]["split"] is None and data["meta"]["task_seeds"] == list(range(6))
    assert "expert on Test/GuessNumber-v0" in capsys.readouterr().out
    # the same tables again are refused; another name is fine
    assert main(["eval", "--env", ENV, "--agent", "expert", "--limit", "6",
                 "--output_dir", str(tmp_path), "--name", "expert"]) == 2
    assert "expert.md' already exists; pass --overwrite true" in capsys.readouterr().err


def test_eval_defaults_to_the_held_out_split_and_names_bad_values(tmp_path, capsys):
    assert main(["eval", "--env", "PaW/Shelf-v0", "--agent", "random", "--output_dir",
                 str(tmp_path)]) == 0
    data = json.loads((tmp_path / "random_Shelf-v0_test.json").read_text())
    assert data["meta"]["split"] == "test" and data["meta"]["episodes"] == 48
    assert main(["eval", "--env", "PaW/Shelf-v0", "--agent", "random", "--split", "nope",
                 "--output_dir", str(tmp_path)]) == 2
    assert "--split='nope' is not a split of PaW/Shelf-v0" in capsys.readouterr().err
    assert main(["eval", "--env", "PaW/Shelf", "--agent", "random"]) == 2
    assert "did you mean PaW/Shelf-v0" in capsys.readouterr().err
    assert main(["eval", "--env", "Test/GuessNumber-v0", "--split", "test", "--agent",
                 "random"]) == 2
    assert "--split='test': Test/GuessNumber-v0 has no splits (it takes no split argument)" \
        in capsys.readouterr().err
    assert main(["eval", "--env", "PaW/Shelf-v0", "--agent", "random", "--max_steps", "0"]) == 2
    assert "max_steps=0 is invalid; expected an integer in [1, 100,000]" in \
        capsys.readouterr().err
    for command in (["eval", "--env", "PaW/Shelf-v0"], ["eval-wm"]):  # files stay inside --out
        assert main([*command, "--model", "m", "--name", "../../x",
                     "--output_dir", str(tmp_path / "out")]) == 2
        assert "name='../../x': give a plain file name" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path.parent.parent / "x.md").exists()


def test_cli_reports_bad_config_without_traceback(tmp_path, capsys):
    assert main(["train", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err
    assert main(["train", "--algo", "dpo"]) == 2
    assert "argument --algo: invalid choice: 'dpo'" in capsys.readouterr().err


def test_evaluate_passes_env_kwargs_even_when_named_like_its_own_parameters():
    from agents.baselines import RandomAgent

    seeds = list(range(20))
    one_number = evaluate(RandomAgent(), ENV, seeds, env_kwargs={"high": 1})
    assert one_number.row().success == 100.0  # "guess 1" is the only admissible action
    assert evaluate(RandomAgent(), ENV, seeds).row().success < 100.0
    # `progress` is evaluate's own switch; through env_kwargs it reaches the env's constructor
    with pytest.raises(TypeError, match="progress"):
        evaluate(RandomAgent(), ENV, seeds, progress=False, env_kwargs={"progress": True})
    with pytest.raises(ValueError, match="both"):
        evaluate(RandomAgent(), ENV, seeds, high=2, env_kwargs={"high": 1})


@pytest.mark.heavy
def test_sft_on_expert_demos_teaches_the_action_format(tiny_model_dir, tmp_path):
    replay = record_expert_demos(ENV, 24, tmp_path / "demos", seed=0)
    seeds = list(range(100, 112))
    before = evaluate(load_policy(str(tiny_model_dir), device="cpu"), ENV, seeds,
                      temperature=0.0, max_new_tokens=16, max_steps=2)
    out, history = run_sft(SFTConfig(model=str(tiny_model_dir), replay=str(replay),
                                     output_dir=str(tmp_path / "sft"), epochs=12, lr=3e-3,
                                     device="cpu", progress=False, token_budget=4096))
    assert history[-1]["loss"] < 0.5 * history[0]["loss"]
    after = evaluate(load_policy(checkpoint=out, device="cpu"), ENV, seeds, temperature=0.0,
                     max_new_tokens=16, max_steps=2)
    # The random model never writes a valid <action>guess N</action>; the warm start does.
    assert before.row().invalid > 90.0
    assert after.row().invalid < 50.0


@pytest.mark.heavy
def test_train_command_and_eval_of_its_checkpoint(tiny_model_dir, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(f"model: {tiny_model_dir}\nenv_id: {ENV}\nn_groups: 2\ngroup_size: 2\n"
                      f"max_new_tokens: 8\nmax_episode_steps: 2\ntotal_steps: 1\nlr: 1.0e-3\n"
                      f"device: cpu\nprogress: false\noutput_dir: {tmp_path / 'run'}\n")
    assert main(["train", "--config", str(config), "--algo", "gigpo", "--lora", "true"]) == 0
    checkpoint = next((tmp_path / "run" / "checkpoints").iterdir())
    assert main(["eval", "--checkpoint", str(checkpoint), "--limit", "2", "--output_dir",
                 str(tmp_path), "--name", "eval"]) == 0
    meta = json.loads((tmp_path / "eval.json").read_text())["meta"]
    assert meta["episodes"] == 2 and meta["env_id"] == ENV and meta["checkpoint_step"] == 1
    assert meta["max_new_tokens"] == 8 and meta["settings"]["max_steps"] == 2
    # A run folder, or a `paw-gym demo` folder (the run in rl/), stands for its latest
    # checkpoint in eval and for its run in plot.
    shutil.copytree(tmp_path / "run", tmp_path / "demo" / "rl")
    for folder in ("run", "demo"):
        capsys.readouterr()
        assert main(["eval", "--checkpoint", str(tmp_path / folder), "--limit", "2", "--output_dir",
                     str(tmp_path), "--name", f"eval-{folder}"]) == 0
        assert f"the latest checkpoint of {tmp_path / folder}" in capsys.readouterr().out
        meta = json.loads((tmp_path / f"eval-{folder}.json").read_text())["meta"]
        assert meta["checkpoint_step"] == 1
        assert main(["plot", str(tmp_path / folder), "--out", str(tmp_path / f"{folder}.png")]) == 0


def test_env_kwargs_named_like_rollout_arguments_reach_the_env():
    """ALFWorldEnv takes ``progress``, as does ``agents.rollout``: the trainer's collector must
    hand it to the env, not collide with the rollout's own argument."""
    pytest.importorskip("alfworld")
    from agents.baselines import ExpertAgent
    from training.config import TrainConfig
    from training.rl.collect import EnvCollector

    config = TrainConfig(env_id="PaW/ALFWorld-v0", env_kwargs={"progress": False}, template="alfworld")
    trajectories = EnvCollector(config)(ExpertAgent(), [0], 2, 1.0, 0)
    assert len(trajectories) == 2 and all(t.won for t in trajectories)
