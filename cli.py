"""dna-video command line: ``python cli.py {fit,validate,test,predict} --config configs/<name>.yaml``.

See ``python cli.py fit --help`` for every option, and README.md for recipes.
"""

from dna_video.cli import main

if __name__ == "__main__":
    main()
