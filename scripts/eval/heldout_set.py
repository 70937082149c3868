"""Builds a held-out retrieval set from any Python source tree, in the format of shared/eval.

Usage: python3 scripts/eval/heldout_set.py SRC_DIR OUT_DIR NAME [--max-nl N] [--max-completion N]
then:  tabby eval --queries OUT_DIR/queries.jsonl --corpus OUT_DIR

It follows the recipe of shared/eval/README.md ("How it was built") approximately, with
Python's own `ast` instead of tree-sitter, so that tuning done on click can be checked on other
packages (for example an sdist fetched with `pip download --no-deps --no-binary :all: PKG`):

* nl: functions, methods and classes with a docstring outside test files; the query is the
  first sentence of the docstring's first paragraph with RST/Markdown markup stripped (and the
  symbol's own leading name dropped); under 4 words, "Deprecated…", "See…" and "Alias for…"
  are dropped; identical sentences are one query with several relevant ranges; at most 15 % of
  the queries per file; 110 queries. Their docstrings are blanked in corpus-nodocs/ (line
  numbers kept, `...` where the docstring was the whole body).
* completion: calls and decorators in file A of a name defined exactly once in the corpus, in
  another file B (6+ characters, not `test…`, library code never calling into tests); the
  query is the 40 lines before the call line plus the call line up to the name, dropped when
  it already contains the name; at most 2 per callee, 6 per query file, half from tests; 93.
* relevant ranges: decorators down to the end of the body; classes over 150 lines use their
  head (down to the end of `__init__`, or to the line before the first method); definitions
  over 300 lines are never targets.

Not the official sets: the differences (ast instead of tree-sitter, no check that an nl
query's words still occur in the nodocs tree, no stdlib filter beyond "defined once in the
corpus") make its figures comparable between two builds of tabby, not with click's.
Python 3.8+, stdlib only; seeded, so a rebuild gives the same set.
"""
import ast, json, os, random, re, shutil, sys
from collections import defaultdict

args = sys.argv[1:]
# Optional: --max-nl N --max-completion N (defaults 110 and 93, shared/eval's sizes).
MAX_NL, MAX_CC = 110, 93
while len(args) > 3 and args[-2] in ('--max-nl', '--max-completion'):
    if args[-2] == '--max-nl':
        MAX_NL = int(args[-1])
    else:
        MAX_CC = int(args[-1])
    args = args[:-2]
if len(args) != 3:
    sys.exit(__doc__)
src, out, name = args
if not os.path.isdir(src):
    sys.exit(f"{src} is not a directory")
rng = random.Random(20240601)
full, nodocs = os.path.join(out, 'corpus-full'), os.path.join(out, 'corpus-nodocs')
for d in (full, nodocs):  # only what this script writes
    shutil.rmtree(d, ignore_errors=True)
files = {}
for root, dirs, fs in os.walk(src):
    dirs[:] = [d for d in dirs if not d.startswith('.')]
    for f in fs:
        if f.startswith('.'):
            continue
        p = os.path.join(root, f)
        rel = os.path.relpath(p, src)
        try:
            if os.path.getsize(p) > 1 << 20:
                continue
            text = open(p, encoding='utf-8').read()
        except Exception:
            continue
        files[rel] = text

def is_test(rel):
    b = os.path.basename(rel)
    return rel.startswith('tests/') or '/tests/' in rel or b.startswith('test_') or b == 'conftest.py'

trees = {}
for rel, text in files.items():
    if rel.endswith('.py'):
        try:
            trees[rel] = ast.parse(text)
        except SyntaxError:
            pass

def strip_markup(s):
    s = re.sub(r':[\w:]+:`~?([^`<]*?)(\s*<[^>]*>)?`', r'\1', s)
    s = s.replace('``', '').replace('`', '')
    s = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', s)
    return s

def first_sentence(doc):
    para = doc.strip().split('\n\n')[0]
    para = ' '.join(l.strip() for l in para.splitlines())
    para = strip_markup(para)
    m = re.search(r'(.+?[.!?])(\s|$)', para)
    return (m.group(1) if m else para).strip()

def def_range(node):
    start = min([d.lineno for d in node.decorator_list] + [node.lineno])
    end = node.end_lineno
    if isinstance(node, ast.ClassDef) and end - start + 1 > 150:
        methods = [b for b in node.body if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))]
        init = [m for m in methods if m.name == '__init__']
        if init:
            end = init[0].end_lineno
        elif methods:
            first = methods[0]
            end = min([d.lineno for d in first.decorator_list] + [first.lineno]) - 1
    return start, end

# definitions
defs = defaultdict(list)  # name -> [(rel, start, end)]
nl_cands = []
for rel, tree in trees.items():
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            s, e = def_range(node)
            defs[node.name].append((rel, s, e))
            doc = ast.get_docstring(node, clean=False)
            if doc and not is_test(rel) and node.end_lineno - s + 1 <= 300:
                sent = first_sentence(doc)
                if sent.startswith(node.name):
                    sent = sent[len(node.name):].strip()
                words = sent.split()
                if len(words) < 4 or re.match(r'(Deprecated|See|Alias for|\.\. )', sent):
                    continue
                dnode = node.body[0]
                nl_cands.append(dict(sent=sent, rel=rel, range=(s, e), doc=(dnode.lineno, dnode.end_lineno),
                                     only=len(node.body) == 1, symbol=node.name, col=dnode.col_offset))

# nl: merge identical sentences, at most 15% per file, sample 110
by_sent = defaultdict(list)
for c in nl_cands:
    by_sent[c['sent']].append(c)
groups = list(by_sent.values())
rng.shuffle(groups)
per_file = defaultdict(int)
nl = []
for g in groups:
    f = g[0]['rel']
    if per_file[f] >= 0.15 * MAX_NL:
        continue
    per_file[f] += 1
    nl.append(g)
    if len(nl) >= MAX_NL:
        break

# nodocs: blank the chosen docstrings
blank = defaultdict(list)
for g in nl:
    for c in g:
        blank[c['rel']].append(c)
nodocs_files = dict(files)
for rel, cs in blank.items():
    lines = files[rel].split('\n')
    for c in cs:
        a, b = c['doc']
        for i in range(a - 1, b):
            lines[i] = ''
        if c['only']:
            lines[a - 1] = ' ' * c['col'] + '...'
    nodocs_files[rel] = '\n'.join(lines)

# completion: call sites of names defined exactly once, in another file
unique = {n: v[0] for n, v in defs.items() if len(v) == 1 and len(n) >= 6 and not n.startswith('test')}
sites = []
for rel, tree in trees.items():
    lines = files[rel].split('\n')
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Call):
            targets.append(node.func)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            targets.extend(node.decorator_list)
        for func in targets:
            if isinstance(func, ast.Call):
                func = func.func
            if isinstance(func, ast.Name):
                nm, line, col = func.id, func.lineno, func.col_offset
            elif isinstance(func, ast.Attribute):
                nm, line, col = func.attr, func.end_lineno, func.end_col_offset - len(func.attr)
            else:
                continue
            if nm not in unique:
                continue
            brel, bs, be = unique[nm]
            if brel == rel or (is_test(brel) and not is_test(rel)):
                continue
            if be - bs + 1 > 300:
                continue
            raw = lines[line - 1].encode('utf-8')
            prefix_line = raw[:col].decode('utf-8', 'replace')
            q = '\n'.join(lines[max(0, line - 41):line - 1] + [prefix_line])
            if nm in q:
                continue
            sites.append(dict(rel=rel, line=line, col=col, name=nm, target=(brel, bs, be), query=q))
rng.shuffle(sites)
per_callee, per_qfile, tests_n, cc = defaultdict(int), defaultdict(int), 0, []
for s in sites:
    if per_callee[s['name']] >= 2 or per_qfile[s['rel']] >= 6:
        continue
    if is_test(s['rel']) and tests_n >= (MAX_CC + 1) // 2:
        continue
    per_callee[s['name']] += 1
    per_qfile[s['rel']] += 1
    tests_n += is_test(s['rel'])
    cc.append(s)
    if len(cc) >= MAX_CC:
        break

for d, fs in ((full, files), (nodocs, nodocs_files)):
    for rel, text in fs.items():
        p = os.path.join(d, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        open(p, 'w', encoding='utf-8').write(text)
with open(os.path.join(out, 'queries.jsonl'), 'w') as f:
    for i, g in enumerate(nl):
        f.write(json.dumps(dict(id=f'{name}-nl-{i:04d}', set=name, kind='nl', language='python', query=g[0]['sent'],
                                filepath=None, corpus='nodocs', symbol=g[0]['symbol'],
                                relevant=[dict(filepath=c['rel'], start_line=c['range'][0], end_line=c['range'][1]) for c in g])) + '\n')
    for i, s in enumerate(cc):
        t = s['target']
        f.write(json.dumps(dict(id=f'{name}-cc-{i:04d}', set=name, kind='completion', language='python', query=s['query'],
                                filepath=s['rel'], corpus='full', symbol=s['name'], call_line=s['line'],
                                relevant=[dict(filepath=t[0], start_line=t[1], end_line=t[2])])) + '\n')
print(name, 'nl', len(nl), 'completion', len(cc), 'files', len(files))
