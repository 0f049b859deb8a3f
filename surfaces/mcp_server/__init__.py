"""writegate as an MCP server: its tools, identity and confirm flow."""
