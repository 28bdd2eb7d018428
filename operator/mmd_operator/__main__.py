"""`python -m mmd_operator`: run the operator (what the operator image runs)."""

import sys

from mmd_operator.main import main

sys.exit(main())
