"""``paw-gym train``: PaW / vanilla RL training from a YAML config with flag overrides."""

from __future__ import annotations

from dataclasses import dataclass, field

from training.infra.checked_config import CheckedConfig


@dataclass
class TrainArguments(CheckedConfig):
    """Where ``paw-gym train`` starts from."""

    resume: str | None = field(default=None, metadata={"nargs": "?", "const": "latest"})
    """Continue from a checkpoint directory (--resume alone: the latest one in output_dir)."""


def add_parser(subparsers) -> None:
    from training.commands.flags import add_command
    from training.config import TrainConfig

    add_command(subparsers, "train", TrainArguments, config=TrainConfig,
                help="train a policy with GRPO/GiGPO/RLOO/PPO (+ PaW world-model co-training)",
                description="Every TrainConfig field is a flag: paw-gym train --config "
                            "configs/x.yaml --algo gigpo --paw true ... (flags win over the "
                            "file).").set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from training.commands.common import UserError, check_env, require_writable
    from training.commands.flags import arguments_from
    from training.config import TrainConfig, first_steps

    config = arguments_from(args, TrainConfig)
    resume = arguments_from(args, TrainArguments).resume
    check_env(config.env_id, config.env_kwargs)
    from agents.hf_policy import check_model_source  # torch: once the config is valid
    from training.infra.checkpoint import (CheckpointError, CheckpointMismatch, CheckpointWriteError,
                                           check_output_dir)
    from training.infra.distributed import check_group_count, launched_world_size

    resume = True if resume == "latest" else resume
    # Everything a user can get wrong, before the model loads and before any file is touched.
    try:
        check_output_dir(config.output_dir, bool(resume), config.overwrite)
        check_model_source(config.model)
        check_group_count(config, launched_world_size())
        if config.init_checkpoint and not Path(config.init_checkpoint).is_dir():
            raise FileNotFoundError(f"init_checkpoint {config.init_checkpoint!r} is not a folder")
    except (ValueError, FileNotFoundError, FileExistsError) as error:
        first = first_steps(args.config) if isinstance(error, FileNotFoundError) else None
        raise UserError(str(error) + (f"; {args.config} says to run first: {first}"
                                      if first else "")) from error
    require_writable(config.output_dir, "--output_dir")
    from training.infra.distributed import shutdown
    from training.trainer import PaWTrainer

    try:
        trainer = PaWTrainer(config)
        history = trainer.train(resume=resume)
    except (FileNotFoundError, CheckpointError, CheckpointMismatch, CheckpointWriteError) as error:
        raise UserError(str(error)) from error
    shutdown()
    if history and trainer.world.is_main:  # once per launch
        last = history[-1]
        print(f"step {last['step']}: reward {last['reward']:.3f}, success {last['success']:.3f}; "
              f"metrics and curves in {config.output_dir}")
    return 0
