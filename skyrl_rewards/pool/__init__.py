"""The Ray reward pool: named workers that score samples with a reward mix, across nodes.

``RewardPool`` (in ``reward_pool``) is the client: ``from_config``,
``connect``, ``score``, ``score_async``, ``metrics``, ``shutdown``. The rest is
its machinery: ``config`` (typed settings), ``cluster`` (reaching Ray: a
loopback-only local Ray or a running cluster, bounded waits, token
authentication, free CPUs), ``directory`` and ``service`` (the named actor
that owns the workers), ``scheduler`` (time limits, retries, one
result per item), ``worker``, ``batching`` (micro-batches from many threads),
``ray_errors`` (what Ray raises when an actor is lost), ``metrics`` and ``replay_log``. Importing this package does not import Ray;
``reward_pool`` does.
"""
