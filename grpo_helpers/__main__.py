"""``python -m grpo_helpers train|export|eval|series``: see :mod:`grpo_helpers.cli`."""

import sys

from grpo_helpers.cli import main

sys.exit(main())
