"""The networks: attention kinds (:mod:`.attention`), and the models built from them. Plain
``nn.Module``s that know nothing of Lightning, datasets, checkpoints or the command line."""
