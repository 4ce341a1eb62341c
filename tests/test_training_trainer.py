"""End-to-end PaW trainer runs on the tiny Qwen2 model and the GuessNumber test env."""

import json
import math
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from safetensors.torch import load_file  # noqa: E402

from agents.types import PolicyOutput, Trajectory, Transition  # noqa: E402
from training.config import TrainConfig  # noqa: E402
from training.infra.checkpoint import latest_checkpoint  # noqa: E402
from training.infra.metrics_log import read_metrics  # noqa: E402
from training.rl.collect import EnvCollector  # noqa: E402
from training.trainer import PaWTrainer  # noqa: E402
from tests.common import TIMING_METRICS, replay_record_key  # noqa: E402
from wrappers import WMReplay  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(model_dir, tmp_path, **overrides):
    values = dict(model=str(model_dir), env_id="Test/GuessNumber-v0", n_groups=2, group_size=2,
                  max_new_tokens=10, max_episode_steps=2, total_steps=2, lr=1e-3,
                  mini_batch_size=4, token_budget=1024, output_dir=str(tmp_path / "run"),
                  progress=False, device="cpu", save_every=0)
    values.update(overrides)
    return TrainConfig(**values)


@pytest.mark.parametrize("algo", ["grpo", "gigpo", "rloo", "ppo"])
@pytest.mark.parametrize("paw", [True, False], ids=["paw", "vanilla"])
def test_each_algorithm_trains_with_and_without_paw(tiny_model_dir, tmp_path, algo, paw):
    config = _config(tiny_model_dir, tmp_path, algo=algo, paw=paw, lora=(algo != "rloo"),
                     gradient_checkpointing=(algo == "gigpo"),
                     kl_coef=0.05 if (algo == "grpo" and paw) else 0.0)
    trainer = PaWTrainer(config)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    history = trainer.train()
    assert [h["step"] for h in history] == [1, 2]
    last = history[-1]
    for key in ("reward", "success", "policy_loss", "clip_frac", "kl", "action_entropy",
                "lambda_mean", "wm_loss", "wm_clipped_frac", "tokens_per_s", "step_time",
                "peak_mem_mb"):
        assert math.isfinite(last[key]), key
    assert last["skipped_updates"] == 0
    # The first mini-batch scores the rollout's own actions with the sampler's own weights
    assert all(h["rollout_logprob_gap"] < 1e-4 for h in history)
    if paw:
        assert last["wm_selected"] == math.ceil(0.75 * last["transitions"] - 1e-9)
        assert 0 < last["wm_loss"] <= 1.0  # CMAE per transition is bounded by 1
    else:
        assert last["wm_selected"] == 0 and last["wm_loss"] == 0.0
    changed = any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters()
                  if n in before)
    # The random model mostly fails alike, so advantages can be all zero: then only the WM
    # term may move the weights (vanilla RL must leave them exactly as they were).
    assert changed == (paw or any(h["advantage_abs_mean"] > 0 for h in history))
    out = Path(config.output_dir)
    assert len(read_metrics(out / "metrics.jsonl")) == 2
    assert (out / "curves.png").stat().st_size > 0
    ckpt = latest_checkpoint(out)
    assert ckpt is not None and any((ckpt / "model").glob("*.safetensors"))
    if algo == "ppo":
        assert "value_loss" in last and (ckpt / "critic.safetensors").is_file()


def _episode(task, group, rewards, prompt_ids, response_ids):
    transitions = [
        Transition(prompt="p", output=PolicyOutput("<action>guess 1</action>", prompt_ids,
                                                   response_ids, [-1.0] * len(response_ids),
                                                   [1.0] * len(response_ids)),
                   action="guess 1", next_observation="Go higher.", reward=r,
                   terminated=False, truncated=False, invalid_action=False)
        for r in rewards]
    return Trajectory(task_id=task, task_type="guess", group_index=group, transitions=transitions)


def test_vllm_rollouts_take_lora_or_full_weights_and_need_a_known_backend(tmp_path):
    for lora in (True, False):  # the adapter, or every weight, is synced into the engine
        assert TrainConfig(rollout_backend="vllm", lora=lora).rollout_backend == "vllm"
    assert TrainConfig(rollout_backend="vllm", lora=False, sharding="fsdp").sharding == "fsdp"
    with pytest.raises(ValueError, match="rollout_backend"):
        TrainConfig(rollout_backend="sglang", output_dir=str(tmp_path))


def test_vllm_rollouts_without_vllm_installed_say_how_to_get_it(tiny_model_dir, tmp_path):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    with pytest.raises(ValueError, match=r"pip install -e '\.\[vllm\]'"):
        PaWTrainer(_config(tiny_model_dir, tmp_path, rollout_backend="vllm"))


def test_nan_reward_skips_the_update_and_keeps_weights(tiny_model_dir, tmp_path):
    trainer = PaWTrainer(_config(tiny_model_dir, tmp_path, algo="grpo"))
    ids = trainer.tokenizer("guess 1 Go higher", add_special_tokens=False)["input_ids"]
    trajectories = [_episode("t", 0, [float("nan")], ids, ids[:2]),
                    _episode("t", 0, [0.0], ids, ids[:2])]
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    metrics = trainer.update(trajectories)
    assert metrics["skipped_updates"] == 1 and trainer.updater.skipped_updates == 1
    assert all(torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    assert not trainer.updater.optimizer.state  # the optimizer never stepped
    metrics = trainer.update([_episode("t", 0, [1.0], ids, ids[:2]),
                              _episode("t", 0, [0.0], ids, ids[:2])])
    assert metrics["skipped_updates"] == 0


def test_prompts_cut_to_max_seq_len_are_warned_once_and_counted(tiny_model_dir, tmp_path):
    trainer = PaWTrainer(_config(tiny_model_dir, tmp_path, algo="grpo", max_seq_len=6))
    ids = trainer.tokenizer("guess 1 Go higher guess 2 Go lower", add_special_tokens=False)[
        "input_ids"]
    assert len(ids) > 4
    long_prompt = [_episode("t", 0, [1.0], ids, ids[:2]), _episode("t", 0, [0.0], ids[:3], ids[:2])]
    with pytest.warns(RuntimeWarning, match=r"1 of 2 transitions had their prompt cut.*"
                                            rf"max_seq_len >= {len(ids) + 2}"):
        metrics = trainer.update(long_prompt)
    assert metrics["cut_prompts"] == 1
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second update does not warn again
        assert trainer.update(long_prompt)["cut_prompts"] == 1


RUN_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import torch
    sys.path[:0] = [{repo!r}, {tests!r}]
    import conftest  # registers Test/GuessNumber-v0
    from training.config import TrainConfig
    from training.rl.collect import EnvCollector
    from training.trainer import PaWTrainer

    torch.set_num_threads(1)
    kill_at = int(sys.argv[2])
    config = TrainConfig(**{config!r}, output_dir=sys.argv[1])
    inner = EnvCollector(config)
    calls = [0]

    def collect(*args):
        calls[0] += 1
        if calls[0] == kill_at:          # mid-step, after the previous step's checkpoint
            os.kill(os.getpid(), signal.SIGKILL)
        return inner(*args)

    PaWTrainer(config, collect=collect).train()
""")


@pytest.mark.heavy
def test_resume_after_kill_reproduces_the_uninterrupted_run(tiny_model_dir, tmp_path):
    fields = dict(model=str(tiny_model_dir), env_id="Test/GuessNumber-v0", n_groups=2,
                  group_size=2, max_new_tokens=10, max_episode_steps=2, total_steps=3, lr=1e-3,
                  mini_batch_size=3, token_budget=1024, progress=False, device="cpu",
                  save_every=1, algo="gigpo", warmup_steps=2, lr_schedule="cosine")
    script = tmp_path / "run.py"
    script.write_text(RUN_SCRIPT.format(repo=str(REPO), tests=str(REPO / "tests"), config=fields))

    # The uninterrupted run and the resumed one run here (one thread, like the subprocess);
    # the interrupted one is a separate process killed with SIGKILL inside step 3.
    PaWTrainer(TrainConfig(**fields, output_dir=str(tmp_path / "full"))).train()
    killed = subprocess.run([sys.executable, str(script), str(tmp_path / "killed"), "3"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert [r["step"] for r in read_metrics(tmp_path / "killed" / "metrics.jsonl")] == [1, 2]
    PaWTrainer(TrainConfig(**fields, output_dir=str(tmp_path / "killed"))).train(resume=True)
    a = read_metrics(tmp_path / "full" / "metrics.jsonl")
    b = read_metrics(tmp_path / "killed" / "metrics.jsonl")
    assert [r["step"] for r in b] == [1, 2, 3]
    for key in a[2]:
        if key not in TIMING_METRICS:
            assert b[2][key] == pytest.approx(a[2][key], rel=1e-6, abs=1e-9), key
    state_a = json.loads((latest_checkpoint(tmp_path / "full") / "state.json").read_text())
    state_b = json.loads((latest_checkpoint(tmp_path / "killed") / "state.json").read_text())
    assert state_a["step"] == state_b["step"] == 3
    assert state_a["scheduler"] == state_b["scheduler"]
    weights = [load_file(str(next((latest_checkpoint(tmp_path / run) / "model").glob("*.safetensors"))))
               for run in ("full", "killed")]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    # the replay holds every transition of the three updates exactly once, as the full run's
    replays = [WMReplay.load(tmp_path / run / "replay").records for run in ("full", "killed")]
    assert sorted(map(replay_record_key, replays[0])) == sorted(map(replay_record_key, replays[1]))
    assert len(set(map(replay_record_key, replays[1]))) == len(replays[1])
    assert {r["update"] for r in replays[1]} == {1, 2, 3}


def test_wm_coverage_metrics_count_what_the_term_trains_on(tiny_model_dir, tmp_path):
    """wm_trained_frac: the update's transitions that are selected and in a group with λ_g > 0
    (read back from the run's replay); wm_active_tokens: with ρ = 1 CMAE masks nothing, so
    every next-observation token of those transitions."""
    from wrappers import WMReplay

    config = _config(tiny_model_dir, tmp_path, algo="grpo", paw=True, rho=1.0, total_steps=1,
                     group_size=4, max_episode_steps=3)
    trainer = PaWTrainer(config)
    last = trainer.train()[-1]
    records = [r for r in WMReplay.load(Path(config.output_dir) / "replay").records
               if r["update"] == 1]
    trained = [r for r in records if r["wm_selected"] and r["lambda_g"] > 0]
    assert last["wm_trained_frac"] == pytest.approx(len(trained) / len(records))
    tokens = sum(len(trainer.policy.tokenizer(r["o_next"], add_special_tokens=False)["input_ids"])
                 for r in trained)
    assert last["wm_active_tokens"] == tokens > 0
    assert last["wm_clipped_frac"] == 0.0


def test_collector_groups_share_tasks(tiny_model_dir, tmp_path):
    config = _config(tiny_model_dir, tmp_path)
    trainer = PaWTrainer(config)
    trajectories = EnvCollector(config)(trainer.policy, [3, 11], 2, 1.0, 0)
    assert [t.group_index for t in trajectories] == [0, 0, 1, 1]
    assert trajectories[0].task_id == trajectories[1].task_id
    assert all(len(t) <= 2 for t in trajectories)


@pytest.mark.heavy
def test_entropy_bonus_reaches_the_objective_and_changes_the_update(tiny_model_dir, tmp_path):
    runs = {}
    for coef in (0.0, 0.5):
        trainer = PaWTrainer(_config(tiny_model_dir, tmp_path / str(coef), entropy_coef=coef,
                                     total_steps=1, lora=False, paw=False))
        assert trainer.updater.settings.entropy_coef == coef
        trainer.train()
        runs[coef] = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    # Same seed, same rollout: only the entropy term differs, so the weights must too.
    assert any(not torch.equal(runs[0.0][n], runs[0.5][n]) for n in runs[0.0])


def test_max_prompt_len_cuts_rollout_prompts_from_the_left(tiny_model_dir, tmp_path):
    trainer = PaWTrainer(_config(tiny_model_dir, tmp_path, max_prompt_len=40, lora=False))
    with pytest.warns(UserWarning, match="longer than the context"):
        trajectories = trainer.collect(trainer.policy, [0, 1], 2, 1.0, 0)
    outputs = [t.output for trajectory in trajectories for t in trajectory.transitions]
    assert outputs and all(len(o.prompt_ids) <= 40 for o in outputs)
    assert all(o.prompt_truncated for o in outputs)  # GuessNumber prompts are ~150 tokens
    # Left truncation keeps the end of the prompt: the generation prompt is still last.
    full, _ = _uncapped(tiny_model_dir).encode_prompt(trajectories[0].transitions[0].prompt, 10)
    assert outputs[0].prompt_ids == full[-40:]


def _uncapped(model_dir):
    from agents.hf_policy import HFPolicy

    return HFPolicy(str(model_dir), device="cpu")


@pytest.mark.parametrize("env, cap", [("alfworld", 2048), ("webshop", 4096), ("searchqa", 4096)])
def test_paper_configs_cap_rollout_prompts_as_appendix_a1(env, cap, monkeypatch):
    from pathlib import Path

    from training.config import DATA_VARIABLES, load_config

    for name in DATA_VARIABLES:
        monkeypatch.setenv(name, f"/data/{name.lower()}")

    paper = Path(__file__).resolve().parents[1] / "configs" / "paper"
    files = sorted(paper.glob(f"{env}_*.yaml"))
    assert files
    assert {load_config(f).max_prompt_len for f in files} == {cap}
    assert {load_config(f).max_obs_tokens for f in files} == {None}  # the paper caps no target


@pytest.mark.heavy
def test_a_new_run_refuses_a_folder_that_holds_a_run(tiny_model_dir, tmp_path):
    first = _config(tiny_model_dir, tmp_path, total_steps=2, save_every=1, keep_checkpoints=1)
    PaWTrainer(first).train()
    out = tmp_path / "run"
    before = {p.name: p.read_bytes() for p in (out / "metrics.jsonl", out / "config.yaml")}
    (out / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"already holds the output of an earlier "
                                              r"`paw-gym train`; pass --resume to continue it, "
                                              r"pass --overwrite true"):
        PaWTrainer(first).train()
    assert {p.name: p.read_bytes() for p in (out / "metrics.jsonl", out / "config.yaml")} == before
    # Asked to overwrite: the old run goes (its step-2 checkpoint no longer outranks the new
    # run's step 1), the user's own file stays.
    PaWTrainer(_config(tiny_model_dir, tmp_path, total_steps=1, save_every=1,
                       keep_checkpoints=1, overwrite=True)).train()
    assert latest_checkpoint(out).name == "step-000001"
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1]
    assert {r["update"] for r in WMReplay.load(out / "replay")} == {1}  # the old run's went
    assert (out / "notes.txt").read_text() == "mine"


def test_paw_gym_train_refuses_before_loading_anything(tiny_model_dir, tmp_path, capsys):
    from training.cli import main

    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 7}\n')
    # A model path that does not exist: the refusal must come first, without touching the file.
    assert main(["train", "--model", str(tmp_path / "no-model"), "--env_id",
                 "Test/GuessNumber-v0", "--output_dir", str(out), "--device", "cpu"]) == 2
    assert "already holds 1 entries paw-gym did not write" in capsys.readouterr().err
    assert (out / "metrics.jsonl").read_text() == '{"step": 7}\n'


@pytest.mark.heavy
def test_resume_falls_back_past_a_damaged_newest_checkpoint(tiny_model_dir, tmp_path):
    from training.infra.checkpoint import CheckpointError

    config = _config(tiny_model_dir, tmp_path, total_steps=2, save_every=1, keep_checkpoints=2)
    PaWTrainer(config).train()
    out = tmp_path / "run"
    newest = latest_checkpoint(out)
    (newest / "state.json").write_text('{"step": 2, "sched')  # a torn write
    resumed = PaWTrainer(_config(tiny_model_dir, tmp_path, total_steps=3, save_every=1,
                                 keep_checkpoints=2))
    with pytest.warns(RuntimeWarning, match=r"step-000002/state.json is damaged .*resuming "
                                            r"from step-000001"):
        history = resumed.train(resume=True)
    assert [h["step"] for h in history] == [2, 3]
    weights = next((latest_checkpoint(out) / "model").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"safetensors is damaged"):
        PaWTrainer(_config(tiny_model_dir, tmp_path, total_steps=4)).train(
            resume=latest_checkpoint(out))
    saved = json.loads((latest_checkpoint(out) / "state.json").read_text())
    assert saved["step"] == 3 and not list(latest_checkpoint(out).glob("*.tmp"))


@pytest.mark.heavy
@pytest.mark.parametrize("damage", ["optimizer", "state key"])
def test_a_damaged_optimizer_or_state_file_falls_back_to_the_checkpoint_before(
        tiny_model_dir, tmp_path, damage):
    config = _config(tiny_model_dir, tmp_path, total_steps=2, save_every=1, keep_checkpoints=2)
    PaWTrainer(config).train()
    newest = latest_checkpoint(tmp_path / "run")
    if damage == "optimizer":
        (newest / "optimizer.json").write_text('{"param_gr')
        message = r"optimizer.json is damaged \(not valid JSON"
    else:
        state = json.loads((newest / "state.json").read_text())
        del state["scheduler"]
        (newest / "state.json").write_text(json.dumps(state))
        message = r"state.json is damaged \(line 1: missing field\(s\) \['scheduler'\]\)"
    resumed = PaWTrainer(_config(tiny_model_dir, tmp_path, total_steps=3, save_every=1,
                                 keep_checkpoints=2))
    with pytest.warns(RuntimeWarning, match=message + r".*resuming from step-000001"):
        assert [h["step"] for h in resumed.train(resume=True)] == [2, 3]


def test_resuming_with_another_model_or_lora_setting_is_one_clear_error(tiny_model_dir, tmp_path,
                                                                     capsys):
    from agents.tiny_model import build_tiny_model
    from training.cli import main
    from training.infra.checkpoint import CheckpointMismatch

    PaWTrainer(_config(tiny_model_dir, tmp_path, total_steps=1, save_every=1, lora=False)).train()
    other = build_tiny_model(["<action>guess 1</action> Go higher."] * 50, tmp_path / "micro",
                             size="micro")
    with pytest.raises(CheckpointMismatch, match=r"other weight settings \(model '.*nano' "
                                                 r"there, '.*micro' here\)"):
        PaWTrainer(_config(other, tmp_path, total_steps=2, lora=False)).train(resume=True)
    with pytest.raises(CheckpointMismatch, match=r"other weight settings \(lora False there, "
                                                 r"True here\)"):
        PaWTrainer(_config(tiny_model_dir, tmp_path, total_steps=2, lora=True)).train(
            resume=True)
    # The command says it in one line.
    capsys.readouterr()
    assert main(["train", "--model", str(other), "--env_id", "Test/GuessNumber-v0",
                 "--output_dir", str(tmp_path / "run"), "--lora", "false", "--device", "cpu",
                 "--total_steps", "2", "--progress", "false", "--resume"]) == 2
    err = capsys.readouterr().err  # before the model loads: from the checkpoint's settings
    assert err.count("\n") == 1 and "was saved with other weight settings (model" in err


def test_settings_mistakes_surface_before_the_model_loads(tmp_path):
    for kwargs, message in [({"env_id": "PaW/Nope-v0"}, "unknown env id 'PaW/Nope-v0'"),
                            ({"env_kwargs": {"colour": "red"}},
                             r"env_kwargs \['colour'\] are not arguments of PaW/Shelf-v0; it "
                             r"accepts \['split', 'shelf_sizes'\]")]:
        with pytest.raises(ValueError, match=message):  # when the config is made, or by the
            PaWTrainer(TrainConfig(**{"model": str(tmp_path / "never-loaded"),  # trainer
                                      "env_id": "PaW/Shelf-v0", **kwargs}))


def test_a_logged_run_prints_each_phase_of_an_update(tiny_model_dir, tmp_path, capsys):
    """Outside a terminal (pytest's captured stderr), every logged update says when its
    rollout is done and what its update did, before its metrics line."""
    from training.trainer import PaWTrainer

    PaWTrainer(TrainConfig(model=str(tiny_model_dir), env_id="Test/GuessNumber-v0",
                           n_groups=2, group_size=2, max_new_tokens=8, total_steps=2,
                           device="cpu", output_dir=str(tmp_path / "run"), log_every=1,
                           save_every=0, record_replay=False)).train()
    lines = capsys.readouterr().err.splitlines()
    for step in (1, 2):
        rollout = next(i for i, line in enumerate(lines)
                       if re.match(rf"step {step}/2 rollout: 4 episodes, \d+ env steps in ", line))
        assert re.match(rf"step {step}/2 update: \d+ transitions, 1 optimizer step\(s\) in ",
                        lines[rollout + 1])
        assert lines[rollout + 2].startswith(f"step {step}/2 |")


@pytest.mark.heavy
def test_no_phase_of_a_logged_run_is_silent_for_long(tiny_model_dir, tmp_path, capsys,
                                                     monkeypatch):
    """Outside a terminal, a rollout, an update and a validation that each take several times
    the silence limit (here 0.2 s, instead of 15) print a line inside the phase, not only at its
    end; with ``progress`` off they print none."""
    import paw_gym.progress
    from tests.envs import GuessNumberEnv
    from training.trainer import PaWTrainer

    monkeypatch.setattr(paw_gym.progress, "SILENCE_S", 0.2)
    step = GuessNumberEnv._step
    monkeypatch.setattr(GuessNumberEnv, "_step",
                        lambda self, action: time.sleep(0.1) or step(self, action))
    from training.rl.update import PolicyUpdate

    optimize = PolicyUpdate.optimize
    monkeypatch.setattr(PolicyUpdate, "optimize",
                        lambda self, *a, **k: time.sleep(0.7) or optimize(self, *a, **k))
    settings = dict(model=str(tiny_model_dir), env_id="Test/GuessNumber-v0", n_groups=2,
                    group_size=2, max_new_tokens=8, total_steps=1, device="cpu", log_every=1,
                    save_every=0, record_replay=False, val_every=1, val_limit=2)
    PaWTrainer(TrainConfig(**settings, output_dir=str(tmp_path / "run"))).train()
    lines = capsys.readouterr().err.splitlines()
    rollout_done = next(i for i, line in enumerate(lines) if line.startswith("step 1/1 rollout:"))
    update_done = next(i for i, line in enumerate(lines) if line.startswith("step 1/1 update:"))
    assert any(re.match(r"rollout: \d/4 episode \(\d+ s", line) for line in lines[:rollout_done])
    assert any(re.match(r"update: 1/1 mini-batch \(\d+ s", line)
               for line in lines[rollout_done:update_done])
    assert any(re.match(r"rollout: \d/2 episode \(\d+ s", line) for line in lines[update_done:])

    PaWTrainer(TrainConfig(**settings, output_dir=str(tmp_path / "quiet"),
                           progress=False)).train()
    assert not any(line.startswith(("rollout:", "update:"))
                   for line in capsys.readouterr().err.splitlines())


#: `paw-gym train` under a file-size limit (RLIMIT_FSIZE): the OS refuses writes past it, as a
#: full disk does; the limit is set in the child only.
LIMITED_TRAIN = textwrap.dedent("""
    import resource, signal, sys
    from training.cli import main

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a refused write is then an OSError
    limit = int(sys.argv[1])
    sys.exit(main(sys.argv[2:]) if limit == 0 else (
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)) or main(sys.argv[2:])))
""")


@pytest.mark.heavy
def test_a_checkpoint_that_cannot_be_written_is_one_error_and_the_last_one_stays(
        tiny_model_dir, tmp_path):
    """Step 1's checkpoint is written; then files are capped below the weights' size: step
    2's save fails with one line naming the intact checkpoint, leaves no partial folder, and
    --resume (without the cap) continues from step 1."""
    script = tmp_path / "limited.py"
    script.write_text(LIMITED_TRAIN)
    out = tmp_path / "run"
    flags = ["train", "--model", str(tiny_model_dir), "--env_id", "PaW/Shelf-v0",
             "--max_episode_steps", "2", "--n_groups", "2", "--group_size", "2",
             "--max_new_tokens", "8", "--device", "cpu",
             "--save_every", "1", "--progress", "false", "--output_dir", str(out)]
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    run = lambda limit, *extra: subprocess.run(  # noqa: E731
        [sys.executable, str(script), str(limit), *flags, *extra], env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=300)
    assert run(0, "--total_steps", "1").returncode == 0
    weights = next((out / "checkpoints").glob("step-000001/model/*.safetensors"))
    done = run(weights.stat().st_size // 2, "--total_steps", "2", "--resume")
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]  # earlier lines: the resume's own report
    assert "Traceback" not in done.stderr and last.startswith("paw-gym train: error: could not "
                                                             "write checkpoint")
    assert "the latest intact checkpoint is step-000001, which --resume takes" in last
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000001"]
    resumed = run(0, "--total_steps", "2", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (out / "checkpoints" / "step-000002" / "state.json").is_file()


def test_pad_frac_is_the_padding_of_the_updates_micro_batches(tiny_model_dir, tmp_path,
                                                             one_torch_thread):
    """``pad_frac``: the padded share of the positions the update ran over, recomputed here
    from the rollout's rows as the trainer splits them (the whole rollout in one step; a
    small token budget, so several micro-batches of unequal rows)."""
    from training.rl.batch import token_budget_batches

    trainer = PaWTrainer(_config(tiny_model_dir, tmp_path, total_steps=1, mini_batch_size=0,
                                 token_budget=1100))
    metrics = trainer.train_step()
    lengths = [sample.length(True) for sample in trainer.updater.last_batch.samples]
    parts = token_budget_batches(lengths, 1100)
    padded = sum(len(part) * max(lengths[i] for i in part) for part in parts)
    assert len(parts) > 1 and padded > sum(lengths)
    assert metrics["pad_frac"] == pytest.approx(1 - sum(lengths) / padded)
