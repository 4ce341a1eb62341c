"""World models learned from a WM replay: RWML (RL on next-state prediction), WM SFT and
offline CMAE, sharing one data path and one prompt format.

The package, by job (each module's docstring states its part of the method):

* :mod:`~training.world_model.config`: :class:`WorldModelConfig` (``paw-gym train-wm``);
* :mod:`~training.world_model.data`: examples from a replay, the train/validation split, the
  prompt and the answer format;
* :mod:`~training.world_model.rewards`: ``embedding``, ``rouge``, ``exact`` or ``module:function``;
* :mod:`~training.world_model.methods`: the trainable policy, sampled predictions, one loss step
  of each method;
* :mod:`~training.world_model.too_easy`: RWML's "too easy" filter;
* :mod:`~training.world_model.train`: recording a replay and the training run;
* :mod:`~training.world_model.evaluation`: predictions, their scores per task type, the tables.

The names below are re-exported so that ``from training.world_model import ...`` reads one place.
torch, transformers and sentence-transformers are imported inside the functions: the CLI imports
this package (for :class:`WorldModelConfig`) when it builds its parser.
"""

from training.world_model.config import RECORD_AGENTS, SPLIT_KEY, WorldModelConfig
from training.world_model.data import (OBSERVATION_STOP, PROMPT_TEMPLATE, WMExample, episode_keys,
                                       is_validation, load_examples, parse_prediction,
                                       select_split, split_examples, target_answer, wm_prompt)
from training.world_model.evaluation import (OVERALL, predict, read_predictions,
                                             summarize_predictions, table_markdown,
                                             write_predictions, write_wm_tables)
from training.world_model.methods import (load_trainable_policy, make_optimizer, rwml_step,
                                          sample_predictions, target_loss_step, target_rows,
                                          transition_rows)
from training.world_model.rewards import (DEFAULT_TAU, REWARDS, EmbeddingReward, Reward,
                                          exact_match, make_reward, normalize_text,
                                          rouge_l_binned, rouge_l_f1, score)
from training.world_model.too_easy import filter_too_easy, keep_not_too_easy
from training.world_model.train import record_replay, train_world_model

__all__ = [
    "DEFAULT_TAU", "OBSERVATION_STOP", "OVERALL", "PROMPT_TEMPLATE", "RECORD_AGENTS", "REWARDS",
    "SPLIT_KEY", "EmbeddingReward", "Reward", "WMExample", "WorldModelConfig", "episode_keys",
    "exact_match", "filter_too_easy", "is_validation", "keep_not_too_easy", "load_examples",
    "load_trainable_policy", "make_optimizer", "make_reward", "normalize_text", "parse_prediction",
    "predict", "read_predictions", "record_replay", "rouge_l_binned", "rouge_l_f1", "rwml_step",
    "sample_predictions", "score", "select_split", "split_examples", "summarize_predictions",
    "table_markdown", "target_answer", "target_loss_step", "target_rows", "train_world_model",
    "transition_rows", "wm_prompt", "write_predictions", "write_wm_tables",
]
