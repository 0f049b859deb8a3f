"""approval package."""
