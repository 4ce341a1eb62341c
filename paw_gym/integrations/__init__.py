"""Deprecated: the TRL integration moved to :mod:`training.integrations.trl` (the env package
imports no trainer); ``paw_gym.integrations.trl`` re-exports it, with a ``DeprecationWarning``,
for one release."""
