"""``paw-gym sft``: supervised warm start on expert transitions (action tokens only)."""

from __future__ import annotations


def add_parser(subparsers) -> None:
    from training.config import add_config_flags
    from training.sft import SFTConfig

    parser = subparsers.add_parser(
        "sft", help="supervised fine-tuning on expert transitions from a WMReplay",
        description="Record expert demos (--record-env) and/or fine-tune on a replay.")
    parser.add_argument("--config", default=None, help="YAML file of SFTConfig fields")
    parser.add_argument("--record-env", default=None, metavar="ENV_ID",
                        help="first record expert episodes of this env into --replay")
    parser.add_argument("--episodes", type=int, default=200,
                        help="expert episodes to record with --record-env (default 200)")
    parser.add_argument("--split", default=None, help="env split for --record-env (e.g. train)")
    add_config_flags(parser, SFTConfig)
    parser.set_defaults(func=run)


def run(args) -> int:
    from training.cli import UserError, config_from_args, require_writable
    from training.sft import SFTConfig, record_expert_demos, run_sft

    config = config_from_args(args, SFTConfig)
    require_writable(config.output_dir, "--output_dir")
    if args.record_env:
        require_writable(config.replay, "--replay")
    if args.record_env:
        extra = {"split": args.split} if args.split else {}
        path = record_expert_demos(args.record_env, args.episodes, config.replay,
                                   seed=config.seed, progress=config.progress, **extra)
        print(f"recorded {args.episodes} expert episodes into {path}")
    try:
        out, history = run_sft(config)
    except (ValueError, FileNotFoundError) as error:
        raise UserError(str(error)) from error
    for row in history:
        print(f"epoch {row['epoch']}: action-token loss {row['loss']:.4f}")
    print(f"saved to {out}")
    return 0
