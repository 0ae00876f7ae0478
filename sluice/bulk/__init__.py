"""Bulk jobs: a JSONL file of inputs run at the lowest priority, in the headroom.

A coordinator (an RQ job, :mod:`bulkworker.coordinator`) feeds a bounded window
of items into the model's ordinary queues, gathers their outcomes into the
output in input order, and checkpoints as it goes (ADR 0090).
"""
