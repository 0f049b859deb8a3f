"""The LangGraph and LangChain adapters: the state graph and its nodes, the write gate,
the tool node, the `create_agent` middleware, the tool results as ToolMessages, and
the identity under LangGraph Server. Imports approval, tools, checkpoints and the
runtime's wiring; never a surface."""

if __name__ != "writegate.graph":  # the repository root is the package `writegate`
    raise ImportError(f"import writegate.graph, not {__name__} (see CONTRIBUTING.md)")
