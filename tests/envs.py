"""A small, real custom text env used by the tests (and shown in the README).

``GuessNumberEnv``: the agent must find a hidden number in [1, high] by actions
``guess N``; the env answers "higher"/"lower". It honours the whole PaW env contract.
"""

from __future__ import annotations

from paw_gym import TextEnv


class GuessNumberEnv(TextEnv):
    """Guess a hidden number; the env says whether to go higher or lower."""

    task_type = "guess"

    def __init__(self, high: int = 8, render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        if high < 1:
            raise ValueError(f"high must be >= 1, got {high}")
        self.high = high

    def _reset(self, options):
        self.target = int(options.get("target", self.np_random.integers(1, self.high + 1)))
        actions = [f"guess {n}" for n in range(1, self.high + 1)]
        goal = f"find the hidden number between 1 and {self.high}"
        return (f"Your task is to: {goal}.", self.make_info(
            task_id=f"guess-{self.high}-{self.target}", task_description=goal,
            admissible_actions=actions))

    def _step(self, action):
        if action not in self._last_info["admissible_actions"]:
            return self._last_observation, 0.0, False, {"invalid_action": True}
        guess = int(action.split()[1])
        if guess == self.target:
            return "Correct!", 10.0, True, {"won": True}
        return ("Go higher." if guess < self.target else "Go lower."), 0.0, False, {}

    def _expert_action(self) -> str:
        return f"guess {self.target}"


class CatalogCodeEnv(TextEnv):
    """A shop page with a product code and a brand (noisy tokens in the paper's sense, A.4)."""

    task_type = "catalog"

    def _reset(self, options):
        self.code = "B0" + "".join(str(self.np_random.integers(10)) for _ in range(8))
        return (f"Item {self.code} by ACME costs 5 dollars. [SEP] Buy it?",
                self.make_info(task_id=self.code, task_description="buy the item",
                               admissible_actions=["buy", "skip"]))

    def _step(self, action):
        if action not in self._last_info["admissible_actions"]:
            return self._last_observation, 0.0, False, {"invalid_action": True}
        won = action == "buy"
        return f"You chose {action} for {self.code}.", 10.0 * won, True, {"won": won}


#: The reset text of :class:`ResetTokenEnv`: a word no template, task description, action or
#: later observation holds, so a prompt that shows it was built from the reset observation.
RESET_TOKEN = "quagga7341"


class ResetTokenEnv(TextEnv):
    """A door to open. Its reset observation alone holds :data:`RESET_TOKEN` (its task
    description does not): the test of every rollout path's first prompt."""

    task_type = "door"

    def _reset(self, options):
        return (f"A door marked {RESET_TOKEN} stands before you.", self.make_info(
            task_id="door", task_description="open the door",
            admissible_actions=["open door", "wait"]))

    def _step(self, action):
        if action == "open door":
            return "The door opens.", 10.0, True, {"won": True}
        if action == "wait":
            return "Nothing happens.", 0.0, False, {}
        return "Nothing happens.", 0.0, False, {"invalid_action": True}

    def _expert_action(self) -> str:
        return "open door"
