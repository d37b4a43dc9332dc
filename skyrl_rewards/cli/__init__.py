"""The ``skyrl-rewards`` command line: ``score``, ``check``, ``pool start|status|stop``, ``bench``.

``main`` parses and dispatches; ``summary`` holds the statistics table and
histograms. Run it as ``skyrl-rewards`` or ``python -m skyrl_rewards.cli``.
"""
