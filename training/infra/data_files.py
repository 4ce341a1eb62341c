"""The trainer's data-file kinds, each declared once and read through the schema of
:mod:`run_files.data_files` (:class:`~run_files.data_files.Record` of
:class:`~run_files.data_files.Field`, :func:`~run_files.data_files.read_jsonl`,
:func:`~run_files.data_files.read_json`). What happens to a bad record is said there:

* **a JSON Lines log, appended record by record** — ``metrics.jsonl`` (``paw-gym plot``,
  ``read_metrics``, a resumed run's history): :data:`METRICS_RECORD`, an integer ``step`` >= 0
  and scalar metric values (NaN is the writer's "no reading", e.g. ``grad_norm`` of an update
  that took no step; plots skip it). A bad line is skipped with one
  :class:`~run_files.data_files.DataFileWarning`.
* **files written whole**, refused with :class:`~run_files.data_files.DataFileError`
  (``file:line: reason``; unknown keys are refused):

  - ``wm_config.json`` of a ``train-wm`` output (``eval-wm``) — :func:`read_wm_config`;
  - a checkpoint's ``state.json`` (``--resume``, ``eval``, ``eval-wm``) —
    :data:`CHECKPOINT_STATE`, read by :func:`read_checkpoint_state`;
  - a checkpoint's ``rollouts-ahead.json`` (``--resume`` of an ``async_rollouts`` run) —
    :data:`ROLLOUTS_AHEAD`, read by :func:`training.rl.async_rollout.read_rollouts_ahead`;
  - an ``eval-wm`` predictions file (``--from_predictions``; JSON Lines, but a table from part
    of it would be a wrong table) — :data:`PREDICTION_RECORD`, refused at the first bad line.

The replay record, which wrappers read too, is :data:`run_files.data_files.REPLAY_RECORD`.
Plain Python (no torch).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from run_files.data_files import (DataFileError, Field, Record, number_field,
                                  read_json, read_jsonl, report_bad)

#: One step of ``metrics.jsonl`` (``training.infra.metrics_log.MetricsLogger``): metric names
#: are open, their values scalars.
METRICS_RECORD = Record("metrics record", (Field("step", "int", minimum=0),), extra="scalar")

#: One line of an ``eval-wm`` predictions file (``training.world_model.evaluation.predict``).
PREDICTION_RECORD = Record("predictions record", (
    Field("target", "str"),
    Field("task_type", "str"),
    Field("predictions", "list", items="str"),
    Field("h", "str", required=False),
    Field("a", "str", required=False),
    Field("answers", "list", required=False, items="str"),
    Field("episode_id", "str", required=False),
), extra="keep")

#: ``config`` in ``wm_config.json``: the train-wm settings eval-wm reads, typed; the rest of
#: ``asdict(WorldModelConfig)`` is recorded, not read (its names: :func:`_wm_config_schema`).
_WM_SETTINGS = (
    Field("method", "str", choices=("rwml", "sft", "cmae")),
    Field("seed", "int", minimum=0),
    number_field("val_fraction", minimum=0, below=1),
    Field("wm_context", "str", required=False, choices=("next_turn", "end_of_turn", "none")),
    Field("replay", "str", required=False, nullable=True),
)

#: ``rng`` (and each ``rank_rng`` item) of ``state.json``: ``training.infra.checkpoint.rng_state``.
_RNG = Record("RNG state", (Field("python", "list"), Field("numpy", "list")))

#: A checkpoint's ``state.json`` (``PaWTrainer.save_checkpoint``).
CHECKPOINT_STATE = Record("checkpoint state", (
    Field("step", "int", minimum=0),
    Field("scheduler", "object"),
    Field("rng", _RNG),
    Field("skipped_updates", "int", required=False, minimum=0),
    Field("world_size", "int", required=False, minimum=1),
    Field("rank_rng", "list", required=False, items=_RNG),
    # asdict(TrainConfig): recorded; the one setting read from it (eval-wm) is typed
    Field("config", Record("trainer config", (
        Field("wm_context", "str", required=False, choices=("next_turn", "end_of_turn", "none")),
    ), extra="keep"), required=False),
    Field("rollouts_ahead", Record("rollouts_ahead", (
        Field("max_staleness", "int", minimum=0),
        Field("steps", "list", items="int"),
    )), required=False),
    # training.infra.collapse.CollapseWatch.state()
    Field("collapse", Record("collapse", (
        number_field("best_rate", minimum=0, maximum=1),
        Field("best_rate_at", "int", minimum=0),
        Field("best_checkpoint", "str", nullable=True),
        number_field("best_score", minimum=-1, maximum=1),
        Field("waiting", "list", items="list"),
        Field("failing", "list", items="int"),
        Field("said", "bool"),
    )), required=False),
    # training.infra.numerics.machine(): where the checkpoint was made; recorded, not read
    Field("machine", "object", required=False),
))

_POLICY_OUTPUT = Record("policy output", (
    Field("text", "str"),
    Field("prompt_ids", "list", items="int"),
    Field("response_ids", "list", items="int"),
    # A sampled token's log-probability can underflow to -inf; NaN is still refused.
    Field("logprobs", "list", items="number", finite=False),
    Field("entropies", "list", items="number"),
    Field("finish_reason", "str"),
    Field("prompt_truncated", "bool"),
))
_TRANSITION = Record("transition", (
    Field("prompt", "str"),
    Field("output", _POLICY_OUTPUT),
    Field("action", "str"),
    Field("next_observation", "str"),
    number_field("reward"),
    Field("terminated", "bool"),
    Field("truncated", "bool"),
    Field("invalid_action", "bool"),
    Field("info", "object"),
    number_field("format_penalty"),
))
_TRAJECTORY = Record("trajectory", (
    Field("task_id", "str"),
    Field("task_type", "str"),
    Field("group_index", "int", minimum=0),
    Field("transitions", "list", items=_TRANSITION),
    Field("won", "bool"),
    Field("initial_observation", "str"),
))
#: One rollout sampled ahead (``training.rl.async_rollout.Rollout``); the file is a list of them.
ROLLOUT = Record("rollout", (
    Field("step", "int", minimum=0),
    Field("version", "int", minimum=0),
    Field("trajectories", "list", items=_TRAJECTORY),
    number_field("seconds", minimum=0),
))
#: ``rollouts-ahead.json``: a list of :data:`ROLLOUT`.
ROLLOUTS_AHEAD = Field("rollouts-ahead.json", "list", items=ROLLOUT)


def _wm_config_schema(settings: Sequence[str]) -> Record:
    """``wm_config.json`` (``training.world_model.train.train_world_model``): ``config`` knows
    ``settings``, the fields of ``training.world_model.config.WorldModelConfig``."""
    typed = {f.name for f in _WM_SETTINGS}
    recorded = tuple(name for name in settings if name not in typed)
    return Record("wm_config.json", (
        Field("config", Record("train-wm config", _WM_SETTINGS, known=recorded)),
        Field("replay", "str"),
        Field("split_key", "str", required=False),  # absent: an earlier, id-keyed train-wm
        Field("train_examples", "int", required=False, minimum=0),
        Field("val_examples", "int", required=False, minimum=0),
        # the easy filter's statistics (training.world_model.too_easy.filter_too_easy)
        number_field("easy_fraction", required=False, minimum=0, maximum=1),
        Field("kept", "int", required=False, minimum=0),
        Field("examples", "int", required=False, minimum=0),
    ))


# -- readers ---------------------------------------------------------------------------------

def read_metrics_file(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The step records of a ``metrics.jsonl`` (:data:`METRICS_RECORD`); bad lines are
    skipped with one :class:`~run_files.data_files.DataFileWarning`."""
    records, bad = read_jsonl(path, METRICS_RECORD)
    report_bad(bad, METRICS_RECORD, path, stacklevel=3)
    return records


def read_predictions_file(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of an ``eval-wm`` predictions file (:data:`PREDICTION_RECORD`);
    :class:`DataFileError` at the first bad line, or when there is none."""
    records, _ = read_jsonl(path, PREDICTION_RECORD, strict=True)
    if not records:
        raise DataFileError(path, 0, "the predictions file is empty",
                            f"predictions file {str(path)!r} is empty")
    return records


def read_wm_config(path: str | os.PathLike, settings: Sequence[str]) -> dict[str, Any]:
    """A ``train-wm`` output's ``wm_config.json``, checked (:func:`_wm_config_schema`; its
    ``config`` may hold the names in ``settings``, ``WorldModelConfig``'s fields)."""
    return read_json(path, _wm_config_schema(settings))


def read_checkpoint_state(path: str | os.PathLike) -> dict[str, Any]:
    """A checkpoint's ``state.json`` (``path``: the file or its checkpoint folder), checked
    against :data:`CHECKPOINT_STATE`; :class:`DataFileError` ``file:line: reason`` naming the
    bad key and what is accepted."""
    path = Path(path)
    return read_json(path / "state.json" if path.is_dir() else path, CHECKPOINT_STATE)


def read_rollouts_ahead_file(path: str | os.PathLike) -> list[dict[str, Any]]:
    """A checkpoint's ``rollouts-ahead.json`` as checked plain data (:data:`ROLLOUTS_AHEAD`);
    :func:`training.rl.async_rollout.read_rollouts_ahead` builds the rollouts."""
    return read_json(path, ROLLOUTS_AHEAD)
