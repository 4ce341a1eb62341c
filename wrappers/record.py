"""``RecordTransitions``: write every transition (h, a, o_next, ...) into a ``WMReplay``."""

from __future__ import annotations

import uuid
from typing import Any

import gymnasium as gym

from wrappers.replay import WMReplay, trajectory_key


class PolicyAction(str):
    """An action string that carries the policy's metadata to :class:`RecordTransitions`.

    It *is* the raw model output (a ``str``), so every wrapper and vector env passes it on
    unchanged; the recorder stores its metadata with the transition.

    Example:
        >>> action = PolicyAction("<action>look</action>", action_entropy=0.7, response_ids=[5, 9])
        >>> action.metadata["action_entropy"]
        0.7
    """

    metadata: dict[str, Any]

    def __new__(cls, text: str, **metadata: Any) -> PolicyAction:
        action = super().__new__(cls, text)
        action.metadata = metadata
        return action

    def __reduce__(self):  # keep metadata across processes (AsyncVectorEnv)
        return (_rebuild_policy_action, (str(self), self.metadata))


def _rebuild_policy_action(text: str, metadata: dict[str, Any]) -> PolicyAction:
    return PolicyAction(text, **metadata)


def transition_record(h: str, action: str, observation: str, reward: float, terminated: bool,
                      truncated: bool, info: dict[str, Any], episode_id: str, step: int,
                      **fields: Any) -> dict[str, Any]:
    """The one record schema of a transition (expert demos, evaluation and training rollouts):
    the contract fields, ``info``'s task and parsing fields, the action's
    :class:`PolicyAction` metadata (entropy, token ids) and any extra ``fields``."""
    return {
        "h": h,
        "a": str(action),
        "o_next": info.get("raw_observation", observation),
        "reward": float(reward),
        "terminated": bool(terminated),
        "truncated": bool(truncated),
        "task_id": str(info.get("task_id", "")),
        "task_type": str(info.get("task_type", "")),
        "episode_id": episode_id,
        "step": step,
        "won": bool(info.get("won", False)),
        "invalid_action": bool(info.get("invalid_action", False)),
        "parsed_action": info.get("parsed_action"),
        **getattr(action, "metadata", {}),
        **fields,
    }


class RecordTransitions(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Append each step's transition to a :class:`~wrappers.replay.WMReplay`.

    A record holds ``h`` (the observation the action was chosen from: the prompt when a
    :class:`~wrappers.HistoryPrompt` is inside), ``a`` (the action as given: raw model text),
    ``o_next`` (the env's raw next observation, ``info["raw_observation"]`` when present),
    ``reward``, ``terminated``, ``truncated``, ``task_id``, ``task_type``, ``episode_id``,
    ``step``, ``won``, ``invalid_action``, ``parsed_action``, and any :class:`PolicyAction`
    metadata (``action_entropy``, token ids, ...). Put it outermost so it sees the prompt, the
    raw model output and the penalised reward.

    Args:
        env: the env to record.
        replay: where records go (a ``WMReplay``, or a directory path for a new one).
        deduplicate: hold each episode's records until it ends and drop the episode if this
            recorder already stored an identical trajectory (same task, h, a, o_next). Records of
            an unfinished episode are then not on disk until it ends.

    Example:
        >>> replay = WMReplay("runs/replay")                                         # doctest: +SKIP
        >>> env = RecordTransitions(ParseAction(HistoryPrompt(gym.make("PaW/WebShop-v0"),
        ...                                                   template="webshop")), replay)  # doctest: +SKIP
    """

    def __init__(self, env: gym.Env, replay: WMReplay | str, deduplicate: bool = False):
        gym.utils.RecordConstructorArgs.__init__(self, replay=replay, deduplicate=deduplicate)
        super().__init__(env)
        self.replay = replay if isinstance(replay, WMReplay) else WMReplay(replay)
        self.deduplicate = deduplicate
        self._seen: set[str] = set()
        self._episode: list[dict[str, Any]] = []
        self._h = ""
        self._episode_id = ""
        self._step = 0
        self._done = True

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._flush_episode()
        observation, info = self.env.reset(seed=seed, options=options)
        self._h, self._episode_id, self._step, self._done = observation, uuid.uuid4().hex, 0, False
        return observation, info

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        record = transition_record(self._h, action, observation, reward, terminated, truncated,
                                   info, self._episode_id, self._step)
        if self.deduplicate:
            self._episode.append(record)
        else:
            self.replay.append(record)
        self._h, self._step = observation, self._step + 1
        if terminated or truncated:
            self._done = True
            self._flush_episode()
        return observation, reward, terminated, truncated, info

    def close(self):
        self._flush_episode()
        self.replay.close()
        super().close()

    def _flush_episode(self) -> None:
        # An episode cut short by reset() is flushed too: its records are real transitions.
        if self._episode:
            key = trajectory_key(self._episode)
            if key not in self._seen:
                self._seen.add(key)
                self.replay.extend(self._episode)
            self._episode = []
