"""The `writegate` command's surface commands, one small module per group, and the kit
they share (consoles, rendering, the terminal approval prompt, `answers.py`);
`writegate.console` composes them with the demo's, and hands the demo's that kit."""
