"""What a benchmark and a solver implement and what a run needs of them: the protocols, the
declaration, boards, box parsing, the registry."""
