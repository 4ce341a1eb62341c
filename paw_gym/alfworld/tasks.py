"""Sampling ALFWorld tasks in a real scene: goal, object placements and a plan that solves it.

A :class:`TaskSpec` says which objects exist and where they start, which goal the game has (the
``pddl_params`` of ALFRED's ``traj_data.json``), and a solution ``plan`` written from the
generator's own placements (no planner call). Names in the plan are ALFRED ids; they become the
game's display names (``mug 2``) only once the game is built (see :mod:`.pddl`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from paw_gym.alfworld.scenes import LAMP_SURFACES, Receptacle, Scene

#: ALFWorld's six task types, in the order of its ``TASK_TYPES`` table.
TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
#: Receptacle class that does the state change of a task type, and the action's verb.
TOOLS = {
    "pick_clean_then_place_in_recep": ("SinkBasin", "clean", "Cleanable"),
    "pick_heat_then_place_in_recep": ("Microwave", "heat", "Heatable"),
    "pick_cool_then_place_in_recep": ("Fridge", "cool", "Coolable"),
}
#: Most instances of one object class in a scene (ALFRED's ``MAX_NUM_OF_OBJ_INSTANCES``).
MAX_INSTANCES = 3
#: Most instances of one distractor class.
MAX_DISTRACTORS = 2


@dataclass(frozen=True)
class PlacedObject:
    id: str
    """ALFRED-style id, e.g. ``"Mug|+01.21|+00.95|-00.40"``."""
    otype: str
    """Object class, e.g. ``"Mug"``."""
    receptacle: str
    """Id of the receptacle it starts in."""


@dataclass
class TaskSpec:
    """One generated game before it is written as PDDL."""

    scene: Scene
    task_type: str
    object_target: str
    parent_target: str = ""
    toggle_target: str = ""
    objects: list[PlacedObject] = field(default_factory=list)
    """Every pickable object and lamp of the game with its starting receptacle."""
    plan: list[tuple[str, ...]] = field(default_factory=list)
    """Solution steps over ids: ``("goto", r)``, ``("open", r)``, ``("take", o, r)``,
    ``("move", o, r)``, ``("clean"|"heat"|"cool", o, r)``, ``("use", lamp)``."""

    @property
    def pddl_params(self) -> dict:
        return {"object_target": self.object_target, "parent_target": self.parent_target,
                "toggle_target": self.toggle_target, "mrecep_target": "", "object_sliced": False}


class NoTaskHere(Exception):
    """The scene cannot host a winnable task of the asked type."""


def _rules():
    import alfworld.gen.constants as constants

    return constants


def holders(scene: Scene, otype: str) -> list[Receptacle]:
    """Receptacles of ``scene`` that ALFRED's object rules let hold ``otype``."""
    rules = _rules().VAL_RECEPTACLE_OBJECTS
    return [r for r in scene.receptacles if otype in rules.get(r.rtype, ())]


def _choice(rng: np.random.Generator, items):
    items = list(items)
    if not items:
        raise NoTaskHere("nothing to choose from")
    return items[int(rng.integers(len(items)))]


def _object_id(otype: str, rng: np.random.Generator, taken: set[str]) -> str:
    while True:
        x, y, z = rng.uniform(-3, 3), rng.uniform(0, 2), rng.uniform(-3, 3)
        object_id = f"{otype}|{x:+06.2f}|{y:+06.2f}|{z:+06.2f}"
        if object_id not in taken:
            taken.add(object_id)
            return object_id


def _targets(scene: Scene, task_type: str, rng: np.random.Generator) -> tuple[str, str, str]:
    """``(object_target, parent_target, toggle_target)`` that the scene can satisfy."""
    constants = _rules()
    if task_type not in TASK_TYPES:
        raise ValueError(f"task_type={task_type!r} is not one of {TASK_TYPES}")
    if task_type == "look_at_obj_in_light":
        if not scene.lamps or not any(scene.receptacles_of(s) for s in LAMP_SURFACES):
            raise NoTaskHere("no lamp on a surface")
        candidates = [o for o in scene.object_types if holders(scene, o)]
        return _choice(rng, candidates), "", _choice(rng, scene.lamps)
    tool = TOOLS.get(task_type)
    pairs = []
    for otype in scene.object_types:
        if tool and (otype not in constants.VAL_ACTION_OBJECTS[tool[2]]
                     or not scene.receptacles_of(tool[0])):
            continue
        places = holders(scene, otype)
        for rtype in sorted({r.rtype for r in places}):
            if tool and rtype == tool[0]:
                continue
            # The target must be able to start somewhere that is not a goal receptacle.
            if any(r.rtype != rtype for r in places):
                pairs.append((otype, rtype))
    otype, rtype = _choice(rng, pairs)
    return otype, rtype, ""


def sample_task(scene: Scene, task_type: str, rng: np.random.Generator) -> TaskSpec:
    """A random, winnable task of ``task_type`` in ``scene`` (raises :class:`NoTaskHere`)."""
    otype, rtype, toggle = _targets(scene, task_type, rng)
    task = TaskSpec(scene, task_type, otype, rtype, toggle)
    taken: set[str] = set()
    for cls in scene.object_types:
        places = [r for r in holders(scene, cls) if not (cls == otype and r.rtype == rtype)]
        if not places:
            continue
        if cls == otype:  # the target: 1-3 instances (2-3 for pick_two)
            count = int(rng.integers(2 if task_type == "pick_two_obj_and_place" else 1, MAX_INSTANCES + 1))
        else:  # distractors: 1-2 instances keep dense kitchens quick to load
            count = int(rng.integers(1, MAX_DISTRACTORS + 1))
        for _ in range(count):
            task.objects.append(PlacedObject(_object_id(cls, rng, taken), cls, _choice(rng, places).id))
    if toggle:
        surface = next(s for s in LAMP_SURFACES if scene.receptacles_of(s))
        task.objects.append(PlacedObject(_object_id(toggle, rng, taken), toggle,
                                         _choice(rng, scene.receptacles_of(surface)).id))
    task.plan = _plan(task, rng)
    return task


def _plan(task: TaskSpec, rng: np.random.Generator) -> list[tuple[str, ...]]:
    scene = task.scene
    by_id = {r.id: r for r in scene.receptacles}
    opened: set[str] = set()
    plan: list[tuple[str, ...]] = []
    here = [""]

    def go(receptacle_id: str, open_it: bool = True) -> None:
        if receptacle_id != here[0]:  # the engine offers no "go to" the current place
            plan.append(("goto", receptacle_id))
            here[0] = receptacle_id
        if open_it and by_id[receptacle_id].openable and receptacle_id not in opened:
            plan.append(("open", receptacle_id))
            opened.add(receptacle_id)

    targets = [o for o in task.objects if o.otype == task.object_target]
    count = 2 if task.task_type == "pick_two_obj_and_place" else 1
    chosen = [targets[i] for i in sorted(rng.permutation(len(targets))[:count])]
    destination = _choice(rng, scene.receptacles_of(task.parent_target)).id if task.parent_target else ""
    for obj in chosen:
        go(obj.receptacle)
        plan.append(("take", obj.id, obj.receptacle))
        if task.task_type in TOOLS:
            tool_type, verb, _ = TOOLS[task.task_type]
            tool = scene.receptacles_of(tool_type)[0].id
            go(tool, open_it=False)
            plan.append((verb, obj.id, tool))
        if task.toggle_target:
            lamp = next(o for o in task.objects if o.otype == task.toggle_target)
            go(lamp.receptacle, open_it=False)
            plan.append(("use", lamp.id))
        else:
            go(destination)
            plan.append(("move", obj.id, destination))
    return plan
