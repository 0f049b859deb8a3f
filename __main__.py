"""`python -m writegate`: the same as the `writegate` command."""

from writegate.surfaces.cli.app import main

main()
