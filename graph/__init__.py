"""The LangGraph and LangChain adapters: the state graph and its nodes, the write gate,
the tool node, the `create_agent` middleware, the tool results as ToolMessages, the
identity under LangGraph Server, the OpenAI chat model the environment configures
(`model.py`) and the script-replaying model `writegate.testing` exports (`scripted.py`).
No application's rules or prompt. Imports approval, tools, checkpoints and the
runtime's wiring; never a surface or the demo."""

if __name__ != "writegate.graph":  # the repository root is the package `writegate`
    raise ImportError(f"import writegate.graph, not {__name__} (see CONTRIBUTING.md)")
