"""Policies that act in PaW environments: HF transformers and vLLM policies, prompting
baselines (ReAct, Reflexion), scripted experts, and the tiny offline model builder."""

from agents.hf_policy import DEFAULT_STOP, HFPolicy
from agents.types import PolicyOutput, Trajectory, Transition

__all__ = ["DEFAULT_STOP", "HFPolicy", "PolicyOutput", "Trajectory", "Transition"]
