"""Everything durable in PostgreSQL for the core: finding the database, the pool,
writegate's own migrations, the ledger store behind approval's ports, and LangGraph's
Postgres saver. Imports approval only."""

if __name__ != "writegate.checkpoints":  # the repository root is the package `writegate`
    raise ImportError(f"import writegate.checkpoints, not {__name__} (see CONTRIBUTING.md)")
