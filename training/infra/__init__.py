"""What every training command stands on: configs that check themselves (``checked_config``,
``config_values``), output folders (``outputs``), checkpoints, distributed launch, the memory
estimate, metrics logs and plots."""
