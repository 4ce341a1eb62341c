"""``TrainConfig``: every knob of the PaW trainer, loadable from YAML with CLI overrides.

A YAML file maps 1:1 onto the dataclass fields (unknown keys are an error); ``paw-gym train``
adds one typed flag per field (``--paw false``, ``--algo gigpo`` ...; see ``training.cli``),
which wins over the file. :func:`training.infra.config_values.parse_value` reads a flag's text (or a
string in the file) as the field's type, so the CLI and the YAML accept the same values; the
checks every config shares are :mod:`training.infra.checked_config`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agents.serialization import WMContext
from training.infra.checked_config import (MAX_TOKENS, bounded, env_id, field_types,
                                           input_folder, only_with, optional_base,
                                           output_folder, text)
from training.infra.config_values import parse_value
from training.infra.model_config import ModelConfig
from training.infra.paw_settings import PaWSettings

Algo = Literal["grpo", "gigpo", "rloo", "ppo"]
#: ``rollout_correction`` modes (``training.rl.correction`` states each formula).
RolloutCorrection = Literal["none", "sampler_clip", "token_truncate", "token_mask",
                            "sequence_truncate", "sequence_mask"]
ALGOS: tuple[str, ...] = typing.get_args(Algo)

# What some settings need to do anything (``only_with``: another value is warned about).
_WITH_PAW = only_with("paw is true", lambda c: c.paw)
_WITH_GIGPO = only_with("algo is gigpo", lambda c: c.algo == "gigpo")
_WITH_PPO = only_with("algo is ppo", lambda c: c.algo == "ppo")
_WITH_VALIDATION = only_with("val_every > 0 or val_before_train is true",
                             lambda c: c.val_every > 0 or c.val_before_train)


@dataclass
class TrainConfig(PaWSettings, ModelConfig):
    """PaW training run. Defaults are the paper's WebShop settings where it states them. The
    model and its LoRA adapter (``model``, ``dtype``, ``lora``...) are :class:`ModelConfig`'s
    fields and the world-model term's (``paw``, ``wm_loss``, ``alpha``, ``rho``...)
    :class:`PaWSettings`', shared with ``sft``, ``train-wm`` and the TRL integration."""

    # -- model (beside ModelConfig's) ------------------------------------------------------------
    system_prompt: str | None = text(None)
    """The system message before every prompt. None (default): the env's prompt alone; a chat
    template that would insert its own default system message (SmolLM2's "You are a helpful AI
    assistant named SmolLM…", Qwen2.5's "You are Qwen…") gets an empty one instead
    (``agents.chat.ChatEncoder``). A string: that message ("": an empty one)."""
    device: str | None = text(None)
    """cpu, cuda, cuda:1 ... (None: CUDA when available). Under torchrun / accelerate launch
    each process takes its own GPU (leave unset or ``cuda``) or the CPU (``cpu``: gloo)."""
    gradient_checkpointing: bool = False
    """Recompute decoder activations in backward (less memory, ~30% more compute)."""
    sharding: Literal["ddp", "fsdp"] = "ddp"
    """How several processes (torchrun / accelerate launch) hold the model: ``ddp`` (each
    process a full copy of the weights, gradients and optimizer states) or ``fsdp`` (FSDP2,
    ``fully_shard`` per decoder layer, PPO's critic too: each process holds 1/N of them, plus
    with ``rollout_backend: hf`` an unsharded copy of the weights that samples the rollouts;
    full fine-tuning only). ``fsdp`` in one process is a world of one: the same sharded path
    (mixed precision, sharded checkpoints), holding everything."""
    mixed_precision: Literal["no", "bf16"] = "no"
    """``bf16`` with ``sharding: fsdp`` (any number of processes): forward and backward in
    bfloat16 over the float32 weights of ``dtype: float32`` (gradients reduced in float32; the
    sampler and KL reference copies in bfloat16). ``no``: everything in ``dtype``."""
    rollout_backend: Literal["hf", "vllm"] = "hf"
    """Who samples the rollouts: ``hf`` (the training model itself) or ``vllm`` (a vLLM engine
    on the same base model that gets the current LoRA adapter, or with full fine-tuning every
    weight, before every rollout; needs an importable vLLM: the ``[vllm]`` extra on a GPU
    machine)."""
    vllm_kwargs: dict[str, Any] = field(default_factory=dict, metadata=only_with(
        "rollout_backend is vllm", lambda c: c.rollout_backend == "vllm"))
    """Extra ``vllm.LLM`` arguments for ``rollout_backend: vllm`` (e.g.
    ``{gpu_memory_utilization: 0.5}``)."""
    # -- environment ---------------------------------------------------------------------------
    env_id: str = env_id("PaW/WebShop-v0")
    """Registered text env to train on."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra gym.make arguments."""
    template: str | None = text(None)
    """HistoryPrompt template: alfworld, webshop, search, a format string (None: env preset)."""
    history_length: int | None = bounded(2, 0, 10**5, note="none: the whole history")
    """Recent steps shown in the prompt (None: full history, the paper's search QA setting)."""
    action_format: str | None = text(None)
    """ParseAction format: action (<action>) or search (<search>/<answer>) (None: env preset)."""
    invalid_penalty: float | None = bounded(None, -1e6, 0, note="none: the env's preset")
    """Reward added to an invalid action (None: env preset, -0.1; search QA -0.01)."""
    max_episode_steps: int | None = bounded(None, 1, 10**6)
    """Step limit (None: the env's registered limit)."""
    train_task_seeds: int = bounded(1_000_000, 1, 2**32)
    """Training tasks are env seeds drawn from [0, train_task_seeds)."""
    # -- rollout ------------------------------------------------------------------------------
    n_groups: int = bounded(16, 1, 10**6)
    """Rollout groups (tasks) per update; with several processes, all of them together (each
    rolls out a contiguous share)."""
    group_size: int = bounded(8, 1, 10**5)
    """Trajectories per group (PPO: 1 trajectory per task, n_groups × group_size tasks)."""
    temperature: float = bounded(1.0, 0, 100, low_open=True)
    """Rollout sampling temperature."""
    max_new_tokens: int = bounded(512, 1, MAX_TOKENS)
    """Longest response per step."""
    max_prompt_len: int | None = bounded(None, 1, MAX_TOKENS)
    """Longest rollout prompt in tokens: longer prompts are cut from the left when sampled (as
    verl's ``truncation: left``), so the oldest history goes first. The paper's A.1 uses 2048
    (ALFWorld) and 4096 (WebShop, search QA). None: the model's context minus max_new_tokens."""
    # -- objective (beside PaWSettings') -----------------------------------------------------
    algo: Algo = "grpo"
    """Advantage estimator: grpo, gigpo, rloo or ppo."""
    wm_context: WMContext = "next_turn"
    """Where o_{t+1} sits after the action (``agents.serialization``): ``next_turn`` (the
    environment's next chat message: end-of-turn, the template's user header, then o_{t+1}),
    ``end_of_turn`` (one end-of-turn token before it) or ``none`` (right after the action, in
    the policy's own turn: the ablation that taught the policy to write environment text)."""
    # the native trainer's own world-model options (the TRL integration has neither)
    wm_zero_signal_groups: bool = field(default=True, metadata=_WITH_PAW)
    """The WM term also trains on the transitions of groups whose advantages are all 0 (every
    episode scored the same: the RL term has no signal there). False leaves them out of the
    entropy selection (measured: docs/training.md, "When a run collapses")."""
    wm_invalid_actions: bool = field(default=True, metadata=_WITH_PAW)
    """The WM term also trains on transitions whose action the env rejected (their next
    observation is the env's error text). False leaves them out of the entropy selection."""
    norm_adv_by_std: bool = True
    """GRPO / GiGPO: divide group-centred returns by the group std (the paper's setting). False is
    "Dr. GRPO" (mean-centring only): with std normalisation, a group without a win whose returns
    differ only by invalid-action penalties gets advantages of ±1, as strong as a win."""
    entropy_coef: float = bounded(0.0, 0, 100)
    """Entropy bonus: subtract this × the mean action-token entropy (of the full next-token
    distribution, aggregated like the RL loss) from the objective; > 0 resists collapse onto
    fixed outputs."""
    gamma: float = bounded(0.95, 0, 1, **_WITH_GIGPO)
    """GiGPO step-level discount."""
    gigpo_penalty: Literal["episode", "step"] = field(default="episode", metadata=_WITH_GIGPO)
    """GiGPO: where invalid-action penalties count. ``episode``: in the rewards, so in the
    episode return every step shares and in the discounted step returns. ``step`` (verl-agent's
    ``apply_invalid_action_penalty``): a step's episode score is the task return plus only its
    own penalty, and its step return G_t (of the env's rewards) gets only its own penalty."""
    gigpo_episode_norm: Literal["trajectory", "step"] = field(default="trajectory",
                                                              metadata=_WITH_GIGPO)
    """GiGPO: the group statistics of the episode advantage over the group's trajectories (each
    counted once; GiGPO's Eq. 3) or over its steps (verl-agent's default
    ``compute_mean_std_cross_steps``: a trajectory counts once per step it took)."""
    omega: float = bounded(1.0, 0, 1000, **_WITH_GIGPO)
    """GiGPO step-advantage weight."""
    gigpo_similarity: float = bounded(1.0, 0, 1, low_open=True, **_WITH_GIGPO)
    """GiGPO anchor-state grouping: 1.0 groups identical states only; below 1, states of a
    rollout group at least this similar (normalised Indel similarity) share a group. The paper
    uses 0.9 for search QA."""
    gae_gamma: float = bounded(1.0, 0, 1, **_WITH_PPO)
    """PPO: GAE discount over steps."""
    gae_lambda: float = bounded(1.0, 0, 1, **_WITH_PPO)
    """PPO: GAE λ."""
    clip_eps: float = bounded(0.2, 0, 100, low_open=True)
    """PPO-clip ε."""
    clip_eps_high: float | None = bounded(None, 0, 100, low_open=True)
    """Upper clip ε (None: symmetric)."""
    kl_coef: float = bounded(0.0, 0, 1000)
    """k3 KL-to-reference weight (reference = adapters disabled under LoRA)."""
    rl_agg: Literal["token", "sequence"] = "token"
    """RL loss aggregation inside a group: token or sequence."""
    rollout_correction: RolloutCorrection = "none"
    """Importance weights for the gap between the policy that sampled the rollout (its stored
    log-probs) and the weights the update starts from (their log-probs: from the step's own
    forward pass when the update takes one optimizer step, else one extra no-grad pass); the
    PPO ratio is then taken against those weights. ``sampler_clip``:
    w = min(r, cap) per token, and the PPO clip also on the ratio to the sampler (the trust
    region ``none`` has, kept: the mode for stale rollouts); ``token_truncate``: w = min(r, cap)
    per token; ``token_mask``: w = r, or 0 where r > cap; ``sequence_truncate`` /
    ``sequence_mask``: the same with r the product over the action's tokens; ``none``: no
    weights, the ratio against the stored log-probs (formulas: ``training.rl.correction``).
    Useful with vLLM rollouts or any sampler whose numerics or weights differ from the
    trainer's; the PaW term and the KL term take no weight."""
    rollout_correction_cap: float = bounded(2.0, 1, 1e6, **only_with(
        "rollout_correction is not none", lambda c: c.rollout_correction != "none"))
    """Cap C of ``rollout_correction`` (verl's token default 2; TRL's 3)."""
    rollout_correction_two_sided: bool = False
    """``token_mask`` / ``sequence_mask``: also mask a ratio below 1 / cap (verl's rejection
    sampling)."""
    async_rollouts: bool = False
    """Sample the next rollouts in a worker process while the trainer updates: rollout s is
    sampled by the weights after update max(0, s − max_staleness), so sampling and training
    overlap (``training.rl.async_rollout``). One process (no torchrun), HF rollouts; the worker
    holds a second copy of the model. With a stale sampler the corrections other than
    ``sampler_clip`` are refused (docs/training.md, "Asynchronous rollouts")."""
    max_staleness: int = bounded(1, 0, 10**3, **only_with("async_rollouts is true",
                                                           lambda c: c.async_rollouts))
    """With ``async_rollouts``: the most updates a rollout's sampling weights may be behind the
    weights it is trained on (0: the synchronous schedule, in the worker)."""
    # -- optimisation -------------------------------------------------------------------------
    total_steps: int = bounded(150, 1, 10**7, note="the number of RL updates")
    """RL updates (one rollout each)."""
    ppo_epochs: int = bounded(1, 1, 10**4)
    """Passes over each rollout."""
    mini_batch_size: int = bounded(64, 0, 10**7)
    """Transitions per optimizer step (0: the whole rollout in one step); with several
    processes, all of them together."""
    token_budget: int = bounded(16384, 1, MAX_TOKENS)
    """Padded tokens per micro-batch (bounds activation memory; gradients accumulate)."""
    max_seq_len: int = bounded(4096, 1, MAX_TOKENS)
    """Longest serialised h ⊕ a ⊕ o row; the observation is cut first."""
    noise_gradient_metric: bool = False
    """Log the paper's Appendix A.4 diagnostic at every update: the share of the WM target-logit
    gradient on noisy next-observation tokens (ASIN codes, brand-like capitals) under CE, MAE
    and CMAE (``wm_noise_share_*``; ``training.rl.diagnostics``). Costs one no-grad pass over the
    WM rows."""
    term_gradient_metric: bool = field(default=False, metadata=_WITH_PAW)
    """Log how each optimizer step's gradient (before clipping) splits between the policy
    term and the world-model term: ``grad_norm_rl``, ``grad_norm_wm`` and ``grad_cos_rl_wm``
    (0 where either part is 0; ``PolicyUpdate.term_gradients``: the WM term's gradient from a
    second backward pass, the policy term's the rest). Costs one more forward and backward
    pass per step; the step itself is unchanged."""
    lr: float = bounded(1e-6, 0, 1, what="a learning rate")
    """Actor learning rate."""
    critic_lr: float = bounded(1e-5, 0, 1, what="a learning rate", **_WITH_PPO)
    """PPO critic learning rate."""
    weight_decay: float = bounded(0.0, 0, 10)
    """AdamW weight decay."""
    warmup_steps: int = bounded(0, 0, 10**8)
    """Linear warm-up (optimizer steps)."""
    lr_schedule: Literal["constant", "cosine"] = "constant"
    """constant or cosine (after warm-up)."""
    max_grad_norm: float = bounded(1.0, 0, 10**6, low_open=True)
    """Gradient clipping norm."""
    logits_chunk: int = bounded(512, 1, MAX_TOKENS, note="positions per LM-head chunk")
    """Positions per LM-head chunk in the training pass: the head's transient memory is about
    ``3 × logits_chunk × vocab × 4`` bytes (≈ 0.9 GB for Qwen2.5's 152k vocabulary at 512)."""
    # -- validation -------------------------------------------------------------------------
    val_every: int = bounded(0, 0, 10**7, note="0: no validation")
    """Evaluate on the held-out split every N updates (0: never), logged as ``val_*`` metrics
    (``val_success``, ``val_score``, ``val_invalid_frac``, ...; per task type
    ``val_success/<type>``) in the update's metrics record (verl-agent's ``test_freq``)."""
    val_before_train: bool = False
    """Also evaluate before the first update (logged at step 0)."""
    val_split: str = text("held-out", **_WITH_VALIDATION)
    """Split played by validation: ``held-out`` (the env's held-out split) or a split name."""
    val_limit: int | None = bounded(None, 1, 10**7, note="none: every task", **_WITH_VALIDATION)
    """Tasks per validation: a stratified subset of the split (None: every task once; an env
    that generates tasks from seeds plays 100)."""
    val_temperature: float | None = bounded(None, 0, 100, note="0: greedy", **_WITH_VALIDATION)
    """Validation sampling temperature (None: 0.4, search QA 0.0, as the paper validates)."""
    val_wm_replay: str | None = input_folder(None, **_WITH_VALIDATION)
    """A WM replay of held-out transitions on which every validation also reads the policy as
    a world model, in this run's ``wm_context``: ``val_wm_exact`` (share of next observations
    greedy decoding reproduces exactly), ``val_wm_token`` (share of their tokens that are
    the argmax) and that share on the tokens a copy of the prompt gives and on the others
    (``val_wm_token_kept`` / ``val_wm_token_changed``);
    ``training.warmstart.pretrain.next_observation_accuracy``. None: not measured."""
    # -- bookkeeping --------------------------------------------------------------------------
    seed: int = bounded(0, 0, 2**32, high_open=True)
    """One seed for Python, NumPy, torch and the envs."""
    output_dir: str = output_folder("runs/paw")
    """Checkpoints, metrics.jsonl and curves go here. A new (not resumed) run refuses a folder
    that already holds a run unless ``overwrite``."""
    overwrite: bool = False
    """Start a new run in an ``output_dir`` that holds an earlier one, deleting that run's
    checkpoints, metrics and curves (nothing else in the folder)."""
    save_every: int = bounded(10, 0, 10**7, note="0: only at the end")
    """Checkpoint every N updates (0: only at the end)."""
    keep_checkpoints: int = bounded(2, 1, 10**4)
    """Most recent checkpoints kept on disk (and the best one, see ``on_collapse``)."""
    on_collapse: Literal["warn", "stop", "rollback"] = "warn"
    """When every episode of the rollouts (and validations) of ``collapse_patience`` updates in
    a row fails after the run had succeeded (``training.infra.collapse``), the run prints one
    line naming the best checkpoint; ``warn`` goes on, ``stop`` ends the run there,
    ``rollback`` loads the best checkpoint's weights and optimizer state and goes on from the
    current update."""
    collapse_patience: int = bounded(3, 1, 10**6)
    """Updates in a row without a win that make a collapse (``on_collapse``; 1 and 2 also
    caught runs that recovered, docs/training.md)."""
    tensorboard: bool = False
    """Also log to TensorBoard (needs tensorboard installed)."""
    wandb: bool = False
    """Also log to Weights & Biases (needs wandb installed)."""
    wandb_project: str = text("paw-gym", **only_with("wandb is true", lambda c: c.wandb))
    """W&B project name."""
    progress: bool = True
    """Show a progress bar (in a terminal; a log file gets plain lines instead)."""
    log_every: int = bounded(1, 0, 10**7, note="0: no metrics lines")
    """Print one line of the update's main metrics every N updates (0: never)."""
    num_env_workers: int = bounded(0, 0, 1024, note="0: envs in this process")
    """Env worker processes per rollout (0: envs step in the trainer's process). Pays off for
    slow envs (ALFWorld, 32 envs: 2 workers on 2 cores take 0.58x the rollout time); costs
    ~20 ms per rollout on fast ones (benchmarks/README.md, "Env workers")."""
    record_replay: bool = True
    """Write every on-policy transition to ``<output_dir>/replay/`` (a WM replay, one shard per
    update and process; records carry ``update``, ``group``, ``lambda_g``, ``wm_selected``,
    ``advantage``, the action entropy and token ids). Off saves disk on long runs with long
    prompts."""

    @property
    def rollout_groups(self) -> int:
        """Rollout groups per update: ``n_groups`` of ``group_size`` trajectories, or for PPO
        ``n_groups × group_size`` tasks of one trajectory each."""
        return self.n_groups * (self.group_size if self.algo == "ppo" else 1)

    def _check_relations(self) -> None:
        """What the fields' own types and bounds cannot say: settings that go together."""
        super()._check_relations()

        def bad(name, allowed):
            return ValueError(f"{name}={getattr(self, name)!r} is invalid; expected {allowed}")
        if self.sharding == "fsdp":
            for name, wrong, why in (
                    ("lora", self.lora,
                     "a LoRA run's trained weights are small: use sharding: ddp"),
                    ("noise_gradient_metric",
                     self.noise_gradient_metric and self.rollout_backend == "vllm",
                     "with vLLM rollouts there is no unsharded copy of the weights to score "
                     "with"),
                    ("term_gradient_metric", self.term_gradient_metric,
                     "its gradients are sharded; measure the split with sharding: ddp")):
                if wrong:
                    raise ValueError(f"sharding='fsdp' does not take {name}={getattr(self, name)!r}"
                                     f" ({why})")
        if self.mixed_precision != "no" and (self.sharding != "fsdp" or self.dtype != "float32"):
            raise ValueError(f"mixed_precision={self.mixed_precision!r} computes in bfloat16 over "
                             f"float32 weights sharded by FSDP: it needs sharding: fsdp and dtype:"
                             f" float32 (got sharding={self.sharding!r}, dtype={self.dtype!r})")
        if self.lora and self.lora_dropout > 0:
            raise bad("lora_dropout", "0 in RL training: the training pass must score each token "
                      "as the rollout sampled it (dropout moves the PPO ratio off 1 before any "
                      "update); sft takes it")
        if self.device is not None and not _DEVICE.fullmatch(self.device):
            raise bad("device", "cpu, cuda, cuda:N, mps or none (CUDA when available)")
        if self.group_size < 2 and self.algo in ("grpo", "gigpo", "rloo"):
            raise bad("group_size", f"an integer >= 2 for algo={self.algo!r} (a group of one "
                                    "rollout has no one to compare with: every advantage is 0)")
        if self.async_rollouts and self.rollout_backend != "hf":
            raise bad("rollout_backend", "hf with async_rollouts (its worker samples with an HF "
                                         "policy; vLLM is not built for it)")
        if self.async_rollouts and self.sharding == "fsdp":
            raise bad("sharding", "ddp with async_rollouts (its worker is sent the whole "
                                  "weights after every update; FSDP holds them in shards)")
        if (self.async_rollouts and self.max_staleness > 0
                and self.rollout_correction not in ("none", "sampler_clip")):
            raise bad("rollout_correction", "none or sampler_clip with async_rollouts and "
                      f"max_staleness={self.max_staleness}: the others take the PPO ratio "
                      "against the update's starting weights, which removes the only trust "
                      "region against the stale sampler (the main job collapsed on 8 of 10 "
                      "seeds)")
        if self.rollout_correction_two_sided and not self.rollout_correction.endswith("mask"):
            raise bad("rollout_correction_two_sided", "false unless rollout_correction is "
                      "token_mask or sequence_mask (only they mask)")
        if self.clip_eps_high is not None and not self.clip_eps_high >= self.clip_eps:
            raise bad("clip_eps_high", f"a number >= clip_eps ({self.clip_eps}) or none")
_DEVICE = re.compile(r"cpu|cuda(:\d+)?|mps|xpu(:\d+)?")


#: The ``${VARIABLES}`` the paper configs read their data from, and what each must hold.
DATA_VARIABLES = {
    "WEBSHOP_DATA": "a folder with WebShop's items_shuffle.json and items_ins_v2.json (from "
                    "princeton-nlp/WebShop's setup.sh; docs/webshop.md)",
    "ALFWORLD_DATA": "ALFWorld's data folder (json_2.1.1/, logic/; `alfworld-download`, "
                     "docs/alfworld.md)",
    "SEARCHQA_TRAIN": "Search-R1's NQ + HotpotQA training file (nq_hotpotqa_train/train.parquet; "
                      "docs/searchqa.md)",
    "SEARCHQA_RETRIEVER": "the URL of a Search-R1 /retrieve server over the E5 Wikipedia index, "
                          "e.g. http://127.0.0.1:8000/retrieve (docs/searchqa.md)",
}
#: ``${NAME}``, or the shell's ``$NAME`` (either is read from the environment).
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def expand_variables(value: Any, where: str) -> Any:
    """``${NAME}`` or ``$NAME`` in strings (also inside lists and mappings) replaced by the
    environment variable, as a shell would (``output_dir: $HOME/x`` made a folder named
    ``$HOME``); an unset one is a ValueError naming it, ``where`` it is used and what it
    holds."""
    if isinstance(value, dict):
        return {k: expand_variables(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [expand_variables(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if not os.environ.get(name):
            hint = DATA_VARIABLES.get(name, "its value")
            raise ValueError(f"{where} uses ${{{name}}}, which is not set: set {name} to {hint}")
        return os.environ[name]

    return _VARIABLE.sub(substitute, value)


def _unique_key_loader():
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        """PyYAML's safe loader, except that a key given twice in one mapping is an error (the
        safe loader keeps the last value without a word)."""

        def construct_mapping(self, node, deep=False):
            seen: set = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, typing.Hashable):
                    continue  # the safe loader names an unhashable key itself
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {key!r} is given twice", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None,
                cls: type = TrainConfig):
    """Build ``cls`` from a YAML file (optional) and overrides; unknown keys are an error.
    ``${NAME}`` in the file's string values is read from the environment (see
    :func:`expand_variables`). An override replaces the file's value, except that a mapping
    (``env_kwargs``) is merged key by key over the file's, so ``--env_kwargs split=test`` keeps
    the file's ``data_dir``."""
    import yaml

    values: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"config file {str(path)!r} "
                                    f"{'is a folder' if path.is_dir() else 'does not exist'}")
        try:
            loaded = yaml.load(path.read_text(encoding="utf-8"), Loader=_unique_key_loader())
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            raise ValueError(f"{path}: not valid YAML{where} ({problem})") from None
        if loaded is None:  # a file by mistake empty would otherwise run every default
            raise ValueError(f"{path}: the config file is empty; give at least model and "
                             f"env_id as field: value lines")
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: expected a mapping of field: value, got {type(loaded).__name__}")
        values.update({k: expand_variables(v, f"{path}: {k}") for k, v in loaded.items()})
    for name, value in (overrides or {}).items():
        earlier = values.get(name)
        values[name] = {**earlier, **value} if isinstance(earlier, dict) and \
            isinstance(value, dict) else value
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = [key for key in values if key not in known]
    if unknown:
        hints = []
        for key in unknown:
            nearest = difflib.get_close_matches(str(key), known, n=1)
            hints.append(f"{key!r}" + (f" (did you mean {nearest[0]}?)" if nearest else ""))
        where = f"{path}: " if path is not None else ""
        raise ValueError(f"{where}unknown config key(s) {', '.join(hints)}; the {len(known)} "
                         f"keys are the fields of {cls.__name__} (a command's --help lists them)")
    kinds = field_types(cls)
    for name, value in values.items():
        # e.g. "lr: 5e-5", which YAML 1.1 reads as a string (a bad choice is named by the check)
        if isinstance(value, str) and typing.get_origin(optional_base(kinds[name])[1]) \
                is not Literal:
            try:
                values[name] = parse_value(value, kinds[name])
            except ValueError as error:
                raise ValueError(f"{name}: {error}") from None
    return cls(**values)  # which checks itself (CheckedConfig)


#: The comment line of a shipped config that names what to run before it (see
#: :func:`first_steps`).
FIRST_STEPS = "# first: "


def first_steps(path: str | Path | None) -> str | None:
    """The commands a config file says to run before it (its ``# first: ...`` line, e.g. to
    build the local model it starts from), or None."""
    if path is None or not Path(path).is_file():
        return None
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith(FIRST_STEPS):
            return line[len(FIRST_STEPS):].strip()
    return None


def save_config(config, path: str | Path) -> None:
    """``config`` as YAML at ``path``, written atomically (and recorded as paw-gym's inside a
    claimed output folder: :func:`run_files.outputs.write_text_atomically`)."""
    import yaml

    from run_files.outputs import write_text_atomically

    write_text_atomically(Path(path), yaml.safe_dump(dataclasses.asdict(config),
                                                     sort_keys=False))


@functools.lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """Field docstrings (the string literal after each field), for --help and the docs; a
    field declared in a base class (``ModelConfig``, ``PaWSettings``) has the base's, unless the
    class redeclares it with its own."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for owner in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(owner) or owner.__module__ == "builtins":
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(owner)))
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, following in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr) and \
                    isinstance(getattr(following, "value", None), ast.Constant):
                docs[node.target.id] = str(following.value.value)  # type: ignore[union-attr]
    return docs
