"""Training with SkyRL: the ``skyrl_rewards`` env and the launcher.

``env`` holds :class:`SkyRLRewardEnv` and its registration with skyrl-gym;
importing this package imports neither skyrl-gym nor SkyRL.
"""
