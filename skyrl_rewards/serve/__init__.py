"""The reward pool behind HTTP: ``skyrl-rewards serve`` (Ray Serve), its protocols and clients.

Layers: :mod:`~skyrl_rewards.serve.settings`, :mod:`~skyrl_rewards.serve.wire` and
:mod:`~skyrl_rewards.serve.protocols` are plain Python (no Ray, no HTTP);
:mod:`~skyrl_rewards.serve.app` and :mod:`~skyrl_rewards.serve.launch` are the Ray
Serve application; :mod:`~skyrl_rewards.serve.verl_reward` is verl's custom reward
function. See docs/service.md.
"""
