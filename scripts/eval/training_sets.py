#!/usr/bin/env python3
"""Downloads pinned registry packages with the registries' own clients and builds a labelled
retrieval set from each, in shared/eval's format: the training data of the learned ranker
(scripts/eval/train_ranker.py) and the sets its defaults are reported on.

Usage: scripts/eval/training_sets.py OUT [--only NAME,...] [--split train|dev] [--max N] [--cache DIR]
                                          [--cargo-lock Cargo.lock] [--extra TSV]
  OUT/<name>/queries.jsonl + OUT/<name>/corpus-full/ (+ corpus-nodocs/ for nl queries)

Clients: `pip download --no-binary :all:` (PyPI sdists), `npm pack` (npm), `cargo fetch` on a
scratch manifest (crates.io, unpacked into cargo's registry cache), `apt-get download` +
`dpkg-deb -x` (Debian's Go sources). Generators: scripts/eval/heldout_set.py (Python: nl and
completion queries) and scripts/eval/completion_set.py (Rust, Go, JavaScript, TypeScript).

--cargo-lock adds, as `train` sets, every crates.io package a Cargo.lock pins (`cargo fetch`
puts them in cargo's registry cache), except the reserved ones, the families of reserved and dev
crates (`tokio-util`, `serde_json`, `hyper-util`, …) and crates with under 5 Rust files.

--extra adds the packages of a list (scripts/eval/training_packages.tsv: set name, registry,
package, version, language) as `train` sets; one whose source tree holds a directory named
after a reserved or dev package (a vendored copy) is skipped.

Each package is in one split: `train` sets are what the ranker is fitted on; `dev` sets are
never trained on and are where its defaults are checked. The packages reserved for evaluation
(the retrieval-learning issue's list) are refused by name, whatever the list below says.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

RESERVED = {
    'pypi': {'click', 'requests', 'jinja2', 'flask', 'httpx', 'urllib3', 'werkzeug', 'rich',
             'attrs', 'pydantic'},
    'crates': {'ignore', 'globset', 'grep', 'grep-searcher', 'grep-regex', 'grep-matcher',
               'grep-printer', 'grep-cli', 'regex', 'serde', 'clap', 'tokio'},
    'npm': {'express', 'axios', 'koa', 'lodash', 'commander', 'ws', 'chalk'},
    'debian': {'golang-github-gin-gonic-gin-dev', 'golang-github-spf13-cobra-dev',
               'golang-github-gorilla-mux-dev'},
}
RESERVED_WORDS = ('gin', 'cobra', 'gorilla-mux', 'gorilla/mux')
# Name families left out of --cargo-lock: reserved crates' relatives (tokio-util, serde_json,
# regex-automata, clap_builder, grep-*, …).
FAMILIES_OUT = {'tokio', 'serde', 'regex', 'clap', 'grep', 'globset', 'ignore'}

# (registry, package, version, language, split)
PACKAGES = [
    # Python (nl + completion)
    ('pypi', 'pyparsing', '3.2.0', 'python', 'train'),
    ('pypi', 'more-itertools', '10.5.0', 'python', 'train'),
    ('pypi', 'toolz', '1.0.0', 'python', 'train'),
    ('pypi', 'python-dateutil', '2.9.0.post0', 'python', 'train'),
    ('pypi', 'cachetools', '5.5.0', 'python', 'train'),
    ('pypi', 'boltons', '24.1.0', 'python', 'train'),
    ('pypi', 'marshmallow', '3.23.1', 'python', 'train'),
    ('pypi', 'mistune', '3.0.2', 'python', 'train'),
    ('pypi', 'parso', '0.8.4', 'python', 'train'),
    ('pypi', 'arrow', '1.3.0', 'python', 'train'),
    ('pypi', 'humanize', '4.11.0', 'python', 'train'),
    ('pypi', 'itsdangerous', '2.2.0', 'python', 'train'),
    ('pypi', 'markdown', '3.7', 'python', 'dev'),
    ('pypi', 'packaging', '24.2', 'python', 'dev'),
    ('pypi', 'tomlkit', '0.13.2', 'python', 'dev'),
    ('pypi', 'pyflakes', '3.2.0', 'python', 'dev'),
    # Rust
    ('crates', 'h2', '0.4.20', 'rust', 'train'),
    ('crates', 'tower', '0.5.3', 'rust', 'train'),
    ('crates', 'indexmap', '2.14.2', 'rust', 'train'),
    ('crates', 'chrono', '0.4.45', 'rust', 'train'),
    ('crates', 'hashbrown', '0.16.1', 'rust', 'train'),
    ('crates', 'hyper', '1.12.0', 'rust', 'dev'),
    ('crates', 'axum', '0.8.9', 'rust', 'dev'),
    # Go (Debian's source packages of Go libraries)
    ('debian', 'golang-github-sirupsen-logrus-dev', '', 'go', 'train'),
    ('debian', 'golang-github-stretchr-testify-dev', '', 'go', 'train'),
    ('debian', 'golang-github-google-go-cmp-dev', '', 'go', 'train'),
    ('debian', 'golang-github-burntsushi-toml-dev', '', 'go', 'dev'),
    ('debian', 'golang-github-spf13-pflag-dev', '', 'go', 'dev'),
    # JavaScript / TypeScript
    ('npm', 'preact', '10.25.0', 'javascript', 'train'),
    ('npm', 'async', '3.2.6', 'javascript', 'train'),
    ('npm', 'handlebars', '4.7.8', 'javascript', 'dev'),
    ('npm', 'rxjs', '7.8.1', 'typescript', 'train'),
    ('npm', 'immer', '10.1.1', 'typescript', 'train'),
    ('npm', 'mobx', '6.13.5', 'typescript', 'dev'),
    # More training data for the code adapter of the static embedding
    # (scripts/eval/train_code_adapter.py): docstring-rich Python and Go.
    ('pypi', 'networkx', '3.4.2', 'python', 'train'),
    ('pypi', 'docutils', '0.21.2', 'python', 'train'),
    ('pypi', 'tornado', '6.4.2', 'python', 'train'),
    ('pypi', 'openpyxl', '3.1.5', 'python', 'train'),
    ('pypi', 'nltk', '3.9.1', 'python', 'train'),
    ('pypi', 'astroid', '3.3.5', 'python', 'train'),
    ('pypi', 'sphinx', '8.1.3', 'python', 'train'),
    ('debian', 'golang-github-spf13-afero-dev', '', 'go', 'train'),
    ('debian', 'golang-github-gorilla-websocket-dev', '', 'go', 'train'),
    ('debian', 'golang-github-fatih-color-dev', '', 'go', 'train'),
    ('debian', 'golang-github-prometheus-client-golang-dev', '', 'go', 'train'),
]


# Directory names that mark a vendored copy of a reserved or dev package in an --extra tree (the
# list holds Python and Go packages): the PyPI names of both lists, attrs' import name `attr`,
# and the import names of the held-out Go modules. BurntSushi/toml's `toml` is not among them:
# the three list trees with a `toml` directory hold their own code there (viper's
# internal/encoding/toml, koanf's parsers/toml, participle's _examples/toml).
VENDORED_NAMES = (RESERVED['pypi'] | {'attr', 'pflag', 'cobra', 'gin', 'mux'}
                  | {p for r, p, _, _, s in PACKAGES if r == 'pypi' and s == 'dev'})


def read_extra(path):
    """(set name, registry, package, version, language) rows of an --extra list."""
    rows = []
    for line in open(path, encoding='utf-8'):
        if line.startswith('#') or not line.strip():
            continue
        name, registry, package, version, language = line.rstrip('\n').split('\t')
        rows.append((name, registry, package, version, language))
    return rows


def _words(name):
    return [w for w in re.split(r'[-_./]', name.lower()) if w]


def refuse_family(registry, package):
    """Exits when an --extra package's name holds a reserved or dev package's name as a run of
    its words (`click-plugins`, `pydantic-settings`, `markdown-it-py`, a Go module of `spf13/pflag`):
    the families of held-out packages stay out of the training data too."""
    held = set(RESERVED[registry]) | {p for r, p, _, _, s in PACKAGES if r == registry and s == 'dev'}
    if registry == 'debian':
        held = {set_name(p) for p in held} | set(RESERVED_WORDS)
    words = _words(set_name(package) if registry == 'debian' else package)
    for name in sorted(held):
        w = _words(name)
        if any(words[i:i + len(w)] == w for i in range(len(words) - len(w) + 1)):
            sys.exit(f'{registry} package {package} belongs to the family of {name}, which is '
                     'held out: not a training package')


def vendored_copy(src):
    """The first directory of `src` named after a reserved or dev package, or None."""
    for base, dirs, _ in sorted(os.walk(src)):
        for d in sorted(dirs):
            if d.lower() in VENDORED_NAMES or d == 'vendor':
                return os.path.join(base, d)
    return None


def set_name(package):
    return package.replace('golang-github-', '').replace('-dev', '').replace('/', '-')


def refuse_reserved(registry, package):
    if package.lower() in RESERVED[registry] or (
            registry == 'debian' and any(w in package for w in RESERVED_WORDS)):
        sys.exit(f'{registry} package {package} is reserved for evaluation: never downloaded')


def run(cmd, **kw):
    print('+', ' '.join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, **kw)


def unpack(archive, dest):
    with tarfile.open(archive) as t:
        t.extractall(dest, filter='data')


def fetch(registry, package, version, cache):
    """The package's unpacked source tree."""
    dest = os.path.join(cache, 'src', f'{registry}-{package}-{version}')
    if os.path.isdir(dest):
        return dest
    if registry == 'crates':  # cargo's own cache first (cargo fetch of this workspace fills it)
        home = os.environ.get('CARGO_HOME', os.path.expanduser('~/.cargo'))
        found = glob.glob(os.path.join(home, 'registry', 'src', '*', f'{package}-{version}'))
        if found:
            return found[0]
    work = tempfile.mkdtemp(dir=cache)
    if registry == 'pypi':
        run([sys.executable, '-m', 'pip', 'download', '-q', '--no-deps', '--no-binary', ':all:',
             f'{package}=={version}', '-d', work])
        archives = glob.glob(os.path.join(work, '*.tar.gz'))
        if not archives:
            sys.exit(f'no sdist for {package}=={version}')
        unpack(archives[0], os.path.join(work, 'x'))
        tops = os.listdir(os.path.join(work, 'x'))
        root = os.path.join(work, 'x', tops[0]) if len(tops) == 1 else os.path.join(work, 'x')
    elif registry == 'npm':
        run(['npm', 'pack', '--silent', f'{package}@{version}'], cwd=work,
            stdout=subprocess.DEVNULL)
        archives = glob.glob(os.path.join(work, '*.tgz'))
        unpack(archives[0], os.path.join(work, 'x'))
        root = os.path.join(work, 'x', 'package')
    elif registry == 'crates':
        os.makedirs(os.path.join(work, 'src'))
        open(os.path.join(work, 'src', 'lib.rs'), 'w').close()
        with open(os.path.join(work, 'Cargo.toml'), 'w') as f:
            f.write(f'[package]\nname = "fetch-one"\nversion = "0.0.0"\nedition = "2021"\n'
                    f'[dependencies]\n{package} = "={version}"\n')
        run(['cargo', 'fetch', '-q', '--manifest-path', os.path.join(work, 'Cargo.toml')])
        home = os.environ.get('CARGO_HOME', os.path.expanduser('~/.cargo'))
        found = glob.glob(os.path.join(home, 'registry', 'src', '*', f'{package}-{version}'))
        if not found:
            sys.exit(f'cargo fetch did not unpack {package}-{version}')
        root = found[0]
    elif registry == 'debian':
        run(['apt-get', 'download', '-q', package], cwd=work)
        debs = glob.glob(os.path.join(work, '*.deb'))
        run(['dpkg-deb', '-x', debs[0], os.path.join(work, 'x')])
        gocode = glob.glob(os.path.join(work, 'x', 'usr', 'share', 'gocode', 'src', '*', '*', '*'))
        if not gocode:
            sys.exit(f'{package} holds no Go sources under /usr/share/gocode')
        root = gocode[0]
    else:
        sys.exit(f'unknown registry {registry}')
    shutil.copytree(root, dest, symlinks=False, ignore_dangling_symlinks=True)
    shutil.rmtree(work, ignore_errors=True)
    return dest


def crates_of_lock(path, dev_names):
    """(name, version) of the crates.io packages a Cargo.lock pins, minus reserved families."""
    text = open(path).read()
    out = []
    for block in text.split('[[package]]')[1:]:
        fields = dict(re.findall(r'^(\w+) = "([^"]*)"', block, re.M))
        if 'registry+' not in fields.get('source', ''):
            continue
        name = fields['name']
        family = re.split(r'[-_]', name)[0]
        if family in FAMILIES_OUT or name in RESERVED['crates'] or family in dev_names:
            continue
        out.append((name, fields['version']))
    return sorted(set(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('out')
    ap.add_argument('--only', help='comma-separated set names')
    ap.add_argument('--split', choices=('train', 'dev'), help='only the sets of this split')
    ap.add_argument('--max', type=int,
                    help='queries of each kind per set (default: the generators\' sizes, about '
                         'shared/eval\'s; large values mine every pair, for training)')
    ap.add_argument('--cargo-lock', help='also every crate this Cargo.lock pins (train split)')
    ap.add_argument('--extra', help='also the packages of this list (train split), e.g. '
                    'scripts/eval/training_packages.tsv')
    ap.add_argument('--cache', default=os.path.expanduser('~/.cache/tabby-training-sets'))
    args = ap.parse_args()
    os.makedirs(args.cache, exist_ok=True)
    only = set(args.only.split(',')) if args.only else None
    splits = {}
    packages = list(PACKAGES)
    if args.cargo_lock:
        dev = {re.split(r'[-_]', p)[0] for r, p, _, _, s in PACKAGES if r == 'crates' and s == 'dev'}
        listed = {p for r, p, _, _, _ in PACKAGES if r == 'crates'}
        packages += [('crates', n, v, 'rust', 'train') for n, v in crates_of_lock(args.cargo_lock, dev)
                     if n not in listed]
    names = {}
    if args.extra:
        for name, registry, package, version, language in read_extra(args.extra):
            refuse_reserved(registry, package)
            refuse_family(registry, package)
            packages.append((registry, package, version, language, 'train'))
            names[(registry, package)] = name
    for registry, package, version, language, split in packages:
        refuse_reserved(registry, package)
        name = names.get((registry, package)) or set_name(package)
        if (only and name not in only) or (args.split and split != args.split):
            continue
        src = fetch(registry, package, version, args.cache)
        out = os.path.join(args.out, name)
        vendored = vendored_copy(src) if (registry, package) in names else None
        if vendored:
            print(f'{name}: skipped, {vendored} may be a reserved or dev package', file=sys.stderr)
            continue
        if language == 'rust' and len(glob.glob(os.path.join(src, '**', '*.rs'), recursive=True)) < 5:
            continue
        if language == 'python':
            sizes = ['--max-nl', str(args.max), '--max-completion', str(args.max)] if args.max else []
            run([sys.executable, os.path.join(HERE, 'heldout_set.py'), src, out, name] + sizes)
        else:
            sizes = ['--max', str(args.max or 150), '--max-nl', str(args.max or 110)]
            done = subprocess.run([sys.executable, os.path.join(HERE, 'completion_set.py'), src,
                                   out, name, '--language', language] + sizes)
            if done.returncode != 0:  # no uniquely named definitions, say
                continue
        splits[name] = dict(split=split, language=language, registry=registry,
                            package=package, version=version)
    with open(os.path.join(args.out, 'splits.tsv'), 'a' if only or args.split else 'w') as f:
        for name, s in splits.items():
            f.write(f"{name}\t{s['split']}\t{s['language']}\t{s['registry']}\t"
                    f"{s['package']}\t{s['version']}\n")


if __name__ == '__main__':
    main()
