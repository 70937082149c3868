#!/usr/bin/env python3
"""Cuts the ranker's training sets into eval-like sets, whose corpus-nodocs blanks only the
docs of their own queries, and collects the ranker's features on them.

The training sets (`training_sets.py --max 100000`) turn nearly every doc of a package into a
query, so their corpus-nodocs blanks nearly every doc: the ranker learns on packages with no
documentation left. The eval sets (`tabby eval generate`, shared/eval) blank only the docs of
their at most 110 queries, so the definitions around the target keep theirs (41 to 52 % of the
documented definitions of the dev sets are queried). This script deals a set's nl queries into
groups (at least two for a set of 20 or more, at most GROUP queries each; seeded) and writes,
per group, a corpus-nodocs that is corpus-full with only that group's docs blanked. A blanked
run of lines belongs to the query whose relevant range holds it, or ends at most three lines
above that range's start (a doc comment above attributes or a decorator), the smallest such
range; a run that belongs to no query stays blanked in every group. As the generator does, a
query is dropped from a group when its words still occur in that order in the group's
corpus-nodocs.

Usage:
  evallike_sets.py cut SET_DIR OUT [--group 110] [--seed N]
      writes OUT/NAME-gK/{queries.jsonl,corpus-full (a link),corpus-nodocs}
  evallike_sets.py collect CF_DIR PAIRS_DIR OUT --tabby BIN [--group 110] [--seed N]
      CF_DIR: crossfit_ranker.py's work directory (ranker/splits.tsv, fold-N/table); cuts every
      `train` set of its splits from PAIRS_DIR, searches each group with its fold's adapter
      and writes OUT/ranker/ (splits.tsv, NAME-gK/features.jsonl; the dev sets linked from
      CF_DIR/ranker), which train_ranker.py reads.
"""

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys

from crossfit_ranker import read_splits

WORD = re.compile(r'\w+')


def read_lines(path):
    with open(path, encoding='utf-8') as fh:
        return fh.read().split('\n')


def doc_runs(full_root, nodocs_root):
    """{file: ([[first, last], ...], full lines, nodocs lines)} for each file of which
    corpus-nodocs blanked runs of lines (1-based, inclusive)."""
    runs = {}
    for dirpath, _, names in os.walk(nodocs_root):
        for name in sorted(names):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, nodocs_root)
            try:
                full, nodocs = read_lines(os.path.join(full_root, rel)), read_lines(path)
            except (OSError, UnicodeDecodeError):
                continue
            if full == nodocs or len(full) != len(nodocs):
                continue
            out = []
            for i in range(len(full)):
                if full[i] == nodocs[i]:
                    continue
                if out and i + 1 <= out[-1][1] + 1:
                    out[-1][1] = i + 1
                else:
                    out.append([i + 1, i + 1])
            runs[rel] = (out, full, nodocs)
    return runs


def owners(runs, queries):
    """{(file, first line of a run): index of the query it documents}, and the count of runs
    that document no query."""
    by_file = {}
    for k, q in enumerate(queries):
        for r in q['relevant']:
            by_file.setdefault(r['filepath'], []).append((r['start_line'], r['end_line'], k))
    owner, orphans = {}, 0
    for path, (rr, _, _) in runs.items():
        for first, last in rr:
            best = None
            for start, end, k in by_file.get(path, ()):
                if (first >= start and last <= end) or start - 4 <= last < start:
                    if best is None or end - start < best[0]:
                        best = (end - start, k)
            if best is None:
                orphans += 1
            else:
                owner[(path, first)] = best[1]
    return owner, orphans


def cut(src, out, group=110, seed=20241207):
    """Writes the eval-like groups of the set in `src` under `out`; returns their directories."""
    name = os.path.basename(os.path.normpath(src))
    queries = []
    with open(os.path.join(src, 'queries.jsonl'), encoding='utf-8') as fh:
        for line in fh:
            q = json.loads(line)
            if q['kind'] == 'nl' and q['relevant']:
                queries.append(q)
    full_root = os.path.join(src, 'corpus-full')
    nodocs_root = os.path.join(src, 'corpus-nodocs')
    runs = doc_runs(full_root, nodocs_root)
    owner, orphans = owners(runs, queries)
    order = list(range(len(queries)))
    random.Random(seed).shuffle(order)
    groups = max(2 if len(order) >= 20 else 1, -(-len(order) // group)) if order else 0
    written, dropped = [], 0
    for g in range(groups):
        members = set(order[g::groups])
        d = os.path.join(out, f'{name}-g{g}')
        if os.path.lexists(d):
            shutil.rmtree(d)
        os.makedirs(d)
        os.symlink(os.path.abspath(full_root), os.path.join(d, 'corpus-full'))
        shutil.copytree(full_root, os.path.join(d, 'corpus-nodocs'))
        words = []
        for path, (rr, full, blank) in sorted(runs.items()):
            lines = list(full)
            for first, last in rr:
                k = owner.get((path, first))
                if k is None or k in members:
                    lines[first - 1:last] = blank[first - 1:last]
            with open(os.path.join(d, 'corpus-nodocs', path), 'w', encoding='utf-8') as fh:
                fh.write('\n'.join(lines))
        for dirpath, _, names in os.walk(os.path.join(d, 'corpus-nodocs')):
            for fname in sorted(names):
                try:
                    text = open(os.path.join(dirpath, fname), encoding='utf-8').read()
                except (OSError, UnicodeDecodeError):
                    continue
                words.append(' '.join(WORD.findall(text.lower())))
        corpus = ' \n '.join(words)
        with open(os.path.join(d, 'queries.jsonl'), 'w', encoding='utf-8') as fh:
            for k in sorted(members):
                q = dict(queries[k], set=f'{name}-g{g}')
                if ' ' + ' '.join(WORD.findall(q['query'].lower())) + ' ' in ' ' + corpus + ' ':
                    dropped += 1
                    continue
                fh.write(json.dumps(q) + '\n')
        written.append(d)
    print(f'{name}: {len(queries)} nl queries in {groups} groups, '
          f'{sum(len(r[0]) for r in runs.values())} blanked runs ({orphans} documenting no query), '
          f'{dropped} queries dropped as still in the text', file=sys.stderr)
    return written


def collect(cf_dir, pairs_dir, out, tabby, group, seed):
    splits = read_splits(os.path.join(cf_dir, 'ranker', 'splits.tsv'))
    ranker = os.path.join(out, 'ranker')
    os.makedirs(ranker, exist_ok=True)
    rows = []
    for name, split, language, fold in (row[:4] for row in splits.values()):
        if split != 'train':
            link = os.path.join(ranker, name)
            if not os.path.lexists(link):
                os.symlink(os.path.abspath(os.path.join(cf_dir, 'ranker', name)), link)
            rows.append((name, split, language, fold))
            continue
        table = os.path.join(cf_dir, fold, 'table')
        for d in cut(os.path.join(pairs_dir, name), os.path.join(out, 'sets'), group, seed):
            g = os.path.basename(d)
            os.makedirs(os.path.join(ranker, g), exist_ok=True)
            run = subprocess.run([tabby, 'eval', '--queries', os.path.join(d, 'queries.jsonl'),
                                  '--corpus', d, '--legs', 'bm25,embedding,service',
                                  '--embedding', 'local:' + table,
                                  '--features-out', os.path.join(ranker, g, 'features.jsonl')],
                                 capture_output=True, text=True)
            if run.returncode != 0:
                sys.exit(f'tabby eval failed on {d}:\n{run.stderr}')
            rows.append((g, 'train', language, fold))
    with open(os.path.join(ranker, 'splits.tsv'), 'w', encoding='utf-8') as fh:
        for row in rows:
            fh.write('\t'.join(row) + '\n')
    print(f'wrote {ranker}', file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = ap.add_subparsers(dest='command', required=True)
    c = sub.add_parser('cut')
    c.add_argument('set_dir')
    c.add_argument('out')
    k = sub.add_parser('collect')
    k.add_argument('cf_dir')
    k.add_argument('pairs_dir')
    k.add_argument('out')
    k.add_argument('--tabby', required=True)
    for p in (c, k):
        p.add_argument('--group', type=int, default=110)
        p.add_argument('--seed', type=int, default=20241207)
    args = ap.parse_args()
    if args.group < 1:
        sys.exit('--group must be at least 1')
    if args.command == 'cut':
        for d in cut(args.set_dir, args.out, args.group, args.seed):
            print(d)
    else:
        collect(args.cf_dir, args.pairs_dir, args.out, args.tabby, args.group, args.seed)


if __name__ == '__main__':
    main()
