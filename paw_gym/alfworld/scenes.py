"""ALFRED scene layouts as shipped by the ``alfworld`` package, read into plain dataclasses.

Each ``FloorPlan<N>`` comes with ``-objects.json`` (the object and furniture classes present) and
``-openable.json`` (every interactable receptacle instance, keyed by its ALFRED id such as
``Cabinet|+00.68|+00.50|-02.20`` or ``Sink|-01.90|+00.97|-01.50|SinkBasin``). Receptacle classes
listed in ``-objects.json`` but absent from ``-openable.json`` (coffee machines, stove burners,
toasters, ...) get synthetic instances so every class of the scene can take part in a task.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

#: The three ALFWorld splits, as named by ``AlfredTWEnv`` (``train_eval``).
SPLITS = ("train", "eval_in_distribution", "eval_out_of_distribution")
#: Directory of each split in ALFWorld's official data layout (``$ALFWORLD_DATA/json_2.1.1/``).
SPLIT_DIRS = {"train": "train", "eval_in_distribution": "valid_seen",
              "eval_out_of_distribution": "valid_unseen"}

#: Receptacle classes present in a scene's object list but not in its openable list get this
#: many synthetic instances (a kitchen stove has four burners).
SYNTHETIC_INSTANCES = {"StoveBurner": 4}
#: Classes that can never be picked up or held (lamps are switched on where they stand).
LAMPS = ("DeskLamp", "FloorLamp")
#: Furniture a lamp stands on, in order of preference (the engine needs ``inReceptacle`` for
#: ``use``, and ALFRED's object rules give lamps no receptacle).
LAMP_SURFACES = ("SideTable", "Desk", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand",
                 "CounterTop", "Bed", "ArmChair", "Sofa")


@dataclass(frozen=True)
class Receptacle:
    """One piece of furniture an object can be in or on."""

    id: str
    """ALFRED object id, e.g. ``"Drawer|+00.95|+00.22|-02.20"``."""
    rtype: str
    """Receptacle class, e.g. ``"Drawer"`` or ``"SinkBasin"``."""
    openable: bool
    """Whether it must be opened before putting or taking (fridge, drawer, cabinet, ...)."""


@dataclass(frozen=True)
class Scene:
    """What one ALFRED floor plan offers to a task generator."""

    number: int
    """Floor-plan number (1-30 kitchens, 201-230 living rooms, 301-330 bedrooms, 401-430 baths)."""
    room: str
    """``"Kitchen"``, ``"LivingRoom"``, ``"Bedroom"`` or ``"Bathroom"``."""
    receptacles: tuple[Receptacle, ...]
    """Static receptacles (no movable ones such as bowls: those are objects here)."""
    object_types: tuple[str, ...]
    """Classes of pickable objects present (mugs, apples, books, ...), sorted."""
    lamps: tuple[str, ...]
    """Lamp classes present (``DeskLamp`` / ``FloorLamp``)."""

    def receptacles_of(self, rtype: str) -> list[Receptacle]:
        return [r for r in self.receptacles if r.rtype == rtype]

    @property
    def receptacle_types(self) -> set[str]:
        return {r.rtype for r in self.receptacles}


def _constants():
    import alfworld.gen.constants as constants

    return constants


def layouts_dir() -> Path:
    import alfworld.gen

    return Path(alfworld.gen.__file__).parent / "layouts"


def room_of(number: int) -> str:
    for room, numbers in _constants().SCENE_TYPE.items():
        if number in numbers:
            return room
    raise ValueError(f"floor plan {number} is not an ALFRED scene number")


def scene_numbers(split: str) -> list[int]:
    """Floor plans of a split: ALFRED's train scenes for ``train`` and ``eval_in_distribution``
    (unseen tasks in seen rooms), its held-out test scenes for ``eval_out_of_distribution``."""
    constants = _constants()
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not one of {SPLITS}")
    numbers = constants.TEST_SCENE_NUMBERS if split == "eval_out_of_distribution" \
        else constants.TRAIN_SCENE_NUMBERS
    available = {int(p.name[len("FloorPlan"):-len("-objects.json")])
                 for p in layouts_dir().glob("FloorPlan*-objects.json")}
    return sorted(n for n in numbers if n in available)


def pickable_types() -> set[str]:
    """Object classes that ALFRED's rules let some receptacle hold (so they can be picked up)."""
    rules = _constants().VAL_RECEPTACLE_OBJECTS
    return {o for objects in rules.values() for o in objects if not o.endswith("Sliced")}


@lru_cache(maxsize=None)
def load_scene(number: int) -> Scene:
    constants = _constants()
    folder = layouts_dir()
    present = json.loads((folder / f"FloorPlan{number}-objects.json").read_text())
    instances = json.loads((folder / f"FloorPlan{number}-openable.json").read_text())
    static = set(constants.RECEPTACLES) - set(constants.MOVABLE_RECEPTACLES)
    receptacles = []
    for object_id in sorted(instances):
        parts = object_id.split("|")
        rtype = parts[-1] if len(parts) > 4 else parts[0]  # "Sink|x|y|z|SinkBasin"
        if rtype in static:
            receptacles.append(Receptacle(object_id, rtype, rtype in constants.OPENABLE_CLASS_SET))
    have = {r.rtype for r in receptacles}
    for k, rtype in enumerate(sorted(set(present) & static - have)):
        for i in range(SYNTHETIC_INSTANCES.get(rtype, 1)):
            synthetic_id = f"{rtype}|+{k:02d}.{i:02d}|+00.90|+09.{k:02d}"
            if rtype.endswith("Basin"):  # ALFRED names basins "Sink|x|y|z|SinkBasin"
                synthetic_id = f"{rtype[:-len('Basin')]}|+{k:02d}.{i:02d}|+00.90|+09.{k:02d}|{rtype}"
            receptacles.append(Receptacle(synthetic_id, rtype, rtype in constants.OPENABLE_CLASS_SET))
    pickable = pickable_types()
    return Scene(
        number=number,
        room=room_of(number),
        receptacles=tuple(receptacles),
        object_types=tuple(sorted(set(present) & pickable)),
        lamps=tuple(sorted(set(present) & set(LAMPS))),
    )
