"""An rl8 1.0.0 script, unchanged (it runs under rl8): a custom env on rl8's and torchrl's API, trained and evaluated."""
import mlflow
import torch
from rl8 import Algorithm, AlgorithmConfig, Env, Trainer
from rl8.conditions import HitsUpperBound
from rl8.data import DataKeys
from tensordict import TensorDict
from torchrl.data import Categorical, Unbounded


class Walk(Env):
    max_horizon = 64

    def __init__(self, num_envs, /, horizon=None, *, device="cpu"):
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Unbounded(1, device=device)
        self.action_spec = Categorical(2, shape=torch.Size([1]), device=device)
        self.goal = 0.0

    def reset(self, *, config=None):
        self.goal = (config or {}).get("goal", self.goal)
        self.state = torch.zeros(self.num_envs, 1, device=self.device)
        return self.state

    def step(self, action):
        self.state = self.state + 2 * action - 1
        return TensorDict(
            {DataKeys.OBS: self.state, DataKeys.REWARDS: -(self.state - self.goal).abs()},
            batch_size=self.num_envs, device=self.device,
        )


config = AlgorithmConfig(num_envs=16, horizon=8, horizons_per_env_reset=1, sgd_minibatch_size=64)
trainer = Trainer(Algorithm(Walk, config))
trainer.algorithm.validate()
train_stats = trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 3)])
eval_stats = trainer.eval(env_config={"goal": 2.0})
print(trainer.state["algorithm/steps"], sorted(eval_stats)[:3], mlflow.get_tracking_uri()[:6])
