"""The composition root: `Runtime` (`wiring.py`) opens one database and wires the
ledger store, the approval service, the executor and LangGraph's saver over the tools
it protects, for every way in; `Writegate` (`writegate.py`) is the library's entry,
which hands out the LangGraph and LangChain adapters over that runtime. `wiring`
imports approval, tools and checkpoints; `writegate` also the graph adapters."""

if __name__ != "writegate.runtime":  # the repository root is the package `writegate`
    raise ImportError(f"import writegate.runtime, not {__name__} (see CONTRIBUTING.md)")
