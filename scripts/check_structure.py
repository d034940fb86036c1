#!/usr/bin/env python3
"""Checks the shape rules of the product code (daemon/, client/, common/).

- No .cpp/.hpp/.h file over 450 lines.
- No function over 80 lines, unless the comment right above it says why,
  with the words "Longer than 80 lines because".
- Layering: nothing under daemon/core/ includes a header of daemon/cluster/,
  daemon/server/ or daemon/peer/ (cluster -> core, never back).

Prints one line per breach and exits 1 if there is any. The function finder
is a brace scanner, not a parser: comments and literals are blanked first, a
brace opened outside any function whose header holds a parameter list starts
a function, and the function ends at its matching brace.
"""
import os
import re
import sys

MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 80
REASON = "Longer than 80 lines because"
FOLDERS = ("daemon", "client", "common")
SUFFIXES = (".cpp", ".hpp", ".h")
CORE_MAY_NOT_INCLUDE = ("cluster/", "server/", "peer/")


def blank_comments_and_literals(text):
    """Replaces comments, strings and chars by spaces, keeping newlines."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # digit separator 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """Yields (first_line, last_line, header) of each function body."""
    code = blank_comments_and_literals(text)
    # Preprocessor lines are not code the brace scanner understands.
    code = "\n".join(" " * len(l) if l.lstrip().startswith("#") else l for l in code.split("\n"))
    stack = []  # 'scope' (namespace/class/extern/init) or 'func' or 'block'
    header_start = 0
    func_start = None
    for i, c in enumerate(code):
        if c in ";":
            if not stack or stack[-1] == "scope":
                header_start = i + 1
        elif c == "{":
            inside_function = any(k != "scope" for k in stack)
            if inside_function:
                stack.append("block")
                continue
            header = code[header_start:i]
            h = " ".join(header.split())
            is_scope = (
                re.search(r"\b(namespace|class|struct|union|enum)\b", h) and "(" not in h.split(":")[0]
            ) or h.startswith("extern") or h.endswith("=") or "(" not in h
            if is_scope:
                stack.append("scope")
                header_start = i + 1
            else:
                stack.append("func")
                lead = len(header) - len(header.lstrip())
                func_start = (code.count("\n", 0, header_start + lead) + 1, h)
        elif c == "}":
            if not stack:
                continue
            kind = stack.pop()
            if kind == "func" and func_start:
                yield func_start[0], code.count("\n", 0, i) + 1, func_start[1]
                func_start = None
            if not stack or stack[-1] == "scope":
                header_start = i + 1


def check_file(path, problems):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    lines = text.split("\n")
    count = len(lines) - (1 if text.endswith("\n") else 0)
    if count > MAX_FILE_LINES:
        problems.append(f"{path}: {count} lines (at most {MAX_FILE_LINES})")
    for first, last, header in functions(text):
        length = last - first + 1
        if length <= MAX_FUNCTION_LINES:
            continue
        above = []
        k = first - 2
        while k >= 0 and lines[k].strip().startswith(("//", "*", "/*")):
            above.append(lines[k])
            k -= 1
        if any(REASON in l for l in above):
            continue
        name = header.split("(")[0].split()[-1] if header.split("(")[0].split() else header[:40]
        problems.append(f"{path}:{first}: function {name} has {length} lines (at most "
                        f"{MAX_FUNCTION_LINES}, or say why above it: '{REASON} ...')")
    if path.replace(os.sep, "/").startswith("daemon/core/"):
        for n, l in enumerate(lines, 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', l)
            if m and m.group(1).startswith(CORE_MAY_NOT_INCLUDE):
                problems.append(f"{path}:{n}: daemon/core includes {m.group(1)} (cluster -> core, never back)")


def self_test():
    """The rules must be able to fail: a tree that breaks each one is caught,
    and a long function with its reason written above it is let through."""
    import tempfile

    body = "\n".join(f"  x += {i};" for i in range(90))
    files = {
        "daemon/core/a.cpp": '#include "cluster/coord.hpp"\n',
        "client/lib/b.cpp": f"int f(int x) {{\n{body}\n  return x;\n}}\n",
        "client/lib/c.cpp": f"// Longer than 80 lines because it is a test.\nint g(int x) {{\n{body}\n  return x;\n}}\n",
        "common/d.hpp": "int y;\n" * 451,
        "common/e.cpp": 'namespace n {\nstruct S {\n  int f() const { return 1; }\n};\nconst char* s = "}{";\n}\n',
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        problems = []
        old = os.getcwd()
        os.chdir(root)
        try:
            for rel in sorted(files):
                check_file(rel, problems)
        finally:
            os.chdir(old)
    want = ["daemon/core/a.cpp:1: daemon/core includes", "client/lib/b.cpp:1: function f has 93",
            "common/d.hpp: 451 lines"]
    missing = [w for w in want if not any(p.startswith(w) for p in problems)]
    extra = [p for p in problems if not any(p.startswith(w) for w in want)]
    if missing or extra or len(problems) != len(want):
        print("self-test failed: missing", missing, "unexpected", extra)
        return 1
    print("self-test: each rule catches its breach")
    return 0


def main():
    if sys.argv[1:2] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    os.chdir(root)
    problems = []
    for folder in FOLDERS:
        for dirpath, _, files in os.walk(folder):
            for name in sorted(files):
                if name.endswith(SUFFIXES):
                    check_file(os.path.join(dirpath, name), problems)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} breach(es) of the shape rules")
        return 1
    print("shape rules hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
