"""The load generator behind ``sluice bench load``, ``stack``, ``soak`` and ``bulk``."""
