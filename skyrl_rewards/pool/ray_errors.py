"""What Ray raises when an actor's process or node is gone: one definition for the pool.

The scheduler (CPU workers) and the lane dispatchers (judge and reward-model
actors) both tell a lost actor (replace it, charge its tasks an attempt) from
an error in our own code (``RayTaskError``: a bug, scored ``error``) with it.
"""

from __future__ import annotations

from ray.exceptions import (
    LocalRayletDiedError,
    NodeDiedError,
    ObjectLostError,
    RayActorError,
    WorkerCrashedError,
)

WORKER_LOST = (
    RayActorError,
    WorkerCrashedError,
    ObjectLostError,
    NodeDiedError,
    LocalRayletDiedError,
)
"""What Ray raises when a worker's process or node is gone."""
