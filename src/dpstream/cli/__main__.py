"""``python -m dpstream.cli`` runs the command line."""

from dpstream.cli import main

main()
