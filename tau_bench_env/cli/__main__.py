"""``python -m tau_bench_env.cli``: the ``tau-bench-env`` command."""

import sys

from tau_bench_env.cli.main import main

sys.exit(main())
