"""Deprecated path of :mod:`training.integrations.trl`, kept for one release.

The env package sits below the trainer and imports none of it; this module is the one
exception (``tests/test_layers.py`` names it), a re-export that warns on import. Import
``training.integrations.trl`` instead.
"""

import warnings

warnings.warn("paw_gym.integrations.trl is deprecated and will be removed in the next release; "
              "import training.integrations.trl instead", DeprecationWarning, stacklevel=2)

from training.integrations.trl import (PAW_BOUNDS, TASK_SEED, EnvRollout,  # noqa: E402
                                       EnvTools, PaWGRPOConfig, PaWGRPOTrainer, Rollout,
                                       env_return, env_tools, task_dataset, task_seed,
                                       transcript_wm_loss)

__all__ = ["PAW_BOUNDS", "TASK_SEED", "EnvRollout", "EnvTools", "PaWGRPOConfig", "PaWGRPOTrainer",
           "Rollout", "env_return", "env_tools", "task_dataset", "task_seed", "transcript_wm_loss"]
