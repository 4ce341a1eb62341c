"""``PaW/Blackjack-v0``: Gymnasium's Blackjack as a text task — the stochastic case.

The dealer's hidden card and every draw are random, so no policy wins always; the expert is the
policy with the highest win probability, computed exactly by dynamic programming over
Gymnasium's rules (an infinite deck: 1–9 with probability 1/13 each, 10 with 4/13; the dealer
draws until 17, an ace counts 11 while that does not bust):

    W(t, d)        = P(dealer from d busts) + P(dealer from d ends below t)     (stick on t)
    V(raw, ace, d) = max( W(total(raw, ace), d),
                          Σ_c p_c · V(raw + c, ace ∨ c = 1, d) · 1[raw + c ≤ 21] )   (hit)

with total(raw, ace) = raw + 10 when the hand holds an ace and that stays ≤ 21. A draw is not a
win (PaW's reward is 10 × success), so the expert maximises P(win), not the expected chips.
:func:`optimal_win_probability` gives the optimum over Gymnasium's initial deal, the number the
expert's measured success is compared with.

    >>> import gymnasium as gym, paw_gym
    >>> env = gym.make("PaW/Blackjack-v0")
    >>> text, info = env.reset(seed=0)
    >>> text                                                # doctest: +SKIP
    'Your cards: 7, 4 (total 11). The dealer shows 10.'
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
from gymnasium.envs.toy_text.blackjack import BlackjackEnv

from paw_gym.toytext.adapter import TextAdapter
from paw_gym.toytext.gridworlds import (SPLITS, Split, WIN_REWARD, check_split, in_split,
                                        is_test_layout)

#: Card value -> probability of drawing it (Gymnasium's infinite deck: J, Q, K count 10).
CARD_PROBABILITIES = {value: (4 if value == 10 else 1) / 13 for value in range(1, 11)}
__all__ = ["BlackjackText", "optimal_win_probability", "SPLITS"]


def hand_total(raw: int, ace: bool) -> int:
    """The hand's value: an ace counts 11 when that does not bust."""
    return raw + 10 if ace and raw + 10 <= 21 else raw


@lru_cache(maxsize=None)
def dealer_outcomes(raw: int, ace: bool) -> dict[int, float]:
    """Final dealer total → probability (22 stands for bust) from a dealer hand (raw, ace)."""
    total = hand_total(raw, ace)
    if raw > 21:
        return {22: 1.0}
    if total >= 17:
        return {total: 1.0}
    outcomes: dict[int, float] = {}
    for card, p in CARD_PROBABILITIES.items():
        for final, q in dealer_outcomes(raw + card, ace or card == 1).items():
            outcomes[final] = outcomes.get(final, 0.0) + p * q
    return outcomes


def stick_win_probability(total: int, dealer_card: int) -> float:
    """P(win) when sticking on ``total`` against ``dealer_card`` (the hidden card still to come)."""
    return sum(p for final, p in dealer_outcomes(dealer_card, dealer_card == 1).items()
               if final == 22 or final < total)


@lru_cache(maxsize=None)
def best_win_probability(raw: int, ace: bool, dealer_card: int) -> tuple[float, str]:
    """(P(win) under the optimal policy, the optimal action) for a player hand (raw, ace)."""
    stick = stick_win_probability(hand_total(raw, ace), dealer_card)
    hit = sum(p * best_win_probability(raw + card, ace or card == 1, dealer_card)[0]
              for card, p in CARD_PROBABILITIES.items() if raw + card <= 21)
    return (hit, "hit") if hit > stick else (stick, "stick")


def optimal_win_probability() -> float:
    """The optimal policy's P(win) over Gymnasium's initial deal (two cards each)."""
    return sum(p1 * p2 * pd * best_win_probability(c1 + c2, 1 in (c1, c2), dealer)[0]
               for c1, p1 in CARD_PROBABILITIES.items() for c2, p2 in CARD_PROBABILITIES.items()
               for dealer, pd in CARD_PROBABILITIES.items())


def _cards(hand: list[int]) -> str:
    return ", ".join("A" if card == 1 else str(card) for card in hand)


def _describe(hand: list[int]) -> str:
    total = hand_total(sum(hand), 1 in hand)
    soft = total != sum(hand)
    return f"Your cards: {_cards(hand)} (total {total}{', soft' if soft else ''})."


def blackjack_text(env: BlackjackEnv, stuck: bool = False) -> str:
    """The player's cards and total and the dealer's up card; once the player has stuck, the
    dealer's whole hand and the result."""
    player = _describe(env.player)
    if sum(env.player) > 21:
        return f"{player} You are bust: you lose."
    if not stuck:
        return f"{player} The dealer shows {_cards(env.dealer[:1])}."
    dealer = hand_total(sum(env.dealer), 1 in env.dealer)
    mine = hand_total(sum(env.player), 1 in env.player)
    result = ("you win" if dealer > 21 or mine > dealer else
              "a draw" if mine == dealer else "you lose")
    return (f"{player} The dealer has {_cards(env.dealer)} (total {dealer}"
            f"{', bust' if dealer > 21 else ''}): {result}.")


class BlackjackText(TextAdapter):
    """Beat the dealer: ``hit`` for a card or ``stick`` (Gymnasium's Blackjack, no naturals).

    Args:
        split: ``train``, ``test`` or ``all``; a deal (your two cards in order and the
            dealer's up card) is held out when the SHA-1 of its text is ≡ 0 mod 5.

    ``task_type`` is the starting hand: ``"soft"`` (an ace counted 11), ``"hard 4-11"``,
    ``"hard 12-16"``, ``"hard 17-21"``. Reward 10 on a win, 0 on a draw or a loss.
    """

    held_out_split = "test"

    def __init__(self, split: Split = "train", render_mode: str | None = None):
        check_split(split)
        self.split = split
        self._stuck = False
        super().__init__(BlackjackEnv(), render=self._text, task_type=self._kind,
                         task_description="get a higher total than the dealer without going "
                         "over 21", win_reward=WIN_REWARD, expert=self._optimal,
                         render_mode=render_mode)

    def _text(self, env: BlackjackEnv, observation: Any) -> str:
        return blackjack_text(env, self._stuck)

    @staticmethod
    def _kind(env: BlackjackEnv) -> str:
        total = hand_total(sum(env.player), 1 in env.player)
        if total != sum(env.player):
            return "soft"
        return "hard 4-11" if total <= 11 else "hard 12-16" if total <= 16 else "hard 17-21"

    @staticmethod
    def _optimal(env: BlackjackEnv) -> str:
        return best_win_probability(sum(env.player), 1 in env.player, env.dealer[0])[1]

    def _start(self, seed: int, options: dict[str, Any]):
        rng = np.random.default_rng(seed)
        draw = seed
        while True:
            observation, info = self.env.reset(seed=draw)
            self._stuck = False
            if in_split(self.split, is_test_layout(blackjack_text(self.env.unwrapped))):
                return observation, info
            draw = int(rng.integers(2**31 - 1))

    def _step(self, action: str):
        if action == "stick" and self._last_info["admissible_actions"]:
            self._stuck = True  # the dealer plays out: the text shows the dealer's hand
        return super()._step(action)

