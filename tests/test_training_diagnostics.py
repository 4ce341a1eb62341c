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
