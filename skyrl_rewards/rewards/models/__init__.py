"""Model-based rewards: an LLM/VLM judge behind an OpenAI-compatible endpoint, a reward model.

Part of the rewards layer (no Ray, no skyrl-gym): what a TRL script or a pool
lane imports. A model-based component does not compute its score itself; it
builds a :class:`~skyrl_rewards.rewards.contract.lanes.ModelRequest`, something
runs the request (in this process: :mod:`~skyrl_rewards.rewards.models.local`;
in the pool: its judge lane or reward-model workers), and the component turns
the :class:`~skyrl_rewards.rewards.contract.lanes.ModelOutcome` into a score.
Heavy dependencies (``httpx``, ``torch``, ``transformers``) load on first use.
"""
