"""``paw-gym train``: PaW / vanilla RL training from a YAML config with flag overrides."""

from __future__ import annotations


def add_parser(subparsers) -> None:
    from training.config import add_config_flags

    parser = subparsers.add_parser(
        "train", help="train a policy with GRPO/GiGPO/RLOO/PPO (+ PaW world-model co-training)",
        description="Every TrainConfig field is a flag: paw-gym train --config configs/x.yaml "
                    "--algo gigpo --paw true ...")
    parser.add_argument("--config", default=None, help="YAML file of TrainConfig fields")
    parser.add_argument("--resume", nargs="?", const="latest", default=None, metavar="CKPT",
                        help="continue from a checkpoint directory (no value: the latest one "
                             "in output_dir)")
    add_config_flags(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from training.cli import UserError, config_from_args, require_writable
    from training.config import TrainConfig

    config = config_from_args(args, TrainConfig)
    from agents.envs import check_env_settings  # gymnasium, torch: once the config is valid
    from agents.hf_policy import check_model_source
    from training.checkpoint import CheckpointError, check_output_dir

    resume = True if args.resume == "latest" else args.resume
    # Everything a user can get wrong, before the model loads and before any file is touched.
    try:
        check_output_dir(config.output_dir, bool(resume), config.overwrite_output_dir)
        check_env_settings(config.env_id, config.env_kwargs)
        check_model_source(config.model)
        if config.init_checkpoint and not Path(config.init_checkpoint).is_dir():
            raise FileNotFoundError(f"init_checkpoint {config.init_checkpoint!r} is not a folder")
    except (ValueError, FileNotFoundError, FileExistsError) as error:
        raise UserError(str(error)) from error
    require_writable(config.output_dir, "--output_dir")
    from training.trainer import PaWTrainer

    try:
        history = PaWTrainer(config).train(resume=resume)
    except (FileNotFoundError, CheckpointError) as error:
        raise UserError(str(error)) from error
    if history:
        last = history[-1]
        print(f"step {last['step']}: reward {last['reward']:.3f}, success {last['success']:.3f}; "
              f"metrics and curves in {config.output_dir}")
    return 0
