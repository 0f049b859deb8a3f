"""The protocol: canonical JSON and digests, proposals and their previews, decisions,
the wire format every way in shows (`wire.py`, beside the typed contract `contract.py`),
confirmation tokens, the execution ledger's states, every error, and the storage ports
(`approval/store.py`) it runs on. Pure logic over a small store interface: it imports
no other writegate package; `checkpoints` implements the ports on PostgreSQL."""

if __name__ != "writegate.approval":  # the repository root is the package `writegate`
    raise ImportError(f"import writegate.approval, not {__name__} (see CONTRIBUTING.md)")
