"""Metrics: JSON Lines always, TensorBoard / Weights & Biases when asked, PNG curves at the end."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

#: Curves drawn by :func:`plot_curves` (the paper's training-dynamics figures), when logged.
CURVES = ("reward", "success", "policy_loss", "clip_frac", "kl", "action_entropy",
          "lambda_mean", "wm_loss", "wm_clipped_frac", "tokens_per_s")


class MetricsLogger:
    """Append one JSON object per step to ``<dir>/metrics.jsonl`` (flushed every line).

    On resume the file is cut back to the steps before ``start_step`` so a resumed run's file
    reads exactly like an uninterrupted one.
    """

    def __init__(self, directory: str | Path, *, tensorboard: bool = False, wandb: bool = False,
                 wandb_project: str = "paw-gym", config: dict[str, Any] | None = None,
                 start_step: int = 0):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "metrics.jsonl"
        kept = [r for r in read_metrics(self.path) if r.get("step", 0) <= start_step] \
            if start_step else []
        with open(self.path, "w", encoding="utf-8") as handle:
            for record in kept:
                handle.write(json.dumps(record) + "\n")
        self._file = open(self.path, "a", encoding="utf-8")
        self._tb = self._wandb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as error:
                raise RuntimeError("tensorboard=true needs `pip install tensorboard`") from error
            self._tb = SummaryWriter(str(self.directory / "tensorboard"))
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


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a kill: the step is re-run after resume
    return records


def plot_curves(metrics_path: str | Path, out_path: str | Path,
                keys: tuple[str, ...] = CURVES) -> Path | None:
    """One small panel per logged metric in ``keys``; returns the PNG path (None if no data)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_path)
    present = [k for k in keys if any(isinstance(r.get(k), (int, float)) for r in records)]
    if not present:
        return None
    cols = min(4, len(present))
    rows = math.ceil(len(present) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.6 * rows), squeeze=False)
    for ax, key in zip(axes.flat, present):
        points = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", linewidth=1)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(present):]:
        ax.axis("off")
    fig.tight_layout()
    out_path = Path(out_path)
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path
