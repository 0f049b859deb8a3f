"""The `writegate` command as it ships: the surfaces' commands and the demo's, composed.

The one place that names both the surfaces and the demo, and holds no command of its
own. `app.py` lists the commands in their order, hands the surfaces the application
they serve on its own database (the demo, `writegate.demo.served`), and hands the
demo's commands (`writegate.demo.cli`: `writegate demo`, `chat`, `db seed`, `db reset`,
`provider serve`) the command line they join (`CommandLine`, built from
`surfaces/cli`'s consoles and rendering). Imports every package below it, never the
bench (the console entry point, `writegate.__main__`, adds that on top).
"""

if __name__ != "writegate.console":  # the repository root is the package `writegate`
    raise ImportError(f"import writegate.console, not {__name__} (see CONTRIBUTING.md)")
