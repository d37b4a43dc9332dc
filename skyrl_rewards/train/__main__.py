"""``python -m skyrl_rewards.train``: see :mod:`skyrl_rewards.train.entrypoint`."""

import sys

from skyrl_rewards.train.entrypoint import main

sys.exit(main())
