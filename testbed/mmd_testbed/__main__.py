"""`python -m mmd_testbed`: the test bed's command line (`cli`)."""

import sys

from mmd_testbed.cli import main

sys.exit(main())
