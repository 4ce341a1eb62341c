"""Rollout correction (``training.rl.correction``): the weights against a literal reference, and
the trainer's use of them on a stale rollout."""

from __future__ import annotations

import copy
import json
import math

import pytest

torch = pytest.importorskip("torch")

from training.config import TrainConfig  # noqa: E402
from training.rl.correction import CORRECTIONS, correction_weights  # noqa: E402
from training.trainer import PaWTrainer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

E = math.e
#: π_old and μ log-probs of two actions (3 and 2 tokens; the last slot of row 1 is padding).
TRAIN = torch.tensor([[0.0, -1.0, -2.0], [-0.5, 0.0, 0.0]])
ROLLOUT = torch.tensor([[0.0, -2.0, -1.0], [-1.0, -0.5, -7.0]])
MASK = torch.tensor([[True, True, True], [True, True, False]])
# log r = [[0, 1, -1], [0.5, 0.5, -]]; per action, log R = [0, 1]; the cap is 2.
REFERENCE = {
    "token_truncate": ([[1.0, 2.0, 1 / E], [E**0.5, E**0.5, 0.0]], 1 / 5),
    "token_mask": ([[1.0, 0.0, 1 / E], [E**0.5, E**0.5, 0.0]], 1 / 5),
    "sequence_truncate": ([[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]], 1 / 2),
    "sequence_mask": ([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]], 1 / 2),
}


@pytest.mark.parametrize("mode", sorted(REFERENCE))
def test_weights_match_the_formulas_on_a_fixed_batch(mode):
    result = correction_weights(TRAIN, ROLLOUT, MASK, mode, cap=2.0)
    weights, corrected = REFERENCE[mode]
    assert torch.allclose(result.weights, torch.tensor(weights, dtype=torch.float64),
                          rtol=1e-12, atol=0)
    assert result.corrected_frac == pytest.approx(corrected)
    assert result.gap_mean == pytest.approx((0 + 1 + 1 + 0.5 + 0.5) / 5)
    assert result.gap_max == pytest.approx(1.0)
    assert result.weight_mean == pytest.approx(sum(map(sum, weights)) / 5)


def test_modes_are_the_config_choices_and_other_values_are_refused():
    assert set(REFERENCE) | {"none"} == set(CORRECTIONS)
    with pytest.raises(ValueError, match=r"mode='none': use one of \('token_truncate'"):
        correction_weights(TRAIN, ROLLOUT, MASK, "none", cap=2.0)
    with pytest.raises(ValueError, match=r"cap=0.5: a number >= 1"):
        correction_weights(TRAIN, ROLLOUT, MASK, "token_mask", cap=0.5)
    with pytest.raises(ValueError, match=r"rollout_correction"):
        TrainConfig(model="m", rollout_correction="token")
    with pytest.raises(ValueError, match=r"rollout_correction_cap"):
        TrainConfig(model="m", rollout_correction_cap=0.9)


@pytest.mark.parametrize("mode", sorted(REFERENCE))
def test_weights_are_exactly_one_when_the_policies_agree(mode):
    result = correction_weights(TRAIN, TRAIN.clone(), MASK, mode, cap=1.0)
    assert torch.equal(result.weights, MASK.double())
    assert (result.gap_mean, result.gap_max, result.corrected_frac, result.weight_mean) == (
        0.0, 0.0, 0.0, 1.0)


def test_a_very_stale_action_gets_a_finite_weight():
    """A log-ratio sum of 2,000 would overflow exp: the cap applies before it."""
    train, rollout = torch.zeros(1, 1000), torch.full((1, 1000), -2.0)
    for mode in ("sequence_truncate", "sequence_mask"):
        weights = correction_weights(train, rollout, torch.ones(1, 1000, dtype=torch.bool),
                                     mode, cap=3.0).weights
        assert torch.isfinite(weights).all()
        assert weights.unique().tolist() == ([3.0] if mode == "sequence_truncate" else [0.0])


def _config(model_dir, tmp_path, **overrides):
    values = dict(model=str(model_dir), env_id="Test/GuessNumber-v0", n_groups=2, group_size=2,
                  max_new_tokens=10, max_episode_steps=2, total_steps=2, lr=1e-2,
                  mini_batch_size=0, token_budget=1024, output_dir=str(tmp_path / "run"),
                  progress=False, device="cpu", save_every=0, lora=False,
                  record_replay=False)
    values.update(overrides)
    return TrainConfig(**values)


def _action_logprobs(model, transition) -> list[float]:
    """log π(a_t | h, a_<t) of a transition's response tokens, from one plain forward pass."""
    out = transition.output
    ids = torch.tensor([list(out.prompt_ids) + list(out.response_ids)])
    with torch.no_grad():
        logprobs = model(input_ids=ids).logits[0, :-1].double().log_softmax(-1)
    targets = ids[0, 1:]
    scores = logprobs.gather(-1, targets[:, None])[:, 0]
    return scores[len(out.prompt_ids) - 1:].tolist()


def test_a_stale_rollout_is_weighted_as_the_formula_says(tiny_model_dir, tmp_path):
    """A rollout sampled by the weights of two updates ago: the update scores it with its own
    weights (π_old), takes the PPO ratio against them, and weights each token by
    min(π_old / μ, C); with the correction off it keeps μ and no weights."""
    trainer = PaWTrainer(_config(tiny_model_dir, tmp_path, rollout_correction="token_truncate",
                                 rollout_correction_cap=1.5))
    stale = copy.deepcopy(trainer.policy)
    trainer.train_step(), trainer.train_step()
    trajectories = trainer.collect(stale, [3, 4], 2, 1.0, 11)
    transitions = [t for trajectory in trajectories for t in trajectory.transitions
                   if t.output.response_ids]
    current = [_action_logprobs(trainer.model, t) for t in transitions]
    sampled = [list(t.output.logprobs) for t in transitions]
    metrics = trainer.update(copy.deepcopy(trajectories))
    samples = trainer._last_batch.samples
    assert len(samples) == len(transitions)
    gaps, capped = [], 0
    for sample, pi_old, mu in zip(samples, current, sampled):
        assert sample.old_logprobs == pytest.approx(pi_old, abs=1e-4)
        expected = [min(math.exp(a - b), 1.5) for a, b in zip(pi_old, mu)]
        assert sample.is_weights == pytest.approx(expected, rel=1e-3, abs=1e-5)
        gaps += [abs(a - b) for a, b in zip(pi_old, mu)]
        capped += sum(math.exp(a - b) > 1.5 for a, b in zip(pi_old, mu))
    assert max(gaps) > 0.05, "the two updates should have moved the policy"
    assert metrics["rollout_logprob_gap"] == pytest.approx(sum(gaps) / len(gaps), rel=1e-3)
    assert metrics["rollout_logprob_gap_max"] == pytest.approx(max(gaps), rel=1e-3)
    assert metrics["rollout_corrected_frac"] == pytest.approx(capped / len(gaps))
    assert 0 < metrics["rollout_weight_mean"] <= 1.5

    plain = PaWTrainer(_config(tiny_model_dir, tmp_path, output_dir=str(tmp_path / "plain")))
    metrics = plain.update(copy.deepcopy(trajectories))
    assert all(s.is_weights is None for s in plain._last_batch.samples)
    assert [s.old_logprobs for s in plain._last_batch.samples] == sampled
    assert "rollout_weight_mean" not in metrics


@pytest.mark.parametrize("algo", ["gigpo", "ppo"])
def test_every_update_of_a_corrected_run_logs_the_correction(tiny_model_dir, tmp_path, algo):
    """The weights of a rollout its own weights sampled: 1 to rounding, none corrected."""
    config = _config(tiny_model_dir, tmp_path, algo=algo, rollout_correction="sequence_mask",
                     lr=1e-3)
    PaWTrainer(config).train()
    rows = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert row["rollout_logprob_gap"] < 1e-4 and row["rollout_logprob_gap_max"] < 1e-3
        assert row["rollout_corrected_frac"] == 0.0
        assert row["rollout_weight_mean"] == pytest.approx(1.0, abs=1e-3)

