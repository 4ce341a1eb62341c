"""Policies that act in PaW environments: HF transformers and vLLM policies, prompting
baselines (ReAct, Reflexion), scripted experts, the tiny offline model builder, and batched
rollouts.

    >>> from agents import HFPolicy, ReActAgent, rollout
    >>> policy = HFPolicy("tiny-micro")                                   # doctest: +SKIP
    >>> trajectories = rollout(ReActAgent(policy), "PaW/WebShop-v0", 16, 8)  # doctest: +SKIP
"""

from agents.base import Agent, PolicyAgent, Sampling
from agents.baselines import ExpertAgent, RandomAgent
from agents.envs import make_agent_env
from agents.hf_policy import DEFAULT_STOP, HFPolicy
from agents.prompting import ReActAgent, ReflexionAgent, expert_examples
from agents.rollout import rollout
from agents.transcript import TranscriptAgent
from agents.types import PolicyOutput, Trajectory, Transition
from agents.vllm_policy import VLLMPolicy  # vllm itself is imported only when one is built

__all__ = [
    "Agent", "DEFAULT_STOP", "ExpertAgent", "HFPolicy", "PolicyAgent", "PolicyOutput",
    "RandomAgent", "ReActAgent", "ReflexionAgent", "Sampling", "Trajectory",
    "TranscriptAgent", "Transition",
    "VLLMPolicy", "expert_examples", "make_agent_env", "rollout",
]
