"""Batched, torch-native versions of Gymnasium's classic control environments."""

from .cartpole import CartPole
from .mountain_car import MountainCar, MountainCarContinuous
from .pendulum import Pendulum

__all__ = ["CartPole", "MountainCar", "MountainCarContinuous", "Pendulum"]
