"""Offline simulation: replay traffic against a policy before deploying it.

Nothing here touches Redis, a clock or a process; the live loop never imports it.
It reuses the production decision, :func:`autoscaler.policy.decide`, so a policy
replayed here behaves as it would in the loop.

- :mod:`~autoscaler.sim.traces`: traffic traces (built-in seeded shapes, CSV files).
- :mod:`~autoscaler.sim.controllers`: what the simulator can drive: Sluice's policy,
  three baselines (fixed, queue-length, ongoing) and an oracle that knows the trace.
- :mod:`~autoscaler.sim.simulator`: an event-driven M/G/k model of the workers that
  a controller scales (cold starts, drains, the same observation the loop builds).
- :mod:`~autoscaler.sim.replay`: ``sluice simulate`` and ``sluice bench autoscaler``.
- :mod:`~autoscaler.sim.dispatch` and :mod:`~autoscaler.sim.dispatch_report`: pull
  from bucketed queues against push balancers on a fixed fleet (``sluice simulate
  --dispatch`` and ``sluice bench dispatch``).

ADRs 0031 (simulator and oracle) and 0035 (dispatch comparison model) say why the
models are shaped as they are.
"""
