"""The files a paw-gym command writes and reads, kept safe: the lowest layer, plain Python (no
torch), importing nothing of paw-gym, so every layer above uses it (an env's game generator, the
replay wrappers, the agents' model folders, the trainer).

* :mod:`run_files.outputs` — the output guard: claimed folders, their manifest of the files
  written (each by its literal path, with its size and sha256), ``--overwrite`` removing only
  what matches, the one-writer lock, atomic saves, weight-file sha256 checked on load.
* :mod:`run_files.data_files` — the schema every data file is read through (one reader per
  file kind; a bad record skipped with one warning or refused in one ``file:line`` line) and
  the replay record. The trainer's own file kinds are in :mod:`training.infra.data_files`.
"""
