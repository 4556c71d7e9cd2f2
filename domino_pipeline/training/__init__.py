"""Training: the epoch loop, checkpoints, torch.distributed."""
