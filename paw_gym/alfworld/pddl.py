"""Writing a :class:`~.tasks.TaskSpec` in ALFWorld's own game format.

``game.tw-pddl`` is JSON with ``pddl_domain`` (alfworld's ``alfred.pddl``), ``grammar`` (its
``alfred.twl2`` with the task sentence filled in), ``pddl_problem``, ``solvable`` and
``walkthrough``; ``traj_data.json`` carries ``task_type`` and ``pddl_params`` (what ALFWorld's
handcoded expert reads).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from paw_gym.alfworld.tasks import TaskSpec

#: Type constants the domain's actions name (they must be declared by every problem).
DOMAIN_OTYPES = ("Knife", "ButterKnife")
DOMAIN_RTYPES = ("SinkBasin", "Microwave", "Fridge")
#: Placeholder for the task sentence in alfworld's grammar.
GOAL_PLACEHOLDER = "UNKNOWN GOAL"
_ESCAPES = {"-": "_minus_", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}


def pddl_name(alfred_id: str) -> str:
    """An ALFRED id as a PDDL symbol (alfworld's escaping: ``|`` -> ``_bar_`` ...)."""
    return "".join(_ESCAPES.get(ch, ch) for ch in alfred_id)


@lru_cache(maxsize=None)
def domain_text() -> str:
    import alfworld

    return (Path(alfworld.__file__).parent / "data" / "alfred.pddl").read_text()


@lru_cache(maxsize=None)
def grammar_template() -> str:
    import alfworld

    return (Path(alfworld.__file__).parent / "data" / "alfred.twl2").read_text()


def display_names(alfred_ids: list[str]) -> dict[str, str]:
    """``{alfred id: name shown in the game}`` (``"Mug|..."`` -> ``"mug 2"``), as the engine's
    demangler numbers them (the translator lower-cases every symbol first)."""
    from types import SimpleNamespace

    from alfworld.agents.utils.misc import Demangler

    symbols = {alfred_id: pddl_name(alfred_id).lower() for alfred_id in alfred_ids}
    infos = {s: SimpleNamespace(id=s) for s in symbols.values()}
    demangler = Demangler(game_infos=infos)
    return {alfred_id: demangler.demangle_alfred_name(s).strip() for alfred_id, s in symbols.items()}


def task_description(task: TaskSpec, rng: np.random.Generator) -> str:
    """A sentence from ALFRED's goal templates, e.g. ``"put a clean mug in coffeemachine"``."""
    import alfworld.gen.goal_library as goals

    templates = goals.gdict[task.task_type]["templates"]
    template = templates[int(rng.integers(len(templates)))]
    return template.format(obj=task.object_target.lower(), recep=task.parent_target.lower(),
                           toggle=task.toggle_target.lower(), mrecep="")


def goal_pddl(task: TaskSpec) -> str:
    """The goal (and the problem's closing parenthesis) from ALFRED's goal library."""
    import alfworld.gen.goal_library as goals

    text = goals.gdict[task.task_type]["pddl"].replace("#", "-")
    return text.format(obj=task.object_target, recep=task.parent_target,
                       toggle=task.toggle_target, mrecep="")


def problem_text(task: TaskSpec, name: str) -> str:
    """The PDDL problem: objects, receptacles, one location per receptacle plus the agent's
    starting spot, ALFRED's ``canContain`` rules for the classes present, and the goal."""
    import alfworld.gen.constants as constants

    scene = task.scene
    rules = constants.VAL_RECEPTACLE_OBJECTS
    action_sets = constants.VAL_ACTION_OBJECTS
    movable = set(constants.MOVABLE_RECEPTACLES)
    otypes = sorted({o.otype for o in task.objects} | set(DOMAIN_OTYPES) | {task.object_target})
    rtypes = sorted(scene.receptacle_types | set(DOMAIN_RTYPES))
    locations = {r.id: f"loc|{k + 1}" for k, r in enumerate(scene.receptacles)}
    start = "loc|0"

    objects = ["agent1 - agent"]
    objects += [f"{t}Type - otype" for t in otypes]
    objects += [f"{t}Type - rtype" for t in rtypes]
    objects += [f"{pddl_name(o.id)} - object" for o in task.objects]
    objects += [f"{pddl_name(r.id)} - receptacle" for r in scene.receptacles]
    objects += [f"{pddl_name(loc)} - location" for loc in [start, *locations.values()]]

    init = ["(= (total-cost) 0)", f"(atLocation agent1 {pddl_name(start)})"]
    for r in scene.receptacles:
        symbol = pddl_name(r.id)
        init.append(f"(receptacleType {symbol} {r.rtype}Type)")
        init.append(f"(receptacleAtLocation {symbol} {pddl_name(locations[r.id])})")
        if r.openable:
            init.append(f"(openable {symbol})")
    for o in task.objects:
        symbol = pddl_name(o.id)
        init.append(f"(objectType {symbol} {o.otype}Type)")
        init.append(f"(inReceptacle {symbol} {pddl_name(o.receptacle)})")
        init.append(f"(objectAtLocation {symbol} {pddl_name(locations[o.receptacle])})")
        if o.otype == task.toggle_target:
            init.append(f"(toggleable {symbol})")
            continue
        init.append(f"(pickupable {symbol})")
        if o.otype in movable:
            init.append(f"(isReceptacleObject {symbol})")
        for flag, action_set in (("cleanable", "Cleanable"), ("heatable", "Heatable"),
                                 ("coolable", "Coolable"), ("sliceable", "Sliceable")):
            if o.otype in action_sets[action_set]:
                init.append(f"({flag} {symbol})")
    for rtype in rtypes:
        for otype in otypes:
            if otype in rules.get(rtype, ()):
                init.append(f"(canContain {rtype}Type {otype}Type)")

    lines = [f"(define (problem {name})", "(:domain alfred)", "(:objects"]
    lines += [f"    {line}" for line in objects]
    lines += [")", "(:init"]
    lines += [f"    {line}" for line in init]
    lines += [")", goal_pddl(task).strip()]
    return "\n".join(lines) + "\n"


def walkthrough(task: TaskSpec) -> list[str]:
    """The task's plan as game commands (``"take mug 2 from countertop 1"``)."""
    ids = [o.id for o in task.objects] + [r.id for r in task.scene.receptacles]
    name = display_names(ids)
    commands = []
    for step in task.plan:
        verb, *args = step
        if verb == "goto":
            commands.append(f"go to {name[args[0]]}")
        elif verb == "open":
            commands.append(f"open {name[args[0]]}")
        elif verb == "take":
            commands.append(f"take {name[args[0]]} from {name[args[1]]}")
        elif verb == "move":
            commands.append(f"move {name[args[0]]} to {name[args[1]]}")
        elif verb in ("clean", "heat", "cool"):
            commands.append(f"{verb} {name[args[0]]} with {name[args[1]]}")
        elif verb == "use":
            commands.append(f"use {name[args[0]]}")
        else:
            raise ValueError(f"unknown plan step {step!r}")
    return commands


def game_json(task: TaskSpec, name: str, description: str, solvable: bool) -> dict:
    return {
        "pddl_domain": domain_text(),
        "grammar": grammar_template().replace(GOAL_PLACEHOLDER, description),
        "pddl_problem": problem_text(task, name),
        "solvable": solvable,
        "walkthrough": walkthrough(task),
    }


def traj_json(task: TaskSpec, description: str, trial: str) -> dict:
    return {
        "task_type": task.task_type,
        "pddl_params": task.pddl_params,
        "scene": {"floor_plan": f"FloorPlan{task.scene.number}", "scene_num": task.scene.number},
        "task_id": trial,
        "template_task_desc": description,
    }
