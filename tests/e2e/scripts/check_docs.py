#!/usr/bin/env python3
"""Checks the documentation (README.md, ARCHITECTURE.md, CONTRIBUTING.md and docs/*.md)
against the code.

- every relative link and image resolves to a file inside the repository, and a link's
  #anchor to a heading of its target page;
- every `driftless <command>` in a shell block (```sh, ```bash, ```console) or in inline code
  that starts with it is a command of the build (`driftless <command> --help` exits 0 and prints that command's usage; `bench`
  with its subcommand);
- README.md stays short (at most 200 lines) and shows the two commands `make demo` and
  `make test`;
- every test binary run in a shell block (`build/tests/test_data --gtest_filter='Sampler*'`)
  is one of tests/CMakeLists.txt's, and, where it is built, its filter selects a test;
- every key of `driftless batch`'s JSON (the names a user reads) is a term of ARCHITECTURE.md's
  glossary, written as `key`;
- no page cites the history of the work (a session or an issue number) instead of what holds;
- docs/configs.md's config reference is what `driftless config --reference` prints, and
  docs/regression.md's regression config reference what `driftless regress --reference`
  prints.

Usage: check_docs.py SOURCE_DIR DRIFTLESS_BINARY [--update-config-reference]
"""
import json
import pathlib
import re
import subprocess
import sys

# (page, command, begin marker, end marker) of each generated key reference.
REFERENCES = [
    ("docs/configs.md", ["config", "--reference"],
     "<!-- config-reference: begin (driftless config --reference) -->",
     "<!-- config-reference: end -->"),
    ("docs/regression.md", ["regress", "--reference"],
     "<!-- regress-reference: begin (driftless regress --reference) -->",
     "<!-- regress-reference: end -->"),
]
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
COMMAND = re.compile(r"(?:^|[\s/;&|(`])driftless\s+([a-z][a-z0-9-]*)(?:\s+([a-z][a-z0-9-]*))?")


def pages(root):
    return ([root / "README.md", root / "ARCHITECTURE.md", root / "CONTRIBUTING.md"]
            + sorted((root / "docs").glob("*.md")))


def split_blocks(text):
    """Yields (is_code, language, lines) runs of a Markdown page."""
    prose, code, lang, fence = [], None, "", None
    for line in text.splitlines():
        m = FENCE.match(line)
        if code is None and m:
            yield False, "", prose
            prose, code, lang, fence = [], [], m.group(3).lower(), m.group(2)
        elif code is not None and line.strip().startswith(fence[0] * len(fence)) and not line.strip()[len(fence):].strip():
            yield True, lang, code
            code = None
        elif code is not None:
            code.append(line)
        else:
            prose.append(line)
    yield False, "", prose
    if code is not None:
        yield True, lang, code


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*|_(?=\w)|(?<=\w)_", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    for is_code, _, lines in split_blocks(path.read_text()):
        if is_code:
            continue
        for line in lines:
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                s = slug(m.group(1))
                n = seen.get(s, 0)
                seen[s] = n + 1
                out.add(s if n == 0 else f"{s}-{n}")
    return out


def check_links(root, errors):
    for page in pages(root):
        rel = page.relative_to(root)
        for is_code, _, lines in split_blocks(page.read_text()):
            if is_code:
                continue
            text = "\n".join(lines)
            text = re.sub(r"`[^`\n]*`", "", text)  # links inside inline code are not links
            for target in LINK.findall(text):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page.resolve()
                if root.resolve() not in dest.parents and dest != root.resolve():
                    errors.append(f"{rel}: link '{target}' leaves the repository")
                elif not dest.exists():
                    errors.append(f"{rel}: link '{target}' does not resolve ({dest} is missing)")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    errors.append(f"{rel}: link '{target}': no heading with anchor #{anchor} in "
                                  f"{dest.relative_to(root.resolve())}")


def check_commands(root, binary, errors):
    subcommands = {"bench"}  # commands whose first argument is itself a command
    checked = {}
    for page in pages(root):
        rel = page.relative_to(root)
        for is_code, lang, lines in split_blocks(page.read_text()):
            if is_code and lang not in ("sh", "bash", "shell", "console"):
                continue
            if not is_code:  # inline code that starts with a command: `driftless plot RUN_DIR`
                lines = re.findall(r"`((?:\S*/)?driftless [^`]*)`", "\n".join(lines))
            for line in lines:
                line = line.split("#", 1)[0] if not line.lstrip().startswith("$") else line
                for m in COMMAND.finditer(line):
                    cmd = [m.group(1)]
                    if m.group(1) in subcommands and m.group(2):
                        cmd.append(m.group(2))
                    key = " ".join(cmd)
                    if key not in checked:
                        # CLI11 answers `driftless nonsense --help` with the main help and
                        # status 0, so the usage line must also name the command itself.
                        r = subprocess.run([binary, *cmd, "--help"], stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True)
                        usage = re.search(r"^Usage: \S*driftless " + re.escape(key) + r"( |$)",
                                          r.stdout, re.M)
                        checked[key] = r.returncode == 0 and usage is not None
                        print(f"driftless {key} --help: exit {r.returncode}, "
                              f"{'its own usage' if usage else 'NOT its own usage'}")
                    if not checked[key]:
                        errors.append(f"{rel}: `driftless {key}` is not a command of "
                                      f"{binary} (`driftless {key} --help` fails)")
    if not checked:
        errors.append("README.md and docs/ show no `driftless <command>` in a shell block")


TEST_BINARY = re.compile(r"(?:^|\s)(?:\S*/)?tests/(test_[a-z0-9_]+)(?:\s+--gtest_filter=(\S+))?")


def check_test_commands(root, binary, errors):
    """A test binary a page runs exists, and its --gtest_filter selects at least one test."""
    declared = set(re.findall(r"dl_test_binary\((test_\w+)",
                              (root / "tests" / "CMakeLists.txt").read_text()))
    build = pathlib.Path(binary).resolve().parent.parent  # BUILD/apps/driftless
    for page in pages(root):
        rel = page.relative_to(root)
        for is_code, lang, lines in split_blocks(page.read_text()):
            if not is_code or lang not in ("sh", "bash", "shell", "console"):
                continue
            for line in lines:
                for name, pattern in TEST_BINARY.findall(line.split("#", 1)[0]):
                    if name not in declared:
                        errors.append(f"{rel}: `tests/{name}` is not a test binary of "
                                      "tests/CMakeLists.txt")
                        continue
                    exe = build / "tests" / name
                    if not pattern or not exe.exists():
                        continue
                    r = subprocess.run([str(exe), "--gtest_list_tests",
                                        "--gtest_filter=" + pattern.strip("'\"")],
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                    if r.returncode != 0 or not re.search(r"^  \S", r.stdout, re.M):
                        errors.append(f"{rel}: `tests/{name} --gtest_filter={pattern}` selects "
                                      "no test")


def json_keys(value, keys):
    if isinstance(value, dict):
        for k, v in value.items():
            keys.add(k)
            json_keys(v, keys)
    elif isinstance(value, list):
        for v in value:
            json_keys(v, keys)
    return keys


def check_glossary(root, binary, errors):
    """The keys `driftless batch` prints (a context-parallel a2a rank: every field) are
    glossary terms."""
    text = (root / "ARCHITECTURE.md").read_text()
    if "\n## Glossary\n" not in text:
        errors.append("ARCHITECTURE.md has no ## Glossary section")
        return
    glossary = text.split("\n## Glossary\n", 1)[1].split("\n## ", 1)[0]
    r = subprocess.run([binary, "batch", "-c", str(root / "configs/runs/regress_tiny.yaml"),
                        "--set", "distributed.context_parallel.size=2", "--set",
                        "distributed.context_parallel.kind=a2a", "--rank", "0", "--compact"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        errors.append(f"driftless batch failed: {r.stdout.strip()[:300]}")
        return
    for key in sorted(json_keys(json.loads(r.stdout), set())):
        if f"`{key}`" not in glossary:
            errors.append(f"`driftless batch` prints `{key}`, which ARCHITECTURE.md's glossary "
                          "does not define")


def check_history(root, errors):
    """Pages state what holds; BENCHMARKS.md keeps the history of measurements."""
    for page in pages(root):
        for n, line in enumerate(page.read_text().splitlines(), 1):
            if re.search(r"\bsession \d+|\(issue \d+\)", line):
                errors.append(f"{page.relative_to(root)}:{n}: cites a session or an issue "
                              "(name the BENCHMARKS.md entry by its subject instead)")


def check_readme(root, errors):
    text = (root / "README.md").read_text()
    lines = text.count("\n")
    if lines > 200:
        errors.append(f"README.md has {lines} lines; keep it to 200 and move details to docs/")
    for command in ("make demo", "make test"):
        if command not in text:
            errors.append(f"README.md does not show `{command}`")


def check_config_reference(root, binary, errors, update):
    for name, command, begin, end in REFERENCES:
        page = root / name
        text = page.read_text()
        if begin not in text or end not in text:
            errors.append(f"{name} lacks the markers {begin} ... {end}")
            continue
        table = subprocess.run([binary] + command, check=True, stdout=subprocess.PIPE,
                               text=True).stdout.strip()
        head, rest = text.split(begin, 1)
        current, tail = rest.split(end, 1)
        if current.strip() == table:
            continue
        if update:
            page.write_text(f"{head}{begin}\n{table}\n{end}{tail}")
            print(f"{name}: key reference updated")
            continue
        errors.append(f"{name}: the key reference differs from `driftless {' '.join(command)}`; "
                      "regenerate it with `python3 tests/e2e/scripts/check_docs.py . "
                      "build/apps/driftless --update-config-reference`")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2:
        print(__doc__)
        return 2
    root, binary = pathlib.Path(args[0]), args[1]
    errors = []
    check_links(root, errors)
    check_commands(root, binary, errors)
    check_test_commands(root, binary, errors)
    check_glossary(root, binary, errors)
    check_history(root, errors)
    check_readme(root, errors)
    check_config_reference(root, binary, errors, "--update-config-reference" in sys.argv)
    for e in errors:
        print("FAIL:", e)
    print(f"{len(pages(root))} pages checked, {len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
