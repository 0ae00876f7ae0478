"""The autoscaling policy, reloaded when its file changes.

An invalid file is logged with the field in error and counted; the last good
config stays in force, so a typo never scales a fleet down. Models added to or
removed from the file take effect at the next restart (the queue client and the
backend are built for the models known at start); their policies reload live.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from sluice.config import AutoscalingConfig, SluiceConfig, load_config
from sluice.errors import ConfigError

log = logging.getLogger("sluice.autoscaler")


class PolicySource:
    """``check()`` once per period: cheap (one stat) unless the file changed."""

    def __init__(
        self, path: Path, initial: SluiceConfig, on_error: Callable[[str], None] | None = None
    ) -> None:
        self.path = path
        self.config = initial
        self.on_error = on_error or (lambda msg: None)
        self._stamp = self._stat()
        self.last_error: str | None = None

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def check(self) -> bool:
        """Reload if the file changed; True when a new policy took effect."""
        stamp = self._stat()
        if stamp is None or stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            new = load_config(self.path)
        except ConfigError as e:
            self.last_error = str(e)
            log.error("autoscaler: config reload rejected, keeping the last good policy: %s", e)
            self.on_error(str(e))
            return False
        self.last_error = None
        known, fresh = set(self.config.models), set(new.models)
        if known != fresh:
            log.warning(
                "autoscaler: models changed (%s -> %s); restart to apply",
                sorted(known),
                sorted(fresh),
            )
        changed = [
            m
            for m in known & fresh
            if new.models[m].autoscaling != self.config.models[m].autoscaling
        ]
        self.config = new
        log.info("autoscaler: config reloaded from %s; policy changed for %s", self.path, changed)
        return True

    def policy(self, model: str) -> AutoscalingConfig:
        return self.config.models[model].autoscaling
