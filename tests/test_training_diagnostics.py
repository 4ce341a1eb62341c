"""training.rl.diagnostics (Appendix A.4 noise-gradient shares) and its logged trainer metric."""

from __future__ import annotations

import math

import pytest

from training.rl.diagnostics import gradient_shares, noisy_spans, noisy_token_mask


def test_noisy_spans_follow_the_papers_webshop_rules():
    text = "[SEP] B07XJ8C8F5 [SEP] SAMSUNG Galaxy [SEP] Unigalbri Trunks [SEP] ACME2000 box"
    found = [text[s:e] for s, e in noisy_spans(text)]
    assert found == ["B07XJ8C8F5", "SAMSUNG", "ACME2000"]  # SEP (3 capitals) and title case: not


def test_subwords_inherit_the_noisy_label_by_character_overlap():
    pieces = ["[SEP]", " B07", "XJ8", "C8F5", " Unig", "albri", " SAMS", "UNG", " x"]
    assert noisy_token_mask(pieces) == [False, True, True, True, False, False, True, True, False]
    assert noisy_token_mask([]) == []


def test_gradient_shares_on_a_hand_computed_case():
    # p = 0.9 (meaningful), 0.01 and 0.1 (noisy). CE: 1 − p = 0.1, 0.99, 0.9 → noise 1.89/1.99.
    # MAE: p(1 − p) = 0.09, 0.0099, 0.09 → 0.0999/0.1899. CMAE (ρ = 0.2) drops p = 0.9: 1.0.
    shares = gradient_shares([0.9, 0.01, 0.1], [False, True, True], rho=0.2)
    assert shares["ce"] == pytest.approx(1.89 / 1.99)
    assert shares["mae"] == pytest.approx(0.0999 / 0.1899)
    assert shares["cmae"] == pytest.approx(1.0)
    assert math.isnan(gradient_shares([0.9], [False], rho=0.2)["cmae"])  # no gradient at all
    with pytest.raises(ValueError, match="2 probabilities but 1 noise labels"):
        gradient_shares([0.5, 0.5], [True])


torch = pytest.importorskip("torch")


def test_trainer_logs_the_diagnostic_and_it_matches_a_literal_forward_pass(tiny_model_dir,
                                                                           tmp_path):
    import json

    import paw_gym
    from tests.envs import CatalogCodeEnv
    from training.config import TrainConfig
    from training.rl.rollout_batch import build_batch
    from training.trainer import PaWTrainer

    paw_gym.register_text_env("Test/CatalogCode-v0", CatalogCodeEnv, max_episode_steps=2,
                              override=True)
    config = TrainConfig(model=str(tiny_model_dir), env_id="Test/CatalogCode-v0", n_groups=2,
                         group_size=2, max_new_tokens=8, max_episode_steps=2, total_steps=1,
                         alpha=1.0, lr=1e-3, output_dir=str(tmp_path / "run"), progress=False,
                         device="cpu", save_every=0, noise_gradient_metric=True)
    trainer = PaWTrainer(config)
    trajectories = trainer.collect(trainer.policy, [0, 1], 2, 1.0, 0)
    batch = build_batch(trajectories, trainer.serializer, config)
    measured = trainer.updater.noise_gradient_shares(batch)
    probabilities, noisy = [], []
    for s in batch.samples:
        if not s.obs_len:
            continue
        logits = trainer.model(torch.tensor([s.input_ids])).logits[0].float()
        start = len(s.input_ids) - s.obs_len  # the observation ends the row
        for k, token in enumerate(s.input_ids[start:start + s.obs_len]):
            probabilities.append(torch.softmax(logits[start + k - 1], -1)[token].item())
        noisy += noisy_token_mask([trainer.tokenizer.decode([t])
                                   for t in s.input_ids[start:start + s.obs_len]])
    literal = gradient_shares(probabilities, noisy, config.rho)
    assert 0 < measured["wm_noise_token_frac"] < 1
    for loss in ("ce", "mae", "cmae"):
        assert measured[f"wm_noise_share_{loss}"] == pytest.approx(literal[loss], rel=1e-4)
    trainer.train()
    logged = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert {"wm_noise_share_ce", "wm_noise_share_mae", "wm_noise_share_cmae"} <= set(logged)


def _term_config(tiny_model_dir, out, **overrides):
    from training.config import TrainConfig

    values = dict(model=str(tiny_model_dir), env_id="PaW/Shelf-v0", n_groups=2, group_size=2,
                  max_new_tokens=10, max_episode_steps=2, total_steps=2, lr=1e-2,
                  mini_batch_size=0, token_budget=1024, device="cpu", progress=False,
                  save_every=0, lora=False, record_replay=False, seed=3,
                  output_dir=str(out), term_gradient_metric=True,
                  # The untrained model loses every episode alike (all advantages 0): the
                  # entropy bonus gives the policy term a gradient of its own.
                  entropy_coef=0.01)
    return TrainConfig(**{**values, **overrides})


def test_term_gradients_match_a_literal_backward_of_each_term(tiny_model_dir, tmp_path):
    """``term_gradient_metric``: ‖g_rl‖, ‖g_wm‖ and their cosine as the update logs them are
    those of two literal backward passes of the objective, one with the WM weights zeroed and
    one with the policy weights zeroed; and ‖g_rl + g_wm‖ is the logged grad_norm."""
    from training.models import trainable_parameters
    from training.rl.batch import collate
    from training.rl.objective import PolicyScorer, micro_batch_loss, objective_weights
    from training.rl.rollout_batch import build_batch
    from training.trainer import PaWTrainer

    trainer = PaWTrainer(_term_config(tiny_model_dir, tmp_path / "run"))
    update = trainer.updater
    batch = build_batch(trainer.collect(trainer.policy, [0, 1], 2, 1.0, 0), trainer.serializer,
                        trainer.config)
    rows = list(range(len(batch.samples)))
    in_pass = update.correction_plan(len(rows)) == "in_pass"
    w_rl, w_wm = objective_weights(batch.samples, batch.selected, batch.group_lambda,
                                   update.settings)
    params = trainable_parameters(trainer.model)

    def gradient(rl_weights, wm_weights):
        for p in params:
            p.grad = None
        mb = collate(batch.samples, rows, trainer.policy.pad_id, torch.device("cpu"))
        loss, _ = micro_batch_loss(PolicyScorer(trainer.model), mb, rl_weights, wm_weights,
                                   update.settings, correct_in_pass=in_pass)
        loss.backward()
        return torch.cat([p.grad.flatten().double() for p in params])

    g_rl, g_wm = gradient(w_rl, torch.zeros_like(w_wm)), gradient(torch.zeros_like(w_rl), w_wm)
    for p in params:
        p.grad = None
    assert g_rl.norm() > 0 and g_wm.norm() > 0  # both terms train on this rollout
    totals: dict[str, float] = {}
    norm = update.optimize(batch, rows, totals, in_pass)
    assert totals["term_grad_steps"] == 1
    assert totals["grad_norm_rl_sum"] == pytest.approx(float(g_rl.norm()), rel=1e-4)
    assert totals["grad_norm_wm_sum"] == pytest.approx(float(g_wm.norm()), rel=1e-4)
    cosine = float(g_rl @ g_wm / (g_rl.norm() * g_wm.norm()))
    assert totals["grad_cos_rl_wm_sum"] == pytest.approx(cosine, rel=1e-3, abs=1e-5)
    assert norm == pytest.approx(float((g_rl + g_wm).norm()), rel=1e-4)


def test_measuring_the_term_gradients_leaves_the_training_bit_identical(tiny_model_dir,
                                                                         tmp_path):
    """Two updates with and without ``term_gradient_metric`` end on the same weights, bit for
    bit (the step is taken on the gradient the first pass accumulated), and the logged split
    adds up to the logged grad_norm: ‖g‖² = ‖g_rl‖² + ‖g_wm‖² + 2 cos ‖g_rl‖ ‖g_wm‖."""
    from training.trainer import PaWTrainer

    weights, logged = {}, {}
    for measured in (False, True):
        trainer = PaWTrainer(_term_config(tiny_model_dir, tmp_path / str(measured),
                                          term_gradient_metric=measured))
        logged[measured] = trainer.train()
        weights[measured] = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    assert all(torch.equal(weights[True][k], weights[False][k]) for k in weights[False])
    for plain, split in zip(logged[False], logged[True]):
        assert split["grad_norm"] == plain["grad_norm"] and "grad_norm_rl" not in plain
        rl, wm, cos = split["grad_norm_rl"], split["grad_norm_wm"], split["grad_cos_rl_wm"]
        assert rl > 0 and wm > 0 and -1 <= cos <= 1
        assert math.sqrt(rl ** 2 + wm ** 2 + 2 * cos * rl * wm) == pytest.approx(
            split["grad_norm"], rel=1e-4)


def test_term_gradient_metric_is_refused_with_sharded_gradients(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="sharding='fsdp' does not take term_gradient_metric"):
        _term_config(tiny_model_dir, tmp_path, sharding="fsdp")
