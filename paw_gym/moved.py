"""Modules that moved: importing an old path fails with one line naming the new one.

Gymnasium's renamed wrappers fail loudly instead of lingering as aliases; a moved module here
does the same. A package lists its moved submodules once and calls :func:`refuse_moved`::

    refuse_moved({"training.losses": "training.rl.losses"})

after which ``import training.losses`` (or ``from training.losses import x``) raises
``ModuleNotFoundError: training.losses moved to training.rl.losses; import that instead``.
The finder answers only the names it was given, so every other import is untouched. Python
turns a missing submodule in ``from training import losses`` into an attribute lookup, so the
package's ``__getattr__`` raises :func:`moved_error` for those names too.
"""

from __future__ import annotations

import importlib.abc
import sys


class _MovedModules(importlib.abc.MetaPathFinder):
    """A meta-path finder that refuses each old module name with its new one."""

    def __init__(self, moved: dict[str, str]):
        self.moved = dict(moved)

    def find_spec(self, fullname, path=None, target=None):
        new = self.moved.get(fullname)
        if new is None:
            return None
        raise moved_error(fullname, new)


def moved_error(old: str, new: str) -> ModuleNotFoundError:
    """The one error an old module path raises."""
    return ModuleNotFoundError(f"{old} moved to {new}; import that instead", name=old)


def refuse_moved(moved: dict[str, str]) -> None:
    """Install one finder for ``moved`` ({old dotted name: new dotted name}) ahead of the
    normal ones, once per set of names."""
    for finder in sys.meta_path:
        if isinstance(finder, _MovedModules) and finder.moved == moved:
            return
    sys.meta_path.insert(0, _MovedModules(moved))
