"""The ways in: the command line, the HTTP service and its page, the MCP server,
metrics exposition. Each asks the approval service; none runs ledger SQL. Imports any
package below it (approval, tools, checkpoints, graph), never the bench."""

if __name__ != "writegate.surfaces":  # the repository root is the package `writegate`
    raise ImportError(f"import writegate.surfaces, not {__name__} (see CONTRIBUTING.md)")
