"""The contract of a reward component, below every component: the base class, the work-key digest
and the two row readers every family shares (:func:`sample_solution`, :func:`answer_work_key`).

:class:`Component` is what the rule-based rewards (each family folder's modules:
``text``, ``boxes``, ``gui``, ``documents``) and the model-based ones
(:mod:`~skyrl_rewards.rewards.models.judge`,
:mod:`~skyrl_rewards.rewards.models.reward_model_component`) derive from, and
what a mix, a batch and a pool call. It lives here, apart from the concrete
components, so that a concrete component may hold another (the accuracy
reward holds a judge) without two modules importing each other; it imports
nothing above the contract."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Hashable, Mapping
from typing import Any

from skyrl_rewards.rewards.contract.lanes import ModelOutcome, ModelRequest
from skyrl_rewards.rewards.contract.result import ComponentScore, Status
from skyrl_rewards.rewards.contract.text import answer_span, completion_text

_logger = logging.getLogger(__name__)


WORK_KEY_DIGEST_BYTES = 16
"""Size of a work key's digest: a key costs the same few bytes however long the answer."""


def work_digest(name: str, *parts: str) -> tuple[str, bytes]:
    """A small, fixed-size work key: ``(name, blake2b digest of the parts)``.

    Each part is length-prefixed, so different splits of the same characters
    give different keys. The pool keeps up to ``cache_size`` keys; digests bound
    that by bytes, not by the length of what the model wrote.

    >>> work_digest("accuracy", "1", "2") == work_digest("accuracy", "12", "")
    False
    """
    digest = hashlib.blake2b(digest_size=WORK_KEY_DIGEST_BYTES)
    for part in parts:
        data = part.encode("utf-8", errors="surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return name, digest.digest()


class Component:
    """Base class: subclasses set ``name`` and implement :meth:`compute`."""

    name = ""
    forwarded_params: tuple[str, ...] = ()
    """Parameters a subclass takes through ``**kwargs`` and hands to its base (for the registry)."""

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        """Score ``content`` (already extracted and capped); may raise ``ValueError`` for a bad row."""
        raise NotImplementedError

    def lanes(self) -> frozenset[str]:
        """Every model lane :meth:`lane` may name (empty for rule-based rewards).

        A pool starts a lane's actors only when its mix may use that lane.
        """
        return frozenset()

    def lane(self, sample: Mapping[str, Any]) -> str | None:
        """The model lane that scores ``sample`` (see :mod:`~skyrl_rewards.rewards.contract.lanes`).

        ``None`` (every rule-based reward): :meth:`compute` scores it. A lane
        name: :meth:`lane_request` builds the request, a runner runs it and
        :meth:`settle` scores its outcome. Cheap, and never raises.
        """
        return None

    def lane_request(self, sample: Mapping[str, Any]) -> ModelRequest:
        """The model request for a sample whose :meth:`lane` is not ``None``.

        May raise ``ValueError`` for a bad row (a missing field, an unreadable image).
        """
        raise NotImplementedError(f"reward {self.name!r} has no model lane")

    def settle(self, request: ModelRequest, outcome: ModelOutcome) -> ComponentScore:
        """The score of a request's outcome; a failure or unreadable reply is masked, never 0.0."""
        raise NotImplementedError(f"reward {self.name!r} has no model lane")

    def endpoints(self) -> dict[str, dict[str, Any]]:
        """Endpoint key -> the configuration a runner builds its client or model from."""
        return {}

    def run_lane(self, request: ModelRequest) -> ModelOutcome:
        """Run one of this reward's model requests in this process (see :meth:`score`).

        The model-based rewards run it with
        :func:`~skyrl_rewards.rewards.models.local.run_requests`; the contract
        itself never imports a model.
        """
        raise NotImplementedError(f"reward {self.name!r} has no model lane")

    def score(self, sample: Mapping[str, Any]) -> ComponentScore:
        """Score one sample; every failure becomes status ``error`` with value 0.0.

        A sample with a model lane runs its request in this process
        (:meth:`run_lane`). This is the one place that catches any
        ``Exception``: a bug in one reward must not lose a whole batch; it is
        logged with its traceback.
        """
        try:
            if self.lane(sample) is not None:
                request = self.lane_request(sample)
                return self.settle(request, self.run_lane(request))
            return self.compute(completion_text(sample.get("completion")), sample)
        except ValueError as error:
            return ComponentScore(0.0, Status.ERROR, str(error))
        except Exception as error:  # noqa: BLE001 - see docstring
            _logger.exception("reward %s failed", self.name)
            return ComponentScore(0.0, Status.ERROR, f"{type(error).__name__}: {error}")

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        """Equal keys mean equal scores; ``None`` when keying costs about as much as scoring."""
        return None


def sample_solution(sample: Mapping[str, Any]) -> Any:
    """The sample's ground truth; ``ValueError`` when the row has none."""
    if "solution" not in sample or sample["solution"] is None:
        raise ValueError("solution: missing from the row")
    return sample["solution"]


def answer_work_key(name: str, sample: Mapping[str, Any]) -> Hashable | None:
    """A key over the solution and the answer span (a component keyed so reads nothing else)."""
    solution = sample.get("solution")
    if not isinstance(solution, str):
        return None
    return work_digest(name, solution, answer_span(completion_text(sample.get("completion"))))
