"""The agent and the ways into it: the state graph and its nodes, the tool node, the
LangChain middleware, model configuration, prompts, the Studio entry, and `Writegate`,
the library's entry point. Imports approval, tools and checkpoints; never a surface."""

if __name__ != "writegate.graph":  # the repository root is the package `writegate`
    raise ImportError(f"import writegate.graph, not {__name__} (see CONTRIBUTING.md)")
