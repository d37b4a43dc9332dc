"""Evaluating a policy endpoint on a domain's tasks (``tau-bench-env eval``).

- ``policy``: ``ChatPolicy``, the agent under evaluation behind an OpenAI-compatible endpoint.
- ``evaluate``: episodes, the results file, resume, the summary; threads.
- ``eval_ray``: the same episodes on Ray workers (``--workers``).

Imports ``rescoring`` (pass^k) and below; never ``cli``. Importing
``tau_bench_env`` or making the env does not import this package.
"""
