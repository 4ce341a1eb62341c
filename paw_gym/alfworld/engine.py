"""The ALFWorld text engine (TextWorld's PDDL engine + fast-downward), made fast to reset.

This plays ALFWorld games exactly as ``textworld.envs.PddlEnv`` wrapped by alfworld's demangler
does (same state, same commands, same text), with three differences that only concern speed
and robustness:

* What is constant per game is computed once and kept in an LRU cache: the parsed grammar,
  the PDDL -> SAS translation and the initial facts. A reset then only reloads the SAS task into
  the planner library and copies the initial facts (the engine's own reset translates the
  problem twice, ~0.3-1 s).
* The PDDL -> SAS translation, ~90 % of loading a game, is also kept on disk
  (``$PAW_GYM_CACHE/alfworld/sas``), so a game another process or an earlier run has loaded
  loads without translating again.
* The text of a command depends only on its grounded action (``go to cabinet 3``), so it is
  derived through the grammar once per action instead of once per admissible action per step.
* ``fast_downward.pddl2sas`` overwrites ``sys.argv``; it is restored here.

The translation optimised for replanning is skipped: nothing here calls the planner.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import sys
import tempfile
import zlib
from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from paw_gym.cache import alfworld_cache
from run_files.data_files import DataFileError

#: Admissible commands that are never offered (the game's own help text is not an action).
HIDDEN_COMMANDS = frozenset({"help"})
#: What the engine answers to a command it cannot execute.
NOTHING_HAPPENS = "Nothing happens."


@dataclass
class LoadedGame:
    """Everything about one game that does not change while it is played."""

    path: str
    data: dict
    logic: Any
    """``textworld.envs.pddl.logic.GameLogic`` (parsed domain and grammar)."""
    task: Any
    """fast-downward's translated PDDL task."""
    sas: bytes
    pristine: Any
    """``PddlState`` right after loading, copied at every reset."""
    entity_infos: dict
    """symbol -> ``EntityInfo`` with the display name (``mug 2``)."""
    intro: str = ""
    """Text at the start of the game (room overview and task)."""
    commands: dict = field(default_factory=dict)
    """grounded action key -> command text, filled as actions become applicable."""


def read_game(path: str | Path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as error:
        message = f"cannot read ALFWorld game {str(path)!r}: {error}"
        raise DataFileError(path, 0, message, message=message) from error
    missing = {"pddl_domain", "grammar", "pddl_problem"} - set(data) if isinstance(data, dict) \
        else {"an object"}
    if missing:
        message = f"ALFWorld game {str(path)!r} lacks {sorted(missing)}"
        raise DataFileError(path, 0, message, message=message)
    return data


_GOAL_PLACEHOLDER = "UNKNOWN GOAL"
_TASK_PREFIX = "Your task is to: "
#: Characters that would make a task sentence a grammar expression rather than plain text.
_GRAMMAR_SYNTAX = re.compile(r'[#{}\[\]|"\\]')


@lru_cache(maxsize=None)
def _grammar_template() -> str:
    import alfworld

    return (Path(alfworld.__file__).parent / "data" / "alfred.twl2").read_text()


def _task_sentence_of(grammar: str) -> str | None:
    """The plain task sentence filled into an ALFWorld grammar, or None."""
    match = re.search(re.escape(_TASK_PREFIX) + r'(.*?)\."', grammar)
    if match is None or _GRAMMAR_SYNTAX.search(match.group(1)):
        return None
    return match.group(1)


def is_stock_grammar(grammar: str) -> bool:
    """Whether ``grammar`` is ALFWorld's own ``alfred.twl2`` with a plain task sentence filled
    in. TextWorld evaluates the expressions of a grammar as Python, so any other grammar in a
    game file is code from data and is refused."""
    sentence = _task_sentence_of(grammar)
    return sentence is not None and \
        _grammar_template().replace(_GOAL_PLACEHOLDER, sentence) == grammar


#: Planner library copies no longer used by a closed engine. Each engine needs its own copy
#: (the library keeps one global task), and unloading a copy (``dlclose``) makes the next
#: ``load_lib`` crash, so closed engines hand their copy to the next engine instead.
_FREE_LIBRARIES: list = []


def _acquire_library():
    import fast_downward

    return _FREE_LIBRARIES.pop() if _FREE_LIBRARIES else fast_downward.load_lib()


def _translate(domain: str, problem: str):
    """``fast_downward.pddl2sas`` without its side effect on ``sys.argv``."""
    import fast_downward

    saved = list(sys.argv)
    try:
        return fast_downward.pddl2sas(domain, problem, optimize=False)
    finally:
        sys.argv[:] = saved


def _parse_task(domain: str, problem: str):
    """The parsed, normalised PDDL task that ``pddl2sas`` also returns (a few ms; the SAS
    translation it skips is ~20x that)."""
    import io
    from contextlib import redirect_stdout

    saved = list(sys.argv)
    sys.argv = ["translate.py", "domain", "task"]  # what fast-downward's options module parses
    try:
        from fast_downward.translate import normalize
        from fast_downward.translate.pddl_parser import lisp_parser, parsing_functions

        with redirect_stdout(io.StringIO()):
            task = parsing_functions.parse_task(lisp_parser.parse_nested_list(domain.split("\n")),
                                                lisp_parser.parse_nested_list(problem.split("\n")))
            normalize.normalize(task)
        return task
    finally:
        sys.argv[:] = saved


@lru_cache(maxsize=None)
def _translator_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fast-downward-textworld")
    except PackageNotFoundError:
        return "unknown"


def translation_cache_dir() -> Path:
    """Where translated tasks are kept (``$PAW_GYM_CACHE/alfworld/sas``, read at each call)."""
    return alfworld_cache() / "sas"


def _check_cache_dir(folder: Path) -> None:
    """The translation cache must be this user's alone (mode 0700): entries there decide how a
    game behaves, so a folder others can write is refused."""
    info = folder.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(
            f"ALFWorld translation cache {str(folder)!r} is owned by uid {info.st_uid} with mode "
            f"{info.st_mode & 0o777:o}; it must be yours with mode 700 (chmod 700 it, or point "
            "$PAW_GYM_CACHE at a folder of your own)")


def _translate_cached(domain: str, problem: str):
    """:func:`_translate` through an on-disk cache keyed by the PDDL text and the translator
    version. An entry is the SAS text only (zlib-compressed UTF-8: plain data, nothing in it
    runs); the PDDL task is parsed again on load. A missing, unreadable or corrupt entry is
    translated again and rewritten; entries are written to a temporary file and renamed, so
    parallel workers never read half a file."""
    key = hashlib.sha256("\0".join((_translator_version(), domain, problem)).encode()).hexdigest()
    folder = translation_cache_dir()
    path = folder / f"{key}.sas.z"
    if folder.is_dir():
        _check_cache_dir(folder)
        try:
            sas_text = zlib.decompress(path.read_bytes()).decode("utf-8")
            if sas_text.startswith("begin_version"):
                return _parse_task(domain, problem), sas_text
            path.unlink(missing_ok=True)  # not a SAS task: a cache miss
        except FileNotFoundError:
            pass
        except (OSError, zlib.error, UnicodeDecodeError):  # a damaged entry is a cache miss
            path.unlink(missing_ok=True)
    translated = _translate(domain, problem)
    temporary = None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        # zlib level 1: a few kB per game, well under a millisecond to decompress
        data = zlib.compress(translated[1].encode("utf-8"), 1)
        with tempfile.NamedTemporaryFile(dir=folder, suffix=".tmp", delete=False) as handle:
            temporary = Path(handle.name)
            handle.write(data)
        os.replace(temporary, path)
    except OSError:  # a read-only or full cache directory only costs the next load a translation
        if temporary is not None:
            temporary.unlink(missing_ok=True)
    return translated


@lru_cache(maxsize=None)
def _template_variables(template: str) -> frozenset[str]:
    """Placeholders a command template reads: ``{r}``, ``{r.name ...}``, ``(lend:location)``.

    The text of ``go to [{r.name | receptacleatlocation(r:receptacle, lend:location)}]`` does
    not depend on where the agent stands (``lstart``), so it is cached per ``(r, lend)`` only.
    """
    return frozenset(re.findall(r"\{\s*(\w+)", template)) | frozenset(re.findall(r"(\w+):\w+", template))


class _Shared(dict):
    """A dict the grammar only reads: its deep copies (one per symbol) share it."""

    def __deepcopy__(self, memo):
        return self


class _SharedList(list):
    def __deepcopy__(self, memo):
        return self


class _Bindings(dict):
    """Variable bindings: the grammar adds keys to its copies but never changes the (immutable)
    values, so a shallow copy is as good as the deep copy it asks for, at a fraction of the cost."""

    def __deepcopy__(self, memo):
        return _Bindings(self)


@lru_cache(maxsize=None)
def _shared_state_class():
    from textworld.envs.pddl.logic import PddlState

    class SharedPddlState(PddlState):
        """The engine's state; text generation only reads it, so its deep copies share it."""

        def __deepcopy__(self, memo):
            return self

    return SharedPddlState


def _copy_state(state):
    """A fresh ``PddlState`` with the facts of ``state`` (sharing its immutable parts)."""
    clone = copy.copy(state)
    clone._facts = defaultdict(set, {name: set(facts) for name, facts in state._facts.items()})
    clone._vars_by_name = dict(state._vars_by_name)
    clone._vars_by_type = defaultdict(set, {t: set(v) for t, v in state._vars_by_type.items()})
    clone._var_counts = Counter(state._var_counts)
    return clone


class ALFWorldEngine:
    """Plays ALFWorld ``game.tw-pddl`` files, one at a time, with one planner library.

    Example:
        >>> engine = ALFWorldEngine()                                  # doctest: +SKIP
        >>> feedback = engine.reset("json_2.1.1/train/.../game.tw-pddl")  # doctest: +SKIP
        >>> feedback, valid = engine.step(engine.admissible_commands[0])  # doctest: +SKIP
        >>> engine.won                                                # doctest: +SKIP
    """

    def __init__(self, cache_size: int = 64):
        if cache_size < 1:
            raise ValueError(f"cache_size={cache_size} must be at least 1")
        self.cache_size = cache_size
        self._lib = _acquire_library()
        self._games: OrderedDict[str, LoadedGame] = OrderedDict()
        self._logics: OrderedDict[str, Any] = OrderedDict()
        self.game: LoadedGame | None = None
        self.state = None
        self._actions: list = []
        self.admissible_commands: list[str] = []
        self._command_index: dict[str, int] = {}

    # -- loading ------------------------------------------------------------------------------
    def load(self, path: str | Path) -> LoadedGame:
        """The parsed game at ``path`` (from the cache when it is there).

        Parsing a game that is not cached loads its task into the planner library, which ends
        the game in progress: call :meth:`reset` before stepping again.
        """
        key = str(path)
        if key in self._games:
            self._games.move_to_end(key)
            return self._games[key]
        game = self._load(key, read_game(key))
        self._games[key] = game
        while len(self._games) > self.cache_size:
            self._games.popitem(last=False)
        return game

    def forget(self, path: str | Path) -> None:
        """Drop ``path`` from the cache (it was rewritten on disk)."""
        self._games.pop(str(path), None)

    def _logic(self, domain: str, grammar: str):
        """The parsed domain + grammar. ALFWorld grammars differ only by the task sentence,
        so the grammar is parsed once per domain and only the ``task`` rule is swapped in."""
        import copy as copying

        from textworld.envs.pddl.logic import GameLogic
        from textworld.envs.pddl.textgen import ContextSensitiveGrammar

        if not is_stock_grammar(grammar):
            raise ValueError("its grammar is not ALFWorld's stock alfred.twl2 with a plain task "
                             "sentence; TextWorld would run its expressions as code, so it is "
                             "not loaded")
        sentence = _task_sentence_of(grammar)
        if domain not in self._logics:
            self._logics[domain] = GameLogic(domain=domain, grammar=_grammar_template())
            while len(self._logics) > 4:
                self._logics.popitem(last=False)
        base = self._logics[domain]
        logic = copying.copy(base)
        logic.grammar = ContextSensitiveGrammar()
        logic.grammar._rules = copying.copy(base.grammar._rules)
        task_rule = json.dumps({"task": [{"rhs": f"{_TASK_PREFIX}{sentence}."}]})
        logic.grammar._rules["task"] = ContextSensitiveGrammar.parse(task_rule)._rules["task"]
        return logic

    def _load(self, path: str, data: dict) -> LoadedGame:
        try:
            logic = self._logic(data["pddl_domain"], data["grammar"])
        except ValueError as error:  # the grammar refused (data, not code)
            message = f"ALFWorld game {path!r}: {error}"
            raise DataFileError(path, 0, message, message=message) from None
        task, sas_text = _translate_cached(data["pddl_domain"], data["pddl_problem"])
        sas = sas_text.encode("utf-8")
        # Build the initial state the engine's way once, minus the replanning translation.
        import fast_downward

        original = fast_downward.pddl2sas
        fast_downward.pddl2sas = lambda *args, **kwargs: (task, sas_text)
        try:
            pristine = _shared_state_class()(self._lib, data["pddl_problem"], logic)
        finally:
            fast_downward.pddl2sas = original
        game = LoadedGame(path, data, logic, task, sas, pristine, self._entity_infos(pristine))
        # The intro only depends on the initial state: derive it once per game. The planner
        # library now holds this game's task, so no game is in progress any more.
        self.game, self.state = game, pristine
        game.intro = self._derive("#intro#", {})
        self.game = self.state = None
        return game

    @staticmethod
    def _entity_infos(state) -> dict:
        from types import SimpleNamespace

        from alfworld.agents.utils.misc import Demangler
        from textworld.generator.game import EntityInfo

        infos = _Shared({v.name: EntityInfo(v.name, v.type) for fact in state.facts for v in fact.arguments})
        demangler = Demangler(game_infos={k: SimpleNamespace(id=k) for k in infos})
        for info in infos.values():
            info.name = demangler.demangle_alfred_name(info.id)
            info.definite, info.indefinite = "the", "a"
        return infos

    # -- playing ------------------------------------------------------------------------------
    def reset(self, path: str | Path) -> str:
        """Start ``path`` from its initial state; returns the intro text."""
        self.game = self.load(path)
        self._lib.load_sas(self.game.sas)
        self.state = _copy_state(self.game.pristine)
        self._refresh()
        return self.game.intro

    def step(self, command: str) -> tuple[str, bool]:
        """Apply ``command``; returns ``(feedback, valid)``. Invalid commands change nothing."""
        if self.game is None:
            raise RuntimeError("call reset() before step()")
        index = self._command_index.get(command.strip())
        if index is None:
            return NOTHING_HAPPENS, False
        action = self._actions[index]
        self.state.apply(action)
        feedback = self._derive(action.feedback_rule, action.mapping)
        self._refresh()
        return feedback, True

    @property
    def won(self) -> bool:
        return bool(self._lib.check_goal())

    def raw_facts(self) -> list:
        """Current facts over PDDL symbols (cheap: a list of immutable propositions)."""
        return list(self.state.facts)

    def name_facts(self, facts: list) -> list:
        """``facts`` with display names (``holds agent1 mug 2``), as alfworld's expert reads them."""
        from textworld.logic import Proposition, Variable

        infos = self.game.entity_infos
        return [Proposition(f.name, [Variable(infos[v.name].name, v.type) for v in f.arguments])
                for f in facts]

    def close(self) -> None:
        if self._lib is not None:
            _FREE_LIBRARIES.append(self._lib)
            self._lib = None
            self._games.clear()
            self._logics.clear()

    # -- internals ----------------------------------------------------------------------------
    def _context(self, mapping: dict) -> dict:
        infos = self.game.entity_infos
        return {"state": self.state, "facts": _SharedList(self.state.facts),
                "variables": _Bindings({ph.name: infos[var.name] for ph, var in mapping.items()}),
                "mapping": _Bindings(mapping), "entity_infos": infos}

    def _derive(self, rule: str, mapping: dict) -> str:
        return self.game.logic.grammar.derive(rule, self._context(mapping))

    def _refresh(self) -> None:
        """Recompute the applicable actions and their command texts."""
        game = self.game
        names = {k: info.name for k, info in game.entity_infos.items()}
        actions, commands = [], {}
        for action in self.state.all_applicable_actions():
            used = _template_variables(action.command_template)
            key = (action.name, tuple(sorted((ph.name, var.name) for ph, var in action.mapping.items()
                                             if ph.name in used)))
            text = game.commands.get(key)
            if text is None:
                action.command_template = self._derive(action.command_template, action.mapping)
                text = game.commands[key] = action.format_command(names)
            if text not in commands:
                commands[text] = len(actions)
                actions.append(action)
        self._actions = actions
        self._command_index = commands
        self.admissible_commands = sorted(c for c in commands if c not in HIDDEN_COMMANDS)
