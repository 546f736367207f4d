"""Batched, torch-native versions of Gymnasium's classic control environments."""

from .cartpole import CartPole
from .frame_stack import frame_stacked
from .mountain_car import MountainCar, MountainCarContinuous
from .pendulum import Pendulum

__all__ = ["CartPole", "MountainCar", "MountainCarContinuous", "Pendulum", "frame_stacked"]
