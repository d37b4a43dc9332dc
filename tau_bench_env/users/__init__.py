"""The user simulators that answer the agent.

- ``simulators``: ``OpenAIUser`` (an OpenAI-compatible endpoint),
  ``TauBenchUser`` (tau-bench's own), ``ReplayUser`` (recorded turns), ``STOP``.

These modules import no other layer of ``tau_bench_env`` than ``config``.
"""
