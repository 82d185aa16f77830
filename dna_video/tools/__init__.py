"""User commands over the rest of the package: ``predict`` (files -> classes), ``analyze``
(attention maps, subspaces), ``prepare`` (dataset checks and transcoding), ``checkpoints``
(inspect, convert, export, model card). Each runs as ``dna-video NAME`` (README, "Commands")."""
