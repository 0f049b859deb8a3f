"""The `writegate` command as it ships: the surfaces' commands and the demo's, composed.

The one place that names both the surfaces and the demo. `app.py` lists the commands in
their order and hands the surfaces the application they serve on its own database (the
demo, `writegate.demo.served`); the demo's own commands live here beside it: `writegate
demo`, `chat`, `db seed`, `db reset` and `provider serve`. They render through the
command line's kit (`surfaces/cli`), which is why they are not in `demo/`: the demo
itself keeps to `writegate`'s public face (tests/unit/test_demo_face.py pins what it
still takes from below). Imports every package below it, never the bench (the console
entry point, `writegate.__main__`, adds that on top).
"""

if __name__ != "writegate.console":  # the repository root is the package `writegate`
    raise ImportError(f"import writegate.console, not {__name__} (see CONTRIBUTING.md)")
