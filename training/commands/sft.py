"""``paw-gym sft``: supervised warm start on expert transitions (action tokens only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from training.infra.checked_config import CheckedConfig, bounded, env_id, only_with, text

_WITH_RECORDING = only_with("record_env is given", lambda c: c.record_env is not None)


@dataclass
class SFTArguments(CheckedConfig):
    """Expert episodes to record into --replay before fine-tuning."""

    record_env: str | None = env_id(None)
    """First record expert episodes of this env id into --replay (an episode the replay already
    holds is not added again, so running twice does not duplicate the data)."""
    episodes: int = bounded(200, 1, 10**6, **_WITH_RECORDING)
    """Expert episodes to record with --record_env (task seeds seed .. seed+episodes-1)."""
    split: str | None = text(None, **_WITH_RECORDING)
    """Env split for --record_env (e.g. train; none: the env's default)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict, metadata=_WITH_RECORDING)
    """Other env constructor arguments for --record_env: key=value[,key=value] or a YAML
    mapping."""


def add_parser(subparsers) -> None:
    from training.commands.flags import add_command
    from training.warmstart.sft import SFTConfig

    add_command(subparsers, "sft", SFTArguments, config=SFTConfig,
                help="supervised fine-tuning on expert transitions from a WMReplay",
                description="Record expert demos (--record_env) and/or fine-tune on a replay."
                ).set_defaults(func=run)


def run(args) -> int:
    from training.commands.common import UserError, claim_output_folder
    from run_files.outputs import MODEL_FILES
    from training.preflight import (PreflightError, check_env, check_expert, check_model,
                                    check_writable)
    from training.commands.flags import arguments_from
    from training.warmstart.sft import SFTConfig, record_expert_episodes, run_sft

    config = arguments_from(args, SFTConfig)
    recording = arguments_from(args, SFTArguments)
    env_kwargs = {**recording.env_kwargs,
                  **({"split": recording.split} if recording.split else {})}
    if recording.record_env:
        check_env(recording.record_env, env_kwargs)
        check_expert(recording.record_env, "--record_env")
    try:  # before recording: a wrong --model must not cost the demos' time first
        check_model(config.model)
    except PreflightError as error:
        raise UserError(f"--model: {error}") from None
    # Before recording too: a refusal must not cost the demos' time first.
    claim_output_folder(config.output_dir, "sft", config.overwrite,
                        writes=MODEL_FILES)
    if recording.record_env:
        check_writable(config.replay, "--replay")
        added, skipped = record_expert_episodes(
            recording.record_env, recording.episodes, config.replay, seed=config.seed,
            progress=config.progress, **env_kwargs)
        print(f"recorded {added} expert episodes into {config.replay}"
              + (f" ({skipped} already there, not added again)" if skipped else ""))
    try:
        out, history = run_sft(config)
    except (ValueError, FileNotFoundError) as error:
        raise UserError(str(error)) from error
    for row in history:
        print(f"epoch {row['epoch']}: action-token loss {row['loss']:.4f}")
    print(f"saved to {out}")
    return 0
