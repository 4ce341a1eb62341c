"""A run that has collapsed says so (``TrainConfig.on_collapse``).

A run *has collapsed* at update s when every episode of the rollouts of the last K updates
(``collapse_patience``, default 3) failed, and every validation episode of those updates that
validated, after the run had succeeded: the best success rate it had seen before, in a rollout
or a validation, must make K rollouts of n episodes without a win rarer than once in a thousand,
(1 − best)^(K·n) < 10⁻³, so that a task the policy rarely wins is not called collapsed. After a
collapse the episodes of a group often score the same (every action invalid), so every GRPO
advantage is 0 (``zero_advantage_groups`` 1) and only the PaW term trains, with λ_g = 1. Why
K = 3: replayed
through this watch, the stored runs of the studies (``python -m benchmarks.collapse --watch``,
benchmarks/README.md) show short runs of failed rollouts that recover (a smaller K calls more
of them collapsed) and runs that fail to their end, which K = 3 finds unless fewer than 3
updates are left.

The best checkpoint is the saved one with the highest score: the success of a validation of
its own weights (at its update), else the success of the first rollout its weights sampled (the
next update's; with ``async_rollouts``, ``max_staleness`` updates later). A rollout's success
scores the weights that sampled it, not the ones its update made: at the update that breaks a
run, the rollout was still good and the new weights are not. Ties go to the later checkpoint.
Pruning keeps it, and the checkpoints still waiting for their rollout, beside the
``keep_checkpoints`` newest. The watch's state travels in each checkpoint's ``state.json``, so a
resumed run knows the run's best.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: A 0 % update counts as a collapse only if the run's best rate makes it rarer than this.
RARER_THAN = 1e-3


@dataclass
class CollapseWatch:
    """What the trainer knows about the run's successes, its best checkpoint and a collapse."""

    best_rate: float = 0.0
    """The best success rate seen (a rollout's or a validation's)."""
    best_rate_at: int = 0
    """The update where it was seen."""
    best_checkpoint: str | None = None
    """The folder of the best checkpoint saved, or None."""
    best_score: float = -1.0
    """Its score (module docstring)."""
    waiting: list[tuple[int, str]] = field(default_factory=list)
    """(weights version, folder) of the checkpoints whose weights have sampled no rollout
    yet."""
    failing: list[int] = field(default_factory=list)
    """The updates of the current run of rollouts without a win (and validations, where
    run)."""
    said: bool = False
    """Whether the current run of failures was said to be a collapse."""

    def observe(self, step: int, metrics: dict[str, Any], episodes: int, patience: int = 1,
                version: int | None = None) -> bool:
        """Account update ``step`` (``metrics``: its metrics, validation included when it
        validated; ``episodes``: the rollout's episode count; ``patience``: K, the failed
        updates in a row that make a collapse; ``version``: the updates done before the
        weights that sampled its rollout). True when the run is found collapsed there."""
        success, validation = metrics.get("success"), metrics.get("val_success")
        for waiting in [w for w in self.waiting if w[0] == version]:
            self.waiting.remove(waiting)
            self._score(waiting[1], success)
        if success == 0 and validation in (None, 0):
            self.failing.append(step)
        else:
            self.failing, self.said = [], False
        found = (not self.said and len(self.failing) >= patience
                 and (1 - self.best_rate) ** (patience * episodes) < RARER_THAN)
        self.said = self.said or found
        for rate in (success, validation):
            if rate is not None and rate > self.best_rate:
                self.best_rate, self.best_rate_at = float(rate), step
        return found

    def restart(self) -> None:
        """Watch afresh from the next update (after a rollback)."""
        self.failing, self.said = [], False

    def note_checkpoint(self, version: int, path: str, metrics: dict[str, Any]) -> None:
        """A checkpoint of the weights after ``version`` updates, saved after the update of
        ``metrics``: scored by its validation, or when its weights' first rollout comes."""
        if metrics.get("val_success") is not None:
            self._score(path, metrics["val_success"])
        else:
            self.waiting.append((version, path))

    def protected(self) -> list[str]:
        """The checkpoints pruning keeps: the best and those waiting for their score."""
        return [path for path in (self.best_checkpoint, *(w[1] for w in self.waiting)) if path]

    def _score(self, path: str, score: float) -> None:
        if score > 0 and score >= self.best_score:  # a checkpoint that wins nothing is no best
            self.best_checkpoint, self.best_score = path, float(score)

    def line(self, episodes: int, action: str, save_every: int) -> str:
        """The one line that says the run has collapsed and what it does now."""
        first, last = self.failing[0], self.failing[-1]
        updates = f"update {last}" if first == last else f"updates {first}–{last}"
        if self.best_checkpoint is None:
            best = f"no saved checkpoint has won an episode yet (save_every={save_every})"
            then = {"warn": "training goes on", "stop": "the run stops",
                    "rollback": "nothing to roll back to, so training goes on"}[action]
        else:
            best = (f"the best checkpoint is {self.best_checkpoint} "
                    f"({100 * self.best_score:.0f} % success)")
            then = {"warn": "training goes on (on_collapse: stop or rollback acts on it)",
                    "stop": "the run stops (on_collapse: stop)",
                    "rollback": "training goes on from it (on_collapse: rollback)"}[action]
        return (f"collapsed at update {last}: every episode of the rollouts of {updates} failed "
                f"({episodes} each), and of any validation among them, after "
                f"{100 * self.best_rate:.0f} % success at update {self.best_rate_at}; {best}; "
                f"{then}")

    def state(self) -> dict[str, Any]:
        """For a checkpoint's ``state.json`` (:meth:`from_state` reads it back)."""
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> CollapseWatch:
        return cls(**{**state, "waiting": [tuple(w) for w in state.get("waiting", [])]})
