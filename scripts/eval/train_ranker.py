#!/usr/bin/env python3
"""Trains the learned ranker (crates/tabby/src/services/code/ranker.rs) from candidate
features that `tabby eval --features-out` wrote for generated sets, and writes the ranker file.

Usage:
  scripts/eval/train_ranker.py SETS_DIR OUT.json [--refine] [--cap N] [--collect TABBY]
                                [--objective r10+mrr|mrr] [--code-weights-from RANKER.json]
                                [--nl-weights-from RANKER.json [--fit-nl-features NAMES]]
  scripts/eval/train_ranker.py SETS_DIR --evaluate RANKER.json [--cap N]   (no training)
    SETS_DIR/splits.tsv names each set's split (scripts/eval/training_sets.py writes it);
    SETS_DIR/<set>/features.jsonl holds its candidates. Only `train` sets are fitted on; the
    `dev` sets are scored (Recall@10 / MRR@10 offline, from the same candidates, with the
    cap of --cap hits per file) and never fitted on. With --collect, the features are
    first written by running `TABBY eval --features-out` on every set that has none (default
    configuration: the embedded static embedding, tuned strategy).

Model: one linear score per kind of query (code, nl) over the features the file names,
fitted with a listwise softmax cross-entropy (each query's relevant candidates against its
MAX_CANDIDATES others that plain RRF ranks highest, each query weighing the same;
L2-regularised, full-batch Adam), then (--refine) coordinate ascent on the metric itself.
Standard library only; deterministic, so the same inputs give the same file. (A pairwise
RankNet loss was tried first and ranked worse.)

linear-v4 (the members leg's four weights on top of linear-v3, whose other weights it keeps;
no --members-cap: the training sets chose no bound):
  scripts/eval/train_ranker.py /tmp/cf3/ranker crates/tabby/assets/ranker.json --refine \
    --code-weights-from linear-v3.json --nl-weights-from linear-v3.json --names-cap 2 \
    --fit-code-features members_in,members_rr,members_log_rank,members_few --version linear-v4
where linear-v3.json is the previous ranker file (`git show 6a97daf:crates/tabby/assets/
ranker.json`; the features it does not name start at 0), and /tmp/cf3/ranker holds features
that this build's `tabby eval --features-out` wrote for crossfit_ranker.py's ranker and dev
sets (README, "The members of what the cursor follows"). linear-v3 was the same command
with linear-v2's file (`git show 33ee789:…`), --fit-code-features
names_in,names_rr,names_log_rank,names_rare and no members features yet.
"""

import argparse
import json
import math
import os
import subprocess
import sys

EPOCHS = 200
MAX_CANDIDATES = 40
REFINE_ROUNDS = 4
LR = 0.03
L2 = 1e-3
K = 10
CAP = 1 << 30  # hits per file counted (--cap)
NAMES_CAP = 1 << 30  # candidates only the names leg found, in a top 10 (--names-cap)
MEMBERS_CAP = 1 << 30  # candidates only the members leg found, in a top 10 (--members-cap)


def read_splits(sets_dir):
    splits = {}
    with open(os.path.join(sets_dir, 'splits.tsv')) as f:
        for line in f:
            parts = line.rstrip('\n').split('\t')
            if len(parts) >= 3:
                splits[parts[0]] = dict(split=parts[1], language=parts[2])
    return splits


def read_queries(path):
    queries = []
    with open(path) as f:
        for line in f:
            q = json.loads(line)
            queries.append(q)
    return queries


def read_features(sets_dir, splits):
    """Each set's candidates (SETS_DIR/<set>/features.jsonl) by set name, and the feature
    names they share; exits when none are found or two sets name other features."""
    data, names = {}, None
    for name in sorted(splits):
        path = os.path.join(sets_dir, name, 'features.jsonl')
        if not os.path.exists(path):
            print(f'{name}: no features.jsonl, skipped', file=sys.stderr)
            continue
        qs = read_queries(path)
        if not qs:
            continue
        names = names or qs[0]['features']
        if qs[0]['features'] != names:
            sys.exit(f'{name}: other features than the other sets')
        data[name] = qs
    if not data:
        sys.exit('no features found')
    return data, names


def dot(w, x):
    return sum(a * b for a, b in zip(w, x))


class Adam:
    """Adam on a dense weight vector; weights in `fixed_zero` stay 0."""

    def __init__(self, dim, fixed_zero, lr=LR):
        self.m, self.v, self.t = [0.0] * dim, [0.0] * dim, 0
        self.fixed, self.lr = fixed_zero, lr

    def step(self, w, g):
        b1, b2, eps = 0.9, 0.999, 1e-8
        self.t += 1
        for i in range(len(w)):
            gi = 0.0 if i in self.fixed else g[i] + 2 * L2 * w[i]
            self.m[i] = b1 * self.m[i] + (1 - b1) * gi
            self.v[i] = b2 * self.v[i] + (1 - b2) * gi * gi
            mh = self.m[i] / (1 - b1 ** self.t)
            vh = self.v[i] / (1 - b2 ** self.t)
            w[i] -= self.lr * mh / (math.sqrt(vh) + eps)


def fit_softmax(queries, dim, fixed_zero, max_candidates, i_rrf, init=None):
    """Listwise softmax cross-entropy: per query, -log of the probability mass the relevant
    candidates get under softmax(w . x) over its candidates (the relevant ones and the
    `max_candidates` that plain RRF ranks highest). Each query weighs the same. The weights
    start at `init` (default 0); those in `fixed_zero` keep their start."""
    lists = []
    for q in queries:
        c = q['candidates']
        pos = [x['x'] for x in c if x['relevant']]
        if not pos:
            continue
        neg = sorted((x['x'] for x in c if not x['relevant']), key=lambda x: -x[i_rrf])
        lists.append((pos, neg[:max_candidates]))
    w = list(init) if init else [0.0] * dim
    adam = Adam(dim, fixed_zero)
    n = max(1, len(lists))
    for t in range(1, EPOCHS + 1):
        g = [0.0] * dim
        loss = 0.0
        for pos, neg in lists:
            xs = pos + neg
            scores = [dot(w, x) for x in xs]
            top = max(scores)
            e = [math.exp(s - top) for s in scores]
            z = sum(e)
            zp = sum(e[:len(pos)])
            loss -= math.log(zp / z)
            # d/dw [log z - log zp] = E_all[x] - E_pos[x]
            for k, x in enumerate(xs):
                coef = e[k] / z - (e[k] / zp if k < len(pos) else 0.0)
                if coef:
                    for i in range(dim):
                        g[i] += coef * x[i]
        adam.step(w, [x / n for x in g])
        if t % 50 == 0:
            print(f'  epoch {t}: loss {loss / n:.4f}', file=sys.stderr)
    return w


def fit_softmax_partial(queries, init, free):
    """The softmax loss of `fit_softmax` over every candidate of each query, fitting only the
    weights at the indices `free` from `init` (the others' part of each score is computed
    once)."""
    lists = []
    for q in queries:
        c = q['candidates']
        if not any(x['relevant'] for x in c):
            continue
        base = [sum(init[i] * x['x'][i] for i in range(len(init)) if i not in free) for x in c]
        xs = [[x['x'][i] for i in free] for x in c]
        lists.append((base, xs, [x['relevant'] for x in c]))
    v = [init[i] for i in free]
    adam = Adam(len(free), set())
    n = max(1, len(lists))
    for t in range(1, EPOCHS + 1):
        g = [0.0] * len(free)
        loss = 0.0
        for base, xs, rel in lists:
            scores = [b + dot(v, x) for b, x in zip(base, xs)]
            top = max(scores)
            e = [math.exp(s - top) for s in scores]
            z = sum(e)
            zp = sum(ek for ek, r in zip(e, rel) if r)
            loss -= math.log(zp / z)
            for ek, x, r in zip(e, xs, rel):
                coef = ek / z - (ek / zp if r else 0.0)
                for i in range(len(free)):
                    g[i] += coef * x[i]
        adam.step(v, [x / n for x in g])
        if t % 50 == 0:
            print(f'  epoch {t}: loss {loss / n:.4f}', file=sys.stderr)
    w = list(init)
    for i, x in zip(free, v):
        w[i] = x
    return w


OBJECTIVE = 'r10+mrr'
NAMES_ONLY = None  # whether a candidate's features say only the names leg found it
MEMBERS_ONLY = None  # and only the members leg


def refine(w, sets, fixed_zero, rounds=REFINE_ROUNDS):
    """Coordinate ascent from `w` on the metric itself: the mean over training sets of
    Recall@10 + MRR@10 (with the cap of two hits per file), each weight tried at a grid of
    multiples and offsets; a change is kept only when it raises the objective."""
    def objective(w):
        total = 0.0
        for qs in sets:
            r, m = metrics(qs, lambda c: dot(w, c['x']))
            total += m if OBJECTIVE == 'mrr' else r + m
        return total / max(1, len(sets))
    best = objective(w)
    print(f'  refine: start {best:.4f}', file=sys.stderr)
    for _ in range(rounds):
        improved = False
        for i in range(len(w)):
            if i in fixed_zero:
                continue
            for step in (-1.0, -0.5, -0.25, 0.25, 0.5, 1.0):
                trial = list(w)
                trial[i] = w[i] + step * max(0.1, abs(w[i]))
                score = objective(trial)
                if score > best + 1e-6:
                    best, w, improved = score, trial, True
        print(f'  refine: {best:.4f}', file=sys.stderr)
        if not improved:
            break
    return w


def metrics(queries, key):
    """Recall@10 and MRR@10, at most CAP hits per file. Recall is the share of the query's
    relevant ranges that the top 10 overlaps, as `tabby eval` and ../shared/eval/score.py
    count it (features written before candidates named their `hits`: whether any relevant
    candidate is in the top 10)."""
    r10 = mrr = 0.0
    for q in queries:
        ranked = sorted(q['candidates'], key=key, reverse=True)
        per_file, top, names_only, members_only = {}, [], 0, 0
        for c in ranked:
            if per_file.get(c['file'], 0) >= CAP:
                continue
            if NAMES_ONLY is not None and NAMES_ONLY(c['x']):
                if names_only >= NAMES_CAP:
                    continue
                names_only += 1
            elif MEMBERS_ONLY is not None and MEMBERS_ONLY(c['x']):
                if members_only >= MEMBERS_CAP:
                    continue
                members_only += 1
            per_file[c['file']] = per_file.get(c['file'], 0) + 1
            top.append(c)
            if len(top) >= K:
                break
        for rank, c in enumerate(top, 1):
            if c['relevant']:
                mrr += 1 / rank
                break
        if 'relevant_count' in q:
            found = {h for c in top for h in c['hits']}
            r10 += len(found) / max(1, q['relevant_count'])
        else:
            r10 += any(c['relevant'] for c in top)
    n = max(1, len(queries))
    return r10 / n, mrr / n


def fit_some(data, splits, names, kind, start, fit_names, refine_too):
    """Fits only the `kind` weights of the comma-separated features `fit_names` from `start`
    (the others kept): softmax over every candidate of the training queries, then (with
    `refine_too`) coordinate ascent on them. Returns the weights and the training queries'
    count."""
    fit = fit_names.split(',')
    unknown = [n for n in fit if n not in names]
    if unknown:
        sys.exit(f'--fit-{kind}-features: no such feature {unknown}')
    frozen = {i for i, n in enumerate(names) if n not in fit}
    train = [q for n, qs in data.items() if splits[n]['split'] == 'train'
             for q in qs if q['ranker_kind'] == kind]
    print(f'{kind}: fitting {fit} on {len(train)} training queries', file=sys.stderr)
    w = fit_softmax_partial(train, start, [i for i in range(len(names)) if i not in frozen])
    if refine_too:
        per_set = [[q for q in qs if q['ranker_kind'] == kind]
                   for n, qs in data.items() if splits[n]['split'] == 'train']
        w = refine(w, [qs for qs in per_set if len(qs) >= 10], frozen)
    return [round(x, 5) for x in w], len(train)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('sets_dir')
    ap.add_argument('out', nargs='?')
    ap.add_argument('--version', default='linear-v1')
    ap.add_argument('--cap', type=int, default=0,
                    help='hits per file the metrics count (0: no cap, the service default)')
    ap.add_argument('--refine', action='store_true',
                    help='then coordinate ascent on Recall@10 + MRR@10 of the training sets')
    ap.add_argument('--collect', metavar='TABBY', help='the tabby binary to write features with')
    ap.add_argument('--objective', choices=('r10+mrr', 'mrr'), default='r10+mrr',
                    help='what --refine raises: Recall@10 + MRR@10 (default) or MRR@10 alone')
    ap.add_argument('--code-weights-from', metavar='RANKER',
                    help="keep this ranker's code weights (0 for features it does not name) "
                         "instead of fitting them: what linear-v2 does, because the end-to-end "
                         "completion eval preferred linear-v1's order for code queries")
    ap.add_argument('--nl-weights-from', metavar='RANKER',
                    help="keep this ranker's nl weights (0 for features it does not name)")
    ap.add_argument('--fit-code-features', metavar='NAMES',
                    help='with --code-weights-from: fit only these code weights (comma-separated '
                         'feature names), the others kept; softmax over every candidate, then '
                         '(--refine) coordinate ascent on them')
    ap.add_argument('--fit-nl-features', metavar='NAMES',
                    help='with --nl-weights-from: fit only these nl weights, the same way')
    ap.add_argument('--names-cap', type=int, default=-1,
                    help='candidates only the names leg found that a top 10 holds at most, as '
                         'the service keeps them; written into the ranker file as `names_cap` '
                         '(default: no bound; with --evaluate, the file\'s own)')
    ap.add_argument('--members-cap', type=int, default=-1,
                    help='the same for candidates only the members leg found (`members_cap`)')
    ap.add_argument('--evaluate', metavar='RANKER',
                    help='only print the table for this ranker file (no training, nothing written)')
    args = ap.parse_args()
    if not args.out and not args.evaluate:
        ap.error('give OUT.json, or --evaluate RANKER.json')
    global CAP, OBJECTIVE, NAMES_CAP, NAMES_ONLY, MEMBERS_CAP, MEMBERS_ONLY
    CAP = args.cap or 1 << 30
    OBJECTIVE = args.objective
    if args.names_cap >= 0:
        NAMES_CAP = args.names_cap
    if args.members_cap >= 0:
        MEMBERS_CAP = args.members_cap
    splits = read_splits(args.sets_dir)
    if args.collect:
        for name in sorted(splits):
            d = os.path.join(args.sets_dir, name)
            path = os.path.join(d, 'features.jsonl')
            if os.path.exists(path) or not os.path.getsize(os.path.join(d, 'queries.jsonl')):
                continue
            print(f'collecting {name}', file=sys.stderr)
            subprocess.run([args.collect, 'eval', '--queries', os.path.join(d, 'queries.jsonl'),
                            '--corpus', d, '--legs', 'bm25', '--features-out', path + '.partial'],
                           check=True, stdout=subprocess.DEVNULL)
            os.replace(path + '.partial', path)
    data, names = read_features(args.sets_dir, splits)
    dim = len(names)
    if 'names_in' in names:
        i_n, i_b, i_e = names.index('names_in'), names.index('bm25_in'), names.index('emb_in')
        NAMES_ONLY = lambda x: x[i_n] and not x[i_b] and not x[i_e]
    if 'members_in' in names:
        i_m = names.index('members_in')
        i_n = names.index('names_in')
        i_b, i_e = names.index('bm25_in'), names.index('emb_in')
        # The names leg's bound comes first for a candidate both found (as the service has it).
        MEMBERS_ONLY = lambda x: x[i_m] and not x[i_n] and not x[i_b] and not x[i_e]
    fixed = {names.index('bias')}
    weights, trained_on = {}, {}
    if args.evaluate:
        given = json.load(open(args.evaluate))
        # A file written before the last features were added weighs them 0, as the service
        # reads it.
        if given['features'] != names[:len(given['features'])]:
            sys.exit(f'{args.evaluate} names other features than the collected ones')
        pad = [0.0] * (len(names) - len(given['features']))
        weights = {k: list(w) + pad for k, w in given['weights'].items()}
        if args.names_cap < 0 and given.get('names_cap') is not None:
            NAMES_CAP = given['names_cap']
        if args.members_cap < 0 and given.get('members_cap') is not None:
            MEMBERS_CAP = given['members_cap']
    kept = None
    if args.code_weights_from and not args.evaluate:
        given = json.load(open(args.code_weights_from))
        by_name = dict(zip(given['features'], given['weights']['code']))
        weights['code'] = [round(by_name.get(n, 0.0), 5) for n in names]
        kept = dict(file=os.path.basename(args.code_weights_from), version=given['version'])
        if args.fit_code_features:
            weights['code'], trained_on['code'] = fit_some(
                data, splits, names, 'code', weights['code'], args.fit_code_features, args.refine)
            kept['fitted'] = args.fit_code_features.split(',')
    if args.nl_weights_from and not args.evaluate:
        given = json.load(open(args.nl_weights_from))
        by_name = dict(zip(given['features'], given['weights']['nl']))
        weights['nl'] = [round(by_name.get(n, 0.0), 5) for n in names]
        kept = dict(kept or {}, nl_from=dict(file=os.path.basename(args.nl_weights_from),
                                             version=given['version']))
        if args.fit_nl_features:
            weights['nl'], trained_on['nl'] = fit_some(
                data, splits, names, 'nl', weights['nl'], args.fit_nl_features, args.refine)
            kept['nl_from']['fitted'] = args.fit_nl_features.split(',')
    for kind in ('code', 'nl') if not args.evaluate else ():
        if kind in weights:
            continue
        train = [q for n, qs in data.items() if splits[n]['split'] == 'train'
                 for q in qs if q['ranker_kind'] == kind]
        print(f'{kind}: {len(train)} training queries', file=sys.stderr)
        w = fit_softmax(train, dim, fixed, MAX_CANDIDATES, names.index('rrf'))
        if args.refine:
            per_set = [[q for q in qs if q['ranker_kind'] == kind] for n, qs in data.items()
                       if splits[n]['split'] == 'train']
            w = refine(w, [qs for qs in per_set if len(qs) >= 10], fixed)
        weights[kind] = [round(x, 5) for x in w]
        trained_on[kind] = len(train)
    i_bm25, i_emb, i_rrf = names.index('bm25_rr'), names.index('emb_rr'), names.index('rrf')
    report = []
    print('| set | split | kind | n | bm25 R@10 / MRR | embedding | rrf | learned |')
    print('|---|---|---|---|---|---|---|---|')
    for name, qs in data.items():
        for kind in ('completion', 'nl'):
            sub = [q for q in qs if q['kind'] == kind]
            if not sub:
                continue
            row = [metrics(sub, lambda c: c['x'][i_bm25]), metrics(sub, lambda c: c['x'][i_emb]),
                   metrics(sub, lambda c: c['x'][i_rrf]), metrics_learned(sub, weights)]
            print(f"| {name} | {splits[name]['split']} | {kind} | {len(sub)} | " +
                  ' | '.join(f'{r:.3f} / {m:.3f}' for r, m in row) + ' |')
            report.append(dict(set=name, split=splits[name]['split'], kind=kind, n=len(sub),
                               bm25=row[0], embedding=row[1], rrf=row[2], learned=row[3]))
    # Means over the sets with 10+ queries of a kind, per split.
    for split in ('train', 'dev'):
        for kind in ('completion', 'nl'):
            rows = [r for r in report if r['split'] == split and r['kind'] == kind and r['n'] >= 10]
            if not rows:
                continue
            mean = lambda leg, i: sum(r[leg][i] for r in rows) / len(rows)
            print(f'| mean of {len(rows)} sets | {split} | {kind} | | ' + ' | '.join(
                f'{mean(leg, 0):.3f} / {mean(leg, 1):.3f}'
                for leg in ('bm25', 'embedding', 'rrf', 'learned')) + ' |')
    if args.evaluate:
        return
    out = dict(
        version=args.version,
        features=names,
        weights=weights,
        trained_with=dict(script='scripts/eval/train_ranker.py',
                          sets=sorted(n for n in data if splits[n]['split'] == 'train'),
                          queries=trained_on, epochs=EPOCHS, l2=L2, loss='softmax',
                          refine=args.refine, cap=args.cap, objective=args.objective,
                          candidates=MAX_CANDIDATES, code_weights_from=kept),
    )
    if NAMES_CAP < 1 << 30:
        out['names_cap'] = NAMES_CAP
    if MEMBERS_CAP < 1 << 30:
        out['members_cap'] = MEMBERS_CAP
    with open(args.out, 'w') as f:
        json.dump(out, f, indent=1)
        f.write('\n')
    print(f'wrote {args.out}', file=sys.stderr)


def metrics_learned(queries, weights):
    key = lambda c: dot(weights[c['_kind']], c['x'])
    for q in queries:
        for c in q['candidates']:
            c['_kind'] = q['ranker_kind']
    return metrics(queries, key)


if __name__ == '__main__':
    main()
