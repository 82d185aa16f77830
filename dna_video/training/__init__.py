"""Training: the one command line (LightningCLI over every task, :mod:`.cli`), its callbacks
(:mod:`.callbacks`) and run folders and their identity (:mod:`.runs`)."""
