"""Run a command on a pseudo-terminal and read what its screen shows, for progress display tests.

`run_on_pty` gives the command a pty as stdin, stdout and stderr (so isatty() is true, as in a
user's terminal), reads everything it writes, and stops it at a deadline. `screen` replays that
output as a terminal would for the sequences a progress bar uses (carriage return, new line,
cursor up, erase line) and returns the lines left on the screen; `frames` returns every state a
redrawn line went through, bar frames included.
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import time

# CSI (number, command), other escapes, then CR, LF and plain text.
_TOKEN = re.compile(r"\x1b\[([\d;]*)([A-Za-z])|\x1b[()][0-9A-Za-z]|\x1b[=>]|\x1b\[\?[0-9;]*[hl]"
                    r"|(\r)|(\n)|([^\x1b\r\n]+)")


def run_on_pty(cmd: list[str], *, env: dict[str, str], cwd=None, timeout_s: float = 120.0,
               columns: int = 200) -> tuple[int | None, str]:
    """(exit code, everything written) of cmd on a pty of `columns` columns; None: killed at the deadline."""
    master, slave = pty.openpty()
    env = {**env, "TERM": env.get("TERM", "xterm-256color"), "COLUMNS": str(columns), "LINES": "50"}
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, close_fds=True,
                            start_new_session=True)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # the other side closed: the command ended
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    try:
        code = proc.wait(timeout=max(deadline - time.monotonic(), 5.0))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        code = None
    return code, b"".join(chunks).decode(errors="replace")


def _replay(text: str):
    """Yield (lines, row) after every change: a screen of lines and the cursor's row."""
    lines, row, col = [""], 0, 0
    for match in _TOKEN.finditer(text):
        number, command, cr, lf, chars = match.groups()
        if chars:
            line = lines[row]
            lines[row] = line[:col] + chars + line[col + len(chars):]
            col += len(chars)
        elif cr:
            col = 0
        elif lf:
            row += 1
            col = 0
            if row == len(lines):
                lines.append("")
        elif command == "A":
            row = max(row - int(number or 1), 0)
        elif command == "K":  # erase line (2K) or to its end (K)
            lines[row] = "" if number == "2" else lines[row][:col]
        yield lines, row


def screen(text: str) -> list[str]:
    """The lines the terminal shows at the end, trailing empty lines dropped."""
    lines = [""]
    for state, _ in _replay(text):
        lines = state
    while lines and not lines[-1].strip():
        lines.pop()
    return [line.rstrip() for line in lines]


def frames(text: str) -> list[str]:
    """Every distinct content a line had while the command ran (the bar's frames among them)."""
    seen: list[str] = []
    for lines, row in _replay(text):
        current = lines[row].rstrip()
        if current and (not seen or seen[-1] != current):
            seen.append(current)
    return seen
