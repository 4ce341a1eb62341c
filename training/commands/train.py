"""``paw-gym train``: PaW / vanilla RL training from a YAML config with flag overrides."""

from __future__ import annotations

from dataclasses import dataclass

from training.infra.checked_config import CheckedConfig, bounded, input_folder


@dataclass
class TrainArguments(CheckedConfig):
    """Where ``paw-gym train`` starts from."""

    resume: str | None = input_folder(None, special=("latest",), nargs="?", const="latest")
    """Continue from a checkpoint directory (--resume alone: the latest one in output_dir)."""
    launch_timeout: float = bounded(120.0, 0, 86400, low_open=True, what="seconds")
    """Under torchrun / accelerate launch: seconds to wait for every process of the launch to
    join before giving up with one error line (a rank that never starts)."""


def add_parser(subparsers) -> None:
    from training.commands.flags import add_command
    from training.config import TrainConfig

    add_command(subparsers, "train", TrainArguments, config=TrainConfig,
                help="train a policy with GRPO/GiGPO/RLOO/PPO (+ PaW world-model co-training)",
                description="Every TrainConfig field is a flag: paw-gym train --config "
                            "configs/x.yaml --algo gigpo --paw true ... (flags win over the "
                            "file).").set_defaults(func=run)


def run(args) -> int:
    from training.commands.common import UserError
    from training.commands.flags import arguments_from
    from training.config import TrainConfig, first_steps
    from training.infra.checked_config import MissingInput
    from training.preflight import PreflightError, preflight

    def first(error: Exception) -> str:
        """What the --config file says to run first (its ``# first:`` line), for a missing
        file."""
        steps = first_steps(args.config) if getattr(error, "missing_file", False) or \
            isinstance(error.__cause__, MissingInput) else None
        return f"; {args.config} says to run first: {steps}" if steps else ""

    try:
        config = arguments_from(args, TrainConfig)
    except UserError as error:
        raise UserError(f"{error}{first(error)}") from None
    arguments = arguments_from(args, TrainArguments)
    resume = True if arguments.resume == "latest" else arguments.resume
    from training.infra.distributed import LaunchError, join_launch, launched_world_size

    try:  # everything a user can get wrong, before the model loads and any file is touched
        preflight(config, resume=resume or False, world_size=launched_world_size())
    except PreflightError as error:
        raise UserError(f"{error}{first(error)}") from None
    try:  # every process of a launch, before the model loads (bounded: a missing peer is one line)
        join_launch(config.device, arguments.launch_timeout)
    except LaunchError as error:
        raise UserError(str(error)) from None
    from training.infra.checkpoint import CheckpointError, CheckpointMismatch, CheckpointWriteError
    from training.infra.distributed import shutdown
    from training.trainer import PaWTrainer

    try:
        trainer = PaWTrainer(config)
        history = trainer.train(resume=resume)
    except (FileNotFoundError, CheckpointError, CheckpointMismatch, CheckpointWriteError) as error:
        raise UserError(str(error)) from error
    shutdown()
    if history and trainer.world.is_main:  # once per launch
        print(final_line(history, config.output_dir))
    return 0


def final_line(history: list[dict], output_dir: str) -> str:
    """The run's last line: held-out success first (what a run is judged by), then training
    success, as percentages."""
    last = history[-1]
    validated = next((row for row in reversed(history) if "val_success" in row), None)
    held_out = (f"held-out success {100 * validated['val_success']:.1f} % (validated at step "
                f"{validated['step']})" if validated else
                "held-out success not measured (val_every 0: `paw-gym eval` measures it)")
    return (f"step {last['step']}: {held_out}; training success {100 * last['success']:.1f} % "
            f"(last update), reward {last['reward']:.3f}; metrics and curves in {output_dir}")
