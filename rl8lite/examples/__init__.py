"""Batched, torch-native versions of Gymnasium's classic control environments, and Genesis's
Go2 walking task (Genesis imported only when a :class:`Go2` is built)."""

from .cartpole import CartPole
from .go2 import Go2
from .mountain_car import MountainCar, MountainCarContinuous
from .pendulum import Pendulum

__all__ = ["CartPole", "Go2", "MountainCar", "MountainCarContinuous", "Pendulum"]
