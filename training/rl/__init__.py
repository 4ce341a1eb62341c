"""The RL side of the trainer, as pure functions and small classes: advantages (GRPO, GiGPO,
RLOO, GAE), the losses (PPO clip, KL, the PaW world-model token loss, entropy selection), the
batch built from rollouts (``rollout_batch``, ``batch``), the one-pass objective, the PPO critic,
env collection and the noise-gradient diagnostic. :mod:`training.trainer` puts them together."""
