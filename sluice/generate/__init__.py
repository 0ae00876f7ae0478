"""Generative jobs, the parts the gateway and the worker share (ADR 0144).

Owns: a generative job's input and result layout (``params``), the token stream's
entries (``events``), and (as they land) the step script with its signature, the
admission cost, and the prompt codec (tokenizer and chat template). Does not own:
the engine and the worker's slot loop (``workers.generate``), the HTTP routes and
Server-Sent Events (``gateway``), scaling on slots (``autoscaler``).
"""
