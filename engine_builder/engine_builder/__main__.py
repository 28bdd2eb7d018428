"""`python -m engine_builder`: the build Job's command line."""

from __future__ import annotations

import sys


def main() -> int:
    """Run the engine builder; the build command arrives with the builder work."""
    print("engine_builder: no command given", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
