"""Gymnasium's classic control envs batched in torch, and Genesis's Go2 (imported lazily)."""

from .cartpole import CartPole
from .go2 import Go2
from .mountain_car import MountainCar, MountainCarContinuous
from .pendulum import Pendulum

__all__ = ["CartPole", "Go2", "MountainCar", "MountainCarContinuous", "Pendulum"]
