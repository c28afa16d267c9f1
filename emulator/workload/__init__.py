"""Training workloads from published files: readers of their formats (the step's collectives and compute)."""
