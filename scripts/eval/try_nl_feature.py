#!/usr/bin/env python3
"""Tries one candidate feature for questions offline: adds it, times a weight, to the shipped
ranker's nl score and prints Recall@10 / MRR@10 per weight, as train_ranker.py counts them.
Session 40's four tries (README: "Training the ranker on eval-like sets, and four more question
features") and session 42's sentence encoder ("A sentence encoder fine-tuned on code, over a
question's top 20"); none ships.

Usage: try_nl_feature.py FEATURE RANKER_DIR SET_DIR... [--split dev] [--tabby BIN] [--weights W,...]
                         [--top N] [--embed-texts BIN] [--model DIR]
  FEATURE:
    file-vote       BM25 of the question over the doc sentences left in the set's corpus-nodocs
                    (found by `tabby eval generate` on it); the top 10 vote for their files
    local-model1    IBM Model 1 (question word given code word) fitted on those same pairs;
                    a candidate scores its code words' (comment lines left out) best
                    translation of each question word, averaged
    maxsim          each question word piece's best cosine among the candidate's word pieces in
                    the default embedding's table, averaged, relative to the query's best
    maxsim-near     the same with equal pieces left out
    name-extends    1 when a definition the candidate's text declares is named like an identifier
                    of the question, or extends it by at most two characters (IntVar → IntVarP)
    encoder         the cosine of the question and the candidate's text in a sentence encoder
                    (--model, default all-MiniLM-L6-v2, through the runtime's own encoder:
                    --embed-texts, the tabby-local example `embed_texts`), relative to the best
                    of the query's --top candidates by the shipped score; the others get -1, so
                    this reranks the top (session 42)
  RANKER_DIR: splits.tsv and NAME/features.jsonl (crossfit_ranker.py's WORK_DIR/ranker; add
    click with `tabby eval --features-out RANKER_DIR/click/features.jsonl` and a splits row).
  SET_DIR: directories holding NAME/queries.jsonl and NAME/corpus-nodocs, searched in order.
  --split: the sets of this split (default dev); --tabby: for file-vote and local-model1.
"""

import argparse
import collections
import json
import math
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import train_ranker as TR  # noqa: E402
from crossfit_ranker import read_splits  # noqa: E402
from train_expansion import search_words  # noqa: E402

COMMENT = re.compile(r'^\s*(#|//|/\*|\*|"""|\'\'\')')
IDENT = re.compile(r'\b([A-Za-z_][a-z0-9]*[A-Z_][A-Za-z0-9_]*|[a-z]+_[a-z0-9_]+)\b')
DECL = re.compile(r'\b(?:def|class|fn|func|function|struct|enum|trait|type|interface|const|let|var)'
                  r'\s+(?:\([^)]*\)\s*)?([A-Za-z_][A-Za-z0-9_]*)')
STOP_PIECES = set('the a an of to in is for and or this that with be by it as on from are if its '
                  'at which will given not can'.split())
_lines = {}


def lines_of(path):
    if path not in _lines:
        try:
            _lines[path] = open(path, encoding='utf-8').read().split('\n')
        except (OSError, UnicodeDecodeError):
            _lines[path] = []
    return _lines[path]


def candidate_text(c):
    path = json.loads(c['file'].split(':::', 1)[1])['path']
    return '\n'.join(lines_of(path)[c['start_line'] - 1:c['end_line']])


def code_words(text):
    return search_words('\n'.join(l for l in text.split('\n') if not COMMENT.match(l)))


class Bm25:
    def __init__(self, docs, k1=1.2, b=0.75):
        self.n, self.k1, self.b = len(docs), k1, b
        self.tf = [collections.Counter(d) for d in docs]
        self.len = [len(d) for d in docs]
        self.avg = sum(self.len) / max(1, self.n)
        self.df = collections.Counter(w for d in docs for w in set(d))
        self.inv = collections.defaultdict(list)
        for i, tf in enumerate(self.tf):
            for w in tf:
                self.inv[w].append(i)

    def search(self, query):
        scores = collections.defaultdict(float)
        for w in set(query):
            idf = math.log(1 + (self.n - self.df[w] + 0.5) / (self.df[w] + 0.5))
            for i in self.inv.get(w, ()):
                tf = self.tf[i][w]
                scores[i] += idf * tf * (self.k1 + 1) / (
                    tf + self.k1 * (1 - self.b + self.b * self.len[i] / self.avg))
        return sorted(scores.items(), key=lambda x: -x[1])


def model1(pairs, iterations=5):
    t = collections.defaultdict(lambda: 1.0)
    pairs = [(q, list(set(c)) + ['<null>']) for q, c in pairs if q and c]
    for _ in range(iterations):
        count, total = collections.defaultdict(float), collections.defaultdict(float)
        for q, c in pairs:
            for w in q:
                values = [t[(w, x)] for x in c]
                z = sum(values)
                for x, v in zip(c, values):
                    count[(w, x)] += v / z
                    total[x] += v / z
        t = collections.defaultdict(float, {k: v / total[k[1]] for k, v in count.items()})
    table = collections.defaultdict(dict)
    for (w, x), v in t.items():
        if v >= 0.01:
            table[w][x] = v
    return table


def local_pairs(tabby, set_dir):
    """(question words, file, code words) of the docs left in the set's corpus-nodocs."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, 'local')
        subprocess.run([tabby, 'eval', 'generate', '--src', os.path.join(set_dir, 'corpus-nodocs'),
                        '--out', out, '--name', 'local', '--max-nl', '5000', '--max-completion',
                        '0'], check=True, capture_output=True)
        pairs = []
        for line in open(os.path.join(out, 'queries.jsonl'), encoding='utf-8'):
            q = json.loads(line)
            if q['kind'] != 'nl':
                continue
            for r in q['relevant']:
                lines = lines_of(os.path.join(out, 'corpus-nodocs', r['filepath']))
                text = '\n'.join(lines[r['start_line'] - 1:r['end_line']])
                pairs.append((search_words(q['query']), r['filepath'], code_words(text)))
        return pairs


class Pieces:
    """The default embedding's table (`tabby download` writes it), one unit row per piece."""

    def __init__(self):
        import numpy as np
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer
        home = os.environ.get('TABBY_ROOT', os.path.expanduser('~/.tabby'))
        d = os.path.join(home, 'models', 'sentence-transformers', 'all-MiniLM-L6-v2-static')
        self.np = np
        self.tokenizer = Tokenizer.from_file(os.path.join(d, 'tokenizer.json'))
        rows = load_file(os.path.join(d, 'static-embedding.safetensors'))['embeddings']
        rows = rows.astype(np.float32)
        self.unit = rows / np.maximum(np.linalg.norm(rows, axis=1), 1e-9)[:, None]
        self.vocab = {v: k for k, v in self.tokenizer.get_vocab().items()}

    def ids(self, text):
        return self.tokenizer.encode(text, add_special_tokens=False).ids[:512]

    def question(self, text):
        out = []
        for i in dict.fromkeys(self.ids(text)):
            piece = self.vocab[i]
            if (piece.isalnum() or piece.startswith('##')) and piece not in STOP_PIECES:
                out.append(i)
        return out

    def score(self, question, text, near_only):
        np = self.np
        chunk = list(set(self.ids(text)))
        if not question or not chunk:
            return 0.0
        sims = self.unit[question] @ self.unit[chunk].T
        if near_only:
            sims = np.where(np.equal.outer(np.array(question), np.array(chunk)), -1.0, sims)
            return float(np.maximum(sims.max(1), 0).mean())
        return float(sims.max(1).mean())


def encoder_values(queries, texts, args):
    """The `encoder` feature: cosines in a sentence encoder over each query's top candidates."""
    import numpy as np
    tops = []
    inputs = {}
    for q in queries:
        top = sorted(q['candidates'], key=lambda c: -c['base'])[:args.top]
        tops.append(top)
        inputs.setdefault(texts[q['id']], len(inputs))
        for c in top:
            c['text'] = candidate_text(c)
            inputs.setdefault(c['text'], len(inputs))
    order = sorted(inputs, key=inputs.get)
    run = subprocess.run([args.embed_texts, args.model],
                         input=''.join(json.dumps(t) + '\n' for t in order),
                         stdout=subprocess.PIPE, text=True, check=True)
    vectors = np.array([json.loads(l) for l in run.stdout.splitlines()], dtype=np.float32)
    if len(vectors) != len(order):
        sys.exit(f'{args.embed_texts} gave {len(vectors)} vectors for {len(order)} texts')
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1), 1e-9)[:, None]
    for q, top in zip(queries, tops):
        question = vectors[inputs[texts[q['id']]]]
        for c in q['candidates']:
            c['f'] = -1.0
        for c in top:
            c['f'] = float(vectors[inputs[c.pop('text')]] @ question)
        best = max((c['f'] for c in top), default=0.0)
        for c in top:
            c['f'] -= best


def feature_values(feature, queries, set_dir, tabby, pieces, args):
    """Sets c['f'] on every candidate of the set's nl queries."""
    texts = {json.loads(l)['id']: json.loads(l)['query']
             for l in open(os.path.join(set_dir, 'queries.jsonl'), encoding='utf-8')}
    if feature == 'encoder':
        encoder_values(queries, texts, args)
        return
    if feature in ('file-vote', 'local-model1'):
        pairs = local_pairs(tabby, set_dir)
        bm25 = Bm25([p[0] for p in pairs])
        table = model1([(p[0], p[2]) for p in pairs]) if feature == 'local-model1' else None
    for q in queries:
        text = texts[q['id']]
        if feature == 'file-vote':
            hits = bm25.search(search_words(text))[:10]
            votes = collections.defaultdict(float)
            for i, score in hits:
                votes[pairs[i][1]] += score / hits[0][1]
            for c in q['candidates']:
                c['f'] = votes.get(c['filepath'], 0.0)
        elif feature == 'local-model1':
            words = search_words(text)
            for c in q['candidates']:
                code = set(code_words(candidate_text(c)))
                c['f'] = sum(max((table.get(w, {}).get(x, 0.0) for x in code), default=0.0)
                             for w in words) / max(1, len(words))
        elif feature in ('maxsim', 'maxsim-near'):
            question = pieces.question(text)
            for c in q['candidates']:
                c['f'] = pieces.score(question, candidate_text(c), feature == 'maxsim-near')
            best = max((c['f'] for c in q['candidates']), default=0.0)
            for c in q['candidates']:
                c['f'] -= best
        else:
            idents = [i for i in set(IDENT.findall(text)) if len(i) >= 4 and not i.isupper()]
            for c in q['candidates']:
                names = set(DECL.findall(candidate_text(c)))
                c['f'] = float(any(n.startswith(i) and len(n) - len(i) <= 2
                                   for n in names for i in idents))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('feature', choices=('file-vote', 'local-model1', 'maxsim', 'maxsim-near',
                                        'name-extends', 'encoder'))
    ap.add_argument('ranker_dir')
    ap.add_argument('set_dirs', nargs='+')
    ap.add_argument('--split', default='dev')
    ap.add_argument('--tabby', default='tabby')
    ap.add_argument('--weights', default='0,0.1,0.25,0.5,1,2,4,8')
    ap.add_argument('--top', type=int, default=20)
    ap.add_argument('--embed-texts', default=os.path.join(
        os.environ.get('CARGO_TARGET_DIR', os.path.join(ROOT, 'target')), 'release', 'examples',
        'embed_texts'))
    ap.add_argument('--model', default=os.path.join(
        os.environ.get('TABBY_ROOT', os.path.expanduser('~/.tabby')), 'models',
        'sentence-transformers', 'all-MiniLM-L6-v2'))
    args = ap.parse_args()
    shipped = json.load(open(os.path.join(ROOT, 'crates', 'tabby', 'assets', 'ranker.json')))
    w = shipped['weights']['nl']
    TR.NAMES_ONLY = TR.MEMBERS_ONLY = None
    pieces = Pieces() if args.feature.startswith('maxsim') else None
    data = {}
    for name, row in read_splits(os.path.join(args.ranker_dir, 'splits.tsv')).items():
        if row[1] != args.split:
            continue
        set_dir = next((os.path.join(d, name) for d in args.set_dirs
                        if os.path.exists(os.path.join(d, name, 'queries.jsonl'))), None)
        if set_dir is None:
            sys.exit(f'{name}: no NAME/queries.jsonl in any SET_DIR')
        queries = [q for q in map(json.loads, open(os.path.join(args.ranker_dir, name,
                                                                 'features.jsonl')))
                   if q['kind'] == 'nl']
        if len(queries) < 10:
            continue
        for q in queries:
            for c in q['candidates']:
                c['base'] = sum(a * b for a, b in zip(w, c['x']))
        feature_values(args.feature, queries, set_dir, args.tabby, pieces, args)
        data[name] = queries
    if not data:
        sys.exit(f'no {args.split} set in {args.ranker_dir} has 10 or more questions')
    for weight in (float(x) for x in args.weights.split(',')):
        rows = {n: TR.metrics(qs, key=lambda c: c['base'] + weight * c['f'])
                for n, qs in sorted(data.items())}
        r10 = sum(r[0] for r in rows.values()) / len(rows)
        mrr = sum(r[1] for r in rows.values()) / len(rows)
        print(f'weight {weight}: mean of {len(rows)} sets {r10:.3f} / {mrr:.3f}  ' +
              ' '.join(f'{n}={r[0]:.3f}' for n, r in rows.items()))


if __name__ == '__main__':
    main()
