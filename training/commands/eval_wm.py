"""``paw-gym eval-wm``: how well a model predicts next observations on a replay's held-out
transitions, per task type and overall.

Two readings (--format). prompted: for each transition the model samples --samples answers
in the world-model prompt format (docs/world_models.md); the table gives the mean embedding
cosine between predicted and real next observations, the % at or above tau, the % exactly right,
and the % of GRPO groups (the samples of one transition) whose embedding rewards are not all
equal; it writes <name>.predictions.jsonl, <name>.md and <name>.json, and --from_predictions
recomputes the table from a predictions file without the model. transition: the policy's own
world model, read where the PaW term (and train-wm's cmae) trains it: o_next teacher-forced
after chat(h) ⊕ a ⊕ the --wm_context separator, the % of next observations greedy decoding
reproduces exactly and the % of their tokens that are the argmax; it writes <name>.md and
<name>.json.

Examples:
  paw-gym eval-wm --checkpoint runs/wm-rwml --replay runs/shelf-replay
  paw-gym eval-wm --checkpoint runs/paw/step-000100 --replay runs/shelf-replay --name paw
  paw-gym eval-wm --checkpoint runs/paw/step-000100 --replay runs/shelf-replay --format transition
  paw-gym eval-wm --from_predictions runs/eval-wm/paw.predictions.jsonl --tau 0.9 --name paw-0.9
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from agents.serialization import WMContext
from training.commands.flags import former_names
from training.infra.checked_config import (MAX_TOKENS, CheckedConfig, bounded, file_name,
                                           input_file, input_folder, model_name, output_folder,
                                           text)
from training.world_model import DEFAULT_TAU


@dataclass
class EvalWMArguments(CheckedConfig):
    """What ``paw-gym eval-wm`` evaluates and where it writes."""

    replay: str | None = input_folder(None)
    """WMReplay directory (default: the replay a train-wm --checkpoint was trained on)."""
    model: str | None = model_name(None)
    """Hub name or model directory (the base model of a LoRA --checkpoint)."""
    checkpoint: str | None = input_folder(None)
    """train-wm output folder, trainer checkpoint (paw-gym train), saved model or adapter."""
    from_predictions: str | None = input_file(None)
    """Recompute the table from this predictions file (no model, no replay)."""
    format: Literal["prompted", "transition"] | None = None
    """prompted (sampled answers to the world-model prompt: rwml's and sft's format) or
    transition (o_next teacher-forced after chat(h) ⊕ a ⊕ separator: the PaW term's and cmae's
    format). None: transition for a train-wm cmae output, else prompted."""
    wm_context: WMContext | None = None
    """transition: the separator before o_next (None: the checkpoint's own, from train-wm's
    or the trainer's config, else next_turn)."""
    split: Literal["validation", "train", "all"] = "validation"
    """Transitions to evaluate: the held-out episodes, the training ones, or all."""
    val_fraction: float | None = bounded(None, 0, 1, high_open=True)
    """Held-out share of the episodes (default: the train-wm checkpoint's, else 0.1)."""
    split_seed: int | None = None
    """Seed of the episode split (default: the train-wm checkpoint's seed, else 0)."""
    limit: int | None = bounded(None, 1, 10**7)
    """Evaluate only the first N transitions of the split."""
    samples: int = bounded(8, 1, 10**4)
    """Answers sampled per transition (a GRPO group)."""
    temperature: float = bounded(1.0, 0, 100)
    """Sampling temperature (0: greedy)."""
    max_new_tokens: int = bounded(256, 1, MAX_TOKENS)
    """Token budget of an answer."""
    seed: int = 0
    """Sampling seed."""
    tau: float = bounded(DEFAULT_TAU, -1, 1, what="a cosine")
    """Cosine threshold of the embedding reward."""
    embedding_model: str = text("all-MiniLM-L6-v2")
    """sentence-transformers model that embeds the observations."""
    device: str | None = text(None)
    """Torch device of the model (default: cuda when available, else cpu)."""
    output_dir: str = output_folder("runs/eval-wm", **former_names("out"))
    """Output directory."""
    name: str | None = file_name(None)
    """File stem (default: wm_<split>, or the predictions file's stem)."""
    overwrite: bool = False
    """Replace files of the same name in --output_dir."""


def add_parser(subparsers) -> None:
    from training.commands.flags import add_command

    add_command(subparsers, "eval-wm", EvalWMArguments,
                help="evaluate next-observation prediction on a replay's held-out transitions",
                description=__doc__).set_defaults(func=run)


def run(args) -> int:
    from training.commands.flags import arguments_from

    return evaluate_world_model(arguments_from(args, EvalWMArguments))


def trained_wm_settings(checkpoint: str | None) -> dict:
    """``wm_config.json`` of a train-wm output folder (its replay, split, method and
    wm_context), or {}."""
    from training.commands.common import UserError
    from dataclasses import fields

    from run_files.data_files import DataFileError
    from training.infra.data_files import read_wm_config
    from training.world_model.config import WorldModelConfig

    path = Path(checkpoint or "") / "wm_config.json"
    if not checkpoint or not path.is_file():
        return {}
    try:
        saved = read_wm_config(path, [f.name for f in fields(WorldModelConfig)])
    except DataFileError as error:
        raise UserError(f"--checkpoint {checkpoint!r}: {error}") from None
    return {"replay": saved["replay"], "split_key": saved.get("split_key"),
            **{k: saved["config"][k] for k in ("seed", "val_fraction", "method")},
            "wm_context": saved["config"].get("wm_context")}


def checkpoint_wm_context(checkpoint: str | None, trained: dict) -> str:
    """The wm_context a checkpoint was trained with: train-wm's, a trainer checkpoint's
    (``state.json``), else the default next_turn."""
    state = Path(checkpoint or "") / "state.json"
    if trained.get("wm_context"):
        return trained["wm_context"]
    if checkpoint and state.is_file():
        from training.commands.common import UserError
        from run_files.data_files import DataFileError
        from training.infra.data_files import read_checkpoint_state

        try:
            config = read_checkpoint_state(state).get("config") or {}
        except DataFileError as error:
            raise UserError(f"--checkpoint {checkpoint!r}: {error}") from None
        return config.get("wm_context", "next_turn")
    return "next_turn"


def transition_rows(policy, examples, wm_context: str, max_seq_len: int) -> list[dict]:
    """Per task type (sorted) and overall: transitions, exact % and token % of the policy's
    teacher-forced next-observation prediction (``next_observation_accuracy``)."""
    from training.warmstart.pretrain import next_observation_accuracy
    from training.world_model import OVERALL

    groups: dict[str, list] = {}
    for example in examples:
        groups.setdefault(example.task_type, []).append(example)
    rows = []
    for name, items in [*sorted(groups.items()), (OVERALL, list(examples))]:
        scores = next_observation_accuracy(
            policy, [{"h": e.h, "a": e.a, "o_next": e.o_next} for e in items], max_seq_len,
            wm_context)
        rows.append({"task_type": name, "transitions": scores["transitions"],
                     "exact": scores["exact"], "token": scores["token"]})
    return rows


def transition_markdown(rows: list[dict], title: str, wm_context: str) -> str:
    lines = [f"### {title}", "", f"o_next teacher-forced after chat(h) ⊕ a ⊕ the `{wm_context}` "
             "separator.", "", "| task type | transitions | exact % | token % |",
             "|---|---:|---:|---:|"]
    lines += [f"| {r['task_type']} | {r['transitions']} | {r['exact']:.1f} | {r['token']:.1f} |"
              for r in rows]
    return "\n".join(lines) + "\n"


def evaluate_world_model(arguments: EvalWMArguments) -> int:
    from training.commands.common import UserError, claim_output_files
    from training.infra.numerics import machine
    from training.preflight import check_model
    from training.world_model import (SPLIT_KEY, EmbeddingReward, load_examples, predict,
                                      read_predictions, select_split, summarize_predictions,
                                      table_markdown, write_predictions, write_wm_tables)

    trained = trained_wm_settings(arguments.checkpoint)
    if trained and trained["split_key"] != SPLIT_KEY and arguments.split != "all":
        raise UserError(f"--checkpoint {arguments.checkpoint!r} was trained by an earlier train-wm "
                        f"that split episodes by their random ids, so its {arguments.split} "
                        f"split cannot be rebuilt; train it again, or evaluate with --split all")
    seed = arguments.split_seed if arguments.split_seed is not None else trained.get("seed", 0)
    val_fraction = arguments.val_fraction if arguments.val_fraction is not None else \
        trained.get("val_fraction", 0.1)
    if not 0.0 <= val_fraction < 1.0:
        raise UserError(f"--val_fraction must be in [0, 1), got {val_fraction}")
    fmt = arguments.format or ("transition" if trained.get("method") == "cmae" else "prompted")
    if fmt == "transition" and arguments.from_predictions:
        raise UserError("--from_predictions recomputes a prompted table; --format transition "
                        "needs the model")
    meta = {"tau": arguments.tau, "embedding_model": arguments.embedding_model,
            "arguments": asdict(arguments), "format": fmt, "machine": machine()}
    if arguments.from_predictions:
        try:
            records = read_predictions(arguments.from_predictions)
        except ValueError as error:
            raise UserError(str(error)) from None
        name = arguments.name or Path(arguments.from_predictions).name.removesuffix(
            ".predictions.jsonl").removesuffix(".jsonl") + "-recomputed"
        meta["from_predictions"] = arguments.from_predictions
    else:
        if not arguments.model and not arguments.checkpoint:
            raise UserError("give --model or --checkpoint (or --from_predictions FILE)")
        if arguments.model:
            check_model(arguments.model)
        replay = arguments.replay or trained.get("replay")
        if not replay:
            raise UserError("give --replay DIR (the transitions to predict)")
        if not Path(replay).exists():
            raise UserError(f"--replay {replay!r} does not exist")
        try:
            examples = select_split(load_examples(replay), arguments.split, seed, val_fraction)
        except ValueError as error:
            raise UserError(str(error)) from None
        if not examples:
            raise UserError(f"replay {replay!r} has no {arguments.split} transitions (split seed "
                            f"{seed}, val_fraction {val_fraction}); record more episodes or "
                            "use --split all")
        examples = examples[:arguments.limit] if arguments.limit else examples
        name = arguments.name or f"wm_{arguments.split}"
        meta.update(replay=replay, split=arguments.split, split_seed=seed,
                    val_fraction=val_fraction, transitions=len(examples),
                    model=arguments.model, checkpoint=arguments.checkpoint)
    out = Path(arguments.output_dir)
    suffixes = ("md", "json") if fmt == "transition" else ("md", "json", "predictions.jsonl")
    files = [out / f"{name}.{suffix}" for suffix in suffixes]
    claim_output_files(files, arguments.overwrite, "--name", "--output_dir")
    if not arguments.from_predictions:
        from training.evaluate import load_policy

        checkpoint = arguments.checkpoint
        if checkpoint and (Path(checkpoint) / "wm_config.json").is_file():
            checkpoint = str(Path(checkpoint) / "model")  # a train-wm output folder
        try:
            policy = load_policy(arguments.model, checkpoint, arguments.device, arguments.seed)
        except (ValueError, FileNotFoundError, OSError) as error:
            raise UserError(str(error)) from error
        if fmt == "transition":
            context = arguments.wm_context or checkpoint_wm_context(arguments.checkpoint, trained)
            rows = transition_rows(policy, examples, context, max_seq_len=4096)
            meta["wm_context"] = context
            out.mkdir(parents=True, exist_ok=True)
            files[0].write_text(transition_markdown(rows, name, context), encoding="utf-8")
            files[1].write_text(json.dumps({"meta": meta, "rows": rows}, indent=2),
                                encoding="utf-8")
            print(transition_markdown(rows, name, context))
            print("written: " + ", ".join(map(str, files)))
            return 0
        print(f"predicting {len(examples)} {arguments.split} transitions x {arguments.samples} "
              "samples")
        records = predict(policy, examples, arguments.samples,
                          temperature=arguments.temperature,
                          max_new_tokens=arguments.max_new_tokens, seed=arguments.seed)
        write_predictions(records, out / f"{name}.predictions.jsonl")
    rows = summarize_predictions(records, EmbeddingReward(arguments.embedding_model,
                                                          arguments.tau))
    paths = write_wm_tables(rows, meta, out, name)
    print(table_markdown(rows, name, arguments.tau))
    print("written: " + ", ".join(str(p) for p in [*paths.values()] + (
        [] if arguments.from_predictions else [out / f"{name}.predictions.jsonl"])))
    return 0
