"""Training with SkyRL 0.4: the envs' SkyRL side, the typed config, the generator, the entry point.

- ``env``: :class:`SkyRLRewardEnv` (``skyrl_rewards``), registered with skyrl-gym.
- ``registration``: env ids by entry point, never silently replaced.
- ``config``: ``TrainConfig``, SkyRL's config with this project's env sections.
- ``tau_bench_config``: the ``tau_bench`` env's section (``TauBenchEnvConfig``),
  owned here so that ``skyrl_rewards`` never imports ``tau_bench_env``.
- ``generator``: SkyRL's generators with masking that reaches the loss; ``make_generator``.
- ``experiment``: ``RewardsPPOExp``; ``entrypoint``: ``python -m skyrl_rewards.train``.
- ``dataset``: SkyRL prompt rows (parquet) from this project's JSONL rows.

``config``, ``generator``, ``experiment`` and ``entrypoint`` need the ``skyrl``
package (``pip install 'skyrl-rewards[skyrl]'``, Python 3.12); importing this
package imports neither skyrl-gym nor SkyRL.
"""
