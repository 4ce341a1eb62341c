"""Registering text environments with Gymnasium.

``import paw_gym`` registers the built-in ids listed in :data:`BUILTIN_ENVS`. Custom envs go
through :func:`register_text_env`, which is ``gymnasium.register`` plus a check that the id is
namespaced and not taken, and a one-line description for ``paw-gym envs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium as gym


@dataclass(frozen=True)
class EnvSpec:
    """What ``import paw_gym`` registers for one built-in environment."""

    id: str
    """Gymnasium id, e.g. ``"PaW/WebShop-v0"``."""
    entry_point: str
    """``"module:Class"`` import path, imported lazily at ``gym.make`` time."""
    description: str
    """One line for ``paw-gym envs``."""
    max_episode_steps: int | None = None
    """Step limit applied by ``gym.make`` through ``TimeLimit`` (paper setting)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Default constructor arguments."""


#: Built-in environments. Only implemented envs belong here (one line each).
BUILTIN_ENVS: list[EnvSpec] = [
    EnvSpec(id="PaW/SearchQA-v0", entry_point="paw_gym.searchqa.env:SearchQAEnv",
            description="search-augmented QA (Search-R1 style <search>/<answer>), BM25/dense/HTTP retriever",
            max_episode_steps=4),
    EnvSpec(id="PaW/WebShop-v0", entry_point="paw_gym.webshop.env:WebShopEnv",
            description="WebShop shopping (search/click, BM25, WebShop reward); embedded or official catalog",
            max_episode_steps=15),
    EnvSpec(id="PaW/ALFWorld-v0", entry_point="paw_gym.alfworld.env:ALFWorldEnv",
            description="ALFWorld household tasks on the TextWorld/PDDL engine; official data or generated games",
            max_episode_steps=50),
    EnvSpec(id="PaW/Shelf-v0", entry_point="paw_gym.shelf:ShelfEnv",
            description="buy the named item from a 3-5 item shelf (take, pay / put back); held-out target items",
            max_episode_steps=6),
    EnvSpec(id="PaW/FrozenLake-v0", entry_point="paw_gym.toytext.gridworlds:FrozenLakeText",
            description="Gymnasium's FrozenLake, a random map per reset (held-out maps; slippery option)",
            max_episode_steps=20),
    EnvSpec(id="PaW/CliffWalking-v0", entry_point="paw_gym.toytext.gridworlds:CliffWalkingText",
            description="Gymnasium's CliffWalking on random grids with extra cliff cells (held-out grids)",
            max_episode_steps=30),
    EnvSpec(id="PaW/Taxi-v0", entry_point="paw_gym.toytext.gridworlds:TaxiText",
            description="Gymnasium's Taxi: pick up and drop off a passenger (held-out routes)",
            max_episode_steps=30),
    EnvSpec(id="PaW/Sokoban-v0", entry_point="paw_gym.toytext.sokoban:SokobanEnv",
            description="Sokoban rooms with 1-2 boxes, solvable by construction (held-out rooms)",
            max_episode_steps=30),
    EnvSpec(id="PaW/Blackjack-v0", entry_point="paw_gym.toytext.blackjack:BlackjackText",
            description="Gymnasium's Blackjack (stochastic; the expert maximises the win probability)",
            max_episode_steps=10),
    EnvSpec(id="PaW/Text-v0", entry_point="paw_gym.toytext.adapter:make_text_env",
            description="any Gymnasium env with discrete actions as text: gym.make('PaW/Text-v0', env_id=...)"),
]

#: The client of an env served by ``paw-gym serve-env``: ``gym.make(REMOTE_ENV_ID, url=...)``.
#: Registered with the built-ins but not listed among the text envs (``paw-gym envs``, the
#: envs other commands offer): it is no env of its own, it steps the served one; the step limit
#: is the served env's, applied by the server.
REMOTE_ENV_ID = "PaW/Remote-v0"

#: id -> one-line description, for every env registered through this module.
DESCRIPTIONS: dict[str, str] = {}


def register_text_env(
    id: str,
    entry_point: str | Callable[..., gym.Env],
    *,
    description: str = "",
    max_episode_steps: int | None = None,
    override: bool = False,
    **kwargs: Any,
) -> None:
    """Make a text env ``gym.make``-able.

    Args:
        id: a Gymnasium id such as ``"MyOrg/Shop-v0"``.
        entry_point: the env class (or factory), or its ``"module:Class"`` path.
        description: one line shown by ``paw-gym envs``.
        max_episode_steps: step limit (``gym.make`` wraps the env in ``TimeLimit``).
        override: replace an existing registration with the same id instead of failing.
        **kwargs: default constructor arguments (``gym.make(id, **overrides)`` still wins).

    Example:
        >>> import gymnasium as gym, paw_gym
        >>> paw_gym.register_text_env("Demo/Guess-v0", "tests.envs:GuessNumberEnv",
        ...                           max_episode_steps=10)          # doctest: +SKIP
        >>> env = gym.make("Demo/Guess-v0")                           # doctest: +SKIP
    """
    if not isinstance(id, str) or not id.strip():
        raise ValueError(f"env id must be a non-empty string, got {id!r}")
    if id in gym.registry and not override:
        raise ValueError(f"env id {id!r} is already registered; pass override=True to replace it")
    if isinstance(entry_point, str) and ":" not in entry_point:
        raise ValueError(f"entry_point {entry_point!r} must look like 'package.module:ClassName'")
    if id in gym.registry:
        del gym.registry[id]
    gym.register(id=id, entry_point=entry_point, max_episode_steps=max_episode_steps,
                 disable_env_checker=True, kwargs=kwargs)
    DESCRIPTIONS[id] = description or _describe(entry_point)


def _describe(entry_point: str | Callable[..., Any]) -> str:
    if isinstance(entry_point, str):
        return entry_point
    doc = (entry_point.__doc__ or "").strip().splitlines()
    return doc[0] if doc else getattr(entry_point, "__name__", repr(entry_point))


def register_builtin_envs() -> None:
    """Register :data:`BUILTIN_ENVS` and :data:`REMOTE_ENV_ID` (idempotent)."""
    for spec in BUILTIN_ENVS:
        if spec.id not in gym.registry:
            register_text_env(spec.id, spec.entry_point, description=spec.description,
                              max_episode_steps=spec.max_episode_steps, **spec.kwargs)
    if REMOTE_ENV_ID not in gym.registry:
        gym.register(id=REMOTE_ENV_ID, entry_point="paw_gym.remote.client:RemoteEnv",
                     disable_env_checker=True)


def list_text_envs() -> dict[str, str]:
    """``{id: description}`` of the PaW built-ins and every env added by ``register_text_env``."""
    return {env_id: DESCRIPTIONS[env_id] for env_id in sorted(DESCRIPTIONS) if env_id in gym.registry}


def env_creator(env_id: str) -> Callable[..., gym.Env]:
    """The class or function a registered id builds its env with, loaded without building one
    (to read its signature or class attributes)."""
    entry_point = gym.spec(env_id).entry_point
    if isinstance(entry_point, str):
        entry_point = gym.envs.registration.load_env_creator(entry_point)
    return entry_point


def has_expert(env_id: str) -> bool:
    """Whether ``env_id``'s env has a scripted expert (``expert_action()``), read from its
    registered class without building it (True where a factory function hides the class)."""
    from paw_gym.core import TextEnv

    creator = env_creator(env_id)
    if not isinstance(creator, type):
        return True
    if issubclass(creator, TextEnv):
        return creator._expert_action is not TextEnv._expert_action
    return callable(getattr(creator, "expert_action", None))


def check_env_id(env_id: str) -> None:
    """Raise ``ValueError`` for an id nobody registered, naming the nearest registered text env
    and listing them all."""
    import difflib

    if env_id not in gym.registry:  # (importing this module registered the built-in ids)
        text_envs = list(list_text_envs())
        nearest = difflib.get_close_matches(env_id, text_envs, n=1)
        hint = f"did you mean {nearest[0]}? " if nearest else ""
        raise ValueError(f"unknown env id {env_id!r}; {hint}registered text envs: "
                         f"{', '.join(text_envs)} (`paw-gym envs` describes them)")
    entry_point = gym.spec(env_id).entry_point
    if isinstance(entry_point, str) and entry_point.startswith("gymnasium.envs."):
        raise ValueError(f"{env_id!r} is one of Gymnasium's own envs, whose observations are "
                         f"not text; one with discrete actions plays as text through "
                         f"PaW/Text-v0 (env_kwargs env_id={env_id}), or see `paw-gym envs`")


def env_parameters(env_id: str) -> dict[str, Any] | None:
    """``{name: inspect.Parameter}`` of the constructor of a registered id, annotations
    resolved where they can be (a string one that cannot stays a string); None when it takes
    ``**kwargs`` (any name may be right)."""
    import inspect

    creator = env_creator(env_id)
    try:
        signature = inspect.signature(creator, eval_str=True)
    except (NameError, TypeError, SyntaxError, AttributeError):
        signature = inspect.signature(creator)
    parameters = signature.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return {p.name: p for p in parameters if p.name not in ("self", "render_mode")
            and p.kind is not inspect.Parameter.VAR_POSITIONAL}


def check_env_settings(env_id: str, env_kwargs: dict[str, Any] | None = None) -> None:
    """Raise ``ValueError`` for an unknown env id, for ``env_kwargs`` keys its constructor
    does not take, or for an argument it needs that neither they nor the registration give,
    without building the env (it can be expensive: a catalog, a game set). Their values are
    checked against the constructor's annotations by ``training.preflight.check_env``."""
    import inspect

    check_env_id(env_id)
    parameters = env_parameters(env_id)
    if parameters is None:
        return
    accepted = list(parameters)
    unknown = sorted(set(env_kwargs or {}) - set(accepted))
    if unknown:
        raise ValueError(f"env_kwargs {unknown} are not arguments of {env_id}; it accepts "
                         f"{accepted}")
    given = {**(gym.spec(env_id).kwargs or {}), **(env_kwargs or {})}
    missing = [name for name, p in parameters.items() if p.default is inspect.Parameter.empty
               and name not in given]
    if missing:
        raise ValueError(f"{env_id} needs env_kwargs {', '.join(missing)} (e.g. --env_kwargs "
                         f"{missing[0]}=...); it accepts {accepted}")
