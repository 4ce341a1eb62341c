"""What every training command stands on: configs that check themselves (``checked_config``,
``config_values``), checkpoints, distributed launch, the memory estimate, metrics logs and
plots (output folders and data files are :mod:`paw_gym.outputs` and :mod:`paw_gym.data_files`,
which the layers below training use too)."""
