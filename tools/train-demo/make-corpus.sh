#!/bin/sh
# Build corpus.txt (King James Bible, public domain) from the Debian packages bible-kjv + bible-kjv-text:
#   apt-get install -y bible-kjv bible-kjv-text
# One verse per line (references stripped), chapters separated by a blank line.
set -eu
here=$(dirname "$0")
bible -f "Gen1:1-Rev22:21" </dev/null | python3 -c '
import re, sys
prev = None
out = []
for line in sys.stdin:
    m = re.match(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$", line.rstrip("\n"))
    if not m:
        continue
    chap = (m.group(1), m.group(2))
    if prev is not None and chap != prev:
        out.append("")
    prev = chap
    out.append(m.group(4).strip())
sys.stdout.write("\n".join(out) + "\n")
' > "$here/corpus.txt"
wc -c -l "$here/corpus.txt"
