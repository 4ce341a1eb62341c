"""``paw-gym build-tiny-model``: a tiny Qwen2 model + BPE tokenizer trained on env text."""

from __future__ import annotations

import time


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "build-tiny-model",
        help="write a tiny random Qwen2 model with a tokenizer trained on env text",
        description="Roll random and expert agents in the given envs (through the prompt "
                    "wrappers), train a byte-level BPE tokenizer on the prompts, observations and "
                    "actions plus the paper's templates, and save a randomly initialised "
                    "Qwen2-architecture model in HF format (loads with "
                    "AutoModelForCausalLM.from_pretrained(DIR)).")
    parser.add_argument("--env", action="append", dest="envs", metavar="ID", default=[],
                        help="env id to take text from (repeatable); default: only the templates")
    parser.add_argument("--size", default="nano", choices=("nano", "micro", "mini"),
                        help="nano ~1M, micro ~5M, mini ~20M parameters")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--episodes", type=int, default=16,
                        help="tasks per env and per agent (random, expert)")
    parser.add_argument("--max-steps", type=int, default=15, help="step cap per episode")
    parser.add_argument("--seed", type=int, default=0, help="seeds the episodes and the weights")
    parser.add_argument("--env-arg", dest="env_args", action="append", default=[],
                        metavar="KEY=VALUE", help="constructor argument for the envs (repeatable; "
                        "VALUE is parsed as JSON when it can be), e.g. split=test")
    parser.add_argument("--pretrain-steps", type=int, default=0,
                        help="then pretrain the model (next-token, every token of h ⊕ a ⊕ o_next) "
                        "this many steps on --pretrain-episodes noisy-expert episodes per env, so "
                        "that it reads its prompt (training.pretrain); default 0: random weights")
    parser.add_argument("--pretrain-episodes", type=int, default=1000,
                        help="episodes per env recorded for pretraining")
    parser.add_argument("--epsilon", type=float, default=0.5,
                        help="chance of a random admissible action at each pretraining-episode "
                        "step (the rest follow the env's expert)")
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="import MODULE first (e.g. one that registers a custom env)")
    parser.set_defaults(func=run)


def run(args) -> int:
    import importlib

    import gymnasium as gym

    import paw_gym  # noqa: F401  (registers the built-in ids)
    from training.cli import UserError

    for module in args.imports:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise UserError(f"--import {module}: {error}") from None
    unknown = [env_id for env_id in args.envs if env_id not in gym.registry]
    if unknown:
        raise UserError(f"unknown env id(s) {unknown}; see `paw-gym envs`")
    if args.episodes < 1:
        raise UserError(f"--episodes must be >= 1, got {args.episodes}")
    if args.pretrain_steps < 0 or args.pretrain_episodes < 1:
        raise UserError(f"--pretrain-steps must be >= 0 and --pretrain-episodes >= 1, got "
                        f"{args.pretrain_steps} and {args.pretrain_episodes}")
    if args.pretrain_steps and not args.envs:
        raise UserError("--pretrain-steps needs at least one --env to take episodes from")
    if not 0.0 <= args.epsilon <= 1.0:
        raise UserError(f"--epsilon must be a probability in [0, 1], got {args.epsilon}")

    from agents.corpus import env_texts, template_texts
    from agents.tiny_model import build_tiny_model, count_parameters

    env_kwargs = _parse_env_args(args.env_args, UserError)
    start = time.perf_counter()
    try:
        texts = template_texts() + list(env_texts(args.envs, args.episodes, args.max_steps,
                                                  args.seed, progress=True, **env_kwargs))
    except (ValueError, TypeError, FileNotFoundError) as error:
        raise UserError(f"could not play {args.envs} with {env_kwargs or 'default settings'}: "
                        f"{error}") from None
    out = build_tiny_model(texts, args.out, size=args.size, seed=args.seed)
    from transformers import AutoModelForCausalLM

    parameters = count_parameters(AutoModelForCausalLM.from_pretrained(out))
    chars = sum(len(t) for t in texts)
    print(f"wrote {args.size} model to {out}: {parameters / 1e6:.2f}M parameters, tokenizer "
          f"trained on {len(texts)} texts ({chars / 1e6:.1f}M characters) from "
          f"{args.envs or 'the templates only'} in {time.perf_counter() - start:.1f}s")
    if args.pretrain_steps:
        _pretrain(args, out, env_kwargs)
    return 0


def _pretrain(args, out, env_kwargs: dict) -> None:
    import tempfile

    from training.pretrain import PretrainConfig, run_pretrain
    from training.sft import record_expert_demos

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        for env_id in args.envs:
            record_expert_demos(env_id, args.pretrain_episodes, scratch, seed=args.seed,
                                max_steps=args.max_steps, epsilon=args.epsilon, progress=True,
                                **env_kwargs)
        _, losses = run_pretrain(PretrainConfig(model=str(out), replay=scratch,
                                                output_dir=str(out), steps=args.pretrain_steps,
                                                seed=args.seed))
    print(f"pretrained {out} for {args.pretrain_steps} steps on {args.pretrain_episodes} "
          f"episodes per env (epsilon {args.epsilon}): loss {losses[0]['loss']:.3f} -> "
          f"{losses[-1]['loss']:.3f} in {time.perf_counter() - start:.1f}s")


def _parse_env_args(pairs: list[str], error_type: type[Exception]) -> dict:
    import json

    kwargs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise error_type(f"--env-arg {pair!r} must look like KEY=VALUE")
        try:
            kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key] = value
    return kwargs
