"""Numerics of the PaW losses and advantage estimators on hand-computed cases."""

import math

import pytest

torch = pytest.importorskip("torch")

from training.rl import advantages as adv  # noqa: E402
from training.rl.losses import (  # noqa: E402
                                adaptive_wm_coef,
                                clipped_token_fraction,
                                kl_k3,
                                ppo_clip_token_loss,
                                sampled_token_entropy,
                                select_by_entropy,
                                wm_token_loss,
                                )


def _logp(probs):
    return torch.tensor(probs, dtype=torch.float64).log()


# ---------------------------------------------------------------- wm_token_loss
def test_cmae_hand_computed_divides_by_all_observation_tokens():
    # p = [0.1, 0.5, 0.15, 0.9]; mask keeps the first three; rho = 0.2 keeps 0.1 and 0.15.
    logp = _logp([[0.1, 0.5, 0.15, 0.9]])
    mask = torch.tensor([[1, 1, 1, 0]])
    loss = wm_token_loss(logp, mask, kind="cmae", rho=0.2)
    assert loss.shape == (1,)
    assert loss.item() == pytest.approx(((1 - 0.1) + (1 - 0.15)) / 3)


def test_mae_and_ce_hand_computed():
    logp = _logp([[0.1, 0.5], [0.8, 0.25]])
    mask = torch.tensor([[1, 1], [1, 0]])
    mae = wm_token_loss(logp, mask, kind="mae")
    ce = wm_token_loss(logp, mask, kind="ce")
    assert mae.tolist() == pytest.approx([(0.9 + 0.5) / 2, 0.2])
    assert ce.tolist() == pytest.approx([-(math.log(0.1) + math.log(0.5)) / 2, -math.log(0.8)])


def test_rho_one_makes_cmae_equal_mae():
    logp = torch.randn(4, 7, dtype=torch.float64).clamp(max=0)
    mask = torch.rand(4, 7) > 0.3
    assert torch.allclose(wm_token_loss(logp, mask, "cmae", rho=1.0), wm_token_loss(logp, mask, "mae"))


def test_masked_tokens_get_no_gradient_and_clip_mask_is_not_differentiated():
    logp = _logp([[0.1, 0.5, 0.05, 0.3]]).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 0]])
    wm_token_loss(logp, mask, kind="cmae", rho=0.2).sum().backward()
    grad = logp.grad[0]
    # d/dlogp of (1 - p)/3 = -p/3 for kept tokens; 0 for clipped (p=0.5 > rho) and masked ones.
    assert grad[0].item() == pytest.approx(-0.1 / 3)
    assert grad[2].item() == pytest.approx(-0.05 / 3)
    assert grad[1].item() == 0.0 and grad[3].item() == 0.0


def test_padding_with_minus_inf_gives_finite_loss_and_gradient():
    logp = torch.tensor([[math.log(0.5), float("-inf")]], requires_grad=True)
    mask = torch.tensor([[1, 0]])
    for kind in ("ce", "mae", "cmae"):
        loss = wm_token_loss(logp, mask, kind=kind, rho=0.9)
        loss.sum().backward()
        assert torch.isfinite(loss).all() and torch.isfinite(logp.grad).all()
        logp.grad = None


def test_row_without_observation_tokens_has_zero_loss():
    loss = wm_token_loss(torch.zeros(2, 3), torch.tensor([[0, 0, 0], [1, 1, 0]]), kind="ce")
    assert loss.tolist() == [0.0, 0.0]


def test_wm_token_loss_rejects_unknown_kind():
    with pytest.raises(ValueError, match="'huber'"):
        wm_token_loss(torch.zeros(1, 1), torch.ones(1, 1), kind="huber")


def test_clipped_token_fraction():
    logp = _logp([[0.1, 0.5, 0.9], [0.3, 0.01, 0.99]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    # masked tokens: 0.1 0.5 0.9 0.3 0.01 -> above 0.2: 0.5 0.9 0.3 -> 3/5
    assert clipped_token_fraction(logp, mask, 0.2).item() == pytest.approx(0.6)


# ---------------------------------------------------------------- select_by_entropy
def test_select_by_entropy_keeps_ceil_alpha_n_highest():
    ent = torch.tensor([0.1, 0.9, 0.5, 0.7, 0.3])
    # ceil(0.5 * 5) = 3 -> 0.9, 0.7, 0.5
    assert select_by_entropy(ent, 0.5).tolist() == [False, True, True, True, False]


def test_select_by_entropy_ties_prefer_lower_index():
    ent = torch.tensor([0.5, 0.2, 0.5, 0.5, 0.9])
    # keep 3: 0.9 (idx 4), then the tied 0.5s at idx 0 and 2 (not 3)
    assert select_by_entropy(ent, 0.6).tolist() == [True, False, True, False, True]


def test_alpha_one_selects_all_and_float_rounding_is_safe():
    ent = torch.rand(10)
    assert select_by_entropy(ent, 1.0).all()
    assert select_by_entropy(ent, 0.7).sum().item() == 7  # 0.7 * 10 = 7.000000000000001
    assert select_by_entropy(ent, 0.75).sum().item() == 8
    assert select_by_entropy(torch.tensor([]), 0.75).numel() == 0


def test_transitions_without_a_target_are_not_selected_nor_counted():
    # Row 1 (the highest entropy) has no next observation. 4 eligible rows, α = 0.5 keeps
    # ⌈0.5 · 4⌉ = 2 of them: rows 3 and 0; row 1 is neither selected nor in N.
    ent = torch.tensor([0.8, 0.95, 0.1, 0.9, 0.2])
    eligible = torch.tensor([True, False, True, True, True])
    assert select_by_entropy(ent, 0.5, eligible).tolist() == [True, False, False, True, False]
    assert select_by_entropy(ent, 1.0, eligible).tolist() == eligible.tolist()


def test_empty_next_observations_are_out_of_the_wm_term_in_the_batch(tiny_model_dir):
    from training.config import TrainConfig
    from training.rl.rollout_batch import build_batch

    trajectories = _trajectories([[0.0, 10.0]])
    trajectories[1].transitions[0].next_observation = ""  # e.g. search QA after <answer>
    trajectories[1].transitions[0].output.entropies = [2.0]  # the higher entropy
    batch = build_batch(trajectories, _serializer(tiny_model_dir), TrainConfig(alpha=0.5))
    assert batch.selected.tolist() == [True, False]
    assert batch.samples[0].obs_len > 0 and batch.samples[1].obs_len == 0


@pytest.mark.parametrize("zero_signal", [True, False])
@pytest.mark.parametrize("invalid", [True, False])
def test_the_wm_term_leaves_out_zero_signal_groups_and_invalid_actions_when_told(
        tiny_model_dir, zero_signal, invalid):
    from training.config import TrainConfig
    from training.rl.rollout_batch import build_batch

    # Group 0's two episodes score the same (every advantage 0), group 1's do not; group 1's
    # second episode played an invalid action.
    trajectories = _trajectories([[0.0, 0.0], [10.0, 0.0]])
    trajectories[3].transitions[0].invalid_action = True
    batch = build_batch(trajectories, _serializer(tiny_model_dir),
                        TrainConfig(alpha=1.0, wm_zero_signal_groups=zero_signal,
                                    wm_invalid_actions=invalid))
    assert batch.zero_advantage_groups == 0.5
    assert batch.selected.tolist() == [zero_signal, zero_signal, True, invalid]
    assert [s.obs_len > 0 for s in batch.samples] == batch.selected.tolist()


def test_max_obs_tokens_caps_the_wm_target_and_none_keeps_it_whole(tiny_model_dir):
    from training.config import TrainConfig
    from training.rl.rollout_batch import build_batch

    trajectories = _trajectories([[0.0, 10.0]])
    for trajectory in trajectories:
        trajectory.transitions[0].next_observation = "lower " * 40
    serializer = _serializer(tiny_model_dir)
    whole = len(serializer.tokenizer("lower " * 40, add_special_tokens=False)["input_ids"])
    assert whole > 8
    capped = build_batch(trajectories, serializer, TrainConfig(alpha=1.0, max_obs_tokens=8))
    uncapped = build_batch(trajectories, serializer, TrainConfig(alpha=1.0, max_obs_tokens=None))
    assert [s.obs_len for s in capped.samples] == [8, 8]
    assert [s.obs_len for s in uncapped.samples] == [whole, whole]
    with pytest.raises(ValueError, match="max_obs_tokens=0"):
        TrainConfig(max_obs_tokens=0)


def test_sampled_token_entropy_is_the_papers_formula():
    # q = [0.5, 0.25]: −(0.5·ln 0.5 + 0.25·ln 0.25) / 2 = (0.34657 + 0.34657) / 2
    assert sampled_token_entropy([math.log(0.5), math.log(0.25)]) == pytest.approx(
        (0.5 * math.log(2) + 0.25 * math.log(4)) / 2)
    assert sampled_token_entropy([0.0]) == 0.0  # a certain token
    assert sampled_token_entropy([]) == 0.0


def test_entropy_score_setting_decides_which_transitions_get_the_wm_loss(tiny_model_dir):
    from training.config import TrainConfig
    from training.rl.rollout_batch import build_batch

    trajectories = _trajectories([[0.0, 10.0]])
    # Row 0: flat full distribution (entropy 2.0) but a near-certain sampled token (q ≈ 0.99);
    # row 1: peaked distribution (entropy 0.5) and a sampled token with q = 1/e.
    first, second = (t.transitions[0].output for t in trajectories)
    first.entropies, first.logprobs = [2.0], [math.log(0.99)]
    second.entropies, second.logprobs = [0.5], [-1.0]
    serializer = _serializer(tiny_model_dir)
    full = build_batch(trajectories, serializer, TrainConfig(alpha=0.5))
    sampled = build_batch(trajectories, serializer, TrainConfig(alpha=0.5, entropy_score="sampled"))
    assert full.selected.tolist() == [True, False]
    assert sampled.selected.tolist() == [False, True]   # 1/e ≈ 0.368 > 0.99·0.01 ≈ 0.0099
    assert [s.entropy for s in full.samples] == [2.0, 0.5]
    assert [s.entropy for s in sampled.samples] == pytest.approx([-0.99 * math.log(0.99),
                                                                  math.exp(-1)])
    with pytest.raises(ValueError, match="entropy_score='token'"):
        TrainConfig(entropy_score="token")


@pytest.mark.parametrize("alpha", [0.0, -0.1, 1.5])
def test_select_by_entropy_rejects_bad_alpha(alpha):
    with pytest.raises(ValueError, match="alpha"):
        select_by_entropy(torch.ones(3), alpha)


# ---------------------------------------------------------------- adaptive_wm_coef
def test_adaptive_coef_follows_eq_10_without_an_upper_clamp():
    assert adaptive_wm_coef(2.5, 10.0) == pytest.approx(0.75)
    # invalid-action penalties push R̄ below 0: Eq. 10 gives 1 − (−0.3)/10 = 1.03
    assert adaptive_wm_coef(-0.3, 10.0) == pytest.approx(1.03)
    assert adaptive_wm_coef(-0.3, 10.0, clamp_above=True) == 1.0   # lambda_clamp: true
    assert adaptive_wm_coef(12.0, 10.0) == 0.0                      # floor at 0 only
    t = adaptive_wm_coef(torch.tensor([0.0, 5.0, -1.0, 20.0]), 10.0)
    assert t.tolist() == pytest.approx([1.0, 0.5, 1.1, 0.0])
    t = adaptive_wm_coef(torch.tensor([0.0, 5.0, -1.0, 20.0]), 10.0, clamp_above=True)
    assert t.tolist() == pytest.approx([1.0, 0.5, 1.0, 0.0])
    with pytest.raises(ValueError, match="r_max"):
        adaptive_wm_coef(1.0, 0.0)


# ---------------------------------------------------------------- PPO clip / KL
def test_ppo_clip_hand_computed():
    old = torch.zeros(4)
    new = torch.tensor([math.log(1.5), math.log(1.5), math.log(0.5), math.log(1.1)])
    a = torch.tensor([1.0, -1.0, -2.0, 1.0])
    loss, clipped = ppo_clip_token_loss(new, old, a, clip_eps=0.2)
    # A>0, r=1.5 -> min(1.5, 1.2) = 1.2 -> loss -1.2 (clipped)
    # A<0, r=1.5 -> max(1.5, 1.2) * 1 = 1.5 (unclipped)
    # A=-2, r=0.5 -> -A*max over {0.5, 0.8}: loss = max(1.0, 1.6) = 1.6 (clipped)
    # r=1.1 inside the range -> -1.1
    assert loss.tolist() == pytest.approx([-1.2, 1.5, 1.6, -1.1])
    assert clipped.tolist() == [True, False, True, False]


def test_ppo_clip_gradient_zero_when_clipped():
    new = torch.tensor([math.log(1.5)], requires_grad=True)
    loss, _ = ppo_clip_token_loss(new, torch.zeros(1), torch.tensor([1.0]))
    loss.sum().backward()
    assert new.grad.item() == 0.0


def test_kl_k3_zero_at_equal_and_positive_otherwise():
    lp = torch.tensor([-1.0, -2.0])
    assert kl_k3(lp, lp).tolist() == [0.0, 0.0]
    d = 0.5  # ref - logp
    assert kl_k3(torch.tensor([-1.0]), torch.tensor([-0.5])).item() == pytest.approx(math.exp(d) - d - 1)


# ---------------------------------------------------------------- advantages
def test_grpo_hand_computed():
    # group a: [1, 3] mean 2 std sqrt(2); group b: [0, 0, 6] mean 2 std sqrt(12)
    out = adv.grpo(torch.tensor([1.0, 0.0, 3.0, 0.0, 6.0]), ["a", "b", "a", "b", "b"])
    s2, s12 = math.sqrt(2), math.sqrt(12)
    assert out.tolist() == pytest.approx([-1 / s2, -2 / s12, 1 / s2, -2 / s12, 4 / s12], rel=1e-5)


def test_group_ids_given_as_a_tensor_or_array_group_by_value():
    import numpy as np

    returns = torch.tensor([1.0, 0.0, 3.0, 0.0, 6.0])
    expected = adv.grpo(returns, [0, 1, 0, 1, 1])
    # Iterating a tensor gives 0-d tensors hashed by identity: each would be its own group.
    assert adv.grpo(returns, torch.tensor([0, 1, 0, 1, 1])).tolist() == expected.tolist()
    assert adv.grpo(returns, np.array([0, 1, 0, 1, 1])).tolist() == expected.tolist()
    assert adv.rloo(returns, torch.tensor([0, 1, 0, 1, 1])).tolist() == adv.rloo(
        returns, [0, 1, 0, 1, 1]).tolist()


def test_grpo_singleton_and_constant_groups():
    out = adv.grpo(torch.tensor([5.0, 2.0, 2.0]), [0, 1, 1])
    assert out.tolist() == pytest.approx([5.0, 0.0, 0.0])
    assert adv.grpo(torch.tensor([1.0, 3.0]), [0, 0], normalize=False).tolist() == [-1.0, 1.0]


@pytest.mark.parametrize("total", [10 - 0.1, sum([-0.1] * 6), 10 - 0.1 * 3])
def test_a_group_of_equal_returns_that_floats_cannot_hold_exactly_gets_zero(total):
    # In float32 the mean of eight 9.9s is one ulp (~1e-6, the size of EPS) off: every member
    # of a group that had all won got advantage -0.47.
    returns = torch.tensor([total] * 8 + [total, total + 1.0])
    groups = [0] * 8 + [1, 1]
    for normalize in (True, False):
        out = adv.grpo(returns, groups, normalize=normalize)
        assert out[:8].tolist() == [0.0] * 8
        assert abs(out[8].item()) == pytest.approx(0.7071 if normalize else 0.5, abs=1e-4)
        assert adv.rloo(returns, groups)[:8].abs().max() < 1e-6
    steps = adv.gigpo(returns[:8], [0] * 8, [torch.tensor([-0.1] * 5 + [total + 0.5])] * 8,
                      [[f"s{t}" for t in range(6)]] * 8)
    assert torch.cat(steps).tolist() == [0.0] * 48


def test_rloo_leave_one_out():
    out = adv.rloo(torch.tensor([1.0, 2.0, 6.0, 4.0]), [0, 0, 0, 1])
    # 1 - (2+6)/2 = -3 ; 2 - (1+6)/2 = -1.5 ; 6 - (1+2)/2 = 4.5 ; singleton keeps 4
    assert out.tolist() == pytest.approx([-3.0, -1.5, 4.5, 4.0])


def test_discounted_returns():
    assert adv.discounted_returns(torch.tensor([0.0, 0.0, 10.0]), 0.95).tolist() == \
        pytest.approx([10 * 0.95 ** 2, 10 * 0.95, 10.0])


def test_gigpo_anchor_state_groups_hand_computed():
    # One task, two trajectories that both start in state "s0".
    # traj 0: s0 -(r=0)-> s1 -(r=10)-> done ; return 10
    # traj 1: s0 -(r=0)-> s2 -(r=0)-> s1 -(r=0)-> done ; return 0
    gamma = 0.95
    out = adv.gigpo(torch.tensor([10.0, 0.0]), ["t", "t"],
                    [torch.tensor([0.0, 10.0]), torch.tensor([0.0, 0.0, 0.0])],
                    [["s0", "s1"], ["s0", "s2", "s1"]], gamma=gamma, omega=1.0)
    ep = 1 / math.sqrt(2)  # episode level: (10-5)/std([10,0]) = 5/7.07
    # step level: anchor s0 -> G = [9.5, 0] -> ±1/sqrt(2); s1 -> G = [10, 0] -> ±1/sqrt(2);
    # s2 seen once -> step advantage 0.
    assert out[0].tolist() == pytest.approx([ep + ep, ep + ep], rel=1e-5)
    assert out[1].tolist() == pytest.approx([-ep - ep, -ep + 0.0, -ep - ep], rel=1e-5)


def test_gigpo_state_seen_once_has_zero_step_advantage():
    # GiGPO's step level: A_S = (G_t − mean(G of the anchor group)) / std; an anchor group of one
    # step has mean G_t, so A_S = 0 however large G_t is (here G = 10 and 9.5 in singletons).
    # traj 0: s0 -> a -> s1 -(r=10)-> done ; traj 1: s0 -(r=0)-> s2 -(r=0)-> done
    out = adv.gigpo(torch.tensor([10.0, 0.0]), ["t", "t"],
                    [torch.tensor([0.0, 10.0]), torch.tensor([0.0, 0.0])],
                    [["s0", "s1"], ["s0", "s2"]], gamma=0.95, omega=1.0)
    ep = 5 / math.sqrt(50)           # (10 − 5) / std([10, 0])
    step0 = 4.75 / math.sqrt(45.125)  # s0: G = [9.5, 0], (9.5 − 4.75) / std
    assert out[0].tolist() == pytest.approx([ep + step0, ep + 0.0], rel=1e-5)
    assert out[1].tolist() == pytest.approx([-ep - step0, -ep + 0.0], rel=1e-5)
    plain = adv.gigpo(torch.tensor([10.0, 0.0]), ["t", "t"],
                      [torch.tensor([0.0, 10.0]), torch.tensor([0.0, 0.0])],
                      [["s0", "s1"], ["s0", "s2"]], gamma=0.95, omega=1.0, normalize=False)
    assert plain[0].tolist() == pytest.approx([5.0 + 4.75, 5.0])
    assert plain[1].tolist() == pytest.approx([-5.0 - 4.75, -5.0])


def test_gigpo_anchor_groups_do_not_cross_tasks_and_omega_scales():
    out = adv.gigpo(torch.tensor([1.0, 1.0]), ["a", "b"], [torch.tensor([1.0]), torch.tensor([3.0])],
                    [["s"], ["s"]], omega=0.5)
    # different tasks -> singleton episode groups (raw 1.0) and singleton anchor groups (0)
    assert [o.item() for o in out] == pytest.approx([1.0, 1.0])
    out = adv.gigpo(torch.tensor([1.0, 3.0]), ["a", "a"], [torch.tensor([1.0]), torch.tensor([3.0])],
                    [["s"], ["s"]], omega=0.5, normalize=False)
    # one anchor group: episode ±1 (mean-centred), step G − mean(G) = ±1 scaled by omega
    assert [o.item() for o in out] == pytest.approx([-1.0 - 0.5, 1.0 + 0.5])


def test_gigpo_similarity_groups_near_identical_states_within_a_task():
    page = "Doc 1 (Title: Paris) Paris is the capital and largest city of France. " * 3
    edited = page.replace("largest", "biggest")  # similarity ~0.96
    other = "Doc 1 (Title: Berlin) Berlin is the capital of Germany."
    keys = [[page], [edited], [other], [edited]]
    groups = ["q1", "q1", "q1", "q2"]
    assert adv.cluster_similar_states(groups, keys, 0.9) == [[page], [page], [other], [edited]]
    assert adv.cluster_similar_states(groups, keys, 0.99) == keys  # too strict: no merge
    rewards = [torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([0.0]), torch.tensor([0.0])]
    returns = torch.tensor([1.0, 0.0, 0.0, 0.0])
    exact = adv.gigpo(returns, groups, rewards, keys, omega=1.0, normalize=False)
    similar = adv.gigpo(returns, groups, rewards, keys, omega=1.0, normalize=False,
                        similarity=0.9)
    episode = [1 - 1 / 3, -1 / 3, -1 / 3, 0.0]  # mean-centred returns per task
    # exact: every anchor group is a singleton (0); 0.9: the two pages compare (G - 0.5)
    assert [o.item() for o in exact] == pytest.approx(episode)
    assert [o.item() for o in similar] == pytest.approx(
        [episode[0] + 0.5, episode[1] - 0.5, episode[2], episode[3]])
    with pytest.raises(ValueError, match="similarity"):
        adv.cluster_similar_states(groups, keys, 0.0)


def test_gae_hand_computed():
    a, ret = adv.gae(torch.tensor([1.0, 2.0]), torch.tensor([0.5, 1.0]), gamma=0.9, lam=0.8)
    d1 = 2.0 - 1.0                      # last step, V_T = 0
    d0 = 1.0 + 0.9 * 1.0 - 0.5
    assert a.tolist() == pytest.approx([d0 + 0.9 * 0.8 * d1, d1])
    assert ret.tolist() == pytest.approx([d0 + 0.72 * d1 + 0.5, d1 + 1.0])


def test_gae_lambda_one_gamma_one_is_return_minus_value():
    r, v = torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.2, 0.4, 0.6])
    a, _ = adv.gae(r, v)
    assert a.tolist() == pytest.approx([0.8, 0.6, 0.4])


# ---------------------------------------------------------------- estimator settings reach the batch
def _serializer(model_dir):
    from transformers import AutoTokenizer

    from agents.serialization import TransitionSerializer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return TransitionSerializer(tokenizer, "next_turn", [tokenizer.eos_token_id])


def _trajectories(returns_per_group):
    from agents.types import PolicyOutput, Trajectory, Transition

    trajectories = []
    for group, returns in enumerate(returns_per_group):
        for ret in returns:
            out = PolicyOutput("a", [1], [2], [-0.5], [0.3])
            step = Transition("h", out, "a", f"o{ret}", ret, True, False, False)
            trajectories.append(Trajectory("t", "x", group, [step], won=ret > 0,
                                           initial_observation="s0"))
    return trajectories


@pytest.mark.parametrize("algo", ["grpo", "gigpo"])
def test_norm_adv_by_std_switches_to_mean_centring(algo):
    from training.config import TrainConfig
    from training.rl.rollout_batch import step_advantages

    # A group without a win whose returns differ only by a -0.1 penalty, and a group with one.
    trajectories = _trajectories([[0.0, -0.1], [10.0, 0.0]])
    scaled = step_advantages(trajectories, TrainConfig(algo=algo))
    centred = step_advantages(trajectories, TrainConfig(algo=algo, norm_adv_by_std=False))
    # std-normalised: the penalty group gets ±1/sqrt(2), as strong as the win group's
    factor = 2 if algo == "gigpo" else 1
    assert [a[0] for a in scaled] == pytest.approx(
        [factor * c / math.sqrt(2) for c in (1, -1, 1, -1)], rel=1e-4)
    # mean-centred: ±0.05 vs ±5. GiGPO adds an equal step advantage: each trajectory acts once,
    # from the group's shared state s0, so the anchor group is the rollout group.
    assert [a[0] for a in centred] == pytest.approx(
        [factor * x for x in (0.05, -0.05, 5.0, -5.0)])


def _penalised(task_rewards, penalties, group=0):
    """One trajectory whose steps earn ``task_rewards`` and pay ``penalties`` (ParseAction's
    format penalties, included in the step reward as the rollout records it)."""
    from agents.types import PolicyOutput, Trajectory, Transition

    steps = [Transition("h", PolicyOutput("a", [1], [2], [-0.5], [0.3]), "a", f"o{k}",
                        task + penalty, False, False, penalty != 0, format_penalty=penalty)
             for k, (task, penalty) in enumerate(zip(task_rewards, penalties))]
    return Trajectory("t", "x", group, steps, initial_observation="s0")


def test_lambda_comes_from_the_task_return_without_format_penalties():
    from training.config import TrainConfig
    from training.rl.rollout_batch import group_lambdas

    # Group 0: no win, three invalid steps each (-0.3 total): Eq. 10 over the task return
    # gives exactly 1; over the total return 1.03. Group 1: one win (10) and one loss.
    trajectories = [_penalised([0, 0, 0], [-0.1] * 3), _penalised([0, 0, 0], [-0.1] * 3),
                    _penalised([0, 10], [-0.1, 0], group=1), _penalised([0, 0], [0, 0], group=1)]
    assert [t.task_return for t in trajectories] == [0, 0, 10, 0]
    assert group_lambdas(trajectories, TrainConfig()) == pytest.approx({0: 1.0, 1: 0.5})
    assert group_lambdas(trajectories, TrainConfig(lambda_return="total")) == \
        pytest.approx({0: 1.03, 1: 1 - 9.9 / 2 / 10})
    assert group_lambdas(trajectories, TrainConfig(lambda_return="total", lambda_clamp=True)) \
        == pytest.approx({0: 1.0, 1: 1 - 9.9 / 2 / 10})


def test_parse_action_reports_the_penalty_it_added():
    import gymnasium as gym

    from wrappers import ParseAction

    env = ParseAction(gym.make("Test/GuessNumber-v0"), invalid_penalty=-0.25)
    env.reset(seed=0)
    _, reward, _, _, info = env.step("no tags")
    assert (reward, info["format_penalty"]) == (-0.25, -0.25)
    _, reward, _, _, info = env.step("<action>guess 1</action>")
    assert info["format_penalty"] == 0.0 and reward >= 0


def test_gigpo_verl_agent_switches_hand_computed():
    """verl-agent's handling: each step's episode score is the task return plus its own
    penalty, its step return G_t plus its own penalty; statistics over steps or trajectories."""
    from training.config import TrainConfig
    from training.rl.rollout_batch import step_advantages

    # Two trajectories of one task: A wins at step 2 after an invalid step; B fails in 1 step.
    trajectories = [_penalised([0, 10], [-0.1, 0]), _penalised([0], [0])]
    anchors = [["s0", "s1"], ["s0"]]
    for t, keys in zip(trajectories, anchors):
        for step, key in zip(t.transitions, keys):
            step.info["anchor_observation"] = key
    gamma = 0.5
    base = dict(algo="gigpo", gamma=gamma, norm_adv_by_std=False)
    # episode scores per step: A: 10 - 0.1, 10 + 0; B: 0. Step returns: A: 0 + 0.5*10 - 0.1,
    # 10; B: 0. Anchor s0 holds A's first step and B's step; s1 is seen once (0).
    step_a0, step_b0 = (0 + gamma * 10 - 0.1) - (4.9 + 0) / 2, 0 - (4.9 + 0) / 2
    # trajectory statistics: mean over task returns {10, 0} = 5
    expected = [[9.9 - 5 + step_a0, 10 - 5 + 0.0], [0 - 5 + step_b0]]
    got = step_advantages(trajectories, TrainConfig(gigpo_penalty="step", **base))
    assert [list(a) for a in got] == [pytest.approx(e) for e in expected]
    # step statistics: the mean over the three step scores {9.9, 10, 0}
    mean = (9.9 + 10 + 0) / 3
    expected = [[9.9 - mean + step_a0, 10 - mean], [0 - mean + step_b0]]
    got = step_advantages(trajectories, TrainConfig(gigpo_penalty="step",
                                                    gigpo_episode_norm="step", **base))
    assert [list(a) for a in got] == [pytest.approx(e) for e in expected]
    # the default (penalties in every reward): returns 9.9 and 0, G_t with the penalty inside
    total_a0 = -0.1 + gamma * 10
    expected = [[9.9 - 4.95 + total_a0 - (total_a0 + 0) / 2, 9.9 - 4.95],
                [0 - 4.95 + 0 - (total_a0 + 0) / 2]]
    got = step_advantages(trajectories, TrainConfig(**base))
    assert [list(a) for a in got] == [pytest.approx(e) for e in expected]
