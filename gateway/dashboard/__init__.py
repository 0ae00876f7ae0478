"""The live dashboard at ``/dashboard``: one router, every route under that prefix.

Mounted by the gateway app; the access control of the admin routes covers it by
path (``/dashboard`` and below).
"""

from gateway.dashboard.routes import router

__all__ = ["router"]
