"""paw-gym's envs and PaW's world-model term inside other trainers (``[trl]`` extra:
:mod:`paw_gym.integrations.trl`)."""
