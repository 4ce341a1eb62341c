"""Shared pieces of the benchmark scripts: env presets, the tiny-model warm start, one RL run.

Everything is cached under ``runs/bench/`` (git-ignored): the expert demos, the tiny model and
the SFT warm starts are built once per env and reused by every run, so runs differ only in the
trainer settings under study.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "runs" / "bench"
RESULTS = REPO / "benchmarks" / "results"


@dataclass(frozen=True)
class EnvPreset:
    """How one embedded env is trained and evaluated at tiny scale on CPU."""

    env_id: str
    """Registered id."""
    train_kwargs: dict[str, Any]
    """gym.make arguments of the training tasks (expert demos and RL)."""
    eval_kwargs: dict[str, Any]
    """gym.make arguments of the held-out evaluation tasks."""
    max_steps: int
    """Per-episode step cap (CPU budget; the expert needs fewer)."""
    r_max: float
    """Largest episode return (for λ_g)."""
    expert_episodes: int
    """Expert episodes for the tokenizer and the SFT warm start."""
    eval_episodes: int
    """Held-out tasks per evaluation."""
    max_new_tokens: int = 40
    """Longest response per step (expert actions fit easily)."""
    history_length: int = 1
    """Steps of history in the prompt (paper: 2; 1 keeps CPU prompts short)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Additional TrainConfig fields."""


PRESETS: dict[str, EnvPreset] = {
    # WebShop: embedded procedural catalog; dev goals train, test goals evaluate.
    "webshop": EnvPreset("PaW/WebShop-v0", {"split": "dev"}, {"split": "test"}, max_steps=8,
                         r_max=10.0, expert_episodes=300, eval_episodes=100),
    # ALFWorld: generated games; train games train, in-distribution eval games evaluate.
    # (No "progress" kwarg: rollout() takes env kwargs flat and has its own ``progress``.)
    "alfworld": EnvPreset("PaW/ALFWorld-v0", {"split": "train"},
                          {"split": "eval_in_distribution"}, max_steps=20,
                          r_max=10.0, expert_episodes=120, eval_episodes=60),
}


def set_threads(n: int = 1) -> None:
    import torch

    torch.set_num_threads(n)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def machine() -> dict[str, Any]:
    """Where and when the figures were measured: the results files' machine record
    (:func:`training.infra.numerics.machine`: CPU, torch's kernels, numerics mode, lock hash,
    Python), the date and the cores."""
    from training.infra.numerics import machine as record

    return {"date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), **record(),
            "cores": os.cpu_count()}


def _done(path: Path) -> bool:
    return (path / "DONE").is_file()


def _mark_done(path: Path) -> None:
    (path / "DONE").write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def expert_demos(env: str, seed: int = 0) -> Path:
    """Expert episodes on the training tasks of ``env`` (a WMReplay), built once."""
    from training.warmstart.sft import record_expert_demos

    preset = PRESETS[env]
    out = CACHE / env / "expert-demos"
    if not _done(out):
        import shutil

        shutil.rmtree(out, ignore_errors=True)
        record_expert_demos(preset.env_id, preset.expert_episodes, out, seed=seed,
                            max_steps=preset.max_steps, history_length=preset.history_length,
                            **preset.train_kwargs)
        _mark_done(out)
    return out


def tiny_model(env: str, size: str = "nano") -> Path:
    """A randomly initialised tiny Qwen2 whose tokenizer saw the env's expert text."""
    from agents.tiny_model import build_tiny_model
    from wrappers import TEMPLATES, WMReplay

    out = CACHE / env / f"tiny-{size}"
    if not _done(out):
        replay = WMReplay.load(expert_demos(env))
        texts = [text for pair in TEMPLATES.values() for text in pair]
        texts += [str(r[k]) for r in replay for k in ("h", "a", "o_next")]
        build_tiny_model(texts, out, size=size, seed=0)
        _mark_done(out)
    return out


def warm_start(env: str, epochs: int, lr: float = 3e-3, size: str = "nano",
               episodes: int | None = None) -> Path:
    """SFT of the tiny model on the expert demos (``epochs == 0``: the random model).

    ``episodes`` keeps only that many successful expert episodes (a weaker warm start for the
    sparse-reward study); None uses them all.
    """
    from training.warmstart.sft import SFTConfig, run_sft

    base = tiny_model(env, size)
    if epochs == 0:
        return base
    suffix = "" if episodes is None else f"-n{episodes}"
    out = CACHE / env / f"sft-{size}-e{epochs}-lr{lr:g}{suffix}"
    if not _done(out):
        replay = expert_demos(env)
        if episodes is not None:
            replay = _subset_replay(replay, episodes, CACHE / env / f"expert-demos-n{episodes}")
        _, history = run_sft(SFTConfig(model=str(base), replay=str(replay), output_dir=str(out),
                                       epochs=epochs, lr=lr, seed=0, device="cpu",
                                       token_budget=8192, progress=False,
                                       overwrite=True))  # an interrupted build of this cache
        write_json(out / "sft_history.json", history)
        _mark_done(out)
    return out


def _subset_replay(replay_dir: Path, episodes: int, out: Path) -> Path:
    """The transitions of the first ``episodes`` successful episodes of a replay."""
    from wrappers import WMReplay

    if _done(out):
        return out
    won = WMReplay.load(replay_dir).filter(success=True).episodes()
    kept = WMReplay(out)
    for eid in sorted(won)[:episodes]:
        kept.extend(won[eid])
    kept.close()
    _mark_done(out)
    return out


def bench_model(env: str) -> Path:
    """The model the speed benchmarks run: the best finished SFT warm start of ``env`` (its
    responses have realistic lengths), else the random tiny model."""
    done = sorted((p for p in (CACHE / env).glob("sft-nano-e*") if _done(p)),
                  key=lambda p: int(p.name.split("-e")[1].split("-")[0]))
    return done[-1] if done else tiny_model(env)


def eval_seeds(env: str, n: int | None = None) -> list[int]:
    n = PRESETS[env].eval_episodes if n is None else n
    return list(range(10_000, 10_000 + n))


def evaluate_policy(policy, env: str, episodes: int | None = None, seed: int = 0,
                    max_steps: int | None = None):
    """Per-task-type table of ``policy`` on the held-out tasks (temperature 0.4)."""
    from training.evaluate import evaluate

    preset = PRESETS[env]
    return evaluate(policy, preset.env_id, eval_seeds(env, episodes), temperature=0.4,
                    max_new_tokens=preset.max_new_tokens,
                    max_steps=max_steps or preset.max_steps, seed=seed,
                    history_length=preset.history_length, **preset.eval_kwargs)


def train_config(env: str, model: Path, output_dir: Path, **overrides: Any):
    """A TrainConfig for ``env`` at tiny CPU scale; ``overrides`` win. ``max_seq_len`` is long
    enough that no rollout prompt is cut (the nano model's context is 4096 tokens)."""
    from training.config import TrainConfig

    preset = PRESETS[env]
    values: dict[str, Any] = dict(
        model=str(model), env_id=preset.env_id, env_kwargs=dict(preset.train_kwargs),
        history_length=preset.history_length, max_episode_steps=preset.max_steps,
        r_max=preset.r_max, lora=False, n_groups=4, group_size=4,
        max_new_tokens=preset.max_new_tokens, total_steps=10, lr=2e-4, mini_batch_size=0,
        token_budget=16384, max_seq_len=8192, max_obs_tokens=256, output_dir=str(output_dir),
        overwrite=True,  # benchmark scratch: a rerun replaces it
        save_every=0, keep_checkpoints=1, device="cpu", progress=False, seed=0)
    values.update(preset.extra)
    values.update(overrides)
    return TrainConfig(**values)


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=float), encoding="utf-8")
    tmp.replace(path)  # atomic: a killed run never leaves a half-written result


def load_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def median(values: list[float]) -> float:
    import statistics

    return float(statistics.median(values)) if values else float("nan")


class RSSPeak:
    """Peak resident set size (MiB) above the level at ``__enter__``.

    Exact where the kernel lets a process reset its RSS high-water mark (Linux ≥ 4.0: write 5
    to ``/proc/self/clear_refs``, then read ``VmHWM``); otherwise sampled in a thread every
    ``interval`` seconds, which can miss a short peak (a thread holding the GIL through an
    allocation and its release never lets the sampler in).
    """

    def __init__(self, interval: float = 0.001):
        self.interval = interval
        self.peak = 0.0

    @staticmethod
    def rss_mb() -> float:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    @staticmethod
    def high_water_mb() -> float:
        with open("/proc/self/status") as handle:
            line = next(line for line in handle if line.startswith("VmHWM:"))
        return int(line.split()[1]) / 1024  # kB

    @staticmethod
    def reset_high_water() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as handle:
                handle.write("5")
            return True
        except OSError:
            return False

    def __enter__(self):
        self.start = self.rss_mb()
        self.peak = self.start
        self.exact = self.reset_high_water()
        if not self.exact:
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss_mb())
            time.sleep(self.interval)

    def __exit__(self, *exc):
        if self.exact:
            self.peak = max(self.peak, self.high_water_mb())
        else:
            self._stop.set()
            self._thread.join()
        self.peak = max(self.peak, self.rss_mb())

    @property
    def growth(self) -> float:
        return self.peak - self.start
