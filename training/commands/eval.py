"""``paw-gym eval``: per-task success / score tables for a model, a checkpoint or a baseline."""

from __future__ import annotations

AGENTS = ("policy", "react", "reflexion", "random", "expert")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "eval", help="evaluate a model, checkpoint or baseline per task type (MD + JSON + CSV)")
    parser.add_argument("--env", required=True, help="env id, e.g. PaW/WebShop-v0")
    parser.add_argument("--model", default=None, help="hub name or model directory")
    parser.add_argument("--checkpoint", default=None,
                        help="trainer checkpoint, saved model or LoRA adapter directory")
    parser.add_argument("--agent", choices=AGENTS, default="policy",
                        help="policy (the model as is), react, reflexion, random or expert")
    parser.add_argument("--split", default=None, help="env split (e.g. test); env default if unset")
    parser.add_argument("--episodes", type=int, default=50, help="tasks to play (default 50)")
    parser.add_argument("--seed", type=int, default=0,
                        help="first task seed; tasks use seeds seed .. seed+episodes-1")
    parser.add_argument("--temperature", type=float, default=None,
                        help="sampling temperature (default: 0.4, search QA 0.0)")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--max-steps", type=int, default=None, help="extra per-episode step limit")
    parser.add_argument("--trials", type=int, default=1, help="Reflexion trials per task")
    parser.add_argument("--device", default=None)
    parser.add_argument("--out", default="runs/eval", help="output directory")
    parser.add_argument("--name", default="eval", help="file stem of the tables")
    parser.set_defaults(func=run)


def build_agent(args):
    """The agent named by ``--agent`` (loading the policy when it needs one)."""
    from agents.baselines import ExpertAgent, RandomAgent

    if args.agent == "random":
        return RandomAgent()
    if args.agent == "expert":
        return ExpertAgent()
    from training.evaluate import load_policy

    policy = load_policy(args.model, args.checkpoint, args.device, args.seed)
    if args.agent == "policy":
        return policy
    from agents.prompting import ReActAgent, ReflexionAgent, expert_examples

    examples = expert_examples(args.env, 1)
    return ReActAgent(policy, examples) if args.agent == "react" else \
        ReflexionAgent(policy, examples=examples)


def run(args) -> int:
    from training.cli import UserError, require_writable
    from training.evaluate import evaluate, to_markdown, write_tables

    if args.episodes < 1:
        raise UserError(f"--episodes must be >= 1, got {args.episodes}")
    require_writable(args.out, "--out")
    try:
        agent = build_agent(args)
    except (ValueError, FileNotFoundError, OSError) as error:
        raise UserError(str(error)) from error
    settings = {"split": args.split} if args.split else {}
    meta = {"agent": args.agent, "model": args.model, "checkpoint": args.checkpoint,
            "split": args.split, "first_seed": args.seed}
    result = evaluate(agent, args.env, list(range(args.seed, args.seed + args.episodes)),
                      temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                      max_steps=args.max_steps, seed=args.seed, trials=args.trials,
                      progress=True, meta=meta, **settings)
    paths = write_tables(result, args.out, args.name)
    print(to_markdown(result, f"{args.agent} on {args.env}"))
    print("tables: " + ", ".join(str(p) for p in paths.values()))
    return 0
