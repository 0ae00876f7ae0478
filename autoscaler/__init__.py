"""The autoscaler: how many workers each model runs, from its queue, never its CPU.

Owns the replica count of every model's workers. Every ``period_s`` it reads a
model's queue and workers from Redis, decides the count with a pure policy, and
has a backend add or drain workers. It does not own the queue (``sluice.queue``),
the workers' own loop (``workers``) or the config schema (``sluice.config``); it
reads all three. Run it with ``sluice autoscaler``; ``sluice up`` embeds it.

Read, then decide, then act (docs/adr/0122-autoscaler-read-decide-act.md):

- **loop** (:mod:`autoscaler.loop`): per model and period, upkeep (reclaim expired
  leases), read, upkeep (prune lapsed workers), decide, then act (record the
  decision, scale). Assembled in :mod:`autoscaler.service`; policies reload from
  the file in :mod:`autoscaler.reload`.
- **observe** (:mod:`autoscaler.observe`): reads only, and returns one frozen
  :class:`~autoscaler.observe.Snapshot`: the
  :class:`~autoscaler.observation.Observation` the policy decides on and the
  live workers. A failed read returns None and the count holds.
- **policy** (:mod:`autoscaler.policy`, bulk work in :mod:`autoscaler.bulk_policy`):
  ``decide(policy, observation, state, now) -> Decision``, pure: no Redis, no
  clock. The simulator calls the same function.
- **backends** (:mod:`autoscaler.backends`): ``local`` processes, a Kubernetes
  Deployment's scale, or ``dry-run``; the loop calls only what the
  :class:`~autoscaler.backends.base.Backend` protocol declares.
- **upkeep** (:mod:`autoscaler.upkeep`), the **decision log** for the dashboard
  (:mod:`autoscaler.decisions`) and Prometheus **metrics** (:mod:`autoscaler.metrics`)
  are the act step's other writers.

Offline, :mod:`autoscaler.sim` replays traces through the policy and baselines
(``sluice simulate``, ``sluice bench autoscaler``) and compares pull with push
dispatch (``sluice bench dispatch``); the live loop never imports it. User guide:
docs/autoscaling.md.
"""
