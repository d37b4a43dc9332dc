"""One episode and its reward: the SkyRL env (``tau_bench``) and what it plays.

- ``env``: ``TauBenchEnv`` (init/step/get_metrics/close), registered with skyrl-gym.
- ``episode``: one episode's data and action log (shared with ``rescoring``).
- ``actions``: ``parse_turn``, model text to one tool call, a reply, or an error.
- ``reward``: the binary reward, the ground-truth hash cache, the outputs check.
- ``nvidia_tau2_reward``: ``reward: tau2``, tau2-bench's own evaluator's rules.
- ``nl_assertions``: tau2's ``NL_ASSERTION`` check, its prompt and rules, through the judge client.
- ``prompts``: the agent's system prompt.

Imports ``data_model``, ``backends``, ``users`` and ``config`` (and
``skyrl_rewards.rewards.models``' judge client, for ``nl_assertions``); never
``rescoring``, ``evaluation`` or ``cli``.
"""
