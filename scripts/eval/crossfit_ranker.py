#!/usr/bin/env python3
"""Collects the learned ranker's training features with a code adapter that never saw the
set they come from (cross-fitting), so that the ranker learns how far to trust the adapted
embedding on code it has not been trained on, which is the only code it meets in use.

The shipped code adapter (scripts/eval/train_code_adapter.py) is trained on every `train`
package, the ranker's training sets among them. Features collected with it would show the
ranker an embedding leg that already knows their answers. Instead the packages are cut into
folds; one adapter is trained per fold on the other folds' packages, and each of the
ranker's sets is searched with the adapter of its own fold.

Usage: scripts/eval/crossfit_ranker.py PAIRS_DIR PLAIN_TABLE_DIR WORK_DIR --tabby BIN
           [--ranker-sets a,b,...] [--folds 2] [--dev DEV_SETS_DIR]
  PAIRS_DIR: the sets of `scripts/eval/training_sets.py PAIRS_DIR --split train --max 100000
    --cargo-lock Cargo.lock` (the adapter's training data; every `train` row is used).
  PLAIN_TABLE_DIR: the plain distilled table (see train_code_adapter.py).
  --ranker-sets: the ranker's training sets, all in PAIRS_DIR (default: the sets that
    crates/tabby/assets/ranker.json names as trained on).
  --dev: also collect the features of that directory's `dev` sets with the default
    embedding (the shipped adapter), so that train_ranker.py reports them.
Writes WORK_DIR/fold-N/{adapter.safetensors,table/} and WORK_DIR/ranker/ (splits.tsv and one
features.jsonl per set), which `scripts/eval/train_ranker.py WORK_DIR/ranker OUT.json` reads.
Folds: the ranker's sets are dealt round-robin within each language in name order (so every
fold holds each language), every other package by the sha256 of its name. Deterministic;
each adapter takes ~3 minutes on two cores, the features ~2 minutes in all.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def read_splits(path):
    rows = {}
    with open(path) as f:
        for line in f:
            parts = line.rstrip('\n').split('\t')
            if len(parts) >= 3:
                rows[parts[0]] = parts
    return rows


def assign_folds(names, language, ranker_sets, folds):
    fold = {}
    by_language = {}
    for name in sorted(ranker_sets):
        by_language.setdefault(language[name], []).append(name)
    for lang in sorted(by_language):
        for i, name in enumerate(by_language[lang]):
            fold[name] = i % folds
    for name in names:
        if name not in fold:
            fold[name] = int(hashlib.sha256(name.encode()).hexdigest(), 16) % folds
    return fold


def collect(tabby, set_dir, out, embedding=None):
    if os.path.exists(out):
        return
    cmd = [tabby, 'eval', '--queries', os.path.join(set_dir, 'queries.jsonl'), '--corpus', set_dir,
           '--legs', 'bm25', '--features-out', out + '.partial']
    if embedding:
        cmd += ['--embedding', embedding]
    with open(out + '.log', 'w') as log:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=log)
    os.replace(out + '.partial', out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('pairs_dir')
    ap.add_argument('plain_table')
    ap.add_argument('work')
    ap.add_argument('--tabby', required=True)
    ap.add_argument('--ranker-sets')
    ap.add_argument('--folds', type=int, default=2)
    ap.add_argument('--dev')
    args = ap.parse_args()
    if args.folds < 2:
        ap.error('--folds must be 2 or more')

    splits = read_splits(os.path.join(args.pairs_dir, 'splits.tsv'))
    train = sorted(n for n, row in splits.items() if row[1] == 'train')
    language = {n: splits[n][2] for n in train}
    if args.ranker_sets:
        ranker_sets = args.ranker_sets.split(',')
    else:
        shipped = json.load(open(os.path.join(ROOT, 'crates/tabby/assets/ranker.json')))
        ranker_sets = shipped['trained_with']['sets']
    missing = [n for n in ranker_sets if n not in language]
    if missing:
        sys.exit(f'not a train set of {args.pairs_dir}: {", ".join(missing)}')
    fold = assign_folds(train, language, ranker_sets, args.folds)

    os.makedirs(args.work, exist_ok=True)
    for f in range(args.folds):
        fdir = os.path.join(args.work, f'fold-{f}')
        sets = os.path.join(fdir, 'sets')
        os.makedirs(sets, exist_ok=True)
        with open(os.path.join(sets, 'splits.tsv'), 'w') as out:
            for name in train:
                if fold[name] != f:
                    out.write('\t'.join(splits[name]) + '\n')
                    link = os.path.join(sets, name)
                    if not os.path.lexists(link):
                        os.symlink(os.path.abspath(os.path.join(args.pairs_dir, name)), link)
        adapter = os.path.join(fdir, 'adapter.safetensors')
        table = os.path.join(fdir, 'table')
        if not os.path.exists(os.path.join(table, 'static-embedding.safetensors')):
            print(f'fold {f}: training the adapter without {sum(v == f for v in fold.values())} '
                  'packages', file=sys.stderr)
            subprocess.run([sys.executable, os.path.join(HERE, 'train_code_adapter.py'), sets,
                            args.plain_table, adapter, '--table-out', table], check=True)

    rdir = os.path.join(args.work, 'ranker')
    os.makedirs(rdir, exist_ok=True)
    rows = []
    for name in sorted(ranker_sets):
        d = os.path.join(rdir, name)
        os.makedirs(d, exist_ok=True)
        src = os.path.join(args.pairs_dir, name)
        table = os.path.abspath(os.path.join(args.work, f'fold-{fold[name]}', 'table'))
        print(f'{name}: features with the adapter of fold {fold[name]}', file=sys.stderr)
        collect(args.tabby, src, os.path.join(d, 'features.jsonl'), f'local:{table}')
        rows.append([name, 'train', language[name], f'fold-{fold[name]}'])
    if args.dev:
        for name, row in sorted(read_splits(os.path.join(args.dev, 'splits.tsv')).items()):
            if row[1] != 'dev':
                continue
            d = os.path.join(rdir, name)
            os.makedirs(d, exist_ok=True)
            print(f'{name}: dev features with the default embedding', file=sys.stderr)
            collect(args.tabby, os.path.join(args.dev, name), os.path.join(d, 'features.jsonl'))
            rows.append([name, 'dev', row[2], 'default'])
    with open(os.path.join(rdir, 'splits.tsv'), 'w') as out:
        for row in rows:
            out.write('\t'.join(row) + '\n')
    print(f'wrote {rdir}', file=sys.stderr)


if __name__ == '__main__':
    main()
