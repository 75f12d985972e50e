"""The README and the pages of docs/ hold together: every relative link leads to a
file that exists (and to a heading in it, when the link names an anchor, by
GitHub's anchor rules), and every `fetchwork ...` command they show exists with
the options shown, as the `fetchwork` click group parses them (condor-style
single-dash options included). Read from the text: no command is run.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import click
import pytest

from fetchwork.cli import main
from fetchwork.submit.options import CondorCommand, condor_args

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
QUICKSTART = [
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/fetchwork demo",
    ".venv/bin/python -m pytest",
]

_FENCE_RE = re.compile(r"^\s*(```|~~~)")
_HEADING_RE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK_RE = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
_CODE_SPAN_RE = re.compile(r"(`+)(.+?)\1", re.DOTALL)
# Redirections end a command's words: `> file`, `>> file`, `2>&1`, `< file`.
_REDIRECTION_RE = re.compile(r"^(\d?>>?|&>|<(?!.*>$)).*")
_ASSIGNMENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Page:
    """A Markdown page split into prose lines and code blocks."""

    path: Path
    prose: tuple[tuple[int, str], ...]  # (line number, text) outside code blocks
    blocks: tuple[tuple[int, str, str], ...]  # (first line, info string, text) of each block


def read_page(path: Path) -> Page:
    prose: list[tuple[int, str]] = []
    blocks: list[tuple[int, str, str]] = []
    block: list[str] | None = None
    start, info = 0, ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE_RE.match(line):
            if block is None:
                block, start, info = [], number + 1, line.strip().strip("`~").strip()
            else:
                blocks.append((start, info, "\n".join(block)))
                block = None
        elif block is not None:
            block.append(line)
        else:
            prose.append((number, line))
    assert block is None, f"{path.name}: a code block opened at line {start - 1} never closes"
    return Page(path, tuple(prose), tuple(blocks))


# -- anchors ----------------------------------------------------------------------

def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: the rendered text in lower case, with
    everything but letters, digits, spaces, hyphens and underscores dropped and
    each space made a hyphen."""
    text = _LINK_RE.sub(lambda match: match["text"], heading)
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "")
    text = re.sub(r"(\*\*|__|\*|(?<!\w)_|_(?!\w))", "", text)  # emphasis markers
    text = text.strip().lower()
    kept = "".join(char for char in text
                   if char in " -_" or unicodedata.category(char)[0] in "LN")
    return kept.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor of a page's headings, repeated names numbered as GitHub does."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _number, line in read_page(path).prose:
        match = _HEADING_RE.match(line)
        if not match:
            continue
        anchor = github_anchor(match[2])
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return frozenset(found)


# -- links ------------------------------------------------------------------------

def paragraphs(page: Page) -> Iterator[tuple[int, str]]:
    """(first line number, text) of each run of prose lines between blank lines and
    code blocks: code spans and links may go on over a line break."""
    first, lines, last = 0, [], -1
    for number, line in (*page.prose, (-1, "")):
        if not line.strip() or number != last + 1:
            if lines:
                yield first, "\n".join(lines)
            first, lines = number, []
        if line.strip():
            if not lines:
                first = number
            lines.append(line)
        last = number


def _line_of(first: int, text: str, offset: int) -> int:
    return first + text.count("\n", 0, offset)


def prose_links(page: Page) -> Iterator[tuple[int, str]]:
    """(line, target) of every Markdown link outside code blocks and code spans."""
    for first, text in paragraphs(page):
        # Code spans become blanks of the same length, so offsets keep their lines.
        bare = _CODE_SPAN_RE.sub(lambda match: re.sub(r"[^\n]", " ", match[0]), text)
        for match in _LINK_RE.finditer(bare):
            yield _line_of(first, bare, match.start()), match["target"]


def prose_links_of(path: Path) -> list[str]:
    return [target for _n, target in prose_links(read_page(path))]


def link_problem(page: Path, target: str) -> str | None:
    """Why a link target of `page` does not resolve, or None (external links pass)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return None  # http:, https:, mailto: ...
    path_text, _hash, anchor = target.partition("#")
    destination = (page.parent / unquote(path_text)).resolve() if path_text else page
    try:
        destination.relative_to(ROOT)
    except ValueError:
        return f"{target}: leads outside the repository"
    if not destination.exists():
        return f"{target}: no such file"
    if anchor:
        if destination.suffix != ".md" or destination.is_dir():
            return f"{target}: an anchor into something that is not a Markdown page"
        if unquote(anchor) not in anchors(destination):
            return f"{target}: {destination.name} has no heading with anchor #{anchor}"
    return None


# -- fetchwork commands -----------------------------------------------------------

def _logical_lines(block: str) -> Iterator[str]:
    """A code block's lines, with backslash continuations joined."""
    pending = ""
    for line in block.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def shell_segments(line: str) -> list[str]:
    """The simple commands of one line of shell text: split where a command may
    end or begin (`&&`, `||`, `;`, a pipe ` | `, `(`, `)`, backquotes, and in and
    out of command substitutions `$(...)`), outside quotes; a `#` that starts a
    word ends the line (a comment). `a|b` without spaces stays one word."""
    segments: list[str] = []
    current: list[str] = []
    quote: str | None = None
    outer: list[str | None] = []  # the quote state around each open `$(`

    def cut() -> None:
        segments.append("".join(current))
        current.clear()

    index = 0
    while index < len(line):
        char = line[index]
        if quote == "'":
            quote = None if char == "'" else quote
        elif char == "\\":
            current.append(line[index:index + 2])
            index += 2
            continue
        elif line.startswith("$(", index):
            cut()
            outer.append(quote)
            quote = None
            index += 2
            continue
        elif char == ")" and outer and quote is None:
            cut()
            quote = outer.pop()
            index += 1
            continue
        elif quote == '"':
            quote = None if char == '"' else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            break
        elif line.startswith(("&&", "||"), index):
            cut()
            index += 2
            continue
        elif char in ";()`" or (char == "|" and line[index - 1:index].isspace()
                               and line[index + 1:index + 2].isspace()):
            cut()
            index += 1
            continue
        current.append(char)
        index += 1
    cut()
    return segments


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment)
    except ValueError:  # an unbalanced quote: shell text this test cannot read
        return segment.split()


def fetchwork_commands(text: str) -> Iterator[list[str]]:
    """The argument words of each `fetchwork` command in one line of shell text
    (after the program name), one list per command: a command starts where a
    shell command may (after environment assignments), with a program named
    `fetchwork` or `.../bin/fetchwork`; a redirection ends its words."""
    for segment in shell_segments(text):
        words = _words(segment)
        while words and _ASSIGNMENT_RE.match(words[0]):
            words = words[1:]
        if words and (words[0] == "fetchwork" or words[0].endswith("/bin/fetchwork")):
            redirected = [i for i, word in enumerate(words) if _REDIRECTION_RE.match(word)]
            yield words[1:redirected[0] if redirected else len(words)]


def shown_commands(page: Page) -> Iterator[tuple[int, list[str]]]:
    """(line, argument words) of every `fetchwork` command in a page's code blocks
    and in the code spans of its prose. A block fenced as `text` (a picture, a
    program's output) holds no commands."""
    for start, info, block in page.blocks:
        if info == "text":
            continue
        for offset, line in enumerate(_logical_lines(block)):
            for words in fetchwork_commands(line):
                yield start + offset, words
    for first, text in paragraphs(page):
        for match in _CODE_SPAN_RE.finditer(text):
            for words in fetchwork_commands(match[2].replace("\n", " ")):
                yield _line_of(first, text, match.start()), words


def _cleaned(words: list[str]) -> list[str]:
    """Words as a reader types them: placeholders' brackets and an ellipsis dropped."""
    out = []
    for word in words:
        word = word.strip("[]")
        if word and word not in ("...", "|"):
            out.append(word)
    return out


def _context(command: click.Command, name: str, parent: click.Context | None
             ) -> click.Context:
    return click.Context(command, info_name=name, parent=parent, **command.context_settings)


def _parse(command: click.Command, ctx: click.Context, args: list[str]) -> list[str]:
    """The words left after click's parser took `command`'s options (positional
    arguments, in order); raises click.UsageError for an option that does not exist."""
    if isinstance(command, CondorCommand):
        args = condor_args(command, args)
    _values, rest, _order = command.make_parser(ctx).parse_args(list(args))
    return rest


def command_problem(words: list[str]) -> str | None:
    """Why `fetchwork WORDS` is not a command with those options, or None.

    `a|b|c` in a command's place names alternatives (`fetchwork rm|hold|release`);
    each is checked with the rest of the words. Options are parsed as click
    parses them (condor-style `-nobatch` through `CondorCommand`), arguments are
    not: documentation shows placeholders (IDS, LOGFILE) for them."""
    return _problem(main, "fetchwork", _cleaned(words), None)


def _problem(command: click.Command, name: str, words: list[str],
             parent: click.Context | None) -> str | None:
    ctx = _context(command, name, parent)
    if not isinstance(command, click.Group):
        try:
            _parse(command, ctx, words)
        except click.UsageError as exc:
            return f"{ctx.command_path}: {exc.format_message()}"
        return None
    try:
        rest = _parse(command, ctx, words)
    except click.UsageError as exc:
        return f"{ctx.command_path}: {exc.format_message()}"
    if not rest:
        return None  # the group itself (`fetchwork`, `fetchwork redis`)
    for choice in rest[0].split("|"):
        sub = command.get_command(ctx, choice)
        if sub is None:
            return f"{ctx.command_path}: no command {choice!r}"
        problem = _problem(sub, choice, rest[1:], ctx)
        if problem:
            return problem
    return None


# -- the tests --------------------------------------------------------------------

@pytest.mark.parametrize("path", PAGES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(path):
    page = read_page(path)
    problems = [f"{path.name}:{number}: {problem}" for number, target in prose_links(page)
                if (problem := link_problem(path, target))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", PAGES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_fetchwork_command_shown_exists_with_its_options(path):
    problems = [f"{path.name}:{number}: fetchwork {' '.join(words)}\n    {problem}"
                for number, words in shown_commands(read_page(path))
                if (problem := command_problem(words))]
    assert not problems, "\n".join(problems)


def test_the_pages_show_commands_and_links_for_these_checks_to_read():
    commands = [words for path in PAGES for _n, words in shown_commands(read_page(path))]
    links = [target for path in PAGES for _n, target in prose_links(read_page(path))]
    assert len(commands) > 50 and len(links) > 50
    assert ["q", "-af", "Owner", "JobStatus"] in commands
    assert any(target.startswith("docs/") for target in prose_links_of(ROOT / "README.md"))



def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / target.partition("#")[0]).resolve()
              for target in prose_links_of(ROOT / "README.md")}
    assert set(PAGES[1:]) <= linked, sorted(
        path.name for path in PAGES[1:] if path not in linked)


def test_the_readme_shows_the_two_quickstart_commands():
    blocks = [text for _n, _info, text in read_page(ROOT / "README.md").blocks]
    assert "\n".join(QUICKSTART) in blocks


# -- the checks catch what they must ----------------------------------------------

@pytest.mark.parametrize("words", [
    ["frobnicate"],                       # no such command
    ["q", "-nosuchoption"],               # no such condor-style option
    ["q", "--nosuchoption"],
    ["submit", "-dryrun", "job.sub"],     # a misspelt option
    ["hold", "12.0", "--for"],            # an option without its value
    ["redis", "restart"],                 # no such subcommand
    ["rm|hold|destroy", "12.0"],          # one alternative that does not exist
    ["wait", "-timeout", "5", "job.log"],
])
def test_a_made_up_command_or_option_is_caught(words):
    assert command_problem(words) is not None


@pytest.mark.parametrize("words", [
    ["q", "-af", "Owner", "JobStatus"],
    ["q", "-format", "%d.", "ClusterId", "-format", "%d\\n", "ProcId"],
    ["q", "-better-analyze", "12.0"],
    ["q", "-watch"],
    ["submit", "-dry-run", "job.sub"],
    ["submit", "--", "/bin/echo", "--not-an-option"],
    ["rm|hold|release", "12.0"],
    ["hold", "12", "--until", "2026-12-01 08:00"],
    ["wait", "[-wait", "SECONDS]", "[-num", "N]", "[-status]", "LOGFILE", "[ID]"],
    ["redis", "start|status|stop"],
    ["hook", "WITHDRAW_SLOT"],
    ["-v", "broker"],
    [],
])
def test_real_commands_pass(words):
    assert command_problem(words) is None


def test_commands_are_found_in_shell_text():
    text = ('FETCHWORK_STATE_DIR=/tmp/x A=1 fetchwork submit -- /bin/hostname && fetchwork q; '
            'eval "$(fetchwork completion bash)" | fetchwork status  # fetchwork nothing')
    assert list(fetchwork_commands(text)) == [
        ["submit", "--", "/bin/hostname"], ["q"], ["completion", "bash"], ["status"]]
    assert list(fetchwork_commands("ln -s /opt/fetchwork/bin/fetchwork /usr/bin/fetchwork")) == []
    assert list(fetchwork_commands(".venv/bin/fetchwork demo")) == [["demo"]]


def test_a_broken_link_or_anchor_is_caught():
    readme = ROOT / "README.md"
    assert link_problem(readme, "docs/design.md") is None
    assert link_problem(readme, "docs/design.md#the-claim") is None
    assert link_problem(readme, "https://example.org/nowhere") is None
    assert link_problem(readme, "docs/no-such-page.md")
    assert link_problem(readme, "docs/design.md#no-such-heading")
    assert link_problem(readme, "#no-such-heading")
    assert link_problem(readme, "../outside.md")


@pytest.mark.parametrize(("heading", "anchor"), [
    ("The starter's start", "the-starters-start"),
    ("1. Certificates and users (once, on the broker host)",
     "1-certificates-and-users-once-on-the-broker-host"),
    ("Dependencies, requeue and run until cancelled",
     "dependencies-requeue-and-run-until-cancelled"),
    ("`chaos.py`", "chaospy"),
    ("Job ads, cluster ads and autoclusters", "job-ads-cluster-ads-and-autoclusters"),
    ("What `fetchwork up` does", "what-fetchwork-up-does"),
    ("snake_case and **bold**", "snake_case-and-bold"),
])
def test_anchors_follow_githubs_rules(heading, anchor):
    assert github_anchor(heading) == anchor


def test_repeated_headings_are_numbered(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Notes\n\n## Notes\n\n```\n# Notes in code\n```\n\n## Notes\n")
    assert anchors(page) == {"notes", "notes-1", "notes-2"}
