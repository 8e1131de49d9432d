"""The documentation holds: its commands run, its links lead somewhere, and the options
table of docs/usage.md is the one the code generates.

Convention for fenced code blocks in README.md and docs/*.md:

* ```sh: commands that run as written, in order, in an empty folder per file (so a
  file's later commands may use what its earlier ones made), with this environment's
  bin folder first on PATH and OMP_NUM_THREADS=1.  They must be quick, and `mpiexec`
  gets `-n 2` at most (ranks are oversubscribed on small machines).
* ```text: shown, not run: long `make` targets, SLURM submissions, runs that need the
  repository as their working folder or a signal at the right moment, and output.

Other shell info strings (bash, console, shell, ...) are refused so that no command
escapes the test unnoticed.  Each command (a line, with its `\\` continuations and
here-document) runs in its own `bash -o pipefail -c`; a failure shows the command and
its output.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
RUN, SHOWN = "sh", "text"
#: Shell info strings other than RUN: a block marked so would be neither run nor clearly shown.
SHELL_LIKE = {"bash", "console", "shell", "shell-session", "zsh", "sh-session"}
#: Seconds for all the commands of one file.
FILE_TIMEOUT = 300
#: What a runnable block must not do: take long, need SLURM, or need the repository's Makefile.
FORBIDDEN = [
    (re.compile(r"(^|[\s;&|(])make\b"), "a make target (run from the repository, not a temporary folder)"),
    (re.compile(r"(^|[\s;&|(])(sbatch|srun|scancel|scontrol)\b"), "a SLURM command"),
    (re.compile(r"jobs/"), "a script of jobs/ (run from the repository)"),
]

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")


def code_blocks(text):
    """(info string, body, line number) of every fenced code block of a Markdown text."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, indent, start = opening["fence"], len(opening["indent"]), i + 1
        body, i = [], i + 1
        while i < len(lines):
            closing = FENCE.match(lines[i])
            if closing and closing["fence"][0] == fence[0] and len(closing["fence"]) >= len(fence) \
                    and not closing["info"].strip():
                break
            line = lines[i]
            body.append(line[min(indent, len(line) - len(line.lstrip())):])
            i += 1
        blocks.append((opening["info"].strip().split(" ")[0].lower(), "\n".join(body), start))
        i += 1
    return blocks


HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")


def commands(block):
    """The commands of a shell block: each line with its `\\` continuations and, when it
    opens a here-document, the document's lines up to its terminator; comments and blank
    lines between commands are dropped."""
    found, lines, i = [], block.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        command = [line]
        while command[-1].rstrip().endswith("\\") and i < len(lines):
            command.append(lines[i])
            i += 1
        heredoc = HEREDOC.search("\n".join(command))
        if heredoc:
            while i < len(lines):
                command.append(lines[i])
                i += 1
                if command[-1].strip() == heredoc[2]:
                    break
            else:
                raise AssertionError(f"here-document {heredoc[2]!r} is never closed:\n{line}")
        found.append("\n".join(command))
    return found


def runnable(path):
    """(line, command) of every command of the file's runnable blocks, in order."""
    found = []
    for info, body, line in code_blocks(path.read_text()):
        if info == RUN:
            found += [(line, command) for command in commands(body)]
    return found


def bin_folder():
    """The folder of the environment's executables (`nkmpi`, `mpiexec`, `python`)."""
    venv = ROOT / ".venv" / "bin"
    return venv if venv.is_dir() else Path(sys.executable).parent


def doc_id(path):
    return str(path.relative_to(ROOT))


def test_docs_exist():
    names = {doc_id(p) for p in DOCS}
    assert {"README.md", "docs/usage.md", "docs/formats.md", "docs/design.md", "docs/performance.md",
            "docs/clusters.md", "docs/findings.md"} <= names


@pytest.mark.parametrize("path", DOCS, ids=doc_id)
def test_one_convention_for_shell_blocks(path):
    """Commands are either run (sh) or plainly shown (text); runnable ones are quick and local."""
    problems = []
    for info, body, line in code_blocks(path.read_text()):
        if info in SHELL_LIKE:
            problems.append(f"line {line}: ```{info}: mark commands ```{RUN} (run) or ```{SHOWN} (not run)")
        if info != RUN:
            continue
        for command in commands(body):
            for pattern, what in FORBIDDEN:
                if pattern.search(command):
                    problems.append(f"line {line}: {what} in a ```{RUN} block: mark it ```{SHOWN}\n{command}")
            for ranks in re.findall(r"\bmpiexec\b[^\n]*?\s-(?:n|np)\s+(\S+)", command):
                if not (ranks.isdigit() and int(ranks) <= 2):
                    problems.append(f"line {line}: mpiexec -n {ranks}: at most 2 ranks in a ```{RUN} block")
            if re.search(r"\bmpiexec\b", command) and not re.search(r"\bmpiexec\b[^\n]*?\s-(?:n|np)\s", command):
                problems.append(f"line {line}: mpiexec without -n in a ```{RUN} block")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", DOCS, ids=doc_id)
def test_commands_run(path, tmp_path):
    """Every command of the file's ```sh blocks, in order, in one empty folder."""
    env = dict(os.environ, PATH=f"{bin_folder()}{os.pathsep}{os.environ.get('PATH', '')}",
               OMP_NUM_THREADS="1")
    env.pop("VIRTUAL_ENV", None)
    found = runnable(path)
    budget = FILE_TIMEOUT
    for line, command in found:
        left = max(budget, 1)
        started = time.monotonic()
        try:
            proc = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=left, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{doc_id(path)}, block at line {line}: the file's commands took more than "
                        f"{FILE_TIMEOUT} s; this one was still running:\n$ {command}\n"
                        f"{_text(exc.stdout)}{_text(exc.stderr)}")
        budget -= time.monotonic() - started
        if proc.returncode != 0:
            pytest.fail(f"{doc_id(path)}, block at line {line}: exit status {proc.returncode}\n"
                        f"$ {command}\n--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}")


def _text(output):
    if output is None:
        return ""
    return output.decode(errors="replace") if isinstance(output, bytes) else output


LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def outside_code_blocks(text):
    """The lines of a Markdown text that are not in a fenced code block."""
    kept, fence = [], None
    for line in text.splitlines():
        opening = FENCE.match(line)
        if fence is None:
            if opening:
                fence = opening["fence"]
            else:
                kept.append(line)
        elif opening and opening["fence"][0] == fence[0] and len(opening["fence"]) >= len(fence) \
                and not opening["info"].strip():
            fence = None
    return kept


def prose(text):
    """The text outside code blocks and inline code, where links are links."""
    return "\n".join(re.sub(r"`[^`]*`", "", line) for line in outside_code_blocks(text))


def anchors(path):
    """The anchors GitHub gives the headings of a Markdown file."""
    seen, found = {}, set()
    for line in outside_code_blocks(path.read_text()):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading[1].replace("`", "").lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


@pytest.mark.parametrize("path", DOCS, ids=doc_id)
def test_relative_links_lead_to_files(path):
    """Every relative link (and image) names a file or folder of the repository, and a
    link to a section of a Markdown file names one of its headings."""
    broken = []
    for target in LINK.findall(prose(path.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):      # http:, mailto:, ...
            continue
        name, _, fragment = target.partition("#")
        linked = (path.parent / name).resolve() if name else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{target}: no heading #{fragment} in {linked.relative_to(ROOT)}")
        elif name and ROOT not in linked.parents and linked != ROOT:
            broken.append(f"{target}: outside the repository")
    assert not broken, f"{doc_id(path)}:\n" + "\n".join(broken)


def test_options_table_is_generated():
    """docs/usage.md's table of `nkmpi run` options is what nkmpi.options.option_table() makes."""
    from nkmpi.options import TABLE_BEGIN, TABLE_END, option_table
    text = (ROOT / "docs" / "usage.md").read_text()
    assert text.count(TABLE_BEGIN) == 1 and text.count(TABLE_END) == 1, \
        "docs/usage.md needs one pair of table markers"
    shown = text.split(TABLE_BEGIN, 1)[1].split(TABLE_END, 1)[0]
    assert shown.strip() == option_table().strip(), \
        "the options table of docs/usage.md is out of date: python -m nkmpi.options --update docs/usage.md"
