"""Executors: where rollouts run (this process's threads, or Ray tasks on a cluster) and how a
finished rollout's files travel back."""
