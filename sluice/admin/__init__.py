"""Operator actions from the command line (``sluice admin``, ADR 0151): a client of
the gateway's admin REST API, so the CLI, the dashboard and scripts share one code
path and one audit trail."""
