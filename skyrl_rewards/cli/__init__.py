"""The ``skyrl-rewards`` command line: ``score``, ``check``, ``pool start|status|stop``, ``bench``,
``judge-server``.

``main`` parses and dispatches; ``summary`` holds the statistics table and
histograms; ``judge_server`` the rule-based stand-in judge. Run it as ``skyrl-rewards`` or ``python -m skyrl_rewards.cli``.
"""
