#!/usr/bin/env python3
"""tests/systemd/readme_steps.py - the README's install and cluster commands, as the systemd
test (tests/systemd/boot.sh) runs them: one line per command, "MACHINE<TAB>COMMAND".

The block is the fenced one that follows the marker line
    <!-- tests/systemd/boot.sh runs this block -->
in README.md (the single source: the test never has its own copy).  Its comment lines say
where the next commands run; each one must be known here, so that a new section in the README
fails the test until it says where that section runs:
    "on every machine"        -> ab     (install: a, then b)
    "on the first machine"    -> a      (init, its service, the token)
    "on each other machine"   -> b      (the second machine: join, its service)
    "a machine behind a VPN"  -> skip   (the --peer path: tests/integration/join_cli.sh)
    "on any member"           -> a
    "on the coordinator"      -> skip   (cancel ID needs a running job's id)
Commands before the first comment run on a (the first machine).  A trailing "# ..." on a
command line is the README's explanation and is dropped; the rest is printed verbatim.
"""
import sys

MARK = "<!-- tests/systemd/boot.sh runs this block -->"
SECTIONS = [
    ("on every machine", "ab"),
    ("on the first machine", "a"),
    ("on each other machine", "b"),
    ("a machine behind a VPN", "skip"),
    ("on any member", "a"),
    ("on the coordinator", "skip"),
]


def main():
    text = open(sys.argv[1], encoding="utf-8").read().splitlines()
    try:
        i = text.index(MARK)
    except ValueError:
        sys.exit("README.md has no line '%s'" % MARK)
    i += 1
    if i >= len(text) or not text[i].startswith("```"):
        sys.exit("the marker is not followed by a fenced block")
    where = "a"
    out = []
    for line in text[i + 1:]:
        if line.startswith("```"):
            break
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            for key, w in SECTIONS:
                if key in s:
                    where = w
                    break
            else:
                sys.exit("unknown section comment in the README block: %r" % s)
            continue
        cmd = s.split(" #", 1)[0].rstrip()
        for m in (where if where != "skip" else [where]):
            out.append("%s\t%s" % (m, cmd))
    else:
        sys.exit("the README block is not closed")
    if not out:
        sys.exit("the README block has no commands")
    print("\n".join(out))


if __name__ == "__main__":
    main()
