"""paw-gym: Gymnasium text environments for training LLM agents with PaW.

``import paw_gym`` registers the built-in environments (``paw-gym envs`` lists them)::

    import gymnasium as gym
    import paw_gym

    env = gym.make("PaW/WebShop-v0")
    observation, info = env.reset(seed=0)
"""

from paw_gym.core import (
    INFO_KEYS,
    MAX_ACTION_LENGTH,
    MAX_OBSERVATION_LENGTH,
    Task,
    TaskList,
    TextEnv,
    TextSpace,
)
from paw_gym.registration import list_text_envs, register_builtin_envs, register_text_env
from paw_gym.moved import refuse_moved
from paw_gym.toytext.adapter import TextAdapter

__version__ = "0.1.0"

__all__ = [
    "INFO_KEYS",
    "MAX_ACTION_LENGTH",
    "MAX_OBSERVATION_LENGTH",
    "Task",
    "TaskList",
    "TextEnv",
    "TextAdapter",
    "TextSpace",
    "list_text_envs",
    "register_text_env",
    "__version__",
]

register_builtin_envs()

# The TRL integration lives with the trainer (the env package imports nothing above it);
# ``paw_gym.integrations.trl`` fails on its package's line.
refuse_moved({"paw_gym.integrations": "training.integrations"})
