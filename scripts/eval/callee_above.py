#!/usr/bin/env python3
"""How often a completion query's callee is named in its file above the query's lines.

Usage: scripts/eval/callee_above.py SET_DIR [SET_DIR ...]
  Each SET_DIR holds queries.jsonl and corpus-full/ (shared/eval's format, `tabby eval
  generate`'s output). For each completion query it looks for the callee's name as a whole
  word in the lines of the query's file before the call line. The query's own lines never
  hold it (the sets drop such cases), so a hit is above them: what the names leg of
  services/code/file_names.rs can read. Standard library only.
"""

import json
import os
import re
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip().split('\n')[2].strip())
    for set_dir in sys.argv[1:]:
        n = above = 0
        with open(os.path.join(set_dir, 'queries.jsonl')) as f:
            for line in f:
                q = json.loads(line)
                if q['kind'] != 'completion':
                    continue
                n += 1
                call = q.get('call_line') or q['cursor']['line']
                path = os.path.join(set_dir, 'corpus-full', q['filepath'])
                with open(path, errors='replace') as src:
                    before = src.read().split('\n')[:call - 1]
                if re.search(r'\b' + re.escape(q['symbol']) + r'\b', '\n'.join(before)):
                    above += 1
        print(f'{os.path.basename(os.path.normpath(set_dir))}: {above} of {n} completion queries')


if __name__ == '__main__':
    main()
