"""Policies that act in PaW environments: HF transformers and vLLM policies, prompting
baselines (ReAct, Reflexion), scripted experts, and the tiny offline model builder."""
