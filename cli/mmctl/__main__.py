"""`python -m mmctl`: the same as the `mmctl` command."""

import sys

from mmctl.main import main

sys.exit(main())
