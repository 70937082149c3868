#!/usr/bin/env python3
"""Trains the learned ranker as gradient-boosted regression trees (LambdaMART: LightGBM's
`lambdarank` objective) on the features `tabby eval --features-out` wrote, and writes a
ranker file whose kinds hold trees instead of linear weights
(crates/tabby/src/services/code/ranker.rs reads both).

Usage:
  scripts/eval/train_ranker_trees.py SETS_DIR OUT.json [--kinds nl,code] [--linear-from RANKER]
      [--version NAME] [--trees 500] [--leaves 7] [--rate 0.03] [--min-leaf 100] [--seed N]
      [--rank-features-only]
    SETS_DIR as for train_ranker.py (splits.tsv, <set>/features.jsonl); `train` sets are
    fitted on, `dev` sets only scored. For the ranker that ships, SETS_DIR is the `ranker/`
    directory of scripts/eval/crossfit_ranker.py: features whose embedding leg comes from a
    code adapter that never saw the set. A kind not in --kinds keeps the linear weights of
    --linear-from (default crates/tabby/assets/ranker.json).

Needs lightgbm and numpy (PyPI). One thread, deterministic mode and a fixed seed: the same
inputs give the same file. The trees are written in pre-order (a child's index is above its
parent's, which the server checks), and every score the file gives is checked against
LightGBM's own prediction before it is written.
"""

import argparse
import json
import os
import sys

import lightgbm as lgb
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_ranker  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def convert(tree_info):
    """One LightGBM tree (dump_model) as {"nodes": [[feature, threshold, left, right]],
    "leaves": [value]}: a child >= 0 is a node index, -1 - i is leaf i."""
    nodes, leaves = [], []

    def walk(n):
        if 'leaf_value' in n:
            leaves.append(n['leaf_value'])
            return -len(leaves)
        if n['decision_type'] != '<=' or n['missing_type'] != 'None':
            sys.exit(f"unsupported split {n['decision_type']} / missing {n['missing_type']}")
        at = len(nodes)
        nodes.append(None)
        left = walk(n['left_child'])
        right = walk(n['right_child'])
        nodes[at] = [n['split_feature'], n['threshold'], left, right]
        return at

    root = tree_info['tree_structure']
    walk(root)
    return dict(nodes=nodes, leaves=leaves)


def predict(trees, x):
    total = 0.0
    for t in trees:
        if not t['nodes']:
            total += t['leaves'][0]
            continue
        i = 0
        while True:
            f, threshold, left, right = t['nodes'][i]
            nxt = left if x[f] <= threshold else right
            if nxt < 0:
                total += t['leaves'][-1 - nxt]
                break
            i = nxt
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('sets_dir')
    ap.add_argument('out')
    ap.add_argument('--kinds', default='nl,code')
    ap.add_argument('--linear-from', default=os.path.join(ROOT, 'crates/tabby/assets/ranker.json'))
    ap.add_argument('--version', default='trees-v1')
    ap.add_argument('--trees', type=int, default=500)
    ap.add_argument('--leaves', type=int, default=7)
    ap.add_argument('--rate', type=float, default=0.03)
    ap.add_argument('--min-leaf', type=int, default=100)
    ap.add_argument('--seed', type=int, default=20261206)
    ap.add_argument('--rank-features-only', action='store_true',
                    help="train on the 14 rank features alone (the content features' columns "
                    "held at 0): what the content features add")
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(',') if k]
    if any(k not in ('nl', 'code') for k in kinds):
        ap.error('--kinds takes nl and/or code')

    splits = train_ranker.read_splits(args.sets_dir)
    data, names = train_ranker.read_features(args.sets_dir, splits)

    linear = json.load(open(args.linear_from))
    if linear['features'] != names:
        sys.exit(f'{args.linear_from} names other features than the collected ones')
    weights = {k: w for k, w in linear['weights'].items() if k not in kinds}
    trees, trained_on = {}, {}
    params = dict(objective='lambdarank', num_leaves=args.leaves, learning_rate=args.rate,
                  min_data_in_leaf=args.min_leaf, bagging_fraction=0.8, bagging_freq=1,
                  feature_fraction=0.8, lambdarank_truncation_level=20, seed=args.seed,
                  deterministic=True, num_threads=1, verbose=-1)
    for kind in kinds:
        train = [q for n, qs in data.items() if splits[n]['split'] == 'train'
                 for q in qs if q['ranker_kind'] == kind and q['candidates']]
        x = np.array([c['x'] for q in train for c in q['candidates']], dtype=np.float64)
        if args.rank_features_only:
            x[:, names.index('q_cov'):] = 0.0
        y = np.array([1 if c['relevant'] else 0 for q in train for c in q['candidates']])
        group = [len(q['candidates']) for q in train]
        print(f'{kind}: {len(train)} training queries, {len(y)} candidates', file=sys.stderr)
        booster = lgb.train(params, lgb.Dataset(x, y, group=group), num_boost_round=args.trees)
        converted = [convert(t) for t in booster.dump_model()['tree_info']]
        sample = x[:: max(1, len(x) // 2000)]
        ours = np.array([predict(converted, row) for row in sample])
        gap = float(np.max(np.abs(ours - booster.predict(sample))))
        if gap > 1e-9:
            sys.exit(f'{kind}: the written trees differ from LightGBM by {gap}')
        trees[kind] = converted
        trained_on[kind] = len(train)

    def score(kind, c):
        return predict(trees[kind], c['x']) if kind in trees else train_ranker.dot(
            weights[kind], c['x'])
    print('| set | split | kind | n | learned R@10 / MRR |')
    print('|---|---|---|---|---|')
    rows = []
    for name, qs in data.items():
        for kind in ('completion', 'nl'):
            sub = [q for q in qs if q['kind'] == kind]
            if not sub:
                continue
            for q in sub:
                for c in q['candidates']:
                    c['_score'] = score(q['ranker_kind'], c)
            r = train_ranker.metrics(sub, lambda c: c['_score'])
            print(f"| {name} | {splits[name]['split']} | {kind} | {len(sub)} | "
                  f'{r[0]:.3f} / {r[1]:.3f} |')
            rows.append((splits[name]['split'], kind, len(sub), r))
    for split in ('train', 'dev'):
        for kind in ('completion', 'nl'):
            sel = [r for s, k, n, r in rows if s == split and k == kind and n >= 10]
            if sel:
                print(f'| mean of {len(sel)} sets | {split} | {kind} | | '
                      f'{sum(r[0] for r in sel) / len(sel):.3f} / '
                      f'{sum(r[1] for r in sel) / len(sel):.3f} |')
    out = dict(
        version=args.version,
        features=names,
        weights=weights,
        trees=trees,
        trained_with=dict(script='scripts/eval/train_ranker_trees.py',
                          sets=sorted(n for n in data if splits[n]['split'] == 'train'),
                          queries=trained_on, objective='lambdarank', trees=args.trees,
                          leaves=args.leaves, rate=args.rate, min_leaf=args.min_leaf,
                          seed=args.seed, lightgbm=lgb.__version__,
                          rank_features_only=args.rank_features_only,
                          features='cross-fitted (scripts/eval/crossfit_ranker.py)',
                          linear_from=dict(file=os.path.basename(args.linear_from),
                                           version=linear['version'],
                                           kinds=sorted(weights))),
    )
    with open(args.out, 'w') as f:
        json.dump(out, f, separators=(',', ':'))
        f.write('\n')
    print(f'wrote {args.out} ({os.path.getsize(args.out)} bytes)', file=sys.stderr)


if __name__ == '__main__':
    main()
