"""The `writegate` command: one small module per group of subcommands."""
