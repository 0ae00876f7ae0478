"""bulkworker: the RQ bulk worker process (``sluice bulk worker``).

Owns the process: the RQ worker and the reaper that resumes bulk jobs whose
coordinator lease lapsed (``worker``), its metrics (``metrics``), the RQ job
functions a slice runs (``jobs``), the coordinator one slice runs (``coordinator``,
ADR 0090) and turning stored lines into jobs (``feeder``), and its command
(``cli``, added to the core's ``sluice bulk`` group through sluice/cli.py's
``PLUGINS``).

Does not own the bulk protocol: the bulk job's records and Lua scripts
(``sluice.bulk.ops``), line parsing (``sluice.bulk.lines``), queueing a slice on
RQ (``sluice.bulk.rq_jobs``, which the gateway uses for a bulk job's first slice,
naming the job function by its dotted path so it never imports this package) and
the client commands of ``sluice bulk`` stay in the core. Imports the core only,
never another process package (tests/pure/repo/test_import_rules.py); never imports
torch.
"""
