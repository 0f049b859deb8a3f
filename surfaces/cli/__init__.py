"""The `writegate` command's surface commands, one small module per group, and the kit
they share (consoles, rendering); `writegate.console` composes them with the demo's."""
