"""paw-gym envs and PaW's world-model term in TRL's ``GRPOTrainer`` (``pip install
paw-gym[trl]``, tested with TRL 1.16.0).

    from training.integrations.trl import EnvRollout, PaWGRPOConfig, PaWGRPOTrainer, task_dataset

    env = EnvRollout("PaW/Shelf-v0", max_steps=6, env_kwargs={"split": "train"})
    args = PaWGRPOConfig(output_dir="runs/trl-shelf", num_generations=8, max_steps=16)
    trainer = PaWGRPOTrainer(model="runs/base", env=env, args=args,
                             train_dataset=task_dataset("PaW/Shelf-v0", range(64), split="train"))
    trainer.train()

**Episodes.** TRL trains an episode as one sequence: the first prompt, then a completion that
holds every action and every environment turn. :class:`EnvRollout` is TRL's ``rollout_func``:
it plays one episode per prompt row with paw-gym's wrappers (``HistoryPrompt`` renders each
observation, ``ParseAction`` reads the action, invalid actions are penalised as in the native
trainer) and an :class:`agents.transcript.TranscriptAgent`, which acts on the growing transcript
and keeps the generated ids as they were sampled. It returns the ids, the sampling log-probs,
``env_mask`` (1 on generated tokens: TRL's loss sees only those) and the episode's return,
which :func:`env_return` hands to TRL as the reward. Each dataset row carries its task seed
and its env (:func:`task_dataset`), so the rollout plays that task; a row of an unknown or
another env is refused before the model loads (:func:`check_dataset_rows`).

**The PaW term.** :class:`PaWGRPOTrainer` adds, to TRL's GRPO loss,

    L_WM = (1 / G) Σ_g λ_g · mean_{t ∈ S_α ∩ P_g} ℓ_WM(t)

over the transitions t of the generation batch: S_α the ⌈α·N⌉ transitions with the highest
action entropy (over all processes), λ_g = max(0, 1 − R̄_g / R_max) per group of
``num_generations`` episodes of one task, ℓ_WM the CMAE (or MAE / CE) of the tokens of o_{t+1}
in the completion, scored by the log-probs TRL's own forward pass computes (no second pass).
Selection, λ_g, the weights and ℓ_WM are :mod:`training.rl.losses`, :mod:`training.rl.rollout_batch`
and :func:`training.rl.objective.wm_weights`: the native trainer's functions, not a copy. The
environment turn is the native ``next_turn`` serialisation, so with the transcript as h_t a
transition's targets and their context are the native row's (``tests/test_trl.py`` checks
that the two terms are equal on a fixed batch). The term is scaled per micro-batch so that an
optimizer step's gradient is that of the whole generation batch's L_WM, as TRL's ``dapo`` loss
normalises its own term.

**The tool route.** For instruct models whose chat template has tool calling,
:func:`env_tools` is TRL's ``environment_factory``: the env as one ``take_action`` tool, its
return through ``get_reward`` (GRPO alone: no PaW term on this route).

**What differs from the native trainer** (TRL's design, see ``docs/trl.md``): the policy's
context is the whole transcript, not a history window of h_t (so use a Markov template,
``history_length=0``, and a model that has read transcripts); the advantage is one per episode
(GRPO over episode returns: no GiGPO, no per-step advantages); GRPO's loss, clipping and
normalisation are TRL's.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
from trl import GRPOConfig, GRPOTrainer

from agents.sampling import DEFAULT_STOP
from agents.transcript import TRANSCRIPT_TEMPLATE, EpisodeSequence, TranscriptAgent
from agents.types import Trajectory
from training.config import field_docs
from training.infra.checked_config import (MAX_TOKENS, SEED_BOUNDS, CheckedConfig, bounded,
                                           env_id, field_types, text)
from training.infra.model_config import ModelConfig, is_adapter_dir
from training.infra.paw_settings import PaWSettings
from training.preflight import check_env, check_model
from training.rl.losses import select_by_entropy, wm_token_loss
from training.rl.objective import wm_weights
from training.rl.rollout_batch import entropy_score, lambda_return, lambdas_of_returns

#: The key of a prompt message that names the task (:func:`task_dataset`).
TASK_SEED = "task_seed"
#: The key of a prompt message that names the env the task is of (:func:`task_dataset`).
TASK_ENV = "env_id"


@dataclass
class EnvSettings(CheckedConfig):
    """The env settings of :func:`task_dataset`, :class:`EnvRollout` and :class:`EnvTools`,
    declared and checked as a ``paw-gym`` command's flags are (a registered text env id, each
    number's range; :mod:`training.infra.checked_config`), then :func:`check_env` of the
    ``env_kwargs``, before any env is built."""

    env_id: str = env_id()
    """A registered paw-gym env id."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """``gym.make`` keyword arguments (e.g. ``{"split": "train"}``)."""
    max_steps: int = bounded(1, 1, 10**6)
    """Step limit per episode (besides the env's own)."""
    max_new_tokens: int = bounded(64, 1, MAX_TOKENS)
    """Most tokens per action."""
    template: str = text(TRANSCRIPT_TEMPLATE)
    """The ``HistoryPrompt`` template of every turn."""
    invalid_penalty: float | None = bounded(None, -1e6, 0, note="none: the env's preset")
    """``ParseAction``'s penalty of an invalid action."""
    action_format: str | None = text(None)
    """``ParseAction``'s action format (None: the env's preset)."""

    def _check_relations(self) -> None:
        check_env(self.env_id, self.env_kwargs)


def task_dataset(env_id: str, task_seeds: Iterable[int], *, template: str = TRANSCRIPT_TEMPLATE,
                 **env_kwargs: Any):
    """A ``datasets.Dataset`` with one conversational prompt per task: the env's first prompt
    as the user message, which also carries the task's reset seed (``task_seed``) and the env
    (``env_id``) for :class:`EnvRollout` (a ``rollout_func`` sees only the prompt), and
    ``task_seed`` and ``env_id`` columns for :class:`EnvTools` (TRL resets an environment with
    the row). ``env_kwargs`` go to ``gym.make`` (e.g. ``split="train"``). Checked as
    :class:`EnvSettings`, and each seed an integer in [0, 2**32), before any env is built."""
    from datasets import Dataset

    from agents.envs import make_agent_env

    EnvSettings(env_id, env_kwargs, template=template)
    task_seeds = list(task_seeds)
    for index, seed in enumerate(task_seeds):
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or \
                not SEED_BOUNDS.admits(seed):
            raise ValueError(f"task_seeds[{index}]={seed!r} is invalid; expected "
                             + SEED_BOUNDS.describe("an integer", optional=False))
    if not task_seeds:
        raise ValueError("task_dataset needs at least one task seed")
    env = make_agent_env(env_id, template=template, history_length=0, **env_kwargs)
    rows = []
    try:
        for seed in task_seeds:
            prompt, _ = env.reset(seed=int(seed))
            rows.append({"prompt": [{"role": "user", "content": prompt, TASK_SEED: int(seed),
                                     TASK_ENV: env_id}],
                         TASK_SEED: int(seed), TASK_ENV: env_id})
    finally:
        env.close()
    return Dataset.from_list(rows)


def env_return(completions, env_return: Sequence[float], **kwargs) -> list[float]:
    """TRL reward function: the episode return :class:`EnvRollout` measured (env rewards plus
    invalid-action penalties, as the native trainer's advantages use)."""
    return [float(r) for r in env_return]


@dataclass
class Rollout:
    """What one :class:`EnvRollout` call played (the trainer's WM term reads it)."""

    trajectories: list[Trajectory]
    sequences: list[EpisodeSequence]


class EnvRollout:
    """TRL ``rollout_func``: one episode of a paw-gym env per prompt row (see the module
    docstring).

    Args:
        env_id: a registered paw-gym env id.
        max_steps: step limit per episode (besides the env's own).
        max_new_tokens: most tokens per action.
        template: the ``HistoryPrompt`` template of every turn; start it with
            ``{current_observation}`` so o_{t+1} follows the separator as in the native row.
        stop: stop strings of a response.
        env_kwargs: ``gym.make`` keyword arguments (e.g. ``{"split": "train"}``).
        invalid_penalty, action_format: ``ParseAction``'s (None: the env's preset).
    """

    def __init__(self, env_id: str, *, max_steps: int, max_new_tokens: int = 64,
                 template: str = TRANSCRIPT_TEMPLATE, stop: Sequence[str] = DEFAULT_STOP,
                 env_kwargs: dict[str, Any] | None = None, invalid_penalty: float | None = None,
                 action_format: str | None = None):
        from agents.envs import env_factory

        EnvSettings(env_id, env_kwargs or {}, max_steps, max_new_tokens, template,
                    invalid_penalty, action_format)
        self.env_id = env_id
        self.max_steps = max_steps
        self.max_new_tokens = max_new_tokens
        self.stop = tuple(stop)
        self.make_env = env_factory(env_id, template=template, history_length=0,
                                    invalid_penalty=invalid_penalty, action_format=action_format,
                                    **(env_kwargs or {}))
        self.last: Rollout | None = None
        self._calls = 0

    def __call__(self, prompts: list, trainer: GRPOTrainer) -> dict[str, list]:
        from agents.hf_policy import HFPolicy
        from agents.rollout import rollout

        seeds = [row_task_seed(prompt, self.env_id, f"prompt {index}")
                 for index, prompt in enumerate(prompts)]
        model = trainer.accelerator.unwrap_model(trainer.model)
        policy = HFPolicy(model, trainer.processing_class, device=model.device)
        agent = TranscriptAgent(policy)
        # Same trainer seed, call and rank => same episodes.
        self._calls += 1
        sampling_seed = int(np.random.SeedSequence(
            [trainer.args.seed, self._calls, trainer.accelerator.process_index]
        ).generate_state(1)[0] % 2**31)
        trajectories = rollout(agent, self.make_env, len(seeds), 1,
                               temperature=trainer.temperature,
                               max_new_tokens=self.max_new_tokens, stop=self.stop,
                               seed=sampling_seed, task_seeds=seeds, max_steps=self.max_steps)
        sequences = [agent.turns.episode(t) for t in trajectories]
        self.last = Rollout(trajectories, sequences)
        return {"prompt_ids": [s.prompt_ids for s in sequences],
                "completion_ids": [s.completion_ids for s in sequences],
                "logprobs": [s.logprobs for s in sequences],
                "env_mask": [s.action_mask for s in sequences],
                "env_return": [t.total_reward for t in trajectories]}


class EnvTools:
    """One paw-gym env as TRL tools, for ``GRPOTrainer(environment_factory=...)`` with an
    instruct model whose chat template has tool calling (build it with :func:`env_tools`).

    TRL calls ``reset(**row)`` with a :func:`task_dataset` row (the prompt already shows the
    first observation, so nothing is appended), the model calls :meth:`take_action`, and
    :meth:`get_reward` gives TRL the episode's return. The env's own rewards only: a tool call
    with an action the env does not take is the env's invalid step (``ParseAction``'s format
    penalty is for text outputs). TRL's tool route trains GRPO alone; the PaW term needs
    :class:`EnvRollout` (observations inside tool messages are not marked as WM targets).
    """

    def __init__(self, env_id: str, *, max_steps: int, template: str = TRANSCRIPT_TEMPLATE,
                 env_kwargs: dict[str, Any] | None = None):
        import gymnasium as gym

        from wrappers import HistoryPrompt

        EnvSettings(env_id, env_kwargs or {}, max_steps, template=template)
        self.env_id = env_id
        self.env = HistoryPrompt(gym.make(env_id, **(env_kwargs or {})), template=template,
                                 history_length=0)
        self.max_steps = max_steps
        self.task_seed: int | None = None
        self.steps = 0
        self.total_reward = 0.0
        self.done = True

    def reset(self, **row: Any) -> None:
        if TASK_SEED not in row:
            raise ValueError(f"EnvTools plays rows made by task_dataset (they carry "
                             f"{TASK_SEED!r}); got the columns {sorted(row)}")
        check_row_env(row.get(TASK_ENV), self.env_id, "the row")
        self.task_seed = int(row[TASK_SEED])
        self.env.reset(seed=self.task_seed)
        self.steps, self.total_reward, self.done = 0, 0.0, False

    def take_action(self, action: str) -> str:
        """Take one action in the environment.

        Args:
            action: One of the admissible actions, exactly as the observation lists it.

        Returns:
            The environment's next observation with its admissible actions, or how the episode
            ended.
        """
        if self.done:
            return "The episode has ended."
        prompt, reward, terminated, truncated, info = self.env.step(str(action))
        self.steps += 1
        self.total_reward += float(reward)
        self.done = terminated or truncated or self.steps >= self.max_steps
        if self.done:
            outcome = "won" if info.get("won") else "not won"
            return f"{info.get('raw_observation', '')} The episode has ended ({outcome})."
        return prompt

    def get_reward(self) -> float:
        return self.total_reward


def env_tools(env_id: str, *, max_steps: int, template: str = TRANSCRIPT_TEMPLATE,
              env_kwargs: dict[str, Any] | None = None) -> Callable[[], EnvTools]:
    """TRL ``environment_factory`` for ``env_id``: each call builds one :class:`EnvTools`
    (the id and ``env_kwargs`` are checked now, before TRL builds any)."""
    check_env(env_id, env_kwargs)
    return functools.partial(EnvTools, env_id, max_steps=max_steps, template=template,
                             env_kwargs=env_kwargs)


def task_seed(prompt: Any) -> int:
    """The task seed a :func:`task_dataset` prompt carries."""
    message = prompt[-1] if isinstance(prompt, list) and prompt else None
    if not isinstance(message, dict) or TASK_SEED not in message:
        raise ValueError(f"EnvRollout plays prompts made by task_dataset (their user message "
                         f"carries {TASK_SEED!r}); got {str(prompt)[:200]!r}")
    return int(message[TASK_SEED])


def row_task_seed(prompt: Any, env_id: str, where: str) -> int:
    """The task seed of a :func:`task_dataset` prompt that an env ``env_id`` plays: a
    ``ValueError`` naming ``where`` when the prompt carries no seed, or names an env that is
    not registered or is not ``env_id`` (its seed would start another env's task)."""
    try:
        seed = task_seed(prompt)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    check_row_env(prompt[-1].get(TASK_ENV), env_id, where)
    return seed


def check_row_env(row_env: Any, env_id: str, where: str) -> None:
    """A ``ValueError`` naming ``where`` when a row's env (``None``: a row that names none,
    taken as ``env_id``'s) is not registered, or is not ``env_id``."""
    from paw_gym.registration import check_env_id

    if row_env is None or row_env == env_id:
        return
    if not isinstance(row_env, str):
        raise ValueError(f"{where}: {TASK_ENV}={row_env!r} is invalid; expected an env id")
    try:
        check_env_id(row_env)
    except ValueError as error:
        raise ValueError(f"{where}: {TASK_ENV}: {error}") from None
    raise ValueError(f"{where} is a task of {row_env} (task_dataset({row_env!r}, ...)), but this "
                     f"rollout plays {env_id}: its task seed would start another env's task; "
                     f"make the dataset with task_dataset({env_id!r}, ...)")


def check_dataset_rows(dataset: Any, env_id: str, name: str) -> None:
    """Every prompt of ``dataset`` (a ``datasets.Dataset``, a mapping of them, or None) carries
    a task seed of ``env_id``'s (:func:`row_task_seed`); checked before the trainer loads its
    model. A dataset that cannot be read ahead (an ``IterableDataset``) is checked as it
    plays."""
    if isinstance(dataset, dict):
        for key, part in dataset.items():
            check_dataset_rows(part, env_id, f"{name}[{key!r}]")
        return
    if dataset is None or not hasattr(dataset, "column_names") or \
            not hasattr(dataset, "__len__"):
        return
    if "prompt" not in dataset.column_names:
        raise ValueError(f"{name} has no 'prompt' column (its columns: "
                         f"{sorted(dataset.column_names)}); make it with task_dataset")
    for index, prompt in enumerate(dataset["prompt"]):
        row_task_seed(prompt, env_id, f"{name} row {index}")


def trl_arguments(settings: type) -> type:
    """``settings``' fields as a dataclass that TRL's argument parser (``HfArgumentParser``)
    takes: the same names, types and defaults, each field's docstring as its ``help``. Their
    checks stay with ``settings`` (the parser hands a field's metadata to argparse, which takes
    no other keys): a config built on this class checks its values by making a ``settings``
    of them."""
    docs, kinds = field_docs(settings), field_types(settings)
    return dataclasses.make_dataclass(
        f"{settings.__name__}Arguments",
        [(item.name, kinds[item.name], field(default=item.default,
                                             metadata={"help": docs[item.name]}))
         for item in dataclasses.fields(settings)])


@dataclass
class PaWGRPOConfig(GRPOConfig, trl_arguments(PaWSettings)):
    """TRL's ``GRPOConfig`` plus PaW's world-model term: the fields of
    :class:`~training.infra.paw_settings.PaWSettings` (``paw``, ``wm_loss``, ``alpha``,
    ``rho``, λ_g's ``adaptive_coef``, ``r_max``...), with its defaults (the paper's and the
    native trainer's) and its checks."""

    def __post_init__(self):
        if self.bf16 is None and not self.fp16 and not torch.cuda.is_available():
            self.bf16 = False  # TRL's default (bf16) refuses a machine without a GPU
        super().__post_init__()
        # PaW's fields checked by their one declaration: types (paw='no' is no bool), choices,
        # ranges (TRL checks its own fields).
        PaWSettings(**PaWSettings.values_of(self))
        if self.paw and self.temperature != 1.0:
            raise ValueError(f"temperature={self.temperature!r} with paw: TRL scores every "
                             f"completion token at the sampling temperature, and the WM term "
                             f"needs the model's own distribution over o_{{t+1}}; use "
                             f"temperature=1.0 (the paper's rollout temperature) or paw=False")


class PaWGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` on paw-gym episodes, with PaW's world-model term (see the module
    docstring). Logs ``env/success`` (fraction of episodes won) and, with ``paw``,
    ``paw/wm_loss`` (the micro-batch's L_WM share) and ``paw/lambda`` (mean λ_g).

    Args:
        model: as ``GRPOTrainer``'s (a hub name, folder or model), or a
            :class:`~training.infra.model_config.ModelConfig` (``train``'s and ``sft``'s
            fields): the model loaded in its ``dtype`` and, with ``lora``, its LoRA settings
            handed to TRL as ``peft_config`` (the target modules checked against the model's
            layers first: :func:`training.models.lora_config`).
        env: the :class:`EnvRollout` that plays the episodes.
        args: a :class:`PaWGRPOConfig`.
        reward_funcs: default ``[env_return]``.
        **kwargs: ``GRPOTrainer``'s (``train_dataset``, ``processing_class``, ...).
    """

    def __init__(self, model, env: EnvRollout, args: PaWGRPOConfig | None = None,
                 reward_funcs=None, **kwargs):
        if not isinstance(env, EnvRollout):
            raise TypeError(f"env must be an EnvRollout, got {type(env).__name__}")
        if args is not None and not isinstance(args, PaWGRPOConfig):
            raise TypeError(f"args must be a PaWGRPOConfig, got {type(args).__name__}")
        for name in ("train_dataset", "eval_dataset"):  # before the model loads
            check_dataset_rows(kwargs.get(name), env.env_id, name)
        if isinstance(model, ModelConfig):
            model, peft_config = load_model(model)
            if peft_config is not None:
                if kwargs.get("peft_config") is not None:
                    raise ValueError("peft_config given beside a ModelConfig with lora: true; "
                                     "give the LoRA settings in one of them")
                kwargs["peft_config"] = peft_config
        elif isinstance(model, (str, Path)):  # before TRL loads it or asks the hub
            model = check_model(model)  # an offline model's name: its folder
        super().__init__(model=model, reward_funcs=reward_funcs or [env_return], args=args,
                         rollout_func=env, **kwargs)
        self.env = env
        self._keep_logprobs = False
        self._logprobs: torch.Tensor | None = None

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        played = self.env.last
        mode = "train" if self.model.training else "eval"
        won = self.accelerator.gather(torch.tensor([float(t.won) for t in played.trajectories],
                                                   device=self.accelerator.device))
        self._metrics[mode]["env/success"].append(won.mean().item())
        if mode == "train" and self.args.paw:
            output.update(self.world_model_inputs(played, output["completion_ids"].shape[1]))
        return output

    def world_model_inputs(self, played: Rollout, width: int) -> dict[str, torch.Tensor]:
        """``wm_index`` [B, C] (which transition of its row each completion token is a target
        of, −1 for none) and ``wm_weight`` [B, K] (the weight of each row's transitions) for
        this process's rows; selection and λ_g over the whole generation batch."""
        from accelerate.utils import gather_object

        local = [(lambda_return(t, self.args),
                  [(entropy_score(step.output, self.args), length > 0)
                   for step, (_, length) in zip(t.transitions, s.obs_spans)])
                 for t, s in zip(played.trajectories, played.sequences)]
        everyone = gather_object([local]) if self.accelerator.num_processes > 1 else [local]
        rows = [row for part in everyone for row in part]
        first_row = sum(len(part) for part in everyone[:self.accelerator.process_index])
        # TRL's groups: consecutive blocks of num_generations rows of the gathered batch.
        row_group = [r // self.num_generations for r in range(len(rows))]
        returns: dict[int, list[float]] = {}
        for group, (value, _) in zip(row_group, rows):
            returns.setdefault(group, []).append(value)
        group_lambda = lambdas_of_returns(returns, self.args)
        flat = [(r, k) for r, (_, steps) in enumerate(rows) for k in range(len(steps))]
        entropies = torch.tensor([rows[r][1][k][0] for r, k in flat], dtype=torch.float64)
        eligible = torch.tensor([rows[r][1][k][1] for r, k in flat], dtype=torch.bool)
        selected = select_by_entropy(entropies, self.args.alpha, eligible=eligible)
        weights = wm_weights([row_group[r] for r, _ in flat], selected, group_lambda)
        weight_of = {pair: float(w) for pair, w in zip(flat, weights)}
        mine = played.sequences
        k_max = max(len(s.obs_spans) for s in mine)
        wm_index = torch.full((len(mine), width), -1, dtype=torch.long)
        wm_weight = torch.zeros(len(mine), k_max)
        for b, sequence in enumerate(mine):
            for k, (start, length) in enumerate(sequence.obs_spans):
                weight = weight_of[(first_row + b, k)]
                if weight:
                    end = start + min(length, self.args.max_obs_tokens or length)
                    wm_index[b, start:end] = k
                    wm_weight[b, k] = weight
        self._metrics["train"]["paw/lambda"].append(
            sum(group_lambda.values()) / len(group_lambda))
        device = self.accelerator.device
        return {"wm_index": wm_index.to(device), "wm_weight": wm_weight.to(device)}

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        result = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._keep_logprobs:
            self._logprobs = result[0]
        return result

    def _compute_loss(self, model, inputs):
        if "wm_index" not in inputs or not self.model.training:
            return super()._compute_loss(model, inputs)
        self._keep_logprobs = True
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self._keep_logprobs = False
        wm = transcript_wm_loss(self._logprobs, inputs["wm_index"], inputs["wm_weight"],
                                self.args.wm_loss, self.args.rho)
        self._logprobs = None
        self._metrics["train"]["paw/wm_loss"].append(self.accelerator.gather(wm.detach())
                                                     .sum().item())
        # As TRL's dapo normalisation: each optimizer step carries the generation batch's term.
        scale = (self.accelerator.num_processes * self.args.steps_per_generation
                 / self.current_gradient_accumulation_steps)
        return loss + scale * wm


def load_model(config: ModelConfig):
    """``config.model`` (a hub name, folder or offline model's name), or a whole-model
    ``init_checkpoint``, loaded in ``config.dtype``, with the peft ``LoraConfig`` TRL wraps it
    in (``lora``), or None: no LoRA, or an ``init_checkpoint`` adapter, which comes loaded and
    trainable (``training.models.start_weights``, as ``train`` starts it)."""
    from transformers import AutoModelForCausalLM

    from training.models import lora_config, start_weights, torch_dtype, weights_source

    model = AutoModelForCausalLM.from_pretrained(check_model(weights_source(config)),
                                                 dtype=torch_dtype(config.dtype))
    if is_adapter_dir(config.init_checkpoint):
        return start_weights(model, config), None
    return model, (lora_config(model, config) if config.lora else None)


def transcript_wm_loss(logprobs: torch.Tensor, wm_index: torch.Tensor, wm_weight: torch.Tensor,
                       kind: str = "cmae", rho: float = 0.2) -> torch.Tensor:
    """Σ_b Σ_k wm_weight[b, k] · ℓ_WM(b, k), where ℓ_WM(b, k) is
    :func:`training.rl.losses.wm_token_loss` over the completion tokens of row b whose
    ``wm_index`` is k (``logprobs``, ``wm_index``: [B, C]; ``wm_weight``: [B, K])."""
    rows, transitions = wm_weight.shape
    if not transitions:
        return logprobs.sum() * 0.0
    masks = wm_index.unsqueeze(1) == torch.arange(transitions, device=wm_index.device)[:, None]
    per_transition = wm_token_loss(
        logprobs.unsqueeze(1).expand(-1, transitions, -1).reshape(rows * transitions, -1),
        masks.reshape(rows * transitions, -1), kind, rho).view(rows, transitions)
    return (wm_weight.to(per_transition.dtype) * per_transition).sum()
