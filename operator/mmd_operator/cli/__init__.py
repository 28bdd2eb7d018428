"""Command-line tools (`mmctl`): offline render and validate, requests, the local cluster.

The CLI may import every layer; nothing imports the CLI.
"""
