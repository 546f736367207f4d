"""Genesis's Go2 walking task (its ``examples/locomotion`` env) as a batched rl8lite env."""

from __future__ import annotations

import math
import sys
from typing import Any, ClassVar

import torch
from tensordict import TensorDict

from ..data import DataKeys, Device
from ..env import Env, apply_env_config
from ..specs import Unbounded

DT, SUBSTEPS = 0.02, 2  # 50 Hz control, the real robot's
EPISODE_LENGTH_S = 20.0
MAX_EPISODE_LENGTH = math.ceil(EPISODE_LENGTH_S / DT)
JOINTS = [f"{leg}_{part}_joint" for leg in ("FR", "FL", "RR", "RL")
          for part in ("hip", "thigh", "calf")]
DEFAULT_JOINT_ANGLES = {  # radians
    **{f"{leg}_hip_joint": 0.0 for leg in ("FL", "FR", "RL", "RR")},
    "FL_thigh_joint": 0.8, "FR_thigh_joint": 0.8, "RL_thigh_joint": 1.0, "RR_thigh_joint": 1.0,
    **{f"{leg}_calf_joint": -1.5 for leg in ("FL", "FR", "RL", "RR")},
}
BASE_INIT_POS, BASE_INIT_QUAT = (0.0, 0.0, 0.42), (1.0, 0.0, 0.0, 0.0)
#: The camera of :meth:`Go2.render` relative to copy 0's base (metres: behind, beside, above).
CAMERA_OFFSET = (-1.5, -1.5, 0.8)
OBS_SCALES = {"lin_vel": 2.0, "ang_vel": 0.25, "dof_pos": 1.0, "dof_vel": 0.05}

DEFAULTS: dict[str, Any] = {
    # commands (m/s, m/s, rad/s), drawn uniformly at reset and every resampling_time_s
    "lin_vel_x_range": [0.5, 0.5], "lin_vel_y_range": [0.0, 0.0], "ang_vel_range": [0.0, 0.0],
    "resampling_time_s": 4.0,
    # each term's weight; the reward adds weight * dt * term
    "reward_scales": {"tracking_lin_vel": 1.0, "tracking_ang_vel": 0.2, "lin_vel_z": -1.0,
                      "base_height": -50.0, "action_rate": -0.005, "similar_to_default": -0.1},
    "tracking_sigma": 0.25, "base_height_target": 0.3,
    # PD position control: target = default pose + action_scale * action (one step late)
    "kp": 20.0, "kd": 0.5, "action_scale": 0.25, "clip_actions": 100.0,
    "simulate_action_latency": True,
    "termination_if_roll_greater_than": 10.0, "termination_if_pitch_greater_than": 10.0,  # degrees
    # start each copy at a random step of its first episode after a reset, as rsl_rl's
    # init_at_random_ep_len does (so copies do not time out together); False for evaluation
    "random_episode_start": True,
}


def init_genesis(device: torch.device) -> Any:
    """The ``genesis`` module, initialised once per process on ``device``'s backend."""
    hook = sys.excepthook
    import genesis as gs

    sys.excepthook = hook  # importing genesis replaces it, process-wide
    if not gs._initialized:
        gs.init(backend=gs.cpu if device.type == "cpu" else gs.gpu, precision="32",
                logging_level="warning")
    if gs.device.type != device.type:
        raise ValueError(f"Genesis runs on {gs.device} in this process (gs.init is once per"
                         f" process): build Go2 with device={str(gs.device)!r}, not {device}")
    return gs


class Go2(Env):
    """Unitree Go2 learning to walk at a commanded velocity in Genesis: ``N`` copies in one
    scene, each resetting itself when it falls (roll or pitch past 10 degrees: terminated) or
    after 20 s (1001 steps: truncated). Build it once per process and pass the instance (the
    scene compiles for tens of seconds; Genesis is initialised once, on ``device``'s backend).

    Observation (45, scaled by ``OBS_SCALES``): base angular velocity, projected gravity,
    commands, joint positions minus the default pose, joint velocities, last action; action
    (12): joint position offsets from the default pose (x0.25), applied one step late as on the
    real robot. The reward sums Genesis's example's terms (:meth:`reward_terms` reports each).
    Parameters: ``DEFAULTS`` (``random_episode_start=False`` evaluates whole episodes);
    ``camera=True`` adds a camera following copy 0 for :meth:`render`. Needs the ``genesis`` extra.
    """

    max_episode_steps: ClassVar[int] = MAX_EPISODE_LENGTH + 1
    restores_state: ClassVar[bool] = False  # the physics state lives in Genesis

    def __init__(self, num_envs: int, /, horizon: int | None = None, *,
                 config: dict[str, Any] | None = None, device: Device = "cpu",
                 camera: bool = False) -> None:
        super().__init__(num_envs, horizon, config=config, device=device)
        self.params = apply_env_config(type(self).__name__, DEFAULTS, self.config)
        gs = init_genesis(self.device)
        self.device = gs.device
        self.scene = gs.Scene(
            sim_options=gs.options.SimOptions(dt=DT, substeps=SUBSTEPS),
            # under 20 contact pairs in this task: a low cap saves memory
            rigid_options=gs.options.RigidOptions(enable_self_collision=False, tolerance=1e-5,
                                                  max_collision_pairs=20),
            vis_options=gs.options.VisOptions(rendered_envs_idx=[0]),
            show_viewer=False,
        )
        self.scene.add_entity(gs.morphs.URDF(file="urdf/plane/plane.urdf", fixed=True))
        self.robot = self.scene.add_entity(gs.morphs.URDF(
            file="urdf/go2/urdf/go2.urdf", pos=BASE_INIT_POS, quat=BASE_INIT_QUAT))
        self.camera = (self.scene.add_camera(res=(480, 360), pos=CAMERA_OFFSET, lookat=(0, 0, 0),
                                             fov=40, GUI=False) if camera else None)
        self.scene.build(n_envs=num_envs)
        self.closed = False

        def tensor(values: Any) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float32, device=self.device)

        self.motor_dofs = torch.tensor([self.robot.get_joint(name).dof_start for name in JOINTS],
                                       dtype=gs.tc_int, device=self.device)
        self.default_dof_pos = tensor([DEFAULT_JOINT_ANGLES[name] for name in JOINTS])
        self.init_qpos = tensor([*BASE_INIT_POS, *BASE_INIT_QUAT, *(
            DEFAULT_JOINT_ANGLES[joint.name] for joint in self.robot.joints[1:])])
        self.gravity = tensor([0.0, 0.0, -1.0]).expand(num_envs, 3)
        self.commands_scale = tensor([OBS_SCALES["lin_vel"], OBS_SCALES["lin_vel"],
                                      OBS_SCALES["ang_vel"]])
        self.observation_spec = Unbounded(45, device=self.device)
        self.action_spec = Unbounded(12, device=self.device)
        with torch.inference_mode(False):
            self.commands = torch.zeros(num_envs, 3, device=self.device)
            self.actions = torch.zeros(num_envs, 12, device=self.device)
            self.last_actions = torch.zeros_like(self.actions)
            self.episode_length = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.term_sums = {name: 0.0 for name in self.params["reward_scales"]}
        self.term_steps = 0
        self._read_state()

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        self.params = p = apply_env_config(type(self).__name__, {**DEFAULTS, **self.config}, config)
        self.robot.set_dofs_kp([p["kp"]] * 12, self.motor_dofs)
        self.robot.set_dofs_kv([p["kd"]] * 12, self.motor_dofs)
        self._reset_copies(None)
        if p["random_episode_start"]:
            self.episode_length.random_(0, MAX_EPISODE_LENGTH)
        return self._observe()

    def step(self, action: torch.Tensor) -> TensorDict:
        p = self.params
        self.actions = action.to(self.device, torch.float32).clamp(-p["clip_actions"],
                                                                   p["clip_actions"])
        executed = self.last_actions if p["simulate_action_latency"] else self.actions
        self.robot.control_dofs_position(executed * p["action_scale"] + self.default_dof_pos,
                                         self.motor_dofs)
        self.scene.step()
        self.episode_length += 1
        self._read_state()
        rewards = self._rewards()
        resample = self.episode_length % round(p["resampling_time_s"] / DT) == 0
        self._resample_commands(resample)
        roll, pitch = self.base_euler[:, 0], self.base_euler[:, 1]
        terminated = ((pitch.abs() > p["termination_if_pitch_greater_than"])
                      | (roll.abs() > p["termination_if_roll_greater_than"])
                      | self.scene.rigid_solver.get_error_envs_mask().bool())
        truncated = (self.episode_length > MAX_EPISODE_LENGTH) & ~terminated
        final_obs = self._observe()
        self._reset_copies(terminated | truncated)
        obs = self._observe()
        self.last_actions = self.actions
        return TensorDict({
            DataKeys.OBS: obs, DataKeys.FINAL_OBS: final_obs, DataKeys.REWARDS: rewards[:, None],
            DataKeys.TERMINATED: terminated[:, None], DataKeys.TRUNCATED: truncated[:, None],
        }, batch_size=[self.num_envs], device=self.device)

    def reward_terms(self) -> dict[str, float]:
        """Each reward term's mean per copy and step (weighted, as it enters the reward) since
        the last call."""
        means = {name: float(total) / max(self.term_steps, 1)
                 for name, total in self.term_sums.items()}
        self.term_sums, self.term_steps = dict.fromkeys(self.term_sums, 0.0), 0
        return means

    def render(self) -> Any:
        """Copy 0's RGB frame ``[360, 480, 3]`` (``uint8``) from a camera following its base."""
        if self.camera is None:
            raise NotImplementedError("Go2 was built without a camera: build it with camera=True"
                                      " to render (rollout videos)")
        base = self.base_pos[0].tolist()
        self.camera.set_pose(pos=[b + o for b, o in zip(base, CAMERA_OFFSET)], lookat=base)
        return self.camera.render()[0]

    def close(self) -> None:
        if not self.closed:
            self.scene.destroy()
            self.closed = True

    def _read_state(self) -> None:
        from genesis.utils.geom import inv_quat, quat_to_xyz, transform_by_quat

        self.base_pos, base_quat = self.robot.get_pos(), self.robot.get_quat()
        # the initial orientation is the identity, so the base's own roll-pitch-yaw
        self.base_euler = quat_to_xyz(base_quat, rpy=True, degrees=True)
        to_base = inv_quat(base_quat)
        self.base_lin_vel = transform_by_quat(self.robot.get_vel(), to_base)
        self.base_ang_vel = transform_by_quat(self.robot.get_ang(), to_base)
        self.projected_gravity = transform_by_quat(self.gravity, to_base)
        self.dof_pos = self.robot.get_dofs_position(self.motor_dofs)
        self.dof_vel = self.robot.get_dofs_velocity(self.motor_dofs)

    def _rewards(self) -> torch.Tensor:
        p, sigma = self.params, self.params["tracking_sigma"]
        lin_vel_error = (self.commands[:, :2] - self.base_lin_vel[:, :2]).square().sum(-1)
        ang_vel_error = (self.commands[:, 2] - self.base_ang_vel[:, 2]).square()
        terms = {
            # exp(-|v_cmd - v|^2 / sigma) on the base's xy velocity and its yaw rate
            "tracking_lin_vel": torch.exp(-lin_vel_error / sigma),
            "tracking_ang_vel": torch.exp(-ang_vel_error / sigma),
            "lin_vel_z": self.base_lin_vel[:, 2].square(),
            "base_height": (self.base_pos[:, 2] - p["base_height_target"]).square(),
            "action_rate": (self.last_actions - self.actions).square().sum(-1),
            "similar_to_default": (self.dof_pos - self.default_dof_pos).abs().sum(-1),
        }
        rewards = torch.zeros(self.num_envs, device=self.device)
        for name, scale in p["reward_scales"].items():
            term = terms[name] * (scale * DT)
            rewards += term
            self.term_sums[name] = self.term_sums.get(name, 0.0) + term.mean()
        self.term_steps += 1
        return rewards

    def _resample_commands(self, where: torch.Tensor | None) -> None:
        p = self.params
        low, high = (torch.tensor(bounds, device=self.device) for bounds in zip(
            p["lin_vel_x_range"], p["lin_vel_y_range"], p["ang_vel_range"]))
        drawn = low + (high - low) * torch.rand(self.num_envs, 3, device=self.device)
        self.commands = drawn if where is None else torch.where(where[:, None], drawn,
                                                                self.commands)

    def _reset_copies(self, where: torch.Tensor | None) -> None:
        """Put the copies in ``where`` (every copy: ``None``) back to the initial pose, still."""
        if where is not None and not where.any():
            return
        self.robot.set_qpos(self.init_qpos, envs_idx=where, zero_velocity=True)
        keep = (torch.zeros(self.num_envs, 1, dtype=torch.bool, device=self.device)
                if where is None else ~where[:, None])
        self.actions = self.actions * keep
        self.last_actions = self.last_actions * keep
        self.episode_length = self.episode_length * keep[:, 0]
        self._resample_commands(where)
        self._read_state()

    def _observe(self) -> torch.Tensor:
        return torch.cat([
            self.base_ang_vel * OBS_SCALES["ang_vel"],
            self.projected_gravity,
            self.commands * self.commands_scale,
            (self.dof_pos - self.default_dof_pos) * OBS_SCALES["dof_pos"],
            self.dof_vel * OBS_SCALES["dof_vel"],
            self.actions,
        ], dim=-1)
