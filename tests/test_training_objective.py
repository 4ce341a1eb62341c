"""The combined PaW objective on a real (tiny, random) Qwen2 model.

The batched, micro-batched, one-forward-pass implementation is checked against the objective
written literally, row by row, from a plain full-logits forward pass.
"""

import copy
import random

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from training.rl.batch import Sample, collate, token_budget_batches  # noqa: E402
from training.rl.losses import kl_k3, ppo_clip_token_loss, wm_token_loss  # noqa: E402
from training.infra.paw_settings import PaWSettings  # noqa: E402
from training.rl.objective import (HeadTargetLogprobs, ObjectiveSettings,  # noqa: E402
                                   gather_logprobs, micro_batch_loss, objective_weights)
from agents.serialization import serialize  # noqa: E402

VOCAB = 97


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=256)
    return transformers.Qwen2ForCausalLM(config).eval()


def _samples(model, n=9, seed=0, ref=False):
    """Random transitions in 3 groups; old log-probs = current ones + noise (so ratios ≠ 1)."""
    rng = random.Random(seed)
    samples = []
    for i in range(n):
        row = serialize([rng.randrange(1, VOCAB) for _ in range(rng.randint(3, 9))],
                        [rng.randrange(1, VOCAB) for _ in range(rng.randint(1, 5))],
                        [rng.randrange(1, VOCAB) for _ in range(rng.randint(0, 7))], 64,
                        separator=[1, 2][:i % 3])
        samples.append(Sample(row.ids, row.prompt_len, row.action_len, row.obs_len,
                              old_logprobs=[0.0] * row.action_len, separator_len=row.separator_len,
                              advantage=rng.uniform(-2, 2), group=i % 3, entropy=rng.random()))
    with torch.no_grad():
        for s in samples:
            lp = _naive_logprobs(model, s)[0]
            s.old_logprobs = (lp + 0.3 * torch.randn(len(lp))).tolist()
            if ref:
                s.ref_logprobs = (lp + 0.2 * torch.randn(len(lp))).tolist()
    return samples


def _naive_logprobs(model, s):
    """(action, observation) target log-probs of one row from the full logits."""
    logits = model(input_ids=torch.tensor([s.input_ids])).logits[0].float()
    logp = logits.log_softmax(-1)[:-1].gather(-1, torch.tensor(s.input_ids[1:])[:, None])[:, 0]
    a0, a1 = s.prompt_len - 1, s.prompt_len - 1 + s.action_len
    o0 = s.obs_start - 1  # the separator tokens between them are never targets
    return logp[a0:a1], logp[o0:o0 + s.obs_len]


def _naive_action_entropy(model, s):
    """Entropy of the full next-token distribution at each action token of one row."""
    logits = model(input_ids=torch.tensor([s.input_ids])).logits[0].float()
    logp = logits.log_softmax(-1)[s.prompt_len - 1:s.prompt_len - 1 + s.action_len]
    return -(logp.exp() * logp).sum(-1)


def _literal_objective(model, samples, selected, lam, st):
    """mean_g [ L_RL(g) + λ_g · mean_{t in S_g} ℓ_WM(t) ], row by row."""
    groups = {}
    for i, s in enumerate(samples):
        groups.setdefault(s.group, []).append(i)
    total = 0.0
    for g, members in groups.items():
        tok, seq = [], []
        for i in members:
            act, _ = _naive_logprobs(model, samples[i])
            sampler = samples[i].sampler_logprobs
            loss, _ = ppo_clip_token_loss(act, torch.tensor(samples[i].old_logprobs),
                                          torch.tensor(samples[i].advantage), st.clip_eps,
                                          sampler_logprobs=None if sampler is None
                                          else torch.tensor(sampler))
            if samples[i].is_weights is not None:
                loss = loss * torch.tensor(samples[i].is_weights)
            if st.kl_coef:
                loss = loss + st.kl_coef * kl_k3(act, torch.tensor(samples[i].ref_logprobs))
            if st.entropy_coef:
                loss = loss - st.entropy_coef * _naive_action_entropy(model, samples[i])
            tok.append(loss)
            seq.append(loss.mean())
        rl = torch.cat(tok).mean() if st.rl_agg == "token" else torch.stack(seq).mean()
        chosen = [i for i in members if selected[i]]
        if st.world_model.paw and chosen:
            wm = [wm_token_loss(_naive_logprobs(model, samples[i])[1][None],
                                torch.ones(1, samples[i].obs_len), st.world_model.wm_loss,
                                st.world_model.rho)[0]
                  for i in chosen]
            rl = rl + lam[g] * torch.stack(wm).mean()
        total = total + rl
    return total / len(groups)


def _batched_objective(model, samples, selected, lam, st, budget, correct_in_pass=False):
    w_rl, w_wm = objective_weights(samples, selected, lam, st)
    total, stats = 0.0, []
    for rows in token_budget_batches([len(s) for s in samples], budget):
        loss, stat = micro_batch_loss(model, collate(samples, rows, pad_id=0), w_rl[rows],
                                      w_wm[rows], st, correct_in_pass=correct_in_pass)
        loss.backward()
        total += loss.item()
        stats.append(stat)
    return total, stats


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_gather_logprobs_matches_full_logits(model):
    samples = _samples(model)
    batch = collate(samples, list(range(len(samples))), pad_id=0)
    with torch.no_grad():
        logprobs, entropies, _ = gather_logprobs(model, batch, with_entropy=True, chunk_size=5)
    for r, s in enumerate(samples):
        act, obs = _naive_logprobs(model, s)
        a0, a1, o0 = s.prompt_len, s.prompt_len + s.action_len, s.obs_start
        assert torch.allclose(logprobs[r, a0:a1], act, atol=1e-5)
        assert torch.allclose(logprobs[r, o0:o0 + s.obs_len], obs, atol=1e-5)
        assert (logprobs[r, :a0] == 0).all() and (logprobs[r, a1:o0] == 0).all()
        assert (logprobs[r, o0 + s.obs_len:] == 0).all()
        assert (entropies[r, a0:a1] > 0).all() and (entropies[r, a1:] == 0).all()


def test_leak_is_the_most_the_policys_turn_gives_the_first_observation_token(model):
    samples = _samples(model)
    for i, s in enumerate(samples):
        s.leak_target = None if i == 0 else (i * 5) % VOCAB
    batch = collate(samples, list(range(len(samples))), pad_id=0)
    with torch.no_grad():
        leak = gather_logprobs(model, batch, with_leak=True, action_temperature=0.5).leak_logprobs
        assert gather_logprobs(model, batch).leak_logprobs is None
        for r, s in enumerate(samples):
            if s.leak_target is None:
                assert torch.isnan(leak[r])
                continue
            # the policy's own turn: before each action token and after the last one
            logits = model(input_ids=torch.tensor([s.input_ids])).logits[0].float() / 0.5
            turn = logits[s.prompt_len - 1:s.prompt_len + s.action_len].log_softmax(-1)
            assert torch.allclose(leak[r], turn[:, s.leak_target].max(), atol=1e-5)


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("frozen_head", [False, True])
def test_head_target_logprobs_matches_autograd(with_bias, frozen_head):
    gen = torch.Generator().manual_seed(1)
    rows, width, vocab = 11, 6, 13
    hidden = torch.randn(rows, width, dtype=torch.float64, generator=gen, requires_grad=True)
    weight = torch.randn(vocab, width, dtype=torch.float64, generator=gen,
                         requires_grad=not frozen_head)
    bias = (torch.randn(vocab, dtype=torch.float64, generator=gen, requires_grad=True)
            if with_bias else None)
    targets = torch.randint(0, vocab, (rows,), generator=gen)
    scale = torch.tensor([0.7, 1.0, 1.3] * 3 + [1.0, 2.0], dtype=torch.float64)
    entropy_rows = torch.arange(rows) % 3 == 0
    # Rows 2, 5 and 8 get exactly zero upstream gradient (as CMAE-clipped tokens do).
    upstream = torch.randn(rows, dtype=torch.float64, generator=gen)
    upstream[[2, 5, 8]] = 0.0
    inputs = [t for t in (hidden, weight, bias) if t is not None and t.requires_grad]

    extra_targets = torch.where(torch.arange(rows) % 2 == 0, (targets + 1) % vocab, -1)
    logprobs, entropies, extra = HeadTargetLogprobs.apply(hidden, weight, bias, targets, scale,
                                                          entropy_rows, extra_targets)
    got = torch.autograd.grad((logprobs * upstream).sum(), inputs)
    logits = torch.nn.functional.linear(hidden, weight, bias) / scale[:, None]
    log_softmax = logits.log_softmax(-1)
    expected_logprobs = log_softmax.gather(-1, targets[:, None]).squeeze(-1)
    expected = torch.autograd.grad((expected_logprobs * upstream).sum(), inputs)

    assert torch.allclose(logprobs, expected_logprobs.detach(), atol=1e-12)
    has_extra = extra_targets >= 0
    assert torch.allclose(extra[has_extra], log_softmax.gather(
        -1, extra_targets.clamp(min=0)[:, None]).squeeze(-1).detach()[has_extra], atol=1e-12)
    assert extra[~has_extra].isnan().all() and not extra.requires_grad
    expected_entropy = -(log_softmax.exp() * log_softmax).sum(-1).detach()
    assert torch.allclose(entropies[entropy_rows], expected_entropy[entropy_rows], atol=1e-12)
    assert (entropies[~entropy_rows] == 0).all()
    for a, b in zip(got, expected):
        assert torch.allclose(a, b, atol=1e-12)
    assert (got[0][[2, 5, 8]] == 0).all()  # rows without gradient get none back

    # Gradient through the entropies (an entropy bonus) as well as the log-probs: entropy row 6
    # gets entropy gradient only; rows 5 and 8 (not entropy rows) still get none, although
    # their entropy outputs (constant 0) receive upstream gradient.
    upstream[6] = 0.0
    entropy_upstream = torch.randn(rows, dtype=torch.float64, generator=gen)
    logprobs, entropies, _ = HeadTargetLogprobs.apply(hidden, weight, bias, targets, scale,
                                                      entropy_rows, extra_targets)
    got = torch.autograd.grad((logprobs * upstream + entropies * entropy_upstream).sum(), inputs)
    log_softmax = (torch.nn.functional.linear(hidden, weight, bias) / scale[:, None]).log_softmax(-1)
    full_entropy = -(log_softmax.exp() * log_softmax).sum(-1)
    expected = torch.autograd.grad(
        (log_softmax.gather(-1, targets[:, None]).squeeze(-1) * upstream
         + torch.where(entropy_rows, full_entropy, 0.0) * entropy_upstream).sum(), inputs)
    for a, b in zip(got, expected):
        assert torch.allclose(a, b, atol=1e-12)
    assert (got[0][[5, 8]] == 0).all() and (got[0][6] != 0).all()


def test_gather_logprobs_entropies_are_the_tempered_action_entropies(model):
    samples = _samples(model, n=4)
    batch = collate(samples, list(range(len(samples))), pad_id=0)
    with torch.no_grad():
        entropies = gather_logprobs(model, batch, with_entropy=True,
                                    action_temperature=0.5).entropies
        for r, s in enumerate(samples):
            logits = model(input_ids=torch.tensor([s.input_ids])).logits[0].float() / 0.5
            logp = logits.log_softmax(-1)[s.prompt_len - 1:s.prompt_len - 1 + s.action_len]
            expected = -(logp.exp() * logp).sum(-1)
            span = slice(s.prompt_len, s.prompt_len + s.action_len)
            assert torch.allclose(entropies[r, span], expected, atol=1e-5)


def test_observation_scoring_can_be_limited_to_some_rows(model):
    samples = [s for s in _samples(model) if s.obs_len > 1][:3]
    batch = collate(samples, list(range(len(samples))), pad_id=0)
    with torch.no_grad():
        every = gather_logprobs(model, batch).logprobs
        some = gather_logprobs(model, batch, score_obs=torch.tensor([True, False, True])).logprobs
    for r, s in enumerate(samples):
        obs = slice(s.obs_start, s.obs_start + s.obs_len)
        assert torch.equal(some[r, :obs.start], every[r, :obs.start])
        assert torch.equal(some[r, obs], every[r, obs] if r != 1 else torch.zeros(s.obs_len))


def test_collate_without_observations_keeps_action_logprobs(model):
    samples = _samples(model)
    rows = list(range(len(samples)))
    full, short = collate(samples, rows, 0), collate(samples, rows, 0, with_obs=False)
    assert short.input_ids.shape[1] == max(s.prompt_len + s.action_len for s in samples)
    assert not short.obs_mask.any() and torch.equal(short.action_mask.sum(), full.action_mask.sum())
    with torch.no_grad():
        a = gather_logprobs(model, full, score_obs=False)[0]
        b = gather_logprobs(model, short)[0]
    width = short.input_ids.shape[1]
    assert torch.allclose(a[:, :width], b, atol=1e-6)
    assert (a[:, width:] == 0).all()


def test_observation_tokens_do_not_change_action_logprobs(model):
    s = _samples(model, n=1)[0]
    other = Sample(list(s.input_ids), s.prompt_len, s.action_len, s.obs_len, s.old_logprobs,
                   separator_len=s.separator_len)
    for j in range(s.prompt_len + s.action_len, len(other.input_ids)):
        other.input_ids[j] = (other.input_ids[j] + 7) % VOCAB
    with torch.no_grad():
        a = gather_logprobs(model, collate([s], [0], 0))[0]
        b = gather_logprobs(model, collate([other], [0], 0))[0]
    span = slice(s.prompt_len, s.prompt_len + s.action_len)
    assert torch.allclose(a[0, span], b[0, span], atol=1e-6)


@pytest.mark.parametrize("settings, corrected", [
    (ObjectiveSettings(), False),
    (ObjectiveSettings(PaWSettings(wm_loss="ce"), rl_agg="sequence"), False),
    (ObjectiveSettings(PaWSettings(wm_loss="mae", rho=0.5), kl_coef=0.1), False),
    (ObjectiveSettings(PaWSettings(paw=False)), False),
    (ObjectiveSettings(entropy_coef=0.05), False),
    (ObjectiveSettings(PaWSettings(paw=False), entropy_coef=0.3, rl_agg="sequence"), False),
    (ObjectiveSettings(kl_coef=0.1, entropy_coef=0.05), "weights"),
    (ObjectiveSettings(kl_coef=0.1), "sampler_clip"),
], ids=["cmae", "ce-seq", "mae-kl", "no-paw", "entropy-bonus", "entropy-bonus-seq",
        "rollout-correction", "sampler-clip"])
def test_micro_batched_objective_equals_literal_objective(model, settings, corrected):
    samples = _samples(model, ref=True)
    if corrected:
        # Sample.is_weights (training.rl.correction) scale each action token's PPO-clip term,
        # not its KL, its entropy bonus or the WM term; one action is masked out entirely.
        gen = torch.Generator().manual_seed(3)
        for s in samples:
            s.is_weights = (2 * torch.rand(s.action_len, generator=gen)).tolist()
            if corrected == "sampler_clip":  # μ: the clip also binds on π_θ / μ
                s.sampler_logprobs = (torch.tensor(s.old_logprobs)
                                      + 0.4 * torch.randn(s.action_len, generator=gen)).tolist()
        samples[0].is_weights = [0.0] * samples[0].action_len
    # Group 2 gets no selected transition: it must contribute no WM term.
    selected = torch.tensor([s.group != 2 and i % 2 == 0 for i, s in enumerate(samples)])
    lam = {0: 0.8, 1: 0.3, 2: 1.0}
    model.zero_grad()
    expected = _literal_objective(model, samples, selected, lam, settings)
    expected.backward()
    expected_grads = _grads(model)
    model.zero_grad()
    got, _ = _batched_objective(model, samples, selected, lam, settings, budget=40)
    assert got == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)
    grads = _grads(model)
    for name, grad in expected_grads.items():
        assert torch.allclose(grads[name], grad, atol=1e-5, rtol=1e-3), name


@pytest.mark.parametrize("cap, same", [(1e6, True), (1.0, False)])
def test_sampler_clip_at_the_first_step_has_the_gradient_of_none(model, cap, same):
    """At the first optimizer step π_θ = π_old, so with every weight r = π_old / μ ≤ C,
    ``sampler_clip``'s gradient is exactly ``none``'s (training.rl.correction); with C = 1 the
    weights above 1 are truncated and it is not."""
    from training.rl.correction import correction_weights

    plain = _samples(model)  # old_logprobs: μ, the current log-probs + noise
    corrected = copy.deepcopy(plain)
    truncated = 0.0
    with torch.no_grad():
        for s in corrected:
            s.sampler_logprobs = s.old_logprobs
            s.old_logprobs = _naive_logprobs(model, s)[0].tolist()  # π_old = π_θ
            result = correction_weights(torch.tensor([s.old_logprobs]),
                                        torch.tensor([s.sampler_logprobs]),
                                        torch.ones(1, s.action_len, dtype=torch.bool),
                                        "sampler_clip", cap)
            s.is_weights = result.weights[0].tolist()
            truncated += result.corrected_frac
    assert (truncated > 0) != same
    selected = torch.tensor([i % 2 == 0 for i in range(len(plain))])
    lam = {0: 0.8, 1: 0.3, 2: 1.0}
    grads = []
    for samples in (plain, corrected):
        model.zero_grad()
        _batched_objective(model, samples, selected, lam, ObjectiveSettings(), budget=40)
        grads.append(_grads(model))
    close = [torch.allclose(grads[1][name], grad, atol=1e-6, rtol=1e-4)
             for name, grad in grads[0].items()]
    assert all(close) if same else not all(close)


@pytest.mark.parametrize("mode, cap, two_sided", [
    ("sampler_clip", 1.3, False), ("token_truncate", 1.3, False), ("token_mask", 1.3, True),
    ("sequence_mask", 2.0, False), ("sequence_truncate", 1.5, False)])
def test_a_correction_computed_in_the_pass_equals_one_from_a_scoring_pass(model, mode, cap,
                                                                          two_sided):
    """An update of one optimizer step computes the rollout correction inside its own forward
    pass (π_old = the weights of that pass, training.rl.correction): the loss, the gradient and
    the correction's metrics equal the literal objective with π_old scored beforehand."""
    from training.rl.correction import correction_weights

    torch.manual_seed(5)  # _samples' noise: the same tokens corrected in any test order
    in_pass = _samples(model, ref=True)  # old_logprobs: μ, the current log-probs + noise
    scored = copy.deepcopy(in_pass)
    with torch.no_grad():
        pi_old = [_naive_logprobs(model, s)[0] for s in scored]
    width = max(s.action_len for s in scored)
    def pad(rows):
        return torch.stack([torch.nn.functional.pad(torch.as_tensor(r, dtype=torch.float),
                                                    (0, width - len(r))) for r in rows])

    mask = pad([torch.ones(s.action_len) for s in scored]).bool()
    whole = correction_weights(pad(pi_old), pad([s.old_logprobs for s in scored]), mask, mode,
                               cap, two_sided)
    assert 0 < whole.corrected_frac < 1, "the cap should correct some tokens and not others"
    for i, s in enumerate(scored):
        if mode == "sampler_clip":
            s.sampler_logprobs = s.old_logprobs
        s.old_logprobs = pi_old[i].tolist()
        s.is_weights = whole.weights[i, :s.action_len].tolist()
    selected = torch.tensor([i % 2 == 0 for i in range(len(in_pass))])
    lam = {0: 0.8, 1: 0.3, 2: 1.0}
    settings = ObjectiveSettings(kl_coef=0.1)
    model.zero_grad()
    expected = _literal_objective(model, scored, selected, lam, settings)
    expected.backward()
    expected_grads = _grads(model)
    model.zero_grad()
    got, stats = _batched_objective(model, in_pass, selected, lam, ObjectiveSettings(
        kl_coef=0.1, rollout_correction=mode, rollout_correction_cap=cap,
        rollout_correction_two_sided=two_sided), budget=40, correct_in_pass=True)
    assert len(stats) > 1, "several micro-batches: the metrics add up over them"
    assert got == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)
    grads = _grads(model)
    for name, grad in expected_grads.items():
        assert torch.allclose(grads[name], grad, atol=1e-5, rtol=1e-3), name
    total = lambda key: sum(stat[key] for stat in stats)  # noqa: E731
    tokens = sum(s.action_len for s in in_pass)
    assert total("correction_tokens") == tokens
    units = len(in_pass) if mode.startswith("sequence") else tokens
    assert total("correction_units") == units
    assert total("correction_gap_sum") / tokens == pytest.approx(whole.gap_mean, rel=1e-4)
    assert max(stat["correction_gap_max"] for stat in stats) == pytest.approx(whole.gap_max,
                                                                             rel=1e-4)
    assert total("correction_corrected") / units == pytest.approx(whole.corrected_frac)
    assert total("correction_weight_sum") / tokens == pytest.approx(whole.weight_mean, rel=1e-4)
    with pytest.raises(ValueError, match="applied twice"):  # the batch's weights, and again
        _batched_objective(model, scored, selected, lam, ObjectiveSettings(
            rollout_correction=mode, rollout_correction_cap=cap,
            rollout_correction_two_sided=two_sided), budget=40, correct_in_pass=True)


def test_objective_weights_are_group_means_and_lambda_zero_removes_wm(model):
    samples = _samples(model)
    selected = torch.tensor([True, False] * 4 + [True])
    w_rl, w_wm = objective_weights(samples, selected, {0: 0.0, 1: 0.0, 2: 0.0}, ObjectiveSettings())
    assert (w_wm == 0).all()
    lam = {0: 1.0, 1: 0.5, 2: 1.0}
    w_rl2, w_wm2 = objective_weights(samples, selected, lam, ObjectiveSettings())
    assert torch.equal(w_rl, w_rl2)
    assert torch.equal(w_wm2 > 0, selected)
    # per group: the RL weights average over its action tokens, the WM weights over its
    # selected rows, each scaled by 1/G (and by lambda_g for WM)
    for g in range(3):
        rows = [i for i, s in enumerate(samples) if s.group == g]
        assert sum(w_wm2[i].item() for i in rows) == pytest.approx(lam[g] / 3)
        assert sum(w_rl2[i].item() * samples[i].action_len for i in rows) == pytest.approx(1 / 3)
    _, off = objective_weights(samples, selected, lam, ObjectiveSettings(PaWSettings(paw=False)))
    assert (off == 0).all()


def test_stats_count_tokens_and_clipping(model):
    samples = _samples(model)
    selected = torch.ones(len(samples), dtype=torch.bool)
    model.zero_grad()
    _, stats = _batched_objective(model, samples, selected, {0: 1.0, 1: 1.0, 2: 1.0},
                                  ObjectiveSettings(PaWSettings(rho=1.0)), budget=30)
    assert sum(s["action_tokens"] for s in stats) == sum(x.action_len for x in samples)
    assert sum(s["obs_tokens"] for s in stats) == sum(x.obs_len for x in samples)
    # rho = 1: no observation token is ever above the threshold
    assert sum(s["obs_clipped_tokens"] for s in stats) == 0
    model.zero_grad()


def test_one_decoder_forward_per_micro_batch(model):
    samples = _samples(model)
    calls = []
    handle = model.model.register_forward_hook(lambda *a: calls.append(1))
    try:
        _, stats = _batched_objective(model, samples, torch.ones(len(samples), dtype=torch.bool),
                                      {0: 1.0, 1: 1.0, 2: 1.0}, ObjectiveSettings(), budget=10_000)
    finally:
        handle.remove()
        model.zero_grad()
    assert len(calls) == len(stats) == 1


def test_token_budget_batches_respect_budget_and_cover_all_rows():
    lengths = [5, 17, 3, 9, 9, 40, 1]
    batches = token_budget_batches(lengths, 20)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 20
    assert [5] in batches  # the row longer than the budget sits alone


def test_serialize_truncates_observation_then_prompt():
    assert serialize([1, 2, 3, 4], [5, 6], [7, 8, 9], max_len=7) == \
        ([1, 2, 3, 4, 5, 6, 7], 4, 2, 0, 1)
    assert serialize([1, 2, 3, 4], [5, 6], [7, 8, 9], max_len=4) == ([3, 4, 5, 6], 2, 2, 0, 0)
    # the separator stays whole; with no observation token left it goes too
    assert serialize([1, 2, 3, 4], [5, 6], [7, 8, 9], max_len=9, separator=[0, 0]) == \
        ([1, 2, 3, 4, 5, 6, 0, 0, 7], 4, 2, 2, 1)
    assert serialize([1, 2, 3, 4], [5, 6], [7, 8, 9], max_len=8, separator=[0, 0]) == \
        ([1, 2, 3, 4, 5, 6], 4, 2, 0, 0)
    with pytest.raises(ValueError, match="empty response"):
        serialize([1], [], [2], 8)


def test_gradient_checkpointing_gives_the_same_gradients(model):
    samples = _samples(model, seed=3)
    selected = torch.ones(len(samples), dtype=torch.bool)
    lam = {0: 1.0, 1: 0.5, 2: 0.25}
    model.zero_grad()
    plain, _ = _batched_objective(model, samples, selected, lam, ObjectiveSettings(), budget=64)
    expected = _grads(model)
    model.zero_grad()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()  # transformers checkpoints layers only in train mode (no dropout in Qwen2 here)
    try:
        calls = []
        layer = model.model.layers[0]
        inner = layer._gradient_checkpointing_func
        layer._gradient_checkpointing_func = lambda *a, **k: calls.append(1) or inner(*a, **k)
        got, _ = _batched_objective(model, samples, selected, lam, ObjectiveSettings(), budget=64)
    finally:
        model.gradient_checkpointing_disable()
        model.eval()
    assert got == pytest.approx(plain, rel=1e-5)
    n_micro = len(token_budget_batches([len(s) for s in samples], 64))
    assert len(calls) == n_micro  # the layer went through torch's checkpoint each micro-batch
    for name, grad in expected.items():
        assert torch.allclose(_grads(model)[name], grad, atol=1e-6), name
    model.zero_grad()
