"""Process plumbing: signals, memory, checkpoint files, dotted paths, ranks; no PPO or MLflow."""
