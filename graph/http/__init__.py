"""writegate's HTTP service: the API, the approval page, and the app factory."""

from graph.http.app import create_app
from graph.http.services import Settings

__all__ = ["Settings", "create_app"]
