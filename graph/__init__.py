"""The LangGraph and LangChain adapters: the state graph and its nodes, the write gate,
the tool node, the `create_agent` middleware, the tool results as ToolMessages, the
identity under LangGraph Server, and the chat model configured from the environment
(`model.py`, with the scripted model `writegate.testing` exports). Imports approval,
tools, checkpoints and the runtime's wiring; never a surface or the demo."""

if __name__ != "writegate.graph":  # the repository root is the package `writegate`
    raise ImportError(f"import writegate.graph, not {__name__} (see CONTRIBUTING.md)")
