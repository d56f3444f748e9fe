"""Human baselines: a person answers a benchmark's samples on a local web page, into a run folder
that every command (score, report, merge, the leaderboard) reads as any model's run."""
