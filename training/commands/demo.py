"""``paw-gym demo``: the main job (tiny model → expert demos → SFT → GRPO + PaW → eval)."""

from __future__ import annotations


def add_parser(subparsers) -> None:
    from training.config import add_config_flags
    from training.demo import DemoConfig

    parser = subparsers.add_parser(
        "demo", help="end-to-end offline demo on CPU: SFT warm start, GRPO + PaW, before/after",
        description="Builds a tiny model, records expert demos, warm-starts it, trains GRPO + "
                    "PaW on an embedded env and writes per-task before/after tables and curves "
                    "to runs/demo/ (about 15 minutes on 2 CPU cores).")
    parser.add_argument("--config", default=None, help="YAML file of DemoConfig fields")
    add_config_flags(parser, DemoConfig)
    parser.set_defaults(func=run)


def run(args) -> int:
    from training.cli import config_from_args
    from training.demo import DemoConfig, run_demo

    config = config_from_args(args, DemoConfig)
    summary = run_demo(config)
    for label, suffix in (("held-out tasks", ""), ("training-pool tasks", "_train_tasks")):
        before, after = summary["before" + suffix], summary["after" + suffix]
        print(f"{label}: success {before['success']:.1f}% -> {after['success']:.1f}%, "
              f"score {before['score']:.1f} -> {after['score']:.1f}, invalid actions "
              f"{before['invalid']:.1f}% -> {after['invalid']:.1f}%")
    print(f"total {sum(summary['timings_s'].values()):.0f} s; see {config.output_dir}/results.md")
    return 0
