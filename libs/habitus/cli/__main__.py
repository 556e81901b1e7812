"""`python -m habitus.cli`: how `habitus up` starts each service (`... serve <name>`) and how
the tests run the command without the console script."""

from habitus.cli import main

main()
