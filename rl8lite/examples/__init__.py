"""Batched, torch-native versions of classic control environments."""

from .cartpole import CartPole

__all__ = ["CartPole"]
