"""What MLflow extras cost, outside the step loop: a rollout video, and logging the policy.

After training CartPole until solved (``CARTPOLE``, one torch thread), it times,
interleaved over repeats in a temporary SQLite store:

- ``record_video()``: a 500-step episode rendered (600x400 frames), encoded as H.264 MP4
  (PyAV) and as an animated GIF (Pillow), logged with its poster frame;
- ``log_policy()``: the policy as an MLflow 3 LoggedModel of the run, against saving the
  same MLflow model folder and copying it into the run's artifacts (how rl8lite logged it
  before LoggedModels).

Neither runs inside ``step()``: a training step's cost is unchanged.

Usage:
    python benchmarks/mlflow_costs.py --repeats 5 --json benchmarks/results/mlflow_costs.json
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import torch
from provenance import write_results
from timing import spread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp}/mlflow.db"
        from rl8lite import Algorithm, Trainer
        from rl8lite.conditions import HitsUpperBound
        from rl8lite.examples import CartPole
        from rl8lite.examples.configs import CARTPOLE
        from rl8lite.tracking import save_policy_model
        from rl8lite.trainers import videos

        trainer = Trainer(Algorithm(CartPole, seed=0, **CARTPOLE), progress=False, save_policy=False)
        trainer.run(stop_conditions=[HitsUpperBound("episodes/return_mean", 475.0)])
        tracker, algorithm = trainer.tracker, trainer.algorithm
        times: dict[str, list[float]] = {"video_mp4": [], "video_gif": [], "logged_model": [], "artifact_folder": []}
        frames = []
        for repeat in range(args.repeats):
            for encoding in ("mp4", "gif"):
                videos.mp4_available = (lambda: True) if encoding == "mp4" else (lambda: False)
                start = time.perf_counter()
                trainer.record_video(name=f"{encoding}-{repeat}", max_steps=500)
                times[f"video_{encoding}"].append(time.perf_counter() - start)
            tracker.flush()
            frames.append(tracker.client.get_run(tracker.run_id).data.metrics[f"videos/gif-{repeat}/length"])
            start = time.perf_counter()
            trainer.log_policy(name=f"policy-{repeat}")
            times["logged_model"].append(time.perf_counter() - start)
            start = time.perf_counter()
            with tempfile.TemporaryDirectory() as folder:
                save_policy_model(algorithm.policy, algorithm.env.observation_spec, f"{folder}/policy")
                tracker.client.log_artifacts(tracker.run_id, f"{folder}/policy", artifact_path=f"folder-{repeat}")
            times["artifact_folder"].append(time.perf_counter() - start)
        trainer.close()
    results: dict[str, Any] = {name: spread(values) for name, values in times.items()}
    results["episode_frames"] = frames
    print(f"{args.repeats} repeats, seconds min / median / max; episodes of {frames} frames")
    for name, values in times.items():
        s = spread(values)
        print(f"  {name:>16}: {s['min']:.2f} / {s['median']:.2f} / {s['max']:.2f}")
    if args.json:
        write_results(args.json, {"repeats": args.repeats, "results": results})


if __name__ == "__main__":
    main()
