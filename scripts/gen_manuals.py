#!/usr/bin/env python3
"""Writes muster(1), musterd(8), musterd.conf(5) and the bash completions of
muster and musterd from the parsers themselves: it runs the built binaries'
hidden `--dump-options` (one tab-separated line per flag, from the same
tables that parse the command line), so the manuals cannot drift from what
the programs accept. Usage (meson's custom_target does this):

    gen_manuals.py MUSTER MUSTERD VERSION OUTDIR

Dump lines: `command NAME SUMMARY` (muster's subcommands), `flag COMMAND
SPELLINGS SHORT METAVAR HELP` (COMMAND: a muster subcommand, or musterd's
`command-line` and `settings`; SPELLINGS: the flag's long names, comma
separated, the first the main one), `verb COMMAND VERB SYNOPSIS SUMMARY` (a
subcommand's own commands, its first positional: `muster gpu drain`)."""
import os
import subprocess
import sys


def dump(program):
    out = subprocess.run([program, "--dump-options"], check=True, capture_output=True,
                         text=True).stdout
    commands, flags, verbs = [], {}, {}
    for line in out.splitlines():
        f = line.split("\t")
        if f[0] == "command":
            commands.append((f[1], f[2]))
        elif f[0] == "verb":
            verbs.setdefault(f[1], []).append({"name": f[2], "synopsis": f[3], "summary": f[4]})
        elif f[0] == "flag":
            flags.setdefault(f[1], []).append(
                {"names": f[2].split(","), "short": f[3], "metavar": f[4], "help": f[5]})
    return commands, flags, verbs


def roff(text):
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text[:1] in (".", "'") else text


def tagged(flag, style="flag"):
    """A .TP entry: the flag's spellings, its value, its help."""
    if style == "setting":
        head = f"\\fB{roff(flag['names'][0].lstrip('-'))}\\fR = \\fI{roff(flag['metavar'] or 'true')}\\fR"
    else:
        names = ([f"-{flag['short']}"] if flag["short"] else []) + [flag["names"][0]]
        head = ", ".join(f"\\fB{roff(n)}\\fR" for n in names)
        if flag["metavar"]:
            head += f" \\fI{roff(flag['metavar'])}\\fR"
    text = flag["help"]
    if len(flag["names"]) > 1 and style == "flag":
        text += " (also " + ", ".join(flag["names"][1:]) + ")"
    return f".TP\n{head}\n{roff(text)}\n"


def page(name, section, version, title, summary, synopsis, body):
    return (f'.TH {name.upper()} {section} "" "muster {version}" "{title}"\n'
            f".SH NAME\n{roff(name)} \\- {roff(summary)}\n.SH SYNOPSIS\n{synopsis}\n{body}")


def verb_entry(command, verb):
    """A .TP entry of a subcommand's verb: `muster gpu drain N --reason TEXT`."""
    synopsis = " ".join(f"\\fI{w}\\fR" if w.isupper() else roff(w)
                        for w in verb["synopsis"].split())
    return (f".TP\n\\fB{roff(f'muster {command} ' + verb['name'])}\\fR {synopsis}\n"
            f"{roff(verb['summary'])}\n")


# What the manuals say beyond the parsers' tables: exit codes, the MUSTER_*
# variables each program reads (every one), the files, and examples.
MUSTER_EXIT = [
    ("0", "success: the job's workers all exited 0, or the command did what was asked"),
    ("1", "muster could not do it: no daemon, a refused request, a failed start; the "
          "message says why and what to do"),
    ("2", "usage: a bad flag, a bad MUSTER_* variable, an unknown job; nothing was started"),
    ("N", "muster run and launch: the exit code of the worker that failed (128 + S when "
          "signal S ended it; 130 and 143 when muster run itself was interrupted)"),
    ("127", "muster run: PROGRAM could not be run (not found, not executable)"),
]
MUSTERD_EXIT = [
    ("0", "stopped by SIGTERM or SIGINT, or \\-\\-check\\-config found no error"),
    ("1", "a failure at the start or later: the runtime directory refused or held by another "
          "musterd, a socket that cannot be bound"),
    ("2", "a bad option, config line or value; nothing was bound"),
]
CLIENT_ENV = [
    ("MUSTER_ENDPOINT", "the daemon to use, any ZeroMQ endpoint (default: "
                        "ipc://DIR/musterd.sock of MUSTER_RUNTIME_DIR)"),
    ("MUSTER_RUNTIME_DIR", "the directory of the daemon's socket (default: /run/muster for "
                           "root; else $XDG_RUNTIME_DIR/muster, else /tmp/muster\\-UID, and "
                           "/run/muster when no daemon of the user's own runs there)"),
    ("MUSTER_TIMEOUT_S", "seconds a blocking call (a barrier, a key wait) waits before it fails "
                         "(default 300; 0 to 86400)"),
    ("MUSTER_LOG_LEVEL", "error, warning, notice, info or debug: what an embedded daemon says "
                         "on stderr (muster run \\-v sets info)"),
    ("MUSTER_PYTHON", "the interpreter for .py programs and \\-m (default: the first python3 "
                      "on PATH)"),
    ("MUSTER_SYNC_REDUCE", "muster or torch: where the Python module's sync_model averages "
                           "(default: torch under gloo)"),
    ("MUSTER_BCAST", "shm, pool, stream or whole: force one path of the local broadcast "
                     "(benchmarks)"),
    ("MUSTER_CHECKSUM", "crc32c or xxh3 instead of the default mulsum for broadcast chunks "
                        "(benchmarks)"),
    ("NO_COLOR", "when set and not empty, no colors (muster status \\-\\-watch)"),
    ("PET_FLAG", "muster run and launch: the default of \\-\\-flag, as torchrun reads them "
                 "(PET_NPROC_PER_NODE=4)"),
]
WORKER_ENV = [
    ("MUSTER_ENDPOINT, MUSTER_JOB_ID, MUSTER_GENERATION", "the daemon, the job and its "
     "generation (restart count), for libmuster"),
    ("MUSTER_DEVICE", "the ordinal of the GPU leased to the rank (CUDA_DEVICE_ORDER=PCI_BUS_ID)"),
    ("MUSTER_WANTS_GPU", "1 when the job leases GPUs, 0 for \\-\\-cpu"),
    ("MUSTER_RUN_GUARD", "a token muster run's guardian finds the job's processes by"),
]
DAEMON_ENV = [
    ("MUSTER_LOG_SINK", "journal, stderr or file:PATH: where log lines go (default: the "
                        "journal when stderr is the journal, else stderr)"),
    ("MUSTER_NVML_LIBRARY", "the NVML library to load instead of libnvidia\\-ml.so.1"),
    ("NOTIFY_SOCKET, WATCHDOG_USEC, JOURNAL_STREAM", "set by systemd: readiness, the watchdog, "
     "the journal"),
]
CLIENT_FILES = [
    ("/run/muster/musterd.sock", "the node's daemon (members of the muster group)"),
    ("$XDG_RUNTIME_DIR/muster/musterd.sock, /tmp/muster\\-UID/musterd.sock",
     "a daemon of the user's own, which muster run starts when none runs"),
]
DAEMON_FILES = [
    ("/etc/muster/musterd.conf", "the settings, read when it exists (\\-\\-config, "
                                 "\\-\\-no\\-config)"),
    ("/usr/share/doc/muster/musterd.conf.example", "every setting, commented"),
    ("/run/muster/musterd.sock", "the local socket (root:muster 0660 under the unit)"),
    ("/run/muster/state.msgpack, /run/muster/state.log", "jobs, leases and stores, kept across "
                                                         "a restart (\\-\\-state\\-dir)"),
]
MUSTER_EXAMPLES = [
    ("4 workers as torchrun would start them", "muster run \\-n 4 train.py \\-\\-lr 0.1"),
    ("a CPU job, no daemon needed", "muster run \\-n 2 \\-\\-cpu ./trainer"),
    ("one node of four (each node runs the same)",
     "muster run \\-\\-nnodes 4 \\-n 8 \\-\\-rdzv\\-endpoint node0 "
     "\\-\\-rdzv\\-id run42 train.py"),
    ("which rank is stuck where", "muster status \\-\\-watch"),
    ("take GPU 3 out of service", "muster gpu drain 3 \\-\\-reason \"ECC errors\""),
]
MUSTERD_EXAMPLES = [
    ("a daemon with 4 pretend GPUs, to try GPU jobs", "musterd \\-\\-simulate\\-gpus 4 &"),
    ("check the config file", "musterd \\-\\-check\\-config"),
    ("metrics on muster's own port (29401)", "musterd \\-\\-metrics\\-listen 127.0.0.1"),
]


def entries(pairs):
    """A .TP entry a pair: the term in bold, its text (already roff)."""
    return "".join(f".TP\n\\fB{term}\\fR\n{text}\n" for term, text in pairs)


def examples(pairs):
    """Each example: what it does, then the command as a literal block."""
    return "".join(f".PP\n{text}:\n.PP\n.nf\n.RS\n{cmd}\n.RE\n.fi\n" for text, cmd in pairs)


def muster_page(version, commands, flags, verbs):
    body = (".SH DESCRIPTION\nmuster launches distributed training jobs with torchrun's "
            "command line and environment, and talks to the node's \\fBmusterd\\fR(8).\n"
            ".SH OPTIONS\n" + "".join(tagged(f) for f in flags["muster"]) +
            ".SH COMMANDS\n")
    for name, summary in commands:
        body += f".TP\n\\fB{roff(name)}\\fR\n{roff(summary)}\n"
    for name, _ in commands:
        body += f'.SH "OPTIONS OF MUSTER {name.upper()}"\n'
        if name in ("run", "launch"):
            body += (f"muster {name} [\\fIOPTIONS\\fR] \\fIPROGRAM\\fR [\\fIARGS\\fR...]. "
                     "Every flag may also be set by a PET_\\fIFLAG\\fR variable "
                     "(PET_NPROC_PER_NODE=4), as torchrun's are.\n")
        body += "".join(verb_entry(name, v) for v in verbs.get(name, []))
        body += "".join(tagged(f) for f in flags.get(name, []))
        body += (".SH \"EXIT STATUS\"\n" + entries(MUSTER_EXIT) +
             ".SH ENVIRONMENT\n" + entries(CLIENT_ENV) +
             "Workers started by \\fBmuster run\\fR get these besides torchrun's (RANK, "
             "LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*):\n" +
             entries(WORKER_ENV) +
             ".SH FILES\n" + entries(CLIENT_FILES) +
             ".SH EXAMPLES\n" + examples(MUSTER_EXAMPLES) +
             ".SH \"SEE ALSO\"\n\\fBmusterd\\fR(8), \\fBmusterd.conf\\fR(5)\n")
    return page("muster", 1, version, "User Commands",
                "launch and inspect distributed training jobs (a drop-in for torchrun)",
                ".B muster\n\\fICOMMAND\\fR [\\fIOPTIONS\\fR] [\\fIPROGRAM\\fR [\\fIARGS\\fR...]]",
                body)


def musterd_page(version, flags):
    body = (".SH DESCRIPTION\nmusterd owns a node's GPUs and the bookkeeping of the ranks "
            "that run there: leases, rank assignment, the job stores, multi-node "
            "rendezvous. Settings come from the command line and from "
            "\\fBmusterd.conf\\fR(5); the command line wins.\n.SH OPTIONS\n")
    body += "".join(tagged(f) for f in flags["command-line"])
    body += ".SH SETTINGS\nOn the command line or, without the dashes, in the config file.\n"
    body += "".join(tagged(f) for f in flags["settings"])
    body += (".SH \"EXIT STATUS\"\n" + entries(MUSTERD_EXIT) +
             ".SH ENVIRONMENT\n" + entries(DAEMON_ENV) +
             ".SH FILES\n" + entries(DAEMON_FILES) +
             ".SH EXAMPLES\n" + examples(MUSTERD_EXAMPLES))
    body += '.SH "SEE ALSO"\n\\fBmuster\\fR(1), \\fBmusterd.conf\\fR(5)\n'
    return page("musterd", 8, version, "System Administration",
                "node daemon for GPU leases, ranks and job stores",
                ".B musterd\n[\\fIOPTIONS\\fR]", body)


def conf_page(version, flags):
    body = (".SH DESCRIPTION\n\\fBmusterd\\fR(8) reads /etc/muster/musterd.conf when it "
            "exists (or the file of \\-\\-config): one \\fIname\\fR = \\fIvalue\\fR a line, "
            "the names of musterd's long options; '#' at the start of a line or after a "
            "blank starts a comment. A name may be spelled with '_' for '-' "
            "(simulate_gpus), as on the command line. Unknown names (with a \\(lqdid you "
            "mean\\(rq), sections and a name set twice are errors (exit 2).\n.SH SETTINGS\n")
    body += "".join(tagged(f, "setting") for f in flags["settings"])
    body += (".SH FILES\n" + entries(DAEMON_FILES[:2]) +
             ".SH EXAMPLES\n" + examples([("A node that peers with others and serves metrics",
                                            "peer-bind = 0.0.0.0\npeer-key-file = /etc/muster/peer.key\n"
                                            "metrics-listen = 127.0.0.1\nstuck-after = 120")]))
    body += '.SH "SEE ALSO"\n\\fBmusterd\\fR(8), \\fBmuster\\fR(1)\n'
    return page("musterd.conf", 5, version, "File Formats", "musterd's settings",
                "/etc/muster/musterd.conf", body)


def words(flag_list):
    out = []
    for f in flag_list:
        out += ([f"-{f['short']}"] if f["short"] else []) + f["names"]
    return " ".join(out)


def muster_completion(commands, flags, verbs):
    """Muster's own flags and the subcommands first; after a subcommand its
    flags, and its verbs (`muster gpu drain`) as the word after it."""
    def case(name):
        verb_words = " ".join(v["name"] for v in verbs.get(name, []))
        return (f"    {name}) opts='{words(flags.get(name, []))}'" +
                (f" verbs='{verb_words}'" if verb_words else "") + " ;;\n")
    cases = "".join(case(name) for name, _ in commands)
    names = " ".join(name for name, _ in commands)
    return f"""# bash completion for muster (generated from its parsers)
_muster() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} opts verbs
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W '{names} {words(flags["muster"])}' -- "$cur"))
    return
  fi
  case ${{COMP_WORDS[1]}} in
{cases}    *) return ;;
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  elif [[ $COMP_CWORD -eq 2 && -n $verbs ]]; then
    COMPREPLY=($(compgen -W "$verbs" -- "$cur"))
  fi
}}
complete -o default -F _muster muster
"""


def musterd_completion(flags):
    opts = words(flags["command-line"] + flags["settings"])
    return f"""# bash completion for musterd (generated from its parser)
_musterd() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}}
  [[ $cur == -* ]] && COMPREPLY=($(compgen -W '{opts}' -- "$cur"))
}}
complete -o default -F _musterd musterd
"""


def main():
    muster, musterd, version, outdir = sys.argv[1:5]
    commands, muster_flags, muster_verbs = dump(muster)
    _, musterd_flags, _ = dump(musterd)
    files = {
        "muster.1": muster_page(version, commands, muster_flags, muster_verbs),
        "musterd.8": musterd_page(version, musterd_flags),
        "musterd.conf.5": conf_page(version, musterd_flags),
        "muster": muster_completion(commands, muster_flags, muster_verbs),
        "musterd": musterd_completion(musterd_flags),
    }
    for name, text in files.items():
        with open(os.path.join(outdir, name), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
