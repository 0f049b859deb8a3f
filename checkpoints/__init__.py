"""checkpoints package."""
