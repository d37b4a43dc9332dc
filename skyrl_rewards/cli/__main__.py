"""``python -m skyrl_rewards.cli``: the ``skyrl-rewards`` command."""

import sys

from skyrl_rewards.cli.main import main

sys.exit(main())
