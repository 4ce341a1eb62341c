"""Metrics: JSON Lines always, TensorBoard / Weights & Biases when asked (the PNG curves at the
end are :func:`training.infra.plots.plot_curves`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from run_files import outputs
from run_files.outputs import write_text_atomically
from training.infra.data_files import read_metrics_file

#: Curves drawn by :func:`training.infra.plots.plot_curves` (the paper's training-dynamics figures), when logged and
#: not constant. Validation metrics share their training metric's panel where it has one.
CURVES = ("reward", "val_return", "success", "val_success", "val_score", "invalid_frac",
          "val_invalid_frac", "episode_length", "val_episode_length", "policy_loss", "clip_frac",
          "kl", "action_entropy", "lambda_mean", "wm_leak", "wm_loss", "wm_clipped_frac",
          "val_wm_exact", "val_wm_token", "tokens_per_s")


class MetricsLogger:
    """Append one JSON object per step to ``<dir>/metrics.jsonl`` (flushed every line).

    On resume the file is cut back to the steps before ``start_step`` so a resumed run's file
    reads exactly like an uninterrupted one. In a folder claimed through the output guard
    (:mod:`run_files.outputs`), every file is recorded as paw-gym's: ``metrics.jsonl`` sealed
    after each line, TensorBoard's event file when it is made, and the files W&B wrote into
    ``<dir>/wandb`` when the run closes.
    """

    def __init__(self, directory: str | Path, *, tensorboard: bool = False, wandb: bool = False,
                 wandb_project: str = "paw-gym", config: dict[str, Any] | None = None,
                 start_step: int = 0):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "metrics.jsonl"
        kept = [r for r in read_metrics(self.path) if r["step"] <= start_step] \
            if start_step else []
        # A kill during the rewrite leaves the old history whole, never an empty file.
        write_text_atomically(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        self._file = open(self.path, "a", encoding="utf-8")
        self._tb = self._wandb = None
        self._events: set[Path] = set()
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as error:
                raise RuntimeError("tensorboard=true needs `pip install tensorboard`") from error
            before = _listing(self.directory / "tensorboard")
            self._tb = SummaryWriter(str(self.directory / "tensorboard"))
            self._events = _listing(self.directory / "tensorboard") - before
            for path in self._events:
                outputs.track(path)
        self._wandb_before = _listing(self.directory / "wandb")
        if wandb:
            try:
                import wandb as wandb_module
            except ImportError as error:
                raise RuntimeError("wandb=true needs `pip install wandb`") from error
            self._wandb = wandb_module.init(project=wandb_project, config=config or {},
                                            dir=str(self.directory), resume="allow")

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, **metrics}
        self._file.write(json.dumps(record, default=float) + "\n")
        self._file.flush()
        outputs.seal(self.path)
        numeric = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        if self._tb is not None:
            for key, value in numeric.items():
                self._tb.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(numeric, step=step, commit=True)  # one record per training step

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
            # W&B's own process wrote them: recorded once it is done, the files that were not
            # there before the run started (a user's file put there meanwhile would count).
            for path in _listing(self.directory / "wandb") - self._wandb_before:
                outputs.seal(path)
        for path in self._events:
            outputs.seal(path)


def _listing(folder: Path) -> set[Path]:
    """The plain files under ``folder`` (none when it is missing)."""
    return {path for path in folder.rglob("*") if path.is_file() and not path.is_symlink()} \
        if folder.is_dir() else set()


def run_folder(path: str | Path) -> Path:
    """``path`` as a training run's folder: itself, or for a ``paw-gym demo`` folder (no
    ``metrics.jsonl`` of its own) the run in its ``rl/``."""
    path = Path(path)
    if not (path / "metrics.jsonl").is_file() and (path / "rl" / "metrics.jsonl").is_file():
        return path / "rl"
    return path


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The step records of a ``metrics.jsonl`` ([] when there is none), through the one
    metrics schema (:data:`training.infra.data_files.METRICS_RECORD`: an integer ``step`` >= 0,
    scalar values). Lines that are not such a record (cut by a kill, or damaged) are skipped
    with one ``DataFileWarning`` giving their count and the first ``file:line``."""
    path = Path(path)
    if not path.is_file():
        return []
    return read_metrics_file(path)
