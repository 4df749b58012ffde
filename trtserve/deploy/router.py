"""Ray Serve request router (ray.serve.request_router API, Ray >= 2.46) for prefix affinity.

A request forwarded by the prefix frontend (ray.py) carries `HTTPCall.prefix_key`. The router tries
the replica that key ranks first (affinity.rank_replicas); it falls back to the least loaded replica
when that one is refusing work (its queue is at max_ongoing_requests) or is much busier than the
least loaded one (`imbalance`, in ongoing requests, as Ray's PrefixCacheAffinityRouter does). Keyless
requests go to the least loaded of all replicas.
"""

from __future__ import annotations

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

DEFAULT_IMBALANCE = 8  # ongoing requests by which the preferred replica may exceed the least loaded


class PrefixAffinityRouter(RequestRouter):
    def initialize_state(self, imbalance: int = DEFAULT_IMBALANCE, **kwargs) -> None:
        self.imbalance = imbalance
        self.affine = self.fallback = 0  # routing decisions, for the test and the note

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        from trtserve.deploy.affinity import rank_replicas

        key = _key(pending_request)
        if key is None or len(candidate_replicas) < 2:
            return [candidate_replicas]  # the base class picks the shortest queue among them
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        first = by_id[rank_replicas(key, sorted(by_id))[0]]
        if self._too_busy(first, candidate_replicas):
            self.fallback += 1
            return [candidate_replicas]
        self.affine += 1
        return [[first], candidate_replicas]  # the second rank is used only if `first` refuses

    def _too_busy(self, replica: RunningReplica, candidates: list[RunningReplica]) -> bool:
        cache = self.replica_queue_len_cache
        lens = [cache.get(r.replica_id) for r in candidates]
        mine = cache.get(replica.replica_id)
        known = [q for q in lens if q is not None]
        return mine is not None and bool(known) and mine - min(known) > self.imbalance


def _key(pending: PendingRequest | None) -> int | None:
    if pending is None or not pending.args:
        return None
    return getattr(pending.args[0], "prefix_key", None)
