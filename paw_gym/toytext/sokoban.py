"""``PaW/Sokoban-v0``: push every box onto a target in a small walled room — a grid puzzle in
text where the next observation follows exactly from the grid and the move.

Each task is a random ``size`` × ``size`` room (5–8 cells a side, walls round the edge and a
few inside) with 1–3 boxes, drawn per seeded reset. Rooms are solvable by construction: the
boxes start on their targets and the player *pulls* them away with random reverse moves (the
reverse-play method of gym-sokoban and RAGEN). A breadth-first solver then keeps only rooms
that are not already solved and take at most :data:`MAX_SOLUTION_LENGTH` moves, so every
task fits in the :data:`MAX_STEPS` step limit. The grid uses RAGEN's legend: ``#`` wall,
``_`` floor, ``O`` target, ``X`` box, ``√`` box on a target, ``P`` player, ``S`` player on a
target. Actions are ``up``, ``down``, ``left`` and ``right``; walking into a wall, or pushing a
box into a wall or another box, leaves the room as it is (a legal move, not an invalid
action). Reward 10 when the last box reaches a target.

The observation is the grid only, cells separated by spaces (so each cell is its own word to a
tokenizer); the ``sokoban`` prompt template states the legend. Splits hold out whole rooms: a
room is ``test`` iff the SHA-1 of its initial grid is ≡ 0 mod 5
(:func:`~paw_gym.toytext.gridworlds.is_test_layout`), and ``train`` never draws one. ``all``
draws any room.

    >>> import gymnasium as gym, paw_gym
    >>> env = gym.make("PaW/Sokoban-v0", split="test")
    >>> observation, info = env.reset(seed=0)
    >>> print(observation)                     # doctest: +SKIP
    # # # # # #
    # _ _ _ P #
    # _ _ X X #
    # _ _ O _ #
    # _ _ _ O #
    # # # # # #
    >>> env.unwrapped.expert_action(), info["task_type"]     # doctest: +SKIP
    ('down', '2 boxes')
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import numpy as np

from paw_gym.core import TextEnv
from paw_gym.toytext.gridworlds import Split, check_split, in_split, is_test_layout

ACTIONS = ("up", "down", "left", "right")
WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET = "#_OX√PS"
SIZES = range(5, 9)
BOX_COUNTS = range(1, 4)
#: Longest optimal solution (moves) of a generated room.
MAX_SOLUTION_LENGTH = 20
#: Step limit of an episode: room for a few wasted moves beyond the longest solution.
MAX_STEPS = 30
#: Reverse moves that scatter the boxes from their targets when a room is drawn.
REVERSE_MOVES = 80
WIN_REWARD = 10.0


@dataclass(frozen=True)
class Layout:
    """The fixed part of a room. Cells are numbered ``row * width + column``."""

    height: int
    width: int
    floor: frozenset[int]
    """Every cell that is not a wall (targets included)."""
    targets: frozenset[int]

    def offset(self, action: str) -> int:
        """How far a move in direction ``action`` shifts a cell number."""
        return {"up": -self.width, "down": self.width, "left": -1, "right": 1}[action]


# -- rooms as text ------------------------------------------------------------------------------
def render_grid(layout: Layout, player: int, boxes: frozenset[int]) -> str:
    """The room as rows of legend symbols joined by newlines."""
    rows = []
    for row in range(layout.height):
        symbols = []
        for cell in range(row * layout.width, (row + 1) * layout.width):
            on_target = cell in layout.targets
            if cell == player:
                symbols.append(PLAYER_ON_TARGET if on_target else PLAYER)
            elif cell in boxes:
                symbols.append(BOX_ON_TARGET if on_target else BOX)
            elif cell not in layout.floor:
                symbols.append(WALL)
            else:
                symbols.append(TARGET if on_target else FLOOR)
        rows.append(" ".join(symbols))
    return "\n".join(rows)


def parse_grid(grid: str) -> tuple[Layout, int, frozenset[int]]:
    """``(layout, player, boxes)`` of a room written as :func:`render_grid` writes it (cells
    separated by spaces) or compactly (``"#PXO#"``).

    The rows must be of equal length, use only the legend's symbols, hold exactly one player
    and be walled in (every edge cell a wall), so no move can leave the grid.
    """
    rows = [row.split(" ") if " " in row else list(row) for row in grid.strip().split("\n")]
    height, width = len(rows), len(rows[0])
    if any(len(row) != width for row in rows):
        raise ValueError(f"grid rows must all have the same length, got {[len(r) for r in rows]}")
    cells = [symbol for row in rows for symbol in row]
    unknown = set(cells) - set(WALL + FLOOR + TARGET + BOX + BOX_ON_TARGET + PLAYER
                               + PLAYER_ON_TARGET)
    if unknown:
        raise ValueError(f"grid has symbols {sorted(unknown)} outside the legend")
    players = [cell for cell, symbol in enumerate(cells) if symbol in (PLAYER, PLAYER_ON_TARGET)]
    if len(players) != 1:
        raise ValueError(f"grid must hold exactly one player ({PLAYER} or {PLAYER_ON_TARGET}), "
                         f"found {len(players)}")
    edges = rows[0] + rows[-1] + [symbol for row in rows for symbol in (row[0], row[-1])]
    if set(edges) != {WALL}:
        raise ValueError(f"grid must be walled in: every edge cell must be {WALL!r}")
    layout = Layout(
        height, width,
        floor=frozenset(cell for cell, symbol in enumerate(cells) if symbol != WALL),
        targets=frozenset(cell for cell, symbol in enumerate(cells)
                          if symbol in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET)))
    boxes = frozenset(cell for cell, symbol in enumerate(cells) if symbol in (BOX, BOX_ON_TARGET))
    return layout, players[0], boxes


# -- dynamics and solver ------------------------------------------------------------------------
def _move(layout: Layout, player: int, boxes: frozenset[int], offset: int,
          box_cells: frozenset[int] | None = None) -> tuple[int, frozenset[int]]:
    """``(player, boxes)`` after one move; unchanged when a wall or a second box blocks it.

    ``box_cells`` are the cells a box may be pushed onto (default: any floor cell).
    """
    step = player + offset
    if step not in layout.floor:
        return player, boxes
    if step in boxes:
        beyond = step + offset
        if beyond not in (layout.floor if box_cells is None else box_cells) or beyond in boxes:
            return player, boxes
        boxes = boxes - {step} | {beyond}
    return step, boxes


def _live_cells(layout: Layout) -> frozenset[int]:
    """Cells from which a lone box can still be pushed onto some target.

    A box anywhere else (a corner that is not a target, say) can never be solved, so the
    solver does not push boxes there: this prunes dead states without changing any optimum.
    """
    live, queue = set(layout.targets), deque(layout.targets)
    while queue:
        cell = queue.popleft()
        for offset in (-layout.width, layout.width, -1, 1):
            origin = cell - offset  # a box here, pushed by a player standing behind it
            if origin not in live and origin in layout.floor and origin - offset in layout.floor:
                live.add(origin)
                queue.append(origin)
    return frozenset(live)


def _shortest_solution(layout: Layout, player: int, boxes: frozenset[int],
                       max_moves: int | None = None) -> list[str] | None:
    """Breadth-first search over ``(player, boxes)`` states; see :func:`solve`."""
    if boxes <= layout.targets:
        return []
    live = _live_cells(layout)
    if not boxes <= live:
        return None
    moves = [(action, layout.offset(action)) for action in ACTIONS]
    start = (player, boxes)
    came_from: dict[tuple[int, frozenset[int]], tuple[Any, str] | None] = {start: None}
    frontier, depth = [start], 0
    while frontier and (max_moves is None or depth < max_moves):
        depth += 1
        next_frontier = []
        for state in frontier:
            for action, offset in moves:
                new_state = _move(layout, *state, offset, box_cells=live)
                if new_state in came_from:
                    continue
                came_from[new_state] = (state, action)
                if new_state[1] <= layout.targets:
                    return _path_to(new_state, came_from)
                next_frontier.append(new_state)
        frontier = next_frontier
    return None


def _path_to(state: Any, came_from: dict[Any, tuple[Any, str] | None]) -> list[str]:
    actions = []
    while came_from[state] is not None:
        state, action = came_from[state]
        actions.append(action)
    return actions[::-1]


def solve(grid: str, max_moves: int | None = None) -> list[str] | None:
    """A shortest list of moves that puts every box of ``grid`` on a target.

    ``grid`` is a room as :func:`render_grid` writes it. Returns ``[]`` when the room is
    already solved, and ``None`` when it cannot be solved (in at most ``max_moves`` moves, if
    given).

        >>> solve("#####\\n#PXO#\\n#####")
        ['right']
    """
    return _shortest_solution(*parse_grid(grid), max_moves=max_moves)


# -- room generator -----------------------------------------------------------------------------
def _connected(floor: frozenset[int], width: int) -> bool:
    start = min(floor)
    seen, queue = {start}, deque([start])
    while queue:
        cell = queue.popleft()
        for neighbour in (cell - width, cell + width, cell - 1, cell + 1):
            if neighbour in floor and neighbour not in seen:
                seen.add(neighbour)
                queue.append(neighbour)
    return len(seen) == len(floor)


def _draw_room(rng: np.random.Generator, size: int,
               n_boxes: int) -> tuple[Layout, int, frozenset[int]]:
    """A random room, solvable by construction, possibly already solved (see the module doc)."""
    interior = [row * size + column for row in range(1, size - 1) for column in range(1, size - 1)]
    while True:  # a few inner walls, never cutting the floor in two
        inner_walls = rng.choice(interior, size=int(rng.integers(size - 2)), replace=False)
        floor = frozenset(interior) - set(inner_walls.tolist())
        if _connected(floor, size):
            break
    player, *targets = rng.choice(sorted(floor), size=n_boxes + 1, replace=False).tolist()
    layout = Layout(size, size, floor, frozenset(targets))
    offsets = [layout.offset(action) for action in ACTIONS]
    boxes = set(targets)
    for direction in rng.integers(len(ACTIONS), size=REVERSE_MOVES):
        offset = offsets[direction]
        step, behind = player + offset, player - offset
        if step not in floor or step in boxes:
            continue
        if behind in boxes:  # pull it along: undoes a push in the opposite direction
            boxes.remove(behind)
            boxes.add(player)
        player = step
    return layout, player, frozenset(boxes)


# -- environment --------------------------------------------------------------------------------
class SokobanEnv(TextEnv):
    """Push every box onto a target in a random walled room (see the module docstring).

    Args:
        split: ``train``, ``test`` (held-out rooms) or ``all``.
        size: side of the square room, walls included (5–8).
        box_counts: box counts a task draws from (each 1–3); the task type is ``"<n> box(es)"``.
    """

    held_out_split = "test"

    def __init__(self, split: Split = "train", size: int = 6, box_counts: tuple[int, ...] = (1, 2),
                 render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        check_split(split)
        if not isinstance(size, Integral) or size not in SIZES:
            raise ValueError(f"size {size!r} must be an integer in [{SIZES[0]}, {SIZES[-1]}]")
        counts = tuple(box_counts) if isinstance(box_counts, (tuple, list)) else ()
        if not counts or not all(isinstance(n, Integral) and n in BOX_COUNTS for n in counts):
            raise ValueError(f"box_counts {box_counts!r} must be a non-empty tuple of integers "
                             f"in [{BOX_COUNTS[0]}, {BOX_COUNTS[-1]}]")
        self.split, self.size, self.box_counts = split, int(size), tuple(int(n) for n in counts)

    # -- task -------------------------------------------------------------------------------
    def _reset(self, options: dict[str, Any]):
        rng = self.np_random
        n_boxes = int(rng.choice(self.box_counts))
        # Redraw until the room suits the split and is worth playing; the checks run cheapest
        # first, and every redraw comes from the same seeded rng, so a seed fixes the room.
        while True:
            layout, player, boxes = _draw_room(rng, self.size, n_boxes)
            if boxes == layout.targets:
                continue
            grid = render_grid(layout, player, boxes)
            if not in_split(self.split, is_test_layout(grid)):
                continue
            solution = _shortest_solution(layout, player, boxes, MAX_SOLUTION_LENGTH)
            if solution is not None:
                break
        self.layout, self.player, self.boxes = layout, player, boxes
        self.initial_grid = grid
        self._expert_plan = self._plan_by_state(solution)
        self._stuck = False
        digest = hashlib.sha1(grid.encode("utf-8")).hexdigest()
        goal = ("push the box onto the target" if n_boxes == 1
                else f"push the {n_boxes} boxes onto the targets")
        self._task = {"task_id": f"sokoban-{digest[:12]}", "task_description": goal,
                      "task_type": "1 box" if n_boxes == 1 else f"{n_boxes} boxes"}
        return self._observation(), self.make_info(admissible_actions=ACTIONS, **self._task)

    def _observation(self) -> str:
        return render_grid(self.layout, self.player, self.boxes)

    # -- dynamics ---------------------------------------------------------------------------
    def _step(self, action: str):
        if action not in self._last_info["admissible_actions"]:
            return self._last_observation, 0.0, False, {"invalid_action": True}
        self.player, self.boxes = _move(self.layout, self.player, self.boxes,
                                        self.layout.offset(action))
        won = self.boxes <= self.layout.targets
        return self._observation(), WIN_REWARD if won else 0.0, won, self.make_info(
            admissible_actions=[] if won else ACTIONS, won=won, **self._task)

    # -- expert -----------------------------------------------------------------------------
    def _expert_action(self) -> str:
        """The next move of a shortest solution from the current room.

        The plan is cached and only recomputed when the room leaves it (after some other
        action). When no solution is left (a box stuck in a corner), any move: ``"up"``.
        """
        state = (self.player, self.boxes)
        if state not in self._expert_plan and not self._stuck:
            solution = _shortest_solution(self.layout, self.player, self.boxes)
            # A dead room stays dead whatever happens next: no need to search again.
            self._stuck = solution is None
            self._expert_plan = self._plan_by_state(solution or [])
        return self._expert_plan.get(state, ACTIONS[0])

    def _plan_by_state(self, solution: list[str]) -> dict[tuple[int, frozenset[int]], str]:
        """``{(player, boxes): action}`` along ``solution`` from the current room."""
        plan, player, boxes = {}, self.player, self.boxes
        for action in solution:
            plan[(player, boxes)] = action
            player, boxes = _move(self.layout, player, boxes, self.layout.offset(action))
        return plan
