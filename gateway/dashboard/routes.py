"""The dashboard's routes, all under ``/dashboard``: the page, its assets, its JSON.

The page and its assets are static files that carry no data; the numbers come
from ``/dashboard/api/state``, which the page polls with the admin key (when
keys are configured) as a Bearer header.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from gateway.dashboard.feed import DashboardFeed
from gateway.state import GatewayState

STATIC_DIR = Path(__file__).resolve().parent / "static"
MEDIA_TYPES = {
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
    ".html": "text/html",
    ".md": "text/plain",
}
NO_STORE = {"Cache-Control": "no-store"}

router = APIRouter(prefix="/dashboard", tags=["dashboard"], include_in_schema=False)


def feed_of(request: Request) -> DashboardFeed:
    """The app's one feed, made on first use (it shares the gateway's Redis client)."""
    feed: DashboardFeed | None = getattr(request.app.state, "dashboard_feed", None)
    if feed is None:
        st: GatewayState = request.app.state.gateway
        feed = DashboardFeed(st.redis, dict(st.cfg.models), st.call, poll_s=st.gw.stats_refresh_s)
        feed.ops.parts = st.queue.ops.parts  # the gateway's partition high-water (ADR 0160)
        request.app.state.dashboard_feed = feed
    return feed


# Every asset is served from here: nothing external may load or be sent. Sent with
# every file, so the page reached as /dashboard/static/index.html has it too.
CSP = (
    "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'"
)


@router.get("", response_class=HTMLResponse)
async def page() -> HTMLResponse:
    return HTMLResponse(
        (STATIC_DIR / "index.html").read_text(),
        headers={
            "Cache-Control": "no-cache",
            "Content-Security-Policy": CSP,
        },
    )


@router.get("/static/{path:path}")
async def static(path: str) -> FileResponse:
    """A file of the package's static folder; anything else (or outside it) is 404."""
    target = (STATIC_DIR / path).resolve()
    if (
        not target.is_relative_to(STATIC_DIR)
        or not target.is_file()
        or target.suffix not in MEDIA_TYPES
    ):
        raise HTTPException(404, f"no dashboard asset {path!r}")
    # Vendored files live in a versioned folder, so they can be cached for long.
    cache = "public, max-age=86400" if "/vendor/" in target.as_posix() else "no-cache"
    headers = {"Cache-Control": cache, "Content-Security-Policy": CSP}
    return FileResponse(target, media_type=MEDIA_TYPES[target.suffix], headers=headers)


@router.get("/api/state", response_model=None)
async def state(request: Request) -> Any:
    """Every model's queue, workers, latency, autoscaler and dead letters (cached ~1 s)."""
    return JSONResponse(await feed_of(request).get(), headers=NO_STORE)


@router.get("/api/history", response_model=None)
async def history(request: Request) -> Any:
    """Per model, latency and completions per finished 10 s window of the last 5 minutes."""
    return JSONResponse(await feed_of(request).history(), headers=NO_STORE)
