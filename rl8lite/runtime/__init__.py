"""Process plumbing: signals, malloc settings, memory accounting, checkpoint files,
classes by dotted path and seeding. Nothing here knows PPO or MLflow."""
