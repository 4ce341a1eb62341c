"""Expert actions for ALFWorld episodes (SFT demonstrations, sanity checks).

Two sources, tried in order:

1. The game's stored ``walkthrough`` (every generated game has one, verified in the engine),
   as long as the episode has followed it so far (looking, examining and invalid commands do
   not count as leaving it).
2. alfworld's handcoded expert (``HandCodedTWAgent``), which works on the official data too. It
   is fed every step of the episode, as alfworld's ``AlfredExpert`` wrapper does, with two
   upstream bugs worked around: it tracks its inventory on commands containing ``put`` while
   the grammar says ``move X to Y`` (so it forgets it put something down and, on pick-two
   tasks, loops), and it draws from the global ``random`` (made deterministic here and
   restored afterwards).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

#: Commands that do not change the world; they never take an episode off its walkthrough.
_OBSERVING = ("look", "inventory", "examine ")


def _acts(command: str) -> bool:
    return not command.startswith(_OBSERVING)


@dataclass
class _Event:
    feedback: str
    command: str
    admissible: list[str]
    facts: list
    won: bool


@dataclass
class EpisodeExpert:
    """Tracks one episode and proposes the next command."""

    game_file: str
    walkthrough: list[str] | None
    seed: int
    named_facts: Callable[[list], list]
    """Turns the engine's raw facts into facts with display names (what alfworld's expert reads)."""
    _events: list[_Event] = field(default_factory=list)
    _done_commands: list[str] = field(default_factory=list)
    _handcoded: Any = None
    _fed: int = 0
    _suggestion: str = "look"

    def record(self, command: str, valid: bool, feedback: str, admissible: list[str],
               facts: list, won: bool) -> None:
        """Call after reset (``command=""``) and after every step."""
        self._events.append(_Event(feedback, command, list(admissible), list(facts), won))
        if command and valid and _acts(command):
            self._done_commands.append(command)

    @property
    def last_facts(self) -> list:
        return self._events[-1].facts

    def next_action(self) -> str:
        admissible = self._events[-1].admissible
        step = self._from_walkthrough()
        if step is not None and step in admissible:
            return step
        return self._from_handcoded()

    def _from_walkthrough(self) -> str | None:
        if not self.walkthrough:
            return None
        done = self._done_commands
        plan = [c for c in self.walkthrough if _acts(c)]
        if len(done) >= len(plan) or plan[:len(done)] != done:
            return None
        return plan[len(done)]

    def _from_handcoded(self) -> str:
        from alfworld.agents.expert import HandCodedTWAgent
        from alfworld.agents.expert.handcoded_expert import HandCodedAgentFailed, HandCodedAgentTimeout

        if self._handcoded is None:
            self._handcoded = HandCodedTWAgent(max_steps=200)
            self._handcoded.reset(self.game_file)  # reads traj_data.json beside the game
        saved = random.getstate()
        try:
            while self._fed < len(self._events):
                event = self._events[self._fed]
                random.seed(self.seed * 1_000_003 + self._fed)
                if self._fed == 0:  # the episode's intro: the expert only reads the room
                    self._handcoded.observe(event.feedback)
                    self._suggestion = "look"
                else:
                    state = {"feedback": event.feedback, "admissible_commands": event.admissible,
                             "facts": self.named_facts(event.facts), "won": event.won}
                    # Upstream tracks its inventory on "put"; the game's command is "move X to Y".
                    last = event.command
                    if last.startswith("move "):
                        last = "put " + last[len("move "):]
                    try:
                        self._suggestion = self._handcoded.act(state, 0, event.won, last)
                    except (HandCodedAgentFailed, HandCodedAgentTimeout, IndexError, KeyError):
                        self._suggestion = "look"
                self._fed += 1
        finally:
            random.setstate(saved)
        admissible = self._events[-1].admissible
        return self._suggestion if self._suggestion in admissible else "look"
