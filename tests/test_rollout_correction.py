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
    "sampler_clip": ([[1.0, 2.0, 1 / E], [E**0.5, E**0.5, 0.0]], 1 / 5),
    "token_truncate": ([[1.0, 2.0, 1 / E], [E**0.5, E**0.5, 0.0]], 1 / 5),
    "token_mask": ([[1.0, 0.0, 1 / E], [E**0.5, E**0.5, 0.0]], 1 / 5),
    "sequence_truncate": ([[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]], 1 / 2),
    "sequence_mask": ([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]], 1 / 2),
}


#: Two-sided masking (verl's rejection sampling) also masks below 1 / C: on (TRAIN, ROLLOUT),
#: and with the roles swapped (log r = [[0, −1, 1], [−0.5, −0.5, −]], log R = [0, −1], where
#: the one-sided sequence mask would keep row 1 at e^−1).
TWO_SIDED = {
    ("token_mask", False): ([[1.0, 0.0, 0.0], [E**0.5, E**0.5, 0.0]], 2 / 5),
    ("sequence_mask", False): ([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]], 1 / 2),
    ("token_mask", True): ([[1.0, 0.0, 0.0], [E**-0.5, E**-0.5, 0.0]], 2 / 5),
    ("sequence_mask", True): ([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]], 1 / 2),
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


@pytest.mark.parametrize("mode, swapped", sorted(TWO_SIDED))
def test_two_sided_masks_match_the_formulas(mode, swapped):
    train, rollout = (ROLLOUT, TRAIN) if swapped else (TRAIN, ROLLOUT)
    result = correction_weights(train, rollout, MASK, mode, cap=2.0, two_sided=True)
    weights, corrected = TWO_SIDED[mode, swapped]
    assert torch.allclose(result.weights, torch.tensor(weights, dtype=torch.float64),
                          rtol=1e-12, atol=0)
    assert result.corrected_frac == pytest.approx(corrected)


def test_modes_are_the_config_choices_and_other_values_are_refused():
    assert set(REFERENCE) | {"none"} == set(CORRECTIONS)
    with pytest.raises(ValueError, match=r"mode='none': use one of \('sampler_clip', "
                                         r"'token_truncate'"):
        correction_weights(TRAIN, ROLLOUT, MASK, "none", cap=2.0)
    with pytest.raises(ValueError, match=r"cap=0.5: a number >= 1"):
        correction_weights(TRAIN, ROLLOUT, MASK, "token_mask", cap=0.5)
    with pytest.raises(ValueError, match=r"rollout_correction"):
        TrainConfig(model="m", rollout_correction="token")
    with pytest.raises(ValueError, match=r"rollout_correction_cap"):
        TrainConfig(model="m", rollout_correction_cap=0.9)
    with pytest.raises(ValueError, match=r"two_sided=True with mode='sampler_clip': only the "
                                         r"mask modes mask"):
        correction_weights(TRAIN, ROLLOUT, MASK, "sampler_clip", cap=2.0, two_sided=True)
    with pytest.raises(ValueError, match=r"rollout_correction_two_sided=True is invalid; "
                                         r"expected false unless rollout_correction is token_mask"):
        TrainConfig(model="m", rollout_correction="token_truncate",
                    rollout_correction_two_sided=True)


@pytest.mark.parametrize("mode", sorted(set(REFERENCE) - {"sampler_clip"}))
def test_a_correction_without_the_samplers_trust_region_is_refused_for_stale_rollouts(mode):
    """With a stale sampler, a mode whose PPO ratio is against the update's starting weights
    has no bound on the step (docs/training.md, "Asynchronous rollouts"): one line says so."""
    with pytest.raises(ValueError, match=rf"^rollout_correction='{mode}' is invalid; expected "
                                         r"none or sampler_clip with async_rollouts and "
                                         r"max_staleness=2: .* removes the only trust region"):
        TrainConfig(model="m", async_rollouts=True, max_staleness=2, rollout_correction=mode)
    # without staleness (the worker samples with the update's weights) it is the sync case
    TrainConfig(model="m", async_rollouts=True, max_staleness=0, rollout_correction=mode)
    TrainConfig(model="m", async_rollouts=True, max_staleness=2,
                rollout_correction="sampler_clip")


def _literal_token(logp, old, mu, advantage, eps, high):
    """One token of ``sampler_clip``'s PPO term, written out: its loss and d loss / d log π_θ."""
    rho = math.exp(logp - old)
    unclipped, clipped = -advantage * rho, -advantage * min(max(rho, 1 - eps), 1 + high)
    to_sampler = math.exp(logp - mu)
    frozen = (advantage > 0 and to_sampler > 1 + high) or (advantage < 0 and to_sampler < 1 - eps)
    grad = 0.0 if frozen or clipped > unclipped else -advantage * rho
    return max(unclipped, clipped), grad, frozen or clipped > unclipped


#: (log π_θ − log π_old, log π_θ − log μ, A): every side of both clips (ε = 0.2, ε_high = 0.28).
TOKENS = [(0.0, 0.1, 1.0),      # inside both
          (0.0, 0.5, 1.0),      # π_θ / μ = 1.65 > 1.28 with A > 0: no gradient
          (0.0, -0.5, -1.0),    # π_θ / μ = 0.61 < 0.8 with A < 0: no gradient
          (0.0, 0.5, -1.0),     # above the sampler's range, but A < 0: kept
          (0.3, 0.0, 1.0),      # the proximal clip binds (ρ = 1.35)
          (0.1, -0.1, -1.0),    # inside both, A < 0
          (-0.3, 0.0, -2.0),    # the proximal clip binds below (ρ = 0.74, A < 0)
          (-0.3, -0.05, 0.5),   # ρ = 0.74 with A > 0: the unclipped branch, kept
          (0.0, 0.9, 0.0)]      # no advantage, no gradient


def test_the_samplers_clip_matches_the_literal_token_loss():
    from training.rl.losses import ppo_clip_token_loss

    logp = torch.tensor([[-1.0 - 0.1 * i for i in range(len(TOKENS))]], dtype=torch.float64,
                        requires_grad=True)
    old = logp.detach() - torch.tensor([[t[0] for t in TOKENS]], dtype=torch.float64)
    mu = logp.detach() - torch.tensor([[t[1] for t in TOKENS]], dtype=torch.float64)
    advantages = torch.tensor([[t[2] for t in TOKENS]], dtype=torch.float64)
    loss, clipped = ppo_clip_token_loss(logp, old, advantages, 0.2, 0.28, sampler_logprobs=mu)
    loss.sum().backward()
    for k, token in enumerate(TOKENS):
        value, grad, frozen = _literal_token(float(logp[0, k]), float(old[0, k]),
                                             float(mu[0, k]), token[2], 0.2, 0.28)
        assert float(loss[0, k]) == pytest.approx(value, rel=1e-12), k
        assert float(logp.grad[0, k]) == pytest.approx(grad, rel=1e-12, abs=1e-15), k
        assert bool(clipped[0, k]) == frozen, k


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


@pytest.mark.parametrize("mini_batch_size", [2, 0], ids=["scoring-pass", "in-the-step"])
@pytest.mark.parametrize("mode", ["token_truncate", "sampler_clip"])
def test_a_stale_rollout_is_weighted_as_the_formula_says(tiny_model_dir, tmp_path, mode,
                                                         mini_batch_size):
    """A rollout sampled by the weights of two updates ago: the update scores it with its own
    weights (π_old), takes the PPO ratio against them, and weights each token by
    min(π_old / μ, C); ``sampler_clip`` also keeps μ for its clip. An update of several
    optimizer steps stores π_old and the weights on its samples; one of a single step computes
    them in that step's pass and leaves the samples as sampled. With the correction off the
    update keeps μ and no weights."""
    trainer = PaWTrainer(_config(tiny_model_dir, tmp_path, rollout_correction=mode,
                                 rollout_correction_cap=1.5, mini_batch_size=mini_batch_size))
    stale = copy.deepcopy(trainer.policy)
    trainer.train_step(), trainer.train_step()
    trajectories = trainer.collect(stale, [3, 4], 2, 1.0, 11)
    transitions = [t for trajectory in trajectories for t in trajectory.transitions
                   if t.output.response_ids]
    current = [_action_logprobs(trainer.model, t) for t in transitions]
    sampled = [list(t.output.logprobs) for t in transitions]
    metrics = trainer.update(copy.deepcopy(trajectories))
    samples = trainer.updater.last_batch.samples
    assert len(samples) == len(transitions)
    gaps, capped = [], 0
    steps = 1 if mini_batch_size == 0 else math.ceil(len(samples) / mini_batch_size)
    assert metrics["optimizer_steps"] == steps and (steps > 1) == (mini_batch_size > 0)
    for sample, pi_old, mu in zip(samples, current, sampled):
        if mini_batch_size == 0:
            assert (sample.old_logprobs, sample.sampler_logprobs, sample.is_weights) == (
                mu, None, None)
        else:
            assert sample.old_logprobs == pytest.approx(pi_old, abs=1e-4)
            assert sample.sampler_logprobs == (mu if mode == "sampler_clip" else None)
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
    assert all(s.is_weights is None for s in plain.updater.last_batch.samples)
    assert [s.old_logprobs for s in plain.updater.last_batch.samples] == sampled
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

