"""Gymnasium envs as text envs: :class:`TextAdapter`, and the toy-text games built on it
(``PaW/FrozenLake-v0``, ``PaW/CliffWalking-v0``, ``PaW/Taxi-v0``, ``PaW/Blackjack-v0``) plus
``PaW/Sokoban-v0`` (own generator and solver)."""

from paw_gym.toytext.adapter import TextAdapter, make_text_env

__all__ = ["TextAdapter", "make_text_env"]
