"""The generative worker (ADR 0144): an engine behind one interface (``engine``),
the built-in Hugging Face causal-LM engine, and the slot loop that claims into
free slots each decode step and streams the step's tokens through Redis.

Owns: decoding (KV caches, sampling, stop sequences, detokenization) and the slot
loop. Does not own: the job and stream layouts (``sluice.generate``), the routes
(``gateway``)."""
