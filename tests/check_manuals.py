#!/usr/bin/env python3
"""The generated manuals and bash completions list every flag the parsers
know: each flag that `muster [COMMAND] --help` and `musterd --help` show
(their own rendering of the parser tables, not the --dump-options the
manuals are made of) is in muster(1) / musterd(8), every musterd setting is
in musterd.conf(5), and the completion offers each flag in both spellings
(--nproc-per-node and --nproc_per_node) under its subcommand.

    check_manuals.py MUSTER MUSTERD MANUALS_DIR"""
import os
import re
import subprocess
import sys

FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9_-]*[a-z0-9]|-[a-zA-Z])(?![\w-])")
failures = []


def listed(text):
    """The flags a help text lists: each entry's own (`  -n, --nproc-per-node N`,
    Boost's `  -h [ --help ]`) and its aliases (`(also --coordinator)`)."""
    flags = set()
    for short, long in re.findall(r"^  (?:(-[a-zA-Z])(?:, | \[ ))?(--[a-z][\w-]*)", text, re.M):
        flags.update(f for f in (short, long) if f)
    for also in re.findall(r"\(also (--[^)]*)\)", text):
        flags.update(FLAG.findall(also))
    return sorted(flags)


def help_flags(cmd):
    out = subprocess.run(cmd + ["--help"], check=True, capture_output=True, text=True).stdout
    return listed(out[out.index("Options:"):])


def read(manuals, name):
    with open(os.path.join(manuals, name)) as f:
        return f.read()


def check(what, flag, text):
    if flag not in text:
        failures.append(f"{what} lacks {flag}")


def roff(flag):
    return flag.replace("-", "\\-")


def main():
    muster, musterd, manuals = sys.argv[1:4]
    page = read(manuals, "muster.1")
    completion = read(manuals, "muster")
    cases = dict(re.findall(r"^    (\w+)\) opts='([^']*)'", completion, re.M))
    first_words = re.search(r"compgen -W '([^']*)'", completion).group(1).split()
    for flag in help_flags([muster]):
        check("muster(1)", roff(flag), page)
        check("muster's completion of the first word", flag, first_words)
    for command in ("run", "launch", "status", "keygen"):
        section = page[page.index(f'.SH "OPTIONS OF MUSTER {command.upper()}"'):]
        section = section[:section.find(".SH", 4)]
        words = cases.get(command, "").split()
        flags = help_flags([muster, command])
        if len(flags) < 2:
            failures.append(f"muster {command} --help shows no flags")
        for flag in flags:
            check(f"muster(1)'s options of {command}", roff(flag), section)
            check(f"the completion of muster {command}", flag, words)
            if flag.startswith("--") and "-" in flag[2:]:
                check(f"the completion of muster {command}", "--" + flag[2:].replace("-", "_"),
                      words)
    daemon_page = read(manuals, "musterd.8")
    conf = read(manuals, "musterd.conf.5")
    daemon_words = re.search(r"compgen -W '([^']*)'", read(manuals, "musterd")).group(1).split()
    out = subprocess.run([musterd, "--help"], check=True, capture_output=True, text=True).stdout
    settings = out[out.index("daemon settings"):]
    for flag in listed(out[out.index("musterd options"):]):
        check("musterd(8)", roff(flag), daemon_page)
        check("musterd's completion", flag, daemon_words)
    names = sorted(set(re.findall(r"^  --([a-z][a-z0-9-]*)", settings, re.M)))
    if len(names) < 10:
        failures.append(f"musterd --help shows only {len(names)} settings")
    for name in names:
        check("musterd.conf(5)", "\\fB" + roff(name) + "\\fR = ", conf)
    for f in failures:
        print(f, file=sys.stderr)
    print(f"{len(failures)} missing" if failures else "every flag is in the manuals")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
