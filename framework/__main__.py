"""`python -m decodelab` is the `decodelab` command."""

from decodelab.apps.cli import main

main()
