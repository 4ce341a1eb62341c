"""What every training command stands on: configs that check themselves (``checked_config``,
``config_values``), checkpoints, distributed launch, the memory estimate, metrics logs and
plots, and the trainer's data-file kinds (``data_files``). Output folders and the data-file
schema are :mod:`run_files.outputs` and :mod:`run_files.data_files`, which the layers below
training use too."""
