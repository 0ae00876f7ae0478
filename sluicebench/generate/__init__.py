"""``sluice bench generate``: continuous slots against whole batches, Ray Serve's
``@serve.batch``, vLLM and the bare engine, on one tiny causal LM (issue 30, section 5).

Owns the benchmark's workload (``workload``), the streaming client and its loops
(``client``), the per-request summary and the targets (``stats``), the systems it
starts and stops (``systems``; the Ray Serve peer in ``ray_app``, run in its own
venv; the in-process engine limit in ``inproc``), the table (``report``) and the
run that ties them (``run``). Nothing in the product imports it.
"""
