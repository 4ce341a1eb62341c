"""The README stays true: its custom-env example runs, and CI runs its test command."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def python_block_after(marker: str) -> str:
    start = README.index(marker)
    match = re.search(r"```python\n(.*?)```", README[start:], re.DOTALL)
    assert match, f"no python block after {marker!r}"
    return match.group(1)


def test_custom_env_example_runs(tmp_path, capsys):
    code = python_block_after("<!-- custom-env-example")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})
    finally:
        os.chdir(cwd)
        import gymnasium as gym
        gym.registry.pop("MyOrg/GuessNumber-v0", None)
    out = capsys.readouterr().out
    transitions, won = re.search(r"(\d+) transitions; (\d+) won episodes", out).groups()
    # Each of the 4 envs guesses 1..8, so it finds its target (a won episode). The step after a
    # win is the vector env's autoreset (no transition), so an env records 7 transitions, or 8
    # when its target was 8.
    assert int(won) >= 4
    assert 4 * 7 <= int(transitions) <= 4 * 8
    assert (tmp_path / "runs" / "guess-replay").is_dir()


def test_adapter_example_runs(capsys):
    namespace = {"__name__": "readme_example"}
    exec(compile(python_block_after("<!-- adapter-example"), "README.md", "exec"), namespace)
    assert "['up', 'right', 'down', 'left']" in capsys.readouterr().out
    env = namespace["env"]
    assert env._last_info["won"] and env.env.unwrapped.s == 47  # the goal, bottom right
    assert len(python_block_after("<!-- adapter-example").strip().splitlines()) <= 10


def test_ci_runs_the_readme_test_command():
    commands = re.findall(r"```bash\n# tests\n(.+?)\n```", README)
    assert len(commands) == 1
    assert commands[0] in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_agents_example_runs(tiny_model_dir, capsys, one_torch_thread):
    code = python_block_after("<!-- agents-example").replace('"runs/tiny-micro"',
                                                             repr(str(tiny_model_dir)))
    namespace = {"__name__": "readme_example"}
    exec(compile(code, "README.md", "exec"), namespace)
    assert len(namespace["trajectories"]) == 8
    out = capsys.readouterr()
    assert out.out.splitlines()[-1].startswith("all ")
    assert "rollout: 8/8 episode" in out.err  # progress over the episodes, to the last


@pytest.mark.heavy
def test_trl_example_trains_the_tiny_model_with_paw(tiny_model_dir, tmp_path, monkeypatch,
                                                    one_torch_thread):
    """The README's TRL example, with the tiny model for the hub name: two GRPO + PaW steps
    through TRL whose log (TRL's default: at the end) carries the WM term and the env's
    success."""
    import pytest

    pytest.importorskip("trl")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    monkeypatch.chdir(tmp_path)
    code = python_block_after("<!-- trl-example").replace('"runs/tiny-shelf"',
                                                          repr(str(tiny_model_dir)))
    assert repr(str(tiny_model_dir)) in code and len(code.strip().splitlines()) <= 8
    namespace = {"__name__": "readme_example"}
    exec(compile(code, "README.md", "exec"), namespace)
    trainer = namespace["trainer"]
    assert trainer.state.global_step == 2
    logged = [h for h in trainer.state.log_history if "paw/wm_loss" in h]
    assert logged and all(h["paw/wm_loss"] > 0 and "env/success" in h for h in logged)


def test_remote_env_example_runs(capsys):
    code = python_block_after("<!-- remote-env-example")
    assert len(code.strip().splitlines()) <= 5
    exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})
    assert "Task: buy the" in capsys.readouterr().out
