"""The ways in: the command line, the HTTP service and its page, the MCP server,
metrics exposition. Each asks the approval service; none runs ledger SQL. Imports any
package below it (approval, tools, checkpoints, runtime, graph), never the demo or the
bench: an application whose tools they serve on its database is handed to them as a
value (`served.Application`) by the composition point, `writegate.console`."""

if __name__ != "writegate.surfaces":  # the repository root is the package `writegate`
    raise ImportError(f"import writegate.surfaces, not {__name__} (see CONTRIBUTING.md)")
