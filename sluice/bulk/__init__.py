"""Bulk jobs' protocol: a JSONL file of inputs run at the lowest priority, in the headroom.

Owns the bulk job's records and Lua scripts (``ops``, ``lua/``), line parsing
(``lines``), queueing a coordinator slice on RQ (``rq_jobs``: the gateway queues
the first) and the client's ``sluice bulk`` commands (``cli``, ``follow``). The
coordinator that feeds a bounded window of items into the model's ordinary
queues, gathers their outcomes into the output in input order and checkpoints as
it goes (ADR 0090) runs in the RQ bulk worker, its own package (bulkworker/).
"""
