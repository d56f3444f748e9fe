"""Running an evaluation: `evaluate` and `score` (the API's body), the runner that drives samples
through a solver, the run folder's policy, worker processes, the Batch API, shard merges, repeats,
dry runs and runs rebuilt from the authors' prediction files."""
