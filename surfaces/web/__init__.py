"""writegate's HTTP service: the API, the approval page, and the app factory."""

from writegate.surfaces.web.app import create_app
from writegate.surfaces.web.services import Settings

__all__ = ["Settings", "create_app"]
