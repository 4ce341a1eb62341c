"""``paw-gym eval``: per-task success / score tables for a model, a checkpoint or a baseline.

The protocol is :func:`training.evaluate.plan_evaluation`'s: the env's held-out split, every
task of it once (``--repeats K``: K times; ``--limit N``: a stratified subset). A trainer
checkpoint is evaluated with the env and prompt settings it was trained with (env id,
env_kwargs, template, history length, step limit, token budget) unless a flag overrides one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

AGENTS = ("policy", "react", "reflexion", "random", "expert")

from training.commands.flags import former_names
from training.infra.checked_config import (CheckedConfig, bounded, env_id, file_name,
                                           input_folder, model_name, only_with, output_folder,
                                           text)

#: The agents that play a model (the others ignore the model's settings).
MODEL_AGENTS = ("policy", "react", "reflexion")
_WITH_MODEL = only_with("--agent is policy, react or reflexion",
                        lambda c: c.agent in MODEL_AGENTS)


@dataclass
class EvalArguments(CheckedConfig):
    """What ``paw-gym eval`` plays and where it writes the tables."""

    env: str | None = env_id(None)
    """Env id, e.g. PaW/WebShop-v0 (default: the env the --checkpoint was trained on)."""
    model: str | None = model_name(None, **_WITH_MODEL)
    """Hub name, model folder, .gguf file or offline model name (smollm2-135m-instruct,
    qwen2.5-coder-0.5b-instruct)."""
    system_prompt: str | None = text(None, **_WITH_MODEL)
    """The system message before every prompt (default: the --checkpoint's, else none: a
    chat template's own default system message is replaced by an empty one;
    ``agents.chat.ChatEncoder``)."""
    checkpoint: str | None = input_folder(None)
    """Trainer checkpoint, saved model or LoRA adapter directory; a training run or
    ``paw-gym demo`` folder: its latest checkpoint (named in the output)."""
    agent: Literal["policy", "react", "reflexion", "random", "expert"] = "policy"
    """policy (the model as is), react, reflexion, random or expert."""
    split: str = text("held-out")
    """Env split: 'held-out' (the env's held-out split: WebShop test, ALFWorld
    eval_out_of_distribution, ...), a split name, or 'none' for an env without splits."""
    limit: int | None = bounded(None, 1, 10**7, note="none: every task")
    """Play a deterministic stratified subset of this many tasks (default: every task of the
    split; an env that generates its tasks from the seed plays 100 seeds)."""
    repeats: int = bounded(1, 1, 10**6)
    """Episodes per task (same task, different samples)."""
    seed: int = 0
    """Task i is reset with seed + i; also seeds the sampling."""
    temperature: float | None = bounded(None, 0, 100, note="0: greedy", **_WITH_MODEL)
    """Sampling temperature (default: 0.4, search QA 0.0, as the paper validates)."""
    max_new_tokens: int | None = bounded(None, 1, 10**6, **_WITH_MODEL)
    """Token budget per action (default: the checkpoint's, else 512)."""
    max_steps: int | None = bounded(None, 1, 10**5)
    """Per-episode step limit on top of the env's (default: the checkpoint's
    max_episode_steps)."""
    history_length: str | None = text(None, pattern=r"[0-9]+|all|none",
                                      what="a non-negative integer or all")
    """Recent steps shown in the prompt: an integer or 'all' (default: the checkpoint's, else
    the env's preset)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Env constructor arguments, merged over the checkpoint's."""
    trials: int = bounded(1, 1, 1000, **only_with("--agent is reflexion",
                                                  lambda c: c.agent == "reflexion"))
    """Reflexion trials per task."""
    num_env_workers: int = bounded(0, 0, 1024)
    """Env worker processes (0: envs step in this process; 2 halves ALFWorld's env time on
    2 cores)."""
    device: str | None = text(None, **_WITH_MODEL)
    """Torch device of the policy (default: cuda when available, else cpu)."""
    output_dir: str = output_folder("runs/eval", **former_names("out"))
    """Output directory of the tables."""
    name: str | None = file_name(None)
    """File stem of the tables (default: <agent>_<env>_<split>)."""
    overwrite: bool = False
    """Replace tables of the same name in --output_dir (refused otherwise)."""
    save_trajectories: bool = False
    """Also write every episode (prompt, raw output, parsed action, observation, reward per
    step) to <name>.trajectories.jsonl."""
    show: int = bounded(0, 0, 10**6)
    """Print the first N episodes step by step (what the model wrote and what was parsed)."""
    replay: str | None = output_folder(None)
    """Also append every transition to this WM replay folder (the schema of expert demos and
    training rollouts; e.g. for paw-gym eval-wm or train-wm)."""


def add_parser(subparsers) -> None:
    from training.commands.flags import add_command

    add_command(subparsers, "eval", EvalArguments,
                help="evaluate a model, checkpoint or baseline per task type (MD + JSON + CSV)",
                description="Plays every task of the env's held-out split once and writes "
                            "per-task-type tables.").set_defaults(func=run)


def run(args) -> int:
    from training.commands.flags import arguments_from

    return evaluate_command(arguments_from(args, EvalArguments))


def checkpoint_state(checkpoint: str | None) -> dict[str, Any]:
    """A trainer checkpoint's ``state.json`` (its ``step`` and the TrainConfig it was trained
    with, ``config``) through its schema (a damaged one is a ``DataFileError`` naming it), or
    {} for anything else."""
    from training.infra.data_files import read_checkpoint_state

    if checkpoint is None or not (Path(checkpoint) / "state.json").is_file():
        return {}
    return read_checkpoint_state(checkpoint)


def resolve_settings(arguments: EvalArguments, trained: dict[str, Any]) -> dict[str, Any]:
    """Env and prompt settings: a flag, else the checkpoint's training setting, else the default.

    Raises ``ValueError`` for a bad ``history_length`` or a missing env id.
    """
    env_id = arguments.env or trained.get("env_id")
    if not env_id:
        raise ValueError("give --env (or a trainer --checkpoint, whose env is used)")
    # A checkpoint's settings describe its own env only: evaluated on another env, it gets
    # that env's defaults.
    same_env = env_id == trained.get("env_id")

    def pick(flag: Any, key: str, default: Any) -> Any:
        if flag is not None:
            return flag
        return trained[key] if same_env and trained.get(key) is not None else default

    history: Any = "preset"
    if arguments.history_length is not None:
        text = arguments.history_length.strip().lower()
        if text in ("all", "none"):
            history = None
        elif text.isdigit():
            history = int(text)
        else:
            raise ValueError(f"--history_length {arguments.history_length!r} is invalid; give "
                             "a non-negative integer or 'all'")
    elif same_env and "history_length" in trained:
        history = trained["history_length"]
    env_kwargs = {**(trained.get("env_kwargs") or {} if same_env else {}),
                  **arguments.env_kwargs}
    env_kwargs.pop("split", None)  # the evaluation split is --split's
    return {
        "env_id": env_id, "env_kwargs": env_kwargs, "history_length": history,
        "template": trained.get("template") if same_env else None,
        "action_format": trained.get("action_format") if same_env else None,
        "invalid_penalty": trained.get("invalid_penalty") if same_env else None,
        "max_new_tokens": pick(arguments.max_new_tokens, "max_new_tokens", 512),
        "max_steps": pick(arguments.max_steps, "max_episode_steps", None),
        "system_prompt": arguments.system_prompt if arguments.system_prompt is not None
        else trained.get("system_prompt"),
    }


def build_agent(arguments: EvalArguments, env_id: str, system_prompt: str | None = None):
    """The agent named by ``--agent`` (loading the policy when it needs one, with
    ``system_prompt``)."""
    from agents.baselines import ExpertAgent, RandomAgent

    if arguments.agent == "random":
        return RandomAgent()
    if arguments.agent == "expert":
        return ExpertAgent()
    from training.evaluate import load_policy

    policy = load_policy(arguments.model, arguments.checkpoint, arguments.device, arguments.seed,
                         system_prompt)
    if arguments.agent == "policy":
        return policy
    from agents.prompting import ReActAgent, ReflexionAgent, expert_examples

    examples = expert_examples(env_id, 1)
    return ReActAgent(policy, examples) if arguments.agent == "react" else \
        ReflexionAgent(policy, examples=examples)


def evaluate_command(arguments: EvalArguments) -> int:
    from training.commands.common import UserError, claim_output_files
    from training.preflight import (check_context, check_env, check_expert, check_model,
                                    check_split, check_writable)
    from training.infra.checkpoint import check_model_override, resolve_checkpoint

    if arguments.model and arguments.agent in MODEL_AGENTS:
        check_model(arguments.model)
    if arguments.checkpoint:
        try:
            checkpoint, note = resolve_checkpoint(arguments.checkpoint)
            check_model_override(checkpoint, arguments.model)
        except (FileNotFoundError, ValueError) as error:
            raise UserError(f"--checkpoint: {error}") from error
        if note:
            print(note)
        arguments = replace(arguments, checkpoint=str(checkpoint))
    state = checkpoint_state(arguments.checkpoint)
    trained = dict(state.get("config") or {})
    try:
        settings = resolve_settings(arguments, trained)
        env_id = settings["env_id"]
        if arguments.agent in ("expert", "react", "reflexion"):  # they show the expert's steps
            check_expert(env_id, f"--agent {arguments.agent}")
        check_env(env_id, settings["env_kwargs"])
        from training.evaluate import HELD_OUT, plan_evaluation

        split = None if arguments.split.lower() == "none" else arguments.split
        if split not in (None, HELD_OUT):  # a split the env does not take: one clear line
            check_split(env_id, settings["env_kwargs"], split, name="--split")
        plan = plan_evaluation(env_id, split=split, limit=arguments.limit,
                               repeats=arguments.repeats,
                               seed=arguments.seed, env_kwargs=settings["env_kwargs"])
    except (ValueError, TypeError, FileNotFoundError) as error:
        raise UserError(str(error)) from error
    if arguments.agent in MODEL_AGENTS:
        check_context(arguments.checkpoint or arguments.model, settings["max_new_tokens"])
    name = arguments.name or "_".join(
        [arguments.agent, env_id.split("/")[-1], plan.split or "nosplit"])
    out = Path(arguments.output_dir)
    claim_output_files([out / f"{name}.{suffix}" for suffix in
                        ("md", "json", "csv", "trajectories.jsonl")], arguments.overwrite,
                       "--name", "--output_dir")
    if arguments.replay:
        check_writable(arguments.replay, "--replay")
    try:
        agent = build_agent(arguments, env_id, settings["system_prompt"])
    except (ValueError, FileNotFoundError, OSError) as error:
        raise UserError(str(error)) from error
    from training.evaluate import (evaluate, show_episodes, to_markdown, write_replay,
                                   write_tables, write_trajectories)

    meta = {"agent": arguments.agent, "model": arguments.model or trained.get("model"),
            "checkpoint": arguments.checkpoint, "checkpoint_step": state.get("step"),
            "arguments": asdict(arguments),
            "settings": {k: v for k, v in settings.items() if k != "env_id"}}
    print(f"evaluating {arguments.agent} on {env_id}, split {plan.split!r}: {len(plan.task_seeds)} "
          f"tasks" + (f" of {plan.split_size}" if plan.split_size else " (generated from seeds)")
          + f" x {plan.repeats} = {plan.episodes} episodes")
    result = evaluate(agent, env_id, plan, temperature=arguments.temperature,
                      max_new_tokens=settings["max_new_tokens"], max_steps=settings["max_steps"],
                      seed=arguments.seed, trials=arguments.trials, progress=True, meta=meta,
                      env_kwargs=settings["env_kwargs"], template=settings["template"],
                      action_format=settings["action_format"],
                      invalid_penalty=settings["invalid_penalty"],
                      history_length=settings["history_length"],
                      num_env_workers=arguments.num_env_workers)
    paths = write_tables(result, out, name)
    if arguments.save_trajectories:
        paths["trajectories"] = write_trajectories(result, out / f"{name}.trajectories.jsonl")
    elif (out / f"{name}.trajectories.jsonl").exists():  # --overwrite: no stale episodes left
        (out / f"{name}.trajectories.jsonl").unlink()
    if arguments.replay:
        paths["replay"] = write_replay(result, arguments.replay)
    if arguments.show:
        print(show_episodes(result, arguments.show))
    print(to_markdown(result, f"{arguments.agent} on {env_id} ({plan.split or 'no split'})"))
    print("tables: " + ", ".join(str(p) for p in paths.values()))
    return 0
