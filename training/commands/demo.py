"""``paw-gym demo``: the main job (demos → pretrained tiny model → GRPO + PaW → eval)."""

from __future__ import annotations

from pathlib import Path


def add_parser(subparsers) -> None:
    from training.commands.flags import add_command
    from training.demo import DemoConfig

    add_command(
        subparsers, "demo", config=DemoConfig,
        help="end-to-end offline demo on CPU: pretrained tiny model, GRPO + PaW, held-out "
             "success before/after",
        description="Records noisy-expert demos, builds a tiny model pretrained on them (cached "
                    "under $PAW_GYM_CACHE), trains GRPO + PaW on an embedded env and writes "
                    "per-task before/after tables on held-out tasks and curves to runs/demo/ "
                    "(about 6 minutes on 2 CPU cores the first time, 2 once the base is "
                    "cached).").set_defaults(func=run)


def run(args) -> int:
    from training.commands.common import UserError, claim_output_folder
    from training.commands.flags import arguments_from
    from training.demo import (DEMO_WRITES, DemoConfig, check_demo_config, run_demo,
                               validation_line, verdict)
    from training.infra.numerics import machine_line

    config = arguments_from(args, DemoConfig)
    try:
        check_demo_config(config)
    except ValueError as error:
        raise UserError(str(error)) from error
    claim_output_folder(config.output_dir, "demo", config.overwrite,
                        writes=DEMO_WRITES)
    try:
        summary = run_demo(config)
    except (ValueError, FileNotFoundError) as error:  # a damaged cache or model, in one line
        raise UserError(str(error)) from error
    results = (Path(config.output_dir) / "results.md").read_text(encoding="utf-8")
    print(results.split("## training-pool")[0].rstrip())
    for label, suffix in (("held-out tasks", ""), ("training-pool tasks", "_train_tasks")):
        before, after = summary["before" + suffix], summary["after" + suffix]
        print(f"{label}: success {before['success']:.1f}% -> {after['success']:.1f}%, "
              f"score {before['score']:.1f} -> {after['score']:.1f}, invalid actions "
              f"{before['invalid']:.1f}% -> {after['invalid']:.1f}%")
    line = validation_line(summary["validation"])
    if line:
        print(line)
    print(machine_line(summary["machine"]))  # the README's numbers name theirs
    print(f"total {sum(summary['timings_s'].values()):.0f} s; see {config.output_dir}/results.md "
          "(it also says what each figure measures)")
    print(verdict(summary["before"]["success"], summary["after"]["success"]))
    return 0
