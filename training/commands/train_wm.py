"""``paw-gym train-wm``: train a world model on a WM replay (rwml, sft or cmae).

Examples:
  paw-gym play --env PaW/Shelf-v0 --agent random --episodes 200 --replay runs/shelf-replay
  paw-gym train-wm --method rwml --model runs/tiny-base --replay runs/shelf-replay \\
      --output_dir runs/wm-rwml --lr 1e-4 --steps 200
  paw-gym train-wm --method sft --model Qwen/Qwen2.5-0.5B-Instruct --lora true \\
      --record_env PaW/FrozenLake-v0 --record_agent policy --record_episodes 100 \\
      --output_dir runs/wm-sft

The model (or LoRA adapter) is saved to <output_dir>/model (`paw-gym eval-wm --checkpoint`
reads it), with metrics.jsonl and curves.png beside it. See docs/world_models.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from training.infra.checked_config import CheckedConfig, bounded, env_id, only_with

_WITH_RECORDING = only_with("record_env is given", lambda c: c.record_env is not None)


@dataclass
class RecordArguments(CheckedConfig):
    """Episodes to record into <output_dir>/replay before training (instead of --replay)."""

    record_env: str | None = env_id(None)
    """Record episodes of this env id first and train on them."""
    record_agent: Literal["expert", "random", "policy"] = field(default="policy",
                                                               metadata=_WITH_RECORDING)
    """Who plays them: expert, random, or policy (--model sampled at temperature 1, RWML's own
    rollouts)."""
    record_episodes: int = bounded(50, 1, 10**6, **_WITH_RECORDING)
    """Episodes to record (task seeds seed .. seed+N-1)."""
    record_env_kwargs: dict[str, Any] = field(default_factory=dict, metadata=_WITH_RECORDING)
    """Env constructor arguments for --record_env: key=value[,key=value] or a YAML mapping."""


def add_parser(subparsers) -> None:
    from training.commands.flags import add_command
    from training.world_model import WorldModelConfig

    add_command(subparsers, "train-wm", RecordArguments, config=WorldModelConfig,
                help="train a world model on a replay: RWML (GRPO), WM SFT or offline CMAE",
                description=__doc__).set_defaults(func=run)


def run(args) -> int:
    from training.commands.common import UserError, claim_output_folder
    from training.world_model.train import WM_WRITES
    from training.preflight import check_env, check_expert, check_model
    from training.commands.flags import arguments_from
    from training.world_model import WorldModelConfig, record_replay, train_world_model

    config = arguments_from(args, WorldModelConfig)  # types, bounds and _check_relations
    recording = arguments_from(args, RecordArguments)
    if config.replay and recording.record_env:
        raise UserError("give --replay or --record_env, not both (recorded episodes go to "
                        "<output_dir>/replay)")
    if recording.record_env:
        check_env(recording.record_env, recording.record_env_kwargs)
        if recording.record_agent == "expert":
            check_expert(recording.record_env, "--record_agent expert")
    check_model(config.model)  # before recording: a wrong --model must not cost that time
    if not recording.record_env and not config.replay:
        raise UserError("give --replay DIR (a WMReplay, e.g. from `paw-gym play --replay`) or "
                        "--record_env ENV to record one")
    claim_output_folder(config.output_dir, "train-wm", config.overwrite,
                        writes=WM_WRITES)
    if recording.record_env:
        replay = Path(config.output_dir) / "replay"
        record_replay(recording.record_env, recording.record_agent, recording.record_episodes,
                      replay, model=config.model, seed=config.seed,
                      temperature=config.temperature, max_new_tokens=config.max_new_tokens,
                      device=config.device, progress=config.progress,
                      **recording.record_env_kwargs)
        print(f"recorded {recording.record_episodes} {recording.record_agent} episodes of "
              f"{recording.record_env} into {replay}")
    try:
        model_dir, _ = train_world_model(config)
    except (ValueError, FileNotFoundError) as error:
        raise UserError(str(error)) from error
    print(f"saved to {model_dir} (metrics: {Path(config.output_dir) / 'metrics.jsonl'})")
    return 0
