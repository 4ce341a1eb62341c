"""The transition serialisation's former path: :mod:`agents.serialization` holds it now (the
layer both the transcript agent and the trainer use); ``training.serialization`` keeps working."""

from agents.serialization import (OBSERVATION_ROLE, WM_CONTEXTS, Serialized, TransitionSerializer,
                                  WMContext, chat_separator_text, observation_separator, serialize)

__all__ = ["OBSERVATION_ROLE", "WM_CONTEXTS", "Serialized", "TransitionSerializer", "WMContext",
           "chat_separator_text", "observation_separator", "serialize"]
