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
from paw_gym.moved import moved_error, refuse_moved
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

# Moved out of the env package: the old paths fail with one line naming the new one. The TRL
# integration lives with the trainer (the env package imports nothing above it;
# ``paw_gym.integrations.trl`` fails on its package's line); the output guard and the data-file
# schema are the run_files package, below this one.
MOVED = {"paw_gym.integrations": "training.integrations",
         "paw_gym.outputs": "run_files.outputs",
         "paw_gym.data_files": "run_files.data_files"}
refuse_moved(MOVED)


def __getattr__(name: str):
    if f"paw_gym.{name}" in MOVED:  # `from paw_gym import outputs`: an attribute lookup
        raise moved_error(f"paw_gym.{name}", MOVED[f"paw_gym.{name}"])
    raise AttributeError(f"module 'paw_gym' has no attribute {name!r}")
