"""The ways in: the command line, the HTTP service and its page, the MCP server,
metrics exposition. Each asks the approval service; none runs ledger SQL."""
