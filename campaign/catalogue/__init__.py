"""The catalogue: what a campaign may ask for (the typed config, platforms and their GPUs,
containers, datasets). Read by launch, status and harvest; imports nothing of theirs."""
