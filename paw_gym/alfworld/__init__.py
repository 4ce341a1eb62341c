"""ALFWorld for PaW: ``PaW/ALFWorld-v0`` on the TextWorld/PDDL engine, and an offline game generator.

Modules (nothing here imports alfworld or textworld until an env or generator is used):

- ``env``: the Gymnasium env (:class:`~paw_gym.alfworld.env.ALFWorldEnv`);
- ``engine``: the TextWorld PDDL engine with per-game caching (fast resets and steps);
- ``expert``: walkthrough + alfworld's handcoded expert (with upstream bugs worked around);
- ``data``: data sources (``data_dir``, ``$ALFWORLD_DATA``, generated cache) and game lists;
- ``scenes``, ``tasks``, ``pddl``, ``generate``: the game generator (``paw-gym gen-alfworld``).
"""
