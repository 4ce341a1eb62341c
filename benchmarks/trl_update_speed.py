"""paw-gym's GRPO update against TRL's ``GRPOTrainer`` doing the same work (issue 56, item 1).

Both train SmolLM2-135M-Instruct (``smollm2-135m-instruct``) with the same LoRA adapter (r 16,
alpha 32 on every projection, float32 weights) on single-step Shelf episodes (the first step of
a training task: a prompt, one sampled action, the env's reward), 4 groups of 4 episodes per
update, at most 32 new tokens at temperature 1.0, one AdamW step per update at a constant
learning rate, no KL term, one torch thread, in one process. ``--init-checkpoint`` starts both
from a LoRA adapter (an SFT start, so that episodes differ within a group and the RL gradient is
not 0; ``--temperature`` sets both sides' sampling):

* **paw-gym**: ``PaWTrainer.train_step`` with ``paw: false`` (vanilla GRPO) and a token budget
  that holds the whole rollout, so the update is one forward and backward pass;
* **TRL**: ``PaWGRPOTrainer`` with ``paw=False`` (TRL's own GRPO loss, forward and backward;
  ``per_device_train_batch_size`` = the 16 episodes, one step per generation), its episodes
  played by ``EnvRollout`` with paw-gym's sampler and the native first prompt (the paper's
  step-0 template), so both sample with the same code from the same prompts and the update is
  what differs (paw-gym's rows also hold the next observation, which the world-model term
  needs: the tokens columns show it).

A round runs one update of each, in alternating order; after one warm-up round the medians over
the rounds are reported, with each side's rollout and update seconds (TRL's update is its step
minus its rollout, timed around ``EnvRollout``) and the tokens each update ran forward and
backward through the decoder (``training.models.count_layer_passes``), which say whether the
two did the same work, and the update's seconds per 1,000 tokens backward. TRL's steps are
timed from its ``on_step_begin`` to its ``on_step_end`` (``trainer.train()`` is called once per
round with one step, so TRL's own set-up is outside).

    python -m benchmarks.trl_update_speed                  # 1 warm-up + 3 rounds, ~25 min here
    python -m benchmarks.trl_update_speed --rounds 1
    python -m benchmarks.trl_update_speed --init-checkpoint runs/real/shelf-sft --temperature 0.6 \
        --out benchmarks/results/trl_update_speed_sft.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from benchmarks.common import RESULTS, machine, set_threads, write_json

MODEL = "smollm2-135m-instruct"
ENV = "PaW/Shelf-v0"
LORA = dict(lora=True, lora_r=16, lora_alpha=32, dtype="float32")


def native_trainer(args, work: Path):
    from training.config import TrainConfig
    from training.trainer import PaWTrainer

    config = TrainConfig(
        model=args.model, **LORA, init_checkpoint=args.init_checkpoint, env_id=ENV,
        env_kwargs={"split": "train"}, max_episode_steps=1,
        n_groups=args.groups, group_size=args.group_size, max_new_tokens=args.new_tokens,
        temperature=args.temperature, paw=False, algo="grpo", lr=args.lr, lr_schedule="constant",
        warmup_steps=0, mini_batch_size=0, token_budget=args.token_budget, kl_coef=0.0,
        total_steps=10**6, val_every=0, val_before_train=False, save_every=0,
        record_replay=False, progress=False, device="cpu", seed=args.seed,
        output_dir=str(work / "paw-gym"), overwrite=True)
    return PaWTrainer(config)


class TimedRollout:
    """Seconds spent in the wrapped ``EnvRollout`` (TRL's generation phase)."""

    def __init__(self):
        self.seconds = 0.0


def trl_trainer(args, work: Path, timer: TimedRollout):
    from transformers import TrainerCallback

    from agents.envs import GENERIC_FIRST_STEP
    from agents.model_sources import resolve_model
    from training.infra.model_config import ModelConfig
    from training.integrations.trl import (EnvRollout, PaWGRPOConfig, PaWGRPOTrainer,
                                           task_dataset)

    class Timed(EnvRollout):
        def __call__(self, prompts, trainer):
            start = time.perf_counter()
            try:
                return super().__call__(prompts, trainer)
            finally:
                timer.seconds += time.perf_counter() - start

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.steps: list[float] = []
            self._start = 0.0

        def on_step_begin(self, *_, **__):
            self._start = time.perf_counter()

        def on_step_end(self, *_, **__):
            self.steps.append(time.perf_counter() - self._start)

    rows = args.groups * args.group_size
    # The native trainer's first prompt (the paper's template for step 0), so that both train
    # on the same prompts.
    env = Timed(ENV, max_steps=1, max_new_tokens=args.new_tokens, template=GENERIC_FIRST_STEP,
                env_kwargs={"split": "train"})
    config = PaWGRPOConfig(
        output_dir=str(work / "trl"), paw=False, num_generations=args.group_size,
        per_device_train_batch_size=rows, gradient_accumulation_steps=1, max_steps=1,
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, beta=0.0,
        temperature=args.temperature, max_completion_length=512, use_cpu=True, report_to=[],
        save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=args.seed)
    steps = StepTimer()
    # With an SFT adapter it loads trainable on the base, as `train` starts it.
    model = ModelConfig(model=str(resolve_model(args.model)), init_checkpoint=args.init_checkpoint,
                        **LORA)
    trainer = PaWGRPOTrainer(
        model=model, env=env, args=config,
        train_dataset=task_dataset(ENV, range(10**5, 10**5 + 64 * rows),
                                   template=GENERIC_FIRST_STEP, split="train"),
        callbacks=[steps])
    return trainer, steps


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (after 1 warm-up)")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", dest="group_size", type=int, default=4)
    parser.add_argument("--new-tokens", dest="new_tokens", type=int, default=32)
    parser.add_argument("--token-budget", dest="token_budget", type=int, default=16384,
                        help="paw-gym's padded tokens per micro-batch (the whole rollout)")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--temperature", type=float, default=1.0, help="both sides' sampling")
    parser.add_argument("--init-checkpoint", dest="init_checkpoint", default=None,
                        help="a LoRA adapter folder both sides start from (default: the bare "
                             "model with a fresh adapter)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default=MODEL, help="an offline model's name or a folder")
    parser.add_argument("--work", default="runs/bench/trl_update_speed")
    parser.add_argument("--out", default=str(RESULTS / "trl_update_speed.json"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    set_threads(1)
    from paw_gym.progress import passed_tokens
    from training.models import count_layer_passes

    work = Path(args.work)
    native = native_trainer(args, work)
    timer = TimedRollout()
    trl, trl_steps = trl_trainer(args, work, timer)
    count_layer_passes(trl.model)
    rows: dict[str, list[dict[str, float]]] = {"paw-gym": [], "trl": []}
    for round_ in range(1 + args.rounds):
        for side in (("paw-gym", "trl") if round_ % 2 == 0 else ("trl", "paw-gym")):
            before = passed_tokens()
            if side == "paw-gym":
                metrics = native.train_step()
                row = {"step_s": metrics["step_time"], "rollout_s": metrics["rollout_time"],
                       "update_s": metrics["update_time"],
                       # 0: no episode differed from its group (both sides' RL gradient is 0)
                       "advantage_abs_mean": metrics["advantage_abs_mean"]}
            else:
                timer.seconds = 0.0
                trl.train()
                step = trl_steps.steps[-1]
                row = {"step_s": step, "rollout_s": timer.seconds,
                       "update_s": step - timer.seconds}
            forward, backward = (now - then for now, then in zip(passed_tokens(), before))
            # the rollout's forward tokens (prompts and sampled tokens) are in `forward` too
            row.update(tokens_forward=forward, tokens_backward=backward)
            print(f"round {round_}{' (warm-up)' if round_ == 0 else ''} {side}: "
                  + ", ".join(f"{k} {v:,.1f}" for k, v in row.items()), flush=True)
            if round_:
                rows[side].append(row)
    median = {side: {key: statistics.median(r[key] for r in runs) for key in runs[0]
                     if key != "advantage_abs_mean"}
              for side, runs in rows.items()}
    for values in median.values():
        values["update_s_per_1k_tokens_backward"] = 1000 * values["update_s"] / max(
            values["tokens_backward"], 1.0)
    ratios = {f"paw-gym / trl {key}": median["paw-gym"][key] / median["trl"][key]
              for key in ("step_s", "update_s", "tokens_backward",
                          "update_s_per_1k_tokens_backward")}
    result = {"machine": machine(), "settings": vars(args), "rounds": rows, "median": median,
              "ratios": ratios}
    write_json(Path(args.out), result)
    for side, values in median.items():
        print(f"median {side}: " + ", ".join(f"{k} {v:,.1f}" for k, v in values.items()))
    print("ratios: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items()))
    return result


if __name__ == "__main__":
    main()
