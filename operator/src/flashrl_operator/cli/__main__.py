"""``python -m flashrl_operator.cli``: the ``flashrl`` command, as the operator image runs it."""

import sys

from flashrl_operator.cli import main

sys.exit(main())
