#!/usr/bin/env python3
"""The generated manuals and bash completions list every flag the parsers
know: each flag that `muster [COMMAND] --help` and `musterd --help` show
(their own rendering of the parser tables, not the --dump-options the
manuals are made of) is in muster(1) / musterd(8), every musterd setting is
in musterd.conf(5), and the completion offers each flag in both spellings
(--nproc-per-node and --nproc_per_node) under its subcommand. Every
subcommand `muster --help` lists is checked, and each must show flags; the
verbs a subcommand's usage names (`muster gpu drain N ...`) must be in its
section of muster(1) and be what bash completes after it.

    check_manuals.py MUSTER MUSTERD MANUALS_DIR"""
import os
import re
import shutil
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


def help_text(cmd):
    return subprocess.run(cmd + ["--help"], check=True, capture_output=True, text=True).stdout


def help_flags(cmd):
    out = help_text(cmd)
    return listed(out[out.index("Options:"):]) if "Options:" in out else []


def subcommands(muster):
    """The subcommands `muster --help` lists under Commands:."""
    out = help_text([muster])
    out = out[out.index("Commands:"):out.index("Options:")]
    return re.findall(r"^  ([a-z][\w-]*)  ", out, re.M)


def usage_verbs(muster, command):
    """The verbs of `muster COMMAND VERB ...` lines of its usage (drain,
    undrain of gpu); none for a command whose usage goes on with options."""
    out = help_text([muster, command]).split("\n\n")[0]
    return re.findall(rf"^(?:Usage:)? +muster {command} ([a-z][\w-]*)", out, re.M)


def completed(completion, words, cword):
    """What bash's muster completion offers for COMP_WORDS=words at cword."""
    script = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=' + str(cword) +
              '; _muster; printf "%s\\n" "${COMPREPLY[@]}"')
    out = subprocess.run(["bash", "-c", script, "bash", completion] + words, check=True,
                         capture_output=True, text=True).stdout
    return out.split()


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
    cases = dict(re.findall(r"^    ([\w-]+)\) opts='([^']*)'", completion, re.M))
    first_words = re.search(r"compgen -W '([^']*)'", completion).group(1).split()
    for flag in help_flags([muster]):
        check("muster(1)", roff(flag), page)
        check("muster's completion of the first word", flag, first_words)
    commands = subcommands(muster)
    for expected in ("run", "launch", "status", "gpu", "keygen"):
        check("muster --help's commands", expected, commands)
    for command in commands:
        head = f'.SH "OPTIONS OF MUSTER {command.upper()}"'
        if head not in page:
            failures.append(f"muster(1) lacks {head}")
            continue
        section = page[page.index(head):]
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
        verbs = usage_verbs(muster, command)
        if not verbs:
            continue
        listed_verbs = re.search(rf"^    {command}\) opts='[^']*' verbs='([^']*)'", completion,
                                 re.M)
        offered = listed_verbs.group(1).split() if listed_verbs else []
        if shutil.which("bash"):
            offered = completed(os.path.join(manuals, "muster"), ["muster", command, ""], 2)
        for verb in verbs:
            check(f"muster(1)'s options of {command}", f"\\fB{roff(f'muster {command} {verb}')}",
                  section)
            check(f"the completion of `muster {command} `", verb, offered)
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
