"""Bad inputs a user can give, and what paw-gym does with each: one clear error, a raw
traceback, or silent acceptance.

Each case runs the real entry point — a ``paw-gym`` command (in process, through
``training.cli.main``) or the Python API a user calls — on a real bad file or value, and is
classified:

* **clear**: the command exits 2 with one error line on stderr, or the API raises ``ValueError`` /
  ``FileNotFoundError`` / ``FileExistsError`` / ``PermissionError`` (or a documented subclass)
  whose message contains the case's expected words (the file, row or field and what is accepted);
  for ``--resume`` past a damaged checkpoint, success with a warning naming the damaged file;
* **traceback**: any other exception escapes;
* **accepted**: nothing complains.

    python -m benchmarks.bad_inputs          # ~1 min; writes results/bad_inputs.md and .json

* **lost**: a file the user had (a case's ``keeps``) is gone or changed afterwards.

The goal is 0 tracebacks, 0 accepted and 0 lost.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from benchmarks import common as C

CLEAR_ERRORS = (ValueError, FileNotFoundError, FileExistsError, PermissionError)


@dataclass
class Case:
    area: str
    name: str
    run: Callable[[Path], Any]
    """Does the bad thing in a scratch folder; returns a CLI exit code or None."""
    expect: str
    """Words the message must contain (case-insensitive)."""
    fallback: bool = False
    """Succeeding is right when a warning says what was wrong (``--resume`` past a damaged
    checkpoint, ``--overwrite`` keeping a user's files)."""
    keeps: tuple[str, ...] = ()
    """Files (relative to the scratch folder) the user had, that must survive unchanged;
    one missing or changed is a **lost** verdict, whatever the command said."""


def cli(*argv: str) -> Callable[[Path], int]:
    def run(work: Path) -> int:
        from training.cli import main

        return main([a.replace("{work}", str(work)) for a in argv])
    return run


def write(name: str, text: str | bytes) -> Callable[[Path], Path]:
    def make(work: Path) -> Path:
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return path
    return make


def train_yaml(body: str) -> Callable[[Path], int]:
    """``paw-gym train --config`` on a YAML file with ``body`` (plus a valid tiny base)."""
    def run(work: Path) -> int:
        from training.cli import main

        config = write("config.yaml", body.replace("{work}", str(work)))(work)
        return main(["train", "--config", str(config), "--output_dir", str(work / "run")])
    return run


def train_flags(base: str, *flags: str) -> Callable[[Path], int]:
    """``paw-gym train --config`` on the valid one-second ``base`` with ``flags`` on top."""
    def run(work: Path) -> int:
        from training.cli import main

        _tiny(work)
        config = write("config.yaml", base.replace("{work}", str(work)))(work)
        return main(["train", "--config", str(config), "--output_dir", str(work / "run"),
                     *flags])
    return run


def _tiny_then_yaml(body: str) -> Callable[[Path], int]:
    """``paw-gym train --config`` on ``body`` once the tiny model it names is built."""
    return lambda work: (_tiny(work), train_yaml(body)(work))[1]


def api(call: Callable[[Path], Any]) -> Callable[[Path], Any]:
    return call


def _tiny(work: Path) -> Path:
    from agents.tiny_model import build_tiny_model

    return build_tiny_model(["a tiny corpus for a tiny tokenizer"] * 20, work / "tiny", seed=0)


def _checkpoint_with(work: Path, damage: Callable[[Path], None]) -> Path:
    """A real 1-step run's output dir, then ``damage`` applied to its latest checkpoint."""
    from training.config import TrainConfig
    from training.infra.checkpoint import latest_checkpoint
    from training.trainer import PaWTrainer

    model = _tiny(work)
    out = work / "run"
    PaWTrainer(TrainConfig(model=str(model), env_id="PaW/Shelf-v0", n_groups=1, group_size=2,
                           max_new_tokens=4, max_episode_steps=2, total_steps=2, save_every=1,
                           output_dir=str(out), device="cpu", progress=False)).train()
    damage(latest_checkpoint(out))
    return out


def _resume(damage: Callable[[Path], None]) -> Callable[[Path], int]:
    def run(work: Path) -> int:
        from training.cli import main

        out = _checkpoint_with(work, damage)
        return main(["train", "--config", str(out / "config.yaml"), "--total_steps", "3",
                     "--resume"])
    return run


def _resume_explicit(damage: Callable[[Path], None]) -> Callable[[Path], int]:
    def run(work: Path) -> int:
        from training.cli import main
        from training.infra.checkpoint import latest_checkpoint

        out = _checkpoint_with(work, damage)
        return main(["train", "--config", str(out / "config.yaml"), "--total_steps", "3",
                     "--resume", str(latest_checkpoint(out))])
    return run


def _eval_checkpoint(damage: Callable[[Path], None],
                     partial: bool = False) -> Callable[[Path], int]:
    """``eval`` of the latest checkpoint after ``damage`` (``partial``: of the interrupted save
    ``damage`` left, by its path)."""
    def run(work: Path) -> int:
        from training.cli import main
        from training.infra.checkpoint import latest_checkpoint

        out = _checkpoint_with(work, damage)
        target = next((out / "checkpoints").glob(".*.partial")) if partial else \
            latest_checkpoint(out) or out
        return main(["eval", "--env", "PaW/Shelf-v0", "--checkpoint", str(target), "--limit",
                     "1", "--output_dir", str(work / "eval")])
    return run


def _truncate(pattern: str, keep: int | None = None):
    def damage(checkpoint: Path) -> None:
        path = next(checkpoint.glob(pattern))
        data = path.read_bytes()
        path.write_bytes(b"" if keep is None else data[:keep])
    return damage


def _model_changed(change: Callable[[Path], None]) -> Callable[[Path], int]:
    """``paw-gym train`` on a tiny model folder after ``change`` (a hostile edit)."""
    def run(work: Path) -> int:
        from training.cli import main

        model = _tiny(work)
        change(model)
        return main(["train", "--model", str(model), "--env_id", "PaW/Shelf-v0",
                     "--output_dir", str(work / "run"), "--progress", "false"])
    return run


def _edit_json(name: str, key: str, value: Any) -> Callable[[Path], None]:
    def change(model: Path) -> None:
        settings = json.loads((model / name).read_text(encoding="utf-8"))
        settings[key] = value
        (model / name).write_text(json.dumps(settings), encoding="utf-8")
        (model / "chat_template.jinja").unlink(missing_ok=True)  # the template in the JSON wins
    return change


def _pickled_only(model: Path) -> None:
    for weights in model.glob("*.safetensors"):
        weights.rename(weights.with_name("pytorch_model.bin"))


def cases() -> list[Case]:
    # A valid, one-second run: a bad value that is silently accepted costs next to nothing.
    base = ("model: {work}/tiny\nenv_id: PaW/Shelf-v0\ndevice: cpu\ntotal_steps: 1\n"
            "n_groups: 1\ngroup_size: 2\nmax_new_tokens: 4\nmax_episode_steps: 2\n"
            "save_every: 0\nprogress: false\n")
    make_base = lambda body: _tiny_then_yaml(base + body)  # noqa: E731
    return [
        # -- paw-gym train configs ----------------------------------------------------------
        Case("train config", "YAML syntax error", train_yaml("model: [unclosed\n"), "config.yaml"),
        Case("play", "--episodes 10**12", cli("play", "--env", "PaW/Shelf-v0", "--episodes",
                                             str(10**12)), "episodes=1000000000000 is invalid"),
        Case("gen-alfworld", "--per_type 10**12",
             cli("gen-alfworld", "--output_dir", "{work}/alf", "--per_type", str(10**12)),
             "per_type=1000000000000 is invalid"),
        Case("model folder", "config.json auto_map (remote code)",
             _model_changed(_edit_json("config.json", "auto_map",
                                       {"AutoModelForCausalLM": "evil.Model"})), "auto_map"),
        Case("model folder", "tokenizer_config.json auto_map",
             _model_changed(_edit_json("tokenizer_config.json", "auto_map",
                                       {"AutoTokenizer": ["evil.Tok", None]})), "auto_map"),
        Case("model folder", "pickled weights only (*.bin)", _model_changed(_pickled_only),
             "only pickled weights"),
        Case("model folder", "chat template reaching for os",
             _model_changed(_edit_json("tokenizer_config.json", "chat_template",
                                       "{{ cycler.__init__.__globals__.os.getcwd() }}")),
             "failed to render"),
        Case("model folder", "chat template syntax error",
             _model_changed(_edit_json("tokenizer_config.json", "chat_template", "{% if %}")),
             "failed to render"),
        Case("train config", "config is a list", train_yaml("- a\n- b\n"), "mapping"),
        Case("train config", "unknown key", train_yaml("lrr: 1\n"), "unknown config key"),
        Case("train config", "device: gpu", train_flags(base, "--device", "gpu"), "device='gpu'"),
        Case("train config", "lr: -1", make_base("lr: -1\n"), "lr=-1"),
        Case("train config", "critic_lr: -0.5", make_base("critic_lr: -0.5\n"), "critic_lr=-0.5"),
        Case("train config", "history_length: -1", make_base("history_length: -1\n"),
             "history_length=-1"),
        Case("train config", "n_groups: 1.5", make_base("n_groups: 1.5\n"), "n_groups"),
        Case("train config", "paw: 3", make_base("paw: 3\n"), "paw=3"),
        Case("train config", "total_steps: 0", train_flags(base, "--total_steps", "0"),
             "total_steps=0"),
        Case("train config", "keep_checkpoints: 0", make_base("keep_checkpoints: 0\n"),
             "keep_checkpoints=0"),
        Case("train config", "max_obs_tokens: -5", make_base("max_obs_tokens: -5\n"),
             "max_obs_tokens"),
        Case("train config", "temperature: -1", make_base("temperature: -1\n"), "temperature"),
        Case("train config", "unknown env_id", train_flags(base, "--env_id", "PaW/Nope-v0"),
             "PaW/Nope-v0"),
        Case("train config", "env_kwargs unknown key", make_base("env_kwargs: {colour: red}\n"),
             "colour"),
        Case("train config", "env_kwargs bad value", make_base("env_kwargs: {split: dev}\n"),
             "split"),
        Case("train config", "model path missing", train_yaml(
            "model: {work}/no-such-model\nenv_id: PaW/Shelf-v0\ndevice: cpu\n"), "no-such-model"),
        Case("train config", "model path empty folder", lambda work: (
            (work / "empty").mkdir(), train_yaml(
                "model: {work}/empty\nenv_id: PaW/Shelf-v0\ndevice: cpu\n")(work))[1], "empty"),
        Case("train config", "model: ''", train_yaml("model: ''\nenv_id: PaW/Shelf-v0\n"),
             "model"),
        Case("train config", "unset data variable", train_yaml(
            "model: x\nenv_id: PaW/WebShop-v0\nenv_kwargs: {data_dir: '${PAW_NOPE}'}\n"),
            "PAW_NOPE"),
        Case("train", "output_dir holds a user's metrics.jsonl", lambda work: (
            write("run/metrics.jsonl", '{"step": 1}\n')(work),
            _tiny(work), train_yaml(base)(work))[2],
             "already holds 1 entries paw-gym did not write"),
        # -- checkpoints --------------------------------------------------------------------
        # A damaged newest checkpoint: --resume falls back to the one before, saying why.
        Case("resume", "truncated state.json", _resume(_truncate("state.json", 10)),
             "state.json is damaged", fallback=True),
        Case("resume", "empty weights file", _resume(_truncate("model/*.safetensors")),
             "safetensors is damaged", fallback=True),
        Case("resume", "garbage optimizer safetensors", _resume(
            lambda c: (c / "optimizer.safetensors").write_bytes(b"garbage" * 10)),
            "optimizer.safetensors is damaged", fallback=True),
        Case("resume", "explicit damaged checkpoint", _resume_explicit(
            _truncate("model/*.safetensors", 100)), "safetensors is damaged"),
        Case("eval", "truncated checkpoint weights", _eval_checkpoint(
            _truncate("model/*.safetensors", 100)), "safetensors is damaged"),
        Case("eval", "checkpoint folder missing", cli(
            "eval", "--env", "PaW/Shelf-v0", "--checkpoint", "{work}/nope", "--limit", "1",
            "--output_dir", "{work}/eval"), "nope"),
        Case("eval", "--limit 0", cli("eval", "--env", "PaW/Shelf-v0", "--agent", "random",
                                       "--limit", "0"), "limit"),
        Case("eval", "--split of another env", cli(
            "eval", "--env", "PaW/Shelf-v0", "--agent", "random", "--split",
            "eval_out_of_distribution"), "eval_out_of_distribution"),
        Case("eval", "unwritable --output_dir", lambda work: cli(
            "eval", "--env", "PaW/Shelf-v0", "--agent", "random", "--limit", "1",
            "--output_dir", str(write("file", "x")(work) / "out"))(work), "not writable"),
        # -- data files ---------------------------------------------------------------------
        # One schema per data file kind (run_files.data_files): a log's bad records are
        # skipped with a warning naming the count and the first file:line; a file written
        # whole is refused with file:line.
        *[Case("sft", f"replay record with {label}", lambda work, bad=bad: (
            _tiny(work), _replay_with(work, json.dumps({
                "schema_version": 1, "h": "Guess.", "a": "<action>guess 1</action>",
                "o_next": "Go higher.", "reward": 0.0, "terminated": False, "truncated": False,
                "task_id": "t", "task_type": "guess", "episode_id": "e", "step": 0, **bad}) + "\n"),
            cli("sft", "--model", "{work}/tiny", "--replay", "{work}/replay", "--output_dir",
                "{work}/sft", "--epochs", "1", "--successful_only", "false", "--device", "cpu",
                "--progress", "false")(work))[2],
            expect, fallback=True) for label, bad, expect in [
                ("reward: NaN", {"reward": float("nan")}, "field 'reward' is nan"),
                ("episode_id: [1]", {"episode_id": [1]}, "field 'episode_id' is [1]"),
                ('step: "0"', {"step": "0"}, "field 'step' is '0'")]],
        Case("train-wm", "replay of records with step: \"0\" only", lambda work: (
            _tiny(work), _replay_with(work, ""), [
                (p.write_text(p.read_text().replace('"step": 0', '"step": "0"')))
                for p in (work / "replay").glob("*.jsonl")],
            cli("train-wm", "--model", "{work}/tiny", "--replay", "{work}/replay", "--output_dir",
                "{work}/wm", "--method", "sft", "--steps", "1", "--device", "cpu",
                "--progress", "false")(work))[3], "1 malformed record(s) skipped"),
        Case("eval-wm", "broken wm_config.json", lambda work: (
            write("wm/wm_config.json", '{"config": {"seed": 0')(work),
            cli("eval-wm", "--checkpoint", "{work}/wm", "--output_dir", "{work}/eval")(work))[1],
            "wm_config.json:1: not valid JSON"),
        Case("eval-wm", 'wm_config.json with seed "0"', lambda work: (
            write("wm/wm_config.json", '{"config": {"method": "sft", "seed": "0", '
                  '"val_fraction": 0.1}, "replay": "r"}')(work),
            cli("eval-wm", "--checkpoint", "{work}/wm", "--output_dir", "{work}/eval")(work))[1],
            "field 'config.seed' is '0'"),
        Case("eval-wm", "predictions file with a bad line", lambda work: (
            write("p.predictions.jsonl", '{"target": "t", "task_type": "g", "predictions": [1]}'
                  '\n')(work),
            cli("eval-wm", "--from_predictions", "{work}/p.predictions.jsonl", "--output_dir",
                "{work}/eval")(work))[1], "p.predictions.jsonl:1: field 'predictions[0]' is 1"),
        Case("plot", "metrics.jsonl with a bad line", lambda work: (
            write("run/metrics.jsonl", '{"step": 1, "reward": 0}\n{"step": "2"}\n'
                  '{"step": 3, "reward": 1}\n')(work),
            cli("plot", "{work}/run", "--metrics", "reward", "--out", "{work}/c.png")(work))[1],
            "metrics.jsonl:2: field 'step' is '2'", fallback=True),
        Case("replay", "row with won: 'no'", api(lambda work: _load_replay_strict(work, {
            "won": "no"})), "won"),
        Case("replay", "row is a list", api(lambda work: _load_replay_raw(work, "[1, 2]\n")),
             "not a JSON object"),
        Case("webshop", "items that are not objects", api(lambda work: _webshop_items(
            work, '["not an item"]')), "items_shuffle"),
        Case("webshop", "items file is not JSON", api(lambda work: _webshop_items(
            work, "{not json")), "items_shuffle"),
        Case("search QA", "answer is a mapping", api(lambda work: _qa(
            work, '[{"question": "q", "answer": {"a": 1}}]')), "answer"),
        Case("search QA", "answer list with null", api(lambda work: _qa(
            work, '[{"question": "q", "answer": [null]}]')), "answer"),
        Case("search QA", "corpus rows that are lists", api(lambda work: _corpus(
            work, '["id", "text"]\n')), "corpus"),
        Case("search QA", "corpus row without text", api(lambda work: _corpus(
            work, '{"id": "1"}\n')), "contents"),
        Case("alfworld", "game with bad PDDL", api(_bad_alfworld_game), "pddl"),
        Case("play", "unknown env", cli("play", "--env", "Nope/Missing-v0"), "unknown env"),
        Case("play", "env-kwargs not key=value", cli("play", "--env", "PaW/Shelf-v0",
                                                     "--env-kwargs", "split"), "key=value"),
        Case("play", "env-kwargs unknown key", cli("play", "--env", "PaW/Shelf-v0",
                                                   "--env-kwargs", "colour=red"), "colour"),
        # -- issue 27: accepted silently (ruining a run), tracebacks, lost data -------------
        *[Case("train config", f"{flag} {value}", train_flags(base, f"--{flag}", value), expect)
          for flag, value, expect in [
              ("lr", "inf", "lr=inf"), ("max_grad_norm", "nan", "max_grad_norm=nan"),
              ("temperature", "inf", "temperature=inf"), ("group_size", "1", "group_size=1"),
              ("clip_eps", "-1", "clip_eps=-1"), ("kl_coef", "-1", "kl_coef=-1"),
              ("warmup_steps", "-5", "warmup_steps=-5"), ("gamma", "nan", "gamma=nan"),
              ("lora_r", "0", "lora_r=0"), ("lora_dropout", "2", "lora_dropout=2"),
              ("logits_chunk", "0", "logits_chunk=0"),
              ("train_task_seeds", "0", "train_task_seeds=0"),
              ("seed", str(2**70), "seed=")]],
        Case("train config", "a key given twice", train_yaml("lr: 1e-3\nlr: 2e-3\n"),
             "given twice"),
        Case("train config", "$NAME unset", train_yaml("model: $PAW_NOPE/x\n"), "PAW_NOPE"),
        Case("train config", "key that is not a string", train_yaml("3: x\n"),
             "unknown config key"),
        Case("sft", "--epochs -1", cli("sft", "--epochs", "-1"), "epochs=-1"),
        Case("sft", "--lr inf", cli("sft", "--lr", "inf"), "lr=inf"),
        Case("sft", "--output_dir with a user's files", lambda work: (
            _tiny(work), write("mine/model.safetensors", "a user's model")(work),
            cli("sft", "--model", "{work}/tiny", "--output_dir", "{work}/mine")(work))[2],
            "pass --overwrite true"),
        Case("build-tiny-model", "--output_dir with a user's files", lambda work: (
            write("mine/config.json", "{}")(work),
            cli("build-tiny-model", "--output_dir", "{work}/mine")(work))[1], "pass --overwrite true"),
        Case("train-wm", "--rho -1", cli("train-wm", "--rho", "-1", "--replay", "."),
             "rho=-1.0 is invalid"),
        Case("train-wm", "--output_dir with a user's files", lambda work: (
            write("mine/model.safetensors", "a user's model")(work),
            _tiny(work), cli("train-wm", "--record_env", "PaW/Shelf-v0", "--model",
                             "{work}/tiny", "--output_dir", "{work}/mine")(work))[2],
             "pass --overwrite true"),
        Case("demo", "--rl_steps 0", cli("demo", "--rl_steps", "0", "--output_dir",
                                         "{work}/demo"), "rl_steps=0"),
        Case("demo", "--output_dir with a user's files", lambda work: (
            write("mine/notes.txt", "mine")(work),
            cli("demo", "--output_dir", "{work}/mine")(work))[1], "pass --overwrite true"),
        Case("eval", "--max_steps 0", cli("eval", "--env", "PaW/Shelf-v0", "--agent", "random",
                                          "--max_steps", "0"), "max_steps=0 is invalid"),
        Case("eval", "--name ../../x", cli("eval", "--env", "PaW/Shelf-v0", "--agent", "random",
                                           "--name", "../../x", "--output_dir", "{work}/out"),
             "plain file name"),
        Case("serve-retriever", "--port 70000", cli("serve-retriever", "--port", "70000"),
             "port=70000 is invalid"),
        Case("serve-retriever", "--export_corpus onto a user's file", lambda work: (
            write("corpus.jsonl", "mine\n")(work),
            cli("serve-retriever", "--export_corpus", "{work}/corpus.jsonl")(work))[1],
            "pass --overwrite true"),
        Case("resume", "optimizer.json damaged", _resume(
            lambda c: (c / "optimizer.json").write_text('{"param_gr')),
            "optimizer.json is damaged", fallback=True),
        # -- ranges and relations declared with the config fields (training.config.bounded) --
        Case("train config", "alpha: 0", make_base("alpha: 0\n"), "alpha=0"),
        Case("train config", "rho: 2", make_base("rho: 2\n"), "rho=2"),
        Case("train config", "gamma: 1.5", make_base("gamma: 1.5\n"), "gamma=1.5"),
        Case("train config", "seed: -1", make_base("seed: -1\n"), "seed=-1"),
        Case("train config", "val_limit: 0", make_base("val_limit: 0\n"), "val_limit=0"),
        Case("train config", "lora_dropout: 1", make_base("lora_dropout: 1.0\n"),
             "lora_dropout=1.0"),
        Case("train config", "clip_eps_high below clip_eps", make_base("clip_eps_high: 0.1\n"),
             "clip_eps_high=0.1"),
        Case("train config", "mixed_precision without fsdp", make_base(
            "mixed_precision: bf16\n"), "mixed_precision='bf16'"),
        Case("train config", "fsdp with lora", make_base("sharding: fsdp\nlora: true\n"),
             "sharding='fsdp' does not take lora"),
        Case("train config", "fsdp, vllm rollouts and the noise metric", make_base(
            "sharding: fsdp\nlora: false\nrollout_backend: vllm\nnoise_gradient_metric: true\n"),
             "sharding='fsdp' does not take noise_gradient_metric=True"),
        Case("train config", "--total_steps 10**8 (days)", train_flags(base, "--total_steps",
                                                                    str(10**8)),
             "total_steps=100000000"),
        Case("train config", "--n_groups 10**7", train_flags(base, "--n_groups", str(10**7)),
             "n_groups=10000000"),
        Case("train config", "--group_size 1 with grpo", train_flags(base, "--group_size", "1"),
             "group_size=1"),
        Case("sft", "--max_grad_norm 0", cli("sft", "--max_grad_norm", "0", "--output_dir",
                                             "{work}/sft"), "max_grad_norm=0"),
        Case("eval-wm", "--tau 2", cli("eval-wm", "--tau", "2", "--model", "m"), "tau=2.0"),
        Case("eval-wm", "--samples 0", cli("eval-wm", "--samples", "0", "--model", "m"),
             "samples=0"),
        Case("build-tiny-model", "--epsilon 2", cli("build-tiny-model", "--output_dir", "{work}/tiny2",
                                                    "--epsilon", "2"), "epsilon=2.0"),
        Case("demo", "--expert_epsilon 3", cli("demo", "--expert_epsilon", "3",
                                               "--output_dir", "{work}/demo"),
             "expert_epsilon=3.0"),
        Case("play", "--episodes 0", cli("play", "--env", "PaW/Shelf-v0", "--episodes", "0"),
             "episodes=0"),
        Case("train-wm", "--group_size 1 with rwml", cli("train-wm", "--group_size", "1",
                                                         "--replay", "."), "group_size=1"),
        Case("train-wm", "--val_fraction 1", cli("train-wm", "--val_fraction", "1",
                                                 "--replay", "."), "val_fraction=1.0"),
        Case("train-wm", "--record_episodes 0", cli("train-wm", "--record_env", "PaW/Shelf-v0",
                                                    "--record_episodes", "0", "--output_dir",
                                                    "{work}/wm0"), "record_episodes=0"),
        Case("train config", "empty file", train_yaml(""), "the config file is empty"),
        Case("train-wm", "--reward os:system", cli("train-wm", "--reward", "os:system",
                                                   "--replay", "."),
             "cannot be called as reward(prediction, target)"),
        # -- paw-gym serve-env --------------------------------------------------------------
        Case("serve-env", "--port 70000", cli("serve-env", "--env", "PaW/Shelf-v0", "--port",
                                              "70000"), "port=70000 is invalid"),
        Case("serve-env", "port in use", _serve_env_on_a_taken_port, "already in use"),
        Case("serve-env", "unknown env", cli("serve-env", "--env", "PaW/Nope-v0", "--port", "0"),
             "PaW/Nope-v0"),
        Case("serve-env", "--max_sessions 0", cli("serve-env", "--env", "PaW/Shelf-v0",
                                                  "--port", "0", "--max_sessions", "0"),
             "max_sessions"),
        Case("serve-env", "--env_kwargs colour=red", cli(
            "serve-env", "--env", "PaW/Shelf-v0", "--port", "0", "--env_kwargs", "colour=red"),
            "colour"),
        # -- issue 41: the output guard (user files, one writer, incomplete and damaged) ----
        *[Case(command, "--overwrite true beside a user's file, folder, symlink (41)",
               _overwrite_beside_users_files(command), "kept 3 entries it did not write",
               fallback=True, keeps=USERS_FILES)
          for command in ("build-tiny-model", "sft", "train-wm", "train")],
        Case("train", "--overwrite true over a user's config.yaml (41)", _overwrite_over(
            "train", "config.yaml"), "would write over", keeps=("out/config.yaml",)),
        Case("sft", "--overwrite true over a user's tokenizer.json (41)", _overwrite_over(
            "sft", "tokenizer.json"), "would write over", keeps=("out/tokenizer.json",)),
        Case("demo", "--overwrite true over a user's results.md (41)", _overwrite_over(
            "demo", "results.md"), "would write over", keeps=("out/results.md",)),
        *[Case(command, "a second writer of one --output_dir (41)", _while_held(command),
               "is being written by pid") for command in ("sft", "train", "train-wm")],
        Case("eval", "--checkpoint an sft output killed before it finished (41)",
             _eval_model(_incomplete_output), "is incomplete"),
        Case("sft", "--model an output killed before it finished (41)", _on_model(
            "sft", _incomplete_output), "is incomplete"),
        Case("eval", "--checkpoint a checkpoint killed while saved (41)", _eval_checkpoint(
            lambda c: c.rename(c.with_name(f".{c.name}.partial")), partial=True),
             "incomplete save"),
        Case("eval", "a flipped byte in a checkpoint's weights (41)", _eval_checkpoint(
            _flip_a_byte("model/*.safetensors")), "is damaged: its size or sha256"),
        Case("resume", "a flipped byte in the explicit checkpoint's weights (41)",
             _resume_explicit(_flip_a_byte("model/*.safetensors")), "is damaged: its size"),
        Case("resume", "a flipped byte in the optimizer state (41)", _resume(
            _flip_a_byte("optimizer.safetensors")), "is damaged: its size", fallback=True),
        Case("train", "--model an sft output with a flipped byte (41)", _on_model(
            "train", _flipped_output), "is damaged: its size or sha256"),
        # -- issue 41: every flag's range and type, before any work (names end "(41)") ------
        *[Case(command, f"--seed -1 (41)", cli(command, *flags, "--seed", "-1"), "seed=-1")
          for command, flags in [("eval", ("--env", "PaW/Shelf-v0", "--agent", "random")),
                                 ("play", ("--env", "PaW/Shelf-v0")),
                                 ("gen-alfworld", ("--output_dir", "{work}/alf")),
                                 ("build-tiny-model", ("--output_dir", "{work}/tiny2"))]],
        Case("play", "--env_kwargs shelf_sizes=abc (41)", cli(
            "play", "--env", "PaW/Shelf-v0", "--env_kwargs", "shelf_sizes=abc"),
            "shelf_sizes='abc' is invalid"),
        Case("eval", "--env_kwargs num_products=abc (41)", cli(
            "eval", "--env", "PaW/WebShop-v0", "--agent", "random", "--env_kwargs",
            "num_products=abc"), "num_products='abc' is invalid"),
        Case("serve-env", "--env_kwargs split=dev (41)", cli(
            "serve-env", "--env", "PaW/Shelf-v0", "--port", "0", "--env_kwargs", "split=dev"),
            "split='dev' is invalid"),
        Case("train config", "env_kwargs shelf_sizes: abc (41)",
             make_base("env_kwargs: {shelf_sizes: abc}\n"), "shelf_sizes='abc' is invalid"),
        Case("train-wm", "--record_env_kwargs size=big (41)", cli(
            "train-wm", "--record_env", "PaW/Sokoban-v0", "--record_env_kwargs", "size=big",
            "--output_dir", "{work}/wm"), "size='big' is invalid"),
        Case("eval", "--device cuda without CUDA (41)", cli(
            "eval", "--env", "PaW/Shelf-v0", "--model", "x", "--device", "cuda"),
            "device='cuda' is not available"),
        Case("train config", "--device mps without MPS (41)", train_flags(
            base, "--device", "mps"), "device='mps' is not available"),
        Case("train config", "--dtype float8 (41)", train_flags(base, "--dtype", "float8"),
             "float8"),
        Case("train config", "dtype: float8 in the file (41)", make_base("dtype: float8\n"),
             "dtype='float8' is invalid"),
        Case("train config", "--rollout_backend vllm without vLLM (41)", train_flags(
            base, "--rollout_backend", "vllm"), "needs vLLM"),
        Case("train config", "rollout_backend: vllm in the file (41)", make_base(
            "rollout_backend: vllm\n"), "needs vLLM"),
        Case("train config", "--val_split validation (41)", train_flags(
            base, "--val_every", "1", "--val_split", "validation"),
            "val_split='validation' is not a split"),
        Case("train config", "val_split: dev before training (41)", make_base(
            "val_before_train: true\nval_split: dev\n"), "val_split='dev' is not a split"),
        Case("play", "dead PaW/Remote-v0 url (41)", cli(
            "play", "--env", "PaW/Remote-v0", "--agent", "random", "--env_kwargs",
            "url=http://127.0.0.1:9"),
            "no env server answers"),
        Case("eval", "dead PaW/Remote-v0 url (41)", cli(
            "eval", "--agent", "random", "--env", "PaW/Remote-v0", "--env_kwargs",
            "url=http://127.0.0.1:9,timeout=2"), "no env server answers"),
        Case("train config", "--lora_target_modules q_prj (41)", train_flags(
            base, "--lora_target_modules", "q_prj"), "did you mean q_proj"),
        Case("train config", "lora_target_modules: [q_proj, vproj] (41)", make_base(
            "lora_target_modules: [q_proj, vproj]\n"), "'vproj'"),
        Case("trl", "paw='no' (41)", api(lambda work: _paw_grpo_config(work, paw="no")),
             "paw='no' is invalid"),
        Case("trl", "max_obs_tokens=1.5 (41)", api(lambda work: _paw_grpo_config(
            work, max_obs_tokens=1.5)), "max_obs_tokens=1.5 is invalid"),
        *[Case("train", f"WORLD_SIZE=2 by hand, RANK={rank}, no peer (41)",
               __import__("unittest.mock").mock.patch.dict("os.environ", {
                   "WORLD_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": str(rank),
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29537 + rank)})(train_flags(
                       base, "--n_groups", "2", "--launch_timeout", "2")),
               "did not come together within 2 s") for rank in (0, 1)],
        # -- TRL integration and transcript pretraining (Python API) -----------------------
        Case("trl", "alpha=2", api(lambda work: _paw_grpo_config(work, alpha=2.0)), "alpha=2.0"),
        Case("trl", "temperature=0.5 with paw", api(lambda work: _paw_grpo_config(
            work, temperature=0.5)), "temperature=0.5"),
        Case("trl", "wm_loss='l1'", api(lambda work: _paw_grpo_config(work, wm_loss="l1")),
             "wm_loss='l1'"),
        Case("trl", "EnvRollout of an unknown env", api(lambda work: _env_rollout(
            "PaW/Nope-v0")), "PaW/Nope-v0"),
        Case("trl", "EnvRollout max_steps=0", api(lambda work: _env_rollout(
            "PaW/Shelf-v0", max_steps=0)), "max_steps=0"),
        Case("trl", "a prompt without its task seed", api(lambda work: _task_seed(
            [{"role": "user", "content": "Task: buy the red lamp."}])), "task_dataset"),
        Case("pretrain", "rows='episode' with wm_context end_of_turn", api(
            lambda work: _pretrain(work, rows="episode", wm_context="end_of_turn")),
            "rows='episode'"),
        Case("pretrain", "rows='bogus'", api(lambda work: _pretrain(work, rows="bogus")),
             "rows='bogus'"),
        *issue_50_cases(base),
    ]


def issue_50_cases(base: str) -> list[Case]:
    """Issue 50's classes, several cases each, across commands (names end "(50)")."""
    return [
        # -- the guard deletes only what it can prove it wrote --------------------------------
        *[Case(command, f"--overwrite true beside a user's {planted} (50)",
               _overwrite_beside(command, planted), "kept", fallback=True,
               keeps=(f"out/{planted}",))
          for command, planted in [("train", "wandb/notes.txt"),
                                   ("train", "replay/update-notes.txt"),
                                   ("train", "tensorboard/events.out.tfevents.mine"),
                                   ("train", ".notes.tmp"),
                                   ("build-tiny-model", "sub/.draft.tmp"),
                                   ("sft", ".notes.tmp")]],
        Case("train-wm", "--overwrite true beside a user's replay/mydata.jsonl (50)",
             _overwrite_beside("train-wm", "replay/mydata.jsonl"), "would write over it",
             keeps=("out/replay/mydata.jsonl",)),
        *[Case(command, f"{own} a symlink to a user's file (50)",
               _own_file_symlinked(command, own), "is a symlink; paw-gym never writes",
               keeps=("precious.txt",))
          for command, own in [("sft", ".paw-gym-lock"), ("train", ".paw-gym-lock"),
                               ("build-tiny-model", ".paw-gym-output.json"),
                               ("train-wm", ".paw-gym-output.journal")]],
        *[Case(command, f"a hand-edited manifest claiming the user's files (50)",
               _hand_edited_manifest(command), "kept", fallback=True,
               keeps=("out/notes.txt", "precious.txt"))
          for command in ("sft", "train", "build-tiny-model")],
        Case("sft", "a folder of the user's named like a recorded file (50)",
             _replaced_by_the_user("sft", "config.json", folder=True), "would write over it",
             keeps=("out/config.json/mine.txt",)),
        Case("train", "a symlink inside a recorded checkpoint folder (50)",
             _replaced_by_the_user("train", "checkpoints/step-000001/model", folder=False),
             "would write over it", keeps=("outside/data.txt",)),
        Case("sft", "a recorded file changed since (50)",
             _replaced_by_the_user("sft", "tokenizer.json", folder=None),
             "changed since paw-gym wrote it", keeps=("out/tokenizer.json",)),
        Case("outputs", "the lock deleted by hand while a command writes (50)",
             api(_lock_deleted_by_hand), "was removed or replaced while"),
        Case("eval", "a sha256 record naming a 1 TB file outside the folder (50)",
             _record_outside, "is damaged", keeps=("big.bin",)),
        # -- every flag of every command, declared ----------------------------------------------
        Case("serve-retriever", "--kb_scale -1 (50)", cli("serve-retriever", "--kb_scale", "-1"),
             "kb_scale=-1.0 is invalid"),
        Case("demo", "--threads 0 (50)", cli("demo", "--threads", "0", "--output_dir",
                                            "{work}/demo"), "threads=0 is invalid"),
        Case("build-tiny-model", "--episodes 10**12 (50)", cli(
            "build-tiny-model", "--output_dir", "{work}/tiny2", "--episodes", str(10**12)),
            "episodes=1000000000000 is invalid"),
        Case("build-tiny-model", "--max_steps 0 (50)", cli(
            "build-tiny-model", "--output_dir", "{work}/tiny2", "--max_steps", "0"),
            "max_steps=0 is invalid"),
        Case("eval-wm", "--samples 10**12 (50)", cli("eval-wm", "--samples", str(10**12),
                                                     "--model", "m"), "samples="),
        Case("train", "--launch_timeout 1e308 (50)", train_flags(base, "--launch_timeout",
                                                                  "1e308"), "launch_timeout="),
        *[Case(command, f"{flag} naming an existing file (50)", lambda work, argv=argv: (
            write("a-file.txt", "the user's")(work), cli(*argv)(work))[1],
            "is a file; give a folder", keeps=("a-file.txt",))
          for command, flag, argv in [
              ("gen-alfworld", "--output_dir", ("gen-alfworld", "--output_dir",
                                                "{work}/a-file.txt")),
              ("play", "--replay", ("play", "--env", "PaW/Shelf-v0", "--replay",
                                    "{work}/a-file.txt")),
              ("eval", "--replay", ("eval", "--env", "PaW/Shelf-v0", "--agent", "random",
                                    "--replay", "{work}/a-file.txt")),
              ("sft", "--output_dir", ("sft", "--output_dir", "{work}/a-file.txt"))]],
        *[Case(command, f"{flag} naming a folder (50)", lambda work, argv=argv: (
            (work / "a-folder").mkdir(), cli(*argv)(work))[1], "is a folder")
          for command, flag, argv in [
              ("plot", "--out", ("plot", "{work}", "--out", "{work}/a-folder")),
              ("serve-retriever", "--export_corpus", ("serve-retriever", "--export_corpus",
                                                      "{work}/a-folder")),
              ("eval-wm", "--from_predictions", ("eval-wm", "--from_predictions",
                                                 "{work}/a-folder"))]],
        *[Case(command, f"{flag} with a NUL (50)", cli(*argv), "NUL")
          for command, flag, argv in [
              ("train", "--output_dir", ("train", "--output_dir", "a\0b")),
              ("sft", "--output_dir", ("sft", "--output_dir", "a\0b")),
              ("eval", "--name", ("eval", "--env", "PaW/Shelf-v0", "--name", "a\0b"))]],
        *[Case(command, f"a 5000-character {flag} (50)", cli(*argv), "too long for a path")
          for command, flag, argv in [
              ("train", "--output_dir", ("train", "--output_dir", "x" * 5000)),
              ("build-tiny-model", "--output_dir", ("build-tiny-model", "--output_dir",
                                                    "runs/" + "x" * 300)),
              ("eval", "--output_dir", ("eval", "--env", "PaW/Shelf-v0", "--output_dir",
                                        "x" * 5000))]],
        *[Case(command, f"{flag} that does not exist (50)", cli(*argv), "does not exist")
          for command, flag, argv in [
              ("serve-retriever", "--faiss_index", ("serve-retriever", "--faiss_index",
                                                    "{work}/nope.index", "--model", "m")),
              ("eval-wm", "--replay", ("eval-wm", "--replay", "{work}/nope", "--model", "m")),
              ("train", "--val_wm_replay", ("train", "--val_every", "1", "--val_wm_replay",
                                            "{work}/nope")),
              ("plot", "RUN", ("plot", "{work}/nope"))]],
        *[Case(command, f"{flag} an unknown module (50)", cli(*argv), "cannot be imported")
          for command, flag, argv in [
              ("build-tiny-model", "--import", ("build-tiny-model", "--output_dir",
                                                "{work}/tiny2", "--import", "no_such_module"))]],
        # -- options that contradict or do nothing -----------------------------------------
        Case("train config", "async_rollouts with full FSDP (50)", _tiny_then_yaml(
            base + "async_rollouts: true\nsharding: fsdp\nlora: false\n"),
            "sharding='fsdp' is invalid; expected ddp with async_rollouts"),
        Case("resume", "--resume with another --model (50)", _resume_with(
            "--model", "{work}/other"), "other weight settings"),
        Case("resume", "--resume with another --sharding (50)", _resume_with(
            "--sharding", "fsdp", "--lora", "false"), "other weight settings"),
        Case("eval", "--checkpoint a whole model with another --model (50)", _eval_model_other,
             "would do nothing"),
        Case("train config", "--max_staleness 3 without async_rollouts (50)", train_flags(
            base, "--max_staleness", "3"), "max_staleness=3 does nothing", fallback=True),
        Case("train config", "--rollout_correction_cap 3 with none (50)", train_flags(
            base, "--rollout_correction_cap", "3"), "rollout_correction_cap=3.0 does nothing",
            fallback=True),
        Case("eval", "--trials 3 with the random agent (50)", cli(
            "eval", "--env", "PaW/Shelf-v0", "--agent", "random", "--trials", "3", "--limit",
            "1", "--output_dir", "{work}/eval"), "trials=3 does nothing", fallback=True),
        Case("eval", "PaW/Remote-v0 with the expert agent (50)", cli(
            "eval", "--env", "PaW/Remote-v0", "--agent", "expert"), "has no scripted expert"),
        Case("play", "PaW/Remote-v0 with the expert agent (50)", cli(
            "play", "--env", "PaW/Remote-v0"), "has no scripted expert"),
        Case("trl", "task_dataset of CartPole-v1 (50)", api(lambda work: _task_dataset(
            "CartPole-v1", [0])), "not text"),
        Case("trl", "task_dataset of seed 1.7 (50)", api(lambda work: _task_dataset(
            "PaW/Shelf-v0", [1.7])), "task_seeds[0]=1.7"),
        Case("trl", "EnvRollout(invalid_penalty=nan) (50)", api(lambda work: _env_rollout(
            "PaW/Shelf-v0", invalid_penalty=float("nan"))), "invalid_penalty=nan"),
        Case("trl", "EnvTools(max_steps=0) (50)", api(lambda work: _env_tools(max_steps=0)),
             "max_steps=0"),
        # -- the campaign's other findings ---------------------------------------------------
        Case("eval", "a state.json whose config is a string (50)", _eval_checkpoint(
            lambda c: (c / "state.json").write_text(json.dumps({
                **json.loads((c / "state.json").read_text()), "config": "a string"}))),
            "state.json"),
        Case("train", "--model an sft output with a flipped byte (50)", _on_model(
            "train", _flipped_output), "is damaged: its size or sha256"),
        Case("train", "--init_checkpoint a model with a flipped byte (50)", _init_flipped,
             "is damaged: its size or sha256"),
        *[Case(command, f"{what} a game whose grammar is code (50)", run,
               "grammar' is not ALFWorld's stock")
          for command, what, run in [
              ("sft", "--record_env of", _alfworld_with_code("sft")),
              ("train-wm", "--record_env of", _alfworld_with_code("train-wm")),
              ("alfworld", "gym.make of", api(_alfworld_with_code(None)))]],
        # -- issue 60: a damaged checkpoint the run writes again; records believed too far --
        *[Case("resume", f"{what}, written as a new file, in the newest checkpoint (60)",
               _resume(_as_new_file(name, change)), "moved step-000002 aside whole",
               fallback=True)
          for what, name, change in [
              ("a flipped optimizer byte", "optimizer.safetensors", _flipped),
              ("a truncated optimizer.json", "optimizer.json", lambda data: data[:20]),
              ("a state.json missing a field", "state.json", _state_edit("scheduler", None)),
              ("a state.json with a bad collapse value", "state.json",
               _state_edit("collapse", {"best_rate": "high"}))]],
        Case("resume", "a user's checkpoints/step-000002-backup/ (60)", _resume_beside_backup,
             "from step-000002", fallback=True,
             keeps=("run/checkpoints/step-000002-backup/notes.txt",)),
        Case("outputs", "a manifest record of the user's notes with their exact digest (60)",
             api(_forged_record), "not where `paw-gym sft` writes", fallback=True,
             keeps=("sft/mynotes.txt",)),
        *[Case("eval", f"{what} and a flipped weight byte (60)",
               _eval_model(_believed_no_more(edit)), words, fallback=True)
          for what, edit, words in [
              ("an unreadable manifest", None, "cannot be read"),
              ("a weight record with size 'abc'", {"size": "abc"}, "cannot believe")]],
        Case("play", "PaW/Text-v0 over CartPole-v1, which renders through pygame (60)",
             cli("play", "--env", "PaW/Text-v0", "--env_kwargs", "env_id=CartPole-v1"),
             "cannot show its state as text"),
        Case("replay", "a folder named x.jsonl in a replay (60)", api(_replay_with_folder),
             "is not a file"),
        Case("play", "--replay a symlink loop (60)", _play_into_loop,
             "symlink that leads to no folder"),
        Case("build-tiny-model", "--imports a module that raises (60)", _import_raising,
             "raised RuntimeError when imported"),
        *[Case(command, "--max_new_tokens beyond the model's context (60)", run,
               "leaves no room for the prompt")
          for command, run in [
              ("eval", lambda work: cli("eval", "--checkpoint", str(_tiny(work)), "--env",
                                        "PaW/Shelf-v0", "--max_new_tokens", "100000",
                                        "--output_dir", "{work}/eval")(work)),
              ("train", lambda work: cli("train", "--model", str(_tiny(work)), "--env_id",
                                         "PaW/Shelf-v0", "--max_new_tokens", "100000",
                                         "--output_dir", "{work}/run")(work))]],
        Case("resume", "a replay shard edited by hand, then --resume from step 1 (60)",
             _resume_over_edited_shard, "changed since the run wrote it", fallback=True),
        Case("resume", "a native run resumed with PAW_GYM_NUMERICS=portable (60)",
             _resume_portable, "numerics mode and this run computes in 'portable'",
             fallback=True),
    ]


# -- issue 41: the output guard --------------------------------------------------------------
#: The commands that write an output folder, with a quick real run into ``{work}/out`` (the
#: demo's is its default, minutes: only its refusals before any work are tried).
OUTPUT_COMMANDS = {
    "build-tiny-model": ["build-tiny-model", "--env", "PaW/Shelf-v0", "--size", "nano",
                         "--episodes", "2", "--output_dir", "{work}/out"],
    "sft": ["sft", "--record-env", "PaW/Shelf-v0", "--episodes", "2", "--model", "{work}/tiny",
            "--replay", "{work}/demos", "--output_dir", "{work}/out", "--epochs", "1",
            "--successful_only", "false", "--progress", "false"],
    "train-wm": ["train-wm", "--record_env", "PaW/Shelf-v0", "--record_episodes", "2",
                 "--model", "{work}/tiny", "--method", "sft", "--steps", "1", "--batch_size",
                 "2", "--output_dir", "{work}/out", "--progress", "false"],
    "train": ["train", "--model", "{work}/tiny", "--env_id", "PaW/Shelf-v0", "--total_steps",
              "1", "--n_groups", "1", "--group_size", "2", "--max_new_tokens", "4",
              "--max_episode_steps", "2", "--progress", "false", "--output_dir", "{work}/out"],
    "demo": ["demo", "--output_dir", "{work}/out"],
}
#: What :func:`_users_files` adds, relative to the scratch folder.
USERS_FILES = ("out/notes.txt", "out/mine/a.txt", "outside/data.txt")


def _users_files(work: Path) -> None:
    """A file, a folder and a symlink to data outside, added to ``{work}/out`` by the user."""
    write("out/notes.txt", "the user's notes")(work)
    write("out/mine/a.txt", "the user's folder")(work)
    write("outside/data.txt", "the user's data")(work)
    (work / "out" / "data").symlink_to(work / "outside", target_is_directory=True)


def _overwrite_beside_users_files(command: str) -> Callable[[Path], int]:
    def run(work: Path) -> int:
        _tiny(work)
        if cli(*OUTPUT_COMMANDS[command])(work) != 0:
            return 1
        _users_files(work)
        return cli(*OUTPUT_COMMANDS[command], "--overwrite", "true")(work)
    return run


def _overwrite_over(command: str, name: str) -> Callable[[Path], int]:
    """``--overwrite true`` into a folder holding the user's own file at a name the command
    writes (a folder of the user's, never written by paw-gym)."""
    def run(work: Path) -> int:
        _tiny(work)
        write(f"out/{name}", "the user's own")(work)
        return cli(*OUTPUT_COMMANDS[command], "--overwrite", "true")(work)
    return run


def _while_held(command: str) -> Callable[[Path], int]:
    """The command into a folder another process is writing."""
    def run(work: Path) -> int:
        from tests.common import held_by_another_process

        _tiny(work)
        with held_by_another_process(work / "out"):
            return cli(*OUTPUT_COMMANDS[command], "--overwrite", "true")(work)
    return run


def _model_output(work: Path, finish: bool) -> Path:
    """The tiny model saved through the output guard into ``{work}/sft``, as ``sft`` saves;
    not finished (a kill before the end) unless ``finish``."""
    import shutil

    from run_files.outputs import MODEL_FILES, claim_folder

    output = claim_folder(work / "sft", "sft", False, writes=MODEL_FILES)
    with output.staged(".") as staging:
        shutil.copytree(_tiny(work), staging, dirs_exist_ok=True)
    output.finish() if finish else output.release()
    return work / "sft"


def _incomplete_output(work: Path) -> Path:
    return _model_output(work, finish=False)


def _flipped_output(work: Path) -> Path:
    out = _model_output(work, finish=True)
    _flip_a_byte("*.safetensors")(out)
    return out


def _flip_a_byte(pattern: str) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        path = next(folder.glob(pattern))
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 1  # in the tensor data: the header stays valid
        path.write_bytes(bytes(data))
    return damage


def _as_new_file(pattern: str, change: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    """A checkpoint's file changed as an editor or a copy changes it: a new file (inode) in
    its place."""
    def damage(folder: Path) -> None:
        import os

        path = next(folder.glob(pattern))
        other = path.with_name(path.name + ".new")
        other.write_bytes(change(path.read_bytes()))
        os.replace(other, path)
    return damage


def _flipped(data: bytes) -> bytes:
    changed = bytearray(data)
    changed[len(changed) // 2] ^= 1
    return bytes(changed)


def _state_edit(key: str, value: Any) -> Callable[[bytes], bytes]:
    """state.json without ``key`` (``value`` None) or with ``value`` there."""
    def change(data: bytes) -> bytes:
        state = json.loads(data)
        state.pop(key) if value is None else state.update({key: value})
        return json.dumps(state).encode()
    return change


def _resume_beside_backup(work: Path) -> int:
    """``--resume`` with the user's copy of a checkpoint beside it, named like one."""
    import shutil

    out = _checkpoint_with(work, lambda checkpoint: None)
    backup = out / "checkpoints" / "step-000002-backup"
    shutil.copytree(out / "checkpoints" / "step-000002", backup)
    write("run/checkpoints/step-000002-backup/notes.txt", "the user's notes")(work)
    return cli("train", "--config", str(out / "config.yaml"), "--total_steps", "3",
               "--resume")(work)


def _forged_record(work: Path) -> None:
    """A manifest recording the user's notes with their exact size and sha256 (hand-edited
    or copied): ``sft --overwrite true`` must not take it for its own."""
    import hashlib

    from run_files.outputs import MODEL_FILES, claim_folder

    out = _model_output(work, finish=True)
    notes = write("sft/mynotes.txt", "the user's notes")(work).read_bytes()
    manifest = json.loads((out / ".paw-gym-output.json").read_text())
    manifest["files"]["mynotes.txt"] = {"size": len(notes),
                                        "sha256": hashlib.sha256(notes).hexdigest()}
    (out / ".paw-gym-output.json").write_text(json.dumps(manifest))
    claim_folder(out, "sft", True, writes=MODEL_FILES).release()


def _believed_no_more(edit: dict | None) -> Callable[[Path], Path]:
    """A saved model whose manifest is unreadable (``edit`` None) or whose weight record has
    ``edit`` in it, then a flipped weight byte: the hash check cannot run, and says so."""
    def make(work: Path) -> Path:
        out = _model_output(work, finish=True)
        marker = out / ".paw-gym-output.json"
        if edit is None:
            marker.write_bytes(b"\xff{not json")
        else:
            manifest = json.loads(marker.read_text())
            next(record for name, record in manifest["files"].items()
                 if name.endswith(".safetensors")).update(edit)
            marker.write_text(json.dumps(manifest))
        _flip_a_byte("*.safetensors")(out)
        return out
    return make


def _replay_with_folder(work: Path) -> None:
    from wrappers import WMReplay

    write("replay/a.jsonl", "")(work)
    (work / "replay" / "x.jsonl").mkdir()
    WMReplay.load(work / "replay")


def _play_into_loop(work: Path) -> int:
    (work / "loop").symlink_to(work / "loop")
    return cli("play", "--env", "PaW/Shelf-v0", "--episodes", "1", "--replay",
               "{work}/loop")(work)


def _import_raising(work: Path) -> int:
    import sys

    write("raising_60.py", "raise RuntimeError('boom at import')\n")(work)
    sys.path.insert(0, str(work))
    try:
        return cli("build-tiny-model", "--imports", "raising_60", "--env", "PaW/Shelf-v0",
                   "--output_dir", "{work}/out")(work)
    finally:
        sys.path.remove(str(work))
        sys.modules.pop("raising_60", None)


def _resume_over_edited_shard(work: Path) -> int:
    """The user's edit of update 2's replay shard (a new file), then a resume from step 1,
    which writes update 2's shard again."""
    import os

    out = _checkpoint_with(work, lambda checkpoint: None)
    edited = write("run/replay/update-000002.jsonl.new", "the user's notes\n")(work)
    os.replace(edited, out / "replay" / "update-000002.jsonl")
    return cli("train", "--config", str(out / "config.yaml"), "--resume",
               str(out / "checkpoints" / "step-000001"))(work)


def _resume_portable(work: Path) -> int:
    """A run made in native numerics, resumed in portable: it goes on, and says so."""
    import os

    from training.infra.numerics import MODES

    out = _checkpoint_with(work, lambda checkpoint: None)
    before = {name: os.environ.get(name) for name in MODES["portable"]}
    os.environ.update(MODES["portable"])
    try:
        return cli("train", "--config", str(out / "config.yaml"), "--total_steps", "3",
                   "--resume")(work)
    finally:
        for name, value in before.items():
            os.environ.pop(name, None) if value is None else os.environ.update({name: value})


def _eval_model(make: Callable[[Path], Path]) -> Callable[[Path], int]:
    def run(work: Path) -> int:
        return cli("eval", "--env", "PaW/Shelf-v0", "--checkpoint", str(make(work)), "--limit",
                   "1", "--output_dir", "{work}/eval")(work)
    return run


def _on_model(command: str, make: Callable[[Path], Path]) -> Callable[[Path], int]:
    """``command`` of :data:`OUTPUT_COMMANDS` with ``--model`` the folder ``make`` leaves."""
    def run(work: Path) -> int:
        model = str(make(work))
        return cli(*[a.replace("{work}/tiny", model) for a in OUTPUT_COMMANDS[command]])(work)
    return run


def _serve_env_on_a_taken_port(work: Path) -> int:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        return cli("serve-env", "--env", "PaW/Shelf-v0", "--port",
                   str(taken.getsockname()[1]))(work)


def _overwrite_beside(command: str, planted: str) -> Callable[[Path], int]:
    """The command once, then ``--overwrite true`` after the user put ``planted`` where the
    guard once recorded a pattern."""
    def run(work: Path) -> int:
        _tiny(work)
        if cli(*OUTPUT_COMMANDS[command])(work) != 0:
            return 1
        write(f"out/{planted}", "the user's own")(work)
        return cli(*OUTPUT_COMMANDS[command], "--overwrite", "true")(work)
    return run


def _own_file_symlinked(command: str, own: str) -> Callable[[Path], int]:
    """The guard's lock, manifest or journal a symlink to a file of the user's."""
    def run(work: Path) -> int:
        _tiny(work)
        write("precious.txt", "the user's precious file")(work)
        (work / "out").mkdir()
        (work / "out" / own).symlink_to(work / "precious.txt")
        return cli(*OUTPUT_COMMANDS[command], "--overwrite", "true")(work)
    return run


def _hand_edited_manifest(command: str) -> Callable[[Path], int]:
    """A manifest edited to claim the user's files: a pattern, a digest of other content, a
    path outside the folder with the right digest."""
    def run(work: Path) -> int:
        import hashlib

        _tiny(work)
        if cli(*OUTPUT_COMMANDS[command])(work) != 0:
            return 1
        write("out/notes.txt", "the user's notes")(work)
        precious = write("precious.txt", "the user's precious file")(work)
        manifest = json.loads((work / "out" / ".paw-gym-output.json").read_text())
        exact = {"size": precious.stat().st_size,
                 "sha256": hashlib.sha256(precious.read_bytes()).hexdigest()}
        manifest["files"].update({"**": exact, "notes.txt": exact, "../precious.txt": exact,
                                  str(precious): exact})
        manifest["written"] = ["**"]
        (work / "out" / ".paw-gym-output.json").write_text(json.dumps(manifest))
        return cli(*OUTPUT_COMMANDS[command], "--overwrite", "true")(work)
    return run


def _replaced_by_the_user(command: str, name: str, folder: bool | None) -> Callable[[Path], int]:
    """The command once, then the user replaces its recorded ``name`` with a folder of theirs
    (``folder``), a symlink to data of theirs (False) or a file of theirs (None)."""
    def run(work: Path) -> int:
        import shutil

        _tiny(work)
        argv = OUTPUT_COMMANDS[command] + (["--save_every", "1"] if command == "train" else [])
        if cli(*argv)(work) != 0:
            return 1
        target = work / "out" / name
        shutil.rmtree(target) if target.is_dir() else target.unlink()
        if folder:
            write(f"out/{name}/mine.txt", "the user's")(work)
        elif folder is False:
            write("outside/data.txt", "the user's data")(work)
            target.symlink_to(work / "outside", target_is_directory=True)
        else:
            write(f"out/{name}", "the user's own")(work)
        return cli(*argv, "--overwrite", "true")(work)
    return run


def _lock_deleted_by_hand(work: Path) -> None:
    """A second command takes the folder after the first one's lock file was deleted by hand:
    the first stops at its next manifest write instead of writing over the second's."""
    from run_files.outputs import claim_folder
    from tests.common import held_by_another_process

    first = claim_folder(work / "out", "sft", False)
    (work / "out" / ".paw-gym-lock").unlink()
    with held_by_another_process(work / "out", overwrite=True):
        try:
            with first.staged(".") as staging:
                (staging / "model.safetensors").write_bytes(b"w")
        finally:
            first.release()


def _record_outside(work: Path) -> int:
    """A manifest whose weight record names a 1 TB (sparse) file, beside the model and
    outside its folder: refused from the sizes, not after hours of hashing."""
    out = _model_output(work, finish=True)
    with open(write("big.bin", "the user's")(work), "r+b") as handle:
        handle.truncate(1 << 40)
    manifest = json.loads((out / ".paw-gym-output.json").read_text())
    record = {"size": 1 << 40, "sha256": "0" * 64}
    manifest["files"].update({"../big.bin": record, str(work / "big.bin"): record})
    (out / ".paw-gym-output.json").write_text(json.dumps(manifest))
    with open(next(out.glob("*.safetensors")), "r+b") as handle:
        handle.truncate(1 << 40)  # the model's own weight file, now 1 TB too
    return cli("eval", "--env", "PaW/Shelf-v0", "--checkpoint", str(out), "--limit", "1",
               "--output_dir", "{work}/eval")(work)


def _resume_with(*flags: str) -> Callable[[Path], int]:
    def run(work: Path) -> int:
        import shutil

        out = _checkpoint_with(work, lambda checkpoint: None)
        shutil.copytree(work / "tiny", work / "other")
        return cli("train", "--config", str(out / "config.yaml"), "--total_steps", "3",
                   "--resume", *[f.replace("{work}", str(work)) for f in flags])(work)
    return run


def _eval_model_other(work: Path) -> int:
    """``eval --checkpoint`` a saved whole model (an sft output) with a ``--model`` it ignores."""
    out = _model_output(work, finish=True)
    return cli("eval", "--env", "PaW/Shelf-v0", "--checkpoint", str(out), "--model",
               str(_tiny(work)), "--limit", "1", "--output_dir", "{work}/eval")(work)


def _init_flipped(work: Path) -> int:
    model = _flipped_output(work)
    return cli(*[a.replace("{work}/tiny", str(model)) for a in OUTPUT_COMMANDS["train"]],
               "--init_checkpoint", str(model), "--lora", "false")(work)


def _alfworld_with_code(command: str | None) -> Callable[[Path], Any]:
    """A game whose grammar is not ALFWorld's stock one (TextWorld would run it as code)."""
    def run(work: Path) -> Any:
        import gymnasium as gym

        import paw_gym  # noqa: F401

        game = {"pddl_domain": "(define (domain x))", "pddl_problem": "(define (problem y))",
                "grammar": '{"task": [{"rhs": "#import os#"}]}', "walkthrough": [],
                "solvable": True}
        trial = "alf/json_2.1.1/train/pick_and_place_simple-x/trial-1"
        write(f"{trial}/game.tw-pddl", json.dumps(game))(work)
        write(f"{trial}/traj_data.json", json.dumps({"task_type": "pick_and_place_simple",
                                                     "pddl_params": {}}))(work)
        kwargs = f"data_dir={work / 'alf'}"
        if command is None:
            return gym.make("PaW/ALFWorld-v0", data_dir=str(work / "alf"), progress=False)
        _tiny(work)
        flag = "--env_kwargs" if command == "sft" else "--record_env_kwargs"
        agent = ["--record_agent", "expert"] if command == "train-wm" else []
        return cli(command, "--record_env", "PaW/ALFWorld-v0", flag, kwargs, *agent,
                   "--model", "{work}/tiny", "--output_dir", "{work}/out")(work)
    return run


def _task_dataset(env_id: str, seeds: list) -> Any:
    from training.integrations.trl import task_dataset

    return task_dataset(env_id, seeds)


def _env_tools(**settings: Any) -> Any:
    from training.integrations.trl import EnvTools

    return EnvTools("PaW/Shelf-v0", **settings)


def _paw_grpo_config(work: Path, **settings: Any) -> Any:
    from training.integrations.trl import PaWGRPOConfig

    return PaWGRPOConfig(output_dir=str(work / "trl"), use_cpu=True, **settings)


def _env_rollout(env_id: str, max_steps: int = 6, **settings: Any) -> Any:
    from training.integrations.trl import EnvRollout

    return EnvRollout(env_id, max_steps=max_steps, **settings)


def _task_seed(prompt: Any) -> int:
    from training.integrations.trl import task_seed

    return task_seed(prompt)


def _pretrain(work: Path, **settings: Any) -> Any:
    from training.warmstart.pretrain import PretrainConfig, run_pretrain

    return run_pretrain(PretrainConfig(model=str(_tiny(work)), replay=str(work / "no-replay"),
                                       output_dir=str(work / "base"), progress=False,
                                       **settings))


def _replay_with(work: Path, line: str) -> Path:
    from tests.envs import GuessNumberEnv
    from wrappers import HistoryPrompt, ParseAction, RecordTransitions, WMReplay

    replay = WMReplay(work / "replay")
    env = RecordTransitions(ParseAction(HistoryPrompt(GuessNumberEnv())), replay)
    env.reset(seed=0)
    env.step("<action>guess 1</action>")
    shard = next((work / "replay").glob("*.jsonl"))
    with open(shard, "a", encoding="utf-8") as handle:
        handle.write(line)
    return work / "replay"


def _load_replay_strict(work: Path, change: dict) -> None:
    from wrappers import WMReplay

    good = WMReplay.load(_replay_with(work, "")).to_list()[0]
    shard = next((work / "replay").glob("*.jsonl"))
    with open(shard, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({**good, **change}) + "\n")
    WMReplay.load(work / "replay", strict=True)


def _load_replay_raw(work: Path, line: str) -> None:
    from wrappers import WMReplay

    WMReplay.load(_replay_with(work, line), strict=True)


def _webshop_items(work: Path, items: str) -> None:
    from paw_gym.webshop.loader import load_official_products

    write("ws/items_shuffle_1000.json", items)(work)
    write("ws/items_ins_v2_1000.json", "{}")(work)
    load_official_products(work / "ws")


def _qa(work: Path, text: str) -> None:
    from paw_gym.searchqa.data import load_qa

    load_qa(write("qa.json", text)(work))


def _corpus(work: Path, text: str) -> None:
    from paw_gym.searchqa.data import load_corpus

    load_corpus(write("corpus.jsonl", text)(work))


def _bad_alfworld_game(work: Path) -> None:
    import gymnasium as gym

    import paw_gym  # noqa: F401

    game = {"pddl_domain": "(define (domain x) (:predicates (p ?x)", "pddl_problem": "(",
            "grammar": "{}", "walkthrough": [], "solvable": True}
    trial = "alf/json_2.1.1/train/pick_and_place_simple-x/trial-1"
    write(f"{trial}/game.tw-pddl", json.dumps(game))(work)
    write(f"{trial}/traj_data.json", json.dumps({"task_type": "pick_and_place_simple",
                                                 "pddl_params": {}}))(work)
    gym.make("PaW/ALFWorld-v0", data_dir=str(work / "alf"), progress=False).reset(seed=0)


def classify(case: Case, work: Path) -> tuple[str, str]:
    verdict, message = _verdict(case, work)
    lost = [name for name in case.keeps if not _intact(work / name)]
    return ("lost", f"lost {lost}: {message}") if lost else (verdict, message)


def _intact(path: Path) -> bool:
    """A user's file of :func:`_users_files`, as it was written."""
    mark = "the user's".encode()
    if not path.is_file():
        return False
    with open(path, "rb") as handle:  # the start only: one is a 1 TB sparse file
        return handle.read(len(mark)) == mark


def _verdict(case: Case, work: Path) -> tuple[str, str]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            result = case.run(work)
    except CLEAR_ERRORS as error:
        message = str(error)
        return ("clear" if case.expect.lower() in message.lower() else "unclear"), message
    except SystemExit as exit_:  # argparse errors
        return ("clear" if exit_.code == 2 else "traceback"), err.getvalue().strip()[-300:]
    except BaseException as error:  # noqa: BLE001 - the point is to catch what escapes
        return "traceback", f"{type(error).__name__}: {error}"[:300]
    message = err.getvalue().strip()
    if result == 2:
        # Progress bars of the work before the check may precede it; the error is one line.
        errors = [line for line in message.splitlines() if ": error: " in line]
        ok = len(errors) == 1 and case.expect.lower() in errors[0].lower()
        return ("clear" if ok else "unclear"), (errors[-1] if errors else message)[-300:]
    if isinstance(result, int) and result != 0:
        return "traceback", f"exit {result}: {message[-300:]}"
    if case.fallback:
        warned = [line for line in message.splitlines() if case.expect.lower() in line.lower()]
        if warned:
            return "clear", "fell back: " + warned[0][-250:]
    return "accepted", message[-300:]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=None, help="run the cases whose name contains this")
    parser.add_argument("--out", default=str(C.RESULTS / "bad_inputs"))
    args = parser.parse_args(argv)
    C.set_threads(1)
    rows = []
    for case in cases():
        if args.only and args.only not in case.name:
            continue
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            verdict, message = classify(case, Path(folder))
        rows.append({"area": case.area, "case": case.name, "verdict": verdict,
                     "message": message.replace("\n", " ")[:200].replace(folder, "<tmp>"),
                     "seconds": round(time.perf_counter() - start, 2)})
        print(f"{verdict:9s} {case.area}: {case.name}: {rows[-1]['message'][:110]}", flush=True)
    counts = {v: sum(r["verdict"] == v for r in rows)
              for v in ("clear", "unclear", "traceback", "accepted", "lost")}
    table = ["| area | bad input | verdict | message |", "|---|---|---|---|"]
    table += [f"| {r['area']} | {r['case']} | {r['verdict']} | {r['message'][:120]} |"
              for r in rows]
    summary = (f"{len(rows)} bad inputs tried: {counts['clear']} clear errors, "
               f"{counts['unclear']} unclear errors, {counts['traceback']} tracebacks, "
               f"{counts['accepted']} accepted, {counts['lost']} lost a user's file")
    print(summary)
    if not args.only:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out + ".md").write_text(summary + "\n\n" + "\n".join(table) + "\n",
                                          encoding="utf-8")
        Path(args.out + ".json").write_text(json.dumps({"counts": counts, "rows": rows},
                                                       indent=1), encoding="utf-8")
    return {"counts": counts, "rows": rows}


if __name__ == "__main__":
    main()
