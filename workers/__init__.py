"""workers: ``sluice worker``, the process that runs a model on a batch.

Owns the worker loop (``worker``: claim a batch from Redis when there is
capacity, run it, complete it, heartbeat, drain on SIGTERM), running a batch
(``execute``: warm-up, out-of-memory split), the token budget of a device
(``budget``), and the model handlers (``handlers``: the embedding model on
torch, a synthetic and a tiny one for tests). The only product package that
imports torch, and only inside handlers and commands.
"""
