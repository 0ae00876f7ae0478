"""sluice: the core every Sluice process shares, and the ``sluice`` command.

Owns what is stored in Redis and how it is read and written: key names
(``keys``), the queue protocol and its Lua scripts (``queue``), bulk jobs on RQ
(``bulk``), the worker registry (``registry``), job records (``jobs``), API keys
(``apikeys``); the config schema (``config``), the error table (``errors``),
the Python client (``client``), a managed redis-server (``redis_server``),
how CPU workers divide the machine's cores (``cores``),
the child ``sluice`` processes of a local stack (``children``, which
sluicebench's stacks reuse) and ``sluice up`` (``up``). The command line is
``cli``: core commands here, the others from the packages named in its
``PLUGINS`` (gateway, workers, autoscaler, sluicebench), the only place sluice/
imports an app package.
sluice/ never imports torch.
"""
