"""``PaW/Shelf-v0``: buy the item the task names from a short shelf — a small env where a tiny
model learns in CPU-minutes.

Each task names one item ("buy the red mug") and shows a shelf of 3–5 items (colour × object,
64 items in all). The agent takes an item, then pays for it or puts it back; paying for the
named item wins (reward 10), paying for another loses. Every deciding input is in a prompt of
~150 tokens, and the next observation follows exactly from the state and the action, so it
is also a clean testbed for a world-model loss.

Splits keep held-out tasks truly new: the ``test`` split's target items (16 of the 64, every
fourth colour/object pairing) are never the target of a ``train`` task; they do appear there as
distractors. ``all`` draws any target.

    >>> import gymnasium as gym, paw_gym
    >>> env = gym.make("PaW/Shelf-v0", split="test")
    >>> observation, info = env.reset(seed=0)
    >>> info["admissible_actions"]             # doctest: +SKIP
    ['take pink lamp', 'take red mug', 'take blue sock']
"""

from __future__ import annotations

from typing import Any, Literal

from paw_gym.core import Task, TaskList, TextEnv

COLOURS = ("red", "blue", "green", "yellow", "black", "white", "pink", "brown")
OBJECTS = ("mug", "hat", "sock", "lamp", "book", "shirt", "bag", "clock")
ITEMS = tuple(f"{c} {o}" for c in COLOURS for o in OBJECTS)
#: Target items of the held-out ``test`` split (a quarter of all items).
TEST_TARGETS = tuple(f"{c} {o}" for i, c in enumerate(COLOURS) for j, o in enumerate(OBJECTS)
                     if (i + j) % 4 == 0)
SPLITS = {"train": tuple(item for item in ITEMS if item not in TEST_TARGETS),
          "test": TEST_TARGETS, "all": ITEMS}
WIN_REWARD = 10.0


class ShelfEnv(TextEnv):
    """Take the item the task names from a shelf, then pay for it (see the module docstring).

    Args:
        split: ``train``, ``test`` (held-out target items) or ``all``.
        shelf_sizes: shelf lengths a task draws from; the task type is ``"<n> items"``.
    """

    held_out_split = "test"

    def __init__(self, split: Literal["train", "test", "all"] = "train",
                 shelf_sizes: tuple[int, ...] = (3, 4, 5),
                 render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        if split not in SPLITS:
            raise ValueError(f"split {split!r} is not one of {sorted(SPLITS)}")
        sizes = tuple(int(n) for n in shelf_sizes)
        if not sizes or not all(2 <= n <= len(ITEMS) for n in sizes):
            raise ValueError(f"shelf_sizes {shelf_sizes!r} must be integers in [2, {len(ITEMS)}]")
        self.split, self.shelf_sizes = split, sizes

    # -- task -------------------------------------------------------------------------------
    def tasks(self) -> TaskList:
        """Every (target item, shelf size) pair of the split; the other items on the shelf and
        their order come from the reset seed."""
        targets, sizes = SPLITS[self.split], self.shelf_sizes
        return TaskList(len(targets) * len(sizes), lambda i: Task(
            {"target": targets[i // len(sizes)], "shelf_size": sizes[i % len(sizes)]},
            f"{sizes[i % len(sizes)]} items"))

    def _reset(self, options: dict[str, Any]):
        rng = self.np_random
        self.target = str(options.get("target") or rng.choice(SPLITS[self.split]))
        if self.target not in ITEMS:
            raise ValueError(f"options['target']={self.target!r} is not an item; items are "
                             f"'<colour> <object>' with colours {COLOURS} and objects {OBJECTS}")
        size = int(rng.choice(self.shelf_sizes))  # drawn even when given: same shelf per seed
        if options.get("shelf_size") is not None:
            size = options["shelf_size"]
            if size not in self.shelf_sizes:
                raise ValueError(f"options['shelf_size']={size!r} is not one of this env's "
                                 f"shelf_sizes {self.shelf_sizes}")
        others = [item for item in ITEMS if item != self.target]
        shelf = [str(x) for x in rng.choice(others, size=size - 1, replace=False)] + [self.target]
        self.shelf = [shelf[i] for i in rng.permutation(size)]
        self.held: str | None = None
        goal = f"buy the {self.target}"
        self._task = dict(task_id=f"{goal} from {', '.join(self.shelf)}",
                          task_description=goal, task_type=f"{size} items")
        return self._at_shelf()

    def _at_shelf(self):
        observation = (f"Task: buy the {self.target}. You stand at a shelf with: "
                       f"{', '.join(self.shelf)}.")
        return observation, self.make_info(
            admissible_actions=[f"take {item}" for item in self.shelf], **self._task)

    def _holding(self):
        observation = (f"Task: buy the {self.target}. You hold the {self.held}. "
                       f"Pay for it or put it back.")
        return observation, self.make_info(admissible_actions=["pay", "put back"], **self._task)

    # -- dynamics ---------------------------------------------------------------------------
    def _step(self, action: str):
        if action not in self._last_info["admissible_actions"]:
            return self._last_observation, 0.0, False, {"invalid_action": True}
        if action.startswith("take "):
            self.held = action[len("take "):]
            observation, info = self._holding()
            return observation, 0.0, False, info
        if action == "put back":
            self.held = None
            observation, info = self._at_shelf()
            return observation, 0.0, False, info
        won = self.held == self.target  # action == "pay"
        observation = (f"You bought the {self.held}. " +
                       ("Task complete." if won else f"You were asked for the {self.target}."))
        return observation, WIN_REWARD if won else 0.0, True, self.make_info(
            admissible_actions=[], won=won, **self._task)

    def _expert_action(self) -> str:
        """Take the named item, pay for it; put back anything else."""
        if self.held is None:
            return f"take {self.target}"
        return "pay" if self.held == self.target else "put back"
