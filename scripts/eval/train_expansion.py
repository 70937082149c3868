#!/usr/bin/env python3
"""Learns which code words an English word in a question points to, from the doc sentence ↔
definition pairs of generated training sets, and writes the table the BM25 leg expands nl
queries with (crates/tabby/assets/nl-expansion.tsv).

Usage: scripts/eval/train_expansion.py SETS_DIR OUT.tsv [--per-word 2] [--min-score 0.1]
                                       [--min-packages 4] [--min-lift 2]
                                       [--max-expansions 6] [--weight 1]
       scripts/eval/train_expansion.py --print-words < TEXT   (the search words of each line)
  SETS_DIR: scripts/eval/training_sets.py's output (train split; the dev sets and the packages
  reserved for evaluation are never read: dev names are skipped, reserved ones are never there).

For every nl query of a training set and the definition it documents (corpus-nodocs, so the
docs themselves are not in the text), both are turned into the search words the index holds
(tabby_common::index::code::search_words: split identifiers, lower case, stop words out, the
light Porter stem), ported below. A pair (question word q, code word c), c ≠ q, scores
P(c | q) · ln(lift), lift = P(c | q) / P(c), over all pairs; it is kept when it co-occurs in
pairs of at least --min-packages packages (so one package's vocabulary does not make a rule)
with lift ≥ --min-lift, and each word keeps its --per-word best expansions scoring at least
--min-score. The file also carries the search's two parameters: a question gets at most
--max-expansions code words (`@max`), each at --weight against 1 for an occurrence of one of its
own words (`@weight`). Standard library only; deterministic (sorted output, ties by word).
"""

import argparse
import collections
import json
import math
import os
import re
import sys

DEV = {'markdown', 'packaging', 'tomlkit', 'pyflakes', 'hyper', 'axum', 'burntsushi-toml',
       'spf13-pflag', 'mobx', 'handlebars'}
DIGITS = set('0123456789')  # Rust's is_ascii_digit: the index splits at ASCII digits only
STOP = set('a an and are as at be by for from if in into is it its of on or that the this to '
           'was will with'.split())


def _cons(w, i):
    c = w[i]
    if c in 'aeiou':
        return False
    if c == 'y':
        return i == 0 or not _cons(w, i - 1)
    return True


def _measure(w):
    m, prev_vowel = 0, False
    for i in range(len(w)):
        c = _cons(w, i)
        if c and prev_vowel:
            m += 1
        prev_vowel = not c
    return m


def _cvc(w):
    n = len(w)
    return (n >= 3 and _cons(w, n - 3) and not _cons(w, n - 2) and _cons(w, n - 1)
            and w[-1] not in 'wxy')


def stem(word):
    """tabby_common::index::stem::stem: Porter's steps 1a, 1b and 5a."""
    if len(word) < 4 or not re.fullmatch(r'[a-z]+', word):
        return word
    w = word
    if w.endswith('sses') or w.endswith('ies'):
        w = w[:-2]
    elif w.endswith('s') and not w.endswith('ss') and not w.endswith('us'):
        w = w[:-1]
    if w.endswith('eed'):
        if _measure(w[:-3]) > 0:
            w = w[:-1]
    else:
        suffix = 2 if w.endswith('ed') else 3 if w.endswith('ing') else 0
        if suffix and any(not _cons(w, i) for i in range(len(w) - suffix)):
            w = w[:-suffix]
            if w.endswith(('at', 'bl', 'iz')):
                w += 'e'
            elif len(w) >= 2 and w[-1] == w[-2] and _cons(w, len(w) - 1) and w[-1] not in 'lsz':
                w = w[:-1]
            elif _measure(w) == 1 and _cvc(w):
                w += 'e'
    if w.endswith('e'):
        s = w[:-1]
        m = _measure(s)
        if m > 1 or (m == 1 and not _cvc(s)):
            w = s
    return w


def split_identifier(tok):
    parts, cur = [], ''
    for i, c in enumerate(tok):
        if c == '_':
            if cur:
                parts.append(cur)
                cur = ''
            continue
        if cur:
            p = tok[i - 1]
            n = tok[i + 1] if i + 1 < len(tok) else None
            if ((p.islower() and c.isupper())
                    or (p.isupper() and c.isupper() and n is not None and n.islower())
                    or (p.isalpha() and c in DIGITS) or (p in DIGITS and c.isalpha())):
                parts.append(cur)
                cur = ''
        cur += c.lower()
    if cur:
        parts.append(cur)
    return parts


def search_words(text):
    out = []
    for t in re.findall(r'\w+', text):
        if len(t.encode()) >= 64:
            continue
        out.append(t.lower())
        parts = split_identifier(t)
        if len(parts) > 1:
            out.extend(p for p in parts if len(p) > 1)
    return [stem(w) for w in out if w not in STOP]


def nl_pairs(d):
    """(question, definition text) for each nl query of set directory `d`."""
    path = os.path.join(d, 'queries.jsonl')
    if not os.path.exists(path):
        return []
    out, cache = [], {}
    for line in open(path, encoding='utf-8'):
        q = json.loads(line)
        if q['kind'] != 'nl' or not q['relevant']:
            continue
        r = q['relevant'][0]
        if r['filepath'] not in cache:
            try:
                cache[r['filepath']] = open(os.path.join(d, 'corpus-nodocs', r['filepath']),
                                            encoding='utf-8').read().split('\n')
            except OSError:
                cache[r['filepath']] = None
        lines = cache[r['filepath']]
        if lines:
            out.append((q['query'], '\n'.join(lines[r['start_line'] - 1:r['end_line']])))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('sets_dir', nargs='?')
    ap.add_argument('out', nargs='?')
    ap.add_argument('--print-words', action='store_true',
                    help='print the search words of each line of standard input and exit (the '
                         'test suite checks them against the index\'s own)')
    ap.add_argument('--per-word', type=int, default=2)
    ap.add_argument('--min-score', type=float, default=0.1)
    ap.add_argument('--min-packages', type=int, default=4)
    ap.add_argument('--min-lift', type=float, default=2.0)
    ap.add_argument('--max-expansions', type=int, default=6)
    ap.add_argument('--weight', type=float, default=1.0)
    args = ap.parse_args()
    if args.print_words:
        for line in sys.stdin:
            print(' '.join(search_words(line.rstrip('\n'))))
        return
    if not args.sets_dir or not args.out:
        ap.error('SETS_DIR and OUT are required')
    names = sorted(n for n in os.listdir(args.sets_dir)
                   if os.path.isdir(os.path.join(args.sets_dir, n)) and n not in DEV)
    pairs = []
    for name in names:
        for text, body in nl_pairs(os.path.join(args.sets_dir, name)):
            q, c = set(search_words(text)), set(search_words(body[:3000]))
            if q and c:
                pairs.append((name, q, c))
    n_pairs = len(pairs)
    code_df = collections.Counter(w for _, _, c in pairs for w in c)
    q_df = collections.Counter(w for _, q, _ in pairs for w in q)
    co = collections.Counter()
    packages = collections.defaultdict(set)
    for name, q, c in pairs:
        for a in q:
            for b in c:
                if a != b:
                    co[(a, b)] += 1
                    packages[(a, b)].add(name)
    table = collections.defaultdict(list)
    for (a, b), k in co.items():
        if len(packages[(a, b)]) < args.min_packages:
            continue
        p = k / q_df[a]
        lift = p / (code_df[b] / n_pairs)
        if lift < args.min_lift:
            continue
        score = p * math.log(lift)
        if score >= args.min_score:
            table[a].append((-score, b))
    with open(args.out, 'w', encoding='utf-8') as f:
        f.write(f'# nl-expansion-v1: {n_pairs} doc sentence / definition pairs from '
                f'{len({n for n, _, _ in pairs})} training sets '
                f'(scripts/eval/train_expansion.py --per-word {args.per_word} --min-score '
                f'{args.min_score} --min-packages {args.min_packages} --min-lift {args.min_lift})\n')
        f.write('# question word<TAB>code word:score,code word:score (search words, stemmed)\n')
        f.write(f'@max\t{args.max_expansions}\n@weight\t{args.weight:g}\n')
        rows = 0
        for a in sorted(table):
            best = sorted(table[a])[:args.per_word]
            f.write(a + '\t' + ','.join(f'{b}:{-s:.3f}' for s, b in best) + '\n')
            rows += 1
    print(f'{n_pairs} pairs from {len(names)} sets; {rows} words with expansions -> {args.out}',
          file=sys.stderr)


if __name__ == '__main__':
    main()
