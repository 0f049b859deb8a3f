"""The demo's own commands: `writegate demo` (`demo.py`, the walkthrough in
`demo_run.py`), `chat` (`chat.py`, the conversation in `chat_loop.py`), `db seed` and
`db reset` (`db.py`), `provider serve` (`provider.py`). Each module's `register` adds
its command to the `writegate` app (or the `db` group) that `writegate.console`
composes, handed the command line it joins (`kit.CommandLine`: its consoles, database
and rendering), so the demo prints as the other commands do without importing them.
A command loads the demo's runtime, the agent and LangGraph only when it runs.
"""
