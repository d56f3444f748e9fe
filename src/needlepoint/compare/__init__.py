"""`needlepoint compare RUN_A RUN_B [RUN_C ...]`: runs of one benchmark and one dataset, paired on
the samples every run answered, metric by metric (paired bootstrap, exact McNemar) and sample by
sample (an HTML page of cards with every run's answer over the same image).

Modules: `runs` (reading and pairing run folders, the refusals), `mcnemar` (the exact test),
`paired` (the paired bootstrap over the benchmark's stats.Resampler), `tables` (terminal and JSON),
`page` (the HTML page), `cli` (the subcommand).
"""
