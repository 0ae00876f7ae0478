"""sluice.local: the kit for running a Sluice stack on one machine.

Owns ``sluice up`` (``up``: start Redis, a gateway and the autoscaler in order
and stop them in reverse; ``up_cli``: its banner and shutdown; ``live``: its live
status line), the child ``sluice`` processes of a local stack (``children``,
which sluicebench's stacks reuse), and private redis-servers on loopback
(``redis_server``; ``redis_topology`` for Sentinel groups and clusters): what
``sluice up`` and ``sluice redis`` run, and what tests and benchmarks start.

Does not own ``sluice status`` (sluice/status.py): it reads the queues of any
deployment (a Kubernetes one as much as a local stack) and so belongs to the
command line, beside ``sluice submit``. No process a deployment runs (gateway,
workers, autoscaler, notifier, bulk worker) imports this package; only the
``sluice`` command, sluicebench and tests do.
"""
