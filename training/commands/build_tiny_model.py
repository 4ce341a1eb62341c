"""``paw-gym build-tiny-model``: a tiny Qwen2 model + BPE tokenizer trained on env text."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

from training.commands.flags import former_names
from training.infra.checked_config import (CheckedConfig, bounded, env_id, module_name,
                                           only_with, output_folder)

_WITH_PRETRAINING = only_with("pretrain_steps > 0", lambda c: c.pretrain_steps > 0)


#: Episodes per env and agent: every prompt and observation is kept in memory to train the
#: tokenizer (a Shelf episode's text is ~1 kB: 100,000 episodes ~ 0.2 GB).
MAX_EPISODES = 100_000


@dataclass
class TinyModelArguments(CheckedConfig):
    """What ``paw-gym build-tiny-model`` builds and from which env text."""

    output_dir: str = output_folder(**former_names("out"))
    """Output directory."""
    envs: list[str] = env_id(factory=list, aliases=["--env"])
    """Env ids to take text from (--env A --env B, or --env A,B); none: only the templates."""
    size: Literal["nano", "micro", "mini"] = "nano"
    """nano ~1M, micro ~5M, mini ~20M parameters."""
    episodes: int = bounded(16, 1, MAX_EPISODES)
    """Tasks per env and per agent (random, expert)."""
    max_steps: int = bounded(15, 1, 10_000)
    """Step cap per episode."""
    seed: int = 0
    """Seeds the episodes and the weights."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Constructor arguments for the envs: key=value[,key=value] or a YAML mapping, e.g.
    split=test."""
    pretrain_steps: int = bounded(0, 0, 10**7)
    """Then pretrain the model (next-token, on h ⊕ a ⊕ o_next; see --pretrain_loss_on) this many steps on
    --pretrain_episodes noisy-expert episodes per env, so that it reads its prompt
    (training.warmstart.pretrain); 0: random weights."""
    pretrain_loss_on: Literal["all", "no_next_observation", "action"] = field(
        default="all", metadata=_WITH_PRETRAINING)
    """Which tokens pretraining trains (training.warmstart.pretrain.PretrainConfig.loss_on): all (the
    model also learns each action's next observation), no_next_observation (h ⊕ a only), action
    (the action tokens only). The last two give a start that never learned the env's
    dynamics."""
    pretrain_episodes: int = bounded(1000, 1, MAX_EPISODES, **_WITH_PRETRAINING)
    """Episodes per env recorded for pretraining."""
    epsilon: float = bounded(0.5, 0, 1, what="a probability", **_WITH_PRETRAINING)
    """Chance of a random admissible action at each pretraining-episode step (the rest follow
    the env's expert)."""
    imports: list[str] = module_name(aliases=["--import"])
    """Modules to import first (e.g. one that registers a custom env)."""
    overwrite: bool = False
    """Replace what an earlier paw-gym command wrote in --output_dir (refused otherwise)."""

    def _check_relations(self) -> None:
        if self.pretrain_steps and not self.envs:
            raise ValueError(f"pretrain_steps={self.pretrain_steps} needs at least one env "
                             "(--env) to take episodes from")


def add_parser(subparsers) -> None:
    from training.commands.flags import add_command

    add_command(subparsers, "build-tiny-model", TinyModelArguments,
                help="write a tiny random Qwen2 model with a tokenizer trained on env text",
                description="Roll random and expert agents in the given envs (through the prompt "
                            "wrappers), train a byte-level BPE tokenizer on the prompts, "
                            "observations and actions plus the paper's templates, and save a "
                            "randomly initialised Qwen2-architecture model in HF format (loads "
                            "with AutoModelForCausalLM.from_pretrained(DIR))."
                ).set_defaults(func=run)


def run(args) -> int:
    from training.commands.common import UserError, claim_output_folder
    from run_files.outputs import MODEL_FILES
    from training.preflight import check_env, check_expert
    from training.commands.flags import arguments_from

    arguments = arguments_from(args, TinyModelArguments)  # imports the --import modules
    for name in arguments.envs:  # each is played by its expert and a random agent
        check_env(name, arguments.env_kwargs)
        check_expert(name, "--env")
    claim_output_folder(arguments.output_dir, "build-tiny-model", arguments.overwrite,
                        writes=MODEL_FILES)

    from agents.corpus import env_texts, template_texts
    from agents.tiny_model import build_tiny_model, count_parameters

    env_kwargs = arguments.env_kwargs
    start = time.perf_counter()
    try:
        texts = template_texts() + list(env_texts(arguments.envs, arguments.episodes,
                                                  arguments.max_steps, arguments.seed,
                                                  progress=True, **env_kwargs))
    except (ValueError, TypeError, FileNotFoundError) as error:
        raise UserError(f"could not play {arguments.envs} with "
                        f"{env_kwargs or 'default settings'}: {error}") from None
    out = build_tiny_model(texts, arguments.output_dir, size=arguments.size, seed=arguments.seed)
    from transformers import AutoModelForCausalLM

    parameters = count_parameters(AutoModelForCausalLM.from_pretrained(out))
    chars = sum(len(t) for t in texts)
    print(f"wrote {arguments.size} model to {out}: {parameters / 1e6:.2f}M parameters, tokenizer "
          f"trained on {len(texts)} texts ({chars / 1e6:.1f}M characters) from "
          f"{arguments.envs or 'the templates only'} in {time.perf_counter() - start:.1f}s")
    if arguments.pretrain_steps:
        _pretrain(arguments, out, env_kwargs)
    return 0


def _pretrain(arguments: TinyModelArguments, out, env_kwargs: dict) -> None:
    import tempfile

    from training.warmstart.pretrain import PretrainConfig, run_pretrain
    from training.warmstart.sft import record_expert_demos

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        for env in arguments.envs:
            record_expert_demos(env, arguments.pretrain_episodes, scratch,
                                seed=arguments.seed, max_steps=arguments.max_steps,
                                epsilon=arguments.epsilon, progress=True, **env_kwargs)
        _, losses = run_pretrain(PretrainConfig(model=str(out), replay=scratch,
                                                output_dir=str(out),
                                                steps=arguments.pretrain_steps,
                                                loss_on=arguments.pretrain_loss_on,
                                                seed=arguments.seed))
    print(f"pretrained {out} ({arguments.pretrain_loss_on} tokens) for "
          f"{arguments.pretrain_steps} steps on "
          f"{arguments.pretrain_episodes} episodes per env (epsilon {arguments.epsilon}): loss {losses[0]['loss']:.3f} -> "
          f"{losses[-1]['loss']:.3f} in {time.perf_counter() - start:.1f}s")
