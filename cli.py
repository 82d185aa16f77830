"""dna-video command line: ``python cli.py {fit,validate,test,predict} --config configs/<name>.yaml``.

See ``python cli.py fit --help`` for every option, and README.md for recipes.
"""

import os

# OpenMP threads that sleep when idle instead of spinning. Read once, when torch loads, so it
# is set before the import below. With the default (spin), a training process whose cores
# are shared, with its own DataLoader workers or with other jobs, loses most of its time in
# threads spinning for a descheduled peer: the quickstart ran at 3.5 clips/s instead of 13 on
# 2 cores (README, Performance). Set OMP_WAIT_POLICY=ACTIVE to get the default back.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from dna_video.training.cli import console_main  # noqa: E402

if __name__ == "__main__":
    console_main()
